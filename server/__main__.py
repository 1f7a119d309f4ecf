"""``msprof-lsp`` entry point: the language server on stdio, or ``--check`` headless."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from .cli import DEBUG_ENV, UsageError, debug_enabled, parse, version
    from .escape import visible

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
