from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from msprof_lsp.mapping.source.positions import (
    LineIndex,
    col_from_units,
    col_to_units,
    span_to_units,
    utf8_units,
    utf16_units,
)
from msprof_lsp.mapping.source.source_index import SourceIndex

LINE = "s = '中文😋'; t = F.relu(x)"


def test_call_after_chinese_and_emoji_counts_differently_per_encoding():
    # libcst itself places the call: the column in code points is what the index stores
    index = SourceIndex.build("/w/m.py", "import torch.nn.functional as F\n" + LINE + "\n")
    (call,) = [c for c in index.calls if c.name == "relu"]
    assert (call.span.line, call.span.col) == (2, 15)
    assert call.span.col == LINE.index("F.relu")
    prefix = LINE[: call.span.col]
    # independent counts: UTF-16 code units and UTF-8 bytes of the prefix
    assert col_to_units(LINE, 15, "utf-32") == 15
    assert col_to_units(LINE, 15, "utf-16") == len(prefix.encode("utf-16-le")) // 2 == 16
    assert col_to_units(LINE, 15, "utf-8") == len(prefix.encode("utf-8")) == 22
    assert index.lines.to_units(2, 15, "utf-16") == (1, 16)
    assert span_to_units(index.lines, 2, call.span.col, 2, call.span.end_col, "utf-8") == (
        1, 22, 1, len(LINE[: call.span.end_col].encode()))


def test_from_units_back_to_code_points():
    assert col_from_units(LINE, 16, "utf-16") == 15
    assert col_from_units(LINE, 22, "utf-8") == 15
    # inside the emoji (second UTF-16 unit / a continuation byte) -> the emoji's own column
    emoji = LINE.index("😋")
    assert col_from_units(LINE, emoji + 1, "utf-16") == emoji
    start8 = len(LINE[:emoji].encode())
    assert col_from_units(LINE, start8 + 2, "utf-8") == emoji
    # past the end -> the line length
    assert col_from_units(LINE, 1000, "utf-16") == len(LINE)
    assert col_to_units(LINE, 1000, "utf-8") == len(LINE.encode())


def test_unknown_encoding_is_a_clear_error():
    with pytest.raises(ValueError, match="position encoding"):
        col_to_units("abc", 1, "latin-1")
    assert col_to_units("abc", 1, "UTF16") == 1


def test_line_index_handles_every_line_ending():
    text = "a = 1\r\nb = '中'\rc = 3\nd"
    li = LineIndex(text)
    assert li.line_count == 4
    assert [li.line_text(i) for i in range(1, 5)] == ["a = 1", "b = '中'", "c = 3", "d"]
    assert li.line_text(0) == "" and li.line_text(9) == ""
    off = li.offset(3, 2)
    assert text[off] == "="
    assert li.position(off) == (3, 2)
    assert li.slice(2, 4, 2, 7) == "'中'"
    assert li.utf8_offset(3, 0) == len(text[: text.index("c = 3")].encode())
    assert li.from_units(1, 5, "utf-8") == (2, 5)  # "b = '" is 5 bytes: the column of 中


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=40),
       st.integers(min_value=0, max_value=45))
def test_round_trip_every_encoding(line, col):
    col = min(col, len(line))
    assert utf16_units(line[:col]) == len(line[:col].encode("utf-16-le")) // 2
    assert utf8_units(line[:col]) == len(line[:col].encode("utf-8"))
    for enc in ("utf-8", "utf-16", "utf-32"):
        assert col_from_units(line, col_to_units(line, col, enc), enc) == col
