"""What the Ascend text readers (torch_npu's ASCEND_PROFILER_OUTPUT, msprof's PROF_*) do alike
while assembling one Profile from many files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pandas as pd

from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.profile.linking import resolve_kernel_links
from msprof_lsp.mapping.profile.model import Profile
from msprof_lsp.mapping.profile.readers.npu_trace import kernel_steps

T = TypeVar("T")


def optional(path: Path, issues: list[Issue], fn: Callable[[Path], tuple[T, list[Issue]]]) -> T | None:
    """One optional file read by ``fn(path) -> (value, issues)``: its issues are kept, and a
    ProfileError becomes an Issue (None is returned) so the load goes on with the other files."""
    try:
        value, more = fn(path)
    except ProfileError as exc:
        issues.append(Issue(exc.path, exc.message, exc.line))
        return None
    except Exception as exc:
        # A bug stays a bug (exit 2, one line), but it names this file even when the reader had
        # opened another one last (the thread's record of the file being read would name that).
        raise safe_io.mark(exc, path)
    issues.extend(more)
    return value


def read_into(profile: Profile, attr: str, path: Path, fn: Callable[[Path], tuple[object, list[Issue]]],
              issues: list[Issue]) -> None:
    """An optional file's value stored as ``profile.<attr>``, the file recorded in meta.files,
    when it reads (see ``optional``)."""
    value = optional(path, issues, fn)
    if value is not None:
        setattr(profile, attr, value)
        profile.meta.files.append(str(path))


def attach_kernels(profile: Profile, kernels: pd.DataFrame) -> None:
    """Kernels without a step id take the step around their launching op (else their own
    start); then their host-op links are resolved and they become the profile's kernels."""
    no_step = kernels["step"].to_numpy() < 0
    if no_step.any() and profile.steps:
        kernels.loc[no_step, "step"] = kernel_steps(kernels[no_step], profile.host_ops, profile.steps)
    resolve_kernel_links(kernels, profile.host_ops)
    profile.kernels = kernels


__all__ = ["attach_kernels", "optional", "read_into"]
