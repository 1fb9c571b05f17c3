"""Patch compatibility: the CI check on the pin, and the release radar over other releases.

Both read pristine files straight from release wheels and reuse `compose` — the same path `apply` takes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

from .carry import carry
from .compilecache import Compiler, verdict_file
from .compose import Composed, compose
from .compose_many import compose_many
from .errors import Conflict, ManifestError
from .manifest import Change, Manifest, Patch, UpstreamedPatch
from .pysymbols import symbol_span
from .record import Record, asdict, field
from .undefined import Known, describe
from .upstream import prove

Reader = Callable[[str], "bytes | None"]


# ---------------------------------------------------------------------------------------------- check (pin)
class CheckItem(Record, frozen=False):
    what: str  # "alone", "full set", "leave-one-out", "pair", "order", "compile", "names", "upstreamed", "overlay"
    subject: str
    ok: bool
    detail: str = ""


class CheckReport(Record, frozen=False):
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
    seen: set[tuple[tuple[str, ...], str]] = set()

    def add(label: str, names: Iterable[str], own: str = "") -> None:
        try:
            s = m.closure(names)
        except ManifestError:  # a set holding a conflicting pair is no subset to check
            return
        if (s, own) not in seen:
            seen.add((s, own))
            out.append((label, s))

    for p in changing:
        add(f"alone: {p.name}", [p.name])
    add("full set", full)
    needs = {q.name: m.closure([q.name]) for q in changing}  # once each, not once per leave-one-out
    for p in changing:
        if p.name in full:
            dependants = {q for q, closure in needs.items() if p.name in closure}
            add(f"leave-one-out: -{p.name}", [n for n in full if n not in dependants])
    for a, b in itertools.combinations(changing, 2):
        if set(a.files) & set(b.files) and b.name not in a.conflicts and a.name not in b.conflicts:
            # a pair requires does not tie is its own subset, even where it is another's set: its order differs
            try:
                untied = a.name not in m.closure([b.name]) and b.name not in m.closure([a.name])
            except ManifestError:
                continue  # a closure with a conflict: add() would leave the pair out too
            add(f"pair: {a.name}+{b.name}", [a.name, b.name], f"{a.name}+{b.name}" if untied else "")
    return out


def file_groups(m: Manifest) -> dict[str, int]:
    """Patch name -> its group: patches are in one group when they write a common file, directly or through
    others. Patches of different groups cannot interact (each `git apply` reads and writes only its own files),
    so a subset composes group by group, and a group's part of it is the same in many subsets."""
    parent = {p.name: p.name for p in m.patches}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    writer: dict[str, str] = {}
    for p in m.patches:
        for f in p.files:
            if f in writer:
                parent[find(p.name)] = find(writer[f])
            else:
                writer[f] = p.name
    roots: dict[str, int] = {}
    return {p.name: roots.setdefault(find(p.name), len(roots)) for p in m.patches}


class GroupComposer:
    """`compose` of a subset of patches, one file group at a time, each group's result kept for the next subset.

    The check composes O(N) subsets of up to N patches; on disjoint files the groups' parts repeat, so the
    compositions are O(N) overall, and only patches that share a file pay for leave-one-out and pairs. `prepare`
    composes the distinct parts of many subsets at once (a few `git apply` processes, not one a part). A group
    that fails is never reported from its part: the whole subset is composed again as one, in order, so the
    failure (which patch, file, hunk) is the one a plain `compose` of the subset names."""

    def __init__(self, read: Reader, groups: dict[str, int]):
        self.read, self.groups = read, groups
        self.memo: dict[tuple[str, ...], Composed | Conflict] = {}
        self.pristine: dict[str, bytes | None] = {}
        self.versions: dict[bytes, bytes] = {}  # one object per distinct file content (memory; cheap compares)

    def parts(self, patches: list[Change]) -> list[list[Change]]:
        by_group: dict[int, list[Change]] = {}
        for p in patches:
            by_group.setdefault(self.groups[p.name], []).append(p)
        return list(by_group.values())

    def base(self, patches: list[Change]) -> dict[str, bytes | None]:
        for f in _files(patches):
            if f not in self.pristine:
                self.pristine[f] = self.read(f)
        return {f: self.pristine[f] for f in _files(patches)}

    def prepare(self, subsets: Iterable[list[Change]]) -> None:
        todo: dict[tuple[str, ...], list[Change]] = {}
        for patches in subsets:
            for part in self.parts(patches):
                key = tuple(p.name for p in part)
                if key not in self.memo:
                    todo.setdefault(key, part)
        jobs = [(self.base(part), part) for part in todo.values()]
        for key, done in zip(todo, compose_many(jobs)):
            if done is not None:  # the rest are composed alone when asked for, which names a failure
                self.memo[key] = self._kept(done)

    def __call__(self, patches: list[Change]) -> Composed:
        contents: dict[str, bytes | None] = {}
        offsets = []
        for part in self.parts(patches):
            key = tuple(p.name for p in part)
            if key not in self.memo:
                try:
                    self.memo[key] = self._kept(compose(self.base(part), part))
                except Conflict as e:
                    self.memo[key] = e
            done = self.memo[key]
            if isinstance(done, Conflict):
                return compose(self.base(patches), patches)
            contents.update(done.contents)
            offsets += done.offsets
        at = {p.name: i for i, p in enumerate(patches)}
        offsets.sort(key=lambda o: at[o.patch])  # stable: the order one compose of the subset reports them in
        return Composed(contents, offsets)

    def _kept(self, done: Composed) -> Composed:
        for f, data in done.contents.items():
            if data is not None:
                done.contents[f] = self.versions.setdefault(data, data)
        return done


def _files(patches: list[Change]) -> list[str]:
    return list(dict.fromkeys(f for p in patches for f in p.files))


def _reversed(m: Manifest, patches: Sequence[Change]) -> list[Change]:
    """The other order a set must give the same bytes in: its units reversed, a unit being the patches tied by
    `requires`, directly or through entries that write nothing (in manifest order inside it). A patch moves past
    every patch it is not tied to."""
    inside = {p.name for p in patches}
    unit = {p.name: p.name for p in patches}

    def root(n: str) -> str:
        while unit[n] != n:
            n = unit[n]
        return n

    for p in patches:
        for r in m.closure([p.name]):
            if r in inside:
                unit[root(p.name)] = root(r)
    units: dict[str, list[Change]] = {}
    for p in patches:
        units.setdefault(root(p.name), []).append(p)
    return [p for members in reversed(list(units.values())) for p in members]


def _other_order(m: Manifest, label: str, patches: list[Change]) -> list[Change]:
    """A pair's subset puts the later of the two first, with what it requires: no single order of a set swaps
    every two patches that `requires` does not tie (a < p < x, x requiring a). Any other subset: _reversed."""
    if label.startswith("pair: "):
        first, later = label.removeprefix("pair: ").split("+")
        lead = m.closure([later])
        if first not in lead and later not in m.closure([first]):
            return [p for p in patches if p.name in lead] + [p for p in patches if p.name not in lead]
    return _reversed(m, patches)


def check_pin(m: Manifest, read: Reader, version: str, compiler: Compiler | None = None) -> CheckReport:
    rep = CheckReport(version)
    compiler = compiler or Compiler(verdict_file())
    compiled: set[bytes] = set()  # contents, not hashes: a collision must not skip a compile
    names = 0  # versions whose names were checked (those that compile)
    names_known = Known()
    released: dict[str, bytes | None] = {}  # the release's file of each, to tell its undefined names from ours
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
    compose_set = GroupComposer(read, file_groups(m))
    subsets = [(label, list(m.changes(names))) for label, names in subsets_that_matter(m)]
    others = {label: _other_order(m, label, patches) for label, patches in subsets}
    compose_set.prepare(order for label, patches in subsets for order in (patches, others[label]))
    for label, patches in subsets:
        try:
            composed = compose_set(patches)
        except Conflict as e:
            rep.items.append(CheckItem(label.split(":")[0], label, False, str(e)))
            continue
        rep.offsets += [str(o) for o in composed.offsets if str(o) not in rep.offsets]
        rep.items.append(CheckItem(label.split(":")[0], label, True, f"{len(patches)} patch(es) apply with zero fuzz"))
        other = others[label]
        if other != patches:
            # Independent toggles: the other order must give the same bytes as manifest order.
            try:
                rev = compose_set(other).contents
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
            if f.endswith(".py") and data is not None and data not in compiled:
                compiled.add(data)
                error = compiler.error(data, f, compose_set.pristine.get(f))
                if error is not None:
                    rep.items.append(CheckItem("compile", f"{label}: {f}", False, error))
                    continue
                names += 1
                if f not in released:
                    released[f] = read(f)
                found = names_known.check(data, released[f])
                if found:
                    rep.items.append(CheckItem("names", f"{label}: {f}", False, describe(f, found)))
    compiler.save()
    names_known.save()
    rep.items.append(
        CheckItem(
            "names",
            "all composed Python files",
            all(i.ok for i in rep.items if i.what == "names"),
            f"{names} distinct file version(s) use no name the release's file does not define or import",
        )
    )
    known = len(compiled) - compiler.compiled
    rep.items.append(
        CheckItem(
            "compile",
            "all composed Python files",
            all(i.ok for i in rep.items if i.what == "compile"),
            f"{len(compiled)} distinct file version(s) byte-compile"
            + (f" ({known} of them known to compile from earlier runs: the same bytes, this Python)" if known else "")
            + (
                f"; {compiler.by_region} proved by compiling their changed top-level statements"
                if compiler.by_region
                else ""
            ),
        )
    )
    return rep


# ---------------------------------------------------------------------------------------------- radar
STATUSES = (
    "clean",
    "offset",
    "needs-3way",
    "conflict",
    "upstreamed",
    "upstreamed-moved",
    "proof-failed",
    "target-missing",
)
# Verdicts the table explains below itself (a clean or upstreamed row needs no words).
EXPLAINED = ("conflict", "proof-failed", "target-missing", "needs-3way", "upstreamed-moved")


class Verdict(Record, frozen=False):
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
    elif step.status == "proof-failed" and isinstance(p, UpstreamedPatch) and p.proof:
        detail = step.detail + proof_hint(p, release(p.proof.file))
    else:
        detail = step.detail
    return Verdict(p.name, version, status, detail, step.max_offset, dict(step.files))


# A failed proof is not a conflict: the fix may be upstream in another spelling (the proof is what to edit).
_RADAR = {"upstream": "upstreamed", "collision": "conflict"}


def proof_hint(p: UpstreamedPatch, data: bytes | None) -> str:
    """Where the proof's symbols are in the release and the release's code nearest each line the proof lacks:
    what a person reads to tell a re-spelled fix from a lost one, and the proof to edit if it is the former."""
    import difflib

    if p.proof is None or data is None:
        return ""
    text = data.decode("utf-8", "replace")
    lines = text.splitlines()
    spans = [(s, symbol_span(text, s)) for s in p.proof.symbols]
    start, end = next((sp for _, sp in spans if sp), (1, len(lines)))
    said = [f"`{s}` is at {p.proof.file}:{sp[0]}-{sp[1]}" for s, sp in spans if sp]
    for c in p.proof.contains:
        if c in text:
            continue
        want = [ln.strip() for ln in c.strip().splitlines()]
        best, at = 0.0, 0
        for i in range(start - 1, max(start, end - len(want) + 1)):  # the window of the snippet's length
            got = [ln.strip() for ln in lines[i : i + len(want)]]
            ratio = difflib.SequenceMatcher(None, "\n".join(want), "\n".join(got)).ratio()
            if ratio > best:
                best, at = ratio, i
        if best >= 0.6:
            near = " / ".join(ln.strip() for ln in lines[at : at + len(want)])
            said.append(f"nearest to {want[0]!r} there: line {at + 1}: {near!r}")
    if not said:
        return ""
    return "; " + "; ".join(said) + f" (the fix may be upstream re-spelled: if so, edit {p.name}'s proof)"


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
