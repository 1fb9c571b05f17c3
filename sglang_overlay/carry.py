"""One patch against another release: what it becomes there, decided from the pin's files and the release's.
The release radar (`check --against`) and `rebase` both ask this, so they can never disagree.

clean/offset: the diff applies with zero fuzz; needs-3way: every file merges with the pin's file as the base;
conflict: at least one file does not (the others still merge: each file has its own result); upstream: the
diff reverse-applies on the release; collision: an overlay file's path now ships upstream with other
content; upstreamed / upstreamed-moved (the proved code is in another file now, located and the proof
rewritten) / proof-failed for upstreamed entries.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from .compose import compose, hunk_symbol
from .errors import Conflict
from .manifest import Change, Patch, Proof, UpstreamedPatch
from .merge3 import merge_file
from .patchfile import Hunk
from .proofmove import locate
from .pysymbols import enclosing_symbol, symbol_span
from .record import Record, field, replace
from .upstream import prove

Reader = Callable[[str], "bytes | None"]
STOPS = ("conflict", "upstream", "collision", "proof-failed")  # results that need the user before going on


class Step(Record):
    patch: str
    status: str  # clean | offset | needs-3way | conflict | upstream | collision | upstreamed | upstreamed-moved | proof-failed
    detail: str = ""
    files: tuple[tuple[str, str], ...] = ()  # (repo path, that file's own result)
    contents: Mapping[str, bytes | None] = field(default_factory=dict)  # the diff's files on the release
    proof: Proof | None = None  # the rewritten proof (upstreamed-moved)
    max_offset: int = 0

    @property
    def stops(self) -> bool:
        return self.status in STOPS


def carry(p: Patch, pin: Reader, release: Reader, release_paths: Callable[[], list[str]], version: str) -> Step:
    if isinstance(p, UpstreamedPatch):
        return _upstreamed(p, release, release_paths)
    shipped: list[str] = []
    collide: list[str] = []
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
    diff_only = replace(p, overlay=())
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
            detail = f"{len(composed.offsets)} hunk(s) moved, up to {worst:+d} lines"
            return Step(p.name, "offset", detail, files, contents, max_offset=worst)
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
    where = []
    for m in merges:
        if m.status == "conflict":
            marked = marked_regions(p, m.path, m.data, pin, release, release_paths)
            where += marked or [w for w in locate_conflicts(p, forward, release, pin) if w.split(" ", 1)[0] == m.path]
    gone = [f for f in bad if base[f] is None]
    detail = "; ".join(where) or ", ".join(bad)
    if gone:
        detail += f" (not in {version}: {', '.join(gone)})"
    merged = [f for f, st in files if st == "merged"]
    if merged:
        detail += f"; merges cleanly: {', '.join(merged)}"
    return Step(p.name, "conflict", detail, files, contents)


def _upstreamed(p: UpstreamedPatch, release: Reader, release_paths: Callable[[], list[str]]) -> Step:
    res = prove(p, release)
    if res.holds:
        return Step(p.name, "upstreamed", res.detail)
    if p.proof is None:
        return Step(p.name, "proof-failed", res.detail)
    found = locate(p.proof, release, release_paths())
    # The moved proof alone must hold: the original change may not reverse-apply where the code moved.
    if len(found) == 1 and prove(replace(p, proof=found[0].proof, original=None), release).holds:
        return Step(p.name, "upstreamed-moved", found[0].describe(), proof=found[0].proof)
    if found:
        return Step(
            p.name,
            "proof-failed",
            f"{res.detail}; the code is in several files: {', '.join(m.proof.file for m in found)}",
        )
    return Step(p.name, "proof-failed", res.detail)


def locate_conflicts(p: Change, forward: str, release: Reader, original: Reader) -> list[str]:
    """Name each failing hunk by its Python symbol in the pin, and where that symbol is in the release."""
    out = []
    hunks = p.diff.hunks if p.diff is not None else ()
    for f, line in re.findall(r"^  (\S+): hunk #\d+ @@ -(\d+)", forward, re.MULTILINE):
        hunk = next((h for h in hunks if h.file == f and h.source_start == int(line)), None)
        if hunk is None:
            continue
        pin_text = (original(f) or b"").decode("utf-8", "replace")
        rel_text = (release(f) or b"").decode("utf-8", "replace")
        out.append(_hunk_where(hunk, pin_text, rel_text))
    return out


def _hunk_where(hunk: Hunk, pin_text: str, rel_text: str) -> str:
    sym = hunk_symbol(hunk, pin_text or None)
    where = f"{hunk.file} hunk #{hunk.index} {hunk.header}"
    if sym:
        pin_span = symbol_span(pin_text, sym)
        rel_span = symbol_span(rel_text, sym)
        where += f" in `{sym}`"
        if pin_span:
            where += f" (pin: lines {pin_span[0]}-{pin_span[1]}"
        where += f"; release: lines {rel_span[0]}-{rel_span[1]})" if rel_span else "; release: gone)"
    return where


def marked_regions(
    p: Change, f: str, merged: bytes | None, pin: Reader, release: Reader, release_paths: Callable[[], list[str]]
) -> list[str]:
    """Where the markers are: each region's lines, the function holding it and the patch's hunk written for that
    function (git's first failing hunk may be one the merge resolved); and where upstream moved that function's
    code when the release's is gone or a stub of it (0.5.23 moved Scheduler.get_internal_state's body out)."""
    if merged is None:
        return []
    text = merged.decode("utf-8", "replace")
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines, 1) if ln.startswith("<<<<<<< ")]
    ends = [i for i, ln in enumerate(lines, 1) if ln.startswith(">>>>>>> ")]
    if not starts:
        return []
    pin_text = (pin(f) or b"").decode("utf-8", "replace")
    rel_text = (release(f) or b"").decode("utf-8", "replace")
    hunks = [h for h in (p.diff.hunks if p.diff is not None else ()) if h.file == f]
    by_symbol: dict[str, list[Hunk]] = {}
    for h in hunks:
        sym = hunk_symbol(h, pin_text or None)
        if sym:
            by_symbol.setdefault(sym, []).append(h)
    out = []
    for a in starts:
        b = next((e for e in ends if e > a), a)
        # named as the pin has it (what the hunk was written for), from the region's base side; else the release's
        sym = _pin_symbol(lines[a:b], pin_text)
        if sym is None and rel_text:
            sym = enclosing_symbol(rel_text, _release_line(lines, a))
        if sym in by_symbol:
            # of the hunks written for that function, those whose added lines are the region's patched side
            ours = set(lines[next((i for i in range(a, b) if lines[i - 1] == "======="), b) : b - 1])
            mine = [
                h for h in by_symbol[sym] if any(ln.strip() and ln in ours for ln in h.added if ln not in h.removed)
            ]
            where = "; ".join(_hunk_where(h, pin_text, rel_text) for h in mine or by_symbol[sym])
            where += f": conflict markers at lines {a}-{b}"
        else:
            where = f"{f}: conflict markers at lines {a}-{b}" + (f" in `{sym}`" if sym else "")
        moved = _moved(sym, pin_text, rel_text, f, release, release_paths) if sym else None
        out.append(f"{where}; {moved}" if moved else where)
    return out


def _pin_symbol(region: list[str], pin_text: str) -> str | None:
    """The pin's function holding a conflict region's base side (the lines between ||||||| and =======)."""
    base = region[next((i + 1 for i, ln in enumerate(region) if ln.startswith("||||||| ")), len(region)) :]
    base = base[: next((i for i, ln in enumerate(base) if ln == "======="), len(base))]
    block = "\n".join(base)
    if not block.strip() or not pin_text:
        return None
    at = pin_text.find(block + "\n")
    if at < 0:
        return None
    return enclosing_symbol(
        pin_text, pin_text.count("\n", 0, at) + 1 + next(i for i, ln in enumerate(base) if ln.strip())
    )


def _release_line(merged_lines: list[str], line: int) -> int:
    """The release's line number of merged line `line`: the merge keeps release lines outside the markers, so
    count the lines before it that are not inside a conflict region (the release side of one counts too)."""
    n, side = 0, "out"
    for ln in merged_lines[: line - 1]:
        if ln.startswith("<<<<<<< "):
            side = "release"
        elif ln.startswith("||||||| "):
            side = "base"
        elif ln == "=======":
            side = "patched"
        elif ln.startswith(">>>>>>> "):
            side = "out"
        elif side in ("out", "release"):
            n += 1
    return n + 1


def _moved(
    sym: str, pin_text: str, rel_text: str, f: str, release: Reader, release_paths: Callable[[], list[str]]
) -> str | None:
    """Where the body of `sym` went, when the release's is gone or under a quarter of the pin's: the files that
    define a function of the same name (the proof-move search's question, asked of a function)."""
    old, new = symbol_span(pin_text, sym), symbol_span(rel_text, sym)
    if old is None or (new is not None and (new[1] - new[0] + 1) * 4 >= old[1] - old[0] + 1):
        return None
    last = sym.rsplit(".", 1)[-1]
    pattern = re.compile(rb"^[ \t]*(?:async[ \t]+)?def[ \t]+" + re.escape(last.encode()) + rb"\b", re.M)
    found = []
    for path in release_paths():
        if path == f or not path.endswith(".py"):
            continue
        data = release(path)
        hit = pattern.search(data) if data is not None else None
        if data is not None and hit:
            line = data[: hit.start()].count(b"\n") + 1
            found.append(f"{path}:{line}")
    if not found:
        return None
    said = "gone" if new is None else f"{new[1] - new[0] + 1} lines now (pin: {old[1] - old[0] + 1})"
    return f"upstream's `{sym}` is {said}: its code may have moved to {', '.join(found[:3])}"
