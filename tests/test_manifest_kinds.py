"""One frozen type per patch kind: what a kind may not carry cannot be built, and consumers branch on the type."""

from __future__ import annotations

import shutil

import pytest
import yaml
from conftest import ROOT

from sglang_overlay.compat import check_pin, subsets_that_matter
from sglang_overlay.compose import compose
from sglang_overlay.fetch import WheelSource, pinned_wheel
from sglang_overlay.manifest import KINDS, DiffPatch, OverlayPatch, UpstreamedPatch, load_manifest
from sglang_overlay.patchfile import parse_patch_file
from sglang_overlay.record import FrozenError, replace
from sglang_overlay.upstream import prove

FIX = ROOT / "tests" / "fixtures" / "engine"
TOPK = "python/sglang/srt/layers/moe/topk.py"


@pytest.fixture(scope="module")
def fx():
    return load_manifest(FIX / "manifest.yaml")


@pytest.fixture(scope="module")
def pin_source(project_manifest):
    return WheelSource(pinned_wheel(project_manifest.pin))


def common(name="x"):
    return dict(name=name, description="d", category="compat", default=False, source_dir=FIX)


def test_each_kind_is_its_own_type(fx):
    kinds = {p.name: type(p) for p in fx.patches}
    assert kinds["fx_topk"] is DiffPatch and kinds["fx_overlay"] is OverlayPatch and kinds["fx_kimi"] is UpstreamedPatch
    assert KINDS == ("diff", "overlay", "upstreamed")
    assert {p.kind for p in fx.patches} == set(KINDS)
    kimi = fx.patch("fx_kimi")
    # The kind decides the fields: no proof on a change, no overlay or diff on an upstreamed entry.
    assert not hasattr(fx.patch("fx_topk"), "proof") and not hasattr(kimi, "overlay") and not hasattr(kimi, "diff")
    assert kimi.files == () and kimi.proof is not None and kimi.original is None
    assert [p.name for p in fx.changes(fx.names)] == [n for n in fx.names if n != "fx_kimi"]


def test_entries_are_frozen(fx):
    with pytest.raises(FrozenError):
        fx.patch("fx_topk").diff = None


@pytest.mark.parametrize(
    "build, error",
    [
        (lambda pf: DiffPatch(**common()), TypeError),  # a diff entry without a diff
        (lambda pf: DiffPatch(**common(), diff=replace(pf, files=())), ValueError),  # changes nothing
        (lambda pf: DiffPatch(**common(), diff=pf, proof=None), TypeError),  # only upstreamed entries carry one
        (lambda pf: OverlayPatch(**common(), overlay=()), ValueError),  # an overlay entry adding no file
        (lambda pf: UpstreamedPatch(**common()), ValueError),  # upstreamed without a proof or the original
        (lambda pf: UpstreamedPatch(**common(), original=pf, overlay=("a",)), TypeError),  # upstream adds no files
    ],
    ids=[
        "diff-without-diff",
        "diff-empty",
        "diff-with-proof",
        "overlay-empty",
        "upstreamed-unproven",
        "upstreamed-overlay",
    ],
)
def test_invalid_combinations_cannot_be_built(build, error):
    pf = parse_patch_file(FIX / "patches" / "fx_topk.patch")
    with pytest.raises(error):
        build(pf)


def upstreamed_original_project(tmp_path):
    """fx_topk as upstream now has it: an upstreamed entry keeping its original diff, required by fx_args_a."""
    proj = tmp_path / "proj"
    shutil.copytree(FIX, proj)
    path = proj / "manifest.yaml"
    data = yaml.safe_load(path.read_text())
    entries = data["patches"]
    topk = next(p for p in entries if p["name"] == "fx_topk")
    topk.update(kind="upstreamed", upstream={"status": "upstreamed", "release": "0.5.99"})
    for p in entries:
        p["conflicts"] = [c for c in p.get("conflicts", []) if c != "fx_topk"]
    next(p for p in entries if p["name"] == "fx_args_a")["requires"] = ["fx_topk"]
    data["presets"] = {k: [n for n in v if n != "fx_topk"] for k, v in data["presets"].items()}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_manifest(path)


def test_an_upstreamed_original_is_proven_in_reverse_never_applied(tmp_path, fx, pin_source):
    m = upstreamed_original_project(tmp_path)
    topk = m.patch("fx_topk")
    assert isinstance(topk, UpstreamedPatch) and topk.proof is None and topk.original is not None
    # A release that has the change: the pin's file with fx_topk applied.
    shipped = compose({TOPK: pin_source.read(TOPK)}, [fx.patch("fx_topk")]).contents[TOPK]

    def release(path):
        return shipped if path == TOPK else pin_source.read(path)

    res = prove(topk, release)
    assert res.holds and "reverse-applies" in res.detail, res.detail
    assert not prove(topk, pin_source.read).holds  # the pin lacks it
    # fx_args_a requires it: its subsets name it, but only the changes are composed (it is already there).
    assert any("fx_topk" in names for _, names in subsets_that_matter(m))
    rep = check_pin(m, release, "0.5.99")
    assert rep.ok, [i for i in rep.items if not i.ok]
    assert any(i.what == "upstreamed" and i.subject == "fx_topk" and i.ok for i in rep.items)
