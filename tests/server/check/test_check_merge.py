"""One finding per (code, place) when a folder holds a Kineto and an NPU profile of one source:
the CNN sample ships both, and every shared finding, fix and SARIF result came out twice."""

from __future__ import annotations

import collections
import json

import pytest

from cli_support import CNN_SAMPLE

pytestmark = pytest.mark.skipif(
    not (CNN_SAMPLE / "kineto").is_dir() or not (CNN_SAMPLE / "npu_profile").is_dir(),
    reason="the CNN sample's committed Kineto and NPU profiles are not in this checkout",
)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    import io
    from contextlib import redirect_stdout

    from msprof_lsp.server.__main__ import main

    out = {}
    for fmt in ("json", "sarif"):
        buf = io.StringIO()
        with redirect_stdout(buf):
            code = main(["--check", str(CNN_SAMPLE), "--format", fmt, "--fail-on", "never", "--no-cache"])
        assert code == 0
        out[fmt] = json.loads(buf.getvalue())
    return out


def test_each_code_and_place_once_naming_both_profiles(reports):
    doc = reports["json"]
    kinds = sorted(p["kind"] for p in doc["profiles"])
    assert len(kinds) == 2 and len(set(kinds)) == 2  # one Kineto, one torch_npu profile
    placed = collections.Counter((f["code"], f["path"], f["line"]) for f in doc["findings"] if f["path"])
    assert placed and max(placed.values()) == 1
    both = [f for f in doc["findings"] if "profiles" in f["evidence"]]
    assert {f["code"] for f in both} >= {"NPU220", "NPU104"}  # found in either profile
    names = {p["path"] for p in doc["profiles"]}
    for f in both:
        seen = f["evidence"]["profiles"]
        assert {s["path"] for s in seen} == names
        assert all(0 <= s["share"] <= 1 for s in seen)
        # the finding is as severe as its most severe copy
        rank = {"hint": 0, "info": 1, "warning": 2, "error": 3}
        assert rank[f["severity"]] == max(rank[s["severity"]] for s in seen)
        assert f["profile_path"] == seen[0]["path"]  # listed under the profile whose numbers it shows
    titles = [x["title"] for f in both for x in f["fixes"]]
    assert len(titles) == len(set(titles))


def test_optimizer_alternatives_are_one_group_with_the_npu_one_added(reports):
    (opt,) = [f for f in reports["json"]["findings"] if f["code"] == "NPU220"]
    groups = {x["group"] for x in opt["fixes"]}
    assert len(opt["fixes"]) == 2 and len(groups) == 1 and None not in groups
    assert any("NpuFusedSGD" in x["title"] for x in opt["fixes"]) and any("fused=True" in x["title"] for x in opt["fixes"])


def test_sarif_results_once(reports):
    (run,) = reports["sarif"]["runs"]
    places = collections.Counter(
        (r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
         r["locations"][0]["physicalLocation"]["region"]["startLine"])
        for r in run["results"] if "locations" in r
    )
    assert places and max(places.values()) == 1
    opt = [r for r in run["results"] if r["ruleId"] == "NPU220"]
    assert len(opt) == 1 and len({fx["properties"]["group"] for fx in opt[0]["fixes"]}) == 1
    assert len({r["partialFingerprints"]["msprofFinding/v1"] for r in run["results"]}) == len(run["results"])
