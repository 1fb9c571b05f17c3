"""--block-pairs: which blocks of two a round asks for (BlockStoreLab._pairs), for each shape a plan asks in."""

from __future__ import annotations

from types import SimpleNamespace

from bench.block_runner import BlockStoreLab
from bench.launcher import ArmSpec


def _arm(name: str, *patches: str) -> ArmSpec:
    return ArmSpec(name, SimpleNamespace(patches=("base", *patches)))  # type: ignore[arg-type]


BASE, FULL = _arm("base"), _arm("full", "a", "b", "c")
PLUS_A, MINUS_A, MINUS_B = _arm("+a", "a"), _arm("-a", "b", "c"), _arm("-b", "a", "c")
LONE = _arm("lone", "z")


def _lab(*comparisons: tuple[str, str]) -> BlockStoreLab:
    """A lab over an ablate's comparisons: (reference, arm) by name."""
    runner = SimpleNamespace(
        arms=[BASE, FULL, PLUS_A, MINUS_A, MINUS_B, LONE],
        comparisons=[("section", ref, arm) for ref, arm in comparisons],
        cfg=SimpleNamespace(block_analysis="pooled"),
    )
    return BlockStoreLab(runner, ["t0", "t1"])  # type: ignore[arg-type]


ABLATE = (("base", "full"), ("full", "-a"), ("full", "-b"), ("base", "+a"))


def _names(pairs: list[list[ArmSpec]]) -> list[list[str]]:
    return [[a.name for a in p] for p in pairs]


def test_the_full_set_asked_with_its_leave_outs_takes_no_block_with_the_base():
    """The H200 run's round: full and its leave-outs asked; base/full is nobody's question in a leave-out ablate."""
    assert _names(_lab(*ABLATE)._pairs([FULL, MINUS_A, MINUS_B])) == [["full", "-a"], ["full", "-b"]]


def test_a_leave_out_asked_alone_meets_the_full_set():
    assert _names(_lab(*ABLATE)._pairs([MINUS_B])) == [["full", "-b"]]


def test_an_arm_asked_alone_meets_every_reference_it_has():
    lab = _lab(("base", "-a"), ("full", "-a"))
    assert _names(lab._pairs([MINUS_A])) == [["base", "-a"], ["full", "-a"]]


def test_the_confirmation_pairs_the_base_with_the_patch_alone_only():
    assert _names(_lab(*ABLATE)._pairs([BASE, PLUS_A])) == [["base", "+a"]]


def test_a_reference_asked_alone_meets_the_arms_it_is_the_reference_of():
    assert _names(_lab(*ABLATE)._pairs([BASE])) == [["base", "full"], ["base", "+a"]]


def test_arms_in_no_comparison_go_two_at_a_time():
    lab = _lab(*ABLATE)
    assert _names(lab._pairs([LONE])) == [["lone"]]
    assert _names(lab._pairs([MINUS_A, LONE])) == [["full", "-a"], ["lone"]]
    assert _names(_lab()._pairs([LONE, PLUS_A, MINUS_A])) == [["lone", "+a"], ["-a"]]
