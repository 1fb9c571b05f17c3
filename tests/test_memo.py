"""The memo of a loaded manifest: used only while every file the load read holds the bytes it held, every
directory on the way is still one, and never for a load that failed."""

from __future__ import annotations

import os

import pytest
from conftest import copy_project, pristine

from sglang_overlay import manifestmemo, memo
from sglang_overlay.errors import ManifestError, PathEscape
from sglang_overlay.manifest import load_manifest


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SGLANG_OVERLAY_NO_MEMO", raising=False)  # conftest turns memos off for other tests
    return copy_project(tmp_path / "proj")


def _memos(project) -> list[str]:
    d = project.parent / "cache" / "manifests"
    return sorted(n for n in os.listdir(d) if not n.startswith(".")) if d.is_dir() else []


def test_a_load_is_kept_and_given_back_while_nothing_changed(project):
    m = load_manifest(project / "manifest.yaml")
    assert len(_memos(project)) == 1
    again = manifestmemo.lookup((project / "manifest.yaml").resolve())
    assert again is not None and again == m and again.patches == m.patches


def test_two_versions_of_the_code_each_keep_their_own_memo(project, monkeypatch):
    # two installs on one project (or the bench's before and after, run in turn) must not replace each other's memo
    m = load_manifest(project / "manifest.yaml")
    ours = memo.code_signature()
    monkeypatch.setattr(memo, "code_signature", lambda: "another version")
    assert manifestmemo.lookup((project / "manifest.yaml").resolve()) is None
    assert load_manifest(project / "manifest.yaml") == m and len(_memos(project)) == 2
    monkeypatch.setattr(memo, "code_signature", lambda: ours)
    assert manifestmemo.lookup((project / "manifest.yaml").resolve()) == m


def test_a_changed_patch_file_is_a_miss_and_its_error_is_said(project):
    load_manifest(project / "manifest.yaml")
    patch = next((project / "patches").glob("*.patch"))
    text = patch.read_text()
    patch.write_text(text.replace("Description", "Descr", 1))
    assert manifestmemo.lookup((project / "manifest.yaml").resolve()) is None
    with pytest.raises(ManifestError, match="no Description"):
        load_manifest(project / "manifest.yaml")


def test_bytes_decide_not_stat_times(project):
    m = load_manifest(project / "manifest.yaml")
    patch = next((project / "patches").glob("*.patch"))
    text = patch.read_bytes()
    patch.write_bytes(text)  # the same bytes again (a checkout, a restore): the same manifest
    assert manifestmemo.lookup((project / "manifest.yaml").resolve()) == m
    st = patch.stat()
    patch.write_bytes(text.replace(b"Description", b"Descriptiom", 1))  # same size, and the stat times put back
    os.utime(patch, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert manifestmemo.lookup((project / "manifest.yaml").resolve()) is None


def test_a_patches_dir_replaced_by_a_link_out_is_refused_after_a_memo(project, tmp_path):
    load_manifest(project / "manifest.yaml")
    outside = tmp_path / "elsewhere"
    (project / "patches").rename(outside)
    os.symlink(outside, project / "patches")
    with pytest.raises(PathEscape, match="must be a path inside the project"):
        load_manifest(project / "manifest.yaml")


def test_a_torn_or_foreign_memo_is_ignored(project):
    m = load_manifest(project / "manifest.yaml")
    (memo,) = _memos(project)
    path = project.parent / "cache" / "manifests" / memo
    blob = path.read_bytes()
    for bad in (blob[: len(blob) // 2], b"0" * 64 + b"\n" + blob[65:], b"junk"):
        path.write_bytes(bad)
        assert manifestmemo.lookup((project / "manifest.yaml").resolve()) is None
        assert load_manifest(project / "manifest.yaml") == m


class _GitCalled(Exception):
    pass


def test_a_composition_is_kept_and_given_back_only_for_the_same_bytes(project, pinned_tree, monkeypatch):
    from sglang_overlay import compose as compose_mod

    m = load_manifest(project / "manifest.yaml")
    patch = next(p for p in m.patches if getattr(p, "diff", None) is not None and p.diff.body and not p.overlay)
    with pytest.raises(compose_mod.Conflict):  # not what the patch expects: it fails, and a failure is not kept
        compose_mod.compose(dict.fromkeys(patch.files, b"x\n"), [patch])
    base = {f: pristine(pinned_tree, f) for f in patch.files}
    first = compose_mod.compose(base, [patch])

    def git(*args, **kwargs):
        raise _GitCalled(args)

    monkeypatch.setattr(compose_mod, "git_outside_repo", git)
    again = compose_mod.compose(base, [patch])  # kept: no git
    assert again.contents == first.contents and again is not first
    f = patch.files[0]
    with pytest.raises(_GitCalled):  # another base: composed again
        compose_mod.compose({**base, f: base[f] + b"# one more line\n"}, [patch])
