"""Shared test fixtures.

Real profiler files live in ``../shared/fixtures`` beside the checkout (CI has it, read-only);
tests that need them skip with a clear reason on a fresh clone without it.
"""

from __future__ import annotations

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
