"""`revert --all` of a tree upgraded under its patches, from what the tree recorded, where the new release ships a
file exactly as the tool wrote it (a patch upstreamed verbatim, an overlay module adopted, a file upstream deleted
too). The bytes alone cannot tell such a file from one the upgrade left alone, so the tree's own release is asked
(its git commit, its dist-info RECORD): what it ships is never replaced by the old release's base. The real
SGLang 0.5.17 source, the real CLI in processes."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path

from conftest import ROOT, pristine, run_cli

FIX = ROOT / "tests" / "fixtures" / "engine"
TOPK = "python/sglang/srt/layers/moe/topk.py"
SARGS = "python/sglang/srt/server_args.py"
OVERLAY = "python/sglang/srt/fx_overlay_module.py"
IDENTITY = "python/sglang/_overlay_build.py"
GONE = "python/sglang/multimodal_gen/runtime/pipelines/flux_2_klein.py"  # small: a patch deletes it
VERSION = "python/sglang/_version.py"
DEL_ENTRY = """  - name: fx_del
    description: deletes a module
    kind: diff
    category: experimental
presets:"""


def _project(tmp_path: Path, pinned: Path, gone_mode: str = "100644") -> Path:
    proj = tmp_path / "proj"
    shutil.copytree(FIX, proj)
    man = proj / "manifest.yaml"
    man.write_text(man.read_text().replace("presets:", DEL_ENTRY, 1))
    lines = (pinned / GONE).read_text().splitlines()
    (proj / "patches" / "fx_del.patch").write_text(
        "Description: Fixture fx_del: deletes a file\nOrigin: vendor\nForwarded: not-needed\n"
        f"Last-Update: 2026-12-05\n---\ndiff --git a/{GONE} b/{GONE}\ndeleted file mode {gone_mode}\n"
        f"index 1111111..0000000\n--- a/{GONE}\n+++ /dev/null\n@@ -1,{len(lines)} +0,0 @@\n"
        + "".join(f"-{line}\n" for line in lines)
    )
    return proj


def _cli(proj: Path, tree: Path, *args: str, rc: int = 0) -> subprocess.CompletedProcess:
    return run_cli(
        "--manifest",
        str(proj / "manifest.yaml"),
        "--tree",
        str(tree),
        *args,
        check_rc=rc,
        env={"SGLANG_OVERLAY_CUDA_CAPABILITY": "9.0"},
    )


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_a_checkout_upgraded_to_a_release_that_ships_the_patched_files_keeps_them(tmp_path, pinned_tree):
    """0.5.18 upstreamed fx_topk and fx_overlay byte for byte and deleted what fx_del deletes; `git checkout` of it
    under the applied patches. `revert --all` had put 0.5.17's topk.py into the 0.5.18 tree, deleted 0.5.18's own
    module and brought back a file 0.5.18 removed. Now the tree ends as its commit holds it; server_args.py, which
    0.5.18 ships as 0.5.17 did, still goes back to its base."""
    tree = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(pinned_tree), str(tree)], check=True)
    proj = _project(tmp_path, pinned_tree)
    _cli(proj, tree, "apply", "fx_topk", "fx_overlay", "fx_del", "fx_args_a")
    applied = {f: (tree / f).read_bytes() for f in (TOPK, OVERLAY)}
    assert not (tree / GONE).exists()
    _git(tree, "add", TOPK, OVERLAY, GONE)
    (tree / VERSION).write_text((tree / VERSION).read_text().replace("0.5.17", "0.5.18"))
    _git(tree, "add", VERSION)
    _git(tree, "commit", "-q", "-m", "sglang 0.5.18")
    _git(tree, "tag", "v0.5.18")
    res = _cli(proj, tree, "revert", "--all")
    assert "Traceback" not in res.stderr, res.stderr
    for f in (TOPK, OVERLAY):
        assert (tree / f).read_bytes() == applied[f], f
        assert f"left as it is: {f}: SGLang 0.5.18 ships it as it is now" in res.stdout
    assert not (tree / GONE).exists() and not (tree / IDENTITY).exists()
    assert _git(tree, "status", "--porcelain", "--untracked-files=all") == ""  # exactly its commit: 0.5.18
    assert "applied 0 of" in _cli(proj, tree, "status").stdout


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _dist_info(site: Path, version: str) -> None:
    """The dist-info pip writes: METADATA and a RECORD of every file of the package as installed."""
    info = site / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    rows = []
    for p in sorted((site / "sglang").rglob("*")):
        if p.is_file() and ".sglang-overlay" not in p.parts and p.name != "_overlay_build.py":
            rows.append(f"{p.relative_to(site)},{_record_hash(p.read_bytes())},{p.stat().st_size}")
    (info / "RECORD").write_text("\n".join([*rows, f"{info.name}/RECORD,,"]) + "\n")


def test_site_packages_upgraded_by_pip_to_a_release_that_ships_the_patched_files_keeps_them(tmp_path, pinned_tree):
    """`pip install -U` under the applied patches: pip replaced the package's files with 0.5.18's and left the
    tool's new files (in no RECORD). 0.5.18's RECORD says it ships topk.py and the overlay module exactly as they
    are, and not the file fx_del deleted: `revert --all` leaves all three so; the identity module goes."""
    site = tmp_path / "site-packages"
    for f in ("python/sglang/__init__.py", VERSION, TOPK, GONE):
        (site / f[len("python/") :]).parent.mkdir(parents=True, exist_ok=True)
        (site / f[len("python/") :]).write_bytes(pristine(pinned_tree, f))
    _dist_info(site, "0.5.17")
    proj = _project(tmp_path, pinned_tree)
    _cli(proj, site, "apply", "fx_topk", "fx_overlay", "fx_del")
    applied = {f: (site / f[len("python/") :]).read_bytes() for f in (TOPK, OVERLAY)}
    shutil.rmtree(site / "sglang-0.5.17.dist-info")  # the upgrade
    version = site / "sglang" / "_version.py"
    version.write_text(version.read_text().replace("0.5.17", "0.5.18"))
    _dist_info(site, "0.5.18")
    res = _cli(proj, site, "revert", "--all")
    assert "Traceback" not in res.stderr, res.stderr
    for f in (TOPK, OVERLAY):
        assert (site / f[len("python/") :]).read_bytes() == applied[f], f
        assert f"left as it is: {f}: SGLang 0.5.18 ships it as it is now" in res.stdout
    assert not (site / GONE[len("python/") :]).exists() and not (site / IDENTITY[len("python/") :]).exists()


def test_a_file_deleted_by_hand_is_said_when_forced_back_with_no_pin_of_its_release(tmp_path, pinned_tree):
    """The pin of the tree's release is gone (the manifest now pins 0.5.99): `revert --all --force` works from the
    record and puts back a managed file deleted by hand. The switch's own revert says so; this path had put it
    back in silence."""
    tree = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(pinned_tree), str(tree)], check=True)
    proj = _project(tmp_path, pinned_tree)
    _cli(proj, tree, "apply", "fx_topk", "fx_args_a")
    man = proj / "manifest.yaml"
    man.write_text(man.read_text().replace("0.5.17", "0.5.99"))
    (tree / TOPK).unlink()
    res = _cli(proj, tree, "revert", "--all", rc=1)
    assert "Traceback" not in res.stderr and TOPK in res.stderr, res.stderr
    res = _cli(proj, tree, "revert", "--all", "--force")
    assert f"--force: {TOPK} was deleted by hand; nothing to save" in res.stdout + res.stderr
    assert _git(tree, "status", "--porcelain", "--untracked-files=all") == ""  # every file back at its base


def test_a_deleted_executable_comes_back_executable_with_no_pin_of_its_release(tmp_path, pinned_tree):
    """The state records bytes, not modes: a file a patch deleted came back 0644 from the record, which git
    shows as a change (and a script that no longer runs). The tree's commit holds its base, with its mode."""
    tree = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(pinned_tree), str(tree)], check=True)
    (tree / GONE).chmod(0o755)
    _git(tree, "add", GONE)
    _git(tree, "commit", "-q", "-m", "an executable module")
    proj = _project(tmp_path, pinned_tree, gone_mode="100755")
    _cli(proj, tree, "apply", "fx_topk", "fx_del")
    assert not (tree / GONE).exists()
    man = proj / "manifest.yaml"
    man.write_text(man.read_text().replace("0.5.17", "0.5.99"))  # no pin of the tree's release is left
    res = _cli(proj, tree, "revert", "--all")
    assert "reverted from the state it recorded" in res.stdout, res.stdout + res.stderr
    assert (tree / GONE).stat().st_mode & 0o100
    assert _git(tree, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_file_left_on_an_upgraded_tree_keeps_its_old_release_copy(tmp_path, pinned_tree):
    """0.5.18 changed topk.py its own way under the applied fx_topk: the file is left as 0.5.18 has it, and the
    state that held 0.5.17's topk.py goes. That copy was pruned with it; it is saved beside the backups now,
    named for its release, and the note says where."""
    tree = tmp_path / "sglang"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(pinned_tree), str(tree)], check=True)
    proj = _project(tmp_path, pinned_tree)
    _cli(proj, tree, "apply", "fx_topk", "fx_args_a")
    new = pristine(pinned_tree, TOPK).decode() + "\n# 0.5.18's own change\n"
    (tree / TOPK).write_text(new)
    (tree / VERSION).write_text((tree / VERSION).read_text().replace("0.5.17", "0.5.18"))
    _git(tree, "add", TOPK, VERSION)
    _git(tree, "commit", "-q", "-m", "sglang 0.5.18")
    res = _cli(proj, tree, "revert", "--all")
    assert (tree / TOPK).read_text() == new
    note = next(line for line in res.stdout.splitlines() if line.strip().startswith(f"left as it is: {TOPK}"))
    assert "its SGLang 0.5.17 file is saved as " in note, res.stdout
    saved = Path(note.split("is saved as ", 1)[1].strip())
    assert saved.name == "topk.py.sglang-0.5.17" and saved.read_bytes() == pristine(pinned_tree, TOPK)
    assert (tree / SARGS).read_bytes() == pristine(pinned_tree, SARGS)  # back to its base
