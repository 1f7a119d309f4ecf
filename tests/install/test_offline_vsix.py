"""The platform .vsix packages install offline (vscode-client/scripts/bundle_wheels.py builds them).

The linux-x64 package's bundled wheels go into a fresh virtual environment with
``pip install --no-index --find-links`` and no pip configuration (no index, no find-links of the
machine's), as the extension's first start does; the server installed that way answers an LSP
initialize. The linux-arm64 package holds a manylinux aarch64 wheel of every binary dependency for
each CPython it supports.

The packages are built by ``npm run package:targets`` (``.ci/run`` runs it, then these tests with
MSPROF_REQUIRE_VSIX=1, where a missing package fails instead of skipping).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VERSION = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
PYTHONS = ("cp310", "cp311", "cp312")
WHEELS = "extension/bundled/wheels/"


def vsix(target: str) -> Path:
    path = REPO / "vscode-client" / f"msprof-lsp-{target}-{VERSION}.vsix"
    if not path.is_file():
        if os.environ.get("MSPROF_REQUIRE_VSIX") == "1":
            pytest.fail(f"{path} is missing: `npm run package:targets` in vscode-client builds it")
        pytest.skip(f"{path.name} not built (npm run package:targets in vscode-client)")
    return path


def wheel_tags(name: str) -> tuple[str, str, str, list[str]]:
    """(project, python tag, abi tag, platform tags) of a wheel file name."""
    parts = name[: -len(".whl")].split("-")
    return parts[0].lower().replace("_", "-"), parts[-3], parts[-2], parts[-1].split(".")


def binary_wheels(names: list[str]) -> list[str]:
    return [n for n in names if wheel_tags(n)[3] != ["any"]]


def lsp_message(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_lsp_message(stream) -> dict:
    length = 0
    while (line := stream.readline().strip()) != b"":
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(stream.read(length))


def test_linux_x64_package_installs_offline_and_the_server_answers_initialize(tmp_path: Path) -> None:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("installs linux-x64 wheels: needs a Linux x86_64 host")
    with zipfile.ZipFile(vsix("linux-x64")) as zf:
        members = [n for n in zf.namelist() if n.startswith("extension/bundled/")]
        zf.extractall(tmp_path, members)
    bundled = tmp_path / "extension" / "bundled"
    product = bundled / f"msprof_lsp-{VERSION}-py3-none-any.whl"
    assert product.is_file(), members
    # No pip configuration and no PIP_* variables: nothing but the bundled folder can be used.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1"}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=300)
    python = venv / "bin" / "python"
    cmd = [str(python), "-I", "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-index", "--find-links", str(bundled / "wheels"), str(product)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, env=env, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    version = subprocess.run([str(venv / "bin" / "msprof-lsp"), "-V"], capture_output=True, text=True, env=env, timeout=120)
    assert version.returncode == 0 and VERSION in version.stdout, version.stdout + version.stderr

    # The server as the extension starts it (-I -m msprof_lsp.server), one initialize round-trip.
    server = subprocess.Popen([str(python), "-I", "-m", "msprof_lsp.server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    try:
        server.stdin.write(lsp_message({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}}))
        server.stdin.flush()
        reply = read_lsp_message(server.stdout)
        assert reply["id"] == 1 and "capabilities" in reply["result"], reply
        assert reply["result"]["serverInfo"]["name"] == "msprof-lsp", reply["result"].get("serverInfo")
        for message in ({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}, {"jsonrpc": "2.0", "method": "exit"}):
            server.stdin.write(lsp_message(message))
        server.stdin.flush()
        assert read_lsp_message(server.stdout)["id"] == 2
        assert server.wait(timeout=60) == 0
    finally:
        server.kill()
        server.wait()


def test_linux_arm64_package_has_aarch64_wheels_of_every_binary_dependency() -> None:
    with zipfile.ZipFile(vsix("linux-arm64")) as zf:
        names = [n[len(WHEELS) :] for n in zf.namelist() if n.startswith(WHEELS) and n.endswith(".whl")]
        manifest = json.loads(zf.read("extension/package.json"))
        vsixmanifest = zf.read("extension.vsixmanifest").decode("utf-8")
    assert 'TargetPlatform="linux-arm64"' in vsixmanifest
    assert manifest["name"] == "msprof-lsp"
    binary = binary_wheels(names)
    # Every platform-specific wheel is a manylinux aarch64 one: no x86_64, macOS or Windows wheel.
    wrong = [n for n in binary if not all(re.fullmatch(r"manylinux(_2_\d+|2014)_aarch64", t) for t in wheel_tags(n)[3])]
    assert wrong == []
    projects = {wheel_tags(n)[0] for n in binary}
    # The product's native dependencies (and pyyaml, libcst's) are among them.
    assert {"numpy", "pandas", "libcst", "msgspec", "pyyaml"} <= projects, projects
    for project in sorted(projects):
        for python in PYTHONS:
            assert any(wheel_tags(n)[0] == project and wheel_tags(n)[1] == python for n in binary), f"no {project} {python} aarch64 wheel in {names}"


def _bundler():
    """vscode-client/scripts/bundle_wheels.py as a module (it imports its sibling bundle_wheel)."""
    import importlib.util

    scripts = REPO / "vscode-client" / "scripts"
    sys.path.insert(0, str(scripts))
    try:
        spec = importlib.util.spec_from_file_location("bundle_wheels", scripts / "bundle_wheels.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bundle_wheels"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(scripts))
    return module


def test_lock_pins_each_direct_dependency_once_per_target_python() -> None:
    """Without a download: every dependency of pyproject.toml has one pin, within its range, for
    each CPython and target (the build checks the rest of the closure from the wheels)."""
    import tomllib

    from packaging.requirements import Requirement

    bw = _bundler()
    pins = bw.read_lock()
    deps = [Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]]
    for target in bw.TARGETS.values():
        for python in bw.PYTHONS:
            env = bw.marker_env(target, python)
            chosen = bw.pins_for(pins, env)
            for dep in deps:
                if dep.marker is None or dep.marker.evaluate(env):
                    pin = chosen.get(bw.canonicalize_name(dep.name))
                    assert pin is not None and dep.specifier.contains(pin.version), f"{dep} on {target.name} {python}: {pin}"
    assert "tomli" in bw.pins_for(pins, bw.marker_env(bw.TARGETS["linux-x64"], (3, 10)))
    assert "tomli" not in bw.pins_for(pins, bw.marker_env(bw.TARGETS["linux-x64"], (3, 11)))


def test_wheel_tags_are_matched_as_pip_would() -> None:
    bw = _bundler()
    x64, arm = bw.TARGETS["linux-x64"].platforms, bw.TARGETS["linux-arm64"].platforms
    numpy = "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
    assert bw.wheel_fits(numpy, (3, 11), x64)
    assert not bw.wheel_fits(numpy, (3, 12), x64)
    assert not bw.wheel_fits(numpy, (3, 11), arm)
    assert bw.wheel_fits("attrs-26.1.0-py3-none-any.whl", (3, 10), arm)
    # glibc newer than 2.28 is not taken: the Ascend hosts' floor.
    assert not bw.wheel_fits("x-1-cp311-cp311-manylinux_2_34_aarch64.whl", (3, 11), arm)
    assert bw.wheel_fits("x-1-cp310-abi3-manylinux2014_aarch64.whl", (3, 12), arm)
