"""The rule framework: what a rule declares, and the registry that finds them.

A rule is a class with class-level metadata and a ``check(ctx)`` generator, registered with
``@register``. Rule modules live in ``hints/rules/`` — one module per rule family (``seed.py`` for
NPU101-109, ``fused_api.py`` for NPU210-217, ...); ``all_rules()`` imports every module there
once, so adding a family is adding a file.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from msprof_lsp.mapping.profile.model import Backend

from .config import THRESHOLD_KEYS
from .finding import Finding, Severity

if TYPE_CHECKING:
    from .context import RuleContext

CODE_RE = re.compile(r"^[A-Z]{3}[0-9]{3}$")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
BACKENDS: tuple[Backend, ...] = tuple(Backend)


class RuleError(ValueError):
    """A rule class whose metadata breaks the contract (a programming error, caught at import)."""


class Rule(ABC):
    """Base class of every rule.

    Class attributes (checked by ``register``):
      code              stable id, family letters + 3 digits (NPU101); used by suppressions, SARIF
      name              kebab-case (relu-dropout-fusion)
      summary           one line for lists and the docs index
      rationale         one paragraph: why this costs time and what the fix changes
      default_severity  None: by share of step time (docs/rules/README.md); a Severity: fixed (env, notices)
      thresholds        camelCase keys of the hints.config.Thresholds fields the rule reads (its doc page lists them)
      backends          profile backends the rule applies to
      pytorch_only      its advice is PyTorch code or settings: it does not run on a profile of a
                        program that is not PyTorch (``profile_query.is_pytorch``)
      level1            the data it may need that a Level0 capture leaves out ("": none); the
                        rule still calls ``ctx.needs_level1`` before concluding (hints/gating.py)
      after_others      it reads what the other rules recorded (their Level1 skips): the engine
                        runs it after every other rule, whatever its code
    """

    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    rationale: ClassVar[str]
    default_severity: ClassVar[Severity | None] = None
    thresholds: ClassVar[tuple[str, ...]] = ()
    backends: ClassVar[tuple[Backend, ...]] = BACKENDS
    pytorch_only: ClassVar[bool] = False
    level1: ClassVar[str] = ""
    after_others: ClassVar[bool] = False

    @property
    def doc(self) -> str:
        """Repository-relative path of the rule's page (target of codeDescription.href)."""
        return f"docs/rules/{self.code}.md"

    @property
    def fixed_severity(self) -> bool:
        return self.default_severity is not None

    def applies_to(self, backend: Backend) -> bool:
        return backend in self.backends

    @abstractmethod
    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        """Yield findings for this profile (use ``ctx.finding`` to build them)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.code} {self.name}>"


_REGISTRY: dict[str, Rule] = {}
_LOADED = False
_LOCK = threading.Lock()


def validate(cls: type[Rule]) -> None:
    for attr in ("code", "name", "summary", "rationale"):
        if not isinstance(getattr(cls, attr, None), str) or not getattr(cls, attr):
            raise RuleError(f"{cls.__name__}: missing class attribute {attr!r}")
    if not CODE_RE.match(cls.code):
        raise RuleError(f"{cls.__name__}: code {cls.code!r} is not LETTERS+3 digits (NPU101)")
    if not NAME_RE.match(cls.name):
        raise RuleError(f"{cls.__name__}: name {cls.name!r} is not kebab-case")
    if "\n" in cls.summary.strip():
        raise RuleError(f"{cls.__name__}: summary must be one line")
    unknown = [k for k in cls.thresholds if k not in THRESHOLD_KEYS]
    if unknown:
        raise RuleError(f"{cls.__name__}: unknown threshold keys {unknown}")
    known = {b.value for b in Backend}
    bad = [b for b in cls.backends if b not in known]
    if bad:
        raise RuleError(f"{cls.__name__}: unknown backends {bad}")
    cls.backends = tuple(Backend(b) for b in cls.backends)  # a rule may spell them as strings
    if cls.default_severity is not None and not isinstance(cls.default_severity, Severity):
        raise RuleError(f"{cls.__name__}: default_severity must be a Severity or None")


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: validate the metadata and add one instance to the registry."""
    validate(cls)
    existing = _REGISTRY.get(cls.code)
    if existing is not None and type(existing).__qualname__ != cls.__qualname__:
        raise RuleError(f"duplicate rule code {cls.code}: {type(existing).__name__} and {cls.__name__}")
    _REGISTRY[cls.code] = cls()
    return cls


def load_rule_modules() -> None:
    """Import every module of ``hints/rules`` once (each registers its rules)."""
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        from . import rules

        for info in sorted(pkgutil.iter_modules(rules.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{rules.__name__}.{info.name}")
        _LOADED = True


def all_rules() -> list[Rule]:
    """Every registered rule, ordered by code."""
    load_rule_modules()
    return [_REGISTRY[c] for c in sorted(_REGISTRY)]


def declared_level1() -> dict[str, str]:
    """Rule code -> the Level1 data it may need, for every rule that declares one."""
    return {r.code: r.level1 for r in all_rules() if r.level1}


def rule(code: str) -> Rule:
    """The rule with this code (KeyError if there is none)."""
    load_rule_modules()
    try:
        return _REGISTRY[code.upper()]
    except KeyError:
        raise KeyError(f"no rule {code!r}") from None


def rules_matching(prefixes: Iterable[str]) -> list[Rule]:
    """Rules whose code starts with any of the prefixes (codes or families, e.g. NPU1)."""
    ps = tuple(p.upper() for p in prefixes)
    return [r for r in all_rules() if r.code.startswith(ps)]


def nearest_codes(prefix: str, n: int = 3) -> list[str] | None:
    """None when ``prefix`` selects a rule (a code or a prefix of one, matched as
    ``RuleConfig.enabled`` matches: case-sensitively); else the nearest known codes (difflib),
    for the one line that names a misspelt ``--select``/``--ignore``/pyproject code."""
    codes = [r.code for r in all_rules()]
    if any(c.startswith(prefix) for c in codes):
        return None
    return difflib.get_close_matches(prefix.upper(), codes, n=n, cutoff=0.5)
