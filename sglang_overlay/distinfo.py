"""The version pip reports for an installed wheel that build-wheel made, once the tree carries another set.

build-wheel names the set in the wheel's version (`0.5.17+ovl.fp<short fingerprint>`): in the dist-info
directory's name, its METADATA and its RECORD, all outside the package. A switch cannot carry them along: the
state and the journal name only files under python/sglang/ (repopath.py, the one rule every tree kind shares),
the directory's name is the version, and pip wrote files of its own into it at install (INSTALLER, its RECORD).
So after `apply`/`revert` on such a tree the version is said to be stale, with what makes pip agree again.
"""

from __future__ import annotations

import re

from .fingerprint import fingerprint, short
from .manifest import Manifest
from .progname import prog
from .tree import Tree

_VERSION_RE = re.compile(r"^Version:\s*(\S+)", re.M)


def stale_version(tree: Tree, manifest: Manifest, patches: tuple[str, ...]) -> str | None:
    """A note when the pinned package's dist-info in an installed tree names a build-wheel set other than
    `patches` (what the tree carries now); None when it names that set, or is not build-wheel's."""
    if tree.kind != "installed":
        return None
    dist = re.sub(r"[-_.]+", "_", manifest.pin.package)  # a wheel's spelling of the name (PEP 427)
    fp = fingerprint(manifest, patches)  # build-wheel's, for the empty set too
    for meta in sorted(tree.root.glob(f"{dist}-*.dist-info/METADATA")):
        try:
            found = _VERSION_RE.search(meta.read_bytes().decode("utf-8", errors="replace"))
        except OSError:
            continue  # a note only: an unreadable dist-info is pip's to report
        version = found.group(1) if found else ""
        release, _, _ = version.partition("+")
        local = _local(version)
        ours = (_local(f"{release}+{wheel_local(fp)}"), _local(f"{release}+ovl.{short(fp)}"))  # now, and before
        if local is None or not local.startswith("ovl.") or local in ours:
            continue
        if patches:
            fix = f"build the wheel of this set (`{prog()} build-wheel --patches {','.join(patches)}`) and install it"
        else:  # the package's files are the release's now, so reinstalling the release changes none of them
            fix = f"reinstall the release (`pip install --no-deps --force-reinstall {dist}=={release}`)"
        return (
            f"note: pip still reports {dist} {version} ({meta.parent.name}: build-wheel's version names the set "
            f"the wheel was built with; apply and revert do not rewrite it); the tree now carries "
            f"{', '.join(patches) or 'no patches'}. For pip to say so: {fix}"
        )
    return None


# every local version build-wheel has written, now (ovl.fp<hex>) and before (ovl.<hex>): what the `.part` cleanup
# knows a build's partial wheel by, so the format is told in one place
LOCAL_PATTERN = r"ovl\.(?:fp)?[0-9a-f]+"


def wheel_local(fp: str) -> str:
    """The local version build-wheel gives the wheel of the set `fp`. The 'fp' keeps the segment from ever being
    digits only, which PEP 440 takes as a number: +ovl.012345678901 was written +ovl.12345678901, and `pip show`
    lost the 12 characters `fingerprint --short` prints. Wheels built before say +ovl.<short fingerprint>."""
    return f"ovl.fp{short(fp)}"


def _local(version: str) -> str | None:
    """The local part of `version` as PEP 440 normalizes it (None: no local part, or not PEP 440). build-wheel
    writes its version normalized, and before wheel_local a short fingerprint of digits only was a number there:
    +ovl.0123 was written +ovl.123."""
    from packaging.version import InvalidVersion, Version  # only for an installed tree's dist-info

    try:
        return Version(version).local
    except InvalidVersion:
        return None
