"""The one patch-set grammar (sglang_overlay/patchset.py): every form, in the module and through every command
that names a set, and bad input as exit 2 naming the token and the fix. Also: the hardware gate is evaluated in
one place, and the house stays one-way (bench imports the package, never the reverse)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import each, run_cli

from sglang_overlay.errors import EXIT_BAD_INPUT, PatchSetError
from sglang_overlay.manifest import load_manifest
from sglang_overlay.patchset import from_options, resolve

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "engine" / "manifest.yaml"


@pytest.fixture(scope="module")
def m():
    return load_manifest(FIX)


FORMS = [
    ("default", ("fx_topk", "fx_args_a"), "default"),
    ("fx_args_b,fx_topk", ("fx_topk", "fx_args_b"), None),  # manifest order
    ("fx_common", ("fx_args_a", "fx_common"), None),  # closed over requires
    ("default-fx_topk", ("fx_args_a",), None),
    ("default-fx_topk-fx_args_a", (), None),
    ("default+fx_overlay", ("fx_topk", "fx_args_a", "fx_overlay"), None),
    ("default+fx_overlay,fx_args_b", ("fx_topk", "fx_args_a", "fx_args_b", "fx_overlay"), None),
    ("default+args", ("fx_topk", "fx_args_a", "fx_args_b"), None),  # a preset as a term
    ("default+args-fx_topk", ("fx_args_a", "fx_args_b"), None),
    ("none", (), None),
    ("pristine", (), None),
    (" default ", ("fx_topk", "fx_args_a"), "default"),
]


def test_every_form_resolves(m):
    def check(expr, patches, preset) -> None:
        got = resolve(m, expr)
        assert got.patches == patches and got.preset == preset
        flags = ["--set", preset] if preset else ["--patches", ",".join(patches)] if patches else ["--set", "none"]
        assert got.launch_flags() == flags

    each(((repr(c[0]), c) for c in FORMS), check)


BAD_EXPRESSIONS = [
    ("defualt", "'defualt' is neither a patch nor a preset", "did you mean 'default'?"),
    ("default+fx_tpok", "'fx_tpok' is neither a patch nor a preset", "did you mean 'fx_topk'?"),
    ("+fx_topk", "cannot parse it", "write PRESET, a,b, PRESET+x, PRESET-x or none"),
    ("default-", "cannot parse it", "write PRESET"),
    ("fx_topk,,fx_args_a", "an empty name", "write PRESET"),
    ("", "the set is empty", "none: the pristine tree"),
    ("default-fx_overlay", "cannot take out fx_overlay: not in the set so far", "take out only"),
    (
        "fx_common,fx_args_a-fx_args_a",
        "fx_args_a cannot be left out: it is required by fx_common",
        "take out fx_common too",
    ),
    ("fx_common,fx_topk_gated", "fx_common conflicts with fx_topk_gated", ""),
]


def test_bad_expressions_name_the_token_and_the_fix(m):
    def check(expr, token, fix) -> None:
        with pytest.raises(PatchSetError) as e:
            resolve(m, expr)
        assert token in str(e.value) and fix in (e.value.hint or "") + str(e.value)
        assert e.value.exit_code == EXIT_BAD_INPUT

    each(((repr(c[0]), c) for c in BAD_EXPRESSIONS), check)


def test_a_name_taken_out_then_named_again_is_in(m):
    """`-x` then `+x`: x is in, and nothing is refused for it (the refusal named no requirer and no fix)."""
    assert resolve(m, "fx_common,fx_args_a-fx_args_a+fx_args_a").patches == ("fx_args_a", "fx_common")


def test_apply_set_refuses_what_it_would_put_back(sglang_tree):
    """`apply --set E` closes the set after resolving it: a required patch E takes out would come back
    quietly, while launch and fingerprint refuse E. Refused the same way, and the tree unchanged."""
    tree = ("--tree", str(sglang_tree))
    for cmd in (("fingerprint",), ("launch", "--dry-run"), ("apply",)):
        res = _cli(*tree, *cmd, "--set", "fx_common,fx_args_a-fx_args_a", rc=2)
        assert "fx_args_a cannot be left out: it is required by fx_common" in res.stderr, (cmd, res.stderr)
    assert json.loads(_cli(*tree, "status", "--json", rc=0).stdout)["applied"] == []


def test_command_line_forms(m):
    assert from_options(m, verb="x") is None
    assert from_options(m, names=["fx_topk,fx_args_b"], verb="apply", close=False).patches == ("fx_topk", "fx_args_b")
    assert from_options(m, names=["fx_common"], verb="apply", close=False).patches == ("fx_common",)
    assert from_options(m, all=True, verb="apply", close=False).patches == m.names
    assert from_options(m, patches="fx_args_b,fx_topk", verb="launch").patches == ("fx_topk", "fx_args_b")
    assert from_options(m, preset="none", verb="launch").patches == ()  # the bench's empty arm (launch_flags)
    assert from_options(m, preset="default-fx_topk", verb="launch").patches == ("fx_args_a",)
    with pytest.raises(PatchSetError, match="--all and --set both name a set"):
        from_options(m, all=True, preset="default", verb="apply")
    with pytest.raises(PatchSetError, match="'default' is not a patch name") as e:
        from_options(m, patches="default", verb="launch")
    assert "--set" in e.value.hint


# -- through the commands: the same forms everywhere, bad input exit 2 before anything is touched ---------------
def _cli(*args, rc):
    return run_cli("--manifest", str(FIX), *args, check_rc=rc)


@pytest.mark.parametrize("flag", ["--set", "--patches"])
def test_fingerprint_takes_the_grammar(flag):
    expr = "default-fx_topk" if flag == "--set" else "fx_args_a"
    out = json.loads(_cli("fingerprint", flag, expr, "--json", rc=0).stdout)
    assert out["patches"] == ["fx_args_a"]


BAD_SELECTIONS = [
    (
        ["apply", "--set", "default+fx_tpok"],
        "--set default+fx_tpok: 'fx_tpok' is neither",
        "did you mean 'fx_topk'",
    ),
    (
        ["apply", "default"],
        "apply default: 'default' is not a patch name",
        "a preset or an expression goes to --set",
    ),
    (["apply", "fx_topk", "--all"], "apply: NAME and --all both name a set", "one of NAME..., --all"),
    (["apply", "fx_topk,,fx_args_a"], "holds an empty patch name", "name the patches"),
    (["revert"], "revert: name patches, or give one of --all", "revert deepseek_v2"),
    (["launch", "--dry-run", "--set", "+x"], "--set '+x': cannot parse it", "write PRESET, a,b"),
    (["launch", "--dry-run", "--set", "default", "--patches", "fx_topk"], "--set and --patches both", "one of"),
    (
        ["build-wheel", "--patches", "fx_args_a,bogus"],
        "--patches fx_args_a,bogus: no patch named 'bogus'",
        "patches: fx_topk",
    ),
    (["fingerprint", "--set", "default-fx_overlay"], "cannot take out fx_overlay", "take out only"),
]


def test_bad_selection_on_every_command_is_exit_2():
    def check(args, token, fix) -> None:
        res = _cli(*args, rc=2)
        assert token in res.stderr and fix in res.stderr and "Traceback" not in res.stderr, res.stderr

    each(((repr(c[0]), c) for c in BAD_SELECTIONS), check)


# one option parser for every command: one command with each spelling of empty (build-wheel and launch: the same)
@pytest.mark.parametrize(("cmd", "empty"), [(["apply"], ""), (["fingerprint"], " ")])
def test_an_empty_patches_is_refused_like_an_empty_set(cmd, empty):
    """`--patches "$P"` with P unset is a shell mistake, not a request for the pristine tree: refused as
    `--set ""` is, naming what to write for the empty set instead."""
    res = _cli(*cmd, "--patches", empty, rc=2)
    assert "--patches: the list is empty (an unset shell variable?)" in res.stderr, res.stderr
    assert "--set none" in res.stderr and "Traceback" not in res.stderr, res.stderr
    if cmd == ["apply"]:
        assert "revert --all" in res.stderr, res.stderr


def test_apply_empty_patches_leaves_the_tree_alone(sglang_tree):
    """It used to revert every patch the tree carried."""
    tree = ("--tree", str(sglang_tree))
    _cli(*tree, "apply", "--set", "default", rc=0)
    res = _cli(*tree, "apply", "--patches", "", rc=2)
    assert "revert --all" in res.stderr, res.stderr
    assert json.loads(_cli(*tree, "status", "--json", rc=0).stdout)["applied"] == ["fx_topk", "fx_args_a"]


def test_the_empty_set_launches_without_an_empty_patches(sglang_tree):
    """The bench passes launch_flags() of its arms; an empty arm must not need the refused `--patches ''`."""
    m = load_manifest(FIX)
    flags = resolve(m, "none").launch_flags()
    assert "" not in flags
    out = _cli("--tree", str(sglang_tree), "launch", "--dry-run", *flags, rc=0).stdout
    assert "SGLANG_OVERLAY_FINGERPRINT=" in out, out


def test_apply_and_launch_take_the_same_expression(sglang_tree):
    tree = ("--tree", str(sglang_tree))
    planned = _cli(*tree, "launch", "--dry-run", "--set", "default-fx_topk", rc=0).stdout
    _cli(*tree, "apply", "--set", "default-fx_topk", rc=0)
    status = json.loads(_cli(*tree, "status", "--json", rc=0).stdout)
    assert status["applied"] == ["fx_args_a"]
    fp = re.search(r"SGLANG_OVERLAY_FINGERPRINT=(\S+)", planned).group(1)
    assert status["fingerprint"] == fp
    _cli(*tree, "apply", "--patches", "fx_topk", rc=0)  # --patches: exactly these
    assert json.loads(_cli(*tree, "status", "--json", rc=0).stdout)["applied"] == ["fx_topk"]


def test_bench_sets_use_the_package_grammar():
    from bench.errors import SetError
    from bench.launcher import Catalog
    from bench.launcher import resolve as bench_resolve

    cat = Catalog.from_manifest(FIX)
    assert bench_resolve(cat, "default-fx_topk") == resolve(cat.manifest, "default-fx_topk")
    with pytest.raises(SetError) as e:
        bench_resolve(cat, "default+fx_tpok")
    assert isinstance(e.value, PatchSetError) and "did you mean 'fx_topk'" in str(e.value)


# -- structure -------------------------------------------------------------------------------------------------
def _sources(folder: str):
    return [(f, f.read_text()) for f in (ROOT / folder).rglob("*.py")]


def test_the_hardware_gate_is_evaluated_in_one_place():
    users = sorted(str(f.relative_to(ROOT)) for f, text in _sources("sglang_overlay") if "gate_fails(" in text)
    assert users == ["sglang_overlay/hardware.py"]


def test_set_options_are_parsed_in_one_module():
    """No command splits --patches or looks up a preset itself: they all go through patchset.py."""
    hand_parsed = [
        str(f.relative_to(ROOT))
        for f, text in _sources("sglang_overlay")
        if re.search(r"patches\.split\(|m\.preset\(|\.preset\(args", text)
    ]
    assert hand_parsed == []


def test_the_house_is_one_way():
    back = [
        str(f.relative_to(ROOT))
        for f, text in _sources("sglang_overlay")
        if re.search(r"^\s*(from|import) bench\b", text, re.M)
    ]
    assert back == []
