"""How much of the machine the rest of it used while a recording ran: the CPU loop test
(tests/server/lsp/test_lsp_the_loop.py) and the A B B A benchmarks (benchmarks/_abba.py) read a
recording as a truth only where its workers had the cores they need (docs/savings.md "The CPU
loop")."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat), None off Linux."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_gauged(cmd: Sequence[str], cwd: Path, env: Mapping[str, str],
               timeout: float) -> tuple[subprocess.CompletedProcess[str], float | None]:
    """Run ``cmd``; with it the cores the rest of the machine kept busy meanwhile (None: unknown).
    The run's own CPU (its joined workers roll into RUSAGE_CHILDREN) is taken out of the machine's
    busy time: what remains is other load, per second of the run."""
    busy0, own0, wall0 = busy_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    out = subprocess.run(list(cmd), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout)
    busy1, own1, wall = busy_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - wall0
    if busy0 is None or busy1 is None:
        return out, None
    own = (own1.ru_utime + own1.ru_stime) - (own0.ru_utime + own0.ru_stime)
    return out, max(0.0, (busy1 - busy0) - own) / wall
