"""A real editor: Neovim 0.7 (Debian's package) headless, attached to the server, on the CNN
sample. Skipped when ``nvim`` is not installed (``.ci/run`` installs it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import lsp_support as S

NVIM = shutil.which("nvim")
pytestmark = pytest.mark.skipif(NVIM is None, reason="nvim is not installed (apt-get install neovim)")


def test_neovim_shows_the_diagnostics_and_offers_fixes(tmp_path: Path) -> None:
    root = S.cnn_workspace(tmp_path / "ws")
    model = root / "model.py"
    # Chinese text and an emoji before a call on the hot line: Neovim counts bytes, LSP UTF-16
    text = model.read_text(encoding="utf-8")
    needle = "x = self.drop(self.act("
    text = text.replace(needle, 'tag = "中文😋"; ' + needle, 1)
    model.write_text(text, encoding="utf-8")
    out = tmp_path / "result.json"
    env = {
        **os.environ,
        "MSPROF_OUT": str(out),
        "MSPROF_WANT": "5",
        "MSPROF_ROOT": str(root),
        "MSPROF_CMD": json.dumps(S.SERVER_COMMAND),
        "MSPROF_INIT": json.dumps(S.init_options(tmp_path)),
        "XDG_STATE_HOME": str(tmp_path / "state"),  # Neovim's LSP log stays in the test folder
        "XDG_CACHE_HOME": str(tmp_path / "cache-home"),
    }
    proc = subprocess.run(
        [NVIM, "--headless", "--clean", "-c", f"luafile {S.HERE / 'nvim_collect.lua'}", str(model)],
        cwd=root, env=env, capture_output=True, timeout=120,
    )
    assert out.is_file(), f"nvim wrote no result (rc {proc.returncode}): {proc.stderr.decode(errors='replace')[-2000:]}"
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["error"] is None, result["error"]

    lines = text.split("\n")
    got = {(d["code"], d["lnum"], d["col"], d["end_lnum"], d["end_col"]) for d in result["diagnostics"]}
    hot = S.hot_model_lines(text, S.cnn_truth_shares(0))
    want = set()
    for code, l0, c0, l1, c1 in S.expected_cnn(text, hot):
        # expected_cnn gives UTF-16 columns; Neovim reports byte columns
        def to_bytes(line0: int, units: int) -> int:
            line, n, i = lines[line0], 0, 0
            while n < units:
                n += 2 if ord(line[i]) > 0xFFFF else 1
                i += 1
            return len(line[:i].encode("utf-8"))

        want.add((code, l0, to_bytes(l0, c0), l1, to_bytes(l1, c1)))
    assert got == want
    drop = next(d for d in result["diagnostics"] if d["code"] == S.PAIR and d["lnum"] == S.line_of(text, needle) - 1)
    assert drop["col"] == lines[drop["lnum"]].encode("utf-8").index(b"self.drop(")
    assert all(d["source"] == "msprof-lsp" for d in result["diagnostics"])

    actions = result["actions"]
    assert actions, "no code actions came back"
    first_codes = {d["code"] for d in result["diagnostics"] if d["lnum"] == result["action_line"]}
    assert any(a["title"].endswith("Disable for this line") for a in actions)
    assert all(a["title"].startswith("msprof") for a in actions)
    assert {a["title"].split("(")[1].split(")")[0] for a in actions if a["title"].startswith("msprof (")} <= first_codes
    # Neovim 0.7 declares resolveSupport for edit + dataSupport: edits come with codeAction/resolve
    assert all(a["has_data"] and not a["has_edit"] for a in actions if a["kind"] == "quickfix")
