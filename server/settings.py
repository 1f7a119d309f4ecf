"""The one settings model, read from (later wins): defaults -> ``[tool.msprof-lsp]`` in the nearest
pyproject.toml -> LSP initializationOptions / workspace/configuration -> command-line flags.

A pyproject.toml belongs to the repository, which may be hostile: settings that name a place to
write (``cacheDir``, ``user_only`` below) are ignored there with a warning naming the file, and
the places it may name to read (``profile``, ``baseline``, the local side of ``pathMappings``) must
resolve, symlinks followed, inside the workspace roots, else they are ignored the same way. The
file itself is read through ``safe_io.read_toml`` (size and nesting limits). What the user gives
(command-line flags, editor settings) is not confined.

The annotated ``Settings`` fields (and the rule ``Thresholds`` they compose) are the single source
of truth: ``SETTINGS`` reads them, and the validation below, the docs table and the VS Code manifest
(``python -m msprof_lsp.server.settings_schema``) all derive from it. Keys are camelCase in the
editor and kebab-case in TOML. Unknown keys and invalid values produce warnings (and the previous
value), never an exception.
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta

from msprof_lsp.hints.config import DEFAULT_MIN_SHARE, RuleConfig, SettingSpec, Thresholds, setting_specs
from msprof_lsp.hints.finding import Severity
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile import safe_io

# Values quoted in warnings are cut short: a setting may hold a megabyte or nest hundreds deep.
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlevel = 3


def _short(value: Any) -> str:
    return _SHORT.repr(value)


_PATH_MAPPING_SCHEMA = {
    "items": {
        "anyOf": [
            {"type": "string", "pattern": "^[^=]+=.+$"},
            {
                "type": "object",
                "properties": {"remote": {"type": "string"}, "local": {"type": "string"}},
                "required": ["remote", "local"],
            },
        ]
    }
}

CompileBackend = Literal["auto", "npu", "inductor"]


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting, annotated: ``setting_specs(Settings)`` turns the fields into keys (camelCase,
    kebab-case in TOML), JSON types, ranges, defaults and descriptions for the conversion below,
    the docs table and the VS Code manifest (``python -m msprof_lsp.server.settings_schema``)."""

    profile: Annotated[str, Meta(description="Profile directory or file to load. Empty: discover under the workspace folder.",
                                 extra={"path": True})] = ""
    select: Annotated[tuple[str, ...], Meta(description="Rule codes or prefixes to enable (empty = all), e.g. [\"NPU1\"].")] = ()
    ignore: Annotated[tuple[str, ...], Meta(description="Rule codes or prefixes to disable, e.g. [\"NPU9\"].")] = ()
    severity: Annotated[dict[str, Severity], Meta(description="Severity per rule code or prefix: error, warning, info or hint.")] = field(default_factory=dict)
    min_share: Annotated[float, Meta(ge=0, le=1, description="Findings below this share of step time (0..1) are not reported.")] = DEFAULT_MIN_SHARE
    rank: Annotated[int | None, Meta(ge=0, description="Rank of a multi-rank profile to analyse. Empty: the slowest rank.")] = None
    path_mappings: Annotated[tuple[tuple[str, str], ...], Meta(
        description="Where profile paths differ from local ones: [\"/remote/prefix=/local/prefix\", ...] or [{\"remote\": ..., \"local\": ...}]. A local prefix outside the workspace folders is not followed.",
        extra_json_schema=_PATH_MAPPING_SCHEMA)] = ()
    code_lens: Annotated[bool, Meta(description="Show code lenses with device time over hot functions and lines.")] = True
    inlay_hints: Annotated[bool, Meta(description="Show the share of step time at the end of hot lines.")] = False
    baseline: Annotated[str, Meta(description="An earlier profile of the same code to compare against (before/after).",
                                  extra={"path": True})] = ""
    cache_dir: Annotated[str, Meta(
        description="Where the linked-profile cache lives (an absolute path; a user setting, never read from a workspace). Empty: the user cache directory.",
        extra={"path": True, "absolute": True, "user_only": True, "scope": "machine"})] = ""
    third_party_roots: Annotated[tuple[str, ...], Meta(description="Extra path fragments whose frames are skipped like site-packages.")] = ()
    compile_backend: Annotated[CompileBackend, Meta(
        description="torch.compile backend the NPU101 fix writes: auto (npu for Ascend profiles, inductor otherwise), npu or inductor.")] = "auto"
    thresholds: Thresholds = Thresholds()  # each field is a flat setting: smallKernelUs / small-kernel-us
    base_dir: str = ""  # not a setting: relative paths in settings resolve against this (workspace / pyproject dir)

    def rule_config(self) -> RuleConfig:
        return RuleConfig(
            select=self.select,
            ignore=self.ignore,
            severity=dict(self.severity),
            min_share=self.min_share,
            thresholds=self.thresholds,
            compile_backend=self.compile_backend,
            third_party_roots=self.third_party_roots,
        )

    def resolve_path(self, value: str) -> Path:
        p = Path(value).expanduser()
        if not p.is_absolute() and self.base_dir:
            p = Path(self.base_dir) / p
        return p


SETTINGS: tuple[SettingSpec, ...] = setting_specs(Settings)
SETTING_KEYS = frozenset(s.key for s in SETTINGS)
_BY_KEY = {s.key: s for s in SETTINGS} | {s.toml_key: s for s in SETTINGS}


def _as_str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in re.split(r"[,\s]+", value) if v]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of strings")
    return tuple(v.strip() for v in value if v.strip())


def _path_text(value: str, what: str) -> str:
    """A path as text: no NUL (no file system takes one, and Path operations raise on it)."""
    if "\0" in value:
        raise ValueError(f"{what} {_short(value)} contains a NUL character")
    return value


def parse_path_mapping(value: Any) -> tuple[str, str]:
    if isinstance(value, str):
        remote, sep, local = value.partition("=")
        if not sep or not remote or not local:
            raise ValueError(f"path mapping {_short(value)} is not REMOTE=LOCAL")
        return _path_text(remote, "path mapping"), _path_text(local, "path mapping")
    if isinstance(value, dict):
        far, near = value.get("remote", value.get("from")), value.get("local", value.get("to"))
        if isinstance(far, str) and isinstance(near, str) and far and near:
            return _path_text(far, "path mapping"), _path_text(near, "path mapping")
    raise ValueError(f"path mapping {_short(value)} is not REMOTE=LOCAL or {{remote, local}}")


def _number(spec: SettingSpec, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("expected a number")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond float range
        finite = False
    if not finite:
        raise ValueError("expected a finite number")
    if spec.integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError("expected a whole number")
        value = int(value)
    low, high = spec.minimum, spec.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            raise ValueError(f"expected a number between {low:g} and {high:g}")
        raise ValueError(f"expected a number of at least {low:g}" if low is not None else f"expected at most {high:g}")
    return value


def _convert(spec: SettingSpec, value: Any) -> Any:
    """Validate one setting against its field's type and range; raise ValueError with a short reason."""
    base = spec.base
    if spec.optional and (value is None or value == ""):
        return None
    if spec.choices:
        if value not in spec.choices:
            raise ValueError(f"expected {', '.join(spec.choices[:-1])} or {spec.choices[-1]}")
        return value
    if base == tuple[str, ...]:
        return _as_str_list(value)
    if base == tuple[tuple[str, str], ...]:
        if isinstance(value, dict):  # {"remote": "local", ...}
            if not all(isinstance(v, str) for v in value.values()):
                raise ValueError("expected {\"remote\": \"local\", ...} with string values")
            return tuple(parse_path_mapping(f"{k}={v}") for k, v in value.items())
        if not isinstance(value, (list, tuple)):
            raise ValueError("expected a list of REMOTE=LOCAL entries")
        return tuple(parse_path_mapping(v) for v in value)
    if base == dict[str, Severity]:
        if not isinstance(value, dict):
            raise ValueError("expected an object mapping rule codes to severities")
        out = {}
        for code, sev in value.items():
            try:
                out[str(code)] = Severity.parse(sev)
            except (ValueError, AttributeError):  # not a severity name, or not text at all
                raise ValueError(f"severity {_short(sev)} for {_short(code)}: expected error, warning, info or hint") from None
        return out
    if base is bool:
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value
    if base is str:
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ValueError("expected a string")
        if spec.path:
            _path_text(value, "path")
        if spec.absolute and value and not Path(value).expanduser().is_absolute():
            raise ValueError("expected an absolute path (or ~/...)")
        return value
    if spec.optional and spec.integer and isinstance(value, str):  # rank "3" from a text field
        value = int(value)
    return _number(spec, value)


def apply(
    settings: Settings, values: dict[str, Any] | None, origin: str, *, workspace: bool = False,
    roots: Sequence[Path] = (),
) -> tuple[Settings, list[str]]:
    """Overlay camelCase (or kebab-case) ``values`` on ``settings``; return warnings for bad keys.

    ``workspace``: the values come from the workspace (a repository's pyproject.toml), which may be
    hostile, so user-only settings (write locations) are ignored with a warning, and the paths it
    names to read must resolve inside ``roots`` (see ``confine``).
    """
    warnings: list[str] = []
    if not values:
        return settings, warnings
    if not isinstance(values, dict):
        return settings, [f"{origin}: settings must be an object, got {type(values).__name__}"]
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}  # group field (thresholds) -> its changed fields
    for raw_key, value in values.items():
        spec = _BY_KEY.get(raw_key) if isinstance(raw_key, str) else None
        if spec is None:
            warnings.append(f"{origin}: unknown setting {_short(raw_key)} (ignored)")
            continue
        if workspace and spec.user_only:
            warnings.append(
                f"{origin}: {raw_key!r} is a user setting (editor user settings or --{spec.toml_key}); "
                "a workspace cannot set it (ignored)"
            )
            continue
        try:
            converted = _convert(spec, value)
            if workspace:
                converted = confine(spec, converted, settings.base_dir, roots)
        except (ValueError, TypeError) as exc:
            warnings.append(f"{origin}: setting {_short(raw_key)}: {exc}; keeping {_short(_current(settings, spec))}")
            continue
        if spec.group is None:
            top[spec.name] = converted
        else:
            nested.setdefault(spec.group, {})[spec.name] = converted
    for group, fields_ in nested.items():
        top[group] = replace(getattr(settings, group), **fields_)
    return replace(settings, **top), warnings


def _inside(value: str, base_dir: str, roots: Sequence[Path]) -> str:
    """``value`` (relative to ``base_dir``) resolved, symlinks followed; ValueError when that is
    not inside one of ``roots`` (themselves resolved)."""
    try:
        p = Path(value).expanduser()
        if not p.is_absolute():
            if not base_dir:
                raise ValueError(f"{_short(value)} is relative and there is no folder to resolve it against")
            p = Path(base_dir) / p
        real = p.resolve()
        homes = list(dict.fromkeys(Path(r).resolve() for r in roots))  # the checked path often is the pyproject's folder
    except (OSError, RuntimeError) as exc:  # a symlink loop, an unknown ~user, an unreadable folder
        raise ValueError(f"{_short(value)} cannot be resolved ({exc})") from None
    if not any(real == h or h in real.parents for h in homes):
        where = ", ".join(str(h) for h in homes) or "no workspace root"
        raise ValueError(f"{_short(value)} resolves to {real}, outside the workspace ({where}); a repository "
                         "may only name files inside it (the command line and the editor's settings may name any)")
    return str(real)


def confine(spec: SettingSpec, value: Any, base_dir: str, roots: Sequence[Path]) -> Any:
    """A workspace's value for a setting that names a place to read, made absolute and checked to
    lie inside ``roots``: ``profile = "/"`` would have ``--check`` walk the whole file system and
    ``baseline = "/other/project/prof"`` read another project's profile. The local side of each
    path mapping is checked the same way (the workspace also refuses to follow it outside).
    ValueError (the caller's warning) when it does not."""
    if spec.name == "path_mappings":
        return tuple((remote, _inside(local, base_dir, roots)) for remote, local in value)
    if spec.path and isinstance(value, str) and value:
        return _inside(value, base_dir, roots)
    return value


def _current(settings: Settings, spec: SettingSpec) -> Any:
    owner = getattr(settings, spec.group) if spec.group else settings
    value = getattr(owner, spec.name)
    return list(value) if isinstance(value, tuple) else value


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` (a file or a directory)."""
    here = start if start.is_dir() else start.parent
    for d in (here, *here.parents):
        candidate = d / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def from_pyproject(
    settings: Settings, pyproject: Path, roots: Sequence[Path] | None = None
) -> tuple[Settings, list[str]]:
    """Overlay ``[tool.msprof-lsp]`` of a pyproject.toml; relative paths resolve against its folder.

    The file is the repository's: it is read within the config limits (``safe_io.read_toml``), and
    the paths it names to read must lie inside ``roots`` (default: the folder holding it). Any
    problem is a warning naming the file; the run goes on with the defaults.
    """
    try:
        data = safe_io.read_toml(pyproject)
    except ProfileError as exc:
        return settings, [f"{pyproject}: cannot read [tool.msprof-lsp]: {exc.message}; using the defaults"]
    tool = data.get("tool")
    if tool is None:
        return settings, []
    if not isinstance(tool, dict):
        return settings, [f"{pyproject}: [tool] is not a table (got {type(tool).__name__}); using the defaults"]
    table = tool.get("msprof-lsp")
    if table is None:
        return settings, []
    settings = replace(settings, base_dir=str(pyproject.parent))
    homes = list(roots) if roots is not None else [pyproject.parent]
    return apply(settings, table, f"{pyproject} [tool.msprof-lsp]", workspace=True, roots=homes)
