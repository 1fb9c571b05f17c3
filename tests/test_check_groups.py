"""`check` composes a subset one file group at a time (linear in the patches): the same findings as composing
every subset whole, on sets made from the real 0.5.17 files: shared files, disjoint files, a conflicting pair,
a patch that only fails after another, a patch that breaks the syntax, offsets."""

from __future__ import annotations

import pytest
from conftest import ROOT

from sglang_overlay import compat
from sglang_overlay import compose as compose_mod
from sglang_overlay.compose import compose
from sglang_overlay.diffgen import make_diff
from sglang_overlay.fetch import WheelSource, pinned_wheel
from sglang_overlay.manifest import load_manifest

FIX = ROOT / "tests" / "fixtures" / "engine"
FILES = (
    "python/sglang/srt/server_args.py",
    "python/sglang/srt/layers/moe/topk.py",
    "python/sglang/srt/models/llama_eagle3.py",
    "python/sglang/srt/models/qwen2_moe.py",
    "python/sglang/srt/models/glm4_moe.py",
    "python/sglang/srt/managers/scheduler.py",
)


@pytest.fixture(scope="module")
def read(project_manifest):
    return WheelSource(pinned_wheel(project_manifest.pin)).read


class WholeSubset:
    """The check as it was before groups: every subset composed whole, in one scratch copy."""

    def __init__(self, read, groups):
        self.read = read

    def __call__(self, patches):
        return compose({f: self.read(f) for f in {f for p in patches for f in p.files}}, patches)


def both(m, read, monkeypatch):
    fast = compat.check_pin(m, read, "0.5.17")
    with monkeypatch.context() as mp:
        mp.setattr(compat, "GroupComposer", WholeSubset)
        mp.setattr(compose_mod, "_batchable", lambda patches: False)  # and one `git apply` per patch
        slow = compat.check_pin(m, read, "0.5.17")
    return fast, slow


def same_findings(fast, slow):
    def key(i):
        return (i.what, i.subject, i.ok, i.detail)

    assert [key(i) for i in fast.items if i.what != "compile"] == [key(i) for i in slow.items if i.what != "compile"]
    # several files of one subset that fail to compile are listed in the order of a dict built from a set
    assert sorted(map(key, fast.items)) == sorted(map(key, slow.items))
    assert fast.offsets == slow.offsets and fast.ok == slow.ok


def edit(data: bytes, line: int, new: str, *, replace: bool = False) -> bytes:
    lines = data.decode().splitlines(keepends=True)
    lines[line : line + (1 if replace else 0)] = [new + "\n"]
    return "".join(lines).encode()


def project(tmp_path, read, patches: dict[str, dict[str, bytes]], extra: str = "") -> object:
    """A project whose patch NAME turns each file's pinned bytes into the given ones."""
    text = (ROOT / "manifest.yaml").read_text()
    pin = text[text.index("\npin:") + 1 : text.index("\npatches:")]
    (tmp_path / "patches").mkdir()
    entries = []
    for name, changes in patches.items():
        diff = make_diff({f: read(f) for f in changes}, changes)
        (tmp_path / "patches" / f"{name}.patch").write_text(f"Description: {name}\n---\n{diff}")
        entries.append(f"  - name: {name}\n    description: {name}\n    kind: diff\n    category: experimental\n")
    (tmp_path / "manifest.yaml").write_text("schema: 1\n" + pin + "\npatches:\n" + "".join(entries) + extra)
    return load_manifest(tmp_path / "manifest.yaml")


def test_fixture_set_with_shared_files_overlay_conflicts_and_proofs(read, monkeypatch):
    fast, slow = both(load_manifest(FIX / "manifest.yaml"), read, monkeypatch)
    assert fast.ok
    same_findings(fast, slow)


def test_the_real_patch_set(project_manifest, read, monkeypatch):
    fast, slow = both(project_manifest, read, monkeypatch)
    same_findings(fast, slow)


def test_disjoint_patches_compose_once_each(tmp_path, read, monkeypatch):
    m = project(tmp_path, read, {f"d{i}": {f: edit(read(f), 30, f"# disjoint {i}")} for i, f in enumerate(FILES)})
    calls = []
    real_compose = compat.compose
    monkeypatch.setattr(compat, "compose", lambda base, ps, **kw: calls.append(len(ps)) or real_compose(base, ps, **kw))
    fast = compat.check_pin(m, read, "0.5.17")
    n = len(FILES)
    # alone, full, reverse order and leave-one-out all reuse the N one-patch compositions
    assert calls == [1] * n, calls
    monkeypatch.setattr(compat, "compose", real_compose)
    fast2, slow = both(m, read, monkeypatch)
    assert fast.ok and [i.subject for i in fast.items] == [i.subject for i in fast2.items]
    same_findings(fast2, slow)
    assert sum(i.what == "leave-one-out" for i in fast.items) == n


def test_shared_file_group_pays_for_pairs_alone(tmp_path, read, monkeypatch):
    sa, topk = FILES[0], FILES[1]
    patches = {f"s{i}": {sa: edit(read(sa), 100 + 200 * i, f"# shared {i}")} for i in range(3)}
    patches |= {f"d{i}": {f: edit(read(f), 30, f"# disjoint {i}")} for i, f in enumerate(FILES[2:])}
    patches["both"] = {topk: edit(read(topk), 40, "# both"), sa: edit(read(sa), 900, "# both")}
    m = project(tmp_path, read, patches)
    calls = []
    real_compose = compat.compose
    monkeypatch.setattr(compat, "compose", lambda base, ps, **kw: calls.append(len(ps)) or real_compose(base, ps, **kw))
    fast = compat.check_pin(m, read, "0.5.17")
    assert fast.ok, [i for i in fast.items if not i.ok]
    # the disjoint ones once each; the group of four (s0, s1, s2, both: one file in common) its subsets
    assert calls.count(1) == len(FILES) - 2 + 4 and max(calls) == 4
    assert {i.subject for i in fast.items if i.what == "pair"} >= {"pair: s0+s1", "pair: s1+both"}
    monkeypatch.setattr(compat, "compose", real_compose)
    same_findings(*both(m, read, monkeypatch))


def test_a_conflicting_pair(tmp_path, read, monkeypatch):
    topk = FILES[1]
    m = project(
        tmp_path,
        read,
        {
            "a": {topk: edit(read(topk), 50, "# a wrote this line", replace=True)},
            "x": {FILES[4]: edit(read(FILES[4]), 60, "# x wrote this line", replace=True)},
            "y": {FILES[4]: edit(read(FILES[4]), 60, "# y wrote this line", replace=True)},
            "b": {topk: edit(read(topk), 50, "# b wrote this line", replace=True)},
            "other": {FILES[3]: edit(read(FILES[3]), 30, "# elsewhere")},
        },
    )
    fast, slow = both(m, read, monkeypatch)
    assert not fast.ok
    failed = {i.subject for i in fast.items if not i.ok}
    assert {"full set", "leave-one-out: -other", "pair: a+b", "pair: x+y"} <= failed
    assert "alone: a" not in failed and "leave-one-out: -a" in failed and "leave-one-out: -x" in failed
    same_findings(fast, slow)
    # two groups fail in the full set: it names the failure a whole compose meets first (y, before b)
    detail = next(i.detail for i in fast.items if i.subject == "full set")
    assert "y does not apply cleanly" in detail and FILES[4] in detail


def test_a_patch_that_only_fails_after_another(tmp_path, read, monkeypatch):
    sa = FILES[0]
    base = read(sa)
    first = edit(base, 400, "# first changes this line", replace=True)
    # `later`'s hunk has line 401 (which `first` replaces) in its context: alone it applies, after `first` not
    later = edit(base, 403, "# later, three lines below")
    m = project(
        tmp_path,
        read,
        {"first": {sa: first}, "mid": {FILES[2]: edit(read(FILES[2]), 30, "# mid")}, "later": {sa: later}},
    )
    fast, slow = both(m, read, monkeypatch)
    failed = {i.subject for i in fast.items if not i.ok}
    assert {"full set", "leave-one-out: -mid"} <= failed
    assert not {"alone: first", "alone: later", "alone: mid", "leave-one-out: -first"} & failed
    same_findings(fast, slow)


def moved(read, f: str, line: int, text: str) -> str:
    """A diff made against a copy with 3 extra lines on top: it lands on the pin with an offset of -3."""
    shifted = b"# 1\n# 2\n# 3\n" + read(f)
    return make_diff({f: shifted}, {f: edit(shifted, line, text)})


def test_a_syntax_error_and_offsets(tmp_path, read, monkeypatch):
    sa, topk, qwen = FILES[0], FILES[1], FILES[3]
    names = {"broken": {sa: edit(read(sa), 200, "def (:")}, "fine": {FILES[2]: edit(read(FILES[2]), 30, "# f")}}
    names |= {"m1": {topk: b""}, "m2": {qwen: b""}, "m3": {topk: b""}}
    project(tmp_path, read, names)
    for name, f, line in (("m1", topk, 80), ("m2", qwen, 90), ("m3", topk, 300)):
        (tmp_path / "patches" / f"{name}.patch").write_text(f"Description: {name}\n---\n{moved(read, f, line, name)}")
    m = load_manifest(tmp_path / "manifest.yaml")
    fast, slow = both(m, read, monkeypatch)
    assert any(i.what == "compile" and not i.ok and "alone: broken" in i.subject for i in fast.items)
    assert {o.split(":")[0] for o in fast.offsets} == {"m1", "m2", "m3"}
    same_findings(fast, slow)
    # one subset across two groups: the offsets in the order one whole compose reports them (m1, m2, m3)
    ps = [m.patch(n) for n in ("m1", "m2", "m3")]
    by_group = compat.GroupComposer(read, compat.file_groups(m))(ps)
    whole = WholeSubset(read, None)(ps)
    assert [o.patch for o in by_group.offsets] == ["m1", "m2", "m3"] and by_group.offsets == whole.offsets
    assert by_group.contents == whole.contents
