"""Build the per-platform .vsix packages that install offline (`vsce package --target`).

Each package carries, besides the product's wheel, every runtime dependency as wheels for CPython
3.10, 3.11 and 3.12 on its platform, in bundled/wheels/; on first start the extension installs
them with `pip install --no-index --find-links bundled/wheels` (src/bootstrap.ts).

Deterministic: the versions come from scripts/runtime-lock.txt (exact pins, markers evaluated per
target Python), downloaded with `pip download --no-deps --only-binary=:all: --platform ...
--python-version ... --implementation cp --abi ...`. pip evaluates dependency markers for the
Python that runs it, not the target one, so the resolution is ours: for each target Python the
pins must be exactly the transitive closure of the product wheel's requirements (read from the
wheels' METADATA), else the build fails naming the missing or unused pin. Downloads are cached in
vscode-client/.wheels/<target>/ (files no pin selects are removed). Prints every wheel it bundles
and the size of each package.

Usage: bundle_wheels.py [--download-only] TARGET...  (TARGETS below; exit 1 with one line on error)
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

try:
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a bare python3: pip carries the same library
    from pip._vendor.packaging.markers import Marker
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

from bundle_wheel import build as build_product_wheel

CLIENT = Path(__file__).resolve().parents[1]
LOCK = CLIENT / "scripts" / "runtime-lock.txt"
CACHE = CLIENT / ".wheels"
PYTHONS = ((3, 10), (3, 11), (3, 12))
WHEELS_DIR = "wheels"  # under bundled/; src/constants.ts BUNDLED_WHEELS_DIR


@dataclass(frozen=True)
class Target:
    """A `vsce package --target` platform: pip's platform tags and the marker environment."""

    name: str
    platforms: tuple[str, ...]
    sys_platform: str
    platform_system: str
    machine: str


def _manylinux(arch: str) -> tuple[str, ...]:
    # glibc 2.17 (manylinux2014) up to 2.28: openEuler 20.03+ and Kylin V10, the usual Ascend
    # hosts, have 2.28; a newer floor would pick wheels those hosts cannot load.
    return tuple(f"manylinux_2_{minor}_{arch}" for minor in range(28, 16, -1)) + (f"manylinux2014_{arch}",)


TARGETS = {
    t.name: t
    for t in (
        Target("linux-x64", _manylinux("x86_64"), "linux", "Linux", "x86_64"),
        Target("linux-arm64", _manylinux("aarch64"), "linux", "Linux", "aarch64"),
        # pip expands macosx_11_0 to every older-or-equal macOS tag itself.
        Target("darwin-arm64", ("macosx_11_0_arm64",), "darwin", "Darwin", "arm64"),
        Target("win32-x64", ("win_amd64",), "win32", "Windows", "AMD64"),
    )
}


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str
    requirement: Requirement


def marker_env(target: Target, python: tuple[int, int]) -> dict[str, str]:
    version = "%d.%d" % python
    return {
        "python_version": version,
        "python_full_version": version + ".0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": target.sys_platform,
        "platform_system": target.platform_system,
        "platform_machine": target.machine,
        "os_name": "nt" if target.sys_platform == "win32" else "posix",
        "extra": "",
    }


def read_lock(path: Path = LOCK) -> list[Pin]:
    pins = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        spec = str(req.specifier)
        if not spec.startswith("==") or "," in spec:
            raise SystemExit(f"bundle_wheels: {path.name}: {line!r} is not an exact pin (name==version)")
        pins.append(Pin(canonicalize_name(req.name), spec[2:], req))
    return pins


def pins_for(pins: list[Pin], env: dict[str, str]) -> dict[str, Pin]:
    out: dict[str, Pin] = {}
    for pin in pins:
        if pin.requirement.marker is None or pin.requirement.marker.evaluate(env):
            if pin.name in out:
                raise SystemExit(f"bundle_wheels: two pins of {pin.name} apply to Python {env['python_version']}")
            out[pin.name] = pin
    return out


_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def wheel_fits(filename: str, python: tuple[int, int], platforms: tuple[str, ...]) -> bool:
    """Whether pip on this CPython and platform would install the wheel (its tag triples)."""
    m = _WHEEL.match(filename)
    if not m:
        return False
    cp = "cp%d%d" % python
    py_ok = any(t in (cp, "py3", "py%d%d" % python) or (t.startswith("cp3") and m["abi"] == "abi3" and int(t[3:]) <= python[1]) for t in m["py"].split("."))
    abi_ok = any(a in (cp, "abi3", "none") for a in m["abi"].split("."))
    plat_ok = any(p == "any" or p in platforms for p in m["plat"].split("."))
    return py_ok and abi_ok and plat_ok


def wheel_key(filename: str) -> tuple[str, str]:
    m = _WHEEL.match(filename)
    if not m:
        raise SystemExit(f"bundle_wheels: {filename} is not a wheel file name")
    return canonicalize_name(m["name"]), m["version"]


def download(target: Target, pins: list[Pin], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for python in PYTHONS:
        wanted = pins_for(pins, marker_env(target, python))
        tag = "%d%d" % python
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:"]
        for platform in target.platforms:
            cmd += ["--platform", platform]
        cmd += ["--python-version", "%d.%d" % python, "--implementation", "cp", "--abi", f"cp{tag}", "--abi", "abi3", "--abi", "none", "-d", str(dest)]
        cmd += [f"{p.name}=={p.version}" for p in sorted(wanted.values(), key=lambda p: p.name)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit(f"bundle_wheels: pip download for {target.name} CPython {python[0]}.{python[1]} failed (exit {done.returncode})")


def requirements_of(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        headers = HeaderParser().parsestr(zf.read(meta).decode("utf-8"))
    return [Requirement(r) for r in headers.get_all("Requires-Dist") or []]


def select(target: Target, pins: list[Pin], folder: Path, python: tuple[int, int]) -> dict[str, Path]:
    """The wheel pip would take for each pin on this Python; fails when one is missing."""
    chosen = {}
    for pin in pins_for(pins, marker_env(target, python)).values():
        fits = sorted(p for p in folder.glob("*.whl") if wheel_key(p.name) == (pin.name, pin.version) and wheel_fits(p.name, python, target.platforms))
        if not fits:
            raise SystemExit(f"bundle_wheels: no {pin.name} {pin.version} wheel for CPython {python[0]}.{python[1]} on {target.name} in {folder}")
        chosen[pin.name] = fits[-1]
    return chosen


def check_closure(target: Target, product: Path, chosen: dict[str, Path], python: tuple[int, int]) -> None:
    """The pins for this Python are exactly what the product needs, transitively, at those versions."""
    env = marker_env(target, python)
    where = f"CPython {python[0]}.{python[1]} on {target.name}"
    needed: set[str] = set()
    todo = [product]
    while todo:
        for req in requirements_of(todo.pop()):
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            name = canonicalize_name(req.name)
            if name not in chosen:
                raise SystemExit(f"bundle_wheels: {req} is needed on {where} and {LOCK.name} has no pin for it")
            if not req.specifier.contains(wheel_key(chosen[name].name)[1], prereleases=True):
                raise SystemExit(f"bundle_wheels: {req} is needed on {where}; {LOCK.name} pins {chosen[name].name}")
            if name not in needed:
                needed.add(name)
                todo.append(chosen[name])
    unused = sorted(set(chosen) - needed)
    if unused:
        raise SystemExit(f"bundle_wheels: {LOCK.name} pins {', '.join(unused)} for {where}, which nothing needs")


def wheelhouse(target: Target, product: Path, pins: list[Pin]) -> list[Path]:
    """Download, check and prune the target's wheels; returns them sorted."""
    folder = CACHE / target.name
    download(target, pins, folder)
    keep: set[Path] = set()
    for python in PYTHONS:
        chosen = select(target, pins, folder, python)
        check_closure(target, product, chosen, python)
        keep.update(chosen.values())
    for stale in sorted(set(folder.glob("*.whl")) - keep):
        print(f"  removed from the cache (no pin selects it): {stale.name}")
        stale.unlink()
    return sorted(keep)


def package(target: Target, product: Path, wheels: list[Path]) -> Path:
    """`vsce package --target` on a staged copy of the client holding the target's wheels."""
    manifest = json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    out = CLIENT / f"{manifest['name']}-{target.name}-{manifest['version']}.vsix"
    vsce_pkg = CLIENT / "node_modules" / "@vscode" / "vsce" / "package.json"
    if not vsce_pkg.is_file():
        raise SystemExit("bundle_wheels: vsce is not installed: run `npm ci` in vscode-client first")
    vsce = vsce_pkg.parent / json.loads(vsce_pkg.read_text(encoding="utf-8"))["bin"]["vsce"]
    with tempfile.TemporaryDirectory(prefix=f"msprof-vsix-{target.name}-") as tmp:
        stage = Path(tmp) / "ext"
        shutil.copytree(CLIENT, stage, ignore=shutil.ignore_patterns("node_modules", ".wheels", "*.vsix", "out", "bundled"))
        # The bundle and the product wheel are built already; vsce must not rebuild them here.
        manifest["scripts"].pop("vscode:prepublish", None)
        (stage / "package.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        (stage / "bundled" / WHEELS_DIR).mkdir(parents=True)
        shutil.copy2(product, stage / "bundled" / product.name)
        for wheel in wheels:
            shutil.copy2(wheel, stage / "bundled" / WHEELS_DIR / wheel.name)
        cmd = ["node", str(vsce), "package", "--no-dependencies", "--allow-missing-repository", "--target", target.name, "--out", str(out)]
        done = subprocess.run(cmd, cwd=stage, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            raise SystemExit(f"bundle_wheels: vsce package --target {target.name} failed (exit {done.returncode})")
    return out


def mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", choices=sorted(TARGETS), metavar="TARGET", help=", ".join(TARGETS))
    parser.add_argument("--download-only", action="store_true", help="fetch and check the wheels, build no package")
    args = parser.parse_args()
    pins = read_lock()
    if not (CLIENT / "dist" / "extension.js").is_file() and not args.download_only:
        raise SystemExit("bundle_wheels: dist/extension.js is missing: run `npm run build` first")
    product = build_product_wheel(CLIENT / "bundled")
    for name in args.targets:
        target = TARGETS[name]
        wheels = wheelhouse(target, product, pins)
        print(f"{name}: {len(wheels)} wheels, {mb(sum(w.stat().st_size for w in wheels))}")
        for wheel in wheels:
            print(f"  {wheel.name}  {mb(wheel.stat().st_size)}")
        if not args.download_only:
            out = package(target, product, wheels)
            print(f"{name}: {out}  {mb(out.stat().st_size)}")


if __name__ == "__main__":
    main()
