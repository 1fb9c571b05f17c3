"""The Python API (sglang_overlay/api.py): frozen results, the package's errors, the CLI as its caller, and the
example of docs/api.md executed as it stands."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_project, each, run_cli, tree_snapshot

from sglang_overlay import api
from sglang_overlay.errors import EXIT_BAD_INPUT, BadInput, OverlayError, PatchSetError
from sglang_overlay.record import FrozenError

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "engine"


def test_docs_example_runs_as_written(tmp_path, sglang_tree):
    block = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(), re.S).group(1)
    project = copy_project(tmp_path / "project")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_")}
    env.update(PYTHONPATH=str(ROOT), SGLANG_OVERLAY_TREE=str(sglang_tree))
    res = subprocess.run([sys.executable, "-c", block], cwd=project, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "pin 0.5.17 carries ()" in out
    assert "applied ('deepseek_v2', 'llama_eagle3', 'flashinfer_mla')" in out
    assert "refused 2 " in out and "no patch named 'deepseek_v3'" in out and "did you mean 'deepseek_v2'" in out
    assert re.search(r"check ok \d+ checks", out), out


def test_results_are_frozen_and_errors_are_the_package_hierarchy(sglang_tree):
    where = dict(project=FIX, tree=sglang_tree)
    res = api.apply(expr="default", **where)
    assert res.carried == ("fx_topk", "fx_args_a") and res.applied == res.carried
    with pytest.raises(FrozenError):
        res.carried = ()  # type: ignore[misc]
    st = api.status(**where)
    with pytest.raises(FrozenError):
        st.patches[0].state = "x"  # type: ignore[misc]
    again = api.apply("fx_topk", **where)
    assert again.notes == ("already applied: fx_topk",) and again.written == ()
    with pytest.raises(OverlayError) as e:
        api.apply("fx_topk", all=True, **where)
    assert e.value.exit_code == EXIT_BAD_INPUT and "api.apply: names and all=True both name a set" in str(e.value)
    with pytest.raises(OverlayError) as e:
        api.status(project=FIX / "patches")  # no manifest there: ProjectNotFound, a BadInput
    assert "there is no" in str(e.value) and e.value.exit_code == EXIT_BAD_INPUT
    flipped = api.toggle("fx_topk", **where)
    assert flipped.reverted == ("fx_topk",) and api.status(**where).applied == ("fx_args_a",)
    assert api.revert(all=True, **where).carried == ()


def test_the_cli_prints_what_the_api_returns(sglang_tree):
    where = dict(project=FIX, tree=sglang_tree)
    api.apply(expr="default", **where)
    cli = json.loads(run_cli("--project", str(FIX), "--tree", str(sglang_tree), "status", "--json", check_rc=0).stdout)
    assert cli == api.status(**where).to_json()
    fp = run_cli("--project", str(FIX), "fingerprint", "--set", "args", check_rc=0).stdout.strip()
    assert fp == api.fingerprint("args", project=FIX).value


def test_check_returns_a_result_rather_than_raising(tmp_path):
    project = tmp_path / "p"
    import shutil

    shutil.copytree(FIX, project)
    patch = project / "patches" / "fx_topk.patch"
    patch.write_text(patch.read_text().replace(" def select_experts(", " def select_expertz("))
    rep = api.check(project=project)
    assert not rep.ok and any("fx_topk does not apply cleanly" in i.detail for i in rep.failures)
    assert rep.to_json()["failures"] == len(rep.failures) > 0


def test_the_api_takes_no_argparse_namespace():
    import ast

    tree = ast.parse((ROOT / "sglang_overlay" / "api.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
    }
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert not {"print", "Namespace", "exit"} & names and "argparse" not in imported


# A wrong type is a usage error naming the argument, caught where it comes in: before, a list of names was a
# TypeError from str.join, patches=[...] an AttributeError from .strip(), manifest=5 the manifest "5", and
# all="no" (truthy) applied every patch.
WRONG_TYPES = [
    ("locate", (5,), {}, "project=", "a path"),
    ("locate", (b"tests/fixtures/engine",), {}, "project=", "os.fsdecode"),
    ("locate", (), {"manifest": 5}, "manifest=", "a path"),
    ("locate", (FIX,), {"tree": 5}, "tree=", "a path"),
    ("status", (), {"tree": ["t"]}, "tree=", "a path"),
    ("status", (), {"context": "ctx"}, "context=", "api.locate"),
    ("check", (), {"project": None, "manifest": 5}, "manifest=", "a path"),
    ("apply", (["fx_topk", "fx_args_a"],), {}, "names", "api.apply('fx_topk', 'fx_args_a')"),
    ("apply", (None,), {}, "names", "api.apply('deepseek_v2')"),
    ("apply", (), {"patches": ["fx_topk", "fx_args_a"]}, "patches=", "patches='fx_topk,fx_args_a'"),
    ("apply", (), {"expr": 5}, "expr=", "expr='default'"),
    ("apply", (), {"all": "no"}, "all=", "True or False"),
    ("apply", ("fx_topk",), {"force": None}, "force=", "True or False"),
    ("apply", ("fx_topk",), {"ignore_hardware": 1}, "ignore_hardware=", "True or False"),
    ("revert", (("fx_topk",),), {}, "names", "api.revert('fx_topk')"),
    ("revert", (), {"all": "yes"}, "all=", "True or False"),
    ("toggle", (["fx_topk"],), {}, "name", "one patch name"),
    ("toggle", (None,), {}, "name", "one patch name"),
    ("fingerprint", (5,), {}, "expr=", "expr='default'"),
    ("fingerprint", (), {"patches": ("fx_topk",)}, "patches=", "patches='fx_topk'"),
    ("fingerprint", ("default",), {"env_profile": 5}, "env_profile=", "a str"),
]


def test_a_wrong_argument_type_is_a_usage_error_naming_it(sglang_tree):
    before = tree_snapshot(sglang_tree)

    def check(fn, args, kwargs, arg, fix) -> None:
        where = {} if fn == "locate" or "context" in kwargs else {"project": FIX}
        if fn not in ("locate", "check") and "tree" not in kwargs and "context" not in kwargs:
            where["tree"] = sglang_tree
        with pytest.raises(BadInput) as e:
            getattr(api, fn)(*args, **{**where, **kwargs})
        text = f"{e.value}\n{e.value.hint}"
        assert e.value.exit_code == EXIT_BAD_INPUT and f"api.{fn}" in text and arg in text and fix in text, text
        assert tree_snapshot(sglang_tree) == before

    each(((f"{c[0]}-{c[3]}-{i}", c) for i, c in enumerate(WRONG_TYPES)), check)


def test_locate_holds_absolute_paths_that_survive_a_chdir(tmp_path, sglang_tree, monkeypatch):
    link = tmp_path / "linked-project"
    link.symlink_to(FIX)
    monkeypatch.chdir(tmp_path)
    by_dir = api.locate("linked-project", tree=os.path.relpath(sglang_tree))
    by_file = api.locate(manifest=Path("linked-project") / "manifest.yaml")
    monkeypatch.setenv("SGLANG_OVERLAY_MANIFEST", "linked-project/manifest.yaml")
    by_env = api.locate()
    monkeypatch.setenv("HOME", str(sglang_tree.parent))
    by_home = api.locate("linked-project", tree=f"~/{sglang_tree.name}")
    # made absolute as typed, not resolved: the link stays the path asked for (load_manifest resolves it later)
    for ctx in (by_dir, by_file, by_env):
        assert ctx.manifest_path == link / "manifest.yaml", ctx
    assert by_dir.tree_arg == os.path.join(tmp_path, os.path.relpath(sglang_tree)) and by_dir.tree_arg[0] == "/"
    assert by_home.tree_arg == str(sglang_tree)
    monkeypatch.chdir(sglang_tree / "python")  # a caller that moves on: nothing relative is left to break
    assert api.status(context=by_dir).tree_path == str(sglang_tree.resolve())
    assert api.status(context=by_home).tree_path == str(sglang_tree.resolve())
    assert api.fingerprint("default", context=by_env).patches == ("fx_topk", "fx_args_a")


def test_status_patch_of_an_unknown_name_says_which_and_lists_the_known(sglang_tree):
    st = api.status(project=FIX, tree=sglang_tree)
    assert st.patch("fx_topk").name == "fx_topk"
    with pytest.raises(PatchSetError) as e:  # was a bare StopIteration from next() over the rows
        st.patch("fx_topc")
    assert "no patch named 'fx_topc'" in str(e.value) and "did you mean 'fx_topk'" in str(e.value)
    assert e.value.hint is not None and all(p.name in e.value.hint for p in st.patches)
    assert e.value.exit_code == EXIT_BAD_INPUT
    with pytest.raises(BadInput) as e:
        st.patch(["fx_topk"])  # type: ignore[arg-type]
    assert "api.Status.patch: name= takes a str" in str(e.value)


def test_context_with_project_manifest_or_tree_is_refused_not_half_ignored(sglang_tree, tmp_path):
    ctx = api.locate(FIX, tree=sglang_tree)
    other = tmp_path / "other-tree"
    for extra in ({"tree": other}, {"project": FIX}, {"manifest": FIX / "manifest.yaml"}):
        with pytest.raises(BadInput) as e:  # was: context= won, and apply wrote to its tree, not to tree=
            api.apply("fx_topk", context=ctx, **extra)
        assert "api.apply: context= and " in str(e.value) and f"{next(iter(extra))}=" in str(e.value)
    assert api.status(context=ctx).applied == ()


def test_locate_takes_a_manifest_given_as_a_dir_entry():
    """A PathLike that is not a Path: its str() is a repr, its os.fspath the path."""
    (entry,) = [e for e in os.scandir(FIX) if e.name == "manifest.yaml"]
    assert api.locate(manifest=entry).manifest_path == Path(entry.path).absolute()


def test_a_relative_tree_from_the_environment_is_the_tree_when_the_context_was_made(tmp_path, sglang_tree, monkeypatch):
    """$SGLANG_OVERLAY_TREE was read at each use, relative to the cwd of the moment: a context kept across a chdir
    lost its tree (or found another one at the same relative path)."""
    monkeypatch.chdir(sglang_tree.parent)
    monkeypatch.setenv("SGLANG_OVERLAY_TREE", sglang_tree.name)
    ctx = api.locate(FIX)
    elsewhere = tmp_path / "elsewhere"
    decoy = elsewhere / sglang_tree.name / "python" / "sglang"  # the same relative path from the new cwd
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("")
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("SGLANG_OVERLAY_TREE")  # read when the context was made, not at each use
    assert api.apply("fx_topk", context=ctx).applied == ("fx_topk",)
    st = api.status(context=ctx)
    assert st.tree_path == str(sglang_tree.resolve()) and st.applied == ("fx_topk",)
    assert not (elsewhere / sglang_tree.name / ".sglang-overlay").exists()


@pytest.mark.parametrize("fn", ["apply", "fingerprint"])
def test_an_empty_patches_list_is_refused_in_the_apis_words(sglang_tree, fn):
    """The refusal spoke of the command line's --patches and --set none to a caller that wrote patches=""."""
    before = tree_snapshot(sglang_tree)
    with pytest.raises(PatchSetError) as e:
        getattr(api, fn)(patches=" ", project=FIX, tree=sglang_tree)
    text = f"{e.value}\n{e.value.hint}"
    assert f"api.{fn}: patches= is empty" in text and "patches='a,b'" in text and "expr='none'" in text, text
    assert "--" not in text, text
    assert ("api.revert(all=True)" in text) == (fn == "apply"), text
    assert e.value.exit_code == EXIT_BAD_INPUT and tree_snapshot(sglang_tree) == before


BAD_SELECTIONS = [
    (lambda w: api.apply("fx_topk", all=True, **w), "api.apply: names and all=True both name a set", "expr="),
    (lambda w: api.apply(expr="default", patches="fx_topk", **w), "expr= and patches= both name a set", "names"),
    (lambda w: api.apply(**w), "api.apply: name patches, or pass all=True, expr= or patches=", "api.apply("),
    (lambda w: api.revert(**w), "api.revert: name patches, or pass all=True", "api.revert("),
    (
        lambda w: api.apply(expr="default+fx_tpok", **w),
        "api.apply(expr='default+fx_tpok'): 'fx_tpok' is neither",
        "presets: args, default",
    ),
    (lambda w: api.apply(expr="+x", **w), "api.apply(expr='+x'): cannot parse it", "write PRESET, a,b"),
    (lambda w: api.fingerprint("default-fx_overlay", **w), "api.fingerprint(expr='default-fx_overlay'):", "take"),
    (
        lambda w: api.apply(patches="default", **w),
        "api.apply(patches='default'): 'default' is not a patch name",
        "a preset or an expression goes to expr=",
    ),
    (
        lambda w: api.fingerprint(patches="fx_args_a,bogus", **w),
        "api.fingerprint(patches='fx_args_a,bogus'): no patch named 'bogus'",
        "patches: fx_topk",
    ),
    (lambda w: api.apply("default", **w), "api.apply('default'): 'default' is not a patch name", "expr="),
    (lambda w: api.revert("fx_topk,", **w), "api.revert('fx_topk,'): holds an empty patch name", "name the"),
]


def test_a_bad_selection_is_refused_in_the_apis_words(sglang_tree):
    """The refusals of the set grammar named the command line's options (--set X:, --patches X:, NAME and --all)
    to a caller that wrote expr=, patches=, names or all=True."""
    before = tree_snapshot(sglang_tree)

    def check(call, said, fix) -> None:
        with pytest.raises(OverlayError) as e:
            call(dict(project=FIX, tree=sglang_tree))
        text = f"{e.value}\n{e.value.hint}"
        assert said in str(e.value) and fix in (e.value.hint or ""), text
        assert "--" not in text and e.value.exit_code == EXIT_BAD_INPUT and tree_snapshot(sglang_tree) == before, text

    each(((c[1][:40], c) for c in BAD_SELECTIONS), check)


def test_a_revert_a_carried_patch_needs_names_the_api_call(sglang_tree):
    """The fix for reverting what a carried patch requires was a command line (`sglang-overlay revert ...`)."""
    where = dict(project=FIX, tree=sglang_tree)
    api.apply("fx_common", **where)
    with pytest.raises(BadInput) as e:
        api.revert("fx_args_a", **where)
    assert "cannot revert fx_args_a: fx_common requires it" in str(e.value), e.value
    assert e.value.hint == "revert fx_common too: api.revert('fx_common', 'fx_args_a')", e.value.hint


def test_an_empty_env_profile_is_refused_in_the_apis_words():
    """It was refused as the command line's `--env-profile is empty ... or leave --env-profile out`."""
    with pytest.raises(OverlayError) as e:
        api.fingerprint("none", env_profile=" ", project=FIX)
    text = f"{e.value}\n{e.value.hint}"
    assert "api.fingerprint: env_profile= is empty" in str(e.value) and "fx_profile" in e.value.hint, text
    assert "env_profile=None" in e.value.hint and "--" not in text and e.value.exit_code == EXIT_BAD_INPUT, text


def test_a_tree_variable_whose_tilde_cannot_be_expanded_stops_only_what_needs_the_tree(sglang_tree, monkeypatch):
    """`~nosuchuser/...` (or `~/` with no home): made absolute at every call, it crashed commands that need no tree
    (fingerprint, check) with an internal error; a command that needs the tree says which variable to fix."""
    monkeypatch.setenv("SGLANG_OVERLAY_TREE", "~nosuchuser-sglang-overlay/tree")
    assert len(api.fingerprint(project=FIX, expr="none").short) == 12
    with pytest.raises(OverlayError) as e:
        api.status(project=FIX)
    assert "SGLANG_OVERLAY_TREE" in str(e.value) and "~nosuchuser-sglang-overlay/tree" in str(e.value), e.value
    assert e.value.exit_code == EXIT_BAD_INPUT
    res = run_cli("--project", str(FIX), "status", env={"SGLANG_OVERLAY_TREE": "~nosuchuser-sglang-overlay/tree"})
    assert res.returncode == EXIT_BAD_INPUT and "SGLANG_OVERLAY_TREE" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr


# Where the project and the tree are, in the caller's words: a caller of api.* that passed project=, manifest= or
# tree= was told of --project, --manifest and --tree, options it never typed. The command line keeps its wording.
# (kwargs, the API's message, the API's hint, the command line's arguments, what its stderr says)
WHERE = [
    (
        {"project": ""},
        "api.status: project= is empty",
        "or leave project= out",
        ["--project", ""],
        "--project is empty",
    ),
    (
        {"manifest": ""},
        "api.status: manifest= is empty",
        "or leave manifest= out",
        ["--manifest", ""],
        "--manifest is empty",
    ),
    (
        {"project": FIX / "patches"},
        f"api.status: project={str(FIX / 'patches')!r}: there is no",
        "pass the directory that holds",
        ["--project", str(FIX / "patches")],
        f"--project {FIX / 'patches'}: there is no",
    ),
    (
        {"manifest": "{tmp}/nowhere.yaml"},
        "nowhere.yaml: manifest not found",
        "pass manifest= the path of a manifest.yaml, or project=",
        ["--manifest", "{tmp}/nowhere.yaml"],
        "pass --manifest PATH or run from the project root",
    ),
    # the command line's apply.py falls back to its own project: no run of it finds no manifest
    ({}, "no manifest.yaml in", "pass project= (or manifest=", None, None),
    ({"tree": ""}, "api.status: tree= is empty", "or leave tree= out", ["--tree", ""], "--tree is empty"),
    ({"tree": "{tmp}/missing"}, "no such directory (from tree=)", "", ["--tree", "{tmp}/missing"], "(from --tree)"),
    (
        {"tree": "{tmp}"},
        "not an SGLang tree",
        "pass tree= pointing at the repository root",
        ["--tree", "{tmp}"],
        "pass --tree pointing at the repository root",
    ),
    (
        {"tree": "{sglang}/python"},
        "is the python/ directory of the checkout",
        "pass tree='{sglang}'",
        ["--tree", "{sglang}/python"],
        "pass --tree {sglang}",
    ),
]


@pytest.mark.parametrize(("kwargs", "said", "hint", "cli", "cli_said"), WHERE, ids=[w[1][:30] for w in WHERE])
def test_where_to_work_is_refused_in_the_apis_words_and_the_cli_keeps_its_options(
    sglang_tree, tmp_path, monkeypatch, kwargs, said, hint, cli, cli_said
):
    def fill(v):
        return v.replace("{tmp}", str(tmp_path)).replace("{sglang}", str(sglang_tree)) if isinstance(v, str) else v

    monkeypatch.chdir(tmp_path)  # no manifest.yaml here or above: the project is found only from the arguments
    monkeypatch.delenv("SGLANG_OVERLAY_MANIFEST", raising=False)
    kwargs = {k: fill(v) for k, v in kwargs.items()}
    where = {k: v for k, v in (("project", FIX), ("tree", sglang_tree)) if k not in kwargs and "manifest" not in kwargs}
    if not kwargs:
        where = {}
    with pytest.raises(OverlayError) as e:
        api.status(**{**where, **kwargs})
    text = f"{e.value}\n{e.value.hint}"
    assert fill(said) in str(e.value) and fill(hint) in (e.value.hint or ""), text
    assert "--" not in text and e.value.exit_code == EXIT_BAD_INPUT, text
    if cli is None:
        return
    argv = [a for k, v in where.items() for a in (f"--{k}", str(v))]
    res = run_cli(*argv, *map(fill, cli), "status", cwd=tmp_path, env={"SGLANG_OVERLAY_MANIFEST": ""}, check_rc=2)
    assert fill(cli_said) in res.stderr, res.stderr


def test_a_tree_carrying_an_entry_the_manifest_lost_names_api_revert(sglang_tree, tmp_path):
    """check_carried's way out was the command line's `sglang-overlay revert --all`."""
    project = tmp_path / "project"
    shutil.copytree(FIX, project)
    api.apply("fx_topk", project=project, tree=sglang_tree)
    m = project / "manifest.yaml"
    m.write_text(m.read_text().replace("fx_topk", "fx_topq"))
    (project / "patches" / "fx_topk.patch").rename(project / "patches" / "fx_topq.patch")
    with pytest.raises(OverlayError) as e:
        api.apply("fx_args_a", project=project, tree=sglang_tree)
    text = f"{e.value}\n{e.value.hint}"
    assert "the tree carries fx_topk, which" in str(e.value), text
    assert (e.value.hint or "").startswith("api.revert(all=True) takes the tree back") and "--" not in text, text
    res = run_cli("--project", str(project), "--tree", str(sglang_tree), "apply", "fx_args_a", check_rc=2)
    assert "revert --all` takes the tree back" in res.stderr, res.stderr


def test_a_hardware_gate_and_a_hand_edit_name_the_apis_override(sglang_tree, monkeypatch):
    """--ignore-hardware and --force are ignore_hardware=True and force=True to a caller of api.apply."""
    from sglang_overlay import hardware
    from sglang_overlay.errors import Drift

    where = dict(project=FIX, tree=sglang_tree)
    monkeypatch.setenv("SGLANG_OVERLAY_CUDA_CAPABILITY", "8.0")
    hardware.capabilities.cache_clear()
    try:
        with pytest.raises(BadInput) as e:
            api.apply("fx_topk_gated", **where)
        res = run_cli("--project", str(FIX), "--tree", str(sglang_tree), "apply", "fx_topk_gated", check_rc=2)
    finally:
        hardware.capabilities.cache_clear()
    assert e.value.hint == "leave it off on this machine, or pass ignore_hardware=True", e.value.hint
    assert "or pass --ignore-hardware" in res.stderr, res.stderr
    api.apply("fx_topk", **where)
    topk = sglang_tree / "python" / "sglang" / "srt" / "layers" / "moe" / "topk.py"
    topk.write_text(topk.read_text() + "# by hand\n")
    with pytest.raises(Drift) as d:
        api.revert("fx_topk", **where)
    assert "or pass force=True (the edited files are saved to a backup first)" in (d.value.hint or ""), d.value.hint
    assert "--" not in f"{d.value}\n{d.value.hint}"
    res = run_cli("--project", str(FIX), "--tree", str(sglang_tree), "revert", "fx_topk", check_rc=1)
    assert "or pass --force (the edited files are saved to a backup first)" in res.stderr, res.stderr


def test_a_hand_edit_of_the_identity_module_names_api_revert(sglang_tree):
    from sglang_overlay.errors import Drift
    from sglang_overlay.repopath import IDENTITY_PATH

    where = dict(project=FIX, tree=sglang_tree)
    api.apply("fx_topk", **where)
    identity = sglang_tree / IDENTITY_PATH
    identity.write_text(identity.read_text() + "# reformatted\n")
    with pytest.raises(Drift) as d:
        api.apply(expr="none", **where)
    assert "api.revert(all=True, force=True) (it is saved to a backup first)" in (d.value.hint or ""), d.value.hint
    assert "--" not in f"{d.value}\n{d.value.hint}"


def test_a_read_only_tree_names_the_apis_tree_argument(sglang_tree, monkeypatch):
    """The fix for a read-only or full file system was to work on a writable copy with the CLI's `--tree DIR`."""
    from sglang_overlay import transaction
    from sglang_overlay.errors import OSFailure

    before = tree_snapshot(sglang_tree)
    monkeypatch.setattr(transaction.os, "access", lambda *a, **k: False)
    monkeypatch.setattr(transaction, "_read_only", lambda d: True)
    with pytest.raises(OSFailure) as e:
        api.apply("fx_topk", project=FIX, tree=sglang_tree)
    text = f"{e.value}\n{e.value.hint}"
    assert "(EROFS)" in str(e.value) and "work on a writable copy (tree=)" in (e.value.hint or ""), text
    assert "--" not in text and tree_snapshot(sglang_tree) == before, text


def test_a_forced_switch_returns_its_notes_and_writes_nothing_to_stderr(sglang_tree, capfd):
    """switch printed `sglang-overlay: --force: saved ...` on the caller's stderr: a library writes there unasked.
    The API returns the notes (SwitchResult.file_notes) in its words; the command line prints them on stderr."""
    where = dict(project=FIX, tree=sglang_tree)
    api.apply("fx_topk", "fx_args_a", **where)
    topk = sglang_tree / "python" / "sglang" / "srt" / "layers" / "moe" / "topk.py"
    topk.write_text(topk.read_text() + "# by hand\n")
    args = sglang_tree / "python" / "sglang" / "srt" / "server_args.py"
    args.unlink()
    capfd.readouterr()
    res = api.revert(all=True, force=True, **where)
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), err
    assert res.backup_dir is not None and res.carried == ()
    saved = f"force=True: saved 1 hand-edited file(s) under {res.backup_dir}"
    gone = "force=True: python/sglang/srt/server_args.py was deleted by hand; nothing to save"
    assert res.file_notes == (saved, gone), res.file_notes
    assert (res.backup_dir / "python/sglang/srt/layers/moe/topk.py").read_text().endswith("# by hand\n")
    api.apply("fx_topk", **where)
    topk.write_text(topk.read_text() + "# by hand\n")
    cli = run_cli("--project", str(FIX), "--tree", str(sglang_tree), "revert", "--all", "--force", check_rc=0)
    assert "sglang-overlay: --force: saved 1 hand-edited file(s) under " in cli.stderr, cli.stderr
    assert "force=True" not in cli.stdout + cli.stderr


def test_a_forced_revert_from_the_record_returns_its_backup_in_file_notes(tmp_path, sglang_tree, capfd):
    """`revert(all=True, force=True)` of a tree no pin of the manifest is for (it reverts from what the tree
    recorded, recorded.py) put its backup and the files found deleted in `.notes`, where no other revert puts them:
    a caller reading `.file_notes` for the backup found nothing. Now they are file notes, in the API's words, and
    the command line prints them as it prints any revert's (on stderr)."""
    proj = tmp_path / "proj"
    shutil.copytree(FIX, proj)
    man = proj / "manifest.yaml"
    pinned = man.read_text()
    where = dict(project=proj, tree=sglang_tree)
    topk = sglang_tree / "python" / "sglang" / "srt" / "layers" / "moe" / "topk.py"
    args = sglang_tree / "python" / "sglang" / "srt" / "server_args.py"
    api.apply("fx_topk", "fx_args_a", **where)
    man.write_text(pinned.replace("0.5.17", "0.5.99"))  # no pin of the tree's release left
    topk.write_text(topk.read_text() + "# by hand\n")
    args.unlink()
    capfd.readouterr()
    res = api.revert(all=True, force=True, **where)
    assert capfd.readouterr() == ("", "")
    assert res.backup_dir is not None and res.carried == () and res.reverted == ("fx_topk", "fx_args_a")
    saved = f"force=True: saved 1 hand-edited file(s) under {res.backup_dir}"
    gone = "force=True: python/sglang/srt/server_args.py was deleted by hand; nothing to save"
    assert res.file_notes == (saved, gone), res
    assert any("reverted from the state it recorded" in n for n in res.notes), res.notes
    assert not any("force" in n for n in res.notes), res.notes
    assert (res.backup_dir / "python/sglang/srt/layers/moe/topk.py").read_text().endswith("# by hand\n")
    man.write_text(pinned)
    api.apply("fx_topk", **where)
    man.write_text(pinned.replace("0.5.17", "0.5.99"))
    topk.write_text(topk.read_text() + "# by hand\n")
    cli = run_cli("--project", str(proj), "--tree", str(sglang_tree), "revert", "--all", "--force", check_rc=0)
    assert "sglang-overlay: --force: saved 1 hand-edited file(s) under " in cli.stderr, cli.stderr
    assert "reverted from the state it recorded" in cli.stdout and "saved" not in cli.stdout, cli.stdout
    assert "force=True" not in cli.stdout + cli.stderr


def test_a_relative_cache_from_the_environment_is_the_cache_when_the_context_was_made(
    tmp_path, sglang_tree, monkeypatch
):
    """$SGLANG_OVERLAY_CACHE was read at each use, relative to the cwd of the moment: after a chdir, a kept context
    kept its parsed manifests in another directory, and check looked there for the pinned wheel (to download it)."""
    from sglang_overlay.cachedir import cache_dir

    wheel = api.locate(FIX).manifest.pin.wheel
    real = cache_dir() / "wheels" / wheel  # the conftest's tree came from it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", "cache")
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    (tmp_path / "cache" / "wheels" / wheel).symlink_to(real)
    ctx = api.locate(FIX, tree=sglang_tree)
    assert not (tmp_path / "cache" / "parsed").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", "other")  # read when the context was made, not at each use
    assert api.status(context=ctx).applied == ()
    assert any((tmp_path / "cache" / "parsed").rglob("*.json"))
    assert not (elsewhere / "cache").exists() and not (elsewhere / "other").exists()
    assert api.check(context=ctx).ok
    assert not (elsewhere / "other").exists() and not (elsewhere / "cache").exists()
    assert cache_dir() == Path("other")  # held for the API's calls only, not left behind for the caller


# -- refusals reached through the API, in its words -----------------------------------------------------------------
def _cli_context(proj: Path, tree: Path):
    """The context the command line makes (commands call the API with it): its refusals keep the CLI's words."""
    from sglang_overlay.context import Context
    from sglang_overlay.spelling import CLI

    return Context(proj / "manifest.yaml", str(tree), tree_env=None, cache_env=None, spelling=CLI)


def _other_release_project(tmp_path: Path, tree: Path, *, pin_too: bool) -> Path:
    """A project that pins 0.5.99 and a 0.5.17 tree that carries fx_topk (applied while it pinned 0.5.17);
    `pin_too`: the 0.5.17 set kept as the project's pin pins/0.5.17/."""
    proj = tmp_path / "proj"
    shutil.copytree(FIX, proj)
    api.apply("fx_topk", project=proj, tree=tree)
    if pin_too:
        shutil.copytree(FIX, proj / "pins" / "0.5.17")
    man = proj / "manifest.yaml"
    man.write_text(man.read_text().replace("0.5.17", "0.5.99"))
    return proj


def test_a_tree_of_another_release_is_refused_in_the_apis_words(tmp_path, sglang_tree):
    """The refusal of a tree no pin of the manifest is for (treepin.py) told an API caller to run `--tree DIR
    revert --all`, `rebase` and `fetch` as the command line's user typed them, with none of that caller's project
    in them. Now: api.revert(all=True, tree=...), and the commands the API has no function for with the project's
    manifest named; the command line's words are as they were."""
    from sglang_overlay.errors import VersionMismatch

    proj = _other_release_project(tmp_path, sglang_tree, pin_too=False)
    man = proj / "manifest.yaml"
    with pytest.raises(VersionMismatch) as e:
        api.apply("fx_args_a", project=proj, tree=sglang_tree)
    hint = e.value.hint or ""
    assert f"api.revert(all=True, tree={str(sglang_tree)!r}) takes out what the tree carries" in hint, hint
    assert f" --manifest {man} rebase 0.5.17` makes one from the 0.5.99 set" in hint, hint
    assert f"use a 0.5.99 tree (`sglang-overlay --manifest {man} fetch` makes one)" in hint, hint
    assert "--tree" not in f"{e.value}\n{hint}"
    res = run_cli("--project", str(proj), "--tree", str(sglang_tree), "apply", "fx_args_a", check_rc=2)
    assert f" --project {proj} --tree {sglang_tree} revert --all` takes out what the tree carries" in res.stderr
    assert f" --project {proj} rebase 0.5.17` makes one" in res.stderr and "--manifest" not in res.stderr
    assert "api." not in res.stderr, res.stderr
    assert api.revert(all=True, tree=sglang_tree, project=proj).reverted == ("fx_topk",)  # the way out it names


def test_a_pin_of_the_trees_release_is_named_as_a_command_line_that_works(tmp_path, sglang_tree):
    """The API selects no pin: the pin of the tree's release is named as the command line that uses it, with the
    manifest and the tree an API caller gave (not the command line's `--pin VERSION` alone), and it runs."""
    import shlex

    from sglang_overlay.errors import VersionMismatch

    proj = _other_release_project(tmp_path, sglang_tree, pin_too=True)
    with pytest.raises(VersionMismatch) as e:
        api.status(project=proj, tree=sglang_tree).patch("fx_topk")
        api.apply("fx_args_a", project=proj, tree=sglang_tree)
    hint = e.value.hint or ""
    said = re.search(r"this project has a pin for 0\.5\.17: `([^`]+)` \(and apply, revert, \.\.\.\)", hint)
    assert said is not None and "--tree" not in hint.replace(said.group(1), ""), hint
    words = shlex.split(said.group(1))
    assert words[0] == "sglang-overlay" and words[1:] == [
        "--manifest",
        str(proj / "manifest.yaml"),
        "--pin",
        "0.5.17",
        "--tree",
        str(sglang_tree),
        "status",
    ], words
    res = run_cli(*words[1:], cwd=tmp_path, check_rc=0)
    assert "fx_topk" in res.stdout and "applied" in res.stdout, res.stdout


def test_a_scratch_copy_that_cannot_be_written_names_the_apis_tree_argument(sglang_tree, monkeypatch):
    """git apply failing to write its scratch copy (a read-only file system) had its fix in the command line's
    words, `--tree DIR`, whoever called (compose._raise_if_io)."""
    from sglang_overlay import compose
    from sglang_overlay.errors import OSFailure
    from sglang_overlay.gitcmd import GitResult

    def read_only(*args, cwd):
        return GitResult(args, 1, "", "error: unable to write file topk.py: Read-only file system\n")

    monkeypatch.setattr(compose, "git_outside_repo", read_only)
    with pytest.raises(OSFailure) as e:
        api.apply("fx_topk", project=FIX, tree=sglang_tree)
    assert "work on a writable copy (tree=)" in (e.value.hint or ""), e.value.hint
    assert "--" not in f"{e.value}\n{e.value.hint}"
    with pytest.raises(OSFailure) as e:
        api.apply("fx_topk", context=_cli_context(FIX, sglang_tree))
    assert "work on a writable copy (`--tree DIR`)" in (e.value.hint or ""), e.value.hint


def test_a_failed_rollback_names_what_rolls_it_back_in_the_apis_words(sglang_tree, monkeypatch):
    """A change that stopped, and whose rollback failed too, named `sglang-overlay recover` to an API caller; the
    API's own calls that change the tree roll it back first. Its journal is kept, and they do."""
    from sglang_overlay import transaction
    from sglang_overlay.errors import OSFailure

    def stop(self, *args, **kwargs):
        raise OSError(5, "Input/output error", "topk.py")

    before = tree_snapshot(sglang_tree)
    hints = []
    for context in (dict(project=FIX, tree=sglang_tree), dict(context=_cli_context(FIX, sglang_tree))):
        with monkeypatch.context() as m:
            m.setattr(transaction.Transaction, "_replace", stop)
            m.setattr(transaction.Transaction, "_roll_back", stop)
            with pytest.raises(OSFailure) as e:
                api.apply("fx_topk", **context)
        assert "the journal" in str(e.value) and "rolling it back failed too" in str(e.value), e.value
        hints.append(e.value.hint or "")
        assert api.revert(all=True, project=FIX, tree=sglang_tree).carried == ()  # the journal rolled back first
        assert tree_snapshot(sglang_tree) == before
    said = "once the cause is fixed, the next call that changes the tree (api.apply, api.revert or api.toggle)"
    assert hints[0] == f"{said} rolls it back", hints
    assert hints[1].endswith(" recover` (or any command that changes the tree) rolls it back"), hints
