"""`--check` expands the fix offers of each file from one parse of it: on the tiny transformer
sample (real catalog, its torch_npu profile) the fixes' one parse helper
(``hints.fixes.cst_tools.Source``) runs once per file that has offers, and the fixes the report
prints are edits of exactly those files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from msprof_lsp.hints.fixes import cst_tools

from cli_support import isolated_cache  # noqa: F401 - autouse fixture
from cli_support import REPO, run_cli

SAMPLE = REPO / "samples" / "tiny_transformer"


def test_check_parses_each_file_with_fixes_once(tmp_path, monkeypatch, capsys):
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("model.py", "train.py"):
        shutil.copy2(SAMPLE / name, proj / name)
    shutil.copytree(SAMPLE / "npu_profile", proj / "npu_profile")
    parsed: list[str] = []
    real = cst_tools.Source.__init__

    def counted(self, text: str) -> None:  # noqa: ANN001
        parsed.append(text)
        real(self, text)

    monkeypatch.setattr(cst_tools.Source, "__init__", counted)
    cst_tools._parse.cache_clear()  # a Source another test parsed from the same text would hide a parse
    monkeypatch.chdir(proj)
    r = run_cli(["--check", ".", "--format", "json", "--fail-on", "never", "--no-cache"], capsys)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    findings = [f for job in doc.get("jobs", [doc]) for f in job["findings"]]
    fixed = {e["path"] for f in findings for fix in f["fixes"] for e in fix["edits"]}
    tried = fixed | {f["path"] for f in findings if "no_fix" in f.get("evidence", {})}
    assert {"train.py"} <= fixed  # NPU104 / NPU220 fixes edit the training script
    texts = {(proj / p).read_text(encoding="utf-8") for p in tried}
    assert len(parsed) == len(set(parsed)) == len(tried)  # one parse per file with offers, none twice
    assert set(parsed) == texts
