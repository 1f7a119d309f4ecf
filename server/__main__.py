"""``msprof-lsp`` entry point: the subcommands (``commands.py``), the language server on stdio by default.

No ``from __future__`` import here and nothing but ``sys``/``os`` (loaded with the interpreter)
before :func:`_drop_cwd_from_sys_path` has run: each import would look in the cwd first when
started as ``python -m msprof_lsp.server``.
"""

import os
import sys


def _drop_cwd_from_sys_path() -> None:
    """Remove the entry ``python -m`` put first on sys.path for the cwd (often a repository with
    its own ``numpy.py`` or ``json.py``): nothing is imported from there, here or in the pool's
    workers, which copy our sys.path. Not for the console script, whose first entry is its own
    folder (and Python already leaves the cwd out under ``-I``/``-P``)."""
    if not sys.path or sys.flags.isolated or getattr(sys.flags, "safe_path", False):
        return
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    if sys.path[0] == "" or (cwd is not None and os.path.abspath(sys.path[0]) == cwd):
        del sys.path[0]


if __name__ == "__main__":
    _drop_cwd_from_sys_path()


def main(argv: list[str] | None = None) -> int:
    from .commands import main as run

    return run(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
