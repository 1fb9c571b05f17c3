"""The figures of bench/results/hostprobe/README.md's simulation table, from tests/bench/test_hostprobe.py's model.

PYTHONPATH=.:tests/bench python bench/results/hostprobe/sim_table.py
"""

from __future__ import annotations

import random
import statistics
from collections import Counter

import test_hostprobe as t  # type: ignore[import-not-found]  # tests/bench on PYTHONPATH (the docstring)
from bench.sets import PatchSet

from bench.launcher import ArmSpec
from bench.plans import Settings, run_ab
from bench.replication import Policy


def main() -> None:
    print("| design | true change | adjust | verdicts | median CV raw / adjusted | median starts (both arms) |")
    print("|---|---|---|---|---|---|")
    for eff, seed, n in ((0.0, 1, 400), (0.05, 2, 200)):
        raw, adj, cvs = t._verdicts(n, eff, seed=seed)
        cr = statistics.median(r for r, _ in cvs) * 100
        ca = statistics.median(a for _, a in cvs) * 100
        for name, vs in (("none", raw), ("host", adj)):
            print(
                f"| 4 starts per arm, {n} sessions | {eff:+.0%} | {name} | {dict(Counter(vs))} | {cr:.1f} % / {ca:.2f} % | 8 |"
            )
    a, b = (ArmSpec(x, PatchSet(x, ())) for x in ("ref", "arm"))
    for eff in (0.0, 0.05):
        rng = random.Random(7)
        out: dict[str, list[tuple[str, int]]] = {"none": [], "host": []}
        for _ in range(60):
            for adjust in out:
                lab = t.HostLab(rng, {"ref": 0.0, "arm": eff})
                c = run_ab(lab, [a, b], [("ab", a, b)], Settings(Policy(3, 8, adjust=adjust)))
                out[adjust].append((c["comparisons"][0]["verdict"], lab.n_starts(a) + lab.n_starts(b)))
        for adjust, rows in out.items():
            med = statistics.median(n for _, n in rows)
            print(
                f"| adaptive ab 3-8 starts, 60 sessions | {eff:+.0%} | {adjust} | {dict(Counter(v for v, _ in rows))} | - | {med:g} |"
            )


if __name__ == "__main__":
    main()
