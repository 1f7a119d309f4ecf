"""`msprof-lsp --check`: the command-line contract of design.md — flags, formats, exit codes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import server_command, shared_fixture
from tests.synth import truth
from tests.synth.sample_runs import cnn_runs

from cli_support import isolated_cache  # noqa: F401 - autouse fixture
from cli_support import CnnKnobs, Result, copy_sample_sources, fits_80_columns, run_cli, single_rank, write_cnn_profiles
from msprof_lsp.server.__main__ import main


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """The CNN sample's sources plus a generated 2-rank torch_npu profile, written once per module
    (generating is deterministic and costs more than a copy); tests get copies, never this tree."""
    proj = tmp_path_factory.mktemp("pristine") / "proj"
    src = copy_sample_sources(proj / "cnn_classifier")
    write_cnn_profiles(src, proj / "cnn_classifier" / "prof")
    return proj


@pytest.fixture()
def project(pristine, tmp_path, monkeypatch):
    """A project folder of this test's own (it may change it): a copy of ``pristine``, the cwd."""
    proj = tmp_path / "proj"
    shutil.copytree(pristine, proj)
    monkeypatch.chdir(proj)
    return proj


@pytest.fixture(scope="module")
def check_json(pristine, tmp_path_factory) -> Result:
    """One cold `--check . --format json --fail-on never` on a copy of the project, with a cache of
    its own, shared by the tests that only read its output (each parses its own copy of the text)."""
    proj = tmp_path_factory.mktemp("checked") / "proj"
    shutil.copytree(pristine, proj)
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.chdir(proj)
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        mp.delenv("MSPROF_LSP_DEBUG", raising=False)
        code = main(["--check", ".", "--format", "json", "--fail-on", "never"])
    return Result(code, out.getvalue(), err.getvalue())


def one_line(err: str) -> str:
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert "Traceback" not in err
    return lines[0]


def test_version(capsys):
    r = run_cli(["--version"], capsys)
    assert r.code == 0
    assert r.out.startswith("msprof-lsp ")


def test_text_report_names_profile_ranks_and_hotspot_lines(project, capsys):
    r = run_cli(["--check", ".", "--fail-on", "never"], capsys)
    assert r.code == 0, r.err
    assert "torch_npu profile" in r.out and "cnn_classifier/prof/ma-node-0_" in r.out
    assert "rank 0 of 2" in r.out and "cluster: 2 ranks" in r.out
    model_lines = (project / "cnn_classifier" / "model.py").read_text().splitlines()
    conv_line = next(i for i, l in enumerate(model_lines, 1) if "self.conv(x)" in l)
    assert f"cnn_classifier/model.py:{conv_line}" in r.out
    assert fits_80_columns(r.out), "text output must fit 80 columns"
    assert "\x1b[" not in r.out, "no colour when stdout is not a terminal"


def test_text_report_prints_long_profile_paths_whole_so_they_paste_back(tmp_path, monkeypatch, capsys):
    proj = tmp_path / "proj"
    src = copy_sample_sources(proj / "cnn_classifier")
    long_dir = proj / "cnn_classifier" / "profiles_recorded_on_the_training_cluster_on_2025_07_31_with_stacks"
    (profile,) = write_cnn_profiles(src, long_dir, single_rank())
    monkeypatch.chdir(proj)
    r = run_cli(["--check", ".", "--fail-on", "never"], capsys)
    assert r.code == 0, r.err
    rel = profile.relative_to(proj).as_posix()
    assert len(rel) > 80 and "…" not in r.out.split("\n\n")[0]  # nothing in the header is cut
    lines = r.out.splitlines()
    at = lines.index("torch_npu profile")
    assert lines[at + 1] == f"  {rel}"  # whole, on its own line (the terminal wraps it)
    assert fits_80_columns(r.out)
    again = run_cli(["--check", ".", "--profile", lines[at + 1].strip(), "--fail-on", "never"], capsys)
    assert again.code == 0, again.err
    assert again.out.splitlines()[at + 1] == f"  {rel}"


def test_json_follows_schema(check_json):
    r = check_json
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["version"] == 1
    prof = doc["profile"]
    for key in ("path", "kind", "rank", "ranks", "steps", "step_time_us", "device_time_us", "has_call_stacks"):
        assert key in prof
    assert prof["kind"] == "torch_npu" and prof["ranks"] == [0, 1] and prof["has_call_stacks"] is True
    assert doc["hotspots"], "hotspots expected on a profile with stacks"
    for h in doc["hotspots"]:
        assert set(h) >= {"path", "line", "end_line", "device_time_us", "share", "calls", "ops"}
        assert "/" in h["path"] and not h["path"].startswith("/")
        for op in h["ops"]:
            assert set(op) >= {"name", "type", "core", "time_us", "count"}
    assert doc["baseline"] is None
    for f in doc["findings"]:
        assert set(f) >= {"code", "name", "severity", "path", "line", "column", "end_line", "end_column",
                          "message", "share", "device_time_us", "confidence", "evidence", "fixes"}


def test_hotspot_shares_match_the_profile(check_json):
    """share = per-step device time of the span / step time, as the JSON states both."""
    doc = json.loads(check_json.out)
    step_us = doc["profile"]["step_time_us"]
    for h in doc["hotspots"]:
        assert h["share"] == pytest.approx(h["device_time_us"] / step_us, rel=1e-3, abs=1e-6)
        assert h["device_time_us"] == pytest.approx(sum(o["time_us"] for o in h["ops"]), rel=1e-3, abs=0.01)


def test_json_critical_path(check_json):
    """profile.critical_path: its kinds add up to its total, the total fits the path's span and the
    step, and each line's time on the path is at most its total (all steps analysed here)."""
    doc = json.loads(check_json.out)
    cp = doc["profile"]["critical_path"]
    assert cp is not None and len(cp["steps_analysed"]) == doc["profile"]["steps"]
    assert set(cp["by_kind_us"]) == {"host", "kernel", "comm", "wait"}
    assert sum(cp["by_kind_us"].values()) == pytest.approx(cp["total_us"], abs=0.01)
    assert 0 < cp["total_us"] <= cp["span_us"] + 0.01
    shown = sum(s["us"] for s in cp["segments"])
    assert len(cp["segments"]) == min(cp["steps"][0]["segments"], 200)
    if len(cp["segments"]) == cp["steps"][0]["segments"]:
        assert shown == pytest.approx(cp["steps"][0]["total_us"], abs=0.01)
    assert shown <= cp["steps"][0]["total_us"] + 0.01
    assert cp["lines"], "lines with time on the path expected on a profile with stacks"
    hot = {(h["path"], h["line"]) for h in doc["hotspots"]}
    for line in cp["lines"]:
        assert not line["path"].startswith("/")
        assert line["on_path_us"] <= line["total_us"] + 0.01
        if line["on_path_us"] > 0:
            assert (line["path"], line["line"]) in hot or len(hot) == 20
        assert 0 <= line["path_share"] <= 1 and line["bound"] in {"host", "sync", "bandwidth", "compute"}
        assert sum(line["charged_us"].values()) <= cp["total_us"] + 0.01
    assert cp["unavailable"] is None
    by_line = {(line["path"], line["line"]): line for line in cp["lines"]}
    for h in doc["hotspots"]:  # each hotspot carries its line's time on the path
        assert 0 <= h["on_path_us"] <= h["device_time_us"] + 0.01
        if (h["path"], h["line"]) in by_line:
            assert h["on_path_us"] == by_line[(h["path"], h["line"])]["on_path_us"]


def test_output_file(project, tmp_path, capsys):
    target = tmp_path / "report.json"
    r = run_cli(["--check", ".", "--format", "json", "--output", str(target), "--fail-on", "never"], capsys)
    assert r.code == 0 and r.out == ""
    assert json.loads(target.read_text())["version"] == 1


def test_rank_flag_and_wrong_rank(project, capsys):
    r = run_cli(["--check", ".", "--format", "json", "--rank", "1", "--fail-on", "never"], capsys)
    assert r.code == 0, r.err
    assert json.loads(r.out)["profile"]["rank"] == 1
    r = run_cli(["--check", ".", "--rank", "7"], capsys)
    assert r.code == 2
    line = one_line(r.err)
    assert "rank 7" in line and "0" in line and "1" in line


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--check", "does-not-exist"], "does-not-exist: no such file or directory"),
        (["--check", ".", "--profile", "nope"], "nope: no such file or directory"),
        (["--check", ".", "--rank", "-1"], "--rank"),
        (["--check", ".", "--fail-on-regression", "5"], "--fail-on-regression needs --baseline"),
        (["--check", ".", "--path-map", "no-equals-sign"], "--path-map"),
        (["--check", ".", "--format", "xml"], "invalid choice"),
        (["somewhere"], "unknown command 'somewhere'"),
        (["--profile", "p"], "--profile needs the check command"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(project, capsys, argv, needle):
    r = run_cli(argv, capsys)
    assert r.code == 2
    assert needle in one_line(r.err)


def test_no_profile_found(tmp_path, monkeypatch, capsys):
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    r = run_cli(["--check", "."], capsys)
    assert r.code == 2
    assert "no profile found" in one_line(r.err)


def test_unreadable_profile_names_the_file(project, capsys):
    trace = next((project / "cnn_classifier" / "prof").glob("*rank*" if False else "*_ascend_pt")) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.write_bytes(b"\x00\x01binary garbage")
    for other in (project / "cnn_classifier" / "prof").glob("*_ascend_pt"):
        (other / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_bytes(b"\x00\x01binary garbage")
    r = run_cli(["--check", ".", "--no-cache"], capsys)
    assert r.code == 2
    line = one_line(r.err)
    assert "trace_view.json" in line


def test_no_cache_writes_no_cache(project, capsys):
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "msprof-lsp"
    assert run_cli(["--check", ".", "--no-cache", "--fail-on", "never"], capsys).code == 0
    assert not cache.exists() or not any(cache.rglob("*.pkl*")), "--no-cache must not write the cache"
    assert run_cli(["--check", ".", "--fail-on", "never"], capsys).code == 0
    assert cache.exists() and any(p.is_file() for p in cache.rglob("*"))


def test_path_map_points_frames_at_another_tree(tmp_path, monkeypatch, capsys):
    """Profile frames name /home/ma-user/work/cnn_classifier/…. With two local copies of the
    sources (a/ and b/) the suffix match is ambiguous and maps nothing; --path-map decides."""
    proj = tmp_path / "proj"
    a = copy_sample_sources(proj / "a")
    copy_sample_sources(proj / "b")
    write_cnn_profiles(a, proj / "prof", single_rank())
    monkeypatch.chdir(proj)
    base = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never"], capsys).out)
    assert not any(h["path"].startswith(("a/", "b/")) for h in base["hotspots"])
    mapped = json.loads(
        run_cli(
            ["--check", ".", "--format", "json", "--fail-on", "never",
             "--path-map", f"/home/ma-user/work/cnn_classifier={proj / 'b'}"],
            capsys,
        ).out
    )
    assert mapped["hotspots"] and all(h["path"].startswith("b/") for h in mapped["hotspots"])


def test_console_script_runs_as_a_subprocess(project):
    proc = subprocess.run(
        server_command("--check", ".", "--format", "json", "--fail-on", "never"),
        capture_output=True, text=True, cwd=project, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["version"] == 1


def test_baseline_reports_improvement_and_regression(tmp_path, monkeypatch, capsys):
    """Two profiles of the same code: conv slower, dropout/relu faster in the new one."""
    proj = tmp_path / "proj"
    src = copy_sample_sources(proj / "cnn_classifier")
    before = single_rank(CnnKnobs())
    # conv five times slower (a line regression), relu/dropout faster (line improvements), and a
    # longer all-reduce on the critical path (the step grows whatever the other knobs hide)
    after = replace(before, conv_us=(before.conv_us[0] * 5, before.conv_us[1] * 5), relu_us=1.0,
                    genmask_us=2.0, domask_us=2.0, allreduce_us=before.allreduce_us * 1.5)
    write_cnn_profiles(src, proj / "old" , before)
    write_cnn_profiles(src, proj / "cnn_classifier" / "prof", after)
    monkeypatch.chdir(proj)
    old = str(next((proj / "old").glob("*_ascend_pt")))
    r = run_cli(["--check", "cnn_classifier", "--baseline", old, "--format", "json", "--fail-on", "never"], capsys)
    assert r.code == 0, r.err
    bl = json.loads(r.out)["baseline"]
    lines = (src / "model.py").read_text().splitlines()
    conv = next(i for i, l in enumerate(lines, 1) if "self.conv(x)" in l)
    changes = {(c["path"], c["line"]): c for c in bl["changes"]}
    c = changes[("cnn_classifier/model.py", conv)]
    assert c["after_us"] > c["before_us"], "the conv line regressed"
    improved = [c for c in bl["changes"] if c["after_us"] < c["before_us"]]
    assert improved, "the relu/dropout lines improved"
    text = run_cli(["--check", "cnn_classifier", "--baseline", old, "--fail-on", "never"], capsys).out
    assert "improved" in text and "regressed" in text and "Compared with old/" in text
    # Step times as the run descriptions lay them out (Computing + Comm not overlapped + Free):
    def mean_step_us(knobs):
        steps = truth(cnn_runs(src, knobs)[0]).steps
        return sum(st.step_time_ns for st in steps) / len(steps) / 1000

    assert bl["step_time_us"] == pytest.approx(mean_step_us(before), abs=0.01)
    assert bl["current_step_time_us"] == pytest.approx(mean_step_us(after), abs=0.01)
    assert bl["current_step_time_us"] > bl["step_time_us"]  # so --fail-on-regression bites
    assert run_cli(["--check", "cnn_classifier", "--baseline", old, "--fail-on", "never",
                    "--fail-on-regression", "0.1"], capsys).code == 1
    assert run_cli(["--check", "cnn_classifier", "--baseline", old, "--fail-on", "never",
                    "--fail-on-regression", "1000"], capsys).code == 0


def _printed_step_change(text: str) -> float:
    """The step time's change the text report prints ("step time A → B (+12.3%)"), in percent."""
    m = re.search(r"^  step time .* \(([+-]\d+\.\d)%\)$", text, re.MULTILINE)
    assert m, text
    return float(m.group(1))


def _slow_and_fast(tmp_path, monkeypatch) -> tuple[str, str]:
    """Two CNN profiles of the sample, the second with the all-reduce and the convs twice as fast;
    the working directory is the project holding ``cnn_classifier``."""
    proj = tmp_path / "proj"
    src = copy_sample_sources(proj / "cnn_classifier")
    slow = single_rank(CnnKnobs())
    fast = replace(slow, allreduce_us=slow.allreduce_us / 2, conv_us=(slow.conv_us[0] / 2, slow.conv_us[1] / 2))
    write_cnn_profiles(src, proj / "runs" / "slow", slow)
    write_cnn_profiles(src, proj / "runs" / "fast", fast)
    monkeypatch.chdir(proj)
    slow_dir, fast_dir = (str(next((proj / "runs" / n).glob("*_ascend_pt"))) for n in ("slow", "fast"))
    return slow_dir, fast_dir


def test_fail_on_regression_reads_the_printed_step_change(tmp_path, monkeypatch, capsys):
    """--fail-on-regression decides on the step change the report prints: a slower step fails
    above the printed figure and passes at it; a faster step passes even at 0 %."""
    slow_dir, fast_dir = _slow_and_fast(tmp_path, monkeypatch)

    def check(current: str, baseline: str, pct: float) -> tuple[int, float]:
        r = run_cli(["--check", "cnn_classifier", "--profile", current, "--baseline", baseline,
                     "--fail-on", "never", "--fail-on-regression", str(pct)], capsys)
        assert r.code in (0, 1), r.err
        return r.code, _printed_step_change(r.out)

    code, printed = check(slow_dir, fast_dir, 0)  # the step regressed: beyond 0 %, it fails
    assert printed > 0 and code == 1
    assert check(slow_dir, fast_dir, printed) == (0, printed)  # not more than the printed figure: passes
    # between the exact change (the JSON document's) and the printed one, the printed one decides
    doc = json.loads(run_cli(["--check", "cnn_classifier", "--profile", slow_dir, "--baseline", fast_dir,
                              "--format", "json", "--fail-on", "never"], capsys).out)
    exact = doc["baseline"]["step_change"] * 100
    assert exact != printed and round(exact, 1) == printed
    between = (exact + printed) / 2
    assert check(slow_dir, fast_dir, between) == (int(printed > between), printed)
    code, printed = check(fast_dir, slow_dir, 0)  # the step got faster
    assert printed < 0 and code == 0


def test_fail_on_regression_decides_on_the_report_already_built(tmp_path, monkeypatch, capsys):
    """With --fail-on-regression the Report view model is built once per run, in every format: the
    exit status reads the rows the report printed, not a second build of them."""
    from msprof_lsp.server.analysis.views.rows import Report

    slow_dir, fast_dir = _slow_and_fast(tmp_path, monkeypatch)
    built: list[Report] = []
    init = Report.__init__

    def counting_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(Report, "__init__", counting_init)
    for fmt in ("text", "concise", "github", "json", "sarif", "html"):
        built.clear()
        r = run_cli(["--check", "cnn_classifier", "--profile", slow_dir, "--baseline", fast_dir, "--format", fmt,
                     "--fail-on", "never", "--fail-on-regression", "0"], capsys)
        assert r.code == 1, (fmt, r.err)  # the step regressed beyond 0 %
        assert len(built) == 1, fmt


def _codes(doc) -> set[str]:
    return {f["code"] for f in doc["findings"]}


def _folded(doc) -> set[str]:
    """Codes folded into another finding as the same cause (hints.consolidate)."""
    return {c for f in doc["findings"] for c in f["evidence"].get("same_cause", [])}


def test_select_and_ignore_filter_rule_codes(project, capsys):
    everything = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never"], capsys).out)
    codes = _codes(everything)
    assert {"NPU102", "NPU104"} <= codes, codes  # the sample's seed problems
    seen = codes | _folded(everything)
    only = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never", "--select", "NPU102"], capsys).out)
    assert _codes(only) == {"NPU102"} and not _folded(only)  # what it folded in is selected out
    prefix = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never", "--select", "NPU10"], capsys).out)
    assert {c for c in codes if c.startswith("NPU10")} <= _codes(prefix) | _folded(prefix)
    assert _codes(prefix) | _folded(prefix) <= {c for c in seen if c.startswith("NPU10")}
    without = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never",
                                  "--ignore", "NPU102,NPU9"], capsys).out)
    rest = {c for c in seen if c != "NPU102" and not c.startswith("NPU9")}
    # an ignored rule appears nowhere; what it had folded in stands on its own again
    assert {c for c in codes if c in rest} <= _codes(without) <= rest and "NPU102" not in _folded(without)


def test_fail_on_thresholds(project, capsys):
    doc = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never"], capsys).out)
    severities = {f["severity"] for f in doc["findings"]}
    assert "warning" in severities and "error" not in severities  # performance is never an error
    assert run_cli(["--check", ".", "--fail-on", "never"], capsys).code == 0
    assert run_cli(["--check", ".", "--fail-on", "error"], capsys).code == 0
    assert run_cli(["--check", ".", "--fail-on", "warning"], capsys).code == 1
    assert run_cli(["--check", "."], capsys).code == 1  # default: warning
    assert run_cli(["--check", ".", "--fail-on", "hint"], capsys).code == 1
    # Only info-level codes selected: warning threshold passes, info threshold fails.
    info_codes = sorted({f["code"] for f in doc["findings"] if f["severity"] == "info"})
    assert info_codes
    sel = ",".join(info_codes)
    info_only = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never", "--select", sel], capsys).out)
    if {f["severity"] for f in info_only["findings"]} == {"info"}:
        assert run_cli(["--check", ".", "--select", sel, "--fail-on", "warning"], capsys).code == 0
        assert run_cli(["--check", ".", "--select", sel, "--fail-on", "info"], capsys).code == 1


def test_pyproject_settings_apply_and_flags_win(project, capsys):
    (project / "pyproject.toml").write_text('[tool.msprof-lsp]\nignore = ["NPU102"]\nmin-share = 0.0\n')
    doc = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never"], capsys).out)
    assert "NPU102" not in _codes(doc)
    doc = json.loads(run_cli(["--check", ".", "--format", "json", "--fail-on", "never", "--select", "NPU102", "--ignore", ""], capsys).out)
    # --ignore "" on the command line replaces the file's list
    assert _codes(doc) == {"NPU102"}
    (project / "pyproject.toml").write_text('[tool.msprof-lsp]\nbogus-key = 1\n')
    r = run_cli(["--check", ".", "--format", "json", "--fail-on", "never"], capsys)
    assert r.code == 0 and "unknown setting 'bogus-key'" in r.err


def test_color_always_and_never(project, capsys):
    coloured = run_cli(["--check", ".", "--fail-on", "never", "--color", "always"], capsys).out
    assert "\x1b[" in coloured
    plain = run_cli(["--check", ".", "--fail-on", "never", "--color", "never"], capsys).out
    assert "\x1b[" not in plain


def test_real_library_model_maps_with_a_site_packages_path_map(capsys):
    """The issue's reproduction on the real AlexNet export: ``--check <workspace holding
    torchvision/models/alexnet.py> --path-map <recorded site-packages>=<workspace>``."""
    ws = shared_fixture("Ascend-msinsight/workspace")
    prof = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt")
    site = "/home/z30057886/.local/lib/python3.9/site-packages"
    r = run_cli(["--check", str(ws), "--profile", str(prof), "--no-cache", "--format", "json", "--fail-on", "never",
                 "--path-map", f"{site}={ws}"], capsys)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["hotspots"] and all(h["path"].endswith("torchvision/models/alexnet.py") for h in doc["hotspots"])
    # the first Conv2d of self.features (line 48 runs the Sequential): forward and backward kernels
    top = doc["hotspots"][0]
    assert (top["line"], round(top["device_time_us"], 1)) == (22, 872.3)


def test_the_imports_leave_the_collectors_scans_once_per_process(monkeypatch):
    """``--check`` freezes what exists before its first run (gc.freeze, as the NPU230 fix does
    before a loop): a full collection during a run walked the imports' objects; never again after
    (a process that checks many times freezes nothing it made since)."""
    import gc

    from msprof_lsp.server.check import command

    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))
    monkeypatch.setattr(command, "_imports_frozen", False)
    command._freeze_imports()
    command._freeze_imports()
    assert calls == [1] and command._imports_frozen
