"""One test per manifest error class: exit code 2, a message naming file, entry and key, and no tree touched."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, each, run_cli

FIX = ROOT / "tests" / "fixtures" / "engine"


@pytest.fixture
def project(tmp_path) -> Path:
    dst = tmp_path / "proj"
    shutil.copytree(FIX, dst)
    return dst


def edit_manifest(project: Path, change) -> Path:
    path = project / "manifest.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def status_fails(project: Path, tree: Path | None = None, rc: int = 2) -> str:
    args = ["--manifest", str(project / "manifest.yaml")]
    if tree is not None:
        args += ["--tree", str(tree)]
    res = run_cli(*args, "status")
    assert res.returncode == rc, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    return res.stderr


def entry(data, name):
    return next(p for p in data["patches"] if p["name"] == name)


CASES = {
    "unknown key": (
        lambda d: entry(d, "fx_topk").update(requiers=["fx_args_a"]),
        ["patches[0] (fx_topk)", "key 'requiers' is not known", "did you mean 'requires'"],
    ),
    "unknown top-level key": (lambda d: d.update(patchez=[]), ["top level", "key 'patchez' is not known"]),
    "wrong type": (
        lambda d: entry(d, "fx_topk").update(default="yes"),
        ["patches[0] (fx_topk).default", "expected true or false, got 'yes'"],
    ),
    "wrong type of list": (
        lambda d: entry(d, "fx_topk").update(requires="fx_args_a"),
        ["patches[0] (fx_topk).requires", "expected a list of strings"],
    ),
    "bad kind": (
        lambda d: entry(d, "fx_topk").update(kind="dif"),
        ["fx_topk).kind", "'dif' is not one of", "did you mean 'diff'"],
    ),
    "missing key": (
        lambda d: entry(d, "fx_topk").pop("category"),
        ["patches[0] (fx_topk)", "key 'category' is missing"],
    ),
    "missing patch file": (
        lambda d: entry(d, "fx_topk").update(file="patches/nope.patch"),
        ["fx_topk).file", "nope.patch does not exist"],
    ),
    "missing overlay file": (
        lambda d: entry(d, "fx_overlay").update(overlay=["python/sglang/srt/none.py"]),
        ["fx_overlay).overlay", "none.py does not exist"],
    ),
    "duplicate name": (
        lambda d: d["patches"].append(dict(entry(d, "fx_topk"))),
        ["patches (fx_topk)", "the name 'fx_topk' is used by 2 entries"],
    ),
    "unknown requirement": (
        lambda d: entry(d, "fx_topk").update(requires=["fx_nothing"]),
        ["patches (fx_topk).requires", "unknown patch 'fx_nothing'"],
    ),
    "requires cycle": (
        lambda d: entry(d, "fx_args_a").update(requires=["fx_common"]),
        ["requires cycle", "fx_common", "fx_args_a"],
    ),
    "conflicting requirements": (
        lambda d: entry(d, "fx_topk").update(requires=["fx_common", "fx_topk_gated"]),
        ["patches (fx_topk)", "its requirements conflict: fx_common conflicts with fx_topk_gated"],
    ),
    "overlay claimed twice": (
        lambda d: entry(d, "fx_topk_gated").update(
            overlay=["python/sglang/srt/fx_hopper_only.py", "python/sglang/srt/fx_overlay_module.py"]
        ),
        ["python/sglang/srt/fx_overlay_module.py is already added by"],
    ),
    "overlay path escapes": (
        lambda d: entry(d, "fx_overlay").update(overlay=["python/sglang/../../etc/passwd"]),
        ["fx_overlay).overlay", "escapes the tree"],
    ),
    "overlay absolute path": (
        lambda d: entry(d, "fx_overlay").update(overlay=["/etc/passwd"]),
        ["fx_overlay).overlay", "is absolute"],
    ),
    "overlay outside package": (
        lambda d: entry(d, "fx_overlay").update(overlay=["setup.py"]),
        ["is outside python/sglang/"],
    ),
    "preset names unknown patch": (
        lambda d: d["presets"].update(default=["fx_topk", "fx_tpok"]),
        ["presets.default", "unknown patch 'fx_tpok'", "did you mean 'fx_topk'"],
    ),
    "preset with a conflict": (
        lambda d: d["presets"].update(bad=["fx_common", "fx_topk_gated"]),
        ["presets.bad", "fx_common conflicts with fx_topk_gated"],
    ),
    "bad schema": (lambda d: d.update(schema=7), ["schema 7 is not supported"]),
    "bad pin hash": (lambda d: d["pin"].update(sha256="abc"), ["pin.sha256", "is not a sha256 hex digest"]),
    "upstreamed without proof": (lambda d: entry(d, "fx_kimi").pop("proof"), ["fx_kimi).proof", "needs a proof"]),
    "proof on a diff entry": (
        lambda d: entry(d, "fx_topk").update(proof={"file": "python/sglang/x.py", "symbols": ["f"]}),
        ["fx_topk).proof", "only upstreamed entries carry a proof"],
    ),
    "overlay on an upstreamed entry": (
        lambda d: entry(d, "fx_kimi").update(overlay=["python/sglang/srt/fx_overlay_module.py"]),
        ["fx_kimi).overlay", "an upstreamed entry adds no files"],
    ),
    "overlay entry without files": (
        lambda d: entry(d, "fx_overlay").update(overlay=[]),
        ["fx_overlay).overlay", "kind overlay needs at least one file"],
    ),
    "proof naming nothing": (
        lambda d: entry(d, "fx_kimi").update(proof={"file": "python/sglang/srt/models/kimi_k25.py"}),
        ["fx_kimi).proof", "it would prove nothing"],
    ),
    "env var name": (
        lambda d: entry(d, "fx_overlay").update(env={"lower": {"help": "x"}}),
        ["is not an environment variable name"],
    ),
    "profile value type": (
        lambda d: d["env_profiles"]["fx_profile"]["vars"]["NCCL_DEBUG"].update(value=[1]),
        ["env_profiles.fx_profile.vars.NCCL_DEBUG.value", "quote the value"],
    ),
    "preset name the grammar splits": (
        lambda d: d["presets"].update({"my-set": ["fx_topk"]}),
        ["presets.my-set", "'my-set' is not a valid name"],
    ),
    "preset name that is a number": (
        lambda d: d["presets"].update({1: ["fx_topk"]}),
        ["presets.1", "not a valid name"],
    ),
    "preset named none": (
        lambda d: d["presets"].update(none=["fx_topk"]),  # `--set none` had applied fx_topk
        ["presets.none", "'none' is reserved", "reads it as the empty set"],
    ),
    "patch named pristine": (
        lambda d: entry(d, "fx_kimi").update(name="pristine"),  # `apply pristine` had been "nothing to do"
        ["patches[6].name", "'pristine' is reserved"],
    ),
    "preset named as a patch": (
        lambda d: d["presets"].update(fx_topk=["fx_args_a"]),  # was refused only when a command named it
        ["presets.fx_topk", "'fx_topk' is also a patch's name"],
    ),
    "pull request number below 1": (
        lambda d: entry(d, "fx_kimi")["upstream"].update(pr=-3),
        ["fx_kimi).upstream.pr", "expected a pull-request number, got -3"],
    ),
    "profile value with a NUL": (
        lambda d: d["env_profiles"]["fx_profile"]["vars"]["NCCL_DEBUG"].update(value="WA\0RN"),  # launch crashed
        ["env_profiles.fx_profile.vars.NCCL_DEBUG.value", "holds a NUL character"],
    ),
    "hardware capability": (
        lambda d: entry(d, "fx_topk_gated").update(hardware={"cuda_capability": [9.0]}),
        ["cuda_capability", "quote capabilities"],
    ),
    # session 7 adversary: each was read as "none" (an empty list where a map is meant), crashed (a NUL), or let
    # git read a tag as an option
    "env that is a list": (lambda d: entry(d, "fx_topk").update(env=[]), ["fx_topk).env", "expected a mapping"]),
    "upstream that is an empty string": (
        lambda d: entry(d, "fx_topk").update(upstream=""),
        ["fx_topk).upstream", "expected a mapping, got str"],
    ),
    "presets that is a list": (lambda d: d.update(presets=[]), ["presets: expected a mapping, got list"]),
    "env profiles that is a list": (lambda d: d.update(env_profiles=[]), ["env_profiles: expected a mapping"]),
    "skipped that is an empty string": (lambda d: d.update(skipped=""), ["skipped: expected a mapping, got str"]),
    "profile vars that is a list": (
        lambda d: d["env_profiles"]["fx_profile"].update(vars=[]),
        ["env_profiles.fx_profile.vars", "expected a mapping"],
    ),
    "capabilities that are an empty string": (
        lambda d: entry(d, "fx_topk_gated").update(hardware={"cuda_capability": ""}),
        ["cuda_capability", "expected a list, got ''"],
    ),
    "empty overlay list on an upstreamed entry": (
        lambda d: entry(d, "fx_kimi").update(overlay={}),
        ["fx_kimi).overlay", "an upstreamed entry adds no files"],
    ),
    "patch file with a NUL": (  # was an internal error (ValueError: embedded null byte)
        lambda d: entry(d, "fx_topk").update(file="patches/fx\0topk.patch"),
        ["patches[0] (fx_topk).file", "holds a control character"],
    ),
    "extends with a NUL": (lambda d: d.update(extends="../a\0b.yaml"), ["extends", "holds a control character"]),
    "pin tag that git reads as an option": (
        lambda d: d["pin"].update(git_tag="--delete"),
        ["pin.git_tag", "'--delete' is not a git tag name"],
    ),
    "pin tag with a NUL": (lambda d: d["pin"].update(git_tag="v0.5\x0017"), ["pin.git_tag", "not a git tag name"]),
    "pin tag too long for a file name": (  # git keeps a tag as the file refs/tags/NAME
        lambda d: d["pin"].update(git_tag="v" * 300),
        ["pin.git_tag", "bytes long; a file name may have at most 255"],
    ),
    "pin version that is a path": (
        lambda d: d["pin"].update(version="../0.5.17", wheel="sglang-../0.5.17-x.whl"),
        ["pin.version", "'../0.5.17' is not a release version"],
    ),
    "two entries with one patch file": (  # `refresh fx_args_b` rewrote fx_args_a's diff
        lambda d: entry(d, "fx_args_b").update(file="patches/fx_args_a.patch"),
        ["patches (fx_args_b).file", "fx_args_a.patch is also the patch file of fx_args_a"],
    ),
    "proof that contains an empty line": (  # '' is in every file: check proved it upstream on any tree
        lambda d: entry(d, "fx_kimi")["proof"].update(contains=[""]),
        ["fx_kimi).proof.contains", "holds an empty entry"],
    ),
    "env profile name that is not a name": (
        lambda d: d["env_profiles"].update({"a b": d["env_profiles"]["fx_profile"]}),
        ["env_profiles.a b", "'a b' is not a valid name"],
    ),
    # a name twice had passed without a word (a merge that kept both sides of a list)
    "requires names a patch twice": (
        lambda d: entry(d, "fx_common").update(requires=["fx_args_a", "fx_args_a"]),
        ["patches[3] (fx_common).requires: names 'fx_args_a' twice", "list 'fx_args_a' once"],
    ),
    "conflicts names a patch twice": (
        lambda d: entry(d, "fx_common").update(conflicts=["fx_topk_gated", "fx_args_b", "fx_topk_gated"]),
        ["patches[3] (fx_common).conflicts: names 'fx_topk_gated' twice"],
    ),
    # it had only been refused as "its requirements conflict", naming neither the list nor the slip
    "requires and conflicts name the same patch": (
        lambda d: entry(d, "fx_common").update(conflicts=["fx_topk_gated", "fx_args_a"]),
        [
            "patches[3] (fx_common).conflicts: names 'fx_args_a', which patches[3] (fx_common).requires names too",
            "drop it from one of the two lists",
        ],
    ),
    # launch sets both itself: the profile's value never reached the server, yet it changed the fingerprint
    "env profile sets PYTHONPATH": (
        lambda d: d["env_profiles"]["fx_profile"]["vars"].update(PYTHONPATH={"value": "/opt/x", "why": "t"}),
        ["env_profiles.fx_profile.vars.PYTHONPATH", "set by launch itself", "export it before launch"],
    ),
    "env profile sets the tool's own variable": (
        lambda d: d["env_profiles"]["fx_profile"]["vars"].update(
            SGLANG_OVERLAY_FINGERPRINT={"value": "pinned", "why": "t"}
        ),
        ["env_profiles.fx_profile.vars.SGLANG_OVERLAY_FINGERPRINT", "set by launch itself"],
    ),
    "preset names a patch twice": (
        lambda d: d["presets"].update(args=["fx_args_a", "fx_args_b", "fx_args_a"]),
        ["presets.args: names 'fx_args_a' twice", "list 'fx_args_a' once"],
    ),
}


def test_manifest_error(tmp_path):
    def check(n: int, change, expected) -> None:
        project = tmp_path / f"case{n}" / "proj"
        shutil.copytree(FIX, project)
        path = edit_manifest(project, change)
        err = status_fails(project)
        assert str(path) in err, err
        for text in expected:
            assert text in err, f"{text!r} not in:\n{err}"

    each(((case, (n, *CASES[case])) for n, case in enumerate(sorted(CASES))), check)


def test_yaml_syntax_error_names_line(project):
    (project / "manifest.yaml").write_text("schema: 1\npin: [unclosed\n")
    err = status_fails(project)
    assert "not valid YAML at line" in err and "manifest.yaml" in err


def test_patch_path_escaping_the_tree_is_rejected(project):
    p = project / "patches" / "fx_topk.patch"
    p.write_text(p.read_text().replace("python/sglang/srt/layers/moe/topk.py", "python/sglang/../../../etc/evil.py"))
    err = status_fails(project)
    assert "fx_topk.patch" in err and "escapes the tree" in err


def test_patch_path_outside_package_is_rejected(project):
    p = project / "patches" / "fx_topk.patch"
    p.write_text(p.read_text().replace("python/sglang/srt/layers/moe/topk.py", "docs/index.md"))
    err = status_fails(project)
    assert "'docs/index.md' is outside python/sglang/" in err


def test_overlay_symlink_is_rejected(project):
    target = project / "overlay/python/sglang/srt/fx_overlay_module.py"
    target.unlink()
    os.symlink("/etc/hostname", target)
    err = status_fails(project)
    assert "is a symbolic link" in err and "fx_overlay_module.py" in err


def test_tree_symlink_out_of_the_tree_is_refused(project, sglang_tree, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    moe = sglang_tree / "python/sglang/srt/layers/moe"
    shutil.copytree(moe, outside / "moe")
    shutil.rmtree(moe)
    os.symlink(outside / "moe", moe)
    res = run_cli("--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree), "apply", "fx_topk")
    assert res.returncode == 2 and "is a symbolic link to" in res.stderr and "outside the tree" in res.stderr
    assert "fixture" not in (outside / "moe" / "topk.py").read_text()


def test_corrupt_patch_file_is_a_clear_error(project):
    p = project / "patches" / "fx_topk.patch"
    text = p.read_text()
    p.write_text(text.replace("@@ -", "@@ -x", 1))
    err = status_fails(project)
    assert "fx_topk.patch" in err and ("corrupt" in err or "no file diffs" in err)


def test_a_patch_without_its_last_newline_is_taken_by_check_and_apply_alike(project, sglang_tree):
    """check appended the missing newline and passed; apply gave git the file as it is ("corrupt patch") and
    failed: CI green for a set users could not apply."""
    p = project / "patches" / "fx_topk.patch"
    p.write_bytes(p.read_bytes().rstrip(b"\n"))
    man = ("--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree))
    run_cli(*man, "check", check_rc=0, env={"SGLANG_OVERLAY_CUDA_CAPABILITY": "9.0"})
    run_cli(*man, "apply", "fx_topk", check_rc=0)
    assert json.loads(run_cli(*man, "status", "--json", check_rc=0).stdout)["drifted_files"] == []


def test_patch_without_description_header(project):
    p = project / "patches" / "fx_topk.patch"
    p.write_text("\n".join(line for line in p.read_text().splitlines() if not line.startswith("Description")) + "\n")
    err = status_fails(project)
    assert "fx_topk.patch: the DEP-3 header has no Description" in err


def test_usage_error_exit_code(project):
    res = run_cli("--manifest", str(project / "manifest.yaml"), "apply")
    assert res.returncode == 2
    res = run_cli("--manifest", str(project / "manifest.yaml"), "frobnicate")
    assert res.returncode == 2 and "invalid choice" in res.stderr


def test_unknown_patch_name_suggests(project, sglang_tree):
    res = run_cli("--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree), "apply", "fx_tpok")
    assert res.returncode == 2 and "no patch named 'fx_tpok' (did you mean 'fx_topk'?)" in res.stderr


def test_every_command_has_help():
    from sglang_overlay import commands

    for module in map(commands.load, commands.NAMES):
        res = run_cli(module.NAME, "--help")
        assert (
            res.returncode == 0 and "usage: python apply.py" in res.stdout and module.__doc__.split()[0] in res.stdout
        )


def test_no_tree_yet_says_how_to_make_one(tmp_path):
    proj = tmp_path / "p"
    shutil.copytree(FIX, proj)
    err = status_fails(proj)
    # the hint repeats the user's --manifest: pasted elsewhere it still makes this project's tree
    assert "no SGLang tree" in err and f"python apply.py --manifest {proj / 'manifest.yaml'} fetch" in err
