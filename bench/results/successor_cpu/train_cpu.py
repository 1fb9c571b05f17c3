"""CPU: train-draft on the tests' small model (tests/bench/test_train_draft.py SPEC and TRAIN) against a dummy target,
printing the simulated accept lengths as one JSON line.

    python bench/results/successor_cpu/train_cpu.py successor|normal STEPS WORKDIR
"""

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the project root
sys.path[:0] = [str(ROOT / "tests" / "bench"), str(ROOT)]

from test_train_draft import SPEC, TRAIN  # type: ignore[import-not-found]  # noqa: E402

from bench.dummy_init import DummyInit  # noqa: E402
from bench.tinymodel import write_model_dirs  # noqa: E402
from bench.train_draft import TrainOptions, run  # noqa: E402

mode, steps, work = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
d = work / f"m-{mode}-{steps}"
if not d.exists():
    write_model_dirs(d, SPEC)
t0 = time.monotonic()
opts = TrainOptions(model_dir=d, out=d / "draft_trained", init=DummyInit(mode), **{**TRAIN, "steps": steps})
m = run(opts, log=print)["metrics"]
out = {"mode": mode, "steps": steps, "before": m["held_out_before"], "held_out": m["held_out"]}
print(json.dumps({**out, "bench": m["bench_prompts"], "wall": round(time.monotonic() - t0)}))
