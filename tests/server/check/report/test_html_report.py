"""``--check --format html`` rendered by headless chromium: the page draws (the timeline canvas is
not blank in the screenshot), holds the expected elements in the counts the profile itself gives
(breakdown bars = steps x ranks, timeline lanes = streams + host thread, heatmap cells = ranks²,
hotspot rows), and a click on the hot kernel, dispatched at its drawn coordinates through the
page's own hit test (the ``#selftest=click`` hook), resolves to that kernel's source line.

The counts are taken from the profile files and the loaded tables, not from the report model.
With ``MSPROF_LSP_WRITE_IMAGES=1`` the screenshots are written to docs/images/ (docs/report.md).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from msprof_lsp.mapping.profile.discover import find_all
from msprof_lsp.mapping.profile.load import load_location
from msprof_lsp.mapping.profile.timemodel import TaskClass, task_classes
from msprof_lsp.server.analysis import run as analysis_run
from msprof_lsp.server.__main__ import main
from msprof_lsp.server.analysis.settings import Settings
from tests.conftest import FIXTURES

REPO = Path(__file__).resolve().parents[4]
IMAGES = REPO / "docs" / "images"
WINDOW = (1280, 1700)
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs Debian's chromium)")


@dataclass(frozen=True)
class Case:
    name: str
    sources: str  # relative to the repository
    profile: str  # relative to the repository, or absolute (fixtures)
    image: str | None = None  # committed screenshot name under docs/images/


CASES = [
    Case("cnn_npu_2rank", "samples/cnn_classifier", "samples/cnn_classifier/npu_profile", "report-cnn-npu-2rank.png"),
    Case("cnn_kineto", "samples/cnn_classifier", "samples/cnn_classifier/kineto", "report-cnn-kineto.png"),
    Case("transformer_npu", "samples/tiny_transformer", "samples/tiny_transformer/npu_profile", "report-transformer-npu.png"),
    Case("transformer_kineto", "samples/tiny_transformer", "samples/tiny_transformer/kineto"),
    Case("msinsight_2rank_real", "samples/cnn_classifier", str(FIXTURES / "Ascend-msinsight" / "text" / "level1")),
]


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={WINDOW[0]},{WINDOW[1]}", "--force-device-scale-factor=1", *args],
                          capture_output=True, text=True, timeout=120, check=False)


class _Dom(HTMLParser):
    """Start tags with their attributes, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def having(self, cls: str) -> list[dict[str, str]]:
        return [a for _, a in self.tags if cls in a.get("class", "").split()]

    def by_id(self, id_: str) -> dict[str, str]:
        return next(a for _, a in self.tags if a.get("id") == id_)


def png_rgb(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


# ---------------------------------------------------------------------------------------------
# What the profile says, independently of the report model


def _steps_of(profile, path: Path) -> int:  # noqa: ANN001
    """Steps of one rank: the Step rows of its step_trace_time.csv where the producer wrote one,
    else the distinct step ids of its compute/communication tasks (none: no device tasks)."""
    for csv_path in path.rglob("step_trace_time.csv"):
        with csv_path.open(newline="", encoding="utf-8") as fh:
            return len({row["Step"] for row in csv.DictReader(fh)})
    k = profile.kernels
    work = np.isin(task_classes(k), [int(TaskClass.COMPUTE), int(TaskClass.COMMUNICATION)])
    steps = k["step"].to_numpy()[work]
    return len(set(steps[steps >= 0].tolist())) or int(work.any())


def _slowest_step(path: Path) -> int | None:
    """The step with the longest Stage in the analysed rank's step_trace_time.csv (the producer's figure)."""
    for csv_path in path.rglob("step_trace_time.csv"):
        with csv_path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        return int(max(rows, key=lambda r: float(r["Stage"]))["Step"])
    return None


def _step_time(path: Path) -> float | None:
    """Computing + Communication(Not Overlapped) + Free per step, as step_trace_time.csv writes them."""
    for csv_path in path.rglob("step_trace_time.csv"):
        with csv_path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        return sum(float(r["Computing"]) + float(r["Communication(Not Overlapped)"]) + float(r["Free"]) for r in rows) / len(rows)
    return None


def _matrix_ranks(paths: list[Path]) -> int:
    ranks: set[int] = set()
    for p in paths:
        for f in p.rglob("communication_matrix.json"):
            for step in json.loads(f.read_text(encoding="utf-8")).values():
                for kind in step.values():
                    for op, links in kind.items():
                        if "-total@" in op:
                            for key in links:
                                ranks.update(int(x) for x in key.split("-"))
    return len(ranks)


def _expected(case: Case, tmp_path: Path) -> dict[str, object]:
    profile_dir = Path(case.profile) if Path(case.profile).is_absolute() else REPO / case.profile
    locations = find_all([profile_dir])
    settings = Settings(base_dir=str(REPO))
    analysis = analysis_run.analyse_paths([REPO / case.sources], settings, profile=profile_dir, use_cache=False)[0]
    profile, attribution = analysis.profile, analysis.attribution
    analysed = Path(profile.meta.path)
    rank_dirs = [Path(loc.path) for loc in locations]
    bars = sum(_steps_of(load_location(loc, use_cache=False), Path(loc.path)) for loc in locations)
    k = profile.kernels
    step = _slowest_step(analysed)
    if step is None and len(k) == 0 and profile.steps:
        step = max(profile.steps, key=lambda s: s.dur_ns).id  # a host-only trace: its longest ProfilerStep
    streams = {(int(d), int(s)) for d, s, st in zip(k["device"], k["stream"], k["step"]) if step is None or st == step}
    ops = profile.host_ops
    names = ops["name"].astype(str)
    mark = ops.index[names == f"ProfilerStep#{step}"] if step is not None else []
    # the host thread's ops directly inside the step's ProfilerStep range (or at the top)
    in_step = (ops["parent"].isin(list(mark)) if len(mark) else ops["parent"] < 0) & ~names.str.startswith("ProfilerStep#")
    lanes = len(streams) + int(bool(in_step.any()))
    # the hot kernel: the longest task of the step linked to a source line (host ops without device tasks)
    if len(k):
        rows = np.flatnonzero((k["step"].to_numpy() == step) if step is not None else np.ones(len(k), bool))
        sites = attribution.kernel_site[rows]
        durs = k["dur_ns"].to_numpy()[rows]
    else:
        rows = np.flatnonzero(in_step.to_numpy())
        sites = attribution.op_site[rows]
        durs = ops["dur_ns"].to_numpy()[rows]
    linked = sites >= 0
    hot = None
    if linked.any():
        site = attribution.sites[int(sites[linked][int(np.argmax(durs[linked]))])]
        hot = f"{os.path.relpath(site.span.path, REPO)}:{site.span.line}"
    json_out = tmp_path / "report.json"
    assert main(["--check", str(REPO / case.sources), "--profile", str(profile_dir), "--format", "json",
                 "--output", str(json_out), "--no-cache", "-q", "--fail-on", "never"]) == 0
    doc = json.loads(json_out.read_text(encoding="utf-8"))
    times = {loc.rank: _step_time(Path(loc.path)) for loc in locations}
    slowest = max(times, key=lambda r: times[r] or 0.0) if all(times.values()) else None
    return {"ranks": len(locations), "slowest": slowest, "bars": bars, "lanes": lanes, "step": step, "cells": _matrix_ranks(rank_dirs) ** 2,
            "hotspots": len(doc["hotspots"]), "hot": hot, "multi": len(locations) > 1,
            "start": [doc["findings"][i]["code"] for i in doc["start_here"]]}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_html_report_renders_with_the_profiles_counts(case: Case, tmp_path: Path, monkeypatch) -> None:
    if Path(case.profile).is_absolute() and not Path(case.profile).is_dir():
        pytest.skip(f"real profiler fixture {case.profile} not found (../shared is absent)")
    monkeypatch.chdir(REPO)
    expected = _expected(case, tmp_path)
    page = tmp_path / "report.html"
    assert main(["--check", case.sources, "--profile", case.profile, "--format", "html", "--output", str(page),
                 "--no-cache", "-q", "--fail-on", "never"]) == 0
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text  # nothing to fetch

    dom_run = chromium("--dump-dom", page.as_uri() + "#selftest=click")
    assert dom_run.returncode == 0, dom_run.stderr[-2000:]
    dom = _Dom()
    dom.feed(dom_run.stdout)
    root = dom.by_id("msprof-report")
    assert root.get("data-rendered") == "true", "the renderer did not run"

    # the page opens with "Start here": the JSON's start_here, in its order
    assert [a["data-code"] for a in dom.having("msprof-start-item")] == expected["start"]
    if expected["start"]:
        assert dom_run.stdout.index("class=\"msprof-start-here\"") < dom_run.stdout.index("class=\"msprof-job\"")
    assert len(dom.having("msprof-bar")) == expected["bars"]
    lanes = dom.having("msprof-lane")
    assert len(lanes) == expected["lanes"], [a["data-lane"] for a in lanes]
    assert sum(a["data-kind"] == "host" for a in lanes) <= 1
    if expected["step"] is not None:
        assert root["data-canvas-step"] == str(expected["step"])  # the slowest step is shown first
    assert len(dom.having("msprof-cell")) == expected["cells"]
    ranks = dom.having("msprof-rank-bar")
    if expected["multi"]:
        assert len(ranks) == expected["ranks"]
        assert [a["data-rank"] for a in ranks if "data-slowest" in a] == [str(expected["slowest"])]
    assert len(dom.having("msprof-hotspot")) == expected["hotspots"]
    if expected["hot"] is None:
        assert root["data-selftest"] == "no linked task"
    else:
        assert root.get("data-opened") == expected["hot"], root

    shot = tmp_path / "report.png"
    shot_run = chromium(f"--screenshot={shot}", page.as_uri())
    assert shot_run.returncode == 0 and shot.is_file(), shot_run.stderr[-2000:]
    x, y, w, h = (int(v) for v in root["data-canvas-rect"].split(","))
    assert y + h <= WINDOW[1], "the timeline is below the screenshot"
    canvas = png_rgb(shot)[y:y + h, x:x + w].reshape(-1, 3)
    assert canvas.std(axis=0).max() > 10, "the timeline canvas is blank"
    colours = {tuple(c) for c in canvas[::7].tolist()}
    assert len(colours) >= 3  # background, text, at least one class colour
    if "npu" in case.name or "msinsight" in case.name:
        assert (0x3F, 0x7F, 0xD8) in colours, "no compute-coloured task drawn"
    if case.image and os.environ.get("MSPROF_LSP_WRITE_IMAGES") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, IMAGES / case.image)


def test_the_page_carries_a_csp_and_escapes_the_model() -> None:
    """A hostile op name cannot close the model's script element; the page allows only its own
    nonce'd script and style and no network source."""
    from msprof_lsp.server.analysis.views import model
    from msprof_lsp.server.check.report import html

    bad = "</script><script>alert(1)</script><!--"
    m = model.ReportModel(version=model.MODEL_VERSION, tool_version="t", base="", jobs=[])
    page = html.page(m)
    payload = html.model_json(model.ReportModel(version=1, tool_version=bad, base=bad, jobs=[]))
    assert "<" not in payload and json.loads(payload)["tool_version"] == bad
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    nonce = re.search(r"'nonce-([^']+)'", csp).group(1)
    assert csp.startswith("default-src 'none'")
    assert page.count(f'nonce="{nonce}"') == 2  # the one script and the one style
    assert len(re.findall(r"<script(?![^>]*application/json)", page)) == 1
