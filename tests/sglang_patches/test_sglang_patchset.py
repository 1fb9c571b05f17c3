"""The patch set as a whole: every entry of issue 3 present as what it is, and `apply.py check` green on the pin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

ENTRIES = {
    "kimi_k25": "upstreamed",
    "communicator": "upstreamed",
    "server_args_glm4": "upstreamed",
    "flashinfer_mla_sm120": "upstreamed",
    "deepseek_v2": "diff",
    "llama_eagle3": "diff",
    "flashinfer_mla": "diff",
    "eagle_profiling": "diff",
    "oea_topk": "diff",
    "engine_env_respect": "diff",
    "nccl_env_log": "diff",
}


def test_manifest_entries_and_presets():
    m = yaml.safe_load((ROOT / "manifest.yaml").read_text())
    by_name = {p["name"]: p for p in m["patches"]}
    for name, kind in ENTRIES.items():
        assert by_name[name]["kind"] == kind, name
        if kind == "upstreamed":
            assert by_name[name]["upstream"]["status"] == "upstreamed" and by_name[name]["proof"]
        else:
            header = (ROOT / "patches" / f"{name}.patch").read_text().split("\n---\n")[0]
            for field in ("Description:", "Origin:", "Forwarded:", "Applied-Upstream:", "Last-Update:"):
                assert field in header, (name, field)
    assert by_name["nccl_env_log"]["category"] == "diagnostic" and by_name["nccl_env_log"]["default"] is False
    assert by_name["engine_env_respect"]["default"] is False  # the header says why
    assert by_name["oea_topk"]["env"]["SGLANG_OEA_K0"]["default"] == "0"
    assert by_name["eagle_profiling"]["env"]["SGLANG_EAGLE_PHASE_TIMING"]["default"] == "0"
    applicable = {p["name"] for p in m["patches"] if p["kind"] != "upstreamed"}
    assert set(m["presets"]["full"]) == applicable
    assert set(m["presets"]["default"]) == {p["name"] for p in m["patches"] if p.get("default")}
    assert "NCCL_NVLS_ENABLE=1" not in (ROOT / "manifest.yaml").read_text().replace(" ", "").replace('"', "")


def test_check_on_the_pin_is_green(pristine_sglang_tree):
    """Zero fuzz alone, together, leave-one-out and in any order; byte-compiles; upstreamed proofs hold."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "apply.py"), "check", "--json"], cwd=ROOT, capture_output=True, text=True
    )
    report = json.loads(proc.stdout)
    failed = [i for i in report["items"] if not i["ok"]]
    assert proc.returncode == 0 and report["ok"], failed
    subjects = {i["subject"] for i in report["items"]}
    for name, kind in ENTRIES.items():
        assert (name if kind == "upstreamed" else f"alone: {name}") in subjects, name


def _spans(tree_file: Path) -> dict[str, tuple[int, int]]:
    """Qualified name (Class.method, function) -> (first line, last line) of every def in the file."""
    import ast

    out = {}

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                out[name] = (child.lineno, child.end_lineno)
                walk(child, f"{name}.")

    walk(ast.parse(tree_file.read_text()), "")
    return out


def test_every_proof_line_lies_in_a_symbol_the_proof_names(pristine_sglang_tree):
    """A proof's symbols must be where its quoted lines are (the review found server_args_glm4 naming an
    unrelated method): each `contains` text occurs inside the source of one of the entry's `symbols`."""
    check_proofs_lie_in_their_symbols(ROOT / "manifest.yaml", pristine_sglang_tree)


def check_proofs_lie_in_their_symbols(manifest: Path, pristine_sglang_tree: Path) -> None:
    m = yaml.safe_load(manifest.read_text())
    proofs = {p["name"]: p["proof"] for p in m["patches"] if p["kind"] == "upstreamed"}
    assert {"kimi_k25", "communicator", "server_args_glm4", "flashinfer_mla_sm120"} <= set(proofs)
    for name, proof in proofs.items():
        path = pristine_sglang_tree / proof["file"]
        text = path.read_text()
        spans = _spans(path)
        for line in proof["contains"]:
            starts = [text.count("\n", 0, i) + 1 for i in range(len(text)) if text.startswith(line, i)]
            assert starts, (name, line)
            assert any(a <= s <= b for s in starts for a, b in (spans[sym] for sym in proof["symbols"])), (name, line)


def test_sm120_proof_rests_on_is_sm100_supported_being_major_10(sglang_patched):
    """flashinfer_mla_sm120's proof quotes `if is_sm100_supported(): cutlass`: that excludes SM120 only
    because is_sm100_supported checks compute capability major 10 alone."""
    from sglang.srt.utils import common

    check = common.is_sm100_supported.__wrapped__
    assert check.keywords["device_capability_majors"] == [10]
    assert common.is_sm120_supported.__wrapped__.keywords["device_capability_majors"] == [12]
