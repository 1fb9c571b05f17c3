"""Patch compatibility: the CI check on the pin, and the release radar over other releases.

Both read pristine files straight from release wheels and reuse `compose` — the same path `apply` takes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from .carry import carry
from .compose import compose
from .errors import Conflict
from .manifest import Change, Manifest, Patch, UpstreamedPatch
from .upstream import prove

Reader = Callable[[str], "bytes | None"]


# ---------------------------------------------------------------------------------------------- check (pin)
@dataclass
class CheckItem:
    what: str  # "alone", "full set", "leave-one-out", "pair", "order", "compile", "upstreamed", "overlay"
    subject: str
    ok: bool
    detail: str = ""


@dataclass
class CheckReport:
    version: str
    items: list[CheckItem] = field(default_factory=list)
    offsets: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.items)

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "ok": self.ok,
            "items": [asdict(i) for i in self.items],
            "offsets": self.offsets,
            "failures": sum(not i.ok for i in self.items),
        }


def subsets_that_matter(m: Manifest) -> list[tuple[str, tuple[str, ...]]]:
    """Every patch alone, the full set, leave-one-out, and every pair sharing a file (requires/conflicts kept)."""
    changing = [p for p in m.patches if isinstance(p, Change)]
    full: list[str] = []
    for p in changing:  # the full set: every patch that does not conflict with one already in it
        if not any(c in full for c in p.conflicts) and not any(p.name in m.patch(f).conflicts for f in full):
            full.append(p.name)
    out: list[tuple[str, tuple[str, ...]]] = []
    seen: set[tuple[str, ...]] = set()

    def add(label: str, names: Iterable[str]) -> None:
        try:
            s = m.closure(names)
        except Exception:
            return
        if s not in seen:
            seen.add(s)
            out.append((label, s))

    for p in changing:
        add(f"alone: {p.name}", [p.name])
    add("full set", full)
    for p in changing:
        if p.name in full:
            dependants = {q.name for q in changing if p.name in m.closure([q.name])}
            add(f"leave-one-out: -{p.name}", [n for n in full if n not in dependants])
    for a, b in itertools.combinations(changing, 2):
        if set(a.files) & set(b.files) and b.name not in a.conflicts and a.name not in b.conflicts:
            add(f"pair: {a.name}+{b.name}", [a.name, b.name])
    return out


def check_pin(m: Manifest, read: Reader, version: str) -> CheckReport:
    rep = CheckReport(version)
    compiled: set[int] = set()
    for p in m.patches:
        if isinstance(p, UpstreamedPatch):
            res = prove(p, read)
            rep.items.append(CheckItem("upstreamed", p.name, res.holds, res.detail))
            continue
        for f in p.overlay:
            if read(f) is not None:
                rep.items.append(
                    CheckItem("overlay", p.name, False, f"{f} exists upstream: the overlay would replace it")
                )
    for label, names in subsets_that_matter(m):
        patches = list(m.changes(names))
        try:
            composed = compose({f: read(f) for f in {f for p in patches for f in p.files}}, patches)
        except Conflict as e:
            rep.items.append(CheckItem(label.split(":")[0], label, False, str(e)))
            continue
        rep.offsets += [str(o) for o in composed.offsets if str(o) not in rep.offsets]
        rep.items.append(CheckItem(label.split(":")[0], label, True, f"{len(patches)} patch(es) apply with zero fuzz"))
        if len(patches) > 1:
            # Independent toggles: the reverse order must give the same bytes as manifest order.
            try:
                rev = compose({f: read(f) for f in composed.contents}, list(reversed(patches))).contents
                same = rev == composed.contents
                rep.items.append(
                    CheckItem(
                        "order",
                        label,
                        same,
                        "reverse order gives identical bytes"
                        if same
                        else "reverse order gives different bytes: "
                        + ", ".join(f for f in rev if rev[f] != composed.contents[f]),
                    )
                )
            except Conflict as e:
                rep.items.append(CheckItem("order", label, False, f"does not apply in reverse order: {e}"))
        for f, data in composed.contents.items():
            if f.endswith(".py") and data is not None and hash(data) not in compiled:
                compiled.add(hash(data))
                try:
                    compile(data, f, "exec", dont_inherit=True)
                except SyntaxError as e:
                    rep.items.append(CheckItem("compile", f"{label}: {f}", False, f"line {e.lineno}: {e.msg}"))
    rep.items.append(
        CheckItem(
            "compile",
            "all composed Python files",
            all(i.ok for i in rep.items if i.what == "compile"),
            f"{len(compiled)} distinct file version(s) byte-compile",
        )
    )
    return rep


# ---------------------------------------------------------------------------------------------- radar
STATUSES = ("clean", "offset", "needs-3way", "conflict", "upstreamed", "upstreamed-moved", "target-missing")


@dataclass
class Verdict:
    patch: str
    version: str
    status: str
    detail: str = ""
    max_offset: int = 0
    files: dict[str, str] = field(default_factory=dict)  # repo path -> that file's own result


def classify(
    p: Patch, release: Reader, version: str, original: Reader, paths: Callable[[], list[str]] | None = None
) -> Verdict:
    """How one patch fares against one release's pristine files (the patch alone); `paths` lists the release's
    files, where a moved proof is looked for."""
    if not isinstance(p, UpstreamedPatch) and p.diff is not None:
        missing = [f for f in p.diff.files if f not in p.diff.created and release(f) is None]
        if missing:
            return Verdict(p.name, version, "target-missing", "not in this release: " + ", ".join(missing))
    step = carry(p, original, release, paths or (list), version)
    status = _RADAR.get(step.status, step.status)
    if isinstance(p, UpstreamedPatch) and p.proof and release(p.proof.file) is None and step.status == "proof-failed":
        status, detail = "target-missing", f"{p.proof.file} is gone"
    else:
        detail = step.detail
    return Verdict(p.name, version, status, detail, step.max_offset, dict(step.files))


_RADAR = {"upstream": "upstreamed", "collision": "conflict", "proof-failed": "conflict"}


def radar(
    m: Manifest,
    versions: list[str],
    reader_for: Callable[[str], Reader],
    original: Reader,
    paths_for: Callable[[str], Callable[[], list[str]]] | None = None,
) -> list[Verdict]:
    verdicts = []
    for v in versions:
        read = reader_for(v)
        paths = paths_for(v) if paths_for else None
        for p in m.patches:
            verdicts.append(classify(p, read, v, original, paths))
    return verdicts
