"""The block design's error rates on simulated machines (bench.simulate_blocks): a host whose state switches
between 1x and 1.8x, shared by a block's servers (one vCPU), bimodal per-server starts, repetition noise.

No wrong culprit in null or planted worlds; a +10 % plant named in most runs (77 % at 40 seeds) where sequential starts on
the same machines name nothing; and a paired comparison of identical arms calls a change no more often than alpha
allows over its looks."""

from __future__ import annotations

from bench.plans import Settings, run_ab
from bench.replication import Policy
from bench.simulate import World, host_slowdown, sim_arm
from bench.simulate_blocks import SimBlockLab, ablate_rates

SETTINGS = Settings(Policy(3, 6, 0.95, 0.02))


def _world(plants=(), **kw):
    def make(_t: int) -> World:
        base = dict(
            start_cv=0.01,
            rep_cv=0.02,
            bimodal_p=0.2,
            bimodal_shift=0.05,
            reps=8,
            host_slow=0.8,
            host_stay=0.95,
            host_ticks_per_start=10,
        )
        return World(list(plants), **{**base, **kw})

    return make


def test_blocks_name_no_wrong_patch_and_find_a_ten_percent_plant():
    null = ablate_rates(_world(), 3, None, 40, SETTINGS, blocks=True)
    assert null["wrong"] == 0 and null["right"] == 0
    planted = ablate_rates(_world([host_slowdown("p2", 0.10)]), 3, "p2", 40, SETTINGS, blocks=True)
    assert planted["wrong"] == 0 and planted["right"] >= 28  # 70 %: a fifth of the servers +5 % slower costs power
    seq = ablate_rates(_world([host_slowdown("p2", 0.10)]), 3, "p2", 40, SETTINGS, blocks=False)
    assert seq["wrong"] == 0 and seq["right"] <= 4  # the same machines defeat sequential starts


def test_a_null_pair_in_blocks_calls_a_change_within_alpha():
    """ab of two identical arms, read at every planned look up to 6 blocks: false calls within alpha (binomial
    slack at 400 seeds: 5 % of 400 is 20, 32 would be beyond three standard errors)."""
    a, b = sim_arm("a", ("g",)), sim_arm("b", ("g",))
    b = type(b)("b", b.pset, env=(("BENCH_NULL", "1"),))  # the same set, another arm key: a null pair
    wrong = 0
    for t in range(400):
        lab = SimBlockLab(_world(bimodal_p=0.0)(t), [(a, b)], seed=t)
        c = run_ab(lab, [a, b], [("ab", a, b)], SETTINGS)["comparisons"][0]
        wrong += c["verdict"] in ("regression", "improvement")
    assert wrong <= 32
