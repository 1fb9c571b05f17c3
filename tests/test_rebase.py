"""`rebase VERSION` on fixture releases made from the real SGLang 0.5.17 files: real wheels (a few of the
pin's files, some edited the way upstream edits them) in a private cache, the real CLI in real processes."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_cli

from sglang_overlay.fetch import WheelSource, pinned_wheel
from sglang_overlay.manifest import UpstreamedPatch, load_manifest

FIX = ROOT / "tests" / "fixtures" / "engine"
SARGS = "python/sglang/srt/server_args.py"
TOPK = "python/sglang/srt/layers/moe/topk.py"
KIMI = "python/sglang/srt/models/kimi_k25.py"
COMMON = "python/sglang/srt/utils/common.py"
OVERLAY = "python/sglang/srt/fx_overlay_module.py"
BASE_FILES = ("python/sglang/__init__.py", SARGS, TOPK, KIMI, COMMON)
TAG = "cp312-cp312-manylinux_2_34_x86_64"


@pytest.fixture(scope="module")
def pin_source(project_manifest):
    return WheelSource(pinned_wheel(project_manifest.pin))


@pytest.fixture(scope="module")
def cache(tmp_path_factory, pin_source):
    """A private release cache: the real pinned wheel (linked) and the fixture releases the tests add."""
    root = tmp_path_factory.mktemp("cache")
    (root / "wheels").mkdir()
    os.symlink(pin_source.wheel, root / "wheels" / pin_source.wheel.name)
    return root


def pin_text(pin_source, path: str) -> str:
    return pin_source.read(path).decode()


def make_release(cache: Path, pin_source, version: str, **changes) -> Path:
    """A release wheel of the fixture's files: the pin's bytes, `changes` (repo path -> bytes, or None to
    leave a file out) applied, and _version.py saying `version`."""
    files = {f: pin_source.read(f) for f in BASE_FILES}
    files.update(changes)
    files["python/sglang/_version.py"] = f'__version__ = version = "{version}"\n'.encode()
    folder = cache / "releases" / version
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"sglang-{version}-{TAG}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in sorted(files.items()):
            if data is not None:
                z.writestr(path[len("python/") :], data)
    (folder / "SHA256").write_text(f"{hashlib.sha256(wheel.read_bytes()).hexdigest()}  {wheel.name}\n")
    return wheel


def project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    for item in ("manifest.yaml", "patches", "overlay"):
        src = FIX / item
        if src.is_dir():
            subprocess.run(["cp", "-r", str(src), str(proj / item)], check=True)
        else:
            (proj / item).write_bytes(src.read_bytes())
    return proj


def cli(proj: Path, cache: Path, *args, rc=None):
    return run_cli(*args, cwd=proj, env={"SGLANG_OVERLAY_CACHE": str(cache)}, check_rc=rc)


def project_files(proj: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(proj.rglob("*")):
        rel = p.relative_to(proj)
        if p.is_file() and rel.parts[0] != ".sglang":
            out[str(rel)] = p.read_bytes()
    return out


def tree_is_pristine(proj: Path, version: str) -> bool:
    tree = proj / ".sglang" / f"sglang-{version}"
    status = subprocess.run(
        ["git", "status", "--porcelain"], check=False, cwd=tree, capture_output=True, text=True
    ).stdout
    state = tree / ".sglang-overlay" / "state.json"
    return status == "" and (not state.exists() or json.loads(state.read_text())["files"] == {})


def with_context_edit(text: str, line: int, note: str = "upstream edit") -> str:
    """Upstream edited line `line` (1-based), a context line of a hunk: zero-fuzz apply fails, merges succeed."""
    lines = text.splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].rstrip("\n") + f"  # {note}\n"
    return "".join(lines)


def with_insert_after(text: str, line: int, note: str = "upstream inserted this") -> str:
    """Upstream added a line where a hunk adds its own: a real conflict."""
    lines = text.splitlines(keepends=True)
    indent = lines[line - 1][: len(lines[line - 1]) - len(lines[line - 1].lstrip())]
    lines.insert(line, f"{indent}# {note}\n")
    return "".join(lines)


# -- clean, offset, 3-way -----------------------------------------------------------------------------------------
def test_clean_offset_and_3way_become_a_pin_directory(tmp_path, cache, pin_source):
    moved = ("# a new header line\n" * 7 + pin_text(pin_source, TOPK)).encode()
    reworded = pin_text(pin_source, SARGS).replace(
        "    Prepare the server arguments from the command line arguments.",
        "    Prepare the server arguments from argv (reworded upstream).",
    )
    reads_it = b'import os\n\nON = os.environ.get("FX_OVERLAY_ON", "0")  # upstream reads the patch\'s variable\n'
    wheel = make_release(
        cache, pin_source, "9.0.1", **{TOPK: moved, SARGS: reworded.encode(), "python/sglang/srt/envs2.py": reads_it}
    )
    proj = project(tmp_path)
    before = project_files(proj)
    res = cli(proj, cache, "rebase", "9.0.1", rc=0)
    out = res.stdout
    assert "offset           fx_topk" in out and "+7" in out
    assert "needs-3way       fx_args_b" in out and "clean            fx_args_a" in out
    assert "upstreamed       fx_kimi" in out
    # the environment the patches read, checked against the release's code
    assert "note     fx_overlay: FX_OVERLAY_ON: the release reads it too (python/sglang/srt/envs2.py)" in out
    new = proj / "pins" / "9.0.1"
    m = load_manifest(new / "manifest.yaml")
    assert (m.pin.version, m.pin.git_tag, m.pin.wheel) == ("9.0.1", "v9.0.1", wheel.name)
    assert m.pin.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    # headers kept, Last-Update today, the release it was carried from recorded
    old_header = (FIX / "patches" / "fx_topk.patch").read_text().split("\n---\n")[0]
    header = (new / "patches" / "fx_topk.patch").read_text().split("\n---\n")[0]
    assert header.startswith(old_header.split("Last-Update:")[0])
    assert f"Last-Update: {datetime.date.today().isoformat()}" in header and "Rebased-From: sglang 0.5.17" in header
    assert (new / "overlay" / OVERLAY).read_bytes() == (FIX / "overlay" / OVERLAY).read_bytes()
    # the comments of the manifest survive, only the pin changed in the untouched entries
    assert (new / "manifest.yaml").read_text().startswith("# Engine-test manifest")
    # the project and the release tree are as before; nothing of the rebase is left
    after = project_files(proj)
    assert {k: v for k, v in after.items() if not k.startswith("pins/")} == before
    assert sorted(os.listdir(proj / "pins")) == ["9.0.1"]
    assert tree_is_pristine(proj, "9.0.1")
    # the new pin holds on its release with zero fuzz and no offset: rewritten, not just carried
    check = cli(proj, cache, "--pin", "9.0.1", "check", "--json", rc=0)
    assert json.loads(check.stdout)["offsets"] == []
    allp = cli(proj, cache, "check", "--all-pins", rc=0)
    assert "== pin 0.5.17" in allp.stdout and "== pin 9.0.1" in allp.stdout
    # and it is usable: apply on the release's tree, status there
    cli(proj, cache, "--pin", "9.0.1", "apply", "fx_args_b", rc=0)
    patched = (proj / ".sglang" / "sglang-9.0.1" / SARGS).read_text()
    assert "reworded upstream" in patched and "fixture b" in patched
    assert "sglang 9.0.1 (pinned)" in cli(proj, cache, "--pin", "9.0.1", "status", rc=0).stdout
    launch = cli(proj, cache, "--pin", "9.0.1", "launch", "--dry-run", rc=0).stdout
    assert f"PYTHONPATH={proj / '.sglang' / 'sglang-9.0.1' / 'python'}" in launch
    cli(proj, cache, "--pin", "9.0.1", "build-wheel", "--patches", "fx_args_b", "--out", str(tmp_path / "d"), rc=0)
    built = [w.name for w in (tmp_path / "d").glob("*.whl")]
    assert len(built) == 1 and built[0].startswith("sglang-9.0.1+ovl."), built
    # the top level is still its own pin: --pin 0.5.17 is the top-level manifest
    assert json.loads(cli(proj, cache, "--pin", "0.5.17", "check", "--json", rc=0).stdout)["version"] == "0.5.17"


def test_check_all_pins_json_is_one_document(tmp_path, cache, pin_source):
    """`check --all-pins --json` had printed one JSON object per pin, one after the other, which no JSON parser
    reads. One object now, keyed by pin version (the top level first), each value what `--pin V check --json`
    prints; a failing pin keeps it one document (exit 1, the failure said on stderr)."""
    make_release(cache, pin_source, "9.0.1")
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.1", rc=0)
    cli(proj, cache, "check", "--all-pins", rc=0)  # the compile cache filled: each run below says the same of it
    data = json.loads(cli(proj, cache, "check", "--all-pins", "--json", rc=0).stdout)
    assert list(data) == ["0.5.17", "9.0.1"]
    for version, got in data.items():
        alone = json.loads(cli(proj, cache, "--pin", version, "check", "--json", rc=0).stdout)
        assert {**got, "seconds": 0} == {**alone, "seconds": 0}
    patch = proj / "pins" / "9.0.1" / "patches" / "fx_topk.patch"
    assert "\n def select_experts(" in patch.read_text()
    patch.write_text(patch.read_text().replace("\n def select_experts(", "\n def _broken_select_experts("))
    res = cli(proj, cache, "check", "--all-pins", "--json", rc=1)
    data = json.loads(res.stdout)
    assert data["0.5.17"]["ok"] is True and data["9.0.1"]["ok"] is False and data["9.0.1"]["failures"] >= 1
    assert "does not hold on pin(s) 9.0.1" in res.stderr


# -- conflict -> continue / abort ---------------------------------------------------------------------------------
def test_a_stop_puts_the_overlay_files_in_the_tree_and_takes_their_edits(tmp_path, cache, pin_source):
    """fx_overlay needs no stop, so a manifest where the conflicting patch also carries an overlay file."""
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    man = proj / "manifest.yaml"
    man.write_text(
        man.read_text().replace(
            "    description: second of two patches on server_args.py\n",
            "    description: second of two patches on server_args.py\n    overlay: [python/sglang/srt/fx_b_helper.py]\n",
        )
    )
    helper = proj / "overlay" / "python/sglang/srt/fx_b_helper.py"
    helper.write_text("B = 1\n")
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    tree = proj / ".sglang" / "sglang-9.0.2"
    in_tree = tree / "python/sglang/srt/fx_b_helper.py"
    assert in_tree.read_text() == "B = 1\n"
    text = (tree / SARGS).read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>> patched")) + 1
    (tree / SARGS).write_text(text[:start] + "    # fixture b: resolved\n" + text[end:])
    in_tree.write_text("B = 2  # for 9.0.2\n")
    cli(proj, cache, "rebase", "--continue", rc=0)
    new = proj / "pins" / "9.0.2"
    assert (new / "overlay" / "python/sglang/srt/fx_b_helper.py").read_text() == "B = 2  # for 9.0.2\n"
    assert "fx_b_helper" not in (new / "patches" / "fx_args_b.patch").read_text()  # an overlay file, not a diff
    assert helper.read_text() == "B = 1\n" and not in_tree.exists() and tree_is_pristine(proj, "9.0.2")


def _conflicting_release(cache, pin_source, version):
    src = pin_text(pin_source, SARGS).replace(
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n",
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n    # upstream wrote something else here\n",
    )
    make_release(cache, pin_source, version, **{SARGS: src.encode()})


def test_conflict_stops_with_markers_then_continue_captures_the_resolution(tmp_path, cache, pin_source):
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    res = cli(proj, cache, "rebase", "9.0.2", rc=1)
    tree_file = proj / ".sglang" / "sglang-9.0.2" / SARGS
    # file, hunk, Python symbol, the patch's Description
    assert f"{tree_file}" in res.stdout and "hunk #1 @@ -9342,6 +9342,7 @@" in res.stdout
    assert "`prepare_server_args`" in res.stdout
    assert "Fixture fx_args_b: a harmless edit" in res.stdout and "rebase --continue" in res.stderr
    text = tree_file.read_text()
    assert "<<<<<<< sglang 9.0.2" in text and "||||||| pin" in text and ">>>>>>> patched" in text
    st = cli(proj, cache, "rebase", "--status", rc=0).stdout
    assert "done     clean            fx_topk" in st and "stopped  conflict         fx_args_b" in st
    assert "to do                     fx_common" in st
    assert not (proj / "pins" / "9.0.2").exists()
    # markers left: refused, naming the lines
    res = cli(proj, cache, "rebase", "--continue", rc=1)
    assert "conflict markers left at line(s)" in res.stderr
    # a resolution that does not compile: refused
    start, end = text.index("<<<<<<<"), text.index(">>>>>>> patched")
    end = text.index("\n", end) + 1
    tree_file.write_text(text[:start] + "    def (:\n" + text[end:])
    assert "does not byte-compile" in cli(proj, cache, "rebase", "--continue", rc=1).stderr
    resolved = "    # upstream wrote something else here\n    # fixture b: resolved by hand\n"
    tree_file.write_text(text[:start] + resolved + text[end:])
    res = cli(proj, cache, "rebase", "--continue", rc=0)
    assert "resolved         fx_args_b" in res.stdout and "rebased 0.5.17 -> 9.0.2" in res.stdout
    patch = (proj / "pins" / "9.0.2" / "patches" / "fx_args_b.patch").read_text()
    assert "+    # fixture b: resolved by hand" in patch and "Rebased-From: sglang 0.5.17" in patch
    assert tree_is_pristine(proj, "9.0.2")
    cli(proj, cache, "--pin", "9.0.2", "check", rc=0)


def test_conflict_then_abort_leaves_project_and_trees_as_before(tmp_path, cache, pin_source):
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    before = project_files(proj)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    assert (proj / "pins" / ".rebase-9.0.2.json").is_file()
    res = cli(proj, cache, "rebase", "--abort", rc=0)
    assert "aborted" in res.stdout
    assert project_files(proj) == before and not (proj / "pins").exists()
    assert tree_is_pristine(proj, "9.0.2")
    # and it can start again, stopping at the same place
    assert "fx_args_b: conflict" in cli(proj, cache, "rebase", "9.0.2", rc=1).stdout


def test_abort_keeps_what_the_user_resolved_in_the_tree_and_carried_by_hand(tmp_path, cache, pin_source):
    """Two stops: fx_topk resolved and carried by `--continue`, fx_args_b half resolved in the tree, then
    `--abort`. The project is as before it and the tree pristine, but neither piece of hand work is gone: the
    carried patch stays in the staging directory, renamed aside, and the tree's edit is in its backups."""
    topk = with_insert_after(pin_text(pin_source, TOPK), 2055)
    src = pin_text(pin_source, SARGS).replace(
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n",
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n    # upstream wrote something else here\n",
    )
    make_release(cache, pin_source, "9.0.12", **{TOPK: topk.encode(), SARGS: src.encode()})
    proj = project(tmp_path)
    before = project_files(proj)
    res = cli(proj, cache, "rebase", "9.0.12", rc=1)
    assert "fx_topk: conflict" in res.stdout, res.stdout
    tree = proj / ".sglang" / "sglang-9.0.12"
    text = (tree / TOPK).read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>> patched")) + 1
    (tree / TOPK).write_text(
        text[:start] + "# upstream inserted this\n# fixture: marks select_experts, by hand\n" + text[end:]
    )
    res = cli(proj, cache, "rebase", "--continue", rc=1)
    assert "fx_args_b: conflict" in res.stdout, res.stdout + res.stderr
    half = (tree / SARGS).read_text().replace("<<<<<<< sglang 9.0.12", "<<<<<<< sglang 9.0.12 (half done)")
    (tree / SARGS).write_text(half)
    res = cli(proj, cache, "rebase", "--abort", rc=0)
    assert tree_is_pristine(proj, "9.0.12")
    kept = [d for d in (proj / "pins").iterdir() if d.name.startswith(".rebase-9.0.12.aborted-")]
    assert len(kept) == 1 and f"(fx_topk) is kept in {kept[0]}" in res.stdout, res.stdout
    assert "marks select_experts, by hand" in (kept[0] / "patches" / "fx_topk.patch").read_text()
    assert {k: v for k, v in project_files(proj).items() if not k.startswith("pins/")} == before
    assert not (proj / "pins" / "9.0.12").exists() and not (proj / "pins" / ".rebase-9.0.12.json").exists()
    line = next(x for x in res.stdout.splitlines() if "your edits of 1 file(s)" in x)
    backup = Path(line.rsplit(" saved under ", 1)[1].strip())
    assert (backup / SARGS).read_text() == half
    # and it can start again, stopping at the same place
    assert "fx_topk: conflict" in cli(proj, cache, "rebase", "9.0.12", rc=1).stdout


# -- upstreamed entries, newly upstreamed patches, overlay collisions ---------------------------------------------
def test_a_moved_proof_is_located_and_rewritten(tmp_path, cache, pin_source):
    """The Kimi wrapper moved to another file, its hook now a method of another class, re-indented."""
    kimi = pin_text(pin_source, KIMI)
    moved = "class Wrapper:\n" + "".join(
        "    " + line if line.strip() else line for line in kimi.splitlines(keepends=True)
    )
    new_path = "python/sglang/srt/models/kimi/k25_wrapper.py"
    make_release(cache, pin_source, "9.0.3", **{KIMI: None, new_path: moved.encode()})
    proj = project(tmp_path)
    res = cli(proj, cache, "rebase", "9.0.3", rc=0)
    assert f"upstreamed-moved fx_kimi: moved to {new_path}" in res.stdout
    proof = load_manifest(proj / "pins" / "9.0.3" / "manifest.yaml").patch("fx_kimi").proof
    assert proof.file == new_path
    assert proof.symbols == ("Wrapper.KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture",)
    cli(proj, cache, "--pin", "9.0.3", "check", rc=0)  # the rewritten proof holds on the release


def test_a_proof_not_found_stops_and_asks(tmp_path, cache, pin_source):
    gone = pin_text(pin_source, KIMI).replace(
        "self.language_model.set_eagle3_layers_to_capture(layer_ids)", "self.language_model.capture_aux(layer_ids)"
    )
    make_release(cache, pin_source, "9.0.4", **{KIMI: gone.encode()})
    proj = project(tmp_path)
    res = cli(proj, cache, "rebase", "9.0.4", rc=1)
    assert "fx_kimi: proof-failed" in res.stdout
    ask = proj / "pins" / ".rebase-9.0.4" / ".proofs" / "fx_kimi.yaml"
    assert yaml.safe_load(ask.read_text())["file"] == KIMI
    ask.write_text(f"file: {KIMI}\nsymbols: [KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture]\n")
    ask.write_text(ask.read_text() + 'contains: ["self.language_model.capture_aux(layer_ids)"]\n')
    cli(proj, cache, "rebase", "--continue", rc=0)
    proof = load_manifest(proj / "pins" / "9.0.4" / "manifest.yaml").patch("fx_kimi").proof
    assert proof.contains == ("self.language_model.capture_aux(layer_ids)",)


def test_a_patch_upstream_now_has_is_offered_to_become_upstreamed(tmp_path, cache, pin_source):
    src = pin_text(pin_source, SARGS).replace(
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n",
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n    # fixture b: inside prepare_server_args\n",
    )
    make_release(cache, pin_source, "9.0.5", **{SARGS: src.encode()})
    proj = project(tmp_path)
    res = cli(proj, cache, "rebase", "9.0.5", rc=1)
    assert "fx_args_b: upstream on sglang 9.0.5" in res.stdout and "reverse-applies" in res.stdout
    assert "makes fx_args_b an `upstreamed` entry" in res.stderr
    cli(proj, cache, "rebase", "--continue", rc=0)
    entry = load_manifest(proj / "pins" / "9.0.5" / "manifest.yaml").patch("fx_args_b")
    assert isinstance(entry, UpstreamedPatch) and entry.upstream.release == "9.0.5" and entry.original is not None
    cli(proj, cache, "--pin", "9.0.5", "check", rc=0)  # proved by its diff reverse-applying


def test_an_overlay_file_that_now_ships_upstream_stops(tmp_path, cache, pin_source):
    make_release(cache, pin_source, "9.0.6", **{OVERLAY: b"# upstream's own module of that name\n"})
    proj = project(tmp_path)
    res = cli(proj, cache, "rebase", "9.0.6", rc=1)
    assert "fx_overlay: collision" in res.stdout and OVERLAY in res.stdout
    assert "rebase --abort" in res.stderr
    cli(proj, cache, "rebase", "--continue", rc=1)  # still there: asked again
    cli(proj, cache, "rebase", "--abort", rc=0)


# -- --skip -------------------------------------------------------------------------------------------------------
def test_skip_leaves_the_stopped_patch_out_and_records_why(tmp_path, cache, pin_source):
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    before = project_files(proj)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    res = cli(proj, cache, "rebase", "--skip", "--reason", "reworked for 9.0.2 upstream (PR 123)", rc=0)
    assert "skipped          fx_args_b: reworked for 9.0.2 upstream (PR 123)" in res.stdout
    assert "rebased 0.5.17 -> 9.0.2" in res.stdout
    new = proj / "pins" / "9.0.2"
    m = load_manifest(new / "manifest.yaml")
    assert "fx_args_b" not in m.names and not (new / "patches" / "fx_args_b.patch").exists()
    assert m.presets["args"] == ("fx_args_a",)  # the preset keeps the rest of its patches
    (sk,) = m.skipped
    assert (sk.name, sk.reason, sk.release, sk.source) == (
        "fx_args_b",
        "reworked for 9.0.2 upstream (PR 123)",
        "9.0.2",
        "0.5.17",
    )
    assert sk.stop.startswith("conflict on sglang 9.0.2: python/sglang/srt/server_args.py hunk #1")
    assert "`prepare_server_args`" in sk.stop
    # the user finds it later: `status` of the new pin names it, with why
    st = cli(proj, cache, "--pin", "9.0.2", "status", rc=0).stdout
    assert "[s] fx_args_b" in st and "skipped carrying 0.5.17 -> 9.0.2: reworked for 9.0.2" in st
    info = json.loads(cli(proj, cache, "--pin", "9.0.2", "status", "--json", rc=0).stdout)
    assert [s["name"] for s in info["skipped"]] == ["fx_args_b"]
    # the source pin is untouched, the release tree pristine, and the new pin holds on its release
    assert {k: v for k, v in project_files(proj).items() if not k.startswith("pins/")} == before
    assert tree_is_pristine(proj, "9.0.2")
    cli(proj, cache, "--pin", "9.0.2", "check", rc=0)


def test_skip_takes_the_entries_that_require_the_skipped_one(tmp_path, cache, pin_source):
    """fx_common requires fx_args_a: left out with it, also when it was carried before the stop."""
    src = pin_text(pin_source, SARGS).replace(
        "class ServerArgs:\n", "class ServerArgs:\n    # upstream put a note here\n", 1
    )
    make_release(cache, pin_source, "9.0.7", **{SARGS: src.encode()})
    proj = project(tmp_path)
    man = proj / "manifest.yaml"
    text = man.read_text()
    common = text[text.index("  - name: fx_common") : text.index("  - name: fx_overlay")]
    man.write_text(text.replace(common, "").replace("  - name: fx_topk\n", common + "  - name: fx_topk\n", 1))
    res = cli(proj, cache, "rebase", "9.0.7", rc=1)
    assert (
        "fx_args_a: conflict" in res.stdout
        and "done     clean            fx_common" in cli(proj, cache, "rebase", "--status", rc=0).stdout
    )
    res = cli(proj, cache, "rebase", "--skip", rc=0)
    assert "skipped          fx_common: requires fx_args_a, which was skipped" in res.stdout
    new = proj / "pins" / "9.0.7"
    m = load_manifest(new / "manifest.yaml")
    assert {"fx_args_a", "fx_common"}.isdisjoint(m.names) and "fx_args_b" in m.names
    assert sorted(os.listdir(new / "patches")) == ["fx_args_b.patch", "fx_topk.patch"]
    assert m.presets == {"default": ("fx_topk",), "args": ("fx_args_b",)}
    assert {s.name: s.reason for s in m.skipped} == {
        "fx_args_a": "left out by `rebase --skip`",
        "fx_common": "requires fx_args_a, which was skipped",
    }
    cli(proj, cache, "--pin", "9.0.7", "check", rc=0)


def test_skip_resolves_an_overlay_collision(tmp_path, cache, pin_source):
    make_release(cache, pin_source, "9.0.6", **{OVERLAY: b"# upstream's own module of that name\n"})
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.6", rc=1)
    cli(proj, cache, "rebase", "--skip", rc=0)
    new = proj / "pins" / "9.0.6"
    m = load_manifest(new / "manifest.yaml")
    assert "fx_overlay" not in m.names and not (new / "overlay" / OVERLAY).exists()
    assert m.skipped[0].stop.startswith("collision on sglang 9.0.6: overlay file(s)")


def test_skip_needs_a_stop_and_reason_needs_skip(tmp_path, cache, pin_source):
    make_release(cache, pin_source, "9.0.4", **{KIMI: pin_text(pin_source, KIMI).replace("set_eagle3", "aux").encode()})
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.4", rc=1)  # a proof-failed stop
    assert "--reason goes with --skip" in cli(proj, cache, "rebase", "--continue", "--reason", "x", rc=2).stderr
    progress = proj / "pins" / ".rebase-9.0.4.json"
    data = json.loads(progress.read_text())
    data["stop"] = None
    progress.write_text(json.dumps(data))
    res = cli(proj, cache, "rebase", "--skip", rc=2)
    assert "nothing to skip" in res.stderr and "Traceback" not in res.stderr


def test_a_skipped_record_that_is_an_entry_again_is_bad_input(tmp_path, cache):
    proj = project(tmp_path)
    man = proj / "manifest.yaml"
    man.write_text(man.read_text() + "skipped:\n  fx_topk: {reason: x, release: 9.0.2, from: 0.5.17}\n")
    res = cli(proj, cache, "status", rc=2)
    assert "skipped.fx_topk" in res.stderr and "now that it is back" in res.stderr


# -- bad input ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, words",
    [
        (("rebase",), "name the release"),
        (("rebase", "latest!"), "is not a release version"),
        (("rebase", "0.5.17"), "already pinned to 0.5.17"),
        (("rebase", "--continue"), "no rebase in progress"),
        (("rebase", "--abort", "9.9.9"), "no rebase to 9.9.9 in progress"),
        (("rebase", "9.0.1", "--abort", "--continue"), "not allowed with"),
        (("--pin", "7.7.7", "status"), "no pin for 7.7.7"),
    ],
)
def test_bad_input_exits_2(tmp_path, cache, args, words):
    proj = project(tmp_path)
    res = cli(proj, cache, *args, rc=2)
    assert words in res.stderr and "Traceback" not in res.stderr


def test_a_damaged_progress_file_exits_2(tmp_path, cache, pin_source):
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    progress = proj / "pins" / ".rebase-9.0.2.json"
    data = json.loads(progress.read_text())
    data["next"] = 99
    progress.write_text(json.dumps(data))
    res = cli(proj, cache, "rebase", "--continue", rc=2)
    assert f"{progress}" in res.stderr and "'next'" in res.stderr and "Traceback" not in res.stderr
    progress.write_text("{")
    assert "not valid JSON" in cli(proj, cache, "rebase", "--status", rc=2).stderr


def test_a_second_rebase_to_the_same_release_is_refused(tmp_path, cache, pin_source):
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    assert "already in progress" in cli(proj, cache, "rebase", "9.0.2", rc=2).stderr


def test_an_abort_cut_short_says_so_and_is_finished_by_abort(tmp_path, cache, pin_source):
    """What an abort interrupted after putting the release tree back leaves: the progress marked `aborting`."""
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    before = project_files(proj)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    progress = proj / "pins" / ".rebase-9.0.2.json"
    data = json.loads(progress.read_text())
    progress.write_text(json.dumps(data | {"aborting": True}))
    st = cli(proj, cache, "rebase", "--status", rc=0).stdout
    assert "an abort was cut short" in st and "stopped" not in st
    assert "rebase --abort` finishes it" in cli(proj, cache, "rebase", "--continue", rc=2).stderr
    assert "rebase --abort` finishes it" in cli(proj, cache, "rebase", "--skip", rc=2).stderr
    cli(proj, cache, "rebase", "--abort", rc=0)
    assert project_files(proj) == before and tree_is_pristine(proj, "9.0.2")


def test_a_staging_directory_gone_is_not_taken_for_a_finished_rebase(tmp_path, cache, pin_source):
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    shutil.rmtree(proj / "pins" / ".rebase-9.0.2")
    res = cli(proj, cache, "rebase", "--continue", rc=2)
    assert "staging directory is missing" in res.stderr and "rebased" not in res.stdout
    cli(proj, cache, "rebase", "--abort", rc=0)
    assert not (proj / "pins").exists() and tree_is_pristine(proj, "9.0.2")


def test_a_source_pin_changed_during_the_rebase_is_refused_not_lost(tmp_path, cache, pin_source):
    """A `refresh` (or an editor) changed a patch of the source pin after the rebase carried it: going on would
    leave the change out of the new pin, so it is refused, naming the file, until it is put back."""
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    patch = proj / "patches" / "fx_topk.patch"
    old = patch.read_bytes()
    patch.write_bytes(old.replace(b"Description: ", b"Description: reworded. ", 1))
    for args in (("rebase", "--continue"), ("rebase", "--skip")):
        res = cli(proj, cache, *args, rc=1)
        assert "the source pin changed since the rebase to 9.0.2 started: patches/fx_topk.patch" in res.stderr
    assert "stopped  conflict         fx_args_b" in cli(proj, cache, "rebase", "--status", rc=0).stdout
    patch.write_bytes(old)
    cli(proj, cache, "rebase", "--skip", rc=0)


# -- what a user leaves at a stop ---------------------------------------------------------------------------------
def _resolve(proj: Path, version: str) -> None:
    f = proj / ".sglang" / f"sglang-{version}" / SARGS
    text = f.read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>> patched")) + 1
    f.write_text(text[:start] + "    # upstream wrote something else here\n    # fixture b: resolved\n" + text[end:])


def test_an_editor_swap_or_backup_file_at_a_stop_is_refused_not_captured(tmp_path, cache, pin_source):
    """Files the release does not have and the patch does not add are no part of a resolution: taken, a binary
    swap file made a patch whose new manifest never loads (and was deleted from the tree); a .bak a new file."""
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    _resolve(proj, "9.0.2")
    srt = proj / ".sglang" / "sglang-9.0.2" / "python/sglang/srt"
    swap, bak = srt / ".server_args.py.swp", srt / "server_args.py.bak"
    swap.write_bytes(b"b0VIM 9.0\x00\x00\x01\x02" * 64)
    bak.write_bytes(pin_source.read(SARGS))
    res = cli(proj, cache, "rebase", "--continue", rc=2)
    assert f"{swap}" in res.stderr and f"{bak}" in res.stderr and "swap or backup" in res.stderr
    assert "Traceback" not in res.stderr
    # nothing recorded, nothing of the user's removed: the rebase still stands at the stop
    assert "stopped  conflict         fx_args_b" in cli(proj, cache, "rebase", "--status", rc=0).stdout
    assert swap.is_file() and bak.is_file() and "fixture b: resolved" in (srt / "server_args.py").read_text()
    swap.unlink()
    bak.unlink()
    cli(proj, cache, "rebase", "--continue", rc=0)
    patch = (proj / "pins" / "9.0.2" / "patches" / "fx_args_b.patch").read_text()
    assert "swp" not in patch and ".bak" not in patch and "+    # fixture b: resolved" in patch


def test_a_proof_rewritten_at_a_stop_is_checked_before_it_is_taken(tmp_path, cache, pin_source):
    """A proof that proves nothing (no symbols, no contains; a string where a list goes: one line per character)
    is refused at the stop, naming the file and the key, and the rebase stays there; not taken, to fail the new
    manifest's load at the end forever."""
    make_release(cache, pin_source, "9.0.4", **{KIMI: pin_text(pin_source, KIMI).replace("set_eagle3", "aux").encode()})
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.4", rc=1)
    ask = proj / "pins" / ".rebase-9.0.4" / ".proofs" / "fx_kimi.yaml"
    line = "self.language_model.aux_layers_to_capture(layer_ids)"
    assert line in pin_text(pin_source, KIMI).replace("set_eagle3", "aux")
    for text, words in [
        (f"file: {KIMI}\n", "names no symbols and no contains"),
        (f"file: {KIMI}\nsymbols: []\ncontains: []\n", "names no symbols and no contains"),
        (f'file: {KIMI}\ncontains: "{line}"\n', "key 'contains': expected a list of non-empty strings"),
        (f"file: {KIMI}\nsymbols: [1]\n", "key 'symbols': expected a list of non-empty strings"),
        (f"file: {KIMI}\ncontains: ['  ']\n", "key 'contains': expected a list of non-empty strings"),
        (f"file: /etc/passwd\ncontains: ['{line}']\n", "key 'file': path '/etc/passwd' is absolute"),
        (f"file: {KIMI}\ncontains: ['{line}']\nline: 3\n", "unknown key(s) 'line'"),
        (f"- {KIMI}\n", "expected a mapping of file, symbols, contains"),
    ]:
        ask.write_text(text)
        res = cli(proj, cache, "rebase", "--continue", rc=2)
        assert f"{ask}" in res.stderr and words in res.stderr and "Traceback" not in res.stderr, (text, res.stderr)
        assert "stopped  proof-failed     fx_kimi" in cli(proj, cache, "rebase", "--status", rc=0).stdout
    ask.write_text(f"file: {KIMI}\ncontains: ['{line}']\n")
    cli(proj, cache, "rebase", "--continue", rc=0)
    assert load_manifest(proj / "pins" / "9.0.4" / "manifest.yaml").patch("fx_kimi").proof.contains == (line,)


# -- a damaged progress file --------------------------------------------------------------------------------------
DAMAGES = [  # what is done to the progress file -> the key the error names
    (lambda d: d["results"]["fx_topk"].update(proof="x"), "'results'['fx_topk'] -> 'proof'"),
    (lambda d: d["results"]["fx_topk"].update(proof={"file": SARGS}), "'results'['fx_topk'] -> 'proof'"),
    (lambda d: d["results"]["fx_topk"].update(files=[5]), "'results'['fx_topk'] -> 'files'"),
    (lambda d: d["results"]["fx_topk"].update(files=[[5, "x"]]), "'results'['fx_topk'] -> 'files'"),
    (lambda d: d["results"]["fx_topk"].update(stop=["x"]), "'stop'"),
    (lambda d: d["stop"].update(kind="weird"), "'stop' -> 'kind'"),
    (lambda d: d["stop"].update(files=[5]), "'stop' -> 'files'"),
    (lambda d: d.update(aborting="yes"), "'aborting'"),
    (lambda d: d.update(started=5), "'started'"),
    (lambda d: d.update(source_files={"manifest.yaml": 5}), "'source_files'"),
    (lambda d: d.update(sha256=None), "'sha256'"),
    (lambda d: d.update(target="9.0.3"), "'target'"),
    (lambda d: d.update(version=True), "'version'"),
]


def test_every_damaged_progress_shape_exits_2_and_abort_drops_it(tmp_path, cache, pin_source):
    """Each malformed shape is bad input naming its key (never a crash), and `rebase --abort`, the way out the
    hint names, works without reading the file: the release tree back as its git commit holds it."""
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    before = project_files(proj)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    progress = proj / "pins" / ".rebase-9.0.2.json"
    good = progress.read_text()
    for damage, key in DAMAGES:
        data = json.loads(good)
        damage(data)
        progress.write_text(json.dumps(data))
        for args in (("rebase", "--continue"), ("rebase", "--status"), ("rebase", "--skip")):
            res = cli(proj, cache, *args, rc=2)
            assert f"{progress}" in res.stderr and key in res.stderr, (key, args, res.stderr)
            assert "Traceback" not in res.stderr and "rebase --abort" in res.stderr
    progress.write_text(good[: len(good) // 2])  # truncated
    assert "not valid JSON" in cli(proj, cache, "rebase", "--continue", rc=2).stderr
    (proj / ".sglang" / "sglang-9.0.2" / "python/sglang/srt/stray.py").write_text("x = 1\n")
    res = cli(proj, cache, "rebase", "--abort", rc=0)
    assert "not valid JSON" in res.stderr and "aborted" in res.stdout and "put back" in res.stdout
    # unread, the progress cannot say which carried patch was resolved by hand: staging is set aside, not removed
    kept = [d.name for d in (proj / "pins").iterdir()]
    assert len(kept) == 1 and kept[0].startswith(".rebase-9.0.2.aborted-") and "it may hold work" in res.stdout
    assert (proj / "pins" / kept[0] / "patches" / "fx_topk.patch").is_file()
    shutil.rmtree(proj / "pins")
    assert project_files(proj) == before and tree_is_pristine(proj, "9.0.2")
    # and a rebase starts again from there; a damaged stop is dropped the same way
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    data = json.loads(progress.read_text())
    data["stop"]["kind"] = "weird"
    progress.write_text(json.dumps(data))
    cli(proj, cache, "rebase", "--abort", rc=0)
    shutil.rmtree(proj / "pins")
    assert project_files(proj) == before and tree_is_pristine(proj, "9.0.2")


def test_abort_keeps_a_proof_rewritten_at_its_stop_and_says_so_again_after_a_cut(tmp_path, cache, pin_source):
    """A proof-failed stop: the user rewrites the proof the stop wrote, then aborts before `--continue`. The
    staging directory held the only copy and was removed; it is set aside now. An abort that stops before its
    end is finished by another, which still says where the work is. An untouched ask is not kept."""
    gone = pin_text(pin_source, KIMI).replace(
        "self.language_model.set_eagle3_layers_to_capture(layer_ids)", "self.language_model.capture_aux(layer_ids)"
    )
    make_release(cache, pin_source, "9.0.13", **{KIMI: gone.encode()})
    proj = project(tmp_path)
    assert "fx_kimi: proof-failed" in cli(proj, cache, "rebase", "9.0.13", rc=1).stdout
    res = cli(proj, cache, "rebase", "--abort", rc=0)  # the ask untouched: nothing to keep
    assert "kept" not in res.stdout and not (proj / "pins").exists(), res.stdout
    cli(proj, cache, "rebase", "9.0.13", rc=1)
    ask = proj / "pins" / ".rebase-9.0.13" / ".proofs" / "fx_kimi.yaml"
    mine = f'file: {KIMI}\ncontains: ["self.language_model.capture_aux(layer_ids)"]\n'
    ask.write_text(mine)
    progress = proj / "pins" / ".rebase-9.0.13.json"
    saved = progress.read_bytes()
    res = cli(proj, cache, "rebase", "--abort", rc=0)
    kept = sorted((proj / "pins").glob(".rebase-9.0.13.aborted-*"))
    assert len(kept) == 1 and (kept[0] / ".proofs" / "fx_kimi.yaml").read_text() == mine
    assert "fx_kimi (its proof, not carried yet)" in res.stdout and str(kept[0]) in res.stdout
    # an abort cut after its rename, before the progress file went: the next abort finishes it and says where
    progress.write_bytes(saved)
    res = cli(proj, cache, "rebase", "--abort", rc=0)
    assert str(kept[0]) in res.stdout and not progress.exists(), res.stdout


# -- pins that cannot be told apart -------------------------------------------------------------------------------
def _fake_pin(proj: Path, version: str) -> Path:
    """pins/VERSION: the fixture project with its pin set to VERSION (enough for what is refused before a tree)."""
    d = proj / "pins" / version
    d.mkdir(parents=True)
    for item in ("manifest.yaml", "patches", "overlay"):
        subprocess.run(["cp", "-r", str(proj / item), str(d / item)], check=True)
    man = d / "manifest.yaml"
    man.write_text(man.read_text().replace("0.5.17", version))
    return d


def test_a_pin_directory_pinning_another_release_is_refused(tmp_path, cache):
    """`cp -r pins/9.0.1 pins/9.0.3`: `--pin 9.0.3` had worked on 9.0.1, and `check --all-pins` reported 9.0.3
    green while checking 9.0.1."""
    proj = project(tmp_path)
    shutil.copytree(_fake_pin(proj, "9.0.1"), proj / "pins" / "9.0.3")
    for args in (("--pin", "9.0.3", "status"), ("check", "--all-pins")):
        res = cli(proj, cache, *args, rc=2)
        assert f"{proj / 'pins' / '9.0.3' / 'manifest.yaml'}: pin.version is 9.0.1" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr


def test_a_rebase_to_the_top_levels_release_is_refused(tmp_path, cache):
    """`--pin 9.0.1 rebase 0.5.17` had made pins/0.5.17, which nothing can select: `--pin 0.5.17` is the top
    level."""
    proj = project(tmp_path)
    _fake_pin(proj, "9.0.1")
    res = cli(proj, cache, "--pin", "9.0.1", "rebase", "0.5.17", rc=2)
    assert "is the pin of the top-level manifest" in res.stderr and "Traceback" not in res.stderr
    assert sorted(os.listdir(proj / "pins")) == ["9.0.1"]
