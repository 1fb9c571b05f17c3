"""ab power and mean starts for +5% at start cv 2% by budget and look schedule (tests/bench/test_sequential.py).

PYTHONPATH=. python bench/results/simulate/ab_power.py > bench/results/simulate/ab-power.md
"""

from __future__ import annotations

import sys

from bench import stats
from bench.replication import Policy

sys.path[:0] = ["tests/bench", "."]
import test_sequential as ts  # type: ignore[import-not-found]  # noqa: E402 - after the path set-up


def main() -> None:
    print("ab, +5% at start cv 2%, 150 seeds: (share called 'regression', mean server starts) at --max-starts 6, 8, 12")
    for sp in ("pocock", "obf", "bonferroni"):
        r = [ts._ab(0.05, Policy(3, mx, 0.95, 0.02, sp), 150) for mx in (6, 8, 12)]
        print(f"- {sp}: " + ", ".join(f"({x.get(stats.REGRESSION, 0):.3f}, {x['starts']:.1f})" for x in r))


if __name__ == "__main__":
    main()
