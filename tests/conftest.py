"""Shared test fixtures.

Real profiler files live in ``../shared/fixtures`` beside the checkout (CI has it, read-only);
tests that need them skip with a clear reason on a fresh clone without it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"

# The test-support package tests/synth (spec-exact profile writers) is imported as ``tests.synth``
# whichever way pytest is started; appended so it never shadows installed packages.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))


def client_python_flags() -> list[str]:
    """The interpreter flags the VS Code client starts every Python with (PYTHON_FLAGS in its
    constants.ts), so tests start the server exactly as the client does and cannot drift."""
    source = (REPO / "vscode-client" / "src" / "constants.ts").read_text(encoding="utf-8")
    m = re.search(r"export const PYTHON_FLAGS: readonly string\[\] = (\[[^\]]*\]);", source)
    if m is None:
        raise AssertionError("PYTHON_FLAGS not found in vscode-client/src/constants.ts")
    return json.loads(m.group(1))


def server_command(*args: str) -> list[str]:
    """``<this python> <client flags> -m msprof_lsp.server [args]``: the client's command line."""
    return [sys.executable, *client_python_flags(), "-m", "msprof_lsp.server", *args]


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"real profiler fixtures not found at {FIXTURES} (../shared is absent in this checkout)")
    return FIXTURES


def shared_fixture(relative: str) -> Path:
    """Path of one real fixture file; skips the test when ../shared is absent."""
    path = FIXTURES / relative
    if not path.exists():
        pytest.skip(f"real profiler fixture {relative} not found under {FIXTURES} (../shared is absent)")
    return path
