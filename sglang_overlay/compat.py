"""Patch compatibility: the CI check on the pin, and the release radar over other releases.

Both read pristine files straight from release wheels and reuse `compose` — the same path `apply` takes.
"""

from __future__ import annotations

import itertools
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from . import scratch as scratch_dirs
from .compose import compose, hunk_symbol
from .errors import Conflict
from .gitcmd import git
from .manifest import Change, Manifest, Patch, UpstreamedPatch
from .pysymbols import symbol_span
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
STATUSES = ("clean", "offset", "needs-3way", "conflict", "upstreamed", "target-missing")


@dataclass
class Verdict:
    patch: str
    version: str
    status: str
    detail: str = ""
    max_offset: int = 0


def classify(p: Patch, release: Reader, version: str, original: Reader) -> Verdict:
    """How one patch fares against one release's pristine files (the patch alone)."""
    if isinstance(p, UpstreamedPatch):
        res = prove(p, release)
        if p.proof and release(p.proof.file) is None:
            return Verdict(p.name, version, "target-missing", f"{p.proof.file} is gone")
        return Verdict(p.name, version, "upstreamed" if res.holds else "conflict", res.detail)
    diff = p.diff
    targets = [f for f in (diff.files if diff else ()) if f not in (diff.created if diff else ())]
    missing = [f for f in targets if release(f) is None]
    if missing:
        return Verdict(p.name, version, "target-missing", "not in this release: " + ", ".join(missing))
    for f in p.overlay:
        data = release(f)
        if data is not None:
            same = data == p.overlay_source(f).read_bytes()
            return Verdict(
                p.name,
                version,
                "upstreamed" if same else "conflict",
                f"{f} now ships upstream" + ("" if same else " with other content"),
            )
    base = {f: release(f) for f in p.files}
    try:
        composed = compose(base, [p])
        offs = [o.offset for o in composed.offsets]
        if offs:
            worst = max(offs, key=abs)
            return Verdict(
                p.name, version, "offset", f"{len(offs)} hunk(s) moved, up to {worst:+d} lines", max_offset=worst
            )
        return Verdict(p.name, version, "clean")
    except Conflict as forward_error:
        forward = str(forward_error)
    if diff is not None and diff.body:
        try:
            compose({f: release(f) for f in diff.files}, [p], reverse=True)
            return Verdict(p.name, version, "upstreamed", "the change is already there (it reverse-applies)")
        except Conflict:
            pass
    merged, why = three_way(p, release, original)
    if merged:
        return Verdict(p.name, version, "needs-3way", "applies with a 3-way merge against the pinned release")
    return Verdict(p.name, version, "conflict", _locate_conflict(p, forward, release, original) + why)


def three_way(p: Change, release: Reader, original: Reader) -> tuple[bool, str]:
    """`git apply --3way` in a scratch repo that holds the release's files and the pin's blobs."""
    if p.diff is None:
        return False, " (no diff to merge)"
    scratch = scratch_dirs.make("3way")
    try:
        env_repo = ["-c", "user.name=x", "-c", "user.email=x@localhost"]
        git("init", "-q", "--template=", cwd=scratch, env={"GIT_CEILING_DIRECTORIES": str(scratch.parent)})
        for f in p.diff.files:
            data = original(f)
            if data is not None:  # the blobs the patch's index lines name, so git can merge
                blob = scratch / ".pin-blob"
                blob.write_bytes(data)
                git("hash-object", "-w", str(blob), cwd=scratch)
                blob.unlink()
            cur = release(f)
            if cur is not None:
                dst = scratch / f
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(cur)
        git(*env_repo, "add", "-A", cwd=scratch)
        git(*env_repo, "commit", "-q", "-m", "release", "--allow-empty", cwd=scratch)
        pf = scratch / ".git" / "change.patch"
        pf.write_bytes(p.diff.body)
        res = git("apply", "--3way", "--whitespace=nowarn", str(pf), cwd=scratch, check=False)
        if res.returncode == 0:
            return True, ""
        if "lacks the necessary blob" in res.stderr:
            return False, " (3-way impossible: the patch's index lines do not name the pinned blobs)"
        return False, ""
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _locate_conflict(p: Change, forward: str, release: Reader, original: Reader) -> str:
    """Name each failing hunk by its Python symbol in the pin, and where that symbol is in the release."""
    out = []
    hunks = p.diff.hunks if p.diff is not None else ()
    for f, line in re.findall(r"^  (\S+): hunk #\d+ @@ -(\d+)", forward, re.M):
        hunk = next((h for h in hunks if h.file == f and h.source_start == int(line)), None)
        if hunk is None:
            continue
        pin_text = (original(f) or b"").decode("utf-8", "replace")
        rel_text = (release(f) or b"").decode("utf-8", "replace")
        sym = hunk_symbol(hunk, pin_text or None)
        where = f"{f} hunk #{hunk.index} {hunk.header}"
        if sym:
            pin_span = symbol_span(pin_text, sym)
            rel_span = symbol_span(rel_text, sym)
            where += f" in `{sym}`"
            if pin_span:
                where += f" (pin: lines {pin_span[0]}-{pin_span[1]}"
            where += f"; release: lines {rel_span[0]}-{rel_span[1]})" if rel_span else "; release: gone)"
        out.append(where)
    return "; ".join(out) or forward.splitlines()[-1].strip()


def radar(m: Manifest, versions: list[str], reader_for: Callable[[str], Reader], original: Reader) -> list[Verdict]:
    verdicts = []
    for v in versions:
        read = reader_for(v)
        for p in m.patches:
            verdicts.append(classify(p, read, v, original))
    return verdicts
