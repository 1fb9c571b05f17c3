"""What `check` and `rebase --continue` refuse beyond byte-compiling (issue 41, F3): a patched file that uses a
name neither it nor the release's file defines (pyflakes' undefined-name check, counted against the release)."""

from __future__ import annotations

from conftest import copy_project, run_cli
from test_rebase import SARGS, _conflicting_release, cache, cli, pin_source, project, tree_is_pristine  # noqa: F401

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
