"""ab at a true change of exactly the minimum effect: how often each look schedule makes a wrong claim.

    PYTHONPATH=. python bench/results/simulate/ab_boundary.py > bench/results/simulate/ab-boundary.md

At a true -2% 'improvement' (a change beyond 2% claimed) is wrong, at +2% 'same' is; 600 seeds of ab's adaptive
replication (3 to 8 starts per arm, start cv 1%: tests/bench/test_adversary.py's _boundary_errors).
"""

from __future__ import annotations

import sys

from scipy.stats import binomtest

from bench.replication import Policy

sys.path[:0] = ["tests/bench", "."]
import test_adversary as t  # type: ignore[import-not-found]  # noqa: E402 - after the path set-up

N = 600


def main() -> None:
    print(f"ab, 3 to 8 starts per arm, start cv 1%, a true change of exactly the minimum effect (2%), {N} seeds:")
    for sp in ("bonferroni", "obf", "pocock"):
        pol = Policy(3, 8, 0.95, 0.02, sp)
        for eff, wrong in ((-0.02, "improvement"), (0.02, "same")):
            out = t._boundary_errors(eff, N, pol)
            k = round(out.get(wrong, 0) * N)
            ci = binomtest(k, N).proportion_ci(0.95)
            rest = ", ".join(f"{a} {b:.1%}" for a, b in sorted(out.items()))
            print(f"- {sp}, true {eff:+.0%}: '{wrong}' (wrong) {k / N:.1%} [{ci.low:.1%}, {ci.high:.1%}]; all: {rest}")


if __name__ == "__main__":
    main()
