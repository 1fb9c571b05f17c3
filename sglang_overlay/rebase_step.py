"""One patch carried to a new release: what it becomes there, decided from the pin's files and the release's.

clean/offset: the diff applies with zero fuzz; needs-3way: every file merges with the pin's file as the base;
conflict: at least one file does not (the others are still merged, each file has its own result);
upstream: the diff reverse-applies on the release (an offer to make the entry `upstreamed`); collision: an
overlay file's path now ships upstream; upstreamed / upstreamed-moved / proof-failed for upstreamed entries.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from .compat import locate_conflicts
from .compose import compose
from .errors import Conflict
from .manifest import Patch, Proof
from .merge3 import merge_file
from .proofmove import locate
from .upstream import prove

Reader = Callable[[str], "bytes | None"]
STOPS = ("conflict", "upstream", "collision", "proof-failed")  # results that need the user before going on
REBASED_FIELD = "Rebased-From"  # DEP-3 allows further fields; this one names the release a patch was made for


@dataclass(frozen=True)
class Step:
    patch: str
    status: str  # clean | offset | needs-3way | conflict | upstream | collision | upstreamed | upstreamed-moved | proof-failed
    detail: str = ""
    files: tuple[tuple[str, str], ...] = ()  # (repo path, that file's own result)
    contents: Mapping[str, bytes | None] = dataclasses.field(default_factory=dict)  # the diff's files on the release
    proof: Proof | None = None  # the rewritten proof (upstreamed-moved)

    @property
    def stops(self) -> bool:
        return self.status in STOPS


def carry(p: Patch, pin: Reader, release: Reader, release_paths: Callable[[], list[str]], version: str) -> Step:
    if p.kind == "upstreamed":
        return _upstreamed(p, release, release_paths)
    shipped, collide = [], []
    for f in p.overlay:
        data = release(f)
        if data is not None:
            (shipped if data == p.overlay_source(f).read_bytes() else collide).append(f)
    if collide:
        return Step(
            p.name,
            "collision",
            f"overlay file(s) {', '.join(collide)} now ship upstream in {version} with other content: "
            f"the overlay would replace upstream's file",
            tuple((f, "collision") for f in collide),
        )
    if p.diff is None or not p.diff.body:
        if shipped and len(shipped) == len(p.overlay):
            return Step(p.name, "upstream", f"{version} ships every overlay file of it, byte for byte")
        return Step(p.name, "clean", "overlay files only")
    diff_only = dataclasses.replace(p, overlay=())
    base = {f: release(f) for f in p.diff.files}
    try:
        composed = compose(base, [diff_only])
    except Conflict as e:
        forward = str(e)
    else:
        moved = {o.file for o in composed.offsets}
        files = tuple((f, "offset" if f in moved else "clean") for f in p.diff.files)
        contents = {f: composed.contents.get(f) for f in p.diff.files}
        if composed.offsets:
            worst = max((o.offset for o in composed.offsets), key=abs)
            return Step(p.name, "offset", f"{len(composed.offsets)} hunk(s) moved, up to {worst:+d}", files, contents)
        return Step(p.name, "clean", "", files, contents)
    try:
        compose(base, [diff_only], reverse=True)
        return Step(p.name, "upstream", f"the change is already in {version} (its diff reverse-applies)")
    except Conflict:
        pass
    originals = {f: pin(f) for f in p.diff.files}
    patched = compose(originals, [diff_only]).contents
    merges = [
        merge_file(f, base[f], originals[f], patched.get(f), release_label=f"sglang {version}", pin_label="pin")
        for f in p.diff.files
    ]
    files = tuple((m.path, m.status if m.status != "unchanged" else "clean") for m in merges)
    contents = {m.path: m.data for m in merges}
    bad = [m.path for m in merges if m.status == "conflict"]
    if not bad:
        return Step(p.name, "needs-3way", "merged: " + ", ".join(f for f, s in files if s == "merged"), files, contents)
    where = [w for w in locate_conflicts(p, forward, release, pin) if w.split(" ", 1)[0] in bad]
    gone = [f for f in bad if base[f] is None]
    detail = "; ".join(where) or ", ".join(bad)
    if gone:
        detail += f" (not in {version}: {', '.join(gone)})"
    return Step(p.name, "conflict", detail, files, contents)


def _upstreamed(p: Patch, release: Reader, release_paths: Callable[[], list[str]]) -> Step:
    res = prove(p, release)
    if res.holds:
        return Step(p.name, "upstreamed", res.detail)
    if p.proof is None:
        return Step(p.name, "proof-failed", res.detail)
    found = locate(p.proof, release, release_paths())
    if len(found) == 1 and prove(dataclasses.replace(p, proof=found[0].proof, diff=None), release).holds:
        return Step(p.name, "upstreamed-moved", found[0].describe(), proof=found[0].proof)
    if found:
        return Step(
            p.name,
            "proof-failed",
            f"{res.detail}; the code is in several files: {', '.join(m.proof.file for m in found)}",
        )
    return Step(p.name, "proof-failed", res.detail)


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
        if re.search(rf"^{name}:.*$", body, re.M):
            body = re.sub(rf"^{name}:.*$", line, body, count=1, flags=re.M)
        else:
            body = body.rstrip("\n") + "\n" + line + "\n"
    return body + dashes


def describe_stop(p: Patch, step: Step, tree_root, version: str) -> str:
    """What the user reads when the rebase stops at this patch: where, why, and what the patch meant to do."""
    desc = (p.diff.field("Description") if p.diff else None) or p.description
    lines = [f"{p.name}: {step.status} on sglang {version}"]
    if step.status == "conflict":
        for f, st in step.files:
            lines.append(f"  {st:<9} {tree_root}/{f}" if st == "conflict" else f"  {st:<9} {f}")
        lines.append(f"  where: {step.detail}")
    else:
        lines.append(f"  {step.detail}")
    lines.append("  the patch's intent (Description):")
    lines += ["    " + l for l in desc.splitlines()]
    return "\n".join(lines)


def env_notes(m, release: Reader, release_paths: Callable[[], list[str]]) -> list[str]:
    """Environment variables the patches read, checked against the release's own code: one the release now
    reads too (the patch and upstream would both act on it), and one the manifest says upstream forces that
    the release no longer names (its `sglang_forces` is stale)."""
    names = {v.name: (p, v) for p in m.patches for v in p.env}
    if not names:
        return []
    own = {f for p in m.patches for f in p.overlay}  # the release's files are pristine; overlay ones are ours
    seen: dict[str, list[str]] = {n: [] for n in names}
    for path in release_paths():
        if not path.endswith(".py") or path in own:
            continue
        data = release(path) or b""
        for n in names:
            if n.encode() in data:
                seen[n].append(path)
    notes = []
    for n, (p, v) in sorted(names.items()):
        if v.sglang_forces and not seen[n]:
            notes.append(
                f"{p.name}: {n}: the release no longer names it (sglang_forces {list(v.sglang_forces)} may be stale)"
            )
        elif not v.sglang_forces and seen[n]:
            notes.append(f"{p.name}: {n}: the release reads it too ({', '.join(seen[n][:3])})")
    return notes
