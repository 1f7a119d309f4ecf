"""Names the server and its clients share: commands and custom notifications.

The VS Code extension's manifest must list every palette command below (a test compares them).
"""

from __future__ import annotations

from pathlib import Path

SERVER_NAME = "msprof-lsp"
SETTINGS_SECTION = "msprof-lsp"
DIAGNOSTIC_SOURCE = "msprof-lsp"
FIX_ALL_KIND = "source.fixAll.msprof-lsp"

# workspace/executeCommand commands the server implements.
CMD_RELOAD = "msprof-lsp.reloadProfile"  # no arguments
CMD_SELECT_PROFILE = "msprof-lsp.selectProfile"  # [path: str, rank?: int]
CMD_SHOW_HOTSPOTS = "msprof-lsp.showHotspots"  # [] -> {"hotspots": [...]} (JSON output shape, absolute paths + uri)
CMD_SET_BASELINE = "msprof-lsp.setBaseline"  # [path: str | null]
CMD_LINE_HEAT = "msprof-lsp.lineHeat"  # [uri: str] -> [{"line": 0-based, "share", "perStepUs", "label"}]
CMD_SHOW_OPERATORS = "msprof-lsp.showOperators"  # code lens target: [uri, line 0-based] -> {"ops": [...]}
CMD_REPORT_MODEL = "msprof-lsp.reportModel"  # [] -> the report model (server/analysis/views/model.py) or null
# [] -> {"current": path | null}: the next new profile under the watched folders becomes the
# current one and the current one its baseline (a recording is starting)
CMD_ADOPT_NEW_PROFILE = "msprof-lsp.adoptNewProfile"

SERVER_COMMANDS = (
    CMD_RELOAD,
    CMD_SELECT_PROFILE,
    CMD_SHOW_HOTSPOTS,
    CMD_SET_BASELINE,
    CMD_LINE_HEAT,
    CMD_SHOW_OPERATORS,
    CMD_REPORT_MODEL,
    CMD_ADOPT_NEW_PROFILE,
)
PALETTE_COMMANDS = (CMD_RELOAD, CMD_SELECT_PROFILE, CMD_SHOW_HOTSPOTS, CMD_SET_BASELINE)
"""Commands a user runs from the VS Code palette (the client adds restart/showLogs itself)."""

# Server -> client notification with the profile state (feeds the VS Code status bar); payload:
# lsp/status_payload.py ProfileStatus.
NOTIFY_PROFILE_STATUS = "msprof-lsp/profileStatus"

# Server -> client notification after each analysis is in place (its diagnostics published or
# ready to pull): the open documents whose current version it analysed; payload:
# lsp/status_payload.py Analysed.
NOTIFY_ANALYSED = "msprof-lsp/analysed"

# Where rule pages live. Installed packages link to the project's published docs; a source
# checkout (editable install) can link to the local Markdown file instead.
PROJECT_URL = "https://github.com/msprof-lsp/msprof-lsp"
_DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"


def rule_doc_url(code: str | None, *, prefer_local: bool = False) -> str:
    """URL of a rule's page (``docs/rules/<CODE>.md``), or of the docs index for ``None``."""
    rel = f"rules/{code}.md" if code else "README.md"
    if prefer_local:
        local = _DOCS_DIR / rel
        if local.is_file():
            return local.as_uri()
    return f"{PROJECT_URL}/blob/main/docs/{rel}"
