"""Spec-exact synthetic profiles for tests and benchmarks (a test-support package, not installed).

Import as ``tests.synth`` from the repository root (tests/conftest.py puts the root on
``sys.path``). One run description (``run``) is laid out in time (``clock``) and written in every
producer's format; ``truth`` gives the figures a correct reader must find. See
docs/synthetic-profiles.md.
"""

from __future__ import annotations

from .clock import Clock, StepTimeline, lay_out
from .run import (
    CannSpec,
    CommInfo,
    CommLaunch,
    Frame,
    Gap,
    GcPause,
    KernelSpec,
    Launch,
    ModuleFrame,
    OpSpec,
    ProfilerConfig,
    RepeatedSteps,
    Run,
    StepSpec,
    UserCall,
    us,
)
from .truth import StepTruth, Truth, truth
from .variant import TextVariant
from .write_db import write_torch_npu_db
from .write_kineto import write_kineto
from .write_msprof import write_msprof_cli
from .write_text import write_torch_npu_text

__all__ = [
    "CannSpec", "Clock", "CommInfo", "CommLaunch", "Frame", "Gap", "GcPause", "KernelSpec", "Launch",
    "ModuleFrame", "OpSpec", "ProfilerConfig", "RepeatedSteps", "Run", "StepSpec", "StepTimeline", "StepTruth",
    "TextVariant", "Truth", "UserCall", "lay_out", "truth", "us", "write_kineto", "write_msprof_cli",
    "write_torch_npu_db", "write_torch_npu_text",
]
