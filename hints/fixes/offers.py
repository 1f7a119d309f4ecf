"""Fix offers: what a rule hands over instead of finished edits, and their expansion.

A rule names a fix, its anchor, the construct it recognised and the options (``make_offer``);
nothing is parsed then. ``expand`` turns the offers of many findings into edits with one parse per
file: every offer on a file runs its transform on the same ``Source`` (libcst module plus lazily
computed positions and parents), never on a fresh parse. ``--check`` expands right after the rules;
the language server only when code actions are asked for, so typing never parses for fixes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from msprof_lsp.hints.finding import Construct, Finding, Fix, FixOffer, OptionValue
from msprof_lsp.mapping.spans import Span

from . import cst_tools as ct
from .apply import Declined
from .result import FixResult

NOT_RECOGNISED = "the construct is not recognised exactly"


def fix_id(transform: Callable[..., object]) -> str:
    """The catalog name of a transform: ``<module>.<function>``, e.g. ``relu_dropout.compile_pair``."""
    return f"{transform.__module__.rsplit('.', 1)[-1]}.{transform.__name__}"


def make_offer(
    transform: Callable[..., FixResult | None],
    path: str,
    anchor: Span | int,
    *,
    construct: Construct | None = None,
    choice: str = "",
    **options: OptionValue,
) -> FixOffer:
    """An offer of ``transform`` (a ``CATALOG`` transform) at ``anchor`` in ``path``."""
    return FixOffer(fix_id(transform), path, anchor, tuple(sorted(options.items())), construct, choice)


@dataclass(slots=True)
class Expansion:
    """The offers of one finding expanded: the fixes (safe ones first), the offers refused with
    their reason, and the caveats the transforms noted."""

    fixes: list[Fix] = field(default_factory=list)
    declined: list[Declined] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Sources:
    """One parse per file, shared by every offer on it (None: unreadable or does not parse)."""

    def __init__(self, text_of: Callable[[str], str | None]) -> None:
        self._text_of = text_of
        self._parsed: dict[str, ct.Source | None] = {}

    def get(self, path: str) -> ct.Source | None:
        if path not in self._parsed:
            text = self._text_of(path)
            self._parsed[path] = ct.parse(text) if text is not None else None
        return self._parsed[path]

    @property
    def parsed(self) -> int:
        return sum(1 for s in self._parsed.values() if s is not None)


def expand_offers(offers: Iterable[FixOffer], sources: Sources) -> Expansion:
    """Run each offer's transform on the parse of its file (``sources``), in order."""
    from . import offer, transform_of  # the catalog imports this module

    out = Expansion()
    chosen: set[str] = set()
    for o in offers:
        if o.choice and o.choice in chosen:
            continue  # an earlier place of this fix matched
        transform = transform_of(o.fix)
        if transform is None:
            out.declined.append(Declined(o, f"no fix is named {o.fix}"))
            continue
        src = sources.get(o.path)
        if src is None:
            out.declined.append(Declined(o, f"{o.path} cannot be read or does not parse"))
            continue
        why: list[str] = []
        options = {k: v for k, v in o.options}
        if o.construct is not None:
            options["construct"] = o.construct
        res = offer(transform, src, o.anchor, why=why, path=o.path, **options)
        if res is None:
            out.declined.append(Declined(o, "; ".join(dict.fromkeys(why)) or NOT_RECOGNISED))
            continue
        out.fixes.append(res.fix)
        out.notes.extend(n for n in res.notes if n not in out.notes)
        if o.choice:
            chosen.add(o.choice)
    out.fixes.sort(key=lambda f: not f.safe)  # stable: the rule's order among equals
    return out


def with_ready(ready: list[Fix], expanded: list[Fix]) -> list[Fix]:
    """A finding's fixes: those it was made with (no parse needed) and its expanded offers, safe first."""
    return sorted([*ready, *expanded], key=lambda f: not f.safe) if ready else expanded


def expand(findings: Iterable[Finding], text_of: Callable[[str], str | None]) -> Sources:
    """Fill ``fixes`` of every finding from its offers, one parse per file; the transforms'
    caveats go to ``evidence["fix_notes"]``, and when nothing matched the reasons to
    ``evidence["no_fix"]``. Returns the parses (their count is what a check paid)."""
    sources = Sources(text_of)
    for f in findings:
        if not f.offers:
            continue
        got = expand_offers(f.offers, sources)
        f.fixes = with_ready(f.fixes, got.fixes)
        if got.notes:
            f.evidence["fix_notes"] = got.notes
        if not got.fixes and got.declined:
            f.evidence["no_fix"] = "; ".join(dict.fromkeys(d.reason for d in got.declined))
    return sources
