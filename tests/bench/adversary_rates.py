"""Print the error rates of the adversarial scenarios (tests/bench/test_adversary.py) over more seeds.

    .venv/bin/python tests/bench/adversary_rates.py --trials 200 > bench/results/adversary/rates.txt

The tests assert bounds on a few seeds each; this prints every scenario's rates, the outcome counts and the
median number of server starts, for the record (bench/results/adversary/README.md).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import test_adversary as t  # noqa: E402 - after the path set-up

from bench.replication import Policy  # noqa: E402
from bench.simulate import Plant, gpu_hidden, host_slowdown  # noqa: E402


def scenarios() -> list[tuple[str, t.AdvWorld, frozenset, tuple]]:
    W = t.AdvWorld
    c12 = tuple(f"p{i}" for i in range(12))
    interm = host_slowdown("p1", 0.10).effect
    return [
        ("null, start cv 1%", W(start_cv=0.01), frozenset(), t.C3),
        ("null, cv 1%, independent noise per metric", W(start_cv=0.01, independent_metrics=True), frozenset(), t.C3),
        (
            "null, bimodal p=0.3 +15%",
            W(start_cv=0.01, rep_cv=0.05, bimodal_p=0.3, bimodal_shift=0.15, reps=9),
            frozenset(),
            t.C3,
        ),
        ("null, t(3) start noise sd 2%", W(start_cv=0.02, noise="t3"), frozenset(), t.C3),
        ("p1 +5%, cv 1%", W(plants=[host_slowdown("p1", 0.05)], start_cv=0.01), frozenset({"p1"}), t.C3),
        ("p1 +5%, cv 2%", W(plants=[host_slowdown("p1", 0.05)], start_cv=0.02), frozenset({"p1"}), t.C3),
        (
            "p1 +10% intermittent (p=0.5)",
            W(plants=[Plant(frozenset({"p1"}), interm, 0.5)], start_cv=0.01),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p1 +10% intermittent (p=0.7)",
            W(plants=[Plant(frozenset({"p1"}), interm, 0.7)], start_cv=0.01),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p1 +5%, warm-up drift 5% decaying over 3 starts",
            W(plants=[host_slowdown("p1", 0.05)], start_cv=0.01, drift=lambda k: 1 + 0.05 * math.exp(-k / 3)),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p1 +5%, warm-up drift 10% decaying over 20 starts",
            W(plants=[host_slowdown("p1", 0.05)], start_cv=0.01, drift=lambda k: 1 + 0.10 * math.exp(-k / 20)),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p1 +5%, session 0.2% faster per start",
            W(plants=[host_slowdown("p1", 0.05)], start_cv=0.01, drift=lambda k: 1 - 0.002 * k),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p2 +5%, references from a session 3% slower",
            W(plants=[host_slowdown("p2", 0.05)], start_cv=0.01, drift=lambda k: 0.97 if k >= 6 else 1.0),
            frozenset({"p2"}),
            t.C3,
        ),
        ("p1 widens start sd by 8% (no shift)", W(start_cv=0.01, var_plants={"p1": 0.08}), frozenset(), t.C3),
        (
            "p0 -5%, p2 +8%",
            W(plants=[host_slowdown("p0", -0.05), host_slowdown("p2", 0.08)], start_cv=0.01),
            frozenset({"p2"}),
            t.C3,
        ),
        ("5% split 70/30 (p0 named is right)", W(plants=t._split(0.05, 0.7), start_cv=0.005), frozenset({"p0"}), t.C3),
        ("10% split 70/30", W(plants=t._split(0.10, 0.7), start_cv=0.01), frozenset(), t.C3),
        (
            "p0 +8%, p2 +3%",
            W(plants=[host_slowdown("p0", 0.08), host_slowdown("p2", 0.03)], start_cv=0.01),
            frozenset(),
            t.C3,
        ),
        (
            "p0 +5%, p2 +5%, cv 2%",
            W(plants=[host_slowdown("p0", 0.05), host_slowdown("p2", 0.05)], start_cv=0.02),
            frozenset(),
            t.C3,
        ),
        (
            "p1 concurrent-only +5%",
            W(plants=[Plant(frozenset({"p1"}), {"step_ms_bc": 1.05, "tok_s_bc": 1 / 1.05})], start_cv=0.01),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p1 tok/s-only -7.4%",
            W(plants=[Plant(frozenset({"p1"}), {"tok_s_b1": 1 / 1.08})], start_cv=0.01),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p1 GPU-side, verify +20% / draft-extend -20%",
            W(plants=[gpu_hidden("p1", 0.2)], start_cv=0.01),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p1 +5%, bimodal p=0.3 +15%",
            W(
                plants=[host_slowdown("p1", 0.05)],
                start_cv=0.01,
                rep_cv=0.05,
                bimodal_p=0.3,
                bimodal_shift=0.15,
                reps=9,
            ),
            frozenset({"p1"}),
            t.C3,
        ),
        (
            "p2 +5%, t(3) start noise sd 2%",
            W(plants=[host_slowdown("p2", 0.05)], start_cv=0.02, noise="t3"),
            frozenset({"p2"}),
            t.C3,
        ),
        (
            "p1 +5%, outlier starts (10%, +30%) and reps (20%, +50%)",
            W(
                plants=[host_slowdown("p1", 0.05)],
                start_cv=0.01,
                outlier_p=0.1,
                outlier_shift=0.3,
                rep_outlier_p=0.2,
                rep_outlier_shift=0.5,
            ),
            frozenset({"p1"}),
            t.C3,
        ),
        ("12 candidates, p5 +5%", W(plants=[host_slowdown("p5", 0.05)], start_cv=0.01), frozenset({"p5"}), c12),
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    a = ap.parse_args()
    print(
        f"bisect over simulated starts (bench.plans.run_bisect; alpha 0.05, min effect 2%, 3 to 8 starts per "
        f"arm), {a.trials} seeds each"
    )
    print("| scenario | right | wrong | outcomes | median starts |")
    print("|---|---|---|---|---|")
    for name, world, truth, cands in scenarios():
        r = t._rates(t._same(world), a.trials, truth, cands=cands)
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r.outcomes.items(), key=lambda kv: -kv[1]))
        wrong = f"{r.wrong_rate:.1%}" + (
            f" ({', '.join(f'{k}: {v}' for k, v in r.wrong_names.items())})" if r.wrong_names else ""
        )
        print(
            f"| {name} | {r.right_rate:.1%} | {wrong} | {outcomes} | {sorted(r.starts)[len(r.starts) // 2]} |",
            flush=True,
        )
    print()
    print("ab's adaptive replication at a true change of exactly the minimum effect (cv 1%):")
    spent = Policy(initial=3, max_starts=8, confidence=0.95, min_effect=0.02, spending="bonferroni")
    for label, pol in (
        ("group-sequential, Pocock-type spending (the bench)", t.SETTINGS.policy),
        ("Bonferroni, 99.17% at every look (before)", spent),
    ):
        for effect in (-0.02, 0.02):
            out = t._boundary_errors(effect, 2 * a.trials, pol)
            print(f"- {label}, true {effect:+.0%}: " + ", ".join(f"{k} {v:.1%}" for k, v in sorted(out.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
