"""Every recorded GPU step of bench/gpu_runs.sh plans on the CPU (DRY=1): its sets resolve in its manifest and its
server arguments are the ones the record says. A step that no longer plans would only fail on a rented GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.tinymodel import TinyModelSpec, write_model_dirs

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_runs.sh"
# no server either: they train drafts (bench train-draft --dry-run plans them), tested below
TRAINING = {"train", "train_edge", "kimi_train", "kimi_train5", "draft_check"}
# one server through bench server-seqs (its own plan line, not bench ab's "server starts"), tested below
SEQS = {"kimi_seqs"}


def _steps() -> list[str]:
    usage = re.search(r"usage: gpu_runs\.sh ([a-z0-9_|]+)\}", SCRIPT.read_text())
    assert usage, "gpu_runs.sh lost its usage line"
    return usage.group(1).split("|")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    write_model_dirs(out, TinyModelSpec())
    return out


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> Path:
    """The Kimi-width proxy's model dir: the first step that needs it writes it (gpu_runs.sh's kimi_dir)."""
    return tmp_path_factory.mktemp("proxy") / "kimi"


@pytest.fixture(scope="module")
def plan_out(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("out")


# step and environment -> its DRY=1 run: a plan writes nothing (the train steps' test checks), so the tests of
# one step read one run (a run is a bash and one or two Python starts, train-draft's with torch); fresh=True
# plans again, for a test that changes the files a plan reads
_PLANS: dict[tuple, subprocess.CompletedProcess] = {}


def _plan(
    step: str, tiny: Path, kimi: Path, tree: Path, out: Path, fresh: bool = False, **extra: str
) -> subprocess.CompletedProcess:
    key = (step, tiny, kimi, tree, out, tuple(sorted(extra.items())))
    if fresh or key not in _PLANS:
        env = {
            **os.environ,
            "DRY": "1",
            "PYTHON": sys.executable,
            "TINY": str(tiny),
            "KIMI": str(kimi),
            "SGL_TREE": str(tree),
            "OUT": str(out),
            "MEMF": "0.6",  # what gpu_device.sh exports for a one-stream call: the tiny model's, not the proxy's
            **extra,
        }
        _PLANS[key] = subprocess.run(
            ["bash", str(SCRIPT), step], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
    return _PLANS[key]


@pytest.fixture
def dry(tiny, kimi, sglang_tree, plan_out):
    return lambda step, fresh=False, **extra: _plan(step, tiny, kimi, sglang_tree, plan_out, fresh, **extra)


@pytest.mark.parametrize("step", [s for s in _steps() if s not in TRAINING | SEQS])
def test_step_plans(dry, sglang_tree, step):
    p = dry(step)
    assert p.returncode == 0, p.stdout + p.stderr
    plans = re.findall(
        r"server starts: ([01]) throwaway \+ \d+ to \d+ measured \((\d+) arm\(s\) x (\d+) to (\d+) starts", p.stdout
    )
    assert plans and all(int(arms) >= 1 and 1 <= int(lo) <= int(hi) for _, arms, lo, hi in plans), p.stdout
    launches = [line for line in p.stdout.splitlines() if re.search(r" launch --(patches|set) ", line)]
    assert launches and all(f"--tree {sglang_tree} " in line for line in launches)


def test_unknown_step_is_refused(dry):
    p = dry("nosuchstep")
    assert p.returncode == 2 and "unknown step nosuchstep" in p.stderr


def test_edge_serves_the_edge_draft_with_the_patched_set(dry, tiny):
    p = dry("edge")
    (launch,) = [line for line in p.stdout.splitlines() if " launch --patches " in line]
    assert f"--speculative-draft-model-path {tiny}/draft_edge " in launch
    assert "deepseek_v2" in launch and "llama_eagle3" in launch


def test_before_plans_the_three_failing_starts(dry, tiny):
    p = dry("before")
    assert p.returncode == 0, p.stderr
    launches = [line for line in p.stdout.splitlines() if " launch --patches " in line]
    drafts = [re.search(r"--speculative-draft-model-path (\S+)", line).group(1) for line in launches]
    assert drafts == [f"{tiny}/draft_final", f"{tiny}/draft_edge", f"{tiny}/draft_bad"]
    assert all((Path(d) / "config.json").is_file() for d in drafts)
    # the two pristine starts carry only the weights fixture; the third the whole set
    assert [line.split(" launch --patches ")[1].split()[0] for line in launches][:2] == ["dummy_init_normal"] * 2
    assert "deepseek_v2" in launches[2]


def test_envrespect_runs_one_arm_with_the_patch_and_one_without(dry):
    p = dry("envrespect")
    assert p.returncode == 0, p.stderr
    assert "--env CUDA_DEVICE_MAX_CONNECTIONS=16 " in p.stderr
    launches = {line.split()[1].rstrip(":"): line for line in p.stdout.splitlines() if line.startswith("arm ")}
    assert "engine_env_respect" in launches["respect"] and "nccl_env_log" in launches["respect"]
    assert "engine_env_respect" not in launches["forced"] and "nccl_env_log" in launches["forced"]


_FAKE_BENCH = """#!/usr/bin/env bash
# stands in for `python -m bench ab`: writes the report's nccl_env section the way bench/report.py does
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out"
printf '%s\\n' "## Environment seen by each rank (nccl_env_log)" "" \\
  "- respect start 1: 1 rank line(s)" \\
  "    - \\`sglang-overlay nccl_env tp_rank=0 pp_rank=0 dp_rank=None gpu_id=0 pid=1 CUDA_DEVICE_MAX_CONNECTIONS=$RESPECT NCCL_CUMEM_ENABLE=0\\`" \\
  "- forced start 1: 1 rank line(s)" \\
  "    - \\`sglang-overlay nccl_env tp_rank=0 pp_rank=0 dp_rank=None gpu_id=0 pid=2 CUDA_DEVICE_MAX_CONNECTIONS=8 NCCL_CUMEM_ENABLE=0\\`" \\
  > "$out/report.md"
"""


@pytest.mark.parametrize("respect,rc", [("16", 0), ("8", 1)])
def test_envrespect_checks_each_arms_rank_lines(tiny, sglang_tree, tmp_path, respect, rc):
    fake = tmp_path / "python"
    fake.write_text(_FAKE_BENCH)
    fake.chmod(0o755)
    env = {
        **os.environ,
        "PYTHON": str(fake),
        "TINY": str(tiny),
        "SGL_TREE": str(sglang_tree),
        "OUT": str(tmp_path / "out"),
        "RESPECT": respect,
    }
    env.pop("DRY", None)
    p = subprocess.run(
        ["bash", str(SCRIPT), "envrespect"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == rc, p.stdout + p.stderr
    summary = (tmp_path / "out/envrespect/summary.txt").read_text().splitlines()
    assert summary == [
        f"envrespect: arm respect: want CUDA_DEVICE_MAX_CONNECTIONS=16, rank lines show: "
        f"CUDA_DEVICE_MAX_CONNECTIONS={respect} ",
        "envrespect: arm forced: want CUDA_DEVICE_MAX_CONNECTIONS=8, rank lines show: CUDA_DEVICE_MAX_CONNECTIONS=8 ",
    ]


def test_issue12_steps_use_the_workloads_graph_sizes_and_the_start_as_unit(dry):
    p = dry("hostbisect")
    assert p.returncode == 0, p.stderr
    (good, bad) = [line for line in p.stdout.splitlines() if " launch --set " in line]
    assert "--cuda-graph-bs-decode 1 8 --cuda-graph-bs-prefill 64 128 256 512 768" in bad
    assert "--cuda-graph-max-bs" not in bad and "launch --set full_result_host" in bad
    assert "server starts: 1 throwaway + 6 to " in p.stdout and "(2 arm(s) x 3 to 6 starts" in p.stdout
    assert "candidates: " in p.stdout and "planted_result_host" in p.stdout
    for old in (False, True):
        p = dry("cold", OLD="1" if old else "0")
        (launch,) = [line for line in p.stdout.splitlines() if " launch --set default " in line]
        assert ("--cuda-graph-max-bs 8" in launch) == old and ("--cuda-graph-bs-decode 1 8" in launch) != old
        assert "server starts: 0 throwaway + 1 to 1 measured (1 arm(s) x 1 to 1 starts" in p.stdout


def test_kimi_step_plans_on_the_kimi_width_proxy(dry, kimi):
    p = dry("kimi_plain")
    assert p.returncode == 0, p.stderr
    assert f"--model-path {kimi}/target" in p.stdout and "--mem-fraction-static 0.45" in p.stdout
    assert '"hidden_size": 7168' in (kimi / "target" / "config.json").read_text()


def test_train_steps_plan_each_draft(dry, tiny, kimi):
    plans = []
    for step in ("train", "train_edge"):
        p = dry(step)
        assert p.returncode == 0, p.stderr
        plans += re.findall(
            r"train-draft plan: target (\S+) .*\n  data: (\d+) prompts .* aux ids (\[[0-9, ]+\]).*\n"
            r"  draft: (\S+) .*\n  out: (\S+)",
            p.stdout,
        )
    assert plans == [
        (f"{tiny}/target", "1056", "[0, 1, 2]", f"{tiny}/draft", f"{tiny}/draft_trained"),
        (f"{tiny}/target", "1056", "[0, 1, 4]", f"{tiny}/draft_edge", f"{tiny}/draft_edge_trained"),
    ]
    assert (
        f"--eval-prompts 32 --sequences {tiny}/server_seqs.json --dummy-init normal --dry-run --prompts 1024"
        in p.stderr
    )
    p = dry("kimi_train")
    assert p.returncode == 0, p.stderr
    assert f"train-draft plan: target {kimi}/target (7 layers, hidden 7168, 64 experts" in p.stdout
    assert f"out: {kimi}/draft_trained" in p.stdout and "--prompts 512 --gen-batch 128" in p.stderr
    assert f"greedy tokens of the server's from {kimi}/server_seqs.json (not written yet)" in p.stdout


def test_train_steps_first_ask_the_plain_server_for_its_sequences(dry, tiny, kimi, sglang_tree, plan_out):
    """One device call: the plain server of trained's plain arm (full + dummy_init_normal, the same server args)
    decodes the training, held-out and bench prompts; train-draft then reads that file."""
    p = dry("train")
    assert p.returncode == 0, p.stderr
    seqs, train = p.stdout.split("train-draft plan:")
    assert "server-seqs plan: 1056 bench prompts x 160 greedy tokens from a server started with:" in seqs
    (launch,) = _launches(seqs)
    assert f"--tree {sglang_tree} " in launch and ",dummy_init_normal --log LOG" in launch
    assert f"-- --model-path {tiny}/target --load-format dummy --attention-backend flashinfer" in launch
    assert "--speculative" not in launch and "{'SGLANG_DUMMY_INIT': 'normal'}" in seqs
    assert f"the first 8 at batch 1, the rest 128 at a time; out: {tiny}/server_seqs.json" in seqs
    assert f"from {tiny}/server_seqs.json (not written yet), teacher-forced" in train
    assert not (plan_out / "train").exists() and not (tiny / "server_seqs.json").exists()
    p = dry("kimi_train")
    (launch,) = _launches(p.stdout)
    assert f"-- --model-path {kimi}/target --load-format dummy" in launch and "--mem-fraction-static 0.45" in launch
    assert "server-seqs plan: 544 bench prompts" in p.stdout


def test_kimi_train_takes_carried_sequences_instead_of_a_server_start(dry, tiny, kimi, tmp_path):
    """A device call is 10 minutes and the machine is bare each session: the sequences an earlier session brought
    back (SEQS_FROM) save the proxy's server start; a carried file of another model is not taken."""
    carried = tmp_path / "carried"
    carried.mkdir()
    (carried / "tiny-server_seqs.json").write_text("{}")

    def plan() -> subprocess.CompletedProcess:
        p = dry("kimi_train", fresh=True, SEQS_FROM=str(carried))
        assert p.returncode == 0, p.stderr
        return p

    p = plan()  # only the tiny model's file there: the proxy's server starts
    assert "server-seqs plan: 544 bench prompts" in p.stdout and "(carried)" not in p.stderr
    (carried / "kimi-server_seqs.json").write_text("{}")
    p = plan()
    assert f"server_seqs: using {carried}/kimi-server_seqs.json (carried), no server start" in p.stderr
    assert "server-seqs plan" not in p.stdout and not _launches(p.stdout)
    assert f"--sequences {kimi}/server_seqs.json" in p.stderr


def test_the_long_chain_steps_train_over_5_steps_and_serve_at_5_steps_6_tokens(dry, kimi, plan_out):
    """kimi_train5 trains the proxy's draft config over 5 steps of training-time test into draft5_trained, on
    kimi_train's sequences; kimi_speed5 serves that draft at steps 5 / 6 draft tokens (pristine and full) and
    compares it with kimi_speed's plain decoding run, not a second one."""
    p = dry("kimi_train5")
    assert p.returncode == 0, p.stderr
    assert "5 steps of training-time test" in p.stdout and f"out: {kimi}/draft5_trained" in p.stdout
    assert f"--draft draft --out {kimi}/draft5_trained " in p.stderr and "--steps 5 --prompts 512" in p.stderr
    p = dry("kimi_speed5")
    assert p.returncode == 0, p.stderr
    spec = [x for x in _launches(p.stdout) if "--speculative-algorithm EAGLE3" in x]
    plain = [x for x in _launches(p.stdout) if "--speculative-algorithm" not in x]
    assert len(spec) == 2 and len(plain) == 2
    for x in spec:
        assert f"--speculative-draft-model-path {kimi}/draft5_trained --speculative-draft-load-format safetensors" in x
        assert "--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6 " in x
    assert all(f"--model-path {kimi}/target " in x and "--mem-fraction-static 0.45 " in x for x in spec + plain)
    assert f"--out {plan_out}/kimi_speed5/eagle " in p.stderr and f"--out {plan_out}/kimi_speed/plain " in p.stderr
    assert p.stderr.count("--no-phase-timing --metric tok_s_b1") == 2


def test_draft_check_compares_both_targets_on_the_gpu(dry, tiny, kimi, sglang_tree):
    p = dry("draft_check")
    assert p.returncode == 0, p.stderr
    assert (
        f"draft_check: apply --set full + dummy_init_normal to {sglang_tree}; compare the targets of {tiny} and {kimi} on cuda"
        in p.stdout
    )


def _launches(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.search(r" launch --(patches|set) ", line)]


def test_trained_steps_serve_the_trained_draft_with_its_weights(dry, tiny, kimi):
    p = dry("trained")
    assert p.returncode == 0, p.stderr
    spec = [x for x in _launches(p.stdout) if "--speculative-algorithm EAGLE3" in x]
    plain = [x for x in _launches(p.stdout) if "--speculative-algorithm" not in x]
    assert len(spec) == 3 and len(plain) == 2  # none, full, oea3 with the draft; full and oea3 plain
    for x in spec:
        assert f"--speculative-draft-model-path {tiny}/draft_trained --speculative-draft-load-format safetensors " in x
        assert "load-format dummy --speculative-algorithm" in x  # the target keeps its dummy_init_normal weights
    assert "server starts: 0 throwaway + 3 to 3 measured (3 arm(s) x 1 to 1 starts" in p.stdout
    assert p.stderr.count("--arm-env oea3:SGLANG_OEA_K0=3") == 2  # OEA's plain reference routes as it does
    for step, n in (("kimi_trained", 2), ("kimi_plain", 2)):
        p = dry(step)
        assert p.returncode == 0, p.stderr
        assert all(
            f"--model-path {kimi}/target " in x and "--mem-fraction-static 0.45 " in x for x in _launches(p.stdout)
        )
        assert f"server starts: 0 throwaway + {2 * n} to {2 * n} measured ({n} arm(s) x 2 to 2 starts" in p.stdout


_RECORDING_PYTHON = """#!/usr/bin/env bash
echo "$@" >> "$CALLS"
"""


def test_trained_step_without_a_trained_draft_stops_before_any_start(tiny, sglang_tree, tmp_path):
    fake = tmp_path / "python"
    fake.write_text(_RECORDING_PYTHON)
    fake.chmod(0o755)
    env = {
        **os.environ,
        "PYTHON": str(fake),
        "TINY": str(tiny),
        "SGL_TREE": str(sglang_tree),
        "OUT": str(tmp_path / "o"),
        "CALLS": str(tmp_path / "calls"),
    }
    env.pop("DRY", None)
    p = subprocess.run(["bash", str(SCRIPT), "trained"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and f"no trained draft in {tiny}/draft" in p.stderr, p.stderr
    assert "run gpu_runs.sh train, train_edge (tiny) or kimi_train first" in p.stderr
    assert not (tmp_path / "calls").exists()


@pytest.mark.parametrize("content, resumed", [("", False), ('{"type": "run"}\n', True)])
def test_a_step_resumes_only_a_store_with_records(tiny, sglang_tree, tmp_path, content, resumed):
    # bench ab's run lock creates results.jsonl before the run record: a step that died in between leaves it
    # empty, and `--resume` of an empty store is exit 2, so the next call would not measure at all
    fake = tmp_path / "python"
    fake.write_text(_RECORDING_PYTHON)
    fake.chmod(0o755)
    (tmp_path / "o/null42").mkdir(parents=True)
    (tmp_path / "o/null42/results.jsonl").write_text(content)
    env = {
        **os.environ,
        "PYTHON": str(fake),
        "TINY": str(tiny),
        "SGL_TREE": str(sglang_tree),
        "OUT": str(tmp_path / "o"),
        "CALLS": str(tmp_path / "calls"),
        "PROJ42": str(tmp_path / "proj42"),
    }
    env.pop("DRY", None)
    p = subprocess.run(["bash", str(SCRIPT), "null42"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    call = (tmp_path / "calls").read_text()
    assert "bench ab" in call and ("--resume" in call) == resumed, call


def test_kimi_speed5_takes_its_arms_and_each_side_s_starts(dry, kimi, plan_out):
    """EAGLE's batch-1 tok/s varied 8-10 % from start to start, plain decoding's 0.7 %: the ratio's interval needs
    more EAGLE starts than plain ones, and a short device budget may keep the full set only."""
    env = {"SPEED_ARMS": "full=full+dummy_init_normal", "EMAXS": "7", "PMAXS": "3"}
    p = dry("kimi_speed5", **env)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("--arms full=full+dummy_init_normal --no-phase-timing") == 2
    eagle, plain = [x for x in p.stderr.splitlines() if "-m bench ab " in x]
    assert "--restarts 7 --max-starts 7 " in eagle and f"--out {plan_out}/kimi_speed5/eagle " in eagle
    assert "--restarts 3 --max-starts 3 " in plain and f"--out {plan_out}/kimi_speed/plain " in plain
    assert "1 arm(s) x 7 to 7 starts" in p.stdout and "1 arm(s) x 3 to 3 starts" in p.stdout


def test_successor_steps_use_their_own_model_dirs_and_tell_train_draft(dry, kimi):
    """DINIT=successor (bench/dummy_init.py): the proxy's server draws the successor weights, from a model dir of
    its own (a normal dir's sequences and drafts are another model's), and train-draft's reference draws the same;
    kimi_seqs is the sequences alone (a bare machine's cold start and the training do not fit one device call)."""
    p = dry("kimi_seqs", DINIT="successor")
    assert p.returncode == 0, p.stderr
    (launch,) = _launches(p.stdout)
    assert f"-- --model-path {kimi}-successor/target --load-format dummy" in launch
    assert "{'SGLANG_DUMMY_INIT': 'successor'}" in p.stdout and "train-draft" not in p.stderr
    assert f"out: {kimi}-successor/server_seqs.json" in p.stdout
    p = dry("kimi_train5", DINIT="successor")
    assert p.returncode == 0, p.stderr
    assert "--dummy-init successor" in p.stderr and f"out: {kimi}-successor/draft5_trained" in p.stdout
    assert "successor dummy weights at std 0.02, embeddings at 1" in p.stdout
    p = dry("kimi_speed5", DINIT="successor")
    assert p.returncode == 0, p.stderr
    assert all(f"--model-path {kimi}-successor/target " in x for x in _launches(p.stdout))
    assert "--env SGLANG_DUMMY_INIT=successor" in p.stderr and "SGLANG_DUMMY_INIT=normal" not in p.stderr
    p = dry("kimi_seqs", DINIT="uniform")
    assert p.returncode == 2 and "DINIT=uniform: normal or successor" in p.stderr


def test_oea_arm_adds_oea_at_k0_3_to_the_eagle_side_only(dry, kimi):
    """OEA_ARM=1: on the successor weights OEA's routing change is expected not to flip a greedy choice, so its
    draft would be accepted and its verify saving measured; plain decoding is held to plain full, not with OEA."""
    env = {"DINIT": "successor", "OEA_ARM": "1", "SPEED_ARMS": "full=full+dummy_init_normal"}
    p = dry("kimi_speed5", **env)
    assert p.returncode == 0, p.stderr
    eagle, plain = [x for x in p.stderr.splitlines() if "-m bench ab " in x]
    assert "--arms full=full+dummy_init_normal oea3=full+dummy_init_normal --arm-env oea3:SGLANG_OEA_K0=3 " in eagle
    assert (
        "SGLANG_OEA" not in plain and "oea3" not in plain and "--arms full=full+dummy_init_normal --no-phase" in plain
    )
    assert "2 arm(s) x 3 to 3 starts" in p.stdout and "1 arm(s) x 3 to 3 starts" in p.stdout
    assert "SGLANG_OEA" not in dry("kimi_speed5", DINIT="successor").stderr


def test_kimi_seqs_plans_one_normal_server_of_the_proxy(dry, kimi, sglang_tree):
    """kimi_seqs with DINIT unset: kimi_train's server-seqs call alone, on the proxy's own (normal) dir."""
    p = dry("kimi_seqs")
    assert p.returncode == 0, p.stderr
    (launch,) = _launches(p.stdout)
    assert f"--tree {sglang_tree} " in launch and f"-- --model-path {kimi}/target --load-format dummy" in launch
    assert "--mem-fraction-static 0.45 " in launch and "server-seqs plan: 544 bench prompts" in p.stdout
    assert "{'SGLANG_DUMMY_INIT': 'normal'}" in p.stdout and f"out: {kimi}/server_seqs.json" in p.stdout
    assert "train-draft" not in p.stderr
