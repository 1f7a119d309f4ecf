"""Start the real server (msprof_lsp.server.__main__) with the test rules of lsp_rules.py registered.

Used as the server command of the end-to-end plumbing tests (they select only the TST rules).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lsp_rules  # noqa: E402,F401 - registers TST101, TST102, TST900

from msprof_lsp.server.__main__ import main  # noqa: E402



def _inject_faults() -> None:
    """MSPROF_LSP_TEST_FAULT=hover: the hover table builder raises (tests the handler guard)."""
    if os.environ.get("MSPROF_LSP_TEST_FAULT") == "hover":
        from msprof_lsp.server.lsp import hover

        def broken(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            raise RuntimeError("injected fault")

        hover._rows = broken


if __name__ == "__main__":
    _inject_faults()
    sys.exit(main([]))
