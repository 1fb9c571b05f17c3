"""Pinned (and other) SGLang releases: PyPI wheel -> verified cache -> local git tree or direct reads.

Releases come through pip by package name (the one registry client every user has), with the pin's exact
wheel tags so every machine gets byte-identical sources whatever Python it runs.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from .errors import FetchError
from .gitcmd import git
from .manifest import Pin
from .tree import Tree, embedded_path

CACHE_ENV = "SGLANG_OVERLAY_CACHE"
WHEEL_PREFIX = "sglang/"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sglang-overlay").expanduser()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pip_tags(wheel_name: str) -> list[str]:
    """pip flags that select exactly this wheel's tags, so any local Python fetches the same file."""
    m = re.match(r"^[^-]+-[^-]+-(cp\d+)-([^-]+)-(.+)\.whl$", wheel_name)
    if not m:
        return []
    py, abi, plats = m.groups()
    flags = ["--only-binary=:all:", "--implementation", "cp", "--python-version", f"{py[2]}.{py[3:]}",
             "--abi", abi]
    for plat in plats.split("."):
        flags += ["--platform", plat]
    # Other releases may be built against another glibc baseline; let pip pick among the usual ones.
    for extra in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_34_x86_64"):
        if extra not in plats.split("."):
            flags += ["--platform", extra]
    return flags


def _pip_download(package: str, version: str, template_wheel: str, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           *_pip_tags(template_wheel), "-d", str(dest), f"{package}=={version}"]
    print(f"sglang-overlay: downloading {package}=={version} with pip into {dest} ...", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-3:])
        raise FetchError(f"could not download {package}=={version}: {tail}",
                         hint="check network access to the package index, or pass --wheel FILE with a local copy")
    print(f"sglang-overlay: downloaded {package}=={version} in {time.monotonic() - t0:.1f}s", file=sys.stderr)


def pinned_wheel(pin: Pin, local: Path | None = None) -> Path:
    """The pin's wheel from the cache (downloaded once), its sha256 checked every time it is first used."""
    target = cache_dir() / "wheels" / pin.wheel
    if local is not None:
        local = Path(local)
        if not local.is_file():
            raise FetchError(f"{local}: no such wheel file")
        if local.name != pin.wheel:
            raise FetchError(f"{local}: the manifest pins {pin.wheel}, not {local.name}",
                             hint="pass the pinned wheel file")
        got = file_sha256(local)
        if got != pin.sha256:
            raise FetchError(f"{local}: sha256 {got} does not match the pin {pin.sha256}",
                             hint="the file is not the pinned release; download it again")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copyfile(local, target)
        return target
    if not target.exists():
        with tempfile.TemporaryDirectory(dir=_ensure(cache_dir())) as tmp:
            _pip_download(pin.package, pin.version, pin.wheel, Path(tmp))
            got_file = Path(tmp) / pin.wheel
            if not got_file.exists():
                found = ", ".join(p.name for p in Path(tmp).glob("*.whl")) or "nothing"
                raise FetchError(f"pip fetched {found}, not the pinned {pin.wheel}")
            got = file_sha256(got_file)
            if got != pin.sha256:
                raise FetchError(f"{pin.wheel}: sha256 {got} does not match the pin {pin.sha256}",
                                 hint="the index serves different bytes under this name; do not trust it")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(got_file, target)
    return target


def release_wheel(pin: Pin, version: str) -> Path:
    """Any release of the pinned package, cached like the pin (its hash is recorded, not checked)."""
    if version == pin.version:
        return pinned_wheel(pin)
    folder = cache_dir() / "releases" / version
    found = sorted(folder.glob(f"{pin.package}-{version}-*.whl")) if folder.is_dir() else []
    if not found:
        with tempfile.TemporaryDirectory(dir=_ensure(cache_dir())) as tmp:
            _pip_download(pin.package, version, pin.wheel, Path(tmp))
            wheels = sorted(Path(tmp).glob(f"{pin.package}-{version}-*.whl"))
            if not wheels:
                raise FetchError(f"pip fetched no wheel of {pin.package} {version}")
            folder.mkdir(parents=True, exist_ok=True)
            os.replace(wheels[0], folder / wheels[0].name)
            (folder / "SHA256").write_text(f"{file_sha256(folder / wheels[0].name)}  {wheels[0].name}\n")
        found = sorted(folder.glob(f"{pin.package}-{version}-*.whl"))
    return found[0]


def latest_release(package: str) -> str:
    """The newest release on the index, asked through pip (what the nightly radar checks against)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"],
                          capture_output=True, text=True)
    m = re.search(rf"^{re.escape(package)} \(([^)]+)\)", proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        raise FetchError(f"could not ask the index for the newest {package}: {proc.stderr.strip()[-200:]}")
    return m.group(1)


def _ensure(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


class WheelSource:
    """Read repository paths (python/sglang/...) straight out of a release wheel, without unpacking it."""

    def __init__(self, wheel: Path):
        self.wheel = wheel
        self._zip = zipfile.ZipFile(wheel)
        self._names = set(self._zip.namelist())

    def read(self, repo_path: str) -> bytes | None:
        member = repo_path[len("python/"):]
        return self._zip.read(member) if member in self._names else None

    def version(self) -> str:
        m = re.match(r"^[^-]+-([^-]+)-", self.wheel.name)
        return m.group(1) if m else "?"


def ensure_embedded(project_root: Path, pin: Pin, local_wheel: Path | None = None) -> tuple[Tree, bool]:
    """The embedded default tree (a git repo of the pinned release, tagged). Returns (tree, created)."""
    dest = embedded_path(project_root, pin.version)
    if (dest / "python" / "sglang").is_dir() and (dest / ".git").exists():
        if git("rev-parse", "-q", "--verify", f"refs/tags/{pin.git_tag}", cwd=dest, check=False).returncode == 0:
            return Tree(dest.resolve(), "embedded"), False
    if dest.exists():
        raise FetchError(f"{dest}: exists but is not a complete pinned tree (interrupted fetch?)",
                         hint=f"remove it (rm -rf {dest}) and run `python apply.py fetch` again")
    wheel = pinned_wheel(pin, local_wheel)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        print(f"sglang-overlay: unpacking {wheel.name} into {dest} ...", file=sys.stderr, flush=True)
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if info.filename.startswith(WHEEL_PREFIX) and not info.is_dir():
                    z.extract(info, tmp / "python")
        _commit_pristine(tmp, pin, wheel)
        os.rename(tmp, dest)  # the tree appears whole or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Tree(dest.resolve(), "embedded"), True


def _commit_pristine(root: Path, pin: Pin, wheel: Path) -> None:
    import git as gitpython  # GitPython: repository setup; only `fetch` needs it, so it loads only here

    repo = gitpython.Repo.init(root, initial_branch="main") if _initial_branch_ok() else gitpython.Repo.init(root)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "sglang-overlay")
        cw.set_value("user", "email", "sglang-overlay@localhost")
        cw.set_value("core", "autocrlf", "false")
    repo.git.add("-A", "-f")
    repo.git.commit("-q", "-m", f"{pin.package} {pin.version} (pristine, from {wheel.name}, sha256 {pin.sha256})")
    repo.create_tag(pin.git_tag, message=f"{pin.package} {pin.version} pinned release")


def _initial_branch_ok() -> bool:
    out = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (2, 28)
