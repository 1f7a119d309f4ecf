"""The one settings model, read from (later wins): defaults -> ``[tool.msprof-lsp]`` in the nearest
pyproject.toml -> LSP initializationOptions / workspace/configuration -> command-line flags.

A pyproject.toml belongs to the repository, which may be hostile: settings that name a place to
write (``cacheDir``, ``user_only`` below) are ignored there with a warning naming the file.

``SETTINGS`` below is the single source of truth: the docs page, the VS Code manifest test and the
validation all read it. Keys are camelCase in the editor and kebab-case in TOML. Unknown keys and
invalid values produce warnings (and the default), never an exception.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from msprof_lsp.hints.config import DEFAULT_MIN_SHARE, THRESHOLD_BY_KEY, THRESHOLD_DEFAULTS, THRESHOLDS, RuleConfig, Threshold
from msprof_lsp.hints.finding import Severity

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass(frozen=True, slots=True)
class SettingSpec:
    key: str  # camelCase
    type: str  # JSON-schema type: string, array, object, number, integer, boolean, ["integer","null"]
    default: Any
    description: str
    scope: str = "resource"  # VS Code configuration scope
    user_only: bool = False  # a write location: never taken from a workspace (pyproject.toml)
    minimum: float | None = None  # numbers: the manifest's bounds (thresholds)
    maximum: float | None = None


SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec("profile", "string", "", "Profile directory or file to load. Empty: discover under the workspace folder."),
    SettingSpec("select", "array", [], "Rule codes or prefixes to enable (empty = all), e.g. [\"NPU1\"]."),
    SettingSpec("ignore", "array", [], "Rule codes or prefixes to disable, e.g. [\"NPU9\"]."),
    SettingSpec("severity", "object", {}, "Severity per rule code or prefix: error, warning, info or hint."),
    SettingSpec("minShare", "number", DEFAULT_MIN_SHARE, "Findings below this share of step time (0..1) are not reported."),
    SettingSpec("rank", ["integer", "null"], None, "Rank of a multi-rank profile to analyse. Empty: the slowest rank."),
    SettingSpec("pathMappings", "array", [], "Where profile paths differ from local ones: [\"/remote/prefix=/local/prefix\", ...] or [{\"remote\": ..., \"local\": ...}]."),
    SettingSpec("codeLens", "boolean", True, "Show code lenses with device time over hot functions and lines."),
    SettingSpec("inlayHints", "boolean", False, "Show the share of step time at the end of hot lines."),
    SettingSpec("baseline", "string", "", "An earlier profile of the same code to compare against (before/after)."),
    SettingSpec("cacheDir", "string", "", "Where the linked-profile cache lives (an absolute path; a user setting, never read from a workspace). Empty: the user cache directory.", scope="machine", user_only=True),
    SettingSpec("thirdPartyRoots", "array", [], "Extra path fragments whose frames are skipped like site-packages."),
    SettingSpec("compileBackend", "string", "auto", "torch.compile backend the NPU101 fix writes: auto (npu for Ascend profiles, inductor otherwise), npu or inductor."),
) + tuple(
    SettingSpec(t.key, "integer" if t.integer else "number", t.default, f"{t.description} (unit: {t.unit})",
                minimum=t.minimum, maximum=t.maximum)
    for t in THRESHOLDS
)

SETTING_KEYS = frozenset(s.key for s in SETTINGS)
_BY_KEY = {s.key: s for s in SETTINGS}


def kebab(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", key).lower()


_BY_KEBAB = {kebab(s.key): s.key for s in SETTINGS}


@dataclass(frozen=True, slots=True)
class Settings:
    profile: str = ""
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    severity: dict[str, Severity] = field(default_factory=dict)
    min_share: float = DEFAULT_MIN_SHARE
    rank: int | None = None
    path_mappings: tuple[tuple[str, str], ...] = ()
    code_lens: bool = True
    inlay_hints: bool = False
    baseline: str = ""
    cache_dir: str = ""
    third_party_roots: tuple[str, ...] = ()
    compile_backend: str = "auto"
    thresholds: dict[str, float | int] = field(default_factory=lambda: dict(THRESHOLD_DEFAULTS))
    base_dir: str = ""  # relative paths in settings resolve against this (workspace / pyproject dir)

    def rule_config(self) -> RuleConfig:
        return RuleConfig(
            select=self.select,
            ignore=self.ignore,
            severity=dict(self.severity),
            min_share=self.min_share,
            thresholds=dict(self.thresholds),
            compile_backend=self.compile_backend,
            third_party_roots=self.third_party_roots,
        )

    def resolve_path(self, value: str) -> Path:
        p = Path(value).expanduser()
        if not p.is_absolute() and self.base_dir:
            p = Path(self.base_dir) / p
        return p


_FIELD_OF = {
    "profile": "profile",
    "select": "select",
    "ignore": "ignore",
    "severity": "severity",
    "minShare": "min_share",
    "rank": "rank",
    "pathMappings": "path_mappings",
    "codeLens": "code_lens",
    "inlayHints": "inlay_hints",
    "baseline": "baseline",
    "cacheDir": "cache_dir",
    "thirdPartyRoots": "third_party_roots",
    "compileBackend": "compile_backend",
}


def _as_str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in re.split(r"[,\s]+", value) if v]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of strings")
    return tuple(v.strip() for v in value if v.strip())


def _path_text(value: str, what: str) -> str:
    """A path as text: no NUL (no file system takes one, and Path operations raise on it)."""
    if "\0" in value:
        raise ValueError(f"{what} {value!r} contains a NUL character")
    return value


def parse_path_mapping(value: Any) -> tuple[str, str]:
    if isinstance(value, str):
        remote, sep, local = value.partition("=")
        if not sep or not remote or not local:
            raise ValueError(f"path mapping {value!r} is not REMOTE=LOCAL")
        return _path_text(remote, "path mapping"), _path_text(local, "path mapping")
    if isinstance(value, dict):
        remote = value.get("remote", value.get("from"))
        local = value.get("local", value.get("to"))
        if isinstance(remote, str) and isinstance(local, str) and remote and local:
            return _path_text(remote, "path mapping"), _path_text(local, "path mapping")
    raise ValueError(f"path mapping {value!r} is not REMOTE=LOCAL or {{remote, local}}")


_PATH_KEYS = frozenset({"profile", "baseline", "cacheDir"})


def _threshold(t: Threshold, value: int | float) -> int | float:
    if t.integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError("expected a whole number")
        value = int(value)
    if value < t.minimum or (t.maximum is not None and value > t.maximum):
        upper = f" and {t.maximum:g}" if t.maximum is not None else ""
        raise ValueError(f"expected a number {'from' if upper else 'of at least'} {t.minimum:g}{upper}")
    return value


def _convert(key: str, value: Any) -> Any:
    """Validate one camelCase setting; raise ValueError with a short reason."""
    spec = _BY_KEY[key]
    if key in ("select", "ignore", "thirdPartyRoots"):
        return _as_str_list(value)
    if key == "severity":
        if not isinstance(value, dict):
            raise ValueError("expected an object mapping rule codes to severities")
        return {str(code): Severity.parse(str(sev)) for code, sev in value.items()}
    if key == "pathMappings":
        if isinstance(value, dict):  # {"remote": "local", ...}
            return tuple(parse_path_mapping(f"{k}={v}") for k, v in value.items())
        if not isinstance(value, (list, tuple)):
            raise ValueError("expected a list of REMOTE=LOCAL entries")
        return tuple(parse_path_mapping(v) for v in value)
    if key == "rank":
        if value is None or value == "":
            return None
        if isinstance(value, bool) or not isinstance(value, (int, str)) or int(value) < 0:
            raise ValueError("expected a non-negative integer")
        return int(value)
    if key == "compileBackend":
        if value not in ("auto", "npu", "inductor"):
            raise ValueError("expected auto, npu or inductor")
        return value
    if spec.type == "boolean":
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value
    if spec.type == "string":
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ValueError("expected a string")
        if key in _PATH_KEYS:
            _path_text(value, "path")
        if key == "cacheDir" and value and not Path(value).expanduser().is_absolute():
            raise ValueError("expected an absolute path (or ~/...)")
        return value
    if spec.type in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("expected a number")
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer beyond float range
            finite = False
        if not finite:
            raise ValueError("expected a finite number")
        if key in THRESHOLD_BY_KEY:
            return _threshold(THRESHOLD_BY_KEY[key], value)
        if key == "minShare" and not 0 <= value <= 1:
            raise ValueError("expected a share between 0 and 1")
        if value < 0:
            raise ValueError("expected a non-negative number")
        return value
    return value  # pragma: no cover - every spec type is handled above


def apply(
    settings: Settings, values: dict[str, Any] | None, origin: str, *, workspace: bool = False
) -> tuple[Settings, list[str]]:
    """Overlay camelCase (or kebab-case) ``values`` on ``settings``; return warnings for bad keys.

    ``workspace``: the values come from the workspace (a repository's pyproject.toml), which may be
    hostile, so user-only settings (write locations) are ignored with a warning.
    """
    warnings: list[str] = []
    if not values:
        return settings, warnings
    if not isinstance(values, dict):
        return settings, [f"{origin}: settings must be an object, got {type(values).__name__}"]
    changes: dict[str, Any] = {}
    thresholds = dict(settings.thresholds)
    for raw_key, value in values.items():
        key = _BY_KEBAB.get(raw_key, raw_key)
        if key not in _BY_KEY:
            warnings.append(f"{origin}: unknown setting {raw_key!r} (ignored)")
            continue
        if workspace and _BY_KEY[key].user_only:
            warnings.append(
                f"{origin}: {raw_key!r} is a user setting (editor user settings or --{kebab(key)}); "
                "a workspace cannot set it (ignored)"
            )
            continue
        try:
            converted = _convert(key, value)
        except (ValueError, TypeError) as exc:
            warnings.append(f"{origin}: setting {raw_key!r}: {exc}; keeping {_current(settings, key)!r}")
            continue
        if key in THRESHOLD_DEFAULTS:
            thresholds[key] = converted
        else:
            changes[_FIELD_OF[key]] = converted
    return replace(settings, thresholds=thresholds, **changes), warnings


def _current(settings: Settings, key: str) -> Any:
    if key in THRESHOLD_DEFAULTS:
        return settings.thresholds.get(key)
    value = getattr(settings, _FIELD_OF[key])
    return list(value) if isinstance(value, tuple) else value


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` (a file or a directory)."""
    here = start if start.is_dir() else start.parent
    for d in (here, *here.parents):
        candidate = d / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def from_pyproject(settings: Settings, pyproject: Path) -> tuple[Settings, list[str]]:
    """Overlay ``[tool.msprof-lsp]`` of a pyproject.toml; relative paths resolve against its folder."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return settings, [f"{pyproject}: cannot read [tool.msprof-lsp]: {exc}"]
    tool = data.get("tool")
    if tool is None:
        return settings, []
    if not isinstance(tool, dict):
        return settings, [f"{pyproject}: [tool] is not a table (got {type(tool).__name__}); using the defaults"]
    table = tool.get("msprof-lsp")
    if table is None:
        return settings, []
    settings = replace(settings, base_dir=str(pyproject.parent))
    return apply(settings, table, f"{pyproject} [tool.msprof-lsp]", workspace=True)
