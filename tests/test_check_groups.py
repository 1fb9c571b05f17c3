"""`check` composes a subset one file group at a time (linear in the patches): the same findings as composing
every subset whole, on sets made from the real 0.5.17 files: shared files, disjoint files, a conflicting pair,
a patch that only fails after another, a patch that breaks the syntax, offsets."""

from __future__ import annotations

import errno
import hashlib
import os
import sys

import pytest
from conftest import ROOT

from sglang_overlay import compat, compilecache
from sglang_overlay import compose as compose_mod
from sglang_overlay import compose_many as compose_many_mod
from sglang_overlay.compilecache import Compiler
from sglang_overlay.compose import compose
from sglang_overlay.diffgen import make_diff
from sglang_overlay.errors import Conflict
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
        self.pristine = {}  # no pristine files: every version compiled whole, none from its changed region

    def prepare(self, subsets):
        pass

    def __call__(self, patches):
        return compose({f: self.read(f) for f in {f for p in patches for f in p.files}}, patches)


def both(m, read, monkeypatch):
    fast = compat.check_pin(m, read, "0.5.17", Compiler(None))  # every version compiled, no verdict kept
    with monkeypatch.context() as mp:
        mp.setattr(compat, "GroupComposer", WholeSubset)
        mp.setattr(compose_mod, "_batchable", lambda patches: False)  # and one `git apply` per patch
        slow = compat.check_pin(m, read, "0.5.17", Compiler(None))
    return fast, slow


def same_findings(fast, slow):
    def key(i):
        # the summary says how many versions the fast one proved from their changed statements: not a finding
        return (
            i.what,
            i.subject,
            i.ok,
            i.detail.split("; ")[0] if i.subject == "all composed Python files" else i.detail,
        )

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


def counted(monkeypatch) -> dict[str, list]:
    """The parts check composes: each batch of `compose_many` (its jobs' sizes), and each `compose` alone."""
    calls: dict[str, list] = {"batches": [], "alone": []}
    real_many, real_compose = compat.compose_many, compat.compose

    def many(jobs):
        calls["batches"].append([len(ps) for _, ps in jobs])
        return real_many(jobs)

    def alone(base, ps, **kw):
        calls["alone"].append(len(ps))
        return real_compose(base, ps, **kw)

    monkeypatch.setattr(compat, "compose_many", many)
    monkeypatch.setattr(compat, "compose", alone)
    return calls


def test_disjoint_patches_compose_once_each(tmp_path, read, monkeypatch):
    m = project(tmp_path, read, {f"d{i}": {f: edit(read(f), 30, f"# disjoint {i}")} for i, f in enumerate(FILES)})
    calls = counted(monkeypatch)
    fast = compat.check_pin(m, read, "0.5.17")
    n = len(FILES)
    # alone, full, reverse order and leave-one-out all reuse the N one-patch compositions, made in one batch
    assert calls == {"batches": [[1] * n], "alone": []}, calls
    monkeypatch.undo()
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
    calls = counted(monkeypatch)
    fast = compat.check_pin(m, read, "0.5.17")
    assert fast.ok, [i for i in fast.items if not i.ok]
    # the disjoint ones once each; the group of four (s0, s1, s2, both: one file in common) its subsets, each in
    # manifest and in reverse order: alone 4, pairs 6 (x2), leave-one-out 4 (x2), the group whole (x2)
    [sizes] = calls["batches"]
    assert calls["alone"] == [] and sizes.count(1) == len(FILES) - 2 + 4 and max(sizes) == 4
    assert sorted(sizes) == sorted([1] * 8 + [2] * 12 + [3] * 8 + [4] * 2)
    assert {i.subject for i in fast.items if i.what == "pair"} >= {"pair: s0+s1", "pair: s1+both"}
    monkeypatch.undo()
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


def top_level_slots(data: bytes) -> list[int]:
    """Lines before which a new module-level statement fits: a `def`/`class` at column 0 after a blank line."""
    lines = data.decode().splitlines()
    return [i for i in range(1, len(lines)) if lines[i].startswith(("def ", "class ")) and not lines[i - 1].strip()]


def test_a_syntax_error_only_in_one_pair_is_found_in_each_subset_that_has_it(tmp_path, read, monkeypatch):
    """`assign` and `declare` each compile alone, but not together (a module-level name assigned before its
    `global` declaration): every subset holding both must fail to compile, no other. A skipped combination, or
    the bytes of one combination compiled for another, would miss it or blame the wrong subset."""
    topk = FILES[1]
    slots = top_level_slots(read(topk))
    names = {
        "assign": {topk: edit(read(topk), slots[1], "_sglang_overlay_planted = 1")},
        "b1": {topk: edit(read(topk), slots[3], "# a bystander on the same file")},
        "b2": {topk: edit(read(topk), slots[4], "# another")},
        "declare": {topk: edit(read(topk), slots[-1], "global _sglang_overlay_planted")},
        "elsewhere": {FILES[3]: edit(read(FILES[3]), 30, "# another group")},
    }
    m = project(tmp_path, read, names)
    for name, changes in names.items():
        compile(changes[next(iter(changes))], name, "exec")  # each alone is valid Python
    fast, slow = both(m, read, monkeypatch)
    failed = {i.subject for i in fast.items if i.what == "compile" and not i.ok}
    # each distinct version is compiled once, under the first subset that has it (leave-one-out -elsewhere has
    # the full set's version of topk.py); the pair's version is in no other subset
    assert failed == {
        f"full set: {topk}",
        f"leave-one-out: -b1: {topk}",
        f"leave-one-out: -b2: {topk}",
        f"pair: assign+declare: {topk}",
        "all composed Python files",
    }, failed
    lines = {
        1 + slots[-1] + k for k in (1, 2, 3)
    }  # the `global` line, below the one to three lines the others inserted above it
    details = {
        i.detail for i in fast.items if i.what == "compile" and not i.ok and i.subject != "all composed Python files"
    }
    assert details == {
        f"line {n}: name '_sglang_overlay_planted' is assigned to before global declaration" for n in lines
    }
    assert all(i.ok for i in fast.items if i.what != "compile")
    same_findings(fast, slow)


def jobs_of(m, read, sets):
    return [({f: read(f) for p in ps for f in m.patch(p).files}, [m.patch(p) for p in ps]) for ps in sets]


def test_compose_many_gives_what_compose_gives_job_by_job(tmp_path, read, monkeypatch):
    """Each job of one batch against `compose` of it alone: bytes, offsets (one diff made against a shifted
    copy), a file created and one deleted, several patches on one file in both orders. A job that fails is left
    for `compose` (None) and costs one more git call; the jobs after it are still settled."""
    sa, topk, qwen = FILES[0], FILES[1], FILES[3]
    names = {
        "s0": {sa: edit(read(sa), 100, "# s0")},
        "s1": {sa: edit(read(sa), 300, "# s1")},
        "clash": {sa: edit(read(sa), 300, "# clash", replace=True)},
        "new": {"python/sglang/srt/planted_new.py": b"x = 1\n", topk: edit(read(topk), 40, "# new")},
        "gone": {FILES[5]: None},
        "m1": {qwen: b""},
    }
    project(tmp_path, read, names)
    (tmp_path / "patches" / "m1.patch").write_text(f"Description: m1\n---\n{moved(read, qwen, 90, 'm1')}")
    m = load_manifest(tmp_path / "manifest.yaml")
    sets = [["s0", "s1"], ["s1", "s0"], ["s1", "clash"], ["new", "m1"], ["gone"], ["s0"], ["m1", "s0", "new"]]
    jobs = jobs_of(m, read, sets)
    calls = []
    real_git = compose_many_mod.git_outside_repo
    monkeypatch.setattr(compose_many_mod, "git_outside_repo", lambda *a, **kw: calls.append(a[0]) or real_git(*a, **kw))
    got = compose_many_mod.compose_many(jobs)
    # all jobs as one input fail for the clash; then an input each: the clash stops the second call, the jobs
    # after it go to a third
    assert calls.count("apply") == 3, calls
    for names_, (base, ps), many in zip(sets, jobs, got):
        if names_ == ["s1", "clash"]:
            assert many is None
            with pytest.raises(Conflict, match="clash does not apply cleanly"):
                compose(base, ps)
            continue
        alone = compose(base, ps)
        assert many is not None and many.contents == alone.contents and many.offsets == alone.offsets, names_
    assert got[3].contents["python/sglang/srt/planted_new.py"] == b"x = 1\n" and got[4].contents[FILES[5]] is None
    assert [o.patch for o in got[3].offsets] == ["m1"] and got[0].contents == got[1].contents


def test_compose_many_leaves_what_it_cannot_do_to_compose(tmp_path, read, monkeypatch):
    topk = FILES[1]
    m = project(tmp_path, read, {"a": {topk: edit(read(topk), 40, "# a")}})
    jobs = jobs_of(m, read, [["a"], ["a"]])
    assert all(compose_many_mod.compose_many(jobs))
    # a git that wrote through the hard links (into the one original every copy shares): nothing is settled
    real_git = compose_many_mod.git_outside_repo

    def through_links(*args, cwd):
        res = real_git(*args, cwd=cwd)
        for f in (cwd.parent / "orig").iterdir() if args[0] == "apply" else ():
            f.write_bytes(f.read_bytes() + b"# written through a link\n")
        return res

    monkeypatch.setattr(compose_many_mod, "git_outside_repo", through_links)
    assert compose_many_mod.compose_many(jobs) == [None, None]
    monkeypatch.undo()
    # no room in $TMPDIR for every copy at once: nothing settled, nothing left behind, and check still holds
    writes = []

    def full(path, data):
        writes.append(path)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(compose_many_mod, "write_plain", full)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    assert compose_many_mod.compose_many(jobs) == [None, None] and writes
    assert os.listdir(tmp_path / "tmp") == []
    rep = compat.check_pin(m, read, "0.5.17")
    assert rep.ok and [i.subject for i in rep.items][:1] == ["alone: a"]


def test_the_users_git_config_and_attributes_change_nothing_a_patch_program_writes(tmp_path, read, monkeypatch):
    """`* eol=crlf` in the user's attributes, core.autocrlf and apply.whitespace=error in ~/.gitconfig: git in a
    scratch directory made CRLF files or refused a diff whose added line ends in a space. compose (apply,
    check) and compose_many must give the bytes they give for a user without any git configuration."""
    topk = FILES[1]
    m = project(tmp_path, read, {"a": {topk: edit(read(topk), 40, "# a trailing space ")}})
    jobs = jobs_of(m, read, [["a"], ["a"]])
    clean = compose(*jobs[0]).contents
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "attributes").write_text("* eol=crlf\n")
    (home / ".gitconfig").write_text("[core]\n\tautocrlf = true\n[apply]\n\twhitespace = error-all\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert b"\r\n" not in clean[topk] and b"trailing space \n" in clean[topk]
    assert compose(*jobs[0]).contents == clean
    assert [c.contents if c else None for c in compose_many_mod.compose_many(jobs)] == [clean, clean]
    assert compat.check_pin(m, read, "0.5.17").ok


def test_move_paths_renames_headers_only():
    body = (
        b"diff --git a/x/f.py b/x/f.py\nindex 1..2 100644\n--- a/x/f.py\n+++ b/x/f.py\n@@ -1,2 +1,2 @@ def f(\n"
        b" keep\n--- a/x/f.py\n+++ b/x/f.py\n\\ No newline at end of file\n"
        b"diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n"
    )
    names = {b"x/f.py": b"0.0", b"n.py": b"0.1"}
    moved_body = compose_many_mod.move_paths(body, names)
    assert moved_body == (
        b"diff --git a/0.0 b/0.0\nindex 1..2 100644\n--- a/0.0\n+++ b/0.0\n@@ -1,2 +1,2 @@ def f(\n"
        b" keep\n--- a/x/f.py\n+++ b/x/f.py\n\\ No newline at end of file\n"  # hunk lines: a removed `-- a/...`
        b"diff --git a/0.1 b/0.1\nnew file mode 100644\n--- /dev/null\n+++ b/0.1\n@@ -0,0 +1 @@\n+x\n"
    )
    for bad in (
        body.replace(b"@@ -1,2 +1,2 @@", b"@@ -1,3 +1,2 @@"),  # counts that do not fit the hunk
        body.replace(b"@@ -1,2 +1,2 @@", b"@@ -1,1 +1,2 @@"),
        body.replace(b"index 1..2 100644\n", b"similarity index 90%\nrename from x/f.py\n"),
        body.replace(b"diff --git a/n.py b/n.py", b'diff --git "a/n\\tpy" "b/n\\tpy"'),
        body + b"diff --git a/z.py b/z.py\nBinary files a/z.py and b/z.py differ\n",
        body.replace(b"+++ b/n.py", b"+++ b/other.py"),  # a path it was not told about
    ):
        assert compose_many_mod.move_paths(bad, names) is None, bad


def test_compile_verdicts_kept_between_runs_failures_compiled_each_time(tmp_path, read):
    topk, qwen = FILES[1], FILES[3]
    m = project(
        tmp_path,
        read,
        {"good": {topk: edit(read(topk), top_level_slots(read(topk))[1], "# fine")}, "bad": {qwen: b""}},
    )
    (tmp_path / "patches" / "bad.patch").write_text(
        "Description: bad\n---\n" + make_diff({qwen: read(qwen)}, {qwen: edit(read(qwen), 30, "def (:")})
    )
    m = load_manifest(tmp_path / "manifest.yaml")
    path = tmp_path / "cache" / "verdicts.txt"
    first = Compiler(path)
    rep1 = compat.check_pin(m, read, "0.5.17", first)
    # two distinct versions (topk.py with `good`, qwen2_moe.py with `bad`: the full set has the same), one fails
    assert first.compiled == 2 and len(path.read_bytes().splitlines()) == 1 and not rep1.ok
    second = Compiler(path)
    rep2 = compat.check_pin(m, read, "0.5.17", second)
    assert second.compiled == 1  # the failing one again (its message this run's); the good one is known
    items = [(i.what, i.subject, i.ok, i.detail) for i in rep1.items]
    assert [(i.what, i.subject, i.ok, i.detail) for i in rep2.items][:-1] == items[:-1]
    assert rep2.items[-1].detail.endswith("(1 of them known to compile from earlier runs: the same bytes, this Python)")
    assert f"alone: bad: {qwen}" in {i.subject for i in rep2.items if not i.ok}


def test_compiler_reads_only_whole_digests_and_starts_over_when_full(tmp_path, monkeypatch):
    path = tmp_path / "v.txt"
    ok, other, bad = b"x = 1\n", b"y = 2\n", b"def (:\n"
    c = Compiler(path)
    assert c.error(ok, "f.py") is None and c.error(bad, "f.py") == "line 1: invalid syntax" and c.compiled == 2
    assert "null bytes" in (c.error(b"x = 1\0\n", "f.py") or "")  # a message, not an exception
    c.save()
    digest = path.read_bytes().strip()
    assert digest == hashlib.sha256(ok).hexdigest().encode()
    # a torn line (a killed or full write) and garbage: ignored; the whole digest still counts
    path.write_bytes(b"garbage\n" + digest[:40] + b"\n" + digest + b"\n" + digest[:63])
    again = Compiler(path)
    assert again.error(ok, "f.py") is None and again.compiled == 0
    assert again.error(other, "g.py") is None and again.compiled == 1
    monkeypatch.setattr(compilecache, "KEEP", 4)
    again.save()  # 4 lines were there, one more is over KEEP: the file starts over with this run's
    assert path.read_bytes() == hashlib.sha256(other).hexdigest().encode() + b"\n"
    # a cache directory that cannot be written: nothing kept, nothing raised
    (tmp_path / "blocker").write_text("a file where the directory would be")
    stuck = Compiler(tmp_path / "blocker" / "v.txt")
    assert stuck.error(ok, "f.py") is None
    stuck.save()
    assert Compiler(None).error(ok, "f.py") is None  # no path: nothing read, nothing saved
    # another interpreter build reads another file
    here = compilecache.verdict_file()
    monkeypatch.setattr(sys, "version", sys.version + " (another build)")
    assert compilecache.verdict_file() != here and compilecache.verdict_file().parent == here.parent
