"""The SGLang trees a block's servers run from: one per position, since `apply.py launch` makes a tree carry one
set and a block runs several sets at once (bench.blocks).

Unless the user names their own (`--trees`), they are made once from the pinned release, the wheel `fetch`
keeps in its cache (sha256 checked), laid out like a checkout (`DIR/tK/python/sglang/`): `apply.py launch`
runs such a tree with the bench's own interpreter and puts `tK/python` first on the server's PYTHONPATH, so the
server imports the tree's sglang and everything else from the environment. Pristine, so each launch only adds
its arm's patches, and outside the project. They are kept
under the pool directory, keyed by the wheel's hash and the manifest (a tree's state names the patches of the
manifest that applied them), and reused by later runs: a killed launch's half-switched tree is the engine's
to roll back (`recover` runs first in every command), not this module's.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .errors import UsageError

POOL_ENV = "SGLANG_OVERLAY_BENCH_TREES"  # where pools live unless --tree-pool says
WHEEL_PREFIX = "sglang/"


def default_pool_root() -> Path:
    return Path(os.environ.get(POOL_ENV) or Path(tempfile.gettempdir()) / "sglang-overlay-bench-trees")


def pool_dir(root: Path, wheel_sha256: str, manifest: str) -> Path:
    key = hashlib.sha256(f"{wheel_sha256}\0{os.path.realpath(manifest)}".encode()).hexdigest()[:12]
    return root / key


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # a second bench making the same pool waits, then finds the trees made
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def unpack_tree(wheel: Path, dest: Path) -> None:
    """dest/python/sglang/ from the wheel, whole or not at all: made beside and renamed."""
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-" + dest.name + "-", dir=dest.parent))
    try:
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if info.filename.startswith(WHEEL_PREFIX) and not info.is_dir():
                    z.extract(info, tmp / "python")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def pool_trees(manifest: str, n: int, root: Path | None = None) -> list[str]:
    """n pristine trees of the manifest's pin under the pool root, made where missing; their paths."""
    from sglang_overlay.errors import OverlayError
    from sglang_overlay.fetch import pinned_wheel
    from sglang_overlay.manifest import load_manifest

    try:
        pin = load_manifest(manifest).pin
        wheel = pinned_wheel(pin)
    except OverlayError as e:
        raise UsageError(
            f"--concurrent makes its trees from the pinned wheel and could not get it: {e} (run `apply.py fetch`, "
            "or give your own trees with --trees)"
        ) from None
    d = pool_dir(root or default_pool_root(), pin.sha256, manifest)
    out: list[str] = []
    try:
        with _locked(d):
            for stale in d.glob(".tmp-*"):  # an unpack a kill cut short: a whole sglang nobody will rename
                shutil.rmtree(stale, ignore_errors=True)
            k = 0
            while len(out) < n:
                t = d / f"t{k}"
                k += 1
                if not _lease(d / f"t{k - 1}.lease"):
                    continue  # another bench run holds it (its servers run from it): never switch it under them
                if not (t / "python" / "sglang" / "__init__.py").is_file():
                    if t.exists():
                        shutil.rmtree(t)  # not a tree this module finished (it renames only whole ones): made again
                    unpack_tree(wheel, t)
                out.append(str(t))
    except OSError as e:
        raise UsageError(
            f"--tree-pool {root or default_pool_root()}: cannot make the block's trees there ({e.strerror or e}: "
            f"{e.filename or d}); give a writable directory with room for {n} sglang trees (~120 MB each)"
        ) from None
    return out


# open lease files by path: their locks last as long as this process and go with it however it ends; a process
# asking again (a plan's second call) gets its own trees back
_LEASES: dict[str, IO] = {}


def _lease(path: Path) -> bool:
    """Hold path's lock for the rest of this process if no other process holds it."""
    if str(path) in _LEASES:
        return True
    f = open(path, "a")  # noqa: SIM115 - kept open on purpose: the lock is the lease
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return False
    _LEASES[str(path)] = f
    return True


def check_trees(trees: list[str], n: int) -> None:
    """Refuse a --trees list that cannot hold n live servers: too few, not directories, one tree twice."""
    if len(trees) < n:
        raise UsageError(f"--trees names {len(trees)} tree(s); this run's blocks hold up to {n} servers, one tree each")
    for t in trees:
        if not os.path.isdir(t):
            raise UsageError(
                f"--trees {t}: not a directory (an sglang tree: `apply.py fetch --wheel`, or leave "
                "--trees out and the bench makes its own)"
            )
    seen: dict[tuple[int, int], str] = {}
    for t in trees:
        st = os.stat(t)
        if (st.st_dev, st.st_ino) in seen:
            raise UsageError(
                f"--trees {seen[(st.st_dev, st.st_ino)]} and {t} are the same directory: two live servers cannot "
                "share one tree (`apply.py launch` switches a tree's patches)"
            )
        seen[(st.st_dev, st.st_ino)] = t
