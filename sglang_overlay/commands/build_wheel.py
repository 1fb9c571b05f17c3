"""Build a wheel of the patched SGLang: the pinned release's own wheel with the set applied to its files, as
version 0.5.17+ovl.fp<short fingerprint>, so `pip show sglang` on any host says which patch set it runs.

The wheel is unpacked into a scratch installed-package tree and the set is applied there by `switch`, the one
path that changes a tree (so the bytes equal what `apply` gives); then the dist-info is renamed, METADATA gets
the local version (and the set in its Summary), RECORD is regenerated and the archive rewritten. Unchanged
files keep their original zip timestamps and modes, so the same set gives a byte-identical wheel. The tool's
state (sglang/.sglang-overlay/state.json and the saved pristine files) goes in too, so an installed copy is a
tree the tool manages: `status` names its set and `revert --all` restores the release's package byte for byte.
The dist-info keeps the built version (pip's answer) through such a switch; apply and revert say so, with the
reinstall that makes pip agree (distinfo.py says why it is not rewritten).
Without --set/--patches: the preset `default`. Hardware gates are not checked (the wheel runs elsewhere).
"""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import io
import os
import re
import shutil
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import partfile
from .. import scratch as scratch_dirs
from ..distinfo import wheel_local
from ..errors import BadInput, OSFailure, os_failure
from ..fetch import pinned_wheel
from ..fingerprint import fingerprint
from ..fsio import fsync_dir
from ..patchset import resolve
from ..pathlen import path_arg
from ..repopath import STATE_DIR_NAME
from ..switch import switch
from ..transaction import Transaction
from ..tree import Tree
from ._common import add_selection, selection, tell

NAME = "build-wheel"
HELP = "build a wheel of the patched SGLang (version 0.5.17+ovl.fp<fingerprint>)"


def add_arguments(p) -> None:
    add_selection(
        p,
        positional=False,
        set_help="the set to build (default: the preset default): PRESET, a,b, PRESET+x, PRESET-x or none",
    )
    p.add_argument(
        "--out", type=path_arg, default=Path("dist"), metavar="DIR", help="where to write it (default: dist/)"
    )
    p.add_argument(
        "--wheel", type=path_arg, metavar="FILE", help="a local copy of the pinned wheel (else the cache/pip)"
    )


def local_version(pin_version: str, fp: str) -> str:
    from packaging.version import Version  # only build-wheel needs packaging; keep status/apply light

    return str(Version(f"{pin_version}+{wheel_local(fp)}"))  # validates it as PEP 440


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def run(ctx, args) -> int:
    m = ctx.manifest
    chosen = selection(ctx, args, verb="build-wheel") or resolve(m, "default")
    names = chosen.patches
    src = pinned_wheel(m.pin, args.wheel)
    out = build(m, names, src, args.out)
    print(f"sglang-overlay: wrote {out}")
    print(f"sglang-overlay: fingerprint {fingerprint(m, names)}")
    return 0


def build(manifest, names, src: Path, out_dir: Path) -> Path:
    from packaging.utils import canonicalize_name, parse_wheel_filename

    dist, old_version, build_tag, tags = parse_wheel_filename(src.name)
    if build_tag:
        raise BadInput(f"{src.name}: wheels with a build tag are not supported")
    if canonicalize_name(dist) != canonicalize_name(manifest.pin.package):
        raise BadInput(f"{src.name} is not a wheel of {manifest.pin.package}")
    fp = fingerprint(manifest, names)
    new_version = local_version(str(old_version), fp)
    dist_name = src.name.split("-", 1)[0]  # the file's own spelling (normalized by the wheel that was built)
    old_info, new_info = f"{dist_name}-{old_version}.dist-info", f"{dist_name}-{new_version}.dist-info"
    if out_dir.exists() and not out_dir.is_dir():  # mkdir's EEXIST named no option
        raise BadInput(f"--out {out_dir}: is a file, not a directory", hint="name a directory for the wheel")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _out_failure(e, "cannot make the output directory", e.filename or out_dir) from e
    target = out_dir / (f"{dist_name}-{new_version}-" + src.name.split("-", 2)[2])

    scratch_dirs.reap()
    for left in partfile.reap(out_dir, dist_name):
        print(
            f"sglang-overlay: note: left {left}: a partial wheel that another host or an earlier sglang-overlay may "
            f"still be writing; remove it once no build writes to {out_dir}",
            file=sys.stderr,
        )
    tmp = scratch_dirs.root()
    with _scratch_errors(tmp):
        scratch = scratch_dirs.make("wheel")
    try:
        with _scratch_errors(tmp):
            with zipfile.ZipFile(src) as zin:
                infos = [i for i in zin.infolist() if not i.is_dir()]
                zin.extractall(scratch)
            with Transaction.open(Tree(scratch, "installed")) as txn:
                outcome = switch(txn, manifest, names, op="build-wheel", ignore_hardware=True)
            tell(outcome.notes)
            # The wheel ships the tool's state (state.json and the pristine bases), not its lock or journal: an
            # installed copy is then a managed tree (`sglang-overlay --tree SITE-PACKAGES status` names the set,
            # `revert` gives back the pristine release).
            state_dir = scratch / "sglang" / STATE_DIR_NAME
            for leftover in state_dir.iterdir() if state_dir.is_dir() else ():
                if leftover.name not in ("state.json", "objects"):
                    shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        print(
            f"sglang-overlay: {src.name} + {', '.join(outcome.target) or 'no patches'}: "
            f"{len(outcome.written)} file(s) changed",
            file=sys.stderr,
        )

        stamp = max(i.date_time for i in infos)
        entries: list[tuple[zipfile.ZipInfo, bytes]] = []
        seen = set()
        for info in infos:
            seen.add(info.filename)
            path = scratch / info.filename
            if not path.is_file() or info.filename == f"{old_info}/RECORD":
                continue  # deleted by a patch; RECORD is regenerated below
            entries.append((_renamed(info, old_info, new_info), path.read_bytes()))
        for path in sorted(p for p in scratch.rglob("*") if p.is_file()):
            rel = path.relative_to(scratch).as_posix()
            if rel not in seen:  # added by the set (overlay files, the identity module)
                info = zipfile.ZipInfo(rel, date_time=stamp)
                # a diff's new 100755 file stays a program once installed; never the umask: the same bytes
                info.external_attr = (0o100755 if path.stat().st_mode & 0o100 else 0o100644) << 16
                entries.append((_renamed(info, old_info, new_info), path.read_bytes()))

        meta_name = f"{new_info}/METADATA"
        patches = ", ".join(outcome.target) or "none"
        for i, (info, data) in enumerate(entries):
            if info.filename == meta_name:
                entries[i] = (info, _metadata(data, new_version, patches))

        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        for info, data in entries:
            writer.writerow([info.filename, record_hash(data), len(data)])
        writer.writerow([f"{new_info}/RECORD", "", ""])
        rec_info = zipfile.ZipInfo(f"{new_info}/RECORD", date_time=stamp)
        rec_info.external_attr = 0o100644 << 16
        # dist-info last, RECORD at the very end (the order wheel tools write and some readers expect)
        entries.sort(key=lambda e: e[0].filename.startswith(new_info + "/"))
        entries.append((rec_info, record.getvalue().encode()))

        try:
            with partfile.PartFile(target) as part:
                with zipfile.ZipFile(part.file, "w", compression=zipfile.ZIP_DEFLATED) as zout:
                    for info, data in entries:
                        info.compress_type = zipfile.ZIP_DEFLATED
                        zout.writestr(info, data)
                part.replace(target)
        except OSError as e:  # the OS names the partial file, or for a failed write() no file at all
            raise _out_failure(e, "cannot write the wheel", target) from e
        try:
            fsync_dir(out_dir)  # the new name's durability
        except OSError as e:
            raise _unsynced_failure(e, target) from e
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _out_failure(err: OSError, what: str, path: Path | str) -> OSFailure:
    # the engine's hint for a read-only file system offers a copy of the tree: the tree is not written here
    return os_failure(
        err,
        what,
        "no wheel was written, and no tree was changed",
        path=path,
        elsewhere="write the wheel to another directory (`--out DIR`)",
    )


def _unsynced_failure(err: OSError, wheel: Path) -> OSFailure:
    # the wheel is in place under its name by now (saying none was written had been false); only that name may not
    # outlive a power loss yet
    return os_failure(
        err,
        f"wrote the wheel {wheel}, but could not fsync its directory",
        "the wheel is there under its final name, but a power loss before the system writes that directory may "
        "lose the name; no tree was changed",
        path=wheel.parent,
        where=wheel.parent,
        elsewhere="write the wheel to another directory (`--out DIR`)",
    )


@contextmanager
def _scratch_errors(tmp: Path) -> Iterator[None]:
    """The switch and the composition report a refused write as the tree's (fix: `--tree DIR`), and a write()
    names no file at all (`cannot access ?`); here that tree is a scratch copy in $TMPDIR, which the user can
    point elsewhere."""
    try:
        yield
    except OSFailure as f:
        if f.error is None or not _in_dir(f.error, tmp):
            raise
        raise _tmp_failure(f.error, tmp) from None
    except OSError as e:
        if not _in_dir(e, tmp):
            raise
        raise _tmp_failure(e, tmp) from e


def _in_dir(err: OSError, tmp: Path) -> bool:
    if not isinstance(err.filename, (str, bytes)):  # a failed write(): in this stage only scratch copies are written
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    name, root = os.path.abspath(os.fsdecode(err.filename)), os.path.abspath(tmp)
    return name == root or name.startswith(root.rstrip("/") + "/")


def _tmp_failure(err: OSError, tmp: Path) -> OSFailure:
    # $TMPDIR itself, not the random scratch directory under it (gone by the time the user reads this); the hint's
    # commands name it too, as it may be a mount point, on another file system than its parent
    return os_failure(
        err,
        "cannot write the wheel's scratch copy in",
        "no wheel was written, and no tree was changed",
        path=tmp,
        where=tmp,
        elsewhere="set TMPDIR to a writable directory with room for the unpacked wheel (`export TMPDIR=DIR`)",
    )


def _renamed(info: zipfile.ZipInfo, old_info: str, new_info: str) -> zipfile.ZipInfo:
    name = info.filename
    if name.startswith(old_info + "/"):
        name = new_info + name[len(old_info) :]
    new = zipfile.ZipInfo(name, date_time=info.date_time)
    new.external_attr = info.external_attr
    return new


def _metadata(data: bytes, version: str, patches: str) -> bytes:
    text = data.decode("utf-8")
    text, n = re.subn(r"^Version: .*$", f"Version: {version}", text, count=1, flags=re.M)
    if n != 1:
        raise BadInput("the pinned wheel's METADATA has no Version field")
    text = re.sub(
        r"^(Summary: .*)$", lambda mt: f"{mt.group(1)} [sglang-overlay {version}: {patches}]", text, count=1, flags=re.M
    )
    return text.encode("utf-8")
