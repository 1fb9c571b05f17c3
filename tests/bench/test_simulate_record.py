"""The simulator fed with a recorded H200 run's own starts (bench simulate --from-record).

The record (bench/results/2026-12-01-h200-run3/variance) holds 10 starts of one set on the tiny model with a
start-to-start CV of 11% and repetitions that switch between a fast and a slow state: noise the parametric
worlds only approximate. Whatever that noise does, the bench must not name a wrong patch.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bench import simulate as s
from bench.errors import RecordError
from bench.plans import Settings, run_bisect
from bench.replication import Policy
from bench.store import PROBE_METRIC

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "bench/results/2026-12-01-h200-run3/variance/results.jsonl"
SETTINGS = Settings(Policy(3, 8, 0.95, 0.02))


@pytest.fixture(scope="module")
def pool():
    return s.recorded_starts(str(RECORD))


def test_the_record_gives_its_measured_starts(pool):
    assert len(pool) == 10  # the throwaway starts are left out
    # every modelled metric but the first token's: the record predates the time-to-first-token phase
    assert all(set(start) == set(s.BASE) - {"ttft_ms_b1"} for start in pool)
    assert all(len(v) == 5 for start in pool for v in start.values())  # warm-up repetitions left out
    medians = sorted(sorted(st["step_ms_b1"])[2] for st in pool)
    assert medians[0] == pytest.approx(3.880, abs=1e-3) and medians[-1] == pytest.approx(5.194, abs=1e-3)


def _bisect(pool, effect, seed):
    plants = [s.host_slowdown("p2", effect)] if effect else []
    lab = s.SimLab(s.World(plants, pool=pool), seed=seed)
    return run_bisect(
        lab,
        s.sim_arm("good", ("g",)),
        s.sim_arm("bad", ("g", "p0", "p1", "p2")),
        lambda patches, role: s.sim_arm(role, patches),
        lambda name: set(),
        SETTINGS,
    )


@pytest.mark.parametrize("effect", [0.0, 0.05, 0.2, 0.4])
def test_recorded_noise_never_names_a_wrong_patch(pool, effect):
    named = [_bisect(pool, effect, seed)["culprit"] for seed in range(25)]
    wrong = [n for n in named if n not in (None, "p2")]
    assert not wrong, f"effect {effect}: wrong culprits {wrong}"
    if effect == 0.0:
        assert named.count(None) == len(named)
    if effect == 0.4:
        # the plant reaches the lab: a large regression is found in some trials even at this noise
        assert named.count("p2") >= 5, named


def test_plants_scale_every_repetition_of_a_drawn_start(pool):
    lab = s.SimLab(s.World([s.host_slowdown("p", 0.5)], pool=pool), seed=3)
    rng_state = lab.rng.getstate()
    with_p = lab._one(("p",))
    lab.rng.setstate(rng_state)
    without = lab._one(("q",))
    assert with_p["step_ms_b1"] == pytest.approx([x * 1.5 for x in without["step_ms_b1"]])
    assert with_p["tok_s_b1"] == pytest.approx([x / 1.5 for x in without["tok_s_b1"]])


def test_a_bad_record_is_exit_2_naming_the_file(tmp_path):
    bad = tmp_path / "results.jsonl"
    bad.write_text('{"type": "start", "start_id": "a"\n')
    with pytest.raises(RecordError, match=r"results\.jsonl"):
        s.recorded_starts(str(bad))
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"type": "run", "run_id": "r", "arms": []}) + "\n")
    with pytest.raises(RecordError, match="no measured start"):
        s.recorded_starts(str(empty))
    fieldless = tmp_path / "fieldless.jsonl"
    fieldless.write_text(json.dumps({"type": "run"}) + "\n")
    with pytest.raises(RecordError, match=r"fieldless\.jsonl:1: a 'run' record without a valid 'run_id'"):
        s.recorded_starts(str(fieldless))
    with pytest.raises(RecordError, match=r"nowhere\.jsonl: cannot read"):
        s.recorded_starts(str(tmp_path / "nowhere.jsonl"))
    with pytest.raises(RecordError, match="no starts of the set"):
        s.recorded_starts(str(RECORD), "nope")
    p = subprocess.run(
        [sys.executable, "-m", "bench", "simulate", "--from-record", str(bad), "--trials", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "results.jsonl" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_start_that_never_completed_is_not_drawn(tmp_path):
    # the store's rule: an interrupted start's repetitions are not a start's (bench.store.view)
    lines = RECORD.read_text().splitlines()
    done = [json.loads(x) for x in lines if json.loads(x).get("type") == "unit_done"]
    last = next(d for d in reversed(done) if not d.get("warmup_start"))
    cut = tmp_path / "results.jsonl"
    cut.write_text("\n".join(x for x in lines if json.loads(x) != last) + "\n")
    assert len(s.recorded_starts(str(cut))) == 9


# A record made with the probe on the scheduler's CPU (the Kimi-width null pair) and one made with it on a spare CPU
KIMI_NULL = ROOT / "bench/results/2026-12-04-h200-kimi/kimi_null/results.jsonl"
SPARE_CPU = ROOT / "bench/results/2026-12-01-h200-run5/profhost/results.jsonl"


def test_a_record_keeps_its_probe_only_where_it_ran_on_the_schedulers_cpu():
    pool = s.recorded_starts(str(KIMI_NULL))
    assert len(pool) == 10
    assert all(len(st[PROBE_METRIC]) == len(st["step_ms_b1"]) == 5 for st in pool)
    slow = max(pool, key=lambda st: sorted(st["step_ms_b1"])[2])  # the record's slowest start (a, start 3)
    assert statistics.median(slow[PROBE_METRIC]) > 150  # its probe ran in the slow state (README: 199.8 us)
    # the probe on CPU 15 saw another vCPU than the step's: the state reading must not be fed with it
    assert all(PROBE_METRIC not in st for st in s.recorded_starts(str(SPARE_CPU)))


def test_the_state_reading_reads_a_records_own_host_states():
    """Before, --from-record dropped the probe and --adjust state read nothing: the same rates as unadjusted."""
    pool = s.recorded_starts(str(KIMI_NULL))

    def named(adjust: str, effect: float, trials: int = 30) -> list:
        settings = Settings(Policy(3, 12, 0.95, 0.02, adjust=adjust))
        out = []
        for seed in range(trials):
            lab = s.SimLab(s.World([s.host_slowdown("p3", effect)] if effect else [], pool=pool), seed=seed)
            res = run_bisect(
                lab,
                s.sim_arm("good", ("g",)),
                s.sim_arm("bad", ("g", "p0", "p1", "p2", "p3")),
                lambda patches, role: s.sim_arm(role, patches),
                lambda name: set(),
                Settings(settings.policy),
            )
            out.append(res["culprit"])
        return out

    assert named("state", 0.0) == [None] * 30
    fast, raw = named("state", 0.09), named("none", 0.09)
    assert set(fast) | set(raw) <= {None, "p3"}
    # recorded figures (bench/results/simulate/kimi-record.md, 200 seeds): 96 % against 26.5 % at 12 starts a side
    assert fast.count("p3") >= 24 and raw.count("p3") <= 15, (fast.count("p3"), raw.count("p3"))


@pytest.mark.parametrize(
    "record, adjust, says",
    [
        (SPARE_CPU, "state", "0 of the 3 starts drawn from"),
        (SPARE_CPU, "host", "a probe that ran on a spare CPU is not drawn"),
        (RECORD, "host", "recorded without --host-probe --host-probe-at scheduler"),
        (KIMI_NULL, "steal", "--adjust steal on a parametric world (without --from-record)"),
    ],
)
def test_an_adjusted_simulation_of_a_record_without_its_covariate_is_refused(record, adjust, says):
    """Else the adjusted reading silently reads the raw values and prints the unadjusted rates under its name. Only
    where the record is read: a parametric scenario beside it runs, and 'all' leaves the record's rows out."""

    def sim(*extra: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "bench", "simulate", "--from-record", str(record), "--adjust", adjust]
        return subprocess.run([*argv, "--trials", "1", *extra], cwd=ROOT, capture_output=True, text=True)

    for plan in ([], ["--scenario", "record-null"]):
        p = sim(*plan)
        assert p.returncode == 2 and says in p.stderr and str(record) in p.stderr, p.stdout + p.stderr
        assert "Traceback" not in p.stderr
    p = sim("--scenario", "null-cv1")
    assert p.returncode == 0 and "null-cv1" in p.stdout, p.stdout + p.stderr


def _rewrite(src: Path, dst: Path, edit) -> Path:
    """src's records with edit(record) applied to each measured repetition of the first start."""
    lines, first = [], None
    for line in src.read_text().splitlines():
        r = json.loads(line)
        if r.get("type") == "rep" and not r.get("warmup"):
            first = first or r["start_id"]
            if r["start_id"] == first:
                edit(r)
        lines.append(json.dumps(r))
    dst.write_text("\n".join(lines) + "\n")
    return dst


def test_a_start_missing_a_metric_in_one_repetition_keeps_no_probe(tmp_path):
    """SimLab.units pairs each metric's list with the probe's by position: a list one short would pair its values
    with the wrong repetitions' probe values (the review's case: the first repetition without its verify span)."""
    seen = []

    def drop_verify_once(r):
        if not seen:
            seen.append(r["metrics"].pop("eagle_verify_ms_b1"))

    pool = s.recorded_starts(str(_rewrite(KIMI_NULL, tmp_path / "results.jsonl", drop_verify_once)))
    assert seen and len(pool) == 10
    assert sum(PROBE_METRIC in st for st in pool) == 9
    lacking = next(st for st in pool if PROBE_METRIC not in st)
    assert len(lacking["eagle_verify_ms_b1"]) == 4 and len(lacking["step_ms_b1"]) == 5
    p = subprocess.run(
        [sys.executable, "-m", "bench", "simulate", "--from-record", str(tmp_path / "results.jsonl")]
        + ["--adjust", "state", "--trials", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "9 of the 10 starts drawn from" in p.stderr, p.stderr
