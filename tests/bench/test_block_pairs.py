"""--block-pairs: which blocks of two a round asks for (bench.blocks.comparison_pairs), for each shape a plan asks
in; the runner's wiring is exercised end to end in test_blocks.py (test_block_pairs_*)."""

from __future__ import annotations

from types import SimpleNamespace

from bench.blocks import comparison_pairs
from bench.launcher import ArmSpec


def _arm(name: str, *patches: str) -> ArmSpec:
    return ArmSpec(name, SimpleNamespace(patches=("base", *patches)))  # type: ignore[arg-type]


BASE, FULL = _arm("base"), _arm("full", "a", "b", "c")
PLUS_A, MINUS_A, MINUS_B = _arm("+a", "a"), _arm("-a", "b", "c"), _arm("-b", "a", "c")
LONE = _arm("lone", "z")
# ablate's comparisons, as the runner lists them
ABLATE = [(BASE, FULL), (FULL, MINUS_A), (FULL, MINUS_B), (BASE, PLUS_A)]


def _names(pairs: list[list[ArmSpec]]) -> list[list[str]]:
    return [[a.name for a in p] for p in pairs]


def test_the_full_set_asked_with_its_leave_outs_takes_no_block_with_the_base():
    """The H200 run's round: full and its leave-outs asked; base/full is nobody's question in a leave-out ablate."""
    assert _names(comparison_pairs([FULL, MINUS_A, MINUS_B], ABLATE)) == [["full", "-a"], ["full", "-b"]]


def test_a_leave_out_asked_alone_meets_the_full_set():
    assert _names(comparison_pairs([MINUS_B], ABLATE)) == [["full", "-b"]]


def test_an_arm_asked_alone_meets_every_reference_it_has_until_it_has_met_some():
    """bisect's probe: read against good and bad, so it meets both; an arm that met one before keeps to it."""
    comps = [(BASE, MINUS_A), (FULL, MINUS_A)]
    assert _names(comparison_pairs([MINUS_A], comps)) == [["base", "-a"], ["full", "-a"]]
    met = {(FULL.key, MINUS_A.key)}
    assert _names(comparison_pairs([MINUS_A], comps, lambda r, a: (r.key, a.key) in met)) == [["full", "-a"]]


def test_with_two_candidates_a_leave_out_that_is_also_a_patch_alone_stays_with_the_full_set():
    """full = base + a + b: -a is the set base + b, the arm of b alone too. Asked without the full set (which
    reached --max-starts first, being in every block), it met only the full set before and keeps to it."""
    full2, minus_a2, minus_b2 = _arm("full", "a", "b"), _arm("-a", "b"), _arm("-b", "a")
    plus_a2, plus_b2 = _arm("+a", "a"), _arm("+b", "b")
    comps = [(BASE, full2), (BASE, plus_a2), (BASE, plus_b2), (full2, minus_a2), (full2, minus_b2)]
    assert minus_a2.key == plus_b2.key
    # no history (a new arm): every reference, the base's too
    assert _names(comparison_pairs([minus_a2, minus_b2], comps)) == [
        ["base", "-a"],
        ["full", "-a"],
        ["base", "-b"],
        ["full", "-b"],
    ]
    met = {(full2.key, minus_a2.key), (full2.key, minus_b2.key)}
    got = comparison_pairs([minus_a2, minus_b2], comps, lambda r, a: (r.key, a.key) in met)
    assert _names(got) == [["full", "-a"], ["full", "-b"]]


def test_the_confirmation_pairs_the_base_with_the_patch_alone_only():
    assert _names(comparison_pairs([BASE, PLUS_A], ABLATE)) == [["base", "+a"]]


def test_a_reference_asked_alone_meets_the_arms_it_is_the_reference_of():
    assert _names(comparison_pairs([BASE], ABLATE)) == [["base", "full"], ["base", "+a"]]


def test_arms_in_no_comparison_go_two_at_a_time():
    assert _names(comparison_pairs([LONE], ABLATE)) == [["lone"]]
    assert _names(comparison_pairs([MINUS_A, LONE], ABLATE)) == [["full", "-a"], ["lone"]]
    assert _names(comparison_pairs([LONE, PLUS_A, MINUS_A], [])) == [["lone", "+a"], ["-a"]]
