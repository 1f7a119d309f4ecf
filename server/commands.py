"""The subcommands of ``msprof-lsp``: ``check``, ``server``, ``rule``, ``mcp``; and a start without one.

A subcommand is one function registered with ``@subcommand``: it gets the arguments after its
name and returns the exit status (a ``UsageError`` it raises is the exit-2 line); ``mcp`` below is
the pattern for another front end (its module imported only when asked for).

A first argument that is neither a flag nor a command is refused with the commands' names, so a
command added later never changes what an earlier command line meant.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from .cli import DEBUG_ENV, CheckArgs, UsageError, _Parser, debug_enabled, parse, version
from .escape import visible


@dataclass(frozen=True, slots=True)
class Subcommand:
    name: str
    summary: str  # one line in --help
    run: Callable[[list[str]], int]  # the arguments after the name -> the exit status


SUBCOMMANDS: dict[str, Subcommand] = {}


def subcommand(name: str, summary: str) -> Callable[[Callable[[list[str]], int]], Callable[[list[str]], int]]:
    def register(run: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
        SUBCOMMANDS[name] = Subcommand(name, summary, run)
        return run

    return register


def main(argv: list[str]) -> int:
    """``msprof-lsp ARGV``: a subcommand, or the flags of a bare start (``--check`` included)."""
    try:
        if argv and not argv[0].startswith("-"):
            command = SUBCOMMANDS.get(argv[0])
            if command is None:
                raise UsageError(_unknown_command(argv[0]))
            return command.run(argv[1:])
        return _flags(argv)
    except UsageError as exc:
        print(f"msprof-lsp: error: {visible(exc)} (see msprof-lsp --help)", file=sys.stderr)
        return 2


def _unknown_command(word: str) -> str:
    near = difflib.get_close_matches(word, list(SUBCOMMANDS), n=1)
    hint = f"; did you mean {near[0]}?" if near else f"; to check a path: msprof-lsp check {word}"
    return f"unknown command {word!r} (commands: {', '.join(SUBCOMMANDS)}){hint}"


def _flags(argv: list[str]) -> int:
    ns, args = parse(argv)
    if ns.version:
        print(f"msprof-lsp {version()}")
        return 0
    if ns.print_profiler_snippet:
        from msprof_lsp.hints.fixes.profiling import Flavour, snippet

        print(snippet(Flavour(ns.snippet_flavour or "npu")), end="")
        return 0
    if ns.check:
        return _run_check(args)
    return _serve()


@subcommand("check", "analyse headless, print findings, fix (--fix, --diff); exit with a status")
def _check(argv: list[str]) -> int:
    return _flags(["--check", *argv])


@subcommand("server", "serve the Language Server Protocol on stdio (what editors start)")
def _server(argv: list[str]) -> int:
    p = _Parser(prog="msprof-lsp server", description="Serve the Language Server Protocol on stdio.")
    p.add_argument("--stdio", action="store_true", help="serve on stdio (the only transport; editors pass it)")
    p.parse_args(argv)
    return _serve()


@subcommand("rule", "explain a rule: what it detects, its saving's model, its fixes (no CODE: list them)")
def _rule(argv: list[str]) -> int:
    p = _Parser(prog="msprof-lsp rule", description="Explain a rule, or list them all.")
    p.add_argument("code", nargs="?", metavar="CODE", help="a rule code, e.g. NPU104")
    ns = p.parse_args(argv)
    from .rule_text import describe, listing

    print(listing() if ns.code is None else describe(ns.code), end="")
    return 0


@subcommand("mcp", "serve the Model Context Protocol on stdio (coding agents; docs/agents.md)")
def _mcp(argv: list[str]) -> int:
    from .cli import serve_mcp

    return serve_mcp(argv)


LSP_ON_A_TERMINAL = ("msprof-lsp: this is a language server speaking LSP on stdio (editors start it); "
                     "to check a workspace run `msprof-lsp check [PATH]`; Ctrl-C quits")


def _serve() -> int:
    from msprof_lsp.mapping.children import install

    install()  # every child process from here on starts isolated, however we were started
    if sys.stdin.isatty():  # a person typed it: say what is waiting for input
        print(LSP_ON_A_TERMINAL, file=sys.stderr)
    from .lsp.app import serve

    return serve()


def _run_check(args: CheckArgs) -> int:
    from msprof_lsp.mapping.children import install

    install()
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

