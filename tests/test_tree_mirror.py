"""The test tree mirrors the source tree (issue 24; tests/README.md says how).

A test of ``mapping/profile/readers/kineto.py`` lives in ``tests/mapping/profile/readers/`` and is
named ``test_kineto*.py``; a test of a package as a whole is named after the package
(``tests/server/lsp/test_lsp_*.py``). Tests that cross the tree live in the named suites below, and
the tests/ root holds only the repository-wide checks.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

# Source trees whose folders tests/ mirrors, folder for folder.
MIRRORED = ("mapping", "hints", "server", "benchmarks")

# Suites that cross the source tree, by folder (tests/README.md describes each).
SUITES = ("security", "fuzz", "hostile", "install", "synth", "nostack", "loop", "schemas")

# Repository-wide checks, the only test files at the tests/ root.
REPO_WIDE = ("test_cache_forms.py", "test_dead_code.py", "test_function_size.py", "test_layering.py",
             "test_tree_mirror.py", "test_vscode_manifest.py")

# Rules and fixes share module names (relu_dropout, aicpu, fused_api, ...) and pytest imports test
# files by basename, so their tests carry the kind: test_rule_<module>, test_fix_<module>.
KIND_PREFIX = {"hints/rules": "rule_", "hints/fixes": "fix_"}

SKIPPED_DIRS = {"__pycache__", "node_modules"}


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if not SKIPPED_DIRS & set(p.relative_to(TESTS).parts))


def _names_of(package: Path) -> set[str]:
    """What a test in the mirror of ``package`` may be named after: its modules and sub-packages,
    each with the folder's kind prefix, and the package itself."""
    prefix = KIND_PREFIX.get(package.relative_to(REPO).as_posix(), "")
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    return {prefix + m for m in modules} | {package.name}


def _misplaced(path: Path) -> str | None:
    """Why ``path`` breaks the mirror, or None."""
    rel = path.relative_to(TESTS)
    if len(rel.parts) == 1:
        return None if rel.name in REPO_WIDE else "a test file at the tests/ root that is no repository-wide check"
    top = rel.parts[0]
    if top in SUITES:
        return None
    if top not in MIRRORED:
        return f"tests/{top}/ is neither a mirrored source folder {MIRRORED} nor a declared suite {SUITES}"
    package = REPO.joinpath(*rel.parts[:-1])
    if not package.is_dir():
        return f"no source folder {package.relative_to(REPO).as_posix()}/ to mirror"
    stem = path.stem.removeprefix("test_")
    if not any(stem == name or stem.startswith(name + "_") for name in _names_of(package)):
        return f"its name starts with no module of {package.relative_to(REPO).as_posix()}/ (nor the package)"
    return None


def test_every_test_file_mirrors_a_source_module_or_is_in_a_suite() -> None:
    wrong = {str(p.relative_to(REPO)): why for p in _test_files() if (why := _misplaced(p))}
    assert not wrong, wrong


def test_the_root_holds_only_the_repository_wide_checks_and_shared_files() -> None:
    allowed = set(REPO_WIDE) | {"conftest.py", "README.md"} | set(MIRRORED) | set(SUITES)
    extra = sorted(p.name for p in TESTS.iterdir() if p.name not in allowed and p.name not in SKIPPED_DIRS)
    assert not extra, extra
    assert all((TESTS / name).is_file() for name in REPO_WIDE)
    assert all((TESTS / name).is_dir() for name in SUITES)


def test_test_file_names_are_unique() -> None:
    # Test folders are no packages: pytest imports each test file by its basename.
    seen: dict[str, list[str]] = {}
    for p in _test_files():
        seen.setdefault(p.name, []).append(str(p.relative_to(REPO)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_the_readme_names_every_suite_and_repository_wide_check() -> None:
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    missing = [name for name in (*SUITES, *REPO_WIDE) if f"`{name}" not in readme]
    assert not missing, missing


def test_the_check_fails_on_a_misplaced_file() -> None:
    # The rule itself, on names that break it: a file at the root, a module that does not exist,
    # a rule test without its kind, a folder that mirrors nothing.
    for rel in ("test_cache.py", "mapping/profile/test_no_such_module.py", "hints/rules/test_aicpu.py",
                "server/nowhere/test_nowhere.py", "misc/test_misc.py"):
        assert _misplaced(TESTS / rel), rel
    for rel in ("mapping/profile/readers/test_kineto_batches.py", "hints/rules/test_rule_aicpu.py",
                "hints/fixes/test_fixes_catalog.py", "server/lsp/test_lsp_heat.py", "security/test_anything.py"):
        assert _misplaced(TESTS / rel) is None, rel
