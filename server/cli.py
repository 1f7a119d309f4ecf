"""Command-line parsing for ``msprof-lsp`` (the contract in design.md): the flags of ``check``
(also spelt ``--check``) and of a bare start. The subcommands are in ``commands.py``.

Bad arguments exit 2 with one line on stderr, like every other failure of the run itself, and are
found before any analysis: the formats, ``--output``'s folder, the rule codes of ``--select`` and
``--ignore`` (a misspelt code would select nothing and turn CI green).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .analysis.settings import parse_path_mapping

FORMATS = ("text", "json", "sarif", "github", "html", "concise")
FAIL_ON = ("error", "warning", "info", "hint", "never")


DEBUG_ENV = "MSPROF_LSP_DEBUG"


def debug_enabled() -> bool:
    """``MSPROF_LSP_DEBUG`` set: internal errors show their traceback (CLI and server)."""
    return bool(os.environ.get(DEBUG_ENV))


class UsageError(Exception):
    """Bad command-line arguments (exit 2)."""


@dataclass(slots=True)
class CheckArgs:
    paths: list[str] = field(default_factory=list)
    profile: str | None = None
    format: str = "text"
    output: str | None = None
    baseline: str | None = None
    select: list[str] | None = None
    ignore: list[str] | None = None
    fail_on: str = "warning"
    fail_on_regression: float | None = None
    rank: int | None = None
    ranks: str | None = None
    scheduler: str | None = None
    path_map: list[tuple[str, str]] = field(default_factory=list)
    no_cache: bool = False
    cache_dir: str | None = None
    color: str = "auto"
    quiet: bool = False
    fix: bool = False  # write the safe fixes (ruff's --fix)
    unsafe_fixes: bool = False  # with --fix / --diff: the review fixes too
    diff: bool = False  # print what --fix would write as a unified diff; write nothing


def version() -> str:
    from importlib import metadata  # here: the module costs ~50 ms to import and most runs never ask

    try:
        return metadata.version("msprof-lsp")
    except metadata.PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _codes(text: str) -> list[str]:
    return [c.strip() for c in text.replace(" ", ",").split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="msprof-lsp",
        description=(
            "Profile-guided optimization hints for PyTorch on Ascend NPUs. Without a command or "
            "--check, serves the Language Server Protocol on stdio (what editors start)."
        ),
        epilog=f"commands:\n{commands_help()}\n\n"
               "Exit status: 0 nothing at or above --fail-on, 1 findings at or above it, 2 the run failed.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    p.add_argument("--check", action="store_true", help="analyse headless, print findings, exit with a status")
    # vscode-languageclient (and other editors' client libraries) append --stdio for a stdio server.
    p.add_argument("--stdio", action="store_true", help="serve LSP on stdio (the default without --check)")
    p.add_argument("paths", nargs="*", metavar="PATH", help="source folders/files to check; profiles are discovered under them (default: the current directory)")
    p.add_argument("--profile", metavar="DIR_OR_FILE", help="profile to load (default: discover under PATH)")
    p.add_argument("--format", choices=FORMATS, help="output format (default: text)")
    p.add_argument("--output", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--baseline", metavar="DIR_OR_FILE", help="an earlier profile of the same code to compare against")
    p.add_argument("--select", metavar="CODES", type=_codes, help="comma-separated rule codes or prefixes to enable")
    p.add_argument("--ignore", metavar="CODES", type=_codes, help="comma-separated rule codes or prefixes to disable")
    p.add_argument("--fail-on", choices=FAIL_ON, default="warning", help="lowest severity that makes the exit status 1 (default: warning)")
    p.add_argument("--fail-on-regression", metavar="PCT", type=float, help="with --baseline: exit 1 when step time regressed by more than PCT percent")
    p.add_argument("--rank", metavar="N", type=int, help="rank of a multi-rank profile (default: the slowest)")
    p.add_argument("--ranks", choices=("analysed", "all"),
                   help="all: run the rules on every rank of a multi-rank job and group their findings (default: analysed, the slowest rank or --rank)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="with --ranks all: run the per-rank analysis on this Dask scheduler's workers (default: a local process pool)")
    p.add_argument("--path-map", metavar="REMOTE=LOCAL", action="append", default=[], help="map profile paths to local paths (repeatable)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the profile cache")
    p.add_argument("--cache-dir", metavar="DIR", help="where the profile cache lives (default: the user cache directory)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="colour in text output (default: auto = only on a terminal)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="findings only: no progress, job or fix summary lines; nothing at all on a run without findings")
    p.add_argument("--fix", action="store_true", help="apply the safe fixes to the files (inside PATH only), then report what remains")
    p.add_argument("--unsafe-fixes", action="store_true", help="with --fix or --diff: the review fixes too")
    p.add_argument("--diff", action="store_true", help="print the fixes --fix would apply as a unified diff and write nothing")
    p.add_argument("--print-profiler-snippet", action="store_true",
                   help="print a profiling block for a training loop (off unless MSPROF_LSP_PROFILE is set) and exit")
    kind = p.add_mutually_exclusive_group()
    for flavour, what in (("npu", "torch_npu.profiler, CPU+NPU (the default)"), ("cuda", "torch.profiler, CPU+CUDA"),
                          ("cpu", "torch.profiler, CPU only")):
        kind.add_argument(f"--{flavour}", dest="snippet_flavour", action="store_const", const=flavour,
                          help=f"with --print-profiler-snippet: {what}")
    return p


MCP_USAGE = ("usage: msprof-lsp mcp\n\nServes the Model Context Protocol on stdio for coding agents "
             "(tools: analyse, explain_line, propose_fix, compare, profiler_snippet; docs/agents.md).\n")


def serve_mcp(argv: list[str]) -> int:
    """``msprof-lsp mcp``: the MCP server on stdio (server/mcp; the optional extra ``msprof-lsp[mcp]``)."""
    if argv in (["-h"], ["--help"]):
        print(MCP_USAGE, end="")
        return 0
    if argv:
        print(f"msprof-lsp: error: mcp takes no arguments, got {argv[0]!r} (see msprof-lsp mcp --help)", file=sys.stderr)
        return 2
    try:
        from .mcp.app import serve
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "mcp":
            raise
        print("msprof-lsp: error: the MCP server needs the mcp package: pip install 'msprof-lsp[mcp]'", file=sys.stderr)
        return 2
    from msprof_lsp.mapping.children import install

    install()  # every child process starts isolated, as under --check and the language server
    try:
        return serve()
    except KeyboardInterrupt:  # the client stopped us
        return 0


def commands_help() -> str:
    """One line per subcommand, for the top-level --help."""
    from .commands import SUBCOMMANDS  # the registry imports this module

    return "\n".join(f"  {c.name:<8} {c.summary}" for c in SUBCOMMANDS.values())


def _needs_check(ns: argparse.Namespace) -> None:
    given = [
        flag
        for flag, present in (
            ("PATH", bool(ns.paths)),
            ("--profile", ns.profile is not None),
            ("--format", ns.format is not None),
            ("--output", ns.output is not None),
            ("--baseline", ns.baseline is not None),
            ("--rank", ns.rank is not None),
            ("--ranks", ns.ranks is not None),
            ("--scheduler", ns.scheduler is not None),
            ("--cache-dir", ns.cache_dir is not None),
            ("--fix", ns.fix),
            ("--diff", ns.diff),
            ("--unsafe-fixes", ns.unsafe_fixes),
        )
        if present
    ]
    if given and not ns.version:
        raise UsageError(f"{given[0]} needs the check command (msprof-lsp check ..., or --check); "
                         "without it msprof-lsp serves LSP on stdio")


def _check_fix_flags(ns: argparse.Namespace) -> None:
    if ns.unsafe_fixes and not (ns.fix or ns.diff):
        raise UsageError("--unsafe-fixes needs --fix or --diff")
    if ns.diff and ns.fix:
        raise UsageError("--diff writes nothing and --fix writes the files: give one of them")
    if ns.diff and (ns.format is not None or ns.output is not None):
        raise UsageError("--diff prints a diff on stdout: it does not go with --format or --output")


def check_codes(codes: list[str] | tuple[str, ...] | None, origin: str) -> None:
    """UsageError naming the first code or prefix in ``codes`` that selects no rule, with the
    nearest known codes (``hints.registry.nearest_codes``)."""
    from msprof_lsp.hints.registry import nearest_codes  # the rules load only for a check

    for code in codes or ():
        near = nearest_codes(code)
        if near is not None:
            hint = f"; did you mean {' or '.join(near)}?" if near else "; msprof-lsp rule lists the rules"
            raise UsageError(f"unknown rule code {code!r} in {origin}{hint}")


def check_output(path: str) -> None:
    """``--output`` must name a file that can be written, in a folder that exists: said before the
    analysis, not after it."""
    target = Path(path).expanduser()
    folder = target.parent
    if target.is_dir():
        raise UsageError(f"--output {path}: is a folder; name a file")
    if not folder.is_dir():
        raise UsageError(f"--output {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"--output {path}: cannot be written (permission denied)")


def _validate(ns: argparse.Namespace) -> None:
    """Every option checked before anything is analysed (exit 2, one line)."""
    if not ns.check:
        _needs_check(ns)
    _check_fix_flags(ns)
    if ns.snippet_flavour is not None and not ns.print_profiler_snippet:
        raise UsageError(f"--{ns.snippet_flavour} needs --print-profiler-snippet")
    if ns.print_profiler_snippet and ns.check:
        raise UsageError("--print-profiler-snippet does not go with --check")
    if ns.rank is not None and ns.rank < 0:
        raise UsageError(f"--rank must be a non-negative integer, got {ns.rank}")
    if ns.fail_on_regression is not None:
        if ns.baseline is None:
            raise UsageError("--fail-on-regression needs --baseline")
        if ns.fail_on_regression < 0:
            raise UsageError("--fail-on-regression must be a non-negative percentage")
    if ns.check and not ns.version:
        check_codes(ns.select, "--select")
        check_codes(ns.ignore, "--ignore")
        if ns.output is not None:
            check_output(ns.output)


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, CheckArgs]:
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    _validate(ns)
    try:
        path_map = [parse_path_mapping(v) for v in ns.path_map]
    except ValueError as exc:
        raise UsageError(f"--path-map: {exc}") from None
    args = CheckArgs(
        paths=list(ns.paths),
        profile=ns.profile,
        format=ns.format or "text",
        output=ns.output,
        baseline=ns.baseline,
        select=ns.select,
        ignore=ns.ignore,
        fail_on=ns.fail_on,
        fail_on_regression=ns.fail_on_regression,
        rank=ns.rank,
        ranks=ns.ranks,
        scheduler=ns.scheduler,
        path_map=path_map,
        no_cache=ns.no_cache,
        cache_dir=str(Path(ns.cache_dir).expanduser().absolute()) if ns.cache_dir else None,
        color=ns.color,
        quiet=ns.quiet,
        fix=ns.fix,
        unsafe_fixes=ns.unsafe_fixes,
        diff=ns.diff,
    )
    return ns, args
