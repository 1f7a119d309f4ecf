"""Timing and fresh-process measurement helpers the benchmark scripts share.

The scripts run as ``python benchmarks/<name>.py``, so this folder is on ``sys.path`` and they
import it as ``_common``.
"""

from __future__ import annotations

import io
import resource
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def best(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` runs of ``fn`` (seconds): the least disturbed by other load."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


# -- one candidate per fresh interpreter: its peak RSS is its own --------------------------------


def report_usage(seconds: float, cpu_before: float = 0.0) -> None:
    """Child side: one line with wall seconds, CPU seconds (user + sys, less ``cpu_before``: the
    ``time.process_time()`` taken when the measured work began) and peak RSS (KiB, as Linux
    reports ``ru_maxrss``)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{seconds:.6f} {use.ru_utime + use.ru_stime - cpu_before:.6f} {use.ru_maxrss}")


@dataclass(frozen=True, slots=True)
class Usage:
    seconds: float
    cpu_seconds: float
    peak_rss_mib: float


class ChildFailed(Exception):
    def __init__(self, stderr: str) -> None:
        super().__init__(stderr)
        self.stderr = stderr


def measure_child(argv: Sequence[str]) -> Usage:
    """Parent side: run ``python argv...`` (a script in its child mode, ending with
    ``report_usage``) and read its last line; ChildFailed with its stderr when it fails."""
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
    if proc.returncode:
        raise ChildFailed(proc.stderr)
    secs, cpu, rss_kib = proc.stdout.strip().splitlines()[-1].split()
    return Usage(float(secs), float(cpu), int(rss_kib) / 1024)


# -- msprof-analyze (the advisor) in a venv of its own ----------------------------------------


def install_advisor(venv: Path, version: str) -> tuple[Path | None, str]:
    """The advisor's console script in ``venv`` (created when missing), or None and why not."""
    exe = venv / "bin" / "msprof-analyze"
    if exe.exists():
        return exe, "reused"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode:
        return None, f"python -m venv failed: {made.stderr.strip().splitlines()[-1:]}"
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"msprof-analyze=={version}"],
                         capture_output=True, text=True)
    if pip.returncode or not exe.exists():
        tail = [ln for ln in pip.stderr.strip().splitlines() if "WARNING" not in ln][-1:]
        return None, f"pip install msprof-analyze=={version} failed: {tail}"
    return exe, "installed"


# -- an earlier revision of the product, measured in the same run -----------------------------

REPO = Path(__file__).resolve().parents[1]


def archive(rev: str, dest: Path) -> Path:
    """``git archive`` of the product's packages at ``rev`` as ``dest/tree/msprof_lsp``; the tree
    to hand to :func:`use_tree` (in a child process)."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev, "mapping", "hints", "server"],
                          capture_output=True, check=True).stdout
    tree = dest / "tree" / "msprof_lsp"
    tree.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tree)
    return tree.parent


def use_tree(tree: str) -> None:
    """Import msprof_lsp from ``tree`` (an :func:`archive`) instead of the editable install."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
    sys.path_importer_cache.clear()
    sys.path.insert(0, tree)


def median_usage(runs: Sequence[Usage]) -> Usage:
    """The median of each figure over repeated runs (the shared machine's load moves single runs)."""
    return Usage(statistics.median(u.seconds for u in runs), statistics.median(u.cpu_seconds for u in runs),
                 statistics.median(u.peak_rss_mib for u in runs))
