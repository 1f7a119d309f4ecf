"""Fix offers turned into edits only when code actions are asked for.

Publishing diagnostics never parses for fixes: a diagnostic carries which finding it shows
(payloads.DiagnosticData), and the first ``codeAction`` for a file expands that file's offers on
the snapshot's analysed text, one parse per file per snapshot, each finding once (both kept on
the snapshot: a new analysis starts afresh). The edits are made for the analysed text;
convert.fix_payload maps them onto the buffer as it is now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msprof_lsp.hints.finding import Fix
from msprof_lsp.hints.fixes.offers import Sources, expand_offers, with_ready

if TYPE_CHECKING:
    from .state.context import RequestContext


def fixes_of(ctx: RequestContext, path: str, index: int) -> list[Fix]:
    """The fixes of finding ``index`` of ``path`` in the current snapshot."""
    snap = ctx.snapshot

    def compute() -> list[Fix]:
        findings = snap.findings.get(path, [])
        if not 0 <= index < len(findings):
            return []
        f = findings[index]
        sources = snap.derived(("fix-sources",), lambda: Sources(snap.texts.get))
        return with_ready(f.fixes, expand_offers(f.offers, sources).fixes)

    return snap.derived(("fixes", path, index), compute)
