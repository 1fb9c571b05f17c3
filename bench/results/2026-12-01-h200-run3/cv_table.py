"""The CV table of this record's README; from the repository root:
`PYTHONPATH=. python bench/results/2026-12-01-h200-run3/cv_table.py`."""

import statistics as st
from pathlib import Path

from bench import store


def cv(xs: list[float]) -> float:
    return 100 * st.stdev(xs) / st.mean(xs)


v = store.view(store.read(Path(__file__).parent / "variance" / "results.jsonl"))
units = sorted(v.units.values(), key=lambda u: u.round)
for m in ("step_ms_b1", "eagle_step_ms_b1", "eagle_verify_ms_b1", "eagle_draft_ms_b1", "step_ms_bc"):
    per = [[r[m] for r in u.reps] for u in units]
    within = st.mean(100 * st.pstdev(x) / st.mean(x) for x in per)
    print(
        f"{m}: {len(per)} starts; CV of start medians {cv([st.median(x) for x in per]):.1f}%, "
        f"of start minima {cv([min(x) for x in per]):.1f}%, mean within-start CV {within:.1f}%"
    )
