"""hints.verify: baseline findings matched to the new run's by code and anchored text."""

from __future__ import annotations

from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.hints.verify import TOLERANCE, FindingState, classify
from msprof_lsp.mapping.spans import Span


def _finding(path, line: int, us: float, code: str = "NPU101") -> Finding:
    return Finding(code, "rule", Severity.WARNING, "m", Span(str(path), line, 0, line, 4),
                   share=us / 1000, time_per_step_us=us)


def test_states_follow_the_text_not_the_line_number(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("a = f(x)\nb = g(x)\nc = h(x)\nd = k(x)\n")
    before = [_finding(src, 1, 100.0), _finding(src, 2, 100.0), _finding(src, 3, 100.0), _finding(src, 4, 100.0)]
    # the new run: f(x)'s finding is gone; another rule's finding on f(x) is new, not a match
    after = [_finding(src, 2, 100.0 * (1 + TOLERANCE / 2)), _finding(src, 3, 40.0), _finding(src, 4, 130.0),
             _finding(src, 1, 50.0, code="NPU102")]
    states = {(c.code, c.finding.span.line): c.state for c in classify(before, after)}
    assert states == {
        ("NPU101", 1): FindingState.RESOLVED,
        ("NPU102", 1): FindingState.NEW,
        ("NPU101", 2): FindingState.PERSISTING,  # within the tolerance
        ("NPU101", 3): FindingState.IMPROVED,
        ("NPU101", 4): FindingState.REGRESSED,
    }


def test_repeated_text_matches_by_occurrence_and_place_not_line(tmp_path):
    """Two identical lines: each baseline finding keeps its own; a finding whose anchored line now
    holds other text (the baseline's line 2 is a comment after an edit) is not matched by number."""
    src = tmp_path / "m.py"
    src.write_text("y = slow(x)\n# note\ny = slow(x)\n")
    before = [_finding(src, 1, 100.0), _finding(src, 3, 100.0)]
    after = [_finding(src, 3, 10.0), _finding(src, 1, 100.0)]
    states = [(c.finding.span.line, c.state) for c in classify(before, after)]
    assert states == [(1, FindingState.PERSISTING), (3, FindingState.IMPROVED)]
    [gone, new] = classify([_finding(src, 2, 100.0)], [_finding(src, 3, 100.0)])
    assert (gone.state, new.state) == (FindingState.RESOLVED, FindingState.NEW)


def test_profile_level_findings_match_by_code(tmp_path):
    f = Finding("NPU243", "rule", Severity.INFO, "m", None)
    [c] = classify([f], [Finding("NPU243", "rule", Severity.INFO, "m2", None)])
    assert c.state is FindingState.PERSISTING and c.after is not None and c.after.message == "m2"
