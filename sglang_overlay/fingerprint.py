"""The patch-set identity: one hash of the pin, the applied patches' content and the env profile.

Headers (Description, Last-Update) are left out on purpose: editing metadata does not change the build.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from .manifest import Change, EnvProfile, Manifest, Patch

SHORT = 12


def patch_digest(patch: Patch) -> str:
    h = hashlib.sha256()
    if not isinstance(patch, Change):
        return h.hexdigest()  # an upstreamed entry writes nothing
    if patch.diff is not None:
        h.update(patch.diff.body)
    for repo_path in sorted(patch.overlay):
        h.update(b"\0" + repo_path.encode() + b"\0")
        h.update(patch.overlay_source(repo_path).read_bytes())
    return h.hexdigest()


def fingerprint(manifest: Manifest, names: Iterable[str], env_profile: EnvProfile | None = None) -> str:
    pin = manifest.pin
    doc = {
        "pin": [pin.package, pin.version, pin.sha256],
        # Upstreamed entries change nothing, so they do not change the identity either.
        "patches": [[p.name, patch_digest(p)] for p in manifest.changes(names)],
        "env": sorted(env_profile.as_env().items()) if env_profile else None,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def short(fp: str | None) -> str:
    return (fp or "")[:SHORT] or "-"
