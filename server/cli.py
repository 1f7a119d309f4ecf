"""Command-line parsing for ``msprof-lsp`` (the contract in design.md).

Bad arguments exit 2 with one line on stderr, like every other failure of the run itself.
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
            "Profile-guided optimization hints for PyTorch on Ascend NPUs. Without --check, serves "
            "the Language Server Protocol on stdio (what editors start)."
        ),
        epilog="Exit status: 0 nothing at or above --fail-on, 1 findings at or above it, 2 the run failed.",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--check", action="store_true", help="analyse headless, print findings, exit with a status")
    # vscode-languageclient (and other editors' client libraries) append --stdio for a stdio server.
    p.add_argument("--stdio", action="store_true", help="serve LSP on stdio (the default without --check)")
    p.add_argument("paths", nargs="*", metavar="PATH", help="source folders/files to check; profiles are discovered under them (default: the current directory)")
    p.add_argument("--profile", metavar="DIR_OR_FILE", help="profile to load (default: discover under PATH)")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
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
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--print-profiler-snippet", action="store_true",
                   help="print a profiling block for a training loop (off unless MSPROF_LSP_PROFILE is set) and exit")
    kind = p.add_mutually_exclusive_group()
    for flavour, what in (("npu", "torch_npu.profiler, CPU+NPU (the default)"), ("cuda", "torch.profiler, CPU+CUDA"),
                          ("cpu", "torch.profiler, CPU only")):
        kind.add_argument(f"--{flavour}", dest="snippet_flavour", action="store_const", const=flavour,
                          help=f"with --print-profiler-snippet: {what}")
    return p


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, CheckArgs]:
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not ns.check:
        given = [
            flag
            for flag, present in (
                ("PATH", bool(ns.paths)),
                ("--profile", ns.profile is not None),
                ("--output", ns.output is not None),
                ("--baseline", ns.baseline is not None),
                ("--rank", ns.rank is not None),
                ("--ranks", ns.ranks is not None),
                ("--scheduler", ns.scheduler is not None),
                ("--cache-dir", ns.cache_dir is not None),
            )
            if present
        ]
        if given and not ns.version:
            raise UsageError(f"{given[0]} needs --check (without --check msprof-lsp serves LSP on stdio)")
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
    try:
        path_map = [parse_path_mapping(v) for v in ns.path_map]
    except ValueError as exc:
        raise UsageError(f"--path-map: {exc}") from None
    args = CheckArgs(
        paths=list(ns.paths),
        profile=ns.profile,
        format=ns.format,
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
    )
    return ns, args
