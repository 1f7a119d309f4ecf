"""Start the real server (msprof_lsp.server.__main__) with the one parse helper of the fixes
counted: every ``hints.fixes.cst_tools.Source`` built (a libcst parse of a whole file for fixes)
appends the parsed file's line count to the file named by ``MSPROF_LSP_TEST_PARSE_LOG``.

Used by test_lsp_fixes_on_demand.py: typing must not parse for fixes; a code action does, once.
"""

from __future__ import annotations

import os
import sys

from msprof_lsp.hints.fixes import cst_tools
from msprof_lsp.server.__main__ import main


def _count_parses(log: str) -> None:
    real = cst_tools.Source.__init__

    def counted(self, text: str) -> None:  # noqa: ANN001
        real(self, text)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{text.count(chr(10)) + 1}\n")

    cst_tools.Source.__init__ = counted  # type: ignore[method-assign]


if __name__ == "__main__":
    _count_parses(os.environ["MSPROF_LSP_TEST_PARSE_LOG"])
    sys.exit(main([]))
