"""What keeps `status` fast, and that it changes nothing it shows: the command line imports only the command it
runs, and the manifest's YAML is parsed once per content (a cache keyed by its bytes, safe to lose or tear)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, copy_project, run_cli

from sglang_overlay import commands, parsecache, yamlfile
from sglang_overlay.cli import build_parser
from sglang_overlay.errors import ManifestError
from sglang_overlay.manifest import load_manifest
from sglang_overlay.patchfile import parse_patch_file
from sglang_overlay.pysymbols import defined_names

PROBE = """import sys
from sglang_overlay.cli import main
rc = main(sys.argv[1:])
HEAVY = ("shutil", "subprocess", "tempfile", "difflib", "ctypes", "sglang_overlay.transaction", "sglang_overlay.compose",
         "sglang_overlay.api", "sglang_overlay.patchset")
loaded = sorted(m for m in sys.modules if m.startswith(("sglang_overlay.commands.", "yaml", "zipfile", "unidiff", *HEAVY)))
print("MODULES", " ".join(loaded), file=sys.stderr)
raise SystemExit(rc)
"""


def modules_after(*args: str, env: dict) -> tuple[subprocess.CompletedProcess, set[str]]:
    p = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        check=False,
    )
    line = next(x for x in p.stderr.splitlines() if x.startswith("MODULES"))
    return p, set(line.split()[1:])


def test_status_imports_its_own_command_module_only_and_no_yaml_once_cached(sglang_tree, tmp_path):
    env = {"SGLANG_OVERLAY_CACHE": str(tmp_path / "cache")}
    env["SGLANG_OVERLAY_CUDA_CAPABILITY"] = ""  # as in CI; a machine's own nvidia-smi would be asked otherwise
    first, mods = modules_after("--tree", str(sglang_tree), "status", env=env)
    assert first.returncode == 0, first.stderr
    assert {m for m in mods if m.startswith("sglang_overlay.commands.")} == {"sglang_overlay.commands.status"}
    assert "yaml" in mods  # the cache was empty: parsed, then stored
    again, mods = modules_after("--tree", str(sglang_tree), "status", env=env)
    assert again.stdout == first.stdout
    assert not {m for m in mods if m.startswith("yaml")} and "zipfile" not in mods, mods
    # nor what only writing, composing or a failure's message needs (nor a subprocess: no GPU query here)
    assert not mods & {"shutil", "subprocess", "tempfile", "difflib", "ctypes"}, mods
    assert not mods & {"sglang_overlay.transaction", "sglang_overlay.compose"}, mods
    # nor the rest of the API, nor the set grammar: status reads what api.status reads (treestatus.read)
    assert not mods & {"sglang_overlay.api", "sglang_overlay.patchset"}, mods
    # apply runs apply's module (and _common), not check's or launch's
    _, mods = modules_after("--tree", str(sglang_tree), "apply", "--all", env=env)
    assert {m for m in mods if m.startswith("sglang_overlay.commands.")} == {
        "sglang_overlay.commands.apply",
        "sglang_overlay.commands._common",
    }


def test_every_command_is_listed_with_its_help_and_parses():
    assert len(set(commands.NAMES)) == len(commands.NAMES)
    helptext = build_parser().format_help()
    for name in commands.NAMES:
        module = commands.load(name)
        assert name == module.NAME and module.HELP.split()[0] in helptext
        assert callable(module.run) and callable(module.add_arguments)
    args = build_parser().parse_args(["--tree", "/x", "status", "--json"])
    assert args.json is True and args.tree == "/x" and args._run is commands.load("status").run
    assert run_cli("status", "--help", check_rc=0).stdout.startswith("usage: python apply.py status")
    assert "invalid choice: 'nope'" in run_cli("nope", check_rc=2).stderr


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "parsed" / "manifest"


def test_the_cache_gives_back_what_the_yaml_says(cache, tmp_path):
    proj = copy_project(tmp_path / "p")
    m1 = load_manifest(proj / "manifest.yaml")
    (entry,) = cache.glob("*.json")
    m2 = load_manifest(proj / "manifest.yaml")
    assert m1 == m2 and m1.patches == m2.patches
    assert json.loads(entry.read_text())["data"] == yamlfile.parse(
        proj / "manifest.yaml", (proj / "manifest.yaml").read_text()
    )
    # an edit is a new key: never the old data
    text = (proj / "manifest.yaml").read_text().replace("default: true", "default: false", 1)
    (proj / "manifest.yaml").write_text(text)
    m3 = load_manifest(proj / "manifest.yaml")
    assert [p.default for p in m3.patches] != [p.default for p in m1.patches]
    assert len(list(cache.glob("*.json"))) == 2


def test_a_torn_or_foreign_cache_entry_is_ignored(cache, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\nb: [x, y]\n")
    assert yamlfile.load(path, path.read_text()) == {"a": 1, "b": ["x", "y"]}
    (entry,) = cache.glob("*.json")
    for damaged in (entry.read_text()[:-5], "[]", json.dumps({"format": 0, "data": {"a": 2}}), ""):
        entry.write_text(damaged)
        assert yamlfile.load(path, path.read_text()) == {"a": 1, "b": ["x", "y"]}
    other = json.loads(entry.read_text()) | {"sha256": "0" * 64}  # another text's entry under this name
    entry.write_text(json.dumps(other | {"data": {"a": 3}}))
    assert yamlfile.load(path, path.read_text()) == {"a": 1, "b": ["x", "y"]}


def test_data_json_cannot_hold_is_not_cached(cache, tmp_path):
    path = tmp_path / "m.yaml"
    for text, data in (("when: 2026-12-01\n", {"when": datetime.date(2026, 12, 1)}), ("1: one\n", {1: "one"})):
        path.write_text(text)
        assert yamlfile.load(path, text) == data
        assert yamlfile.load(path, text) == data
    assert not list(cache.glob("*.json"))


def test_an_unwritable_cache_costs_only_the_parse(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", str(blocker))
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\n")
    assert yamlfile.load(path, "a: 1\n") == {"a": 1}
    assert not list(tmp_path.glob("**/.tmp-*"))


def test_errors_are_the_parser_s_and_never_cached(cache, tmp_path):
    path = tmp_path / "m.yaml"
    for text, msg in (("a: 1\na: 2\n", "duplicate key 'a'"), ("a: [\n", "not valid YAML")):
        for _ in range(2):
            with pytest.raises(ManifestError, match=msg):
                yamlfile.load(path, text)
    assert not list(cache.glob("*.json"))


def test_old_entries_are_pruned(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(parsecache, "KEEP", 8)
    path = tmp_path / "m.yaml"
    for i in range(12):
        yamlfile.load(path, f"n: {i}\n")
    assert len(list(cache.glob("*.json"))) == 12  # pruned once a process, not at every entry
    monkeypatch.setattr(parsecache, "_pruned", set())
    torn = cache / ".tmp-killed"
    torn.write_text("{")
    os.utime(torn, (0, 0))
    yamlfile.load(path, "n: last\n")
    assert len(list(cache.glob("*.json"))) == 8 and not torn.exists()
    assert yamlfile.load(path, "n: last\n") == {"n": "last"}


def test_patch_files_parse_once_and_the_same(cache, tmp_path):
    proj = copy_project(tmp_path / "p")
    patches = sorted((proj / "patches").glob("*.patch"))
    fresh = [parse_patch_file(p) for p in patches]
    assert len(list((cache.parent / "patch").glob("*.json"))) == len(patches)
    assert [parse_patch_file(p) for p in patches] == fresh  # from the cache: equal, hunks and all
    broken = proj / "patches" / "broken.patch"
    broken.write_text(patches[0].read_text().replace("diff --git a/", "diff --git ", 1))
    for _ in range(2):
        with pytest.raises(ManifestError, match=r"broken\.patch"):
            parse_patch_file(broken)


def test_a_temp_file_a_killed_writer_left_goes_at_the_next_write(cache, tmp_path, monkeypatch):
    path = tmp_path / "m.yaml"
    yamlfile.load(path, "n: 0\n")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = cache / f".tmp-{int(dead.stdout)}-abc"  # that process has exited: its pid no longer runs
    left.write_text("{")
    writing = cache / f".tmp-{os.getpid()}-def"  # a live writer's, minutes old: kept
    writing.write_text("{")
    monkeypatch.setattr(parsecache, "_pruned", set())
    yamlfile.load(path, "n: 1\n")
    assert not left.exists() and writing.exists()


def test_defined_names_are_the_scan_s_and_kept_per_text(cache):
    text = "class A:\n    def f(self):\n        pass\n\nasync def g():\n    def inner():\n        pass\n"
    assert defined_names(text) == {"A", "A.f", "g", "g.inner"}
    entries = list((cache.parent / "defined-names").glob("*.json"))
    assert len(entries) == 1
    assert defined_names(text) == {"A", "A.f", "g", "g.inner"}  # from the cache
    entries[0].write_text("{")  # torn: scanned again
    assert defined_names(text) == {"A", "A.f", "g", "g.inner"}
    assert defined_names(text + "def h():\n    pass\n") == {"A", "A.f", "g", "g.inner", "h"}  # a changed text


def test_the_gpu_query_finds_nvidia_smi_on_path(sglang_tree, tmp_path):
    """Found by walking $PATH (not shutil.which, whose import `status` no longer pays): a Blackwell GPU
    makes the Hopper-only fixture patch unavailable; with no nvidia-smi the hardware is unknown."""
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "tests" / "fixtures" / "engine", proj)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 12.0\n")
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
    args = ["--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree), "status", "--json"]

    def gated(path: str) -> dict:
        p = subprocess.run(
            [sys.executable, str(ROOT / "apply.py"), *args], env={**env, "PATH": path}, capture_output=True, text=True
        )
        assert p.returncode == 0, p.stderr
        info = json.loads(p.stdout)
        return {"caps": info["cuda_capability"], **next(r for r in info["patches"] if r["name"] == "fx_topk_gated")}

    found = gated(f"{bin_dir}{os.pathsep}{env['PATH']}")
    assert found["caps"] == ["12.0"] and found["state"] == "unavailable" and "12.0" in found["detail"], found
    smi.chmod(0o644)  # not executable: not a program to run
    assert gated(f"{bin_dir}{os.pathsep}{env['PATH']}")["state"] == "not-applied"
