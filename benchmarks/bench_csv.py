"""Benchmark: reading a large kernel_details.csv.

Generates a spec-exact torch_npu Level1 kernel_details.csv (CRLF rows from
``csv.writer`` defaults, leading ``Step Id``, ``Device_id``, TAB inside the quoted start times,
triple-quoted shapes, ``N/A`` cells on HCCL rows, PipeUtilization PMU columns and
``cube_utilization(%)``) and times, each in its own subprocess so peak RSS is per candidate:

* ``csv``            -- the standard library reader, rows transposed to columns;
* ``pandas-c``       -- pandas.read_csv, C engine, dtype=object, no NA conversion;
* ``pandas-c-str``   -- the same with dtype=str (pandas 3: Arrow-backed strings when pyarrow exists);
* ``pyarrow``        -- pyarrow.csv, every column as string (pyarrow is not a project dependency);
* ``duckdb``         -- read_csv with all_varchar (not a project dependency either);
* ``pyarrow-typed``  -- pyarrow with the product's column types (dictionary text, float64
                        numbers), i.e. what an Arrow-based product read would start from;
* ``product``        -- msprof_lsp.mapping.profile.readers.ascend_csv.read_kernel_table + to_frame(),
                        i.e. a plain read plus every conversion to the KERNEL_SCHEMA table.

Prints each time as a ratio to the fastest plain read (the candidates without conversions) and the
peak RSS of each subprocess (its own ru_maxrss). Usage::

    python benchmarks/bench_csv.py --rows 1000000 [--file out.csv] [--only csv,pandas-c]
"""

from __future__ import annotations

import argparse
import csv
import random
import tempfile
import time
from pathlib import Path

from _common import ChildFailed, measure_child, report_usage

HEADER = [
    "Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
    "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Num",
    "Mix Block Num", "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats",
    "Output Shapes", "Output Data Types", "Output Formats", "Context ID",
    "aicore_time(us)", "aic_total_cycles", "aic_mac_time(us)", "aic_mac_ratio",
    "aic_scalar_time(us)", "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio",
    "aic_mte2_time(us)", "aic_mte2_ratio", "aic_fixpipe_time(us)", "aic_fixpipe_ratio",
    "aic_icache_miss_rate", "aiv_time(us)", "aiv_total_cycles", "aiv_vec_time(us)",
    "aiv_vec_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio", "aiv_mte2_time(us)",
    "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio", "aiv_icache_miss_rate",
    "cube_utilization(%)",
]

# (name, type, core, input shapes, dtypes, formats, output shapes), in kernel-name order.
KERNELS = [
    ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "AI_CORE",
     "8192,4096;4096,1536", "DT_BF16;DT_BF16", "ND;ND", "8192,1536"),
    ("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE",
     "81920,4096;8192,512", "DT_BF16;DT_BF16", "ND;ND", "4096,512"),
    ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE",
     "8192,1536;8192,1536", "DT_BF16;DT_BF16", "ND;ND", "8192,1536"),
    ("aclnnMm_TransData_TransData", "TransData", "AI_VECTOR_CORE",
     "4096,1536", "DT_BF16", "ND", "96,256,16,16"),
    ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore",
     "MIX_AIC", "4096,2,512;4096,2,512;4096,2,512;;;;;;;;", "DT_BF16;DT_BF16;DT_BF16", "ND;ND;ND",
     "4096,2,8;4096,2,8;;4096,2,512"),
    ("aclnnRelu_Relu_Relu", "Relu", "AI_VECTOR_CORE", "1;;1;2", "FLOAT16", "ND", ";"),
    ("aclnnCast_CastAiCpu_Cast", "Cast", "AI_CPU", "", "INT64", "ND", ""),
]


def _pmu(rng: random.Random, na: bool) -> list[str]:
    if na:
        return ["N/A"] * (len(HEADER) - 22)
    out = []
    for col in HEADER[22:]:
        if col.endswith("cycles"):
            out.append(str(rng.randrange(0, 20_000_000)))
        elif col.endswith("(us)"):
            out.append(f"{rng.uniform(0, 500):.3f}")
        else:
            out.append(f"{rng.random():.3f}")
    return out


def write_kernel_details(path: Path, rows: int, seed: int = 7) -> None:
    """Stream-write a spec-exact kernel_details.csv with ``rows`` data rows."""
    rng = random.Random(seed)
    t_ns = 1_736_413_971_558_972_912
    with path.open("w", newline="", encoding="utf-8") as f:
        f.write(format_row(HEADER))
        for i in range(rows):
            step = str(1 + i * 4 // rows) if i % 97 else ""
            if i % 211 == 0:  # communication task: N/A ids and PMU,
                dur_ns = rng.randrange(50_000, 5_000_000)
                row = [step, "0", "4294967295", "N/A", "N/A", f"hcom_allReduce__{i % 500}_0_1",
                       "hcom_allReduce_", "N/A", "HCCL"]
                shapes = ["N/A"] * 6
                block = ["0", "0", "N/A"]
                pmu = _pmu(rng, True)
            else:
                name, typ, core, ins, dts, fmts, outs = KERNELS[i % len(KERNELS)]
                dur_ns = rng.randrange(1_000, 600_000)
                row = [step, "0", "4294967295", str(i % 65536), "2", name, typ, "dynamic", core]
                shapes = [f'"{ins}"', dts, fmts, f'"{outs}"', dts.split(";")[0], "ND"]
                block = [str(rng.randrange(1, 48)), "0", "NO"]
                pmu = _pmu(rng, False)
            wait_ns = rng.randrange(0, 40_000)
            t_ns += wait_ns
            decimals = 3 if i % 5 else i % 3  # 0-3 decimals, as real files vary
            start = _us(t_ns, decimals) + "\t"
            row += [start, _us(dur_ns, 3 if i % 7 else 2), _us(wait_ns, 3)]
            row += block[:2] + [block[2]] + shapes + ["N/A"] + pmu
            f.write(format_row(row))
            t_ns += dur_ns


def format_row(fields: list[str]) -> str:
    """One CSV row as torch_npu's files hold it: QUOTE_MINIMAL, \\r\\n, and -- unlike Python's
    csv.writer, which leaves a TAB bare -- a cell holding a TAB is quoted."""
    out = []
    for cell in fields:
        if any(c in cell for c in ',"\t\r\n'):
            cell = '"' + cell.replace('"', '""') + '"'
        out.append(cell)
    return ",".join(out) + "\r\n"


def _us(ns: int, decimals: int) -> str:
    whole, frac = divmod(ns, 1000)
    if decimals == 0:
        return str(whole)
    return f"{whole}.{frac:03d}"[: len(str(whole)) + 1 + decimals]


# -- candidates: each runs in a fresh interpreter; prints seconds -----------------------------

def run_candidate(name: str, path: str) -> float:
    t0 = time.perf_counter()
    if name == "csv":
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        cols = list(zip(*rows[1:]))
        assert len(cols) == len(HEADER)
    elif name in ("pandas-c", "pandas-c-str"):
        import pandas as pd

        df = pd.read_csv(path, dtype=object if name == "pandas-c" else str, engine="c",
                         keep_default_na=False, na_filter=False)
        assert df.shape[1] == len(HEADER)
    elif name == "pyarrow":
        import pyarrow as pa
        import pyarrow.csv as pacsv

        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={c: pa.string() for c in HEADER}, strings_can_be_null=False))
        assert table.num_columns == len(HEADER)
    elif name == "pyarrow-typed":
        # The product's column types in pyarrow: dictionary strings for text and ids, float64 for
        # durations and PMU, plain strings for the epoch start time (no conversions after).
        import pyarrow as pa
        import pyarrow.csv as pacsv

        text = {"Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
                "Accelerator Core", "Block Num", "Mix Block Num", "HF32 Eligible", "Input Shapes",
                "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
                "Output Formats", "Context ID"}
        types = {c: pa.dictionary(pa.int32(), pa.string()) if c in text else
                 pa.string() if c == "Start Time(us)" else pa.float64() for c in HEADER}
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types=types, null_values=["N/A", ""], strings_can_be_null=False,
            quoted_strings_can_be_null=False))
        assert table.num_columns == len(HEADER)
    elif name == "duckdb":
        import duckdb

        rel = duckdb.sql(f"select * from read_csv('{path}', all_varchar=true, header=true)")
        table = rel.fetchnumpy()
        assert len(table) == len(HEADER)
    elif name == "product":
        from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table

        frame = read_kernel_table(Path(path)).to_frame()
        assert len(frame)
    else:
        raise SystemExit(f"unknown candidate {name}")
    return time.perf_counter() - t0


PLAIN = ["csv", "pandas-c", "pandas-c-str", "pyarrow", "duckdb"]
TYPED = ["pyarrow-typed"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--file", type=Path, help="reuse/create this CSV instead of a temp file")
    ap.add_argument("--only", help="comma-separated candidates")
    ap.add_argument("--candidate", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.candidate:  # child mode
        report_usage(run_candidate(args.candidate, str(args.file)))
        return

    tmp = None
    path = args.file
    if path is None:
        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / "kernel_details.csv"
    if not path.exists():
        t0 = time.perf_counter()
        write_kernel_details(path, args.rows)
        print(f"generated {path} ({args.rows} rows, {path.stat().st_size / 1e6:.0f} MB) "
              f"in {time.perf_counter() - t0:.1f}s")
    names = args.only.split(",") if args.only else PLAIN + TYPED + ["product"]
    results: dict[str, tuple[float, float, float]] = {}
    for name in names:
        try:
            use = measure_child([__file__, "--candidate", name, "--file", str(path)])
        except ChildFailed as exc:
            print(f"{name:14s} failed: {exc.stderr.strip().splitlines()[-1:]}")
            continue
        results[name] = (use.seconds, use.cpu_seconds, use.peak_rss_mib)
    plain = [results[n][0] for n in results if n in PLAIN]
    base = min(plain) if plain else min(r[0] for r in results.values())
    # CPU seconds (user+sys, whole process incl. interpreter start) are less sensitive than wall
    # time to other load on a shared machine; pyarrow and duckdb use several threads.
    print(f"{'candidate':14s} {'wall s':>8s} {'ratio':>7s} {'cpu s':>8s} {'peak RSS MiB':>13s}")
    for name, (secs, cpu, rss) in results.items():
        print(f"{name:14s} {secs:8.2f} {secs / base:7.2f} {cpu:8.2f} {rss:13.0f}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
