"""A small copy of the pinned wheel for build-wheel's tests where the wheel's size is not what is tested.

It holds the release's own entries (bytes, timestamps, modes) for the files the tests' patches touch, the
package's metadata, an executable entry, and one real 3.2 MB library (more than a 1 MiB file system holds,
packed or unpacked); its RECORD lists exactly those. The same code paths run as on the full wheel, in a
second instead of the full wheel's 10 or more (every unpacked file is a traced call).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import zipfile
from pathlib import Path

from sglang_overlay.commands.build_wheel import record_hash

INFO = "sglang-0.5.17.dist-info/"
KEEP = (
    "sglang/__init__.py",
    "sglang/_version.py",  # Tree.version() of the unpacked copy
    "sglang/version.py",
    "sglang/srt/entrypoints/http_server.py",  # what overlay_identity patches
    "sglang/srt/layers/amx_utils.py",  # a 0755 entry: its mode kept
    "sglang/srt/multimodal/_core.cpython-312-x86_64-linux-gnu.so",  # 1.5 MB packed, 3.2 MB unpacked
)


def make_small_wheel(full: Path, dst_dir: Path) -> Path:
    """The pinned wheel's name and entries, cut down to KEEP, the dist-info and their directories."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    out = dst_dir / full.name
    with zipfile.ZipFile(full) as zin:
        files = [i for i in zin.infolist() if not i.is_dir() and (i.filename in KEEP or i.filename.startswith(INFO))]
        parents = {str(Path(i.filename).parent) + "/" for i in files}
        kept = [
            i for i in zin.infolist() if i in files or (i.is_dir() and any(p.startswith(i.filename) for p in parents))
        ]
        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zout:
            for info in sorted(kept, key=lambda i: i.filename == INFO + "RECORD"):  # the release's order, RECORD last
                if info.filename == INFO + "RECORD":
                    writer.writerow([info.filename, "", ""])
                    zout.writestr(info, record.getvalue())
                    continue
                data = zin.read(info)
                if not info.is_dir():
                    writer.writerow([info.filename, record_hash(data), len(data)])
                zout.writestr(info, data)
    assert len(files) == len(KEEP) + 6, [i.filename for i in files]  # METADATA, WHEEL, RECORD, 2 txt, LICENSE
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pin_manifest(manifest: Path, wheel: Path) -> None:
    """The project's manifest pins `wheel` (the pin's sha256 is the one thing that names its bytes)."""
    text, n = re.subn(r"(?m)^  sha256: [0-9a-f]{64}$", f"  sha256: {sha256(wheel)}", manifest.read_text())
    assert n == 1, manifest
    manifest.write_text(text)


def cache_with(wheel: Path, cache: Path) -> Path:
    """A cache directory (SGLANG_OVERLAY_CACHE) whose pinned wheel is `wheel`."""
    (cache / "wheels").mkdir(parents=True, exist_ok=True)
    os.symlink(wheel, cache / "wheels" / wheel.name)
    return cache
