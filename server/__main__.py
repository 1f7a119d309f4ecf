"""``msprof-lsp`` entry point: the language server on stdio, or ``--check`` headless.

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
    from .cli import DEBUG_ENV, UsageError, debug_enabled, parse, version
    from .escape import visible

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mcp"]:
        from .cli import serve_mcp

        return serve_mcp(argv[1:])
    try:
        ns, args = parse(argv)
    except UsageError as exc:
        print(f"msprof-lsp: error: {visible(exc)} (see msprof-lsp --help)", file=sys.stderr)
        return 2
    if ns.version:
        print(f"msprof-lsp {version()}")
        return 0
    if ns.print_profiler_snippet:
        from msprof_lsp.hints.fixes.profiling import Flavour, snippet

        print(snippet(Flavour(ns.snippet_flavour or "npu")), end="")
        return 0
    from msprof_lsp.mapping.children import install

    install()  # every child process from here on starts isolated, however we were started
    if ns.check:
        from .check.command import run_check

        try:
            return run_check(args)
        except KeyboardInterrupt:
            print("msprof-lsp: interrupted", file=sys.stderr)
            return 2
        except Exception as exc:  # noqa: BLE001 - the contract: one line, no traceback
            if debug_enabled():
                raise
            from msprof_lsp.mapping.profile.safe_io import describe_unexpected

            print(f"msprof-lsp: {visible(describe_unexpected(exc))} (set {DEBUG_ENV}=1 for a traceback, and please report it)",
                  file=sys.stderr)
            return 2
    from .lsp.app import serve

    return serve()


if __name__ == "__main__":
    sys.exit(main())
