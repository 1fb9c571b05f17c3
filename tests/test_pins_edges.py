"""The edges of a project's pins: a tree of a release that no pin is for (the pin removed, or the tree upgraded
under its patches), a `rebase --abort` with neither the release's wheel nor a network, and a pins/ directory (or
pins/VERSION) linked out of the project. Fixture releases of the real 0.5.17 files, the real CLI in processes."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from test_rebase import (
    SARGS,
    TOPK,
    _conflicting_release,
    _fake_pin,
    cache,
    cli,
    make_release,
    pin_source,
    project,
    project_files,
    tree_is_pristine,
)

__all__ = ["cache", "pin_source"]  # module fixtures of test_rebase, used here by name

OVERLAY = "python/sglang/srt/fx_overlay_module.py"
IDENTITY = "python/sglang/_overlay_build.py"


def _no_traceback(res: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr


def _carrying_release_tree(tmp_path: Path, cache: Path, pin_source, version: str) -> tuple[Path, Path]:
    """A project whose pin for `version` was made by a rebase and applied on its release tree."""
    make_release(cache, pin_source, version)
    proj = project(tmp_path)
    cli(proj, cache, "rebase", version, rc=0)
    cli(proj, cache, "--pin", version, "apply", "fx_topk", "fx_args_b", "fx_overlay", rc=0)
    return proj, proj / ".sglang" / f"sglang-{version}"


# -- 1. a tree of a release no pin is for ---------------------------------------------------------------------------
def test_a_tree_whose_pin_is_gone_names_the_pins_and_reverts_from_its_record(tmp_path, cache, pin_source):
    """pins/9.0.1 removed while its release tree carries patches: every command had refused that tree (the
    manifest pins 0.5.17, no pin for 9.0.1, and `rebase 9.0.1` wants it pristine first), so only `rm -rf` was
    left. Each refusal now names the tree, its release, the pins and a way out, and `revert --all` takes the
    patches out from what the tree recorded."""
    proj, tree = _carrying_release_tree(tmp_path, cache, pin_source, "9.0.1")
    res = cli(proj, cache, "--tree", str(tree), "apply", "fx_topk", rc=2)  # the pin is there: it says which
    assert "this project's pins: 0.5.17, 9.0.1" in res.stderr and "has a pin for 9.0.1: `" in res.stderr
    assert " --pin 9.0.1 status`" in res.stderr  # its own release tree: no --tree to name
    shutil.rmtree(proj / "pins")
    res = cli(proj, cache, "--pin", "9.0.1", "status", rc=2)
    assert "no pin for 9.0.1" in res.stderr and "pins here: 0.5.17" in res.stderr
    assert f"its tree {tree} still carries fx_topk, fx_args_b, fx_overlay" in res.stderr
    assert f"--tree {tree} revert --all" in res.stderr
    st = cli(proj, cache, "--tree", str(tree), "status", rc=0).stdout
    assert f"note: {tree}: this tree is SGLang 9.0.1, the manifest pins 0.5.17" in st
    assert "this project's pins: 0.5.17" in st and "revert --all" in st
    for args in (("apply", "fx_topk"), ("revert", "fx_topk"), ("toggle", "fx_topk"), ("refresh", "fx_topk")):
        res = cli(proj, cache, "--tree", str(tree), *args, rc=2)
        _no_traceback(res)
        assert f"{tree}: this tree is SGLang 9.0.1, the manifest pins 0.5.17" in res.stderr, args
        assert "this project's pins: 0.5.17" in res.stderr and "carries fx_topk, fx_args_b, fx_overlay" in res.stderr
        assert f"--tree {tree} revert --all" in res.stderr and "rebase 9.0.1` makes one" in res.stderr
    res = cli(proj, cache, "rebase", "9.0.1", rc=2)  # the way it names must work
    assert f"--tree {tree} revert --all" in res.stderr
    assert "no rebase in progress" in cli(proj, cache, "rebase", "--abort", rc=2).stderr
    # a hand edit on the release the state was recorded on is drift, as in any revert
    topk = tree / TOPK
    topk.write_text(topk.read_text() + "# mine\n")
    res = cli(proj, cache, "--tree", str(tree), "revert", "--all", rc=1)
    assert "drifted" in res.stderr and TOPK in res.stderr
    assert topk.read_text().endswith("# mine\n")
    res = cli(proj, cache, "--tree", str(tree), "revert", "--all", "--force", rc=0)
    assert "reverted from the state it recorded" in res.stdout and "--force: saved 1 hand-edited file(s)" in res.stderr
    assert "reverted fx_topk, fx_args_b, fx_overlay" in res.stdout
    assert tree_is_pristine(proj, "9.0.1")
    cli(proj, cache, "rebase", "9.0.1", rc=0)  # and the pin can be made again


def _hints(stderr: str) -> list[str]:
    """The commands a message tells the user to run: the backticked spans that start with the program."""
    return [c for c in re.findall(r"`([^`]+)`", stderr) if c.startswith("python ")]


def _paste(command: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    """A hint's command as the user pastes it into a shell, `python` being the interpreter the tests run on."""
    bin_dir = cwd.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python").exists():  # a script, not a link: a link leaves the venv's site-packages behind
        (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SGLANG_OVERLAY_CACHE": str(cache)}
    env.pop("SGLANG_OVERLAY_TREE", None)
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, env=env)


def test_the_hints_for_a_missing_pin_work_when_pasted(tmp_path, cache, pin_source):
    """`--pin 9.0.1 status` after pins/9.0.1 was removed: its hints had repeated the user's `--pin 9.0.1`, so each
    pasted command failed on the same missing pin. Each now runs: the revert from the tree's record, then the
    rebase that makes the pin again."""
    proj, tree = _carrying_release_tree(tmp_path, cache, pin_source, "9.0.1")
    shutil.rmtree(proj / "pins")
    res = cli(proj, cache, "--pin", "9.0.1", "status", rc=2)
    hints = _hints(res.stderr)
    assert len(hints) == 2 and not any("--pin" in h for h in hints), res.stderr
    revert = next(h for h in hints if "revert --all" in h)
    pasted = _paste(revert, proj, cache)
    assert pasted.returncode == 0 and "reverted from the state it recorded" in pasted.stdout, pasted.stderr
    rebase = next(h for h in hints if " rebase 9.0.1" in h)
    pasted = _paste(rebase, proj, cache)
    assert pasted.returncode == 0 and (proj / "pins" / "9.0.1" / "manifest.yaml").is_file(), pasted.stderr


def test_revert_all_of_a_tree_upgraded_under_its_patches_keeps_the_new_releases_files(tmp_path, cache, pin_source):
    """The tree went from 9.0.1 to another release with the patches applied (server_args.py and _version.py
    replaced by the upgrade): the recorded bases are 9.0.1's, so a file the upgrade replaced stays as it is,
    and what still holds the tool's bytes (topk.py, the overlay module, the identity module) goes back."""
    proj, tree = _carrying_release_tree(tmp_path, cache, pin_source, "9.0.1")
    upgraded = b"# the upgrade's own server_args.py\n"
    (tree / SARGS).write_bytes(upgraded)
    (tree / "python/sglang/_version.py").write_text('__version__ = version = "9.0.9"\n')
    res = cli(proj, cache, "--pin", "9.0.1", "apply", "fx_args_a", rc=2)
    assert f"{tree}: this tree is SGLang 9.0.9, the manifest pins 9.0.1" in res.stderr
    assert "this project's pins: 0.5.17, 9.0.1" in res.stderr and "--pin 9.0.1 rebase 9.0.9" in res.stderr
    _no_traceback(res)
    res = cli(proj, cache, "--pin", "9.0.1", "revert", "--all", rc=0)
    assert f"left as it is: {SARGS}" in res.stdout and "recorded on 9.0.1" in res.stdout
    assert (tree / SARGS).read_bytes() == upgraded
    assert (tree / TOPK).read_bytes() == pin_source.read(TOPK)
    assert not (tree / OVERLAY).exists() and not (tree / IDENTITY).exists()
    assert "applied 0 of" in cli(proj, cache, "--tree", str(tree), "status", rc=0).stdout


# -- 2. --abort from what is on this machine ------------------------------------------------------------------------
def _offline(proj: Path, cache: Path, *args: str, rc: int) -> subprocess.CompletedProcess:
    """The CLI with no package index to reach: a download would fail, and it must not be tried."""
    env = {"SGLANG_OVERLAY_CACHE": str(cache), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}
    return run_cli(*args, cwd=proj, env=env, check_rc=rc)


@pytest.mark.parametrize("tree_gone", [False, True], ids=["tree-kept", "tree-removed"])
def test_abort_needs_neither_the_releases_wheel_nor_a_network(tmp_path, pin_source, tree_gone):
    """The wheel gone from the cache (cleaned, another machine's cache) and no index: `--abort` had tried to
    download it, failed, and left the rebase marked `aborting` for good. The release tree goes back to what its
    own git commit holds, and a release tree removed by hand is not made again to be put back."""
    own = tmp_path / "cache"
    (own / "wheels").mkdir(parents=True)
    os.symlink(pin_source.wheel, own / "wheels" / pin_source.wheel.name)
    _conflicting_release(own, pin_source, "9.0.2")
    proj = project(tmp_path)
    before = project_files(proj)
    cli(proj, own, "rebase", "9.0.2", rc=1)
    tree = proj / ".sglang" / "sglang-9.0.2"
    assert "<<<<<<<" in (tree / SARGS).read_text()
    shutil.rmtree(own / "releases" / "9.0.2")
    if tree_gone:
        shutil.rmtree(tree)
    res = _offline(proj, own, "rebase", "--abort", rc=0)
    assert "downloading" not in res.stderr and "aborted" in res.stdout, res.stderr
    assert project_files(proj) == before and not (proj / "pins").exists()
    if tree_gone:
        assert not tree.exists()
    else:
        assert tree_is_pristine(proj, "9.0.2")
    assert "no rebase in progress" in _offline(proj, own, "rebase", "--status", rc=2).stderr


# -- 3. pins/ linked out of the project ------------------------------------------------------------------------------
def _link_pins_out(proj: Path, outside: Path) -> Path:
    os.symlink(outside, proj / "pins")
    return proj / "pins"


def _link_pin_out(proj: Path, outside: Path) -> Path:
    (proj / "pins").mkdir()
    (outside / "9.0.1").mkdir()
    os.symlink(outside / "9.0.1", proj / "pins" / "9.0.1")
    return proj / "pins" / "9.0.1"


def _link_pin_nowhere(proj: Path, outside: Path) -> Path:
    (proj / "pins").mkdir()
    os.symlink(outside / "not-made-yet", proj / "pins" / "9.0.1")
    return proj / "pins" / "9.0.1"


@pytest.mark.parametrize("link", [_link_pins_out, _link_pin_out, _link_pin_nowhere], ids=["pins", "pin", "dangling"])
def test_pins_linked_out_of_the_project_is_refused_before_any_work(tmp_path, cache, pin_source, link):
    """pins/ linked out: the whole rebase ran and put the new pin where `--pin` then refused it; pins/9.0.1 a
    link to nowhere: every step ran, then the rename into place failed (ENOTDIR, exit 1). Refused first now:
    nothing fetched, unpacked, staged or written, on either side of the link."""
    make_release(cache, pin_source, "9.0.1")
    proj = project(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    path = link(proj, outside)
    before = sorted(p.name for p in outside.rglob("*"))
    res = cli(proj, cache, "rebase", "9.0.1", rc=2)
    _no_traceback(res)
    assert f"{path} is a symbolic link to {os.path.realpath(path)}" in res.stderr
    assert f"outside the project {proj}" in res.stderr and f"rm {path}" in res.stderr
    assert not (proj / ".sglang").exists() and "unpacking" not in res.stderr
    assert sorted(p.name for p in outside.rglob("*")) == before
    assert not list((proj / "pins").glob(".rebase-*"))


def test_pins_linked_within_the_project_still_rebases(tmp_path, cache, pin_source):
    """A link that stays in the project is the project's own directory: `--pin` takes it, so does rebase."""
    make_release(cache, pin_source, "9.0.1")
    proj = project(tmp_path)
    (proj / "pin-sets").mkdir()
    os.symlink("pin-sets", proj / "pins")
    cli(proj, cache, "rebase", "9.0.1", rc=0)
    assert (proj / "pin-sets" / "9.0.1" / "manifest.yaml").is_file()
    assert "sglang 9.0.1 (pinned)" in cli(proj, cache, "--pin", "9.0.1", "status", rc=0).stdout


# -- 4. a pin directory without its manifest --------------------------------------------------------------------------
def _manifest_deleted(pins: Path) -> Path:
    (pins / "9.0.1" / "patches").mkdir(parents=True)  # the rest of a pin whose manifest.yaml was removed
    return pins / "9.0.1"


def _manifest_misnamed(pins: Path) -> Path:
    (pins / "9.0.1").mkdir(parents=True)
    (pins / "9.0.1" / "manifest.yml").write_text("schema: 1\n")
    return pins / "9.0.1"


def _link_dangling(pins: Path) -> Path:
    pins.mkdir()
    os.symlink("9.0.0", pins / "9.0.1")  # within the project, to a pin since removed
    return pins / "9.0.1"


@pytest.mark.parametrize(
    "breaks", [_manifest_deleted, _manifest_misnamed, _link_dangling], ids=["deleted", "misnamed", "dangling"]
)
def test_a_pin_directory_without_its_manifest_is_refused(tmp_path, cache, breaks):
    """pins/9.0.1 with no manifest.yaml: `check --all-pins` had left it out and passed, so CI went green with a
    pin it never checked. Refused now (exit 2, the directory and the fix named), and `--pin 9.0.1` says the
    same instead of "no pin for 9.0.1: `rebase 9.0.1` makes one", which the directory then refused."""
    proj = project(tmp_path)
    pin = breaks(proj / "pins")
    for args in (("check", "--all-pins"), ("--pin", "9.0.1", "status")):
        res = cli(proj, cache, *args, rc=2)
        _no_traceback(res)
        assert f"{pin} has no manifest.yaml" in res.stderr, res.stderr
        assert ("restore what it leads to" if os.path.islink(pin) else "add its manifest.yaml") in res.stderr
        assert f"rm -r {pin}" in res.stderr and "a name that starts with '.'" in res.stderr, res.stderr
    if not os.path.islink(pin):  # rebase says a link is one before it looks for a pin
        res = cli(proj, cache, "rebase", "9.0.1", rc=2)
        assert f"{pin} has no manifest.yaml" in res.stderr and "use it (`--pin" not in res.stderr, res.stderr


def test_dot_entries_and_plain_files_in_pins_are_no_pins(tmp_path, cache):
    """A rebase's staging and progress, a copy set aside under a dot name, a README beside the pins: none is a
    pin, so `check --all-pins` checks the top level alone and passes."""
    proj = project(tmp_path)
    pins = proj / "pins"
    for aside in (".rebase-9.0.1", ".rebase-9.0.2.aborted-20250101T000000", ".9.0.3-old"):
        (pins / aside / "patches").mkdir(parents=True)
    (pins / ".rebase-9.0.1.json").write_text("{}")
    (pins / "README.md").write_text("one directory per release\n")
    res = cli(proj, cache, "check", "--all-pins", rc=0)
    assert res.stdout.count("== pin ") == 1 and "== pin 0.5.17" in res.stdout, res.stdout


# -- 5. an entry of pins/ named like a pin that is no pin directory -------------------------------------------------
def _plain_file(entry: Path) -> None:
    entry.write_text("notes on 0.5.30\n")


def _link_to_a_file(entry: Path) -> None:
    (entry.parent / "NOTES.txt").write_text("notes on 0.5.30\n")
    os.symlink("NOTES.txt", entry)


@pytest.mark.parametrize("make", [_plain_file, _link_to_a_file], ids=["file", "link-to-file"])
def test_a_file_named_like_a_pin_is_refused_alike_by_every_entry_point(tmp_path, cache, make):
    """pins/0.5.30 a plain file (or a link to one): `check --all-pins` had left it out and passed, while `--pin
    0.5.30` and `rebase 0.5.30` said it had no manifest.yaml and to add one, which a file cannot take. Each now
    refuses it in the same words, naming the file and the fix, before any work (`check --all-pins` under that
    pin, the others checked)."""
    proj = project(tmp_path)
    (proj / "pins").mkdir()
    entry = proj / "pins" / "0.5.30"
    make(entry)
    before = project_files(proj)
    said = []
    for args in (("check", "--all-pins"), ("--pin", "0.5.30", "check"), ("rebase", "0.5.30")):
        res = cli(proj, cache, *args, rc=2)
        _no_traceback(res)
        refusal = _said_of_the_pin(res.stderr, "0.5.30") if "--all-pins" in args else res.stderr
        assert refusal.startswith(f"error: {entry} is a file, not a pin directory"), (args, res.stderr)
        assert f"`rm {entry}`" in refusal and "a name that starts with '.'" in refusal, res.stderr
        said.append(refusal)
    assert said[0] == said[1] == said[2], said
    assert not (proj / ".sglang").exists() and project_files(proj) == before
    assert sorted(os.listdir(proj / "pins")) == sorted(["0.5.30", *(["NOTES.txt"] if os.path.islink(entry) else [])])


def _said_of_the_pin(stderr: str, version: str) -> str:
    """What `check --all-pins` says of a pin it could not check, in the words of its error alone (`--pin`)."""
    m = re.search(rf"^  {re.escape(version)}: (.*)\n    fix: (.*)\n", stderr, re.M)
    assert m, stderr
    return f"error: {m[1]}\n  hint: {m[2]}\n"


# -- 6. pins/ named for the top level's own release ------------------------------------------------------------------
def _copy_set(proj: Path, to: Path) -> Path:
    """The top level's set (manifest.yaml, patches/, overlay/) copied into `to`."""
    to.mkdir(parents=True)
    for item in ("manifest.yaml", "patches", "overlay"):
        (shutil.copytree if (proj / item).is_dir() else shutil.copy)(proj / item, to / item)
    return to


def _copy_of_the_top_level(proj: Path) -> Path:
    return _copy_set(proj, proj / "pins" / "0.5.17")


def _a_file_for_the_top_level(proj: Path) -> Path:
    (proj / "pins").mkdir()
    (proj / "pins" / "0.5.17").write_text("0.5.17\n")
    return proj / "pins" / "0.5.17"


@pytest.mark.parametrize("make", [_copy_of_the_top_level, _a_file_for_the_top_level], ids=["set", "file"])
def test_a_pin_named_for_the_top_levels_release_is_refused_alike(tmp_path, cache, make):
    """pins/0.5.17 beside a manifest.yaml that pins 0.5.17: `check --all-pins` and `--pin 0.5.17` took the top
    level and left it out without a word, so an edit made there was never used or checked. Each entry point now
    refuses it in the same words: the path, why (it shadows the top-level set) and the fix."""
    proj = project(tmp_path)
    shadow = make(proj)
    before = project_files(proj)
    said = []
    for args in (("check", "--all-pins"), ("--pin", "0.5.17", "check"), ("rebase", "0.5.17")):
        res = cli(proj, cache, *args, rc=2)
        _no_traceback(res)
        assert f"error: {shadow} is named for 0.5.17, the release the top-level manifest" in res.stderr, res.stderr
        assert "would shadow the top-level set" in res.stderr and f"`rm -r {shadow}`" in res.stderr, res.stderr
        assert "move that set to the top level" in res.stderr, res.stderr
        said.append(res.stderr)
    assert said[0] == said[1] == said[2], said
    assert project_files(proj) == before and not (proj / ".sglang").exists()


# -- 7. a failing check in JSON -------------------------------------------------------------------------------------
def test_check_json_says_where_its_failures_are_not_above(tmp_path, cache):
    """`check --json` and `check --all-pins --json` with a failing pin had ended in "(failures above)": above is
    the JSON, and with stdout sent to a file nothing is above at all. The JSON carries each failure (an item with
    "ok": false and its detail, the ones the human output prints), and the error names them and says so; the
    human output still lists them above its error, and its hint names the failing pin."""
    proj = project(tmp_path)
    patch = proj / "patches" / "fx_topk.patch"
    assert "\n def select_experts(" in patch.read_text()
    patch.write_text(patch.read_text().replace("\n def select_experts(", "\n def _broken_select_experts("))
    human = cli(proj, cache, "check", "--all-pins", rc=1)
    printed = re.findall(r"^FAIL (.+)$", human.stdout, re.M)
    assert len(printed) >= 2 and "(failures above)" in human.stderr, human.stdout + human.stderr
    assert "`python " in human.stderr and " --pin 0.5.17 check` shows that pin alone" in human.stderr, human.stderr
    for args in (("check", "--all-pins", "--json"), ("check", "--json")):
        res = cli(proj, cache, *args, rc=1)
        _no_traceback(res)
        data = json.loads(res.stdout)
        rep = data["0.5.17"] if "--all-pins" in args else data
        failed = [i for i in rep["items"] if not i["ok"]]
        assert [i["subject"] for i in failed] == printed and all(i["detail"] for i in failed), rep
        assert rep["ok"] is False and rep["failures"] == len(printed)
        assert "above" not in res.stderr, res.stderr
        assert f'{len(printed)} failures, each an item with "ok": false in the JSON on stdout' in res.stderr
        assert printed[0] in res.stderr, res.stderr


# -- 8. the sweep: entries of pins/ no pin can be, pins/ that is no directory, unreadable pins --------------------
@pytest.mark.parametrize("name", ["foo", "0.5.30 ", "v0.5.30"], ids=["word", "trailing-space", "v-prefix"])
@pytest.mark.parametrize("filled", [False, True], ids=["empty", "a-set"])
def test_a_pin_directory_not_named_after_a_release_is_refused(tmp_path, cache, name, filled):
    """pins/foo, pins/'0.5.30 ' (the space unseen in the message), pins/v0.5.30: `check --all-pins` had said to
    add the manifest.yaml it lacked (after which the name was refused), or, with a set in it, named the name as a
    release's. The name is said quoted, not a release version, with a rename that makes it one."""
    proj = project(tmp_path)
    d = proj / "pins" / name
    if filled:
        _copy_set(proj, d)  # a set, whatever release it pins
    else:
        d.mkdir(parents=True)
    res = cli(proj, cache, "check", "--all-pins", rc=2)
    _no_traceback(res)
    assert f"error: {d}: the name {name!r} is not a release version" in res.stderr, res.stderr
    assert f"`mv {shlex.quote(str(d))} {proj / 'pins'}/VERSION`" in res.stderr, res.stderr
    assert "a name that starts with '.'" in res.stderr and "add its manifest.yaml" not in res.stderr, res.stderr
    assert "is not a release version" in cli(proj, cache, "--pin", name, "check", rc=2).stderr


def test_files_beside_the_pins_and_an_empty_pins_are_left_alone(tmp_path, cache):
    """A README linked into pins/ is as much no pin as a plain one (it had been refused: "add its manifest.yaml");
    an empty pins/ has no pin to check beside the top level."""
    proj = project(tmp_path)
    (proj / "pins").mkdir()
    res = cli(proj, cache, "check", "--all-pins", rc=0)
    assert res.stdout.count("== pin ") == 1, res.stdout
    (proj / "docs").mkdir()
    (proj / "docs" / "pins.md").write_text("one directory per release\n")
    os.symlink("../docs/pins.md", proj / "pins" / "README.md")
    res = cli(proj, cache, "check", "--all-pins", rc=0)
    assert res.stdout.count("== pin ") == 1 and "== pin 0.5.17" in res.stdout, res.stdout + res.stderr


def _pins_a_file(proj: Path) -> str:
    (proj / "pins").write_text("pin-sets")  # what git checks out for a link with core.symlinks off
    return "is a file"


def _pins_a_loop(proj: Path) -> str:
    os.symlink("pins", proj / "pins")
    return "is a symbolic link loop"


def _pins_a_link_to_nothing(proj: Path) -> str:
    os.symlink("pin-sets", proj / "pins")
    return f"is a symbolic link to {proj / 'pin-sets'}, which does not exist"


@pytest.mark.parametrize("make", [_pins_a_file, _pins_a_loop, _pins_a_link_to_nothing], ids=["file", "loop", "nowhere"])
def test_a_pins_that_is_no_directory_is_refused_alike(tmp_path, cache, make):
    """pins itself a file, a link loop or a link to nothing: `check --all-pins` had found no pins and passed, so
    CI went green without the pins it was meant to check; `--pin 9.0.1` said "`rebase 9.0.1` makes one", and the
    rebase went on to fetch the release. Each entry point refuses it in the same words now, before any work."""
    proj = project(tmp_path)
    what = make(proj)
    before = project_files(proj)
    said = []
    for args in (("check", "--all-pins"), ("--pin", "9.0.1", "check"), ("rebase", "9.0.1")):
        res = cli(proj, cache, *args, rc=2)
        _no_traceback(res)
        assert f"error: {proj / 'pins'} {what}, not the directory of this project's pins" in res.stderr, res.stderr
        assert f"`rm {proj / 'pins'}`" in res.stderr, res.stderr
        said.append(res.stderr)
    assert said[0] == said[1] == said[2], said
    assert project_files(proj) == before and not (proj / ".sglang").exists()


def test_a_pin_that_is_a_link_loop_is_said_to_be_one(tmp_path, cache):
    """pins/9.0.1 a link to itself had been called "a symbolic link to pins/9.0.1, which does not exist"."""
    proj = project(tmp_path)
    (proj / "pins").mkdir()
    os.symlink("9.0.1", proj / "pins" / "9.0.1")
    for args in (("check", "--all-pins"), ("--pin", "9.0.1", "check"), ("rebase", "9.0.1")):
        res = cli(proj, cache, *args, rc=2)
        _no_traceback(res)
        assert f"{proj / 'pins' / '9.0.1'} is a symbolic link loop" in res.stderr or (
            f"{proj / 'pins' / '9.0.1'} has no manifest.yaml (a symbolic link loop)" in res.stderr
        ), res.stderr
        assert "does not exist" not in res.stderr and "restore what it leads to" not in res.stderr, res.stderr
        assert re.search(rf"`rm (-r )?{re.escape(str(proj / 'pins' / '9.0.1'))}`", res.stderr), res.stderr


def _as_a_user_permissions_stop() -> list[str]:
    """chmod stops no root process: as root the CLI runs as nobody. Failed, not skipped, where that cannot be."""
    if os.geteuid() != 0:
        return []
    assert shutil.which("setpriv"), "running as root without setpriv: no user that file permissions stop"
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def open_dir():
    """A directory every user may enter (pytest's own tmp_path is its owner's alone), removed after."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="pins-edges-"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(d)


def _users_cache(open_dir: Path, pin_source) -> Path:
    """A release cache the user of `_as_a_user_permissions_stop` can use (the fixtures' is root's): the pin's
    wheel, and room for the lock and the compile cache."""
    cache = open_dir / "cache"
    (cache / "wheels").mkdir(parents=True)
    try:
        os.link(pin_source.wheel, cache / "wheels" / pin_source.wheel.name)
    except OSError:  # another file system
        shutil.copy(pin_source.wheel, cache / "wheels" / pin_source.wheel.name)
    cache.chmod(0o777)
    return cache


def _as_the_user(proj: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SGLANG_OVERLAY_CACHE": str(cache), "HOME": str(cache.parent)}
    env.pop("SGLANG_OVERLAY_TREE", None)
    argv = [*_as_a_user_permissions_stop(), sys.executable, str(Path(__file__).parent.parent / "apply.py"), *args]
    return subprocess.run(argv, cwd=proj, capture_output=True, text=True, env=env)


@pytest.mark.parametrize("which", ["pin", "pins"])
@pytest.mark.parametrize("mode", [0o000, 0o644], ids=["000", "no-search"])
def test_an_unreadable_pins_or_pin_is_refused_by_name(open_dir, pin_source, which, mode):
    """pins/ or pins/9.0.1 that this user cannot read: `check --all-pins` and `--pin` had exited 1 as a failed
    write ("no change to the tree is in progress") with the fix for the directory above pins/, and `rebase 9.0.1`
    called the progress file damaged ("something else changed it": drop the rebase). Each now says which
    directory cannot be read and how to see its permissions, exit 2, before any work (`check --all-pins` says
    an unreadable pins/9.0.1 under that pin, and checks the top level)."""
    proj = project(open_dir)
    pin = _copy_set(proj, proj / "pins" / "9.0.1")  # its manifest is never reached: the directory stops the read
    cache = _users_cache(open_dir, pin_source)
    subprocess.run(["chmod", "-R", "a+rX", str(open_dir)], check=True)
    unreadable = pin if which == "pin" else proj / "pins"
    unreadable.chmod(mode)
    for args in (("check", "--all-pins"), ("--pin", "9.0.1", "check"), ("rebase", "9.0.1")):
        res = _as_the_user(proj, cache, *args)
        _no_traceback(res)
        assert res.returncode == 2, (args, res.stderr)
        refusal = res.stderr
        if which == "pin" and "--all-pins" in args:
            assert "could not be checked (the others were: 0.5.17 holds)" in res.stderr, res.stderr
            refusal = _said_of_the_pin(res.stderr, "9.0.1")
        assert refusal.startswith(f"error: {unreadable} cannot be read (Permission denied)"), (args, res.stderr)
        assert f"`ls -ld {unreadable}`" in refusal and "something else changed it" not in refusal, res.stderr
        assert "downloading" not in res.stderr, res.stderr
    assert not (proj / ".sglang").exists() and not list(cache.glob("releases"))


# -- 9. a pin that cannot be checked at all -------------------------------------------------------------------------
def _broken_pins(tmp_path: Path, pin_source) -> tuple[Path, Path]:
    """The top level, pins/9.0.1 made by a rebase whose release is then gone from the cache (no index to fetch it
    from again), pins/9.0.3 whose manifest does not parse, pins/9.0.4 whose manifest was deleted."""
    own = tmp_path / "cache"
    (own / "wheels").mkdir(parents=True)
    os.symlink(pin_source.wheel, own / "wheels" / pin_source.wheel.name)
    make_release(own, pin_source, "9.0.1")
    proj = project(tmp_path)
    cli(proj, own, "rebase", "9.0.1", rc=0)
    gone = list(own.rglob("sglang-9.0.1-*.whl"))
    assert gone
    (tmp_path / "aside").mkdir()
    for w in gone:  # kept aside: the user's local copy of the release
        shutil.copyfile(w, tmp_path / "aside" / w.name)
        w.unlink()
    _fake_pin(proj, "9.0.3")
    (proj / "pins" / "9.0.3" / "manifest.yaml").write_text("schema: 1\npin: [unclosed\n")
    _fake_pin(proj, "9.0.4")
    (proj / "pins" / "9.0.4" / "manifest.yaml").unlink()
    return proj, own


def test_check_all_pins_reports_a_pin_it_cannot_check_and_checks_the_others(tmp_path, pin_source):
    """A pin whose release cannot be fetched, or whose manifest is malformed or gone: `check --all-pins` had stopped
    at the first (exit 2; with --json nothing on stdout), so the other pins' results were lost. Every pin is
    reported now: one that could not be checked with its error and fix (in the JSON its entry, "status": "error"),
    the others checked; the exit code is the worst outcome (2: a pin could not be checked)."""
    proj, own = _broken_pins(tmp_path, pin_source)
    errors = {
        "9.0.1": "could not download sglang==9.0.1",
        "9.0.3": f"{proj / 'pins' / '9.0.3' / 'manifest.yaml'}",
        "9.0.4": f"{proj / 'pins' / '9.0.4'} has no manifest.yaml",
    }
    res = _offline(proj, own, "check", "--all-pins", rc=2)
    _no_traceback(res)
    sections = dict(re.findall(r"^== pin (\S+) .*\n((?:(?!== pin ).*\n)*)", res.stdout, re.M))
    assert list(sections) == ["0.5.17", "9.0.1", "9.0.3", "9.0.4"], res.stdout
    assert re.search(r"check sglang 0\.5\.17: (\d+) of \1 checks passed", sections["0.5.17"]), res.stdout
    for version, said in errors.items():
        assert f"NOT CHECKED: {said}" in sections[version] and "hint: " in sections[version], sections[version]
    assert "error: pins 9.0.1, 9.0.3, 9.0.4 could not be checked (the others were: 0.5.17 holds)" in res.stderr
    assert all(said in res.stderr for said in errors.values()), res.stderr
    assert "check network access to the package index" in res.stderr and "add its manifest.yaml" in res.stderr

    res = _offline(proj, own, "check", "--all-pins", "--json", rc=2)
    data = json.loads(res.stdout)
    assert list(data) == ["0.5.17", "9.0.1", "9.0.3", "9.0.4"]
    alone = json.loads(_offline(proj, own, "check", "--json", rc=0).stdout)
    assert {**data["0.5.17"], "seconds": 0} == {**alone, "seconds": 0} and alone["status"] == "pass"
    for version, said in errors.items():
        entry = data[version]
        assert sorted(entry) == sorted(data["0.5.17"]), entry  # one key set: test_..._gives_every_pin_the_same_keys
        assert (entry["version"], entry["ok"], entry["status"]) == (version, False, "error"), entry
        assert said in entry["error"] and entry["hint"], entry
    assert "pins 9.0.1, 9.0.3, 9.0.4 could not be checked" in res.stderr and errors["9.0.1"] in res.stderr


def test_check_all_pins_json_gives_every_pin_the_same_keys(tmp_path, pin_source):
    """A pin not checked had an entry of other keys than a checked one's (version, ok, status, error, hint: no
    items, failures or seconds), so a dashboard reading every entry alike stopped at it (KeyError). Every entry
    has one key set now, each key one type: a pin not checked has no items, one failure, said in "error" naming
    the pin and why, the seconds spent finding that; a checked one's "error" and "hint" are null. Still exit 2."""
    proj, own = _broken_pins(tmp_path, pin_source)
    res = _offline(proj, own, "check", "--all-pins", "--json", rc=2)
    _no_traceback(res)
    data = json.loads(res.stdout)
    keys = {version: sorted(entry) for version, entry in data.items()}
    assert len({tuple(k) for k in keys.values()}) == 1, keys
    checked = data["0.5.17"]
    assert (checked["status"], checked["error"], checked["hint"]) == ("pass", None, None), checked
    types = {k: type(v) for k, v in checked.items() if k not in ("error", "hint")}
    reasons = {
        "9.0.1": "could not download sglang==9.0.1",
        "9.0.3": f"{proj / 'pins' / '9.0.3' / 'manifest.yaml'}",
        "9.0.4": f"{proj / 'pins' / '9.0.4'} has no manifest.yaml",
    }
    for version, why in reasons.items():
        entry = data[version]
        assert {k: type(v) for k, v in entry.items() if k not in ("error", "hint")} == types, entry
        assert (entry["version"], entry["ok"], entry["status"]) == (version, False, "error"), entry
        assert (entry["items"], entry["offsets"], entry["failures"]) == ([], [], 1), entry
        assert entry["seconds"] >= 0 and entry["hint"], entry
        assert entry["error"].startswith(f"pin {version} could not be checked: ") and why in entry["error"], entry


def test_check_all_pins_exits_with_the_worst_outcome(tmp_path, pin_source):
    """A failing pin (exit 1 alone) beside one that could not be checked (exit 2 alone): 2, and both are said."""
    proj, own = _broken_pins(tmp_path, pin_source)
    shutil.rmtree(proj / "pins" / "9.0.3")
    shutil.rmtree(proj / "pins" / "9.0.4")
    patch = proj / "patches" / "fx_topk.patch"
    patch.write_text(patch.read_text().replace("\n def select_experts(", "\n def _broken_select_experts("))
    res = _offline(proj, own, "check", "--all-pins", "--json", rc=2)
    data = json.loads(res.stdout)
    assert (data["0.5.17"]["status"], data["9.0.1"]["status"]) == ("fail", "error"), data
    assert "error: pin 9.0.1 could not be checked (the others were: 0.5.17 does not hold):" in res.stderr
    assert "\n  9.0.1: could not download sglang==9.0.1" in res.stderr, res.stderr
    assert "\n  and the patch set does not hold on pin(s) 0.5.17: " in res.stderr, res.stderr
    shutil.rmtree(proj / "pins" / "9.0.1")
    assert json.loads(_offline(proj, own, "check", "--all-pins", "--json", rc=1).stdout)["0.5.17"]["status"] == "fail"


@pytest.mark.parametrize("mode", [0o000, 0o644], ids=["000", "no-search"])
def test_a_rebase_in_an_unreadable_pins_is_not_said_to_be_none(open_dir, cache, pin_source, mode):
    """A rebase stopped at a conflict, then pins/ made unreadable to this user: `--status`, `--continue` and `--abort`
    had said "no rebase in progress" (the lookup of its progress file got nothing back), while one is. Each
    refuses by name now (exit 2, pins/ and how to see its permissions), and the rebase is left as it was."""
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(open_dir)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    progress = proj / "pins" / ".rebase-9.0.2.json"
    saved = progress.read_bytes()
    users = _users_cache(open_dir, pin_source)
    subprocess.run(["chmod", "-R", "a+rX", str(open_dir)], check=True)
    pins = proj / "pins"
    pins.chmod(mode)
    for args in (
        ("--status",),
        ("--continue",),
        ("--skip",),
        ("--abort",),
        ("--abort", "9.0.2"),
        ("--status", "9.0.2"),
    ):
        res = _as_the_user(proj, users, "rebase", *args)
        _no_traceback(res)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert f"error: {pins} cannot be read (Permission denied)" in res.stderr, (args, res.stderr)
        assert f"`ls -ld {pins}`" in res.stderr and "no rebase" not in res.stdout + res.stderr, (args, res.stderr)
    pins.chmod(0o755)
    assert progress.read_bytes() == saved
    assert "9.0.2" in cli(proj, cache, "rebase", "--status", rc=0).stdout


def _pins_linked_where_the_user_cannot_reach(proj: Path, private: Path) -> tuple[Path, Path, tuple]:
    (private / "pin-sets").mkdir()
    os.symlink(private / "pin-sets", proj / "pins")
    return (
        proj / "pins",
        private / "pin-sets",
        (("check", "--all-pins"), ("--pin", "9.0.1", "check"), ("rebase", "9.0.1")),
    )


def _pin_linked_where_the_user_cannot_reach(proj: Path, private: Path) -> tuple[Path, Path, tuple]:
    (proj / "pins").mkdir()
    _copy_set(proj, private / "9.0.1")
    os.symlink(private / "9.0.1", proj / "pins" / "9.0.1")
    return proj / "pins" / "9.0.1", private / "9.0.1", (("rebase", "9.0.1"),)


@pytest.mark.parametrize(
    "link", [_pins_linked_where_the_user_cannot_reach, _pin_linked_where_the_user_cannot_reach], ids=["pins", "pin"]
)
def test_a_link_whose_target_this_user_cannot_reach_is_not_said_to_lead_nowhere(open_dir, link):
    """pins (or pins/9.0.1) a link to a directory behind one this user may not enter: it had been called "a
    symbolic link to X, which does not exist", and the fix was to restore X, which is there. It is said to be out
    of this user's reach (permission), with the way to see where on the path, exit 2, before any work."""
    proj = project(open_dir)
    private = proj / "private"  # inside the project: only the permission stands in the way
    private.mkdir()
    path, target, commands = link(proj, private)
    subprocess.run(["chmod", "-R", "a+rX", str(open_dir)], check=True)
    private.chmod(0o700)
    for args in commands:
        res = _as_the_user(proj, open_dir / "cache", *args)
        _no_traceback(res)
        assert res.returncode == 2, (args, res.stderr)
        assert f"{path} is a symbolic link to {target}, which this user cannot reach (Permission denied)" in (
            res.stderr
        ), (args, res.stderr)
        assert "does not exist" not in res.stderr and "restore what it leads to" not in res.stderr, res.stderr
        assert f"`namei -l {target}`" in res.stderr, res.stderr
    assert not (proj / ".sglang").exists() and not (open_dir / "cache").exists()


def test_the_hint_for_a_release_that_cannot_be_downloaded_is_a_command_that_works(tmp_path, pin_source):
    """`check` has no --wheel: its hint had said "pass --wheel FILE". It names the cache path every command reads
    first; following it with the user's local copy makes the pin checkable offline."""
    proj, own = _broken_pins(tmp_path, pin_source)
    shutil.rmtree(proj / "pins" / "9.0.3")
    shutil.rmtree(proj / "pins" / "9.0.4")
    hint = json.loads(_offline(proj, own, "check", "--all-pins", "--json", rc=2).stdout)["9.0.1"]["hint"]
    assert "--wheel" not in hint, hint
    command = re.search(r"`(mkdir -p .* && cp WHEEL_FILE .*)`", hint)
    assert command, hint
    (local,) = (tmp_path / "aside").glob("sglang-9.0.1-*.whl")
    subprocess.run(["bash", "-c", command.group(1).replace("WHEEL_FILE", shlex.quote(str(local)))], check=True)
    assert json.loads(_offline(proj, own, "check", "--all-pins", "--json", rc=0).stdout)["9.0.1"]["status"] == "pass"


def test_a_pin_the_os_keeps_from_being_checked_exits_2_not_1(tmp_path, pin_source):
    """A cache the OS refuses (its lock a directory): the pins were "not checked" with exit 1, which CI reads as
    "a pin fails"; README: 2, a pin could not be checked."""
    proj, own = _broken_pins(tmp_path, pin_source)
    for v in ("9.0.1", "9.0.3", "9.0.4"):
        shutil.rmtree(proj / "pins" / v)
    _fake_pin(proj, "9.0.5")
    (own / ".lock").unlink(missing_ok=True)
    (own / ".lock").mkdir()
    res = _offline(proj, own, "check", "--all-pins", "--json", rc=2)
    data = json.loads(res.stdout)
    assert {v: d["status"] for v, d in data.items()} == {"0.5.17": "error", "9.0.5": "error"}, data
    assert "could not be checked" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_hints_rm_holds_a_path_with_a_space_as_one_word(tmp_path, pin_source):
    """`rm /tmp/p 1/proj/pins/9.0.2` pasted removes `/tmp/p` and `1/proj/pins/9.0.2`: the path is quoted."""
    spaced = tmp_path / "p 1"
    spaced.mkdir()
    (spaced / "p").write_text("must survive")  # what the unquoted command would have removed
    own = spaced / "cache"
    (own / "wheels").mkdir(parents=True)
    os.symlink(pin_source.wheel, own / "wheels" / pin_source.wheel.name)
    proj = project(spaced)
    (proj / "pins").mkdir()
    os.symlink(spaced / "nowhere", proj / "pins" / "9.0.2")
    res = cli(proj, own, "rebase", "9.0.2", rc=2)
    command = re.search(r"`(rm [^`]*)`", res.stderr)
    assert command, res.stderr
    subprocess.run(["bash", "-c", command.group(1)], cwd=tmp_path, check=True)
    assert not os.path.lexists(proj / "pins" / "9.0.2") and (spaced / "p").read_text() == "must survive"


@pytest.mark.parametrize("where", ["pins/NOTES.md", "pins/9.0.1/manifest.yaml"])
def test_a_link_in_pins_to_a_place_this_user_cannot_reach_names_the_link(open_dir, pin_source, where):
    """A link beside the pins, or a pin's manifest.yaml linked, into a directory this user may not enter: the
    refusal had named the link's own directory (mode 777) as unreadable, with `ls -ld` of it as the fix."""
    proj = project(open_dir)
    private = proj / "private"
    private.mkdir()
    (private / "x").write_text("schema: 1\n")
    link = proj / where
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(private / "x", link)
    cache = _users_cache(open_dir, pin_source)
    subprocess.run(["chmod", "-R", "a+rX", str(open_dir)], check=True)
    private.chmod(0o700)
    args = ("check", "--all-pins") if where.startswith("pins/NOTES") else ("--pin", "9.0.1", "status")
    res = _as_the_user(proj, cache, *args)
    _no_traceback(res)
    assert res.returncode == 2, res.stderr
    assert f"{link} is a symbolic link to {private / 'x'}, which this user cannot reach" in res.stderr, res.stderr
    assert f"{link.parent} cannot be read" not in res.stderr, res.stderr
