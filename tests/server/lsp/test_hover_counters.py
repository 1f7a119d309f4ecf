"""The hover's counter table: rendered from the rows the hints layer computed (no recomputation in
the server), in Markdown and in aligned plain text; absent when the line has no counters."""

from __future__ import annotations

from msprof_lsp.hints.line_counters import OpCounters
from msprof_lsp.server.lsp import hover
from msprof_lsp.server.lsp.heat_view import HotLine

RATIOS = (("vec", 0.0), ("mac", 0.152), ("scalar", 0.05), ("mte1", 0.2), ("mte2", 0.983), ("mte3", 0.0))


def _line() -> HotLine:
    rows = [OpCounters("MatMulV2", "aclnnAddmm_MatMulCommon_MatMulV2", "AI_CORE", "Cube", False, 1, 213_000, RATIOS,
                       "memory-bound"),
            OpCounters("MatMulV2", "aclnnMm_MatMulCommon_MatMulV2", "AI_CORE", "Cube", True, 2, 400_000, RATIOS,
                       "memory-bound")]
    return HotLine(39, None, None, rows)


def test_markdown_counter_table():
    text = hover._markdown("213 µs/step", [], [], hover._counter_table(_line()))
    lines = text.splitlines()
    head = lines.index("| operator | class | count | vec | mac | scalar | mte1 | mte2 | mte3 | bound |")
    assert lines[head - 2] == f"*{hover.COUNTER_TITLE}*"
    assert lines[head + 2] == "| MatMulV2 | Cube | 1 | 0% | 15% | 5% | 20% | 98% | 0% | memory-bound |"
    assert lines[head + 3].startswith("| MatMulV2 (bwd) | Cube | 2 |")


def test_plain_counter_table_is_aligned():
    text = hover._plain("213 µs/step", [], [], hover._counter_table(_line()))
    lines = text.splitlines()
    i = lines.index(hover.COUNTER_TITLE)
    header, first = lines[i + 1], lines[i + 2]
    assert header.split() == ["operator", "class", "count", "vec", "mac", "scalar", "mte1", "mte2", "mte3", "bound"]
    assert first.index("Cube") == header.index("class") and first.endswith("memory-bound")


def test_no_counters_no_table():
    assert hover._counter_table(HotLine(3, None, None)) == ((), [])
    assert hover.COUNTER_TITLE not in hover._markdown("1 µs/step", [], [], hover._counter_table(HotLine(3, None, None)))
