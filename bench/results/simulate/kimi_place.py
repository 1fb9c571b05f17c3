"""The placement's own power on the Kimi-width null pair's starts (kimi-record.md): how often place_probe decides
GOOD for a probe without the plant, references and probe each drawn from the recorded start values, at 4, 6 and 8
starts a side. Run from the project root: python bench/results/simulate/kimi_place.py"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import simulate as s
from bench.replication import Policy
from bench.stats import start_value
from bench.verdicts import Place, place_probe

RECORD = "bench/results/2026-12-04-h200-kimi/kimi_null/results.jsonl"


def main() -> None:
    values = [v for v in (start_value(st["step_ms_b1"]) for st in s.recorded_starts(RECORD)) if v is not None]
    pol = Policy(3, 8, 0.95, 0.02)
    print("plant  starts/side  probe placed GOOD (400 draws)")
    for effect in (0.05, 0.09, 0.15, 0.3):
        rng = random.Random(1)
        for n in (4, 6, 8):
            good = 0
            for _ in range(400):
                g = [rng.choice(values) for _ in range(n)]
                b = [rng.choice(values) * (1 + effect) for _ in range(n)]
                p = [rng.choice(values) for _ in range(n)]
                good += place_probe(g, b, p, "step_ms_b1", pol, True).place is Place.GOOD
            print(f"+{effect:.0%}   {n:11d}  {good / 400:.1%}")


if __name__ == "__main__":
    main()
