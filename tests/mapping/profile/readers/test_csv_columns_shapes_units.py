"""Shape-list parsing and exact µs -> ns conversion: examples and hypothesis properties."""

from __future__ import annotations

import csv
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table
from msprof_lsp.mapping.profile.readers.csv_columns import scaled_half_up, time_cell_ns
from msprof_lsp.mapping.profile.shapes import format_shapes, numel, parse_shapes
from msprof_lsp.mapping.units import us_text_to_ns


def half_up_ns(text: str) -> int:
    d = Decimal(text.strip()) * 1000
    sign = -1 if d < 0 else 1
    return sign * int(abs(d).quantize(Decimal(1), rounding=ROUND_HALF_UP))


# -- shapes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("81920,4096;8192,512", [(81920, 4096), (8192, 512)]),
        ('"81920,4096;8192,512"', [(81920, 4096), (8192, 512)]),  # quotes left by a csv reader
        ("1;;1;2", [(1,), None, (1,), (2,)]),
        (";", [None, None]),
        ("4096,2,512;", [(4096, 2, 512), None]),  # trailing ; = trailing empty entry
        ("", []),
        ('""', []),
        ("N/A", []),
        ("NULL", []),
        ("1,3,224,224;\r\n64,3,7,7;\r\n", [(1, 3, 224, 224), (64, 3, 7, 7), None]),
        ("2,s0;3", [None, (3,)]),  # symbolic dim: not usable for arithmetic
    ],
)
def test_parse_shapes_examples(text, expected):
    assert parse_shapes(text) == expected


def test_format_and_numel():
    assert format_shapes([(2, 3), None, (4,)]) == "2,3;;4"
    assert format_shapes([]) == ""
    assert numel((81920, 4096)) == 81920 * 4096 and numel(()) == 1


shape = st.tuples(st.integers(0, 10**6)).flatmap(
    lambda first: st.lists(st.integers(0, 10**6), max_size=4).map(lambda rest: first + tuple(rest))
)
shape_lists = st.lists(st.one_of(st.none(), shape), min_size=1, max_size=6).filter(lambda s: s != [None])


@given(shape_lists)
def test_shapes_round_trip(shapes):
    assert parse_shapes(format_shapes(shapes)) == shapes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(shape_lists, min_size=1, max_size=8))
def test_quoted_shapes_survive_the_csv_reader(tmp_path, lists):
    """torch_npu writes shapes wrapped in quotes inside a quoted cell (csv.writer doubles them)."""
    path = tmp_path / "kernel_details.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Input Shapes"])
        for i, s in enumerate(lists):
            w.writerow([f"k{i}", "Add", "AI_CORE", f"{1000 + i}.5", "1", f'"{format_shapes(s)}"'])
    frame = read_kernel_table(path).to_frame()
    assert [parse_shapes(t) for t in frame["input_shapes"]] == lists


# -- µs -> ns ------------------------------------------------------------------------------------------

us_text = st.builds(
    lambda whole, frac, pad: f"{whole}{'.' + frac if frac is not None else ''}{pad}",
    st.integers(0, 9_000_000_000_000_000).map(str),  # int64 ns hold epoch µs up to ~9.2e15
    st.one_of(st.none(), st.text("0123456789", min_size=1, max_size=6)),
    st.sampled_from(["", "\t", " ", "\t\t"]),
)


@given(us_text)
def test_time_cell_is_exact(text):
    assert time_cell_ns(text) == half_up_ns(text) == us_text_to_ns(text)


@given(st.sampled_from(["-12.5", "+3", ".25", "1e3", "  7.0005  "]))
def test_time_cell_unusual_forms_match_units(text):
    assert time_cell_ns(text) == us_text_to_ns(text)


@pytest.mark.parametrize("text", ["N/A", "", "NULL", "  "])
def test_time_cell_missing(text):
    assert time_cell_ns(text) == np.iinfo(np.int64).min


@pytest.mark.parametrize("text", ["12:30", "9999999999999999.0", "-9999999999999999"])
def test_time_cell_garbage_and_out_of_range(text):
    assert time_cell_ns(text) == np.iinfo(np.int64).min + 1


# Durations go through the C parser's float64: exact for what producers write (<= 4 decimals,
# below 2**51 ns), ties included.
dur_text = st.builds(
    lambda whole, frac, neg: f"{'-' if neg else ''}{whole}{'.' + frac if frac else ''}",
    st.integers(0, 10**9).map(str),
    st.text("0123456789", max_size=4),
    st.booleans(),
)


@given(st.lists(dur_text, min_size=1, max_size=50))
def test_float_duration_path_is_exact(texts):
    values = np.array([float(t) for t in texts])
    assert scaled_half_up(values, 1000.0).tolist() == [half_up_ns(t) for t in texts]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(us_text, dur_text.filter(lambda t: not t.startswith("-"))), min_size=1, max_size=30))
def test_reader_times_are_exact(tmp_path, rows):
    path = tmp_path / "kernel_details.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        f.write("Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us)\r\n")
        for i, (start, dur) in enumerate(rows):
            f.write(f'k{i},Add,AI_CORE,"{start}",{dur},{dur}\r\n')
    frame = read_kernel_table(path).to_frame()
    assert frame["start_ns"].tolist() == [half_up_ns(s) for s, _ in rows]
    assert frame["dur_ns"].tolist() == [half_up_ns(d) for _, d in rows]
    assert frame["wait_ns"].tolist() == [half_up_ns(d) for _, d in rows]
