"""Pinned (and other) SGLang releases: PyPI wheel -> verified cache -> local git tree or direct reads.

Releases come through pip by package name (the one registry client every user has), with the pin's exact
wheel tags so every machine gets byte-identical sources whatever Python it runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .cachedir import CACHE_ENV, cache_dir  # noqa: F401  (CACHE_ENV: where callers have looked for it)
from .errors import FetchError
from .gitcmd import git
from .manifest import Pin
from .progname import prog
from .tree import Tree, embedded_path

STALE = ".tmp-"  # what a fetch is still making: removed, under the fetch lock, if its maker was killed
WHEEL_PREFIX = "sglang/"


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
    flags = ["--only-binary=:all:", "--implementation", "cp", "--python-version", f"{py[2]}.{py[3:]}", "--abi", abi]
    for plat in plats.split("."):
        flags += ["--platform", plat]
    # Other releases may be built against another glibc baseline; let pip pick among the usual ones.
    for extra in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_34_x86_64"):
        if extra not in plats.split("."):
            flags += ["--platform", extra]
    return flags


def _pip_download(package: str, version: str, template_wheel: str, dest: Path, copy_to: Path) -> None:
    """`copy_to`: where a local copy of the wheel is used from, named in the hint: not every command that
    downloads has a --wheel option (check, --all-pins, the radar), but every one reads that path first."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        *_pip_tags(template_wheel),
        "-d",
        str(dest),
        f"{package}=={version}",
    ]
    print(f"sglang-overlay: downloading {package}=={version} with pip into {dest} ...", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        part = copy_to.with_name(f".{copy_to.name}.part")  # a dot-name: neither the pin's name nor the glob's
        tail = "\n".join(proc.stderr.strip().splitlines()[-3:])
        raise FetchError(
            f"could not download {package}=={version}: {tail}",
            hint="check network access to the package index, or put a local copy of the wheel where every command "
            f"looks first: `mkdir -p {shlex.quote(str(copy_to.parent))} && cp WHEEL_FILE {shlex.quote(str(part))} "
            f"&& mv {shlex.quote(str(part))} {shlex.quote(str(copy_to))}` (copied beside it, then renamed: a "
            "command running meanwhile never reads half a wheel)",
        )
    print(f"sglang-overlay: downloaded {package}=={version} in {time.monotonic() - t0:.1f}s", file=sys.stderr)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One fetch at a time per directory; what a killed one left (its `.tmp-`/`.download-` entries) is then
    known to be stale and removed."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"sglang-overlay: waiting for another fetch in {directory} ...", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        for name in os.listdir(directory):
            if name.startswith(STALE):
                stale = directory / name
                shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)


def _checked(path: Path, pin: Pin, origin: str) -> None:
    got = file_sha256(path)
    if got != pin.sha256:
        raise FetchError(
            f"{origin}: sha256 {got} does not match the pin {pin.sha256}",
            hint="the file is not the pinned release; do not trust it",
        )


def pinned_wheel(pin: Pin, local: Path | None = None) -> Path:
    """The pin's wheel from the cache (downloaded once), its sha256 checked every time it is used."""
    cache = cache_dir()
    target = cache / "wheels" / pin.wheel
    if local is not None:
        local = Path(local)
        if not local.is_file():
            raise FetchError(f"{local}: no such wheel file")
        if local.name != pin.wheel:
            raise FetchError(
                f"{local}: the manifest pins {pin.wheel}, not {local.name}", hint="pass the pinned wheel file"
            )
        _checked(local, pin, str(local))
    with _locked(cache):
        if target.exists() and file_sha256(target) != pin.sha256:
            print(
                f"sglang-overlay: the cached {target} is damaged (sha256 mismatch): fetching it again", file=sys.stderr
            )
            target.unlink()
        if target.exists():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=STALE + "download-", dir=cache))
        try:
            got_file = tmp / pin.wheel
            if local is not None:
                shutil.copyfile(local, got_file)
            else:
                _pip_download(pin.package, pin.version, pin.wheel, tmp, target)
            if not got_file.exists():
                found = ", ".join(p.name for p in tmp.glob("*.whl")) or "nothing"
                raise FetchError(f"pip fetched {found}, not the pinned {pin.wheel}")
            _checked(got_file, pin, f"{pin.wheel} as downloaded")
            try:
                with open(got_file, "rb") as f:
                    os.fsync(f.fileno())
            except OSError as e:
                e.filename = e.filename or str(got_file)  # fsync names no file; the user needs to know which
                raise
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(got_file, target)  # the cache holds a whole, checked wheel or none
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def release_wheel(pin: Pin, version: str) -> Path:
    """Any release of the pinned package, cached like the pin (its hash is recorded, not checked)."""
    if version == pin.version:
        return pinned_wheel(pin)
    folder = cache_dir() / "releases" / version
    found = sorted(folder.glob(f"{pin.package}-{version}-*.whl")) if folder.is_dir() else []
    if not found:
        with _locked(cache_dir()):
            tmp = Path(tempfile.mkdtemp(prefix=STALE + "download-", dir=cache_dir()))
            try:
                # the name the release's wheel has if it is built like the pin's (what the glob above finds)
                like_pin = folder / pin.wheel.replace(f"-{pin.version}-", f"-{version}-", 1)
                _pip_download(pin.package, version, pin.wheel, tmp, like_pin)
                wheels = sorted(tmp.glob(f"{pin.package}-{version}-*.whl"))
                if not wheels:
                    raise FetchError(f"pip fetched no wheel of {pin.package} {version}")
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "SHA256").write_text(f"{file_sha256(wheels[0])}  {wheels[0].name}\n")
                os.replace(wheels[0], folder / wheels[0].name)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        found = sorted(folder.glob(f"{pin.package}-{version}-*.whl"))
    return found[0]


def latest_release(package: str) -> str:
    """The newest release on the index, asked through pip (what the nightly radar checks against)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"],
        capture_output=True,
        text=True,
    )
    m = re.search(rf"^{re.escape(package)} \(([^)]+)\)", proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        raise FetchError(f"could not ask the index for the newest {package}: {proc.stderr.strip()[-200:]}")
    return m.group(1)


class WheelSource:
    """Read repository paths (python/sglang/...) straight out of a release wheel, without unpacking it."""

    def __init__(self, wheel: Path):
        self.wheel = wheel
        try:
            self._zip = zipfile.ZipFile(wheel)
        except (zipfile.BadZipFile, OSError) as e:
            raise FetchError(
                f"{wheel}: not a readable wheel ({e})",
                hint=f"remove it (`rm {shlex.quote(str(wheel))}`); the next command fetches it again",
            ) from e
        self._names = set(self._zip.namelist())

    def read(self, repo_path: str) -> bytes | None:
        member = repo_path[len("python/") :]
        return self._zip.read(member) if member in self._names else None

    def paths(self) -> list[str]:
        """Repository paths of every file of the release, sorted."""
        return sorted("python/" + n for n in self._names if n.startswith(WHEEL_PREFIX) and not n.endswith("/"))

    def version(self) -> str:
        m = re.match(r"^[^-]+-([^-]+)-", self.wheel.name)
        return m.group(1) if m else "?"


def ensure_embedded(project_root: Path, pin: Pin, local_wheel: Path | None = None) -> tuple[Tree, bool]:
    """The embedded default tree (a git repo of the pinned release, tagged). Returns (tree, created)."""
    dest = embedded_path(project_root, pin.version)
    if _complete(dest, pin):
        return Tree(dest.resolve(), "embedded"), False
    with _locked(dest.parent):  # a second fetch waits, then finds the tree made
        if _complete(dest, pin):
            return Tree(dest.resolve(), "embedded"), False
        if dest.exists():
            raise FetchError(
                f"{dest}: exists but is not a complete pinned tree",
                hint=f"remove it (`rm -rf {shlex.quote(str(dest))}`) and run `{prog()} fetch` again",
            )
        return _make_embedded(dest, pin, local_wheel), True


def _complete(dest: Path, pin: Pin) -> bool:
    return (
        (dest / "python" / "sglang").is_dir()
        and (dest / ".git").exists()
        and git("rev-parse", "-q", "--verify", f"refs/tags/{pin.git_tag}", cwd=dest, check=False).returncode == 0
    )


def _make_embedded(dest: Path, pin: Pin, local_wheel: Path | None) -> Tree:
    wheel = pinned_wheel(pin, local_wheel)
    tmp = Path(tempfile.mkdtemp(prefix=f"{STALE}{dest.name}-", dir=dest.parent))
    try:
        print(f"sglang-overlay: unpacking {wheel.name} into {dest} ...", file=sys.stderr, flush=True)
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if info.filename.startswith(WHEEL_PREFIX) and not info.is_dir():
                    z.extract(info, tmp / "python")
        _commit_pristine(tmp, pin, wheel)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would make the tree private
        os.rename(tmp, dest)  # the tree appears whole or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Tree(dest.resolve(), "embedded")


def _commit_pristine(root: Path, pin: Pin, wheel: Path) -> None:
    # through gitcmd, like every git the tool runs; these die with it if it is killed (they write for seconds)
    def run(*args: str) -> None:
        git(*args, cwd=root, die_with_parent=True)

    run("init", "-q", *(["--initial-branch=main"] if _initial_branch_ok() else []))
    for key, value in (
        ("user.name", "sglang-overlay"),
        ("user.email", "sglang-overlay@localhost"),
        ("core.autocrlf", "false"),
    ):
        run("config", key, value)
    run("add", "-A", "-f")
    run("commit", "-q", "-m", f"{pin.package} {pin.version} (pristine, from {wheel.name}, sha256 {pin.sha256})")
    run("tag", "-a", pin.git_tag, "-m", f"{pin.package} {pin.version} pinned release")


def _initial_branch_ok() -> bool:
    out = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)", out)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (2, 28)
