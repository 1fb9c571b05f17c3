"""The per-start tables of this record's README; from the repository root:
`PYTHONPATH=. python bench/results/2026-12-01-h200-run4/reps_table.py`."""

import statistics as st
from pathlib import Path

from bench import store


def cv(xs: list[float]) -> float:
    return 100 * st.stdev(xs) / st.mean(xs)


v = store.view(store.read(Path(__file__).parent / "profiling" / "results.jsonl"))
units = sorted(v.units.values(), key=lambda u: (u.round, u.arm))
print("| round | arm | to serve s | step ms b1 of each measured repetition | start median |")
print("|---|---|---|---|---|")
for u in units:
    xs = [r["step_ms_b1"] for r in u.reps]
    print(
        f"| {u.round + 1} | {u.arm} | {u.startup_s:.0f} | {', '.join(f'{x:.2f}' for x in xs)} | {st.median(xs):.2f} |"
    )
per = [[r["step_ms_b1"] for r in u.reps] for u in units]
within = st.mean(100 * st.pstdev(x) / st.mean(x) for x in per)
print(
    f"\n{len(per)} measured starts (all arms): CV of start medians {cv([st.median(x) for x in per]):.1f}%, "
    f"of start minima {cv([min(x) for x in per]):.1f}%, mean within-start CV {within:.1f}%"
)
fast = sum(x < 4.2 for p in per for x in p)
print(f"repetitions under 4.2 ms: {fast} of {sum(map(len, per))}")
