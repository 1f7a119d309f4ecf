"""The one settings model and its one resolver (``resolve``), read from (later wins): defaults ->
``[tool.msprof-lsp]`` in the nearest pyproject.toml at or above the checked path (``--check``) or
the workspace folder (the editor, never above its workspace root) -> LSP initializationOptions /
workspace/configuration -> command-line flags. What a change of each field re-triggers in the
editor is declared on the model (``on_change``).

A pyproject.toml belongs to the repository, which may be hostile: settings that name a place to
write (``cacheDir``, ``user_only`` below) are ignored there with a warning naming the file, and
the places it may name to read (``profile``, ``baseline``, the local side of ``pathMappings``) must
resolve, symlinks followed, inside the workspace roots, else they are ignored the same way. The
file itself is read through ``safe_io.read_toml`` (size and nesting limits). What the user gives
(command-line flags, editor settings) is not confined.

The annotated ``Settings`` fields (and the rule ``Thresholds`` they compose) are the single source
of truth: ``SETTINGS`` reads them, and the validation below, the docs table and the VS Code manifest
(``python -m msprof_lsp.server.settings_schema``) all derive from it; the rule settings are
declared once, on ``hints.config.RuleConfig``, which ``Settings`` extends. Keys are camelCase in the
editor and kebab-case in TOML. Unknown keys and invalid values produce warnings (and the previous
value), never an exception.
"""

from __future__ import annotations

import enum
import math
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta

from msprof_lsp.hints.config import RuleConfig, SettingSpec, setting_specs
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

class Retrigger(enum.Enum):
    """What a changed setting makes the editor redo (``ON_CHANGE`` in a field's metadata)."""

    RELOAD = "reload"  # load the profile again (what is loaded, how it maps to source)
    BASELINE = "baseline"  # load the baseline again
    RULES = "rules"  # re-run the rules on the loaded profile
    VIEW = "view"  # refresh code lenses / inlay hints


ON_CHANGE = "on_change"


def _on(what: Retrigger, default: Any) -> Any:
    return field(default=default, metadata={ON_CHANGE: what})


@dataclass(frozen=True, slots=True)
class Settings(RuleConfig):
    """Every setting, annotated: ``setting_specs(Settings)`` turns the fields into keys (camelCase,
    kebab-case in TOML), JSON types, ranges, defaults and descriptions for the conversion below,
    the docs table and the VS Code manifest (``python -m msprof_lsp.server.settings_schema``).

    The rule settings (selection, severities, minimum share, thresholds, compile backend) are
    declared once, on ``RuleConfig``, which this class extends; a change of one re-runs the rules.
    Each field declared here names what its change re-triggers in its metadata."""

    profile: Annotated[str, Meta(description="Profile directory or file to load. Empty: discover under the workspace folder.",
                                 extra={"path": True})] = _on(Retrigger.RELOAD, "")
    rank: Annotated[int | None, Meta(ge=0, description="Rank of a multi-rank profile to analyse. Empty: the slowest rank.")] = _on(Retrigger.RELOAD, None)
    ranks: Annotated[Literal["analysed", "all"], Meta(
        description="Which ranks of a multi-rank job the rules run on: \"analysed\" (the slowest, or rank) or \"all\" (every rank, findings grouped across ranks; --check only).")] = _on(Retrigger.RELOAD, "analysed")
    scheduler: Annotated[str, Meta(
        description="With ranks \"all\": a Dask scheduler (tcp://HOST:PORT) that runs the per-rank analysis; a user setting, never read from a workspace. Empty: a local process pool.",
        extra={"user_only": True, "scope": "machine"})] = _on(Retrigger.RELOAD, "")
    path_mappings: Annotated[tuple[tuple[str, str], ...], Meta(
        description="Where profile paths differ from local ones: [\"/remote/prefix=/local/prefix\", ...] or [{\"remote\": ..., \"local\": ...}]. A local prefix outside the workspace folders is not followed.",
        extra_json_schema=_PATH_MAPPING_SCHEMA)] = _on(Retrigger.RELOAD, ())
    code_lens: Annotated[bool, Meta(description="Show code lenses with device time over hot functions and lines.")] = _on(Retrigger.VIEW, True)
    inlay_hints: Annotated[bool, Meta(description="Show the share of step time at the end of hot lines.")] = _on(Retrigger.VIEW, False)
    baseline: Annotated[str, Meta(description="An earlier profile of the same code to compare against (before/after).",
                                  extra={"path": True})] = _on(Retrigger.BASELINE, "")
    cache_dir: Annotated[str, Meta(
        description="Where the linked-profile cache lives (an absolute path; a user setting, never read from a workspace). Empty: the user cache directory.",
        extra={"path": True, "absolute": True, "user_only": True, "scope": "machine"})] = _on(Retrigger.RELOAD, "")
    third_party_roots: Annotated[tuple[str, ...], Meta(description="Extra path fragments whose frames are skipped like site-packages.")] = _on(Retrigger.RELOAD, ())
    # not a setting: relative paths in settings resolve against this (workspace / pyproject dir)
    base_dir: str = _on(Retrigger.RELOAD, "")

    def rule_config(self) -> RuleConfig:
        """The rules' part alone (hints never see the load and view settings)."""
        return RuleConfig(**{f.name: getattr(self, f.name) for f in fields(RuleConfig)})

    def resolve_path(self, value: str) -> Path:
        p = Path(value).expanduser()
        if not p.is_absolute() and self.base_dir:
            p = Path(self.base_dir) / p
        return p


_RULE_FIELDS = frozenset(f.name for f in fields(RuleConfig))


def on_change(name: str) -> Retrigger:
    """What a change of the ``Settings`` field ``name`` re-triggers: RULES for the fields of
    ``RuleConfig``, else the field's own ``ON_CHANGE`` metadata (KeyError when it has none)."""
    if name in _RULE_FIELDS:
        return Retrigger.RULES
    return Settings.__dataclass_fields__[name].metadata[ON_CHANGE]


def retriggers(old: Settings, new: Settings) -> frozenset[Retrigger]:
    """What going from ``old`` to ``new`` re-triggers (empty: nothing changed)."""
    return frozenset(on_change(f.name) for f in fields(Settings) if getattr(old, f.name) != getattr(new, f.name))


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


REPOSITORY_ONLY = "a repository may only name files inside it (the command line and the editor's settings may name any)"


def inside(value: str, base_dir: str, roots: Sequence[Path], why: str = REPOSITORY_ONLY) -> str:
    """``value`` (relative to ``base_dir``) resolved, symlinks followed; ValueError (ending in
    ``why``) when that is not inside one of ``roots`` (themselves resolved)."""
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
        raise ValueError(f"{_short(value)} resolves to {real}, outside the workspace ({where}); {why}")
    return str(real)


def confine(spec: SettingSpec, value: Any, base_dir: str, roots: Sequence[Path]) -> Any:
    """A workspace's value for a setting that names a place to read, made absolute and checked to
    lie inside ``roots``: ``profile = "/"`` would have ``--check`` walk the whole file system and
    ``baseline = "/other/project/prof"`` read another project's profile. The local side of each
    path mapping is checked the same way (the workspace also refuses to follow it outside).
    ValueError (the caller's warning) when it does not."""
    if spec.name == "path_mappings":
        return tuple((remote, inside(local, base_dir, roots)) for remote, local in value)
    if spec.path and isinstance(value, str) and value:
        return inside(value, base_dir, roots)
    return value


def _current(settings: Settings, spec: SettingSpec) -> Any:
    owner = getattr(settings, spec.group) if spec.group else settings
    value = getattr(owner, spec.name)
    return list(value) if isinstance(value, tuple) else value


def find_pyproject(start: Path, stop: Path | None = None) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` (a file or a directory), looking no higher
    than ``stop`` (a workspace root) when given, else up to the filesystem root."""
    here = start if start.is_dir() else start.parent
    for d in (here, *here.parents):
        candidate = d / "pyproject.toml"
        if candidate.exists():  # not is_file(): a FIFO or a device there gets its warning from the reader
            return candidate
        if d == stop:
            break
    return None


@dataclass(frozen=True, slots=True)
class Layer:
    """Settings the user gave (editor settings, command-line flags): not confined."""

    origin: str  # named in warnings: "command line", "initializationOptions", ...
    values: Mapping[str, Any] | None


def resolve(
    start: Path | None, *, workspace_roots: Sequence[Path] | None, layers: Sequence[Layer] = (),
    base_dir: Path | None = None,
) -> tuple[Settings, list[str]]:
    """The one resolver, for ``--check`` and the editor. Later wins: the defaults ->
    ``[tool.msprof-lsp]`` of the nearest pyproject.toml at or above ``start`` (the checked path, or
    the workspace folder) -> each of ``layers`` in order.

    ``workspace_roots`` (the editor's folders): the pyproject is looked for no higher than the
    outermost root holding ``start``, and the paths it names to read must lie inside the roots.
    None (``--check``): looked for up to the filesystem root; the paths it names must lie inside
    its own folder or ``start``. Relative paths resolve against the pyproject's folder when it
    has a ``[tool.msprof-lsp]`` table, else against ``base_dir``."""
    settings = Settings(base_dir=str(base_dir) if base_dir else "")
    warnings: list[str] = []
    if start is not None:
        start = start.resolve()
        stop: Path | None = None  # --check: up to the filesystem root
        confined: list[Path] | None = None
        if workspace_roots is not None:
            confined = [Path(r).resolve() for r in workspace_roots]
            # the outermost workspace root holding ``start``: no folder above it is the workspace's
            stop = min((r for r in confined if r == start or r in start.parents), key=lambda r: len(r.parts),
                       default=start)
        pyproject = find_pyproject(start, stop)
        if pyproject is not None:
            homes = confined if confined is not None else [pyproject.parent, start]
            settings, warnings = from_pyproject(settings, pyproject, roots=homes)
    for layer in layers:
        settings, more = apply(settings, dict(layer.values) if layer.values is not None else None, layer.origin)
        warnings += more
    return settings, warnings


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
