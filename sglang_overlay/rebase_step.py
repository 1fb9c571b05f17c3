"""What `rebase` writes and says beyond the classification (carry.py): the rewritten DEP-3 header, the
message of a stop, the environment variables checked against the release."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from pathlib import Path

from .carry import Step
from .manifest import Change, Manifest, Patch, patch_file

Reader = Callable[[str], "bytes | None"]

REBASED_FIELD = "Rebased-From"  # DEP-3 allows further fields; this one names the release a patch was made for


def rebased_header(header_text: str, from_version: str, today: datetime.date | None = None) -> str:
    """The DEP-3 header kept, Last-Update set to today, and a field naming the release it was carried from."""
    today = today or datetime.date.today()
    text = header_text
    if not text.rstrip("\n").endswith("---"):
        text = text.rstrip("\n") + "\n---\n"
    body, dashes = text.rstrip("\n")[:-3], "---\n"
    fields = [(r"Last-Update", today.isoformat()), (REBASED_FIELD, f"sglang {from_version}")]
    for name, value in fields:
        line = f"{name}: {value}"
        if re.search(rf"^{name}:.*$", body, re.MULTILINE):
            body = re.sub(rf"^{name}:.*$", line, body, count=1, flags=re.MULTILINE)
        else:
            body = body.rstrip("\n") + "\n" + line + "\n"
    return body + dashes


def describe_stop(p: Patch, step: Step, tree_root: Path | str, version: str) -> str:
    """What the user reads when the rebase stops at this patch: where, why, and what the patch meant to do."""
    change = patch_file(p)
    desc = (change.field("Description") if change else None) or p.description
    lines = [f"{p.name}: {step.status} on sglang {version}"]
    if step.status == "conflict":
        for f, st in step.files:
            lines.append(f"  {st:<9} {tree_root}/{f}" if st == "conflict" else f"  {st:<9} {f}")
        lines.append(f"  where: {step.detail}")
    else:
        lines.append(f"  {step.detail}")
    lines.append("  the patch's intent (Description):")
    lines += ["    " + line for line in desc.splitlines()]
    return "\n".join(lines)


def env_notes(m: Manifest, release: Reader, release_paths: Callable[[], list[str]]) -> list[str]:
    """Environment variables the patches read, checked against the release's own code: one the release now
    reads too (the patch and upstream would both act on it), and one the manifest says upstream forces that
    the release no longer names (its `sglang_forces` is stale)."""
    names = {v.name: (p, v) for p in m.patches for v in p.env}
    if not names:
        return []
    own = {
        f for p in m.patches if isinstance(p, Change) for f in p.overlay
    }  # the release's files are pristine; overlay ones are ours
    seen: dict[str, list[str]] = {n: [] for n in names}
    for path in release_paths():
        if not path.endswith(".py") or path in own:
            continue
        data = release(path) or b""
        for n in names:
            if n.encode() in data:
                seen[n].append(path)
    notes: list[str] = []
    for n, (p, v) in sorted(names.items()):
        if v.sglang_forces and not seen[n]:
            notes.append(
                f"{p.name}: {n}: the release no longer names it (sglang_forces {list(v.sglang_forces)} may be stale)"
            )
        elif not v.sglang_forces and seen[n]:
            notes.append(f"{p.name}: {n}: the release reads it too ({', '.join(seen[n][:3])})")
    return notes
