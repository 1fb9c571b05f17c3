"""`check` on the pin and the radar's classification, on fixture releases made from the real 0.5.17 files."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT, run_cli
from test_rebase import cache, make_release

from sglang_overlay.compat import check_pin, classify, subsets_that_matter
from sglang_overlay.fetch import WheelSource, pinned_wheel
from sglang_overlay.manifest import load_manifest

__all__ = ["cache"]  # a module fixture of test_rebase (its private release cache), used here by name

FIX = ROOT / "tests" / "fixtures" / "engine"
SARGS = "python/sglang/srt/server_args.py"
TOPK = "python/sglang/srt/layers/moe/topk.py"


@pytest.fixture(scope="module")
def pin_source(project_manifest):
    return WheelSource(pinned_wheel(project_manifest.pin))


@pytest.fixture(scope="module")
def fx():
    return load_manifest(FIX / "manifest.yaml")


def release(pin_source, **changes):
    """A fixture 'release': the pinned files with some replaced (bytes) or removed (None)."""

    def read(path):
        if path in changes:
            return changes[path]
        return pin_source.read(path)

    return read


def text(pin_source, path):
    return pin_source.read(path).decode()


def test_check_passes_on_the_pin_and_lists_what_it_checked(fx, pin_source):
    rep = check_pin(fx, pin_source.read, "0.5.17")
    assert rep.ok, [i for i in rep.items if not i.ok]
    subjects = {i.subject for i in rep.items}
    for name in ("fx_topk", "fx_args_a", "fx_args_b", "fx_common", "fx_overlay", "fx_topk_gated"):
        assert f"alone: {name}" in subjects
    # fx_topk_gated conflicts with fx_topk: the full set is the largest allowed set, without it
    assert "full set" in subjects
    assert dict(subsets_that_matter(fx))["full set"] == ("fx_topk", "fx_args_a", "fx_args_b", "fx_common", "fx_overlay")
    assert "pair: fx_args_a+fx_args_b" in subjects and "leave-one-out: -fx_topk" in subjects
    assert any(i.what == "order" and i.subject == "pair: fx_args_a+fx_args_b" and i.ok for i in rep.items)
    assert any(i.what == "upstreamed" and i.subject == "fx_kimi" and i.ok for i in rep.items)


def test_check_fails_loudly_with_every_failure(tmp_path):
    proj = tmp_path / "p"
    shutil.copytree(FIX, proj)
    # Break two patches: exit 1, and both named.
    for name, line in (("fx_topk", "\n def select_experts("), ("fx_args_b", "\n def prepare_server_args(")):
        p = proj / "patches" / f"{name}.patch"
        assert line in p.read_text()
        p.write_text(p.read_text().replace(line, line.replace("def ", "def _broken_")))
    res = run_cli("--manifest", str(proj / "manifest.yaml"), "check")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL alone: fx_topk" in res.stdout and "FAIL alone: fx_args_b" in res.stdout
    data = json.loads(run_cli("--manifest", str(proj / "manifest.yaml"), "check", "--json").stdout)
    assert data["ok"] is False and data["failures"] >= 2


def test_check_json_passes_for_the_fixture():
    res = run_cli("--manifest", str(FIX / "manifest.yaml"), "check", "--json", check_rc=0)
    data = json.loads(res.stdout)
    assert data["ok"] is True and data["failures"] == 0 and data["version"] == "0.5.17"


def test_radar_clean(fx, pin_source):
    v = classify(fx.patch("fx_topk"), release(pin_source), "x", pin_source.read)
    assert v.status == "clean"


def test_radar_offset(fx, pin_source):
    moved = ("# a new header line\n" * 7 + text(pin_source, TOPK)).encode()
    v = classify(fx.patch("fx_topk"), release(pin_source, **{TOPK: moved}), "x", pin_source.read)
    assert v.status == "offset" and v.max_offset == 7 and "+7" in v.detail


def test_radar_needs_3way(fx, pin_source):
    # Upstream changed a line inside the patch's context: zero-fuzz apply fails, a 3-way merge succeeds.
    src = text(pin_source, SARGS).replace(
        "    Prepare the server arguments from the command line arguments.",
        "    Prepare the server arguments from argv (reworded upstream).",
    )
    v = classify(fx.patch("fx_args_b"), release(pin_source, **{SARGS: src.encode()}), "x", pin_source.read)
    assert v.status == "needs-3way", v


def test_radar_conflict_names_hunk_and_symbol_in_both_releases(fx, pin_source):
    src = text(pin_source, SARGS).replace(
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n",
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n    # fixture b: upstream wrote something else\n",
    )
    v = classify(fx.patch("fx_args_b"), release(pin_source, **{SARGS: src.encode()}), "x", pin_source.read)
    assert v.status == "conflict", v
    assert "hunk #1 @@ -9342,6 +9342,7 @@ in `prepare_server_args`" in v.detail
    assert "(pin: lines 9344-" in v.detail and "release: lines 9344-" in v.detail


def test_radar_upstreamed_when_the_change_is_already_there(fx, pin_source):
    src = text(pin_source, SARGS).replace(
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n",
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n    # fixture b: inside prepare_server_args\n",
    )
    v = classify(fx.patch("fx_args_b"), release(pin_source, **{SARGS: src.encode()}), "x", pin_source.read)
    assert v.status == "upstreamed" and "reverse-applies" in v.detail


def test_radar_target_missing(fx, pin_source):
    v = classify(fx.patch("fx_topk"), release(pin_source, **{TOPK: None}), "x", pin_source.read)
    assert v.status == "target-missing" and TOPK in v.detail
    kimi = "python/sglang/srt/models/kimi_k25.py"
    v = classify(fx.patch("fx_kimi"), release(pin_source, **{kimi: None}), "x", pin_source.read)
    assert v.status == "target-missing"


def test_radar_upstreamed_proof_lost(fx, pin_source):
    kimi = "python/sglang/srt/models/kimi_k25.py"
    src = text(pin_source, kimi).replace("def set_eagle3_layers_to_capture", "def set_aux_layers")
    v = classify(fx.patch("fx_kimi"), release(pin_source, **{kimi: src.encode()}), "x", pin_source.read)
    assert (
        v.status == "proof-failed"
        and "KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture` is missing" in v.detail
    )


def test_radar_overlay_now_upstream(fx, pin_source):
    path = "python/sglang/srt/fx_overlay_module.py"
    same = (FIX / "overlay" / path).read_bytes()
    v = classify(fx.patch("fx_overlay"), release(pin_source, **{path: same}), "x", pin_source.read)
    assert v.status == "upstreamed"
    v = classify(fx.patch("fx_overlay"), release(pin_source, **{path: b"other\n"}), "x", pin_source.read)
    assert v.status == "conflict" and "other content" in v.detail


@pytest.mark.parametrize("out", [[], ["--json"], ["--markdown"]], ids=["table", "json", "markdown"])
def test_radar_of_a_manifest_without_patches_says_so(tmp_path, cache, pin_source, out):
    """`patches: []` (a new project, or every entry removed): the table's column width was the max() of no
    names, an internal error (exit 3). Nothing to classify: it says so and exits 0, as the radar does."""
    make_release(cache, pin_source, "9.0.1")
    proj = tmp_path / "p"
    proj.mkdir()
    pin = (FIX / "manifest.yaml").read_text().split("patches:\n")[0]
    (proj / "manifest.yaml").write_text(pin + "patches: []\n")
    env = {"SGLANG_OVERLAY_CACHE": str(cache)}
    res = run_cli("--manifest", str(proj / "manifest.yaml"), "check", "--against", "9.0.1", *out, env=env, check_rc=0)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    if out == ["--json"]:
        data = json.loads(res.stdout)
        assert (data["pin"], data["versions"], data["verdicts"]) == ("0.5.17", ["9.0.1"], [])
    else:
        assert f"{proj / 'manifest.yaml'} has no patches: nothing to classify against 9.0.1" in res.stdout, res.stdout


AWQ = "python/sglang/srt/layers/quantization/awq/schemes/awq_scheme.py"  # two identical 7-line blocks


def _awq_set(tmp_path, pin_source, entries):
    """A project of diff entries on AWQ: (name, lines before, lines after, extra YAML of the entry); an entry
    with no lines is written as given (an upstreamed one). Returns check's report on the pin."""
    from sglang_overlay.diffgen import make_diff

    proj = tmp_path / "proj"
    (proj / "patches").mkdir(parents=True)
    text = (FIX / "manifest.yaml").read_text().split("patches:")[0] + "patches:\n"
    for name, old, new, extra in entries:
        if old is None:
            text += extra
            continue
        body = make_diff({AWQ: "".join(old).encode()}, {AWQ: "".join(new).encode()})
        (proj / "patches" / f"{name}.patch").write_text(f"Description: {name}\n---\n{body}")
        text += f"  - name: {name}\n    description: {name}\n    kind: diff\n    category: experimental\n{extra}"
    (proj / "manifest.yaml").write_text(text)
    return check_pin(load_manifest(proj / "manifest.yaml"), pin_source.read, "0.5.17")


def _awq_edits(pin_source):
    lines = pin_source.read(AWQ).decode().splitlines(keepends=True)
    assert "NotImplementedError" in lines[45]

    def moe(ls):  # line 46 of the second block, as a patch made on `ls`
        return ls[:45] + [ls[45].replace("NotImplementedError", 'NotImplementedError("moe")')] + ls[46:]

    return lines, moe


def test_an_order_dependence_that_requires_does_not_tie_fails_check(tmp_path, pin_source):
    """x requires a; pp, between them, is tied to neither. No single order swaps pp with both, and the reversal
    that kept x after a left pp before x: `check` passed a set whose manifest order puts x's hunk in the wrong
    one of two identical blocks (pp's 15 lines shift it there)."""
    lines, moe = _awq_edits(pin_source)
    with_a = lines[:53] + [lines[53].rstrip("\n") + "  # a\n"] + lines[54:]
    with_pp = lines[:1] + [f"# pp {i}\n" for i in range(15)] + lines[1:]
    rep = _awq_set(
        tmp_path,
        pin_source,
        [("a", lines, with_a, ""), ("pp", lines, with_pp, ""), ("x", with_a, moe(with_a), "    requires: [a]\n")],
    )
    assert any(i.what == "order" and i.subject == "pair: pp+x" and not i.ok for i in rep.items), rep.items
    assert not rep.ok


def test_patches_tied_through_an_upstreamed_entry_are_not_swapped(tmp_path, pin_source):
    """x requires u (upstreamed, writes nothing), which requires a: the other order tied only direct requires
    among the patches that write, swapped a and x, and x (made on a, a's line in its context) failed."""
    lines, moe = _awq_edits(pin_source)
    with_a = lines[:47] + [lines[47].rstrip("\n") + "  # a\n"] + lines[48:]
    u = (
        "  - name: u\n    description: u\n    kind: upstreamed\n    category: compat\n    requires: [a]\n"
        '    upstream: {status: upstreamed, release: "0.5.10", pr: 1}\n'
        f'    proof: {{file: {AWQ}, contains: ["raise NotImplementedError"]}}\n'
    )
    entries = [("a", lines, with_a, ""), ("u", None, None, u), ("x", with_a, moe(with_a), "    requires: [u]\n")]
    rep = _awq_set(tmp_path, pin_source, entries)
    assert rep.ok, [i for i in rep.items if not i.ok]


@pytest.mark.parametrize("listed", [("x", "a"), ("a", "x")])
def test_a_tie_is_read_both_ways_whatever_the_listing(tmp_path, pin_source, listed):
    """x requires a, listed after it or before: the pair code read the tie one way only, and its verdict
    depended on the listing order alone (a FAIL for x, a; a pass for a, x)."""
    lines, moe = _awq_edits(pin_source)
    with_a = lines[:1] + [f"# a {i}\n" for i in range(15)] + lines[1:]
    made = {"x": ("x", lines, moe(lines), "    requires: [a]\n"), "a": ("a", lines, with_a, "")}
    rep = _awq_set(tmp_path, pin_source, [made[n] for n in listed])
    assert rep.ok, [i for i in rep.items if not i.ok]
