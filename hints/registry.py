"""The rule framework: the one way to declare a rule, and the registry that finds them.

A rule is one ``Rule`` value: its declaration (code, name, texts, severity, thresholds, backends
and the data it reads, as the advisor's analyzers declare their datasets) as fields, its
``check(ctx)`` generator as the method of its class. Every rule is declared the same way, its doc
beside its code (as ruff's violations are): a class decorated with ``@declare``, whose docstring
is the rule's texts (first paragraph the summary, the rest the rationale) and whose decorator says
what differs from the defaults::

    @declare("NPU218", "my-name", thresholds=("myThreshold",), needs=(Data.KERNELS,))
    class MyRule(Rule):
        '''One line for lists and the docs index.

        Why this costs time and what the fix changes.
        '''

        def check(self, ctx): ...

A family of rules (``environment.py``, ``fused_api.py``) is one class with fields of its own and
``check``; each rule of it is a subclass declared so, its decorator giving the family's fields.
``all_rules()`` imports every module of ``hints/rules/`` once, so adding a rule is adding a file.
The engine, the Level1 gating, NPU901, ``msprof-lsp rule``, SARIF and the settings schema read the
declaration only.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from msprof_lsp.mapping.profile.model import Backend

from .config import THRESHOLD_KEYS
from .finding import Finding, Severity

if TYPE_CHECKING:
    from .context import RuleContext

CODE_RE = re.compile(r"^[A-Z]{3}[0-9]{3}$")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
BACKENDS: tuple[Backend, ...] = tuple(Backend)
R = TypeVar("R", bound="Rule")


class RuleError(ValueError):
    """A rule whose declaration breaks the contract (a programming error, caught at import)."""


class Data(Enum):
    """Data a rule reads without which it has nothing to say: the engine runs it only on a profile
    that holds all it declares (``Rule.needs``), and ``msprof-lsp rule`` lists them."""

    KERNELS = "device kernels"
    CLUSTER = "the summaries of two ranks or more (a multi-rank job)"
    ENV = "the environment variables recorded with the profile"
    ATTRIBUTION = "the profile mapped to the workspace's source"
    CALL_STACKS = "Python call stacks"

    def present(self, ctx: RuleContext) -> bool:
        p = ctx.profile
        if self is Data.KERNELS:
            return bool(len(p.kernels))  # then some are in the steps too (Profile.kernels_in_steps)
        if self is Data.CLUSTER:
            return ctx.cluster is not None and len(ctx.cluster.ranks) >= 2
        if self is Data.ENV:
            return bool(p.meta.env)
        if self is Data.ATTRIBUTION:
            return ctx.attribution is not None
        return p.has_call_stacks


@dataclass(frozen=True, eq=False, repr=False)
class Rule(ABC):
    """A rule's declaration (checked when it is made) and, in its class, its ``check``.

      code              stable id, family letters + 3 digits (NPU101); used by suppressions, SARIF
      name              kebab-case (relu-dropout-fusion)
      summary           one line for lists and the docs index (``@declare``: the docstring's first paragraph)
      rationale         one paragraph: why this costs time and what the fix changes (the docstring's rest)
      default_severity  None: by share of step time (docs/rules/README.md); a Severity: fixed (env, notices)
      thresholds        camelCase keys of the hints.config.Thresholds fields the rule reads (its doc page lists them)
      backends          profile backends the rule applies to
      needs             the ``Data`` it reads: the engine does not run it on a profile without them
      pytorch_only      its advice is PyTorch code or settings: it does not run on a profile of a
                        program that is not PyTorch (``profile_query.is_pytorch``)
      level1            the data it may need that a Level0 capture leaves out ("": none); the
                        rule still calls ``ctx.needs_level1(self)`` before concluding (hints/gating.py)
      after_others      it reads what the other rules recorded (their Level1 skips): the engine
                        runs it after every other rule, whatever its code
    """

    code: str
    name: str
    _: KW_ONLY
    summary: str
    rationale: str
    default_severity: Severity | None = None
    thresholds: tuple[str, ...] = ()
    backends: tuple[Backend, ...] = BACKENDS
    needs: tuple[Data, ...] = ()
    pytorch_only: bool = False
    level1: str = ""
    after_others: bool = False

    def __post_init__(self) -> None:
        validate(self)
        # a rule may spell its backends as strings
        object.__setattr__(self, "backends", tuple(Backend(b) for b in self.backends))

    @property
    def doc(self) -> str:
        """Repository-relative path of the rule's page (target of codeDescription.href)."""
        return f"docs/rules/{self.code}.md"

    @property
    def fixed_severity(self) -> bool:
        return self.default_severity is not None

    def applies_to(self, ctx: RuleContext) -> bool:
        """Whether the rule runs on this context: its backend, and every kind of data it reads."""
        return ctx.backend in self.backends and all(d.present(ctx) for d in self.needs)

    @abstractmethod
    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        """Yield findings for this profile (use ``ctx.finding`` to build them)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.code} {self.name}>"


_REGISTRY: dict[str, Rule] = {}
_LOADED = False
_LOCK = threading.Lock()


def validate(rule: Rule) -> None:
    who = f"{type(rule).__name__} {getattr(rule, 'code', '')}".strip()
    for attr in ("code", "name", "summary", "rationale"):
        if not isinstance(getattr(rule, attr, None), str) or not getattr(rule, attr):
            raise RuleError(f"{who}: missing {attr!r}")
    if not CODE_RE.match(rule.code):
        raise RuleError(f"{who}: code {rule.code!r} is not LETTERS+3 digits (NPU101)")
    if not NAME_RE.match(rule.name):
        raise RuleError(f"{who}: name {rule.name!r} is not kebab-case")
    if "\n" in rule.summary.strip():
        raise RuleError(f"{who}: summary must be one line")
    unknown = [k for k in rule.thresholds if k not in THRESHOLD_KEYS]
    if unknown:
        raise RuleError(f"{who}: unknown threshold keys {unknown}")
    known = {b.value for b in Backend}
    bad = [b for b in rule.backends if b not in known]
    if bad:
        raise RuleError(f"{who}: unknown backends {bad}")
    if rule.default_severity is not None and not isinstance(rule.default_severity, Severity):
        raise RuleError(f"{who}: default_severity must be a Severity or None")
    if not all(isinstance(d, Data) for d in rule.needs):
        raise RuleError(f"{who}: needs must be Data members")


def doc_texts(cls: type) -> tuple[str, str]:
    """(summary, rationale) from a rule class's own docstring: its first paragraph and the rest,
    each paragraph's lines joined by one space (paragraphs of the rest by a blank line)."""
    doc = cls.__dict__.get("__doc__")
    paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in re.split(r"\n\s*\n", inspect.cleandoc(doc or ""))
                  if p.strip()]
    if len(paragraphs) < 2:
        raise RuleError(f"{cls.__qualname__}: its docstring must hold the summary, a blank line, then the rationale")
    return paragraphs[0], "\n\n".join(paragraphs[1:])


def declare(code: str, name: str, **declared: Any) -> Callable[[type[R]], type[R]]:
    """The one way to declare a rule: a class decorator that registers one value of the class.

    Its docstring gives ``summary`` and ``rationale`` (``doc_texts``); ``declared`` the other fields
    that differ from the defaults (``Rule``'s, a family's own). Returns the class itself.
    """

    def make(cls: type[R]) -> type[R]:
        summary, rationale = doc_texts(cls)
        register(cls(code, name, summary=summary, rationale=rationale, **declared))
        return cls

    return make


def register(rule: Rule) -> Rule:
    """Add a rule value to the registry (its declaration was checked when it was made); rules are
    declared with ``@declare``, which calls this."""
    existing = _REGISTRY.get(rule.code)
    if existing is not None and (type(existing).__qualname__, existing.name) != (type(rule).__qualname__, rule.name):
        raise RuleError(f"duplicate rule code {rule.code}: {existing!r} and {rule!r}")
    _REGISTRY[rule.code] = rule
    return rule


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
