"""What `check` and `rebase` check beyond merging and byte-compiling (issue 41): a patched file that uses a name
neither it nor the release's file defines (F3: pyflakes' undefined-name check, counted against the release),
overlay modules against the release (F2), and where a stop points (F5)."""

from __future__ import annotations

from pathlib import Path

from conftest import copy_project, run_cli
from test_rebase import (  # noqa: F401
    SARGS,
    _conflicting_release,
    cache,
    cli,
    make_release,
    pin_source,
    pin_text,
    project,
    tree_is_pristine,
)

COMMON = "python/sglang/srt/utils/common.py"


def test_check_names_the_file_line_and_undefined_name(tmp_path, sglang_tree):
    proj = copy_project(tmp_path / "proj")
    args = ("--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree))
    data = (sglang_tree / COMMON).read_bytes()
    lines = data.count(b"\n")
    (sglang_tree / COMMON).write_bytes(data + b"\n\ndef local_helper():\n    return get_moe_runner_backend()\n")
    run_cli(*args, "import", check_rc=0)
    res = run_cli(*args, "check", check_rc=1)
    said = f"{COMMON}:{lines + 4}: undefined name `get_moe_runner_backend`"
    assert said in res.stdout + res.stderr, res.stdout + res.stderr
    # the release's own undefined names (string annotations, star imports) are not the patch's: a clean edit passes
    (sglang_tree / COMMON).write_bytes(data + b"\n\ndef local_helper():\n    return os.getpid()\n")
    run_cli(*args, "refresh", "common", check_rc=0)
    run_cli(*args, "check", check_rc=0)


def test_continue_refuses_a_resolution_that_uses_undefined_names(tmp_path, cache, pin_source):
    _conflicting_release(cache, pin_source, "9.0.2")
    proj = project(tmp_path)
    cli(proj, cache, "rebase", "9.0.2", rc=1)
    tree_file = proj / ".sglang" / "sglang-9.0.2" / SARGS
    text = tree_file.read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>> patched")) + 1
    # compiles, but `ret` and the backend getter exist nowhere in the release's server_args.py
    tree_file.write_text(text[:start] + "    ret = get_moe_runner_backend()\n    return ret\n" + text[end:])
    line = text[:start].count("\n") + 1
    res = cli(proj, cache, "rebase", "--continue", rc=1)
    assert f"line {line}: `get_moe_runner_backend`" in res.stderr, res.stderr
    assert "`ret`" not in res.stderr  # defined on the line before: not reported
    assert not (proj / "pins" / "9.0.2").exists()
    tree_file.write_text(
        text[:start] + "    # upstream wrote something else here\n    # fixture b: resolved\n" + text[end:]
    )
    cli(proj, cache, "rebase", "--continue", rc=0)
    assert tree_is_pristine(proj, "9.0.2")


def _take_patched_side(path: Path) -> None:
    """The F3 resolution: every conflict region resolved to the patch's side, as a hurried user would."""
    out, side = [], None
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith(("<<<<<<< ", "||||||| ")):
            side = "other"
        elif line.rstrip("\n") == "=======":
            side = "ours"
        elif line.startswith(">>>>>>> "):
            side = None
        elif side in (None, "ours"):
            out.append(line)
    path.write_text("".join(out))


def test_replayed_rebase_to_0523_stops_at_oea_and_refuses_the_f3_resolution(tmp_path):
    """The real 0.5.23 wheel (from the release cache, fetched there where missing): the stops before oea_topk are
    skipped, mla_kv_step.py's review is said at flashinfer_mla's, oea_topk's stop names oea.py and what its
    callers changed, and the patched-side resolution is refused for the names it leaves undefined."""
    proj = copy_project(tmp_path / "proj")
    said = [run_cli("rebase", "0.5.23", cwd=proj, check_rc=1).stdout]
    while "oea_topk: conflict on sglang 0.5.23" not in said[-1] and len(said) < 8:
        said.append(run_cli("rebase", "--skip", "--reason", "test", cwd=proj, check_rc=1).stdout)
    stop = said[-1]
    assert "oea_topk: conflict on sglang 0.5.23" in stop, said
    assert "overlay review: oea.py: " in stop
    assert (
        "oea.py: its caller topk.py's `select_experts` changed its parameters in sglang 0.5.23: +dynamic_expert_bias"
        in stop
    )
    assert any("overlay review: mla_kv_step.py" in s for s in said), said
    # the pointer: the hunk holding the markers, and where upstream moved get_internal_state's code
    assert "scheduler.py hunk #1 @@ -4203,6 +4203,14 @@ in `Scheduler.get_internal_state`" in stop
    assert "scheduler_components/internal_state.py" in stop
    tree = proj / ".sglang" / "sglang-0.5.23"
    marked = [p for p in (tree / "python/sglang").rglob("*.py") if "\n<<<<<<< " in p.read_text()]
    assert marked
    for p in marked:
        _take_patched_side(p)
    err = run_cli("rebase", "--continue", cwd=proj, check_rc=1).stderr
    assert "topk.py: the resolution uses names sglang 0.5.23's file does not define" in err, err
    assert "`get_moe_a2a_backend`" in err
    run_cli("rebase", "--abort", cwd=proj, check_rc=0)


def test_a_merge_the_tool_made_that_leaves_a_name_undefined_stops(tmp_path, cache, pin_source):
    """The patch applies as it is (an offset), but the name its line calls is gone from the release's file."""
    topk = "python/sglang/srt/layers/moe/topk.py"
    src = pin_text(pin_source, topk)
    assert src.count("    get_compiler_backend,\n") == 1
    gone = src.replace("    get_compiler_backend,\n", "").replace(
        "backend=get_compiler_backend()", 'backend="inductor"'
    )
    make_release(cache, pin_source, "9.0.7", **{topk: gone.encode()})
    proj = project(tmp_path)
    patch = proj / "patches" / "fx_topk.patch"
    patch.write_text(
        patch.read_text().replace("+# fixture: marks select_experts", "+_BACKEND = get_compiler_backend()")
    )
    out = cli(proj, cache, "rebase", "9.0.7", rc=1).stdout
    assert "fx_topk: conflict on sglang 9.0.7" in out, out
    assert "names the release does not define: " in out and "undefined name `get_compiler_backend`" in out, out
    tree_file = proj / ".sglang" / "sglang-9.0.7" / topk
    tree_file.write_text(tree_file.read_text().replace("_BACKEND = get_compiler_backend()", '_BACKEND = "inductor"'))
    cli(proj, cache, "rebase", "--continue", rc=0)
    assert '+_BACKEND = "inductor"' in (proj / "pins" / "9.0.7" / "patches" / "fx_topk.patch").read_text()
