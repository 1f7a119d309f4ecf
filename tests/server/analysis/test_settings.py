"""server.settings robustness: a repository's pyproject.toml may be broken or hostile. Every bad
value is one warning naming the file and the key, and the default stays; write locations are never
taken from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprof_lsp.hints.config import Thresholds
from msprof_lsp.server.lsp.configuration import base_settings
from msprof_lsp.hints.config import SettingSpec
from msprof_lsp.server.analysis.settings import SETTINGS, Settings, apply, from_pyproject


def _pyproject(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "pyproject.toml"
    p.write_text(body, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("key", "setting", "text"),
    [
        ("small-kernel-us", "small_kernel_us", "nan"),
        ("free-max-percent", "free_max_percent", "inf"),
        ("gc-min-us", "gc_min_us", "-inf"),
        ("cube-min-bytes", "cube_min_bytes", "1" + "0" * 400),
    ],
)
def test_non_finite_thresholds_are_rejected(tmp_path: Path, key: str, setting: str, text: str) -> None:
    p = _pyproject(tmp_path, f"[tool.msprof-lsp]\n{key} = {text}\n")
    settings, warnings = from_pyproject(Settings(), p)
    assert getattr(settings.thresholds, setting) == getattr(Thresholds(), setting)
    assert len(warnings) == 1 and str(p) in warnings[0] and repr(key) in warnings[0]
    assert "finite" in warnings[0]


def test_non_finite_min_share_is_rejected(tmp_path: Path) -> None:
    p = _pyproject(tmp_path, "[tool.msprof-lsp]\nmin-share = nan\n")
    settings, warnings = from_pyproject(Settings(), p)
    assert settings.min_share == Settings().min_share
    assert len(warnings) == 1 and str(p) in warnings[0] and "'min-share'" in warnings[0]


def test_finite_thresholds_still_apply(tmp_path: Path) -> None:
    p = _pyproject(tmp_path, "[tool.msprof-lsp]\nsmall-kernel-us = 80.5\ngc-min-us = 0\n")
    settings, warnings = from_pyproject(Settings(), p)
    assert warnings == [] and settings.thresholds.small_kernel_us == 80.5 and settings.thresholds.gc_min_us == 0


@pytest.mark.parametrize("body", ["tool = 5\n", "tool = [1, 2]\n", 'tool = "x"\n'])
def test_tool_that_is_not_a_table(tmp_path: Path, body: str) -> None:
    p = _pyproject(tmp_path, body)
    settings, warnings = from_pyproject(Settings(), p)
    assert settings == Settings()
    assert len(warnings) == 1 and str(p) in warnings[0] and "[tool] is not a table" in warnings[0]


def test_msprof_table_that_is_not_a_table(tmp_path: Path) -> None:
    p = _pyproject(tmp_path, '[tool]\n"msprof-lsp" = 5\n')
    settings, warnings = from_pyproject(Settings(), p)
    assert settings.thresholds == Settings().thresholds and settings.select == ()
    assert len(warnings) == 1 and str(p) in warnings[0]


@pytest.mark.parametrize(
    "value",
    ['["/remote\\u0000x=/local"]', '["/remote=/lo\\u0000cal"]', '[{remote = "/r\\u0000", local = "/l"}]',
     '{"/r\\u0000" = "/l"}'],
)
def test_nul_in_a_path_mapping(tmp_path: Path, value: str) -> None:
    p = _pyproject(tmp_path, f"[tool.msprof-lsp]\npath-mappings = {value}\n")
    settings, warnings = from_pyproject(Settings(), p)
    assert settings.path_mappings == ()
    assert len(warnings) == 1 and str(p) in warnings[0] and "'path-mappings'" in warnings[0]
    assert "NUL" in warnings[0]


@pytest.mark.parametrize("key", ["profile", "baseline"])
def test_nul_in_a_path_setting(tmp_path: Path, key: str) -> None:
    p = _pyproject(tmp_path, f'[tool.msprof-lsp]\n{key} = "runs/\\u0000x"\n')
    settings, warnings = from_pyproject(Settings(), p)
    assert getattr(settings, key) == ""
    assert len(warnings) == 1 and str(p) in warnings[0] and "NUL" in warnings[0]


@pytest.mark.parametrize("value", ['".msprof-cache"', '"../elsewhere"', '"/tmp/anywhere"'])
def test_cache_dir_is_never_taken_from_a_workspace(tmp_path: Path, value: str) -> None:
    p = _pyproject(tmp_path, f"[tool.msprof-lsp]\ncache-dir = {value}\nselect = [\"NPU1\"]\n")
    for settings, warnings in (from_pyproject(Settings(), p), base_settings(tmp_path)):
        assert settings.cache_dir == ""
        assert settings.select == ("NPU1",)  # the rest of the table still applies
        assert len(warnings) == 1 and str(p) in warnings[0] and "'cache-dir'" in warnings[0]
        assert "user setting" in warnings[0]


def test_cache_dir_from_the_user_must_be_absolute(tmp_path: Path) -> None:
    settings, warnings = apply(Settings(), {"cacheDir": "rel/cache"}, "initializationOptions")
    assert settings.cache_dir == "" and len(warnings) == 1 and "absolute" in warnings[0]
    settings, warnings = apply(Settings(), {"cacheDir": str(tmp_path / "c")}, "initializationOptions")
    assert warnings == [] and settings.cache_dir == str(tmp_path / "c")
    settings, warnings = apply(Settings(), {"cacheDir": "~/c"}, "workspace/configuration")
    assert warnings == [] and settings.cache_dir == "~/c"


@pytest.mark.parametrize(
    ("key", "setting", "text", "why"),
    [
        ("cube-align", "cube_align", "0", "at least 1"),  # NPU106 takes shapes modulo this
        ("fa-align", "fa_align", "64.5", "whole number"),
        ("accum-steps", "accum_steps", "2.5", "whole number"),  # the NPU102 fix writes it into code
        ("dataloader-workers", "dataloader_workers", "0", "at least 1"),
        ("free-max-percent", "free_max_percent", "150", "between 0 and 100"),
        ("gc-min-us", "gc_min_us", "-1", "at least 0"),
    ],
)
def test_thresholds_out_of_their_range(tmp_path: Path, key: str, setting: str, text: str, why: str) -> None:
    p = _pyproject(tmp_path, f"[tool.msprof-lsp]\n{key} = {text}\n")
    settings, warnings = from_pyproject(Settings(), p)
    assert getattr(settings.thresholds, setting) == getattr(Thresholds(), setting)
    assert len(warnings) == 1 and str(p) in warnings[0] and repr(key) in warnings[0] and why in warnings[0]


def test_whole_float_for_an_integer_threshold_becomes_an_int(tmp_path: Path) -> None:
    p = _pyproject(tmp_path, "[tool.msprof-lsp]\naccum-steps = 8.0\ncube-align = 512\n")
    settings, warnings = from_pyproject(Settings(), p)
    assert warnings == []
    assert settings.thresholds.accum_steps == 8 and type(settings.thresholds.accum_steps) is int
    assert settings.thresholds.cube_align == 512


# -- the model drives the conversion --------------------------------------------------------------


@pytest.mark.parametrize("spec", SETTINGS, ids=lambda s: s.key)
def test_every_default_passes_its_own_check_from_both_spellings(spec: SettingSpec) -> None:
    default = list(spec.default) if isinstance(spec.default, tuple) else spec.default
    for key in (spec.key, spec.toml_key):
        settings, warnings = apply(Settings(), {key: default}, "initializationOptions")
        assert warnings == [] and settings == Settings()


NUMBERS = [s for s in SETTINGS if s.minimum is not None and s.base in (int, float)]


@pytest.mark.parametrize("spec", NUMBERS, ids=lambda s: s.key)
def test_every_range_comes_from_the_model(spec: SettingSpec) -> None:
    def owner(settings: Settings) -> object:
        return getattr(settings, spec.group) if spec.group else settings

    assert spec.minimum is not None
    settings, warnings = apply(Settings(), {spec.key: spec.minimum}, "initializationOptions")
    assert warnings == [] and getattr(owner(settings), spec.name) == spec.minimum
    step = 1 if spec.integer else 0.5
    # an optional integer (rank) also takes its text from a text box: "3", and "" for none
    bad = [spec.minimum - step, True, float("nan"), *(["-1", "x", []] if spec.optional else ["12", None])]
    if spec.maximum is not None:
        bad.append(spec.maximum + step)
    for value in bad:
        settings, warnings = apply(Settings(), {spec.key: value}, "workspace/configuration")
        assert getattr(owner(settings), spec.name) == getattr(owner(Settings()), spec.name), value
        assert len(warnings) == 1 and "workspace/configuration" in warnings[0] and repr(spec.key) in warnings[0]


def test_rank_from_text() -> None:
    assert apply(Settings(), {"rank": "3"}, "o")[0].rank == 3
    assert apply(Settings(rank=2), {"rank": ""}, "o") == (Settings(), [])


def test_unknown_and_wrongly_typed_keys(tmp_path: Path) -> None:
    p = _pyproject(tmp_path, '[tool.msprof-lsp]\nsmall-kernel-ms = 3\ncode-lens = "yes"\ncompile-backend = "xla"\n'
                             'aicpu-min-us = "20"\nselect = [1]\n1 = 2\nfa-align = 64\n')
    settings, warnings = from_pyproject(Settings(), p)
    assert settings.thresholds == Thresholds(fa_align=64) and settings.code_lens is True
    assert settings.compile_backend == "auto" and settings.select == ()
    assert len(warnings) == 6 and all(str(p) in w for w in warnings)
    text = "\n".join(warnings)
    for needle in ("unknown setting 'small-kernel-ms'", "'code-lens': expected true or false",
                   "'compile-backend': expected auto, npu or inductor", "'aicpu-min-us': expected a number",
                   "'select': expected a list of strings", "unknown setting '1'"):
        assert needle in text


def test_thresholds_reach_the_rules() -> None:
    settings, warnings = apply(Settings(), {"smallKernelUs": 80, "accum-steps": 2}, "command line")
    assert warnings == []
    assert settings.rule_config().thresholds == Thresholds(small_kernel_us=80, accum_steps=2)
    assert Settings().rule_config().thresholds == Thresholds()
