#!/usr/bin/env bash
# The recorded GPU runs, one H200 (tp2: two). Each step is one or more `python -m bench` commands guarded by
# --time-budget; results go to $OUT/<step>/ and belong in bench/results/<date>-<gpu>/ afterwards.
#
# Issue 12 (the start is the unit; adaptive starts; throwaway first start; confirmation before a culprit):
#   importtime   what the 51 s of two processes importing sglang are: python -X importtime of the scheduler's
#                imports, from /tmp/site and from a copy in /dev/shm (is it the disk?)
#   cold         the machine's first start (FlashInfer JIT, Triton, graph capture): its seconds, recorded
#   warm         two single starts on a warm machine (the second with the bench's bytecode cache filled)
#   oldargs      one warm start with the graph arguments of the earlier records: the "before" of the start time
#   variance     one set, three arms (CPU placement spread twice: a null pair; none): start-to-start CV
#   moe          bisect default -> full + planted_moe_gpu (a GPU-side delay in every routing call: the
#                regression the old bench blamed on oea_topk); reuses variance's starts of the default set
#   kimi_moe     the same bisect on the Kimi-width proxy (KIMI model dir), GPU-bound regime
#   profiling    eagle_profiling on / applied but off / not applied
#   kimi_profiling  eagle_profiling on / applied but off / not applied on the Kimi-width proxy (run7: host-bound too)
#   profhost     eagle_profiling on / not applied, 3 starts each, with the host-speed covariate (bench.hostprobe)
#   hostprobe    one set, two arms (a null pair), 4 starts each, with bench.hostprobe beside every start: does the
#                host's speed track the slow stretches, and what is the start-to-start CV at a fixed host speed?
#   schedprobe   the probe on the scheduler's own CPU (--host-probe-at scheduler): base against full_result_host
#                (its plant at PLANT_US, 400 us), REPS repetitions a start: does the step track its own vCPU's speed?
#   schednull    the default set twice (a null pair) and full_result_host, MAXS (5) starts each, interleaved, the
#                probe on the scheduler's CPU: >= 9 starts of one set, the CV raw, adjusted and in the host's fast
#                state (report --adjust host, --adjust state), a null and a plant
#   stateab      ab default against full_result_host read in the fast state (--adjust state), 4 to MAXS (12)
#                starts a side: the schednull plant with the new reading driving the adaptive starts
#   statebisect  bisect default -> full_result_host (its plant at PLANT_US) read in the host's fast state
#                (--host-probe-at scheduler --adjust state): the planted-regression target on the new reading
#   hostcov      the covariates' validation: the probe's overhead in 12 ABBA rounds (a verdict), then a null pair
#                of the default set with the probe and the kernel's counters per repetition, 3 starts each (MAXS
#                a second call resumes one the time budget stopped), and the report read four ways (--adjust)
# The duet design (bench/duet.py: both arms' servers live at once, repetitions in ABBA order, the per-duet ratio
# the unit), for run7's machine-wide slow stretches that sequential starts cannot cancel; DUET_TREE is the second
# sglang tree (gpu_device.sh: the other of /tmp/site and its embedded tree), DUET_MEMF each server's share:
#   duet         tiny model, a null pair of the default set: the duet-to-duet CV of the ratio beside each arm's
#                start-to-start CV (the report shows both ratios, of medians and of adjacent pairs)
#   duet_profiling  tiny model, eagle_profiling on against not applied, by duets
#   duet_off     tiny model, eagle_profiling applied but off against not applied (issue 16: "within noise")
# The block design (bench/blocks.py: every arm of a round live at once on one GPU, each on a pristine tree the bench
# makes from the pinned wheel, all on the same CPUs, --sleep-on-idle, short repetitions served round by round;
# a fixed KV pool, BLOCK_TOKENS): the noise probe (bench/results/2026-12-03-h200-noise) found each vCPU's speed its
# own, so a block shares one vCPU between its arms instead of one moment between two halves of the CPUs:
#   blocks_profiling  tiny model, four arms in every block: eagle_profiling not applied (the reference), on,
#                applied but off, and a null arm (not applied again, a harmless env): issue 16's "< 3 %" and
#                "off = not applied", and a null comparison, in the same blocks
#   blocks_ablate  tiny model, ablate --mode leave-out of full_result_host (planted_result_host: a host-side
#                delay in the scheduler's result processing, outside every EAGLE phase) against default: every
#                leave-one-out in one block with the full set and the base; the mover confirmed alone
#   blocks_moe   the same for full_moe_gpu (a GPU-side delay in every routing call, captured into the graphs)
#                PAIRS=1: --block-pairs (one block per comparison, two servers each) for the three blocks_ steps
# Issue 16: envrespect (a user-set CUDA_DEVICE_MAX_CONNECTIONS with and without engine_env_respect at TP1).
# Issue 17 (drafts that agree: bench train-draft trains them against the dummy_init_normal target):
#   train        the tiny model's draft (aux ids 0,1,2); train_edge its draft_edge (0,1,4: the final layer's output);
#                each first asks one plain server for its greedy continuations (bench server-seqs), then trains on them
#   kimi_train   the Kimi-width proxy's draft, the same way
#   draft_check  SGLang's own DummyModelLoader on this GPU (full + dummy_init_normal applied to the tree) against
#                train-draft's reconstruction, parameter by parameter, for both targets
#   trained      tiny, accepted runs: none / full / OEA K0=3 with the trained draft, then plain decoding, one start
#                each; trained/summary.md: accept length, tok/s x plain, outputs = plain (bench.draft_compare)
#   trained_speed  tiny, full with the trained draft vs plain decoding, three starts each
#   trained_edge tiny, the trained edge draft (deepseek_v2's final-layer capture) and fp8 KV (flashinfer_mla)
#                over accepted runs, against trained's plain outputs
#   kimi_trained Kimi-width, full and OEA K0=3 with the trained draft, two starts each
#   kimi_plain   Kimi-width plain decoding, two starts, then kimi_trained/summary.md
#   kimi_null    Kimi-width, the full set with the trained draft twice (a null pair), MAXS (5) starts each,
#                interleaved, the probe on the scheduler's CPU: issue 12's Kimi-width start-to-start CV over >= 9
#                starts of one set, and a null comparison, read raw and in the host's fast state
#   kimi_statebisect  issue 12's planted-regression target on the Kimi-width proxy with its trained draft: bisect
#                default -> full_moe_gpu (a GPU-side delay in every routing call), both with dummy_init_normal (the
#                weights the draft was trained against), read in the host's fast state, up to MAXS (12) starts a
#                side (simulated on kimi_null's starts: 96 % named at 12, bench/results/simulate/kimi-record.md)
#   kimi_speed   issue 17's 1.5x on the proxy: EAGLE-3 with the trained draft and plain decoding, pristine
#                (dummy_init_normal only) and the full set, 3 starts each, no phase timing in either (the EAGLE
#                arms of kimi_trained ran with it, the plain ones without), then kimi_speed/summary.md
#   kimi_seqs    kimi_train's sequences only (bench server-seqs): a bare machine's cold start, without training
#   kimi_train5  the proxy's draft trained over 5 steps of training-time test (kimi_train's sequences)
#   kimi_speed5  kimi_speed with that draft at steps 5 / 6 draft tokens (a perfect draft then yields 6 tokens a
#                step, not 4, for a verify over 6 tokens), against kimi_speed's plain decoding; OEA_ARM=1 adds
#                EAGLE-3 with OEA at K0=3 (expected to be accepted on the successor weights, DINIT=successor)
#   kimi_stateprof  issue 16's eagle_profiling on / applied but off / not applied on the same proxy and draft,
#                read in the host's fast state (its CV 2.0 % in kimi_null): "< 3 %" and "off = not applied"
# Earlier issues' steps (same commands, the new method): ablate, bisect, oea, tp2, validate, plain, edge,
# before, fp8, fp8plain.
#
# DRY=1 prints the plan (sets, launch commands, number of starts) without starting anything.
set -euo pipefail
step=${1:?usage: gpu_runs.sh importtime|cold|warm|oldargs|variance|moe|kimi_moe|profiling|kimi_profiling|profhost|hostprobe|schedprobe|schednull|stateab|statebisect|hostcov|duet|duet_profiling|duet_off|blocks_profiling|blocks_ablate|blocks_moe|envrespect|train|train_edge|kimi_train|draft_check|trained|trained_speed|trained_edge|kimi_trained|kimi_plain|kimi_null|kimi_statebisect|kimi_stateprof|kimi_speed|kimi_seqs|kimi_train5|kimi_speed5|inpatch|hostbisect|null42|ablate|bisect|oea|tp2|validate|plain|edge|before|fp8|fp8plain}
OUT=${OUT:-bench/results/manual}
PY=${PYTHON:-python}
BUDGET=${BUDGET:-500}
# The tree the tool patches: the sglang installed in this interpreter (site-packages), found without importing it.
SGL_TREE=${SGL_TREE:-$($PY -c "import importlib.util as u,os;print(os.path.dirname(os.path.dirname(u.find_spec('sglang').origin)))")}
TINY=${TINY:-/tmp/tiny}
DUET_TREE=${DUET_TREE:-}
KIMI=${KIMI:-/tmp/kimi}
# DINIT=successor: the targets' dummy weights follow a fixed successor of the last token by many logits
# (bench/dummy_init.py; normal's greedy text parts with any rounding within a few tokens); their model dirs are
# their own (TINY-successor, KIMI-successor), so a normal dir's sequences and drafts are never taken for them
DINIT=${DINIT:-normal}
case "$DINIT" in
  normal) ;;
  successor) TINY=$TINY-$DINIT; KIMI=$KIMI-$DINIT ;;
  *) echo "gpu_runs.sh: DINIT=$DINIT: normal or successor" >&2; exit 2 ;;
esac
# (re)written when a dir is missing: an older tinymodel wrote fewer drafts
for d in target draft draft_edge draft_final draft_bad; do
  [ -f "$TINY/$d/config.json" ] || { $PY -m bench tinymodel "$TINY" >/dev/null; break; }
done
# every step uses the fixture manifest (the project's plus the plants), so one tree serves them all in any order
PLANTED=tests/bench/planted/manifest.yaml
DI=(--env SGLANG_DUMMY_INIT=$DINIT)
DSTD=$( [ "$DINIT" = successor ] && echo successor:0.02 || echo 0.02 )  # sglang_model_check's --stds
# CUDA graphs for the batch sizes the workload runs and nothing else: decode at 1 (b1 phase) and 8 (--concurrency 8;
# smaller tail batches pad to 8, and only entries of exactly 1 and 8 are read), prefill at token counts covering
# its prompts (56-100 tokens each, 605 for all eight). SGLang's defaults capture decode 1, 2, 4, 8 and about 48
# prefill sizes up to 2048 tokens, several times over for EAGLE's draft: start-up time, not measured time.
GRAPHS=(--cuda-graph-bs-decode 1 8 --cuda-graph-bs-prefill 64 128 256 512 768)
# what the issue-6 and issue-3 records ran with (the "before" of the start-up figure)
OLD_GRAPHS=(--cuda-graph-max-bs 8)
[ "${OLD:-}" = 1 ] && GRAPHS=("${OLD_GRAPHS[@]}")
# The Kimi-width proxy's memory fraction is its own: gpu_device.sh exports MEMF=0.6 for a one-stream call, and an
# EAGLE-3 server of the proxy ran out of memory at 0.7 (issue 12); 0.45 is what its runs were measured with.
# Tiny DeepSeek-V3 target + EAGLE-3 draft (steps 3, topk 1, 4 draft tokens), dummy weights; decode-log-interval 8
# so every phase has many step-time entries.
spec_args() {  # MODEL_DIR MEMF: EAGLE-3 server args into SA
  SA=(--model-path "$1/target" --load-format dummy --speculative-algorithm EAGLE3
      --speculative-draft-model-path "$1/draft" --speculative-draft-load-format dummy
      --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
      --attention-backend flashinfer "${GRAPHS[@]}" --decode-log-interval 8 --disable-radix-cache
      --skip-server-warmup --mem-fraction-static "$2" --port "${PORT:-30000}")
}
spec_args "$TINY" "${MEMF:-0.6}"
# The same model without speculative decoding (the lossless reference for EAGLE-3's greedy output).
PLAIN=(--model-path "$TINY/target" --load-format dummy --attention-backend flashinfer "${GRAPHS[@]}"
       --decode-log-interval 8 --disable-radix-cache --skip-server-warmup --mem-fraction-static "${MEMF:-0.6}"
       --port "${PORT:-30000}")
# The method (bench defaults): 3 starts per arm first, adaptive up to MAXS, one throwaway start per invocation.
M=(--tree "$SGL_TREE" --restarts 3 --max-starts "${MAXS:-6}" --reps-per-start "${REPS:-5}" --warmup-reps "${WREPS:-2}" --max-new-tokens 128
   --b1-requests 2 --concurrency 8 --time-budget "$BUDGET" ${DRY:+--dry-run})
# Issue 3's correctness runs: one start per arm, short outputs; greedy hashes and counters, not timings.
# No throwaway start: these read outputs and counters, not timings.
C=(--tree "$SGL_TREE" --restarts 1 --max-starts 1 --reps-per-start 2 --warmup-reps 1 --no-warmup-start
   --max-new-tokens 64 --b1-requests 2 --concurrency 8 --time-budget "$BUDGET" ${DRY:+--dry-run})
run() { echo "+ $*" >&2; "$@"; }
# Issue 17's runs: no throwaway start (the steps before warmed the machine; a start's time is not measured) and
# 128 new tokens, the length train-draft's reference hash and its held-out accept length are computed for.
TR=(--tree "$SGL_TREE" --max-new-tokens 128 --b1-requests 2 --concurrency 8 --reps-per-start "${REPS:-3}"
    --warmup-reps "${WREPS:-2}" --no-warmup-start --time-budget "$BUDGET" ${DRY:+--dry-run})
# The server's own greedy continuations of the bench's prompts (bench/server_seqs.py): one plain server of the
# full set with dummy_init_normal (trained's plain arm), the bench's 8 prompts at batch 1, the rest 128 at a
# time. The reference's continuations part from the server's bf16 ones (gpu5: in-server accept 1.19 against a
# simulated 4.0), so the draft trains on these. Kept in MODEL_DIR/server_seqs.json for the model's other drafts
# (SEQS_REGEN=1 makes it again); a copy comes back in $OUT/train/.
server_seqs() {  # MODEL_DIR PROMPTS SERVER_ARGS...
  local dir=$1 n=$2; shift 2
  # SEQS_FROM=DIR: a sequences file an earlier session brought back (DIR/<model dir's name>-server_seqs.json,
  # carried to the device) instead of a server start; train-draft --sequences checks it is this model's
  local carried=${SEQS_FROM:+$SEQS_FROM/$(basename "$dir")-server_seqs.json}
  if [ -n "$carried" ] && [ -f "$carried" ] && [ ! -f "$dir/server_seqs.json" ]; then
    echo "server_seqs: using $carried (carried), no server start" >&2
    [ -n "${DRY:-}" ] && return 0
    # beside, then renamed: a kill mid-copy must not leave a cut file that the next call would reuse
    cp "$carried" "$dir/.server_seqs.json.tmp" && mv -f "$dir/.server_seqs.json.tmp" "$dir/server_seqs.json"
  fi
  if [ -z "${DRY:-}" ] && [ -f "$dir/server_seqs.json" ] && [ "${SEQS_REGEN:-}" != 1 ]; then
    echo "server_seqs: reusing $dir/server_seqs.json (SEQS_REGEN=1 makes it again)" >&2; return 0
  fi
  run $PY -m bench server-seqs "$dir" --out "$dir/server_seqs.json" --prompts "$n" --new-tokens 160 --concurrency 128 \
    --manifest $PLANTED --tree "$SGL_TREE" --set full+dummy_init_normal "${DI[@]}" --log-dir "$OUT/train/raw" \
    ${DRY:+--dry-run} -- "$@"
  [ -n "${DRY:-}" ] || { mkdir -p "$OUT/train"; cp "$dir/server_seqs.json" "$OUT/train/$(basename "$dir")-server_seqs.json"; }
}
# train-draft for one draft config of a model dir on the server's sequences (bench/train_draft.py; its
# defaults are the GPU's), after server_seqs
train_draft() {  # MODEL_DIR DRAFT [--out DIR] EXTRA...: the copy that comes back is train/<model>-DRAFT.json
  local dir=$1 draft=$2 out=$1/${2}_trained name=$2; shift 2
  [ "${1:-}" = --out ] && { out=$2; name=$(basename "$2"); name=${name%_trained}; shift 2; }
  run $PY -m bench train-draft "$dir" --draft "$draft" --out "$out" --eval-prompts 32 --sequences "$dir/server_seqs.json" \
    --dummy-init "$DINIT" ${DRY:+--dry-run} "$@"
  [ -n "${DRY:-}" ] || { mkdir -p "$OUT/train"; cp "$out/train.json" "$OUT/train/$(basename "$dir")-$name.json"; }
}
# ARGS = the array named ARRAY with the value after each FLAG replaced
replace_args() {  # ARRAY FLAG=VALUE...
  local -n src=$1; shift
  local prev= a kv
  ARGS=()
  for a in "${src[@]}"; do
    for kv in "$@"; do [ "$prev" = "${kv%%=*}" ] && a=${kv#*=}; done
    ARGS+=("$a"); prev=$a
  done
}
# SA with MODEL_DIR/DRAFT_trained served with its weights (not --speculative-draft-load-format dummy), into ARGS
with_trained() {  # MODEL_DIR DRAFT
  local dir=$1/${2}_trained
  [ -n "${DRY:-}" ] || [ -f "$dir/model.safetensors" ] || {
    echo "no trained draft in $dir: run gpu_runs.sh train, train_edge (tiny) or kimi_train first" >&2; exit 2; }
  replace_args SA --speculative-draft-model-path="$dir" --speculative-draft-load-format=safetensors
}
compare() {  # RUN_DIR_PLAIN TRAIN_JSON SUMMARY RUN_DIR_EAGLE...
  local plain=$1 tj=$2 summary=$3 d; shift 3
  [ -n "${DRY:-}" ] && return 0
  [ -s "$plain/results.jsonl" ] || { echo "no plain decoding run in $plain to compare with: run its step first" >&2; return 0; }
  local e=(); for d in "$@"; do e+=(--eagle "$d"); done
  run $PY -m bench.draft_compare --plain "$plain" "${e[@]}" --train-json "$tj" --out "$summary" \
    ${TARGET_RATIO:+--target-ratio "$TARGET_RATIO"}
}
# SA with another of bench/tinymodel.py's drafts, into ARGS
with_draft() { ARGS=(); for a in "${SA[@]}"; do [ "$a" = "$TINY/draft" ] && a=$TINY/$1; ARGS+=("$a"); done; }
# one start of the default set, for its start-up record only (1 repetition)
one_start() {  # NAME EXTRA_BENCH_ARGS... -- SERVER_ARGS...
  local name=$1; shift
  run $PY -m bench ab --manifest $PLANTED --arms "$name=default" --tree "$SGL_TREE" --restarts 1 --max-starts 1 --reps-per-start 1 \
    --warmup-reps 0 --max-new-tokens 64 --b1-requests 2 --concurrency 8 --time-budget "$BUDGET" \
    ${DRY:+--dry-run} --out "$OUT/startup/$name" "$@"
}
# the Kimi-width proxy's model dir (written once per machine)
kimi_dir() { [ -f "$KIMI/target/config.json" ] || $PY -m bench tinymodel "$KIMI" --profile kimi-width >/dev/null; }
# SA for the proxy with its trained draft (kimi_train first), into ARGS
kimi_trained_args() { kimi_dir; spec_args "$KIMI" "${KIMI_MEMF:-0.45}"; with_trained "$KIMI" draft; }
# RESUME = --resume DIR when DIR holds a store: a second call goes on where the time budget stopped the run
# the proxy with the draft trained over 5 steps (kimi_train5), served at steps 5 and 6 draft tokens, into ARGS
kimi_long_args() {
  kimi_dir; spec_args "$KIMI" "${KIMI_MEMF:-0.45}"; with_trained "$KIMI" draft5
  local long=("${ARGS[@]}")
  replace_args long --speculative-num-steps=5 --speculative-num-draft-tokens=6
}
# issue 17's speed runs: EAGLE-3 (ARGS) then plain decoding (kimi_speed/plain, shared by both steps), pristine
# (dummy_init_normal only) and the full set (SPEED_ARMS: others), 3 starts each (EMAXS / PMAXS: EAGLE's / plain's;
# EAGLE's tok/s varied 8-10 % from start to start in kimi_null, plain's 0.7 % in kimi_plain, so the ratio's
# interval needs more EAGLE starts), neither timing phases; the plain run gets what the EAGLE run left of the call
# (a later --time-budget wins); then STEP/summary.md
speed_pair() {  # STEP EAGLE_DIR TRAIN_JSON
  local step=$1 eagle=$2 tj=$3 kind run_dir left t0 n extra spec=("${ARGS[@]}")
  local arms=(${SPEED_ARMS:-none=dummy_init_normal full=full+dummy_init_normal})
  t0=$(date +%s)
  # OEA_ARM=1: EAGLE-3 with OEA at K0=3 as well (the full set, held against plain full): on the successor weights
  # its routing change is expected not to flip a greedy choice (a margin of several logit SDs), so its draft is
  # accepted and its verify saving can be measured
  local oea=(); [ "${OEA_ARM:-}" = 1 ] && oea=(oea3=full+dummy_init_normal --arm-env oea3:SGLANG_OEA_K0=3 --env SGLANG_OEA_STATS=1)
  for kind in eagle plain; do
    run_dir=$eagle; ARGS=("${spec[@]}"); n=${EMAXS:-${MAXS:-3}}; extra=("${oea[@]}")
    [ "$kind" = plain ] && { replace_args PLAIN --model-path="$KIMI/target" --mem-fraction-static="${KIMI_MEMF:-0.45}"; run_dir=$OUT/kimi_speed/plain; n=${PMAXS:-${MAXS:-3}}; extra=(); }
    resume_from "$run_dir"
    left=$(( BUDGET - ($(date +%s) - t0) ))
    [ "$left" -lt 120 ] && { echo "$step: ${left}s left, $kind not started: call the step again" >&2; exit 0; }
    run $PY -m bench ab --manifest $PLANTED --arms "${arms[@]}" "${extra[@]}" \
      --no-phase-timing --metric tok_s_b1 "${DI[@]}" "${TR[@]}" --time-budget "$left" --restarts "$n" \
      --max-starts "$n" "${RESUME[@]}" --out "$run_dir" -- "${ARGS[@]}"
  done
  TARGET_RATIO=1.5 compare "$OUT/kimi_speed/plain" "$tj" "$OUT/$step/summary.md" "$eagle"  # issue 17's target
}
resume_from() { RESUME=(); [ -s "$1/results.jsonl" ] && RESUME=(--resume "$1"); return 0; }
# the runs read in the host's fast state on the proxy (bench.hoststate; after kimi_train)
KS=(--host-probe --host-probe-at scheduler --adjust state --tree "$SGL_TREE" --restarts 3 --reps-per-start "${REPS:-5}"
    --warmup-reps "${WREPS:-2}" --max-new-tokens 128 --b1-requests 2 --concurrency 8 --time-budget "$BUDGET"
    ${DRY:+--dry-run})
case "$step" in
  importtime)
    [ -n "${DRY:-}" ] && { echo "importtime: no server"; exit 0; }
    mkdir -p "$OUT/importtime"
    imp="import sglang.launch_server, sglang.srt.managers.scheduler"
    for i in 1 2; do  # the first pass may still write bytecode
      TIMEFORMAT="site pass $i: %R s wall"
      time $PY -X importtime -c "$imp" 2> "$OUT/importtime/site-$i.txt" || true
    done
    rm -rf /dev/shm/site && cp -a "$SGL_TREE" /dev/shm/site
    TIMEFORMAT="same imports from /dev/shm: %R s wall"
    time env PYTHONPATH=/dev/shm/site $PY -X importtime -c "$imp" 2> "$OUT/importtime/shm.txt" || true
    # the 25 slowest modules (cumulative microseconds) of the second pass
    sort -t'|' -k2 -n -r "$OUT/importtime/site-2.txt" | head -25 | tee "$OUT/importtime/top25.txt" ;;
  cold)
    # the machine's first start (FlashInfer JIT, Triton, page cache): what a throwaway start absorbs
    one_start cold --no-warmup-start -- "${SA[@]}" ;;
  warm)
    # warm starts alone, on a machine that has served starts: issue 12's "<= 20 s"; two, since the first may
    # still compile this tree's bytecode into the bench's cache (bench.runner.bytecode_env)
    one_start warm1 --no-warmup-start -- "${SA[@]}"
    one_start warm2 --no-warmup-start -- "${SA[@]}" ;;
  oldargs)
    # a warm start with the graph arguments of the earlier records: the "before" of issue 12's <= 20 s target
    GRAPHS=("${OLD_GRAPHS[@]}"); spec_args "$TINY" "${MEMF:-0.6}"
    one_start before --no-warmup-start -- "${SA[@]}" ;;
  variance)
    # Start-to-start variance of one set: CPU placement spread (two arms: a null pair, 10 starts of one
    # configuration between them) against none. Every arm carries the same patches.
    # NONE=0 leaves the `none` arm out (a session's budget holds about 10 measured starts: the null pair first).
    ARMS=(spread=default null=default --arm-env null:BENCH_NULL=1)
    [ "${NONE:-1}" = 1 ] && ARMS=(spread=default null=default none=default --arm-env null:BENCH_NULL=1
                                  --arm-env none:BENCH_CPU_PLACEMENT=none)
    run $PY -m bench ab --manifest $PLANTED --arms "${ARMS[@]}" \
      "${M[@]}" --restarts "${VRESTARTS:-4}" --max-starts "${VMAXS:-5}" --out "$OUT/variance" -- "${SA[@]}" ;;
  moe)
    # The regression issue 12's bench blamed on oea_topk: a GPU-side delay in select_experts, captured into the
    # CUDA graphs, in another file. Candidates: oea_topk (K0 unset: off), nccl_env_log, planted_moe_gpu.
    V=$OUT/variance/results.jsonl
    run $PY -m bench bisect --manifest $PLANTED --good default --bad full_moe_gpu ${REUSE:+--reuse "$REUSE"} \
      $( [ -f "$V" ] && [ ! -d "$OUT/moe" ] && echo "--reuse $V" ) "${M[@]}" --out "$OUT/moe" -- "${SA[@]}" ;;
  kimi_moe)
    # The same on the Kimi-width proxy (bench tinymodel --profile kimi-width): GPU-bound, verify >> decode.
    kimi_dir
    spec_args "$KIMI" "${KIMI_MEMF:-0.45}"
    run $PY -m bench bisect --manifest $PLANTED --good default --bad full_moe_gpu \
      "${M[@]}" --out "$OUT/kimi_moe" -- "${SA[@]}" ;;
  train|train_edge)
    # One device call: a warm server start (~85 s on the H200; a machine's first start ~450 s: run `cold` or
    # another server step first), ~20 s of generation, then training (features ~10 s, --train-seconds 150)
    server_seqs "$TINY" $(( ${TRAIN_PROMPTS:-1024} + 32 )) "${PLAIN[@]}"
    train_draft "$TINY" "$( [ "$step" = train ] && echo draft || echo draft_edge )" --prompts "${TRAIN_PROMPTS:-1024}" \
      --gen-batch 128 --train-seconds "${TRAIN_S:-150}" ;;
  kimi_train)
    kimi_dir
    replace_args PLAIN --model-path="$KIMI/target" --mem-fraction-static="${KIMI_MEMF:-0.45}"
    server_seqs "$KIMI" $(( ${TRAIN_PROMPTS:-512} + 32 )) "${ARGS[@]}"
    train_draft "$KIMI" draft --prompts "${TRAIN_PROMPTS:-512}" --gen-batch 128 --train-seconds "${TRAIN_S:-200}" ;;
  kimi_seqs)
    # kimi_train's sequences alone: a bare machine's first start (JIT, 330-460 s) and the training do not fit one
    # device call together
    kimi_dir
    replace_args PLAIN --model-path="$KIMI/target" --mem-fraction-static="${KIMI_MEMF:-0.45}"
    server_seqs "$KIMI" $(( ${TRAIN_PROMPTS:-512} + 32 )) "${ARGS[@]}" ;;
  kimi_train5)
    # the same draft config trained over 5 steps of training-time test (kimi_speed5 serves it at steps 5), on the
    # same sequences (kimi_train's, or SEQS_FROM's)
    kimi_dir
    replace_args PLAIN --model-path="$KIMI/target" --mem-fraction-static="${KIMI_MEMF:-0.45}"
    server_seqs "$KIMI" $(( ${TRAIN_PROMPTS:-512} + 32 )) "${ARGS[@]}"
    train_draft "$KIMI" draft --out "$KIMI/draft5_trained" --steps 5 --prompts "${TRAIN_PROMPTS:-512}" \
      --gen-batch 128 --train-seconds "${TRAIN_S:-200}" ;;
  draft_check)
    # the CUDA generator's values: the CPU tests prove the same code on the CPU's (tests/bench/test_train_draft.py)
    kimi_dir
    SGL_PY=$SGL_TREE; [ -d "$SGL_TREE/python/sglang" ] && SGL_PY=$SGL_TREE/python
    if [ -n "${DRY:-}" ]; then
      echo "draft_check: apply --set full + dummy_init_normal to $SGL_TREE; compare the targets of $TINY and $KIMI on cuda"
      exit 0
    fi
    run $PY apply.py --manifest $PLANTED --tree "$SGL_TREE" apply --set full
    run $PY apply.py --manifest $PLANTED --tree "$SGL_TREE" apply dummy_init_normal
    fails=0
    mkdir -p "$OUT/draft_check"
    for m in "$TINY" "$KIMI"; do
      run $PY tests/bench/sglang_model_check.py --device cuda --checks target_weights --stds "${DSTD}" --strict \
        "$SGL_PY" "$m" "$OUT/draft_check/$(basename "$m").json" | tee -a "$OUT/draft_check/summary.txt" || fails=$((fails + 1))
    done
    exit $fails ;;
  trained)
    # Accepted runs on the tiny model: the pristine set, the full set and OEA at K0=3 with the trained draft, then
    # plain decoding (the lossless reference).
    with_trained "$TINY" draft
    run $PY -m bench ab --manifest $PLANTED --arms none=dummy_init_normal full=full+dummy_init_normal \
      oea3=full+dummy_init_normal --arm-env oea3:SGLANG_OEA_K0=3 --env SGLANG_OEA_STATS=1 "${DI[@]}" "${TR[@]}" \
      --restarts 1 --max-starts 1 --out "$OUT/trained/eagle" -- "${ARGS[@]}"
    # OEA at K0=3 routes differently: its lossless reference is plain decoding at K0=3
    run $PY -m bench ab --manifest $PLANTED --arms full=full+dummy_init_normal oea3=full+dummy_init_normal \
      --arm-env oea3:SGLANG_OEA_K0=3 --no-phase-timing --metric tok_s_b1 "${DI[@]}" "${TR[@]}" --restarts 1 \
      --max-starts 1 --out "$OUT/trained/plain" -- "${PLAIN[@]}"
    compare "$OUT/trained/plain" "$TINY/draft_trained/train.json" "$OUT/trained/summary.md" "$OUT/trained/eagle" ;;
  trained_speed)
    with_trained "$TINY" draft
    run $PY -m bench ab --manifest $PLANTED --arms full=full+dummy_init_normal "${DI[@]}" "${TR[@]}" \
      --restarts 3 --max-starts 3 --out "$OUT/trained_speed/eagle" -- "${ARGS[@]}"
    run $PY -m bench ab --manifest $PLANTED --arms full=full+dummy_init_normal --no-phase-timing --metric tok_s_b1 \
      "${DI[@]}" "${TR[@]}" --restarts 3 --max-starts 3 --out "$OUT/trained_speed/plain" -- "${PLAIN[@]}"
    compare "$OUT/trained_speed/plain" "$TINY/draft_trained/train.json" "$OUT/trained_speed/summary.md" \
      "$OUT/trained_speed/eagle" ;;
  trained_edge)
    # deepseek_v2's final-layer capture (draft_edge: aux id 4 = num_hidden_layers) over accepted runs, against
    # trained's plain decoding; flashinfer_mla's fp8 rows under target-verify with accepts: pristine vs the
    # fixes, whose greedy outputs must be equal (the run's report; fp8 KV is not bf16 plain decoding).
    with_trained "$TINY" draft_edge
    run $PY -m bench ab --manifest $PLANTED --arms full=full+dummy_init_normal "${DI[@]}" "${TR[@]}" \
      --restarts 1 --max-starts 1 --out "$OUT/trained_edge/edge" -- "${ARGS[@]}"
    with_trained "$TINY" draft
    run $PY -m bench ab --manifest $PLANTED --arms none=dummy_init_normal fixes=fixes+dummy_init_normal "${DI[@]}" \
      "${TR[@]}" --restarts 1 --max-starts 1 --out "$OUT/trained_edge/fp8" -- "${ARGS[@]}" --kv-cache-dtype fp8_e4m3
    compare "$OUT/trained/plain" "$TINY/draft_edge_trained/train.json" "$OUT/trained_edge/summary.md" \
      "$OUT/trained_edge/edge" ;;
  kimi_trained)
    kimi_trained_args
    run $PY -m bench ab --manifest $PLANTED --arms full=full+dummy_init_normal oea3=full+dummy_init_normal \
      --arm-env oea3:SGLANG_OEA_K0=3 --env SGLANG_OEA_STATS=1 "${DI[@]}" "${TR[@]}" --restarts 2 --max-starts 2 \
      --out "$OUT/kimi_trained" -- "${ARGS[@]}" ;;
  kimi_plain)
    kimi_dir
    replace_args PLAIN --model-path="$KIMI/target" --mem-fraction-static="${KIMI_MEMF:-0.45}"
    run $PY -m bench ab --manifest $PLANTED --arms full=full+dummy_init_normal oea3=full+dummy_init_normal \
      --arm-env oea3:SGLANG_OEA_K0=3 --no-phase-timing --metric tok_s_b1 "${DI[@]}" "${TR[@]}" --restarts 2 \
      --max-starts 2 --out "$OUT/kimi_plain" -- "${ARGS[@]}"
    [ -s "$OUT/kimi_trained/results.jsonl" ] || [ -n "${DRY:-}" ] || { echo "kimi_plain: no kimi_trained run to compare with" >&2; exit 0; }
    compare "$OUT/kimi_plain" "$KIMI/draft_trained/train.json" "$OUT/kimi_trained/summary.md" "$OUT/kimi_trained" ;;
  kimi_null)
    kimi_trained_args
    resume_from "$OUT/kimi_null"
    run $PY -m bench ab --manifest $PLANTED --arms a=full+dummy_init_normal null=full+dummy_init_normal \
      --arm-env null:BENCH_NULL=1 "${DI[@]}" --host-probe --host-probe-at scheduler "${TR[@]}" \
      --restarts "${MAXS:-5}" --max-starts "${MAXS:-5}" "${RESUME[@]}" --out "$OUT/kimi_null" -- "${ARGS[@]}"
    for adj in state; do
      if [ -n "${DRY:-}" ]; then echo "kimi_null: report: $PY -m bench report $OUT/kimi_null --adjust $adj"
      elif [ -s "$OUT/kimi_null/results.jsonl" ]; then run $PY -m bench report "$OUT/kimi_null" --adjust $adj; fi
    done ;;
  kimi_statebisect)
    # kimi_null's fast-state reading resolved +-5.9 % at 3-4 starts a side (raw: +-12.2 % at 5): the proxy's
    # verify is GPU work, so a GPU-side plant moves the step by more than the host's states do
    kimi_trained_args
    resume_from "$OUT/kimi_statebisect"
    run $PY -m bench bisect --manifest $PLANTED --good default+dummy_init_normal --bad full_moe_gpu+dummy_init_normal \
      "${DI[@]}" "${KS[@]}" --max-starts "${MAXS:-12}" "${RESUME[@]}" --out "$OUT/kimi_statebisect" -- "${ARGS[@]}" ;;
  kimi_speed)
    kimi_trained_args
    speed_pair kimi_speed "$OUT/kimi_speed/eagle" "$KIMI/draft_trained/train.json" ;;
  kimi_speed5)
    # issue 17's 1.5x with a longer chain: the draft trained over 5 steps (kimi_train5) served at steps 5, topk 1,
    # 6 draft tokens; plain decoding is kimi_speed's run (resumed, so a call finds it done or finishes it)
    kimi_long_args
    speed_pair kimi_speed5 "$OUT/kimi_speed5/eagle" "$KIMI/draft5_trained/train.json" ;;
  kimi_stateprof)
    kimi_trained_args
    resume_from "$OUT/kimi_stateprof"
    run $PY -m bench ab --manifest $PLANTED --arms notapplied=default-eagle_profiling+dummy_init_normal \
      on=default+dummy_init_normal off=default+dummy_init_normal --arm-env off:SGLANG_EAGLE_PHASE_TIMING=0 \
      "${DI[@]}" "${KS[@]}" --max-starts "${MAXS:-8}" "${RESUME[@]}" --out "$OUT/kimi_stateprof" -- "${ARGS[@]}" ;;
  ablate)
    run $PY -m bench ablate --manifest $PLANTED --full full_planted --mode leave-out \
      --patches planted_slow_verify,oea_topk,eagle_profiling "${M[@]}" --out "$OUT/ablate" -- "${SA[@]}" ;;
  bisect)
    run $PY -m bench bisect --manifest $PLANTED --good default --bad full_planted \
      ${REUSE:+--reuse "$REUSE"} "${M[@]}" --out "$OUT/bisect" -- "${SA[@]}" ;;
  hostprobe)
    # The host-speed covariate (issue 12 item 7): a null pair of the default set, 4 starts each, no adaptive starts,
    # the probe on a CPU spread keeps from the server. Verdicts stay unadjusted (the report shows what --adjust host
    # would read: `python -m bench report DIR --adjust host` writes report-adjust-host.md; or ADJUST=host here).
    # First, on this VM, whether the probe slows a host-bound process on the scheduler's CPU (10 paired rounds, ~45 s;
    # once per output dir: a resumed call skips it).
    if [ -n "${DRY:-}" ]; then echo "hostprobe: overhead check: $PY -m bench.hostprobe --overhead 10 --json $OUT/hostprobe/overhead.json"
    elif [ ! -f "$OUT/hostprobe/overhead.txt" ]; then
      mkdir -p "$OUT/hostprobe"; run $PY -m bench.hostprobe --overhead 10 --json "$OUT/hostprobe/overhead.json" | tee "$OUT/hostprobe/overhead.txt"
    fi
    run $PY -m bench ab --manifest $PLANTED --arms spread=default null=default --arm-env null:BENCH_NULL=1 \
      --host-probe --adjust "${ADJUST:-none}" ${REUSE:+--reuse "$REUSE"} "${M[@]}" --restarts 4 --max-starts 4 \
      --out "$OUT/hostprobe" -- "${SA[@]}" ;;
  schedprobe)
    # Issue 12 item 7, the probe where the step's speed is: the noise probe found each vCPU's speed its own
    # (bench/results/2026-12-03-h200-noise), and the earlier probe ran on a spare CPU (r = +0.72 per repetition,
    # the start-to-start CV only 28.5 -> 21.6 %). Here it shares the scheduler's CPU (a 600-iteration unit at 1 %):
    # base against full_result_host with its plant at PLANT_US (a known regression beside the null question), then
    # the report read adjusted. A second call resumes a run the time budget stopped.
    resume=()
    [ -s "$OUT/schedprobe/results.jsonl" ] && resume=(--resume "$OUT/schedprobe")
    run $PY -m bench ab --manifest $PLANTED --arms base=default full=full_result_host \
      --env SGLANG_PLANTED_RESULT_DELAY_US="${PLANT_US:-400}" --host-probe --host-probe-at scheduler \
      --tree "$SGL_TREE" --restarts 3 --max-starts "${MAXS:-4}" --reps-per-start "${REPS:-12}" --warmup-reps "${WREPS:-2}" \
      --max-new-tokens 64 --b1-requests 1 --concurrency 8 --ttft-requests 2 --time-budget "$BUDGET" \
      ${DRY:+--dry-run} "${resume[@]}" --out "$OUT/schedprobe" -- "${SA[@]}"
    if [ -n "${DRY:-}" ]; then echo "schedprobe: report: $PY -m bench report $OUT/schedprobe --adjust host"
    elif [ -s "$OUT/schedprobe/results.jsonl" ]; then
      run $PY -m bench report "$OUT/schedprobe" --adjust host
    fi ;;
  schednull)
    # Issue 12 item 7's target with the probe that tracks the step (schedprobe's first call: r = 0.87-0.98 between a
    # start's repetitions): the default set twice (a null pair, the second with a harmless env), MAXS starts each,
    # so >= 9 starts of one set, and full_result_host (its plant at PLANT_US) as a third arm, all interleaved;
    # the start-to-start CV raw and at a fixed scheduler-vCPU speed (the report read adjusted). No adaptive starts
    # (--restarts = --max-starts): a second call resumes a run the time budget stopped.
    resume=()
    [ -s "$OUT/schednull/results.jsonl" ] && resume=(--resume "$OUT/schednull")
    run $PY -m bench ab --manifest $PLANTED --arms a=default null=default full=full_result_host --arm-env null:BENCH_NULL=1 \
      --env SGLANG_PLANTED_RESULT_DELAY_US="${PLANT_US:-400}" --host-probe --host-probe-at scheduler \
      --tree "$SGL_TREE" --restarts "${MAXS:-5}" --max-starts "${MAXS:-5}" --reps-per-start "${REPS:-10}" \
      --warmup-reps "${WREPS:-2}" --max-new-tokens 64 --b1-requests 1 --concurrency 8 --ttft-requests 2 \
      --time-budget "$BUDGET" ${DRY:+--dry-run} "${resume[@]}" --out "$OUT/schednull" -- "${SA[@]}"
    for adj in host state; do
      if [ -n "${DRY:-}" ]; then echo "schednull: report: $PY -m bench report $OUT/schednull --adjust $adj"
      elif [ -s "$OUT/schednull/results.jsonl" ]; then run $PY -m bench report "$OUT/schednull" --adjust $adj; fi
    done ;;
  stateab)
    # The plant of schednull read in the fast state from the start: ab default against full_result_host (its plant
    # at PLANT_US) with --adjust state driving the adaptive starts, up to MAXS (12) a side; what one session's
    # device time can hold (~53 s a warm start). A second call resumes it.
    resume=()
    [ -s "$OUT/stateab/results.jsonl" ] && resume=(--resume "$OUT/stateab")
    run $PY -m bench ab --manifest $PLANTED --arms base=default full=full_result_host \
      --env SGLANG_PLANTED_RESULT_DELAY_US="${PLANT_US:-400}" --host-probe --host-probe-at scheduler --adjust state \
      --tree "$SGL_TREE" --restarts 4 --max-starts "${MAXS:-12}" --reps-per-start "${REPS:-10}" \
      --warmup-reps "${WREPS:-2}" --max-new-tokens 64 --b1-requests 1 --concurrency 8 --ttft-requests 2 \
      --time-budget "$BUDGET" ${DRY:+--dry-run} "${resume[@]}" --out "$OUT/stateab" -- "${SA[@]}" ;;
  statebisect)
    # Issue 12's planted-regression target read in the host's fast state (bench.hoststate, schednull's finding):
    # bisect default -> full_result_host (planted_result_host at PLANT_US among its four extra patches) with the
    # probe on the scheduler's CPU and --adjust state driving the adaptive starts, the probe placements and the
    # culprit's confirmations; REPS repetitions a start (more fast ones per start). A second call resumes it.
    resume=()
    [ -s "$OUT/statebisect/results.jsonl" ] && resume=(--resume "$OUT/statebisect")
    run $PY -m bench bisect --manifest $PLANTED --good default --bad full_result_host \
      --env SGLANG_PLANTED_RESULT_DELAY_US="${PLANT_US:-400}" --host-probe --host-probe-at scheduler --adjust state \
      --tree "$SGL_TREE" --restarts 3 --max-starts "${MAXS:-8}" --reps-per-start "${REPS:-10}" \
      --warmup-reps "${WREPS:-2}" --max-new-tokens 64 --b1-requests 1 --concurrency 8 --ttft-requests 2 \
      --time-budget "$BUDGET" ${DRY:+--dry-run} "${resume[@]}" --out "$OUT/statebisect" -- "${SA[@]}" ;;
  hostcov)
    # Issue 12 item 7, session 5's follow-up: is the probe a clean covariate here (overhead.json's verdict), do
    # steal / run-queue wait (free to read, cannot perturb) track the slow stretches, and which adjustment lowers
    # the start-to-start CV of a null pair (report-adjust-*.md). A second call resumes a run the budget stopped.
    if [ -n "${DRY:-}" ]; then
      echo "hostcov: overhead check: $PY -m bench.hostprobe --overhead 12 --json $OUT/hostcov/overhead.json"
    elif [ ! -f "$OUT/hostcov/overhead.json" ]; then
      mkdir -p "$OUT/hostcov"
      run $PY -m bench.hostprobe --overhead 12 --json "$OUT/hostcov/overhead.json" | tee "$OUT/hostcov/overhead.txt"
    fi
    resume=()
    [ -s "$OUT/hostcov/results.jsonl" ] && resume=(--resume "$OUT/hostcov")
    run $PY -m bench ab --manifest $PLANTED --arms a=default null=default --arm-env null:BENCH_NULL=1 \
      --host-probe --adjust none "${M[@]}" --restarts 3 --max-starts "${MAXS:-3}" "${resume[@]}" \
      --out "$OUT/hostcov" -- "${SA[@]}"
    for adj in host steal wait; do
      if [ -n "${DRY:-}" ]; then echo "hostcov: report: $PY -m bench report $OUT/hostcov --adjust $adj"
      else run $PY -m bench report "$OUT/hostcov" --adjust $adj; fi
    done ;;
  profhost)
    # eagle_profiling on against not applied with the host-speed covariate beside every start: issue 16's "< 3 %"
    # (applied-but-off does a subset of on's work) and issue 12's test of the covariate on real slow stretches,
    # 3 starts each. The overhead check is short (4 paired rounds) when the step runs first in a dir.
    if [ -n "${DRY:-}" ]; then echo "profhost: overhead check: $PY -m bench.hostprobe --overhead 4 --json $OUT/profhost/overhead.json"
    elif [ ! -f "$OUT/profhost/overhead.txt" ]; then
      mkdir -p "$OUT/profhost"; run $PY -m bench.hostprobe --overhead 4 --json "$OUT/profhost/overhead.json" | tee "$OUT/profhost/overhead.txt"
    fi
    run $PY -m bench ab --manifest $PLANTED --arms on=default notapplied=default-eagle_profiling \
      --host-probe --adjust "${ADJUST:-none}" "${M[@]}" --restarts 3 --max-starts "${MAXS:-3}" \
      --out "$OUT/profhost" -- "${SA[@]}" ;;
  duet|duet_profiling|duet_off)
    # Two servers on one GPU: each takes --mem-fraction-static of the memory free when it starts (SGLang 0.5.17's
    # KV budget is charged against its own pre-load free memory), so the second gets about 0.3 x 0.7 of the GPU
    # here; the Kimi-width proxy's ~40 GB of weights would not fit a second server at the duet's cap of 0.45.
    [ -n "$DUET_TREE" ] || { echo "$step: set DUET_TREE to a second sglang tree (apply.py fetch --wheel makes one)" >&2; exit 2; }
    spec_args "$TINY" "${DUET_MEMF:-0.3}"
    ARMS=(a=default null=default --arm-env null:BENCH_NULL=1)
    [ "$step" = duet_profiling ] && ARMS=(on=default notapplied=default-eagle_profiling)
    [ "$step" = duet_off ] && ARMS=(notapplied=default-eagle_profiling off=default
                                    --arm-env off:SGLANG_EAGLE_PHASE_TIMING=0)
    resume=()
    [ -z "${DRY:-}" ] && [ -s "$OUT/$step/results.jsonl" ] && resume=(--resume "$OUT/$step")
    run $PY -m bench ab --manifest $PLANTED --arms "${ARMS[@]}" --duet "$DUET_TREE" "${M[@]}" \
      "${resume[@]}" --out "$OUT/$step" -- "${SA[@]}" ;;
  blocks_profiling|blocks_ablate|blocks_moe)
    # One GPU for the whole block: each server's share is a bound, not what it takes (the pool is BLOCK_TOKENS);
    # short repetitions (one 64-token request at batch 1, eight at once, two first tokens), so that an arm's
    # j-th repetition and the reference's are seconds apart on the same vCPU.
    spec_args "$TINY" "${BLOCK_MEMF:-0.3}"
    B=(--concurrent --restarts 3 --max-starts "${MAXS:-6}" --reps-per-start "${REPS:-8}" --warmup-reps "${WREPS:-2}"
       --max-new-tokens 64 --b1-requests 1 --concurrency 8 --ttft-requests 2 --time-budget "$BUDGET" ${DRY:+--dry-run}
       ${PAIRS:+--block-pairs})
    resume=()
    [ -z "${DRY:-}" ] && [ -s "$OUT/$step/results.jsonl" ] && resume=(--resume "$OUT/$step")
    case "$step" in
      blocks_profiling)
        run $PY -m bench ab --manifest $PLANTED --arms notapplied=default-eagle_profiling on=default off=default \
          null=default-eagle_profiling --arm-env off:SGLANG_EAGLE_PHASE_TIMING=0 --arm-env null:BENCH_NULL=1 \
          "${B[@]}" "${resume[@]}" --out "$OUT/$step" -- "${SA[@]}" --max-total-tokens "${BLOCK_TOKENS:-16384}" ;;
      *)
        full=full_result_host; [ "$step" = blocks_moe ] && full=full_moe_gpu
        run $PY -m bench ablate --manifest $PLANTED --base default --full $full --mode leave-out \
          "${B[@]}" "${resume[@]}" --out "$OUT/$step" -- "${SA[@]}" --max-total-tokens "${BLOCK_TOKENS:-16384}" ;;
    esac ;;
  inpatch|hostbisect|null42)
    # Issue 42 on one warm machine. inpatch: bisect default -> full on a copy of the project whose real oea_topk
    # carries a GPU-side plant (tests/bench/planted/oea_inpatch.diff: torch.cuda._sleep in maybe_apply_oea, even
    # at K0=0); hostbisect: default -> full_result_host (a host-side busy wait in the scheduler's result
    # processing); null42: default against itself. One --env for all three, so their default starts pool.
    P42=(--env SGLANG_PLANTED_OEA_GPU_CYCLES="${OEA_CYCLES:-400000}" --env SGLANG_PLANTED_RESULT_DELAY_US="${PLANT_US:-300}"
         --tree "$SGL_TREE" --restarts 3 --max-starts "${MAXS:-6}" --reps-per-start "${REPS:-3}" --warmup-reps 1
         --max-new-tokens 64 --b1-requests 1 --concurrency 8 --ttft-requests 2 --time-budget "$BUDGET" ${DRY:+--dry-run})
    PROJ=/tmp/proj42
    if [ ! -f "$PROJ/manifest.yaml" ]; then
      rm -rf "$PROJ.part" && mkdir -p "$PROJ.part" && cp -r manifest.yaml patches overlay "$PROJ.part/" \
        && (cd "$PROJ.part" && git apply "$OLDPWD/tests/bench/planted/oea_inpatch.diff") && mv "$PROJ.part" "$PROJ"
    fi
    # the tree forgets the other manifest's sets first (a no-op when it carries none of them)
    [ -n "${DRY:-}" ] || for m in "$PROJ/manifest.yaml" $PLANTED; do $PY apply.py --manifest "$m" --tree "$SGL_TREE" revert --all >/dev/null 2>&1 || true; done
    reuse42=(); for d in inpatch hostbisect null42; do [ "$d" != "$step" ] && [ -s "$OUT/$d/results.jsonl" ] && reuse42+=(--reuse "$OUT/$d/results.jsonl"); done
    resume_from "$OUT/$step"
    case "$step" in
      inpatch) run $PY -m bench bisect --manifest "$PROJ/manifest.yaml" --good default --bad full "${P42[@]}" \
                 "${reuse42[@]}" "${RESUME[@]}" --out "$OUT/inpatch" -- "${SA[@]}" ;;
      hostbisect) run $PY -m bench bisect --manifest $PLANTED --good default --bad full_result_host "${P42[@]}" \
                 "${reuse42[@]}" "${RESUME[@]}" --out "$OUT/hostbisect" -- "${SA[@]}" ;;
      null42) run $PY -m bench ab --manifest $PLANTED --arms a=default b=default --arm-env b:BENCH_NULL=1 "${P42[@]}" \
                 "${reuse42[@]}" "${RESUME[@]}" --out "$OUT/null42" -- "${SA[@]}" ;;
    esac ;;
  profiling)
    # eagle_profiling's cost: on, applied but off (SGLANG_EAGLE_PHASE_TIMING=0), not applied.
    run $PY -m bench ab --manifest $PLANTED --arms on=default notapplied=default-eagle_profiling off=default \
      --arm-env off:SGLANG_EAGLE_PHASE_TIMING=0 \
      ${REUSE:+--reuse "$REUSE"} "${M[@]}" --out "$OUT/profiling" -- "${SA[@]}" ;;
  kimi_profiling)
    # The same on the Kimi-width proxy. Issue 12 measured its plain decode step at a CV of 0.04 %, but with EAGLE-3
    # at batch 1 it is host-bound on the H200 VM too: start-to-start CV 11-20 %, as much within starts (run7).
    kimi_dir
    spec_args "$KIMI" "${KIMI_MEMF:-0.45}"
    run $PY -m bench ab --manifest $PLANTED --arms on=default notapplied=default-eagle_profiling off=default \
      --arm-env off:SGLANG_EAGLE_PHASE_TIMING=0 "${M[@]}" --out "$OUT/kimi_profiling" -- "${SA[@]}" ;;
  oea)
    run $PY -m bench oea "$OUT/oea" --experts 384 --topk 8 --hidden 7168 --moe-intermediate 2048 \
      --batches 1,4,16,64 --k0 off,3,4,5,6 --iters 200 ;;
  validate)
    # Issue 3 on a GPU: patches that must not change results (deepseek_v2, llama_eagle3, eagle_profiling,
    # flashinfer_mla with bf16 KV, oea_topk with K0=0) give the pristine greedy outputs; OEA with K0=3 runs.
    # SGLANG_OEA_STATS=1 counts distinct experts per routing call in both OEA arms (K0=0 and K0=3).
    # dummy_init_normal (a bench fixture in $PLANTED) in every arm: with SGLang's own dummy weights the greedy
    # tokens did not react even to OEA (bench/results/2026-11-30-h200x2-run2), so equality proved nothing; with
    # it, K0=3 and an fp8 KV cache both change them (bench/results/2026-12-01-h200).
    run $PY -m bench ab --manifest $PLANTED --arms none=dummy_init_normal full=full+dummy_init_normal \
      oea3=full+dummy_init_normal --arm-env oea3:SGLANG_OEA_K0=3 --env SGLANG_OEA_STATS=1 "${DI[@]}" \
      "${C[@]}" --out "$OUT/validate" -- "${SA[@]}" ;;
  plain)
    # Greedy plain decoding with the full set: EAGLE-3's outputs (validate) must equal these (lossless).
    run $PY -m bench ab --manifest $PLANTED --arms full=full+dummy_init_normal --no-phase-timing --metric tok_s_b1 "${DI[@]}" \
      "${C[@]}" --out "$OUT/plain" -- "${PLAIN[@]}" ;;
  edge)
    # The draft at the two edges the patches open (bench/tinymodel.py draft_edge): no draft_vocab_size
    # (llama_eagle3) and aux id 4 = num_hidden_layers, the final layer's output (deepseek_v2). Lossless
    # speculative decoding makes its greedy outputs those of `plain`, whatever the draft proposes.
    with_draft draft_edge
    run $PY -m bench ab --manifest $PLANTED --arms full=full+dummy_init_normal --env SGLANG_OEA_STATS=1 "${DI[@]}" \
      "${C[@]}" --out "$OUT/edge" -- "${ARGS[@]}" ;;
  before)
    # What the tiny model's edge drafts meet without the patches, and the patched load-time check: three starts
    # that must fail, each with the error the patch note names; the report quotes each failure's exception line.
    # A start that fails otherwise (or succeeds) fails the step.
    fails=0
    # name, set, draft dir, what the run's report must quote
    while read -r name set draft expect; do
      with_draft "$draft"
      rm -rf "$OUT/before/$name"
      run $PY -m bench ab --manifest $PLANTED --arms "$name=$set" --env SGLANG_OEA_STATS=1 "${DI[@]}" \
        --tree "$SGL_TREE" --restarts 1 --max-starts 1 --reps-per-start 1 --warmup-reps 0 --no-warmup-start \
        --max-new-tokens 16 --b1-requests 1 --concurrency 2 --health-timeout 420 ${DRY:+--dry-run} \
        --out "$OUT/before/$name" -- "${ARGS[@]}" && rc=0 || rc=$?
      [ -n "${DRY:-}" ] && continue
      got=$(grep -m1 -o -- "$expect" "$OUT/before/$name/report.md" 2>/dev/null || true)
      echo "before: $name (set $set, $draft): ab exit $rc; expected failure '$expect': ${got:+found: $got}${got:-NOT FOUND}" | tee -a "$OUT/before/summary.txt"
      [ -n "$got" ] && [ "$rc" != 0 ] || fails=$((fails + 1))
    done <<'ARMS'
pristine_final dummy_init_normal draft_final captured.2.of.3.aux.hidden.states
pristine_novocab dummy_init_normal draft_edge has.no.attribute.'draft_vocab_size'
patched_outofrange full+dummy_init_normal draft_bad out-of-range.ids.\[5\]
ARMS
    exit $fails ;;
  fp8)
    # fp8 KV cache with the FlashInfer MLA backend: pristine against the fixes (flashinfer_mla converts only
    # the slots a step reads); the greedy outputs must be equal.
    run $PY -m bench ab --manifest $PLANTED --arms none=dummy_init_normal fixes=fixes+dummy_init_normal "${DI[@]}" \
      "${C[@]}" --out "$OUT/fp8" -- "${SA[@]}" --kv-cache-dtype fp8_e4m3 ;;
  fp8plain)
    # The same without speculative decoding: the fp8 rows of the target's decode CUDA graph (fp8 covers the
    # target-verify graph and prefill).
    run $PY -m bench ab --manifest $PLANTED --arms none=dummy_init_normal fixes=fixes+dummy_init_normal "${DI[@]}" \
      --no-phase-timing --metric tok_s_b1 \
      "${C[@]}" --out "$OUT/fp8plain" -- "${PLAIN[@]}" --kv-cache-dtype fp8_e4m3 ;;
  envrespect)
    # engine_env_respect at TP1: CUDA_DEVICE_MAX_CONNECTIONS, which SGLang's engine always sets to 8, set by
    # the user. With the patch the rank's nccl_env line shows the user's 16, without it 8 (the report quotes
    # each rank's line); the greedy outputs of the two arms must be equal.
    rm -rf "$OUT/envrespect"
    run $PY -m bench ab --manifest $PLANTED --arms respect=full+dummy_init_normal \
      forced=full+dummy_init_normal-engine_env_respect --env CUDA_DEVICE_MAX_CONNECTIONS=16 "${DI[@]}" \
      "${C[@]}" --out "$OUT/envrespect" -- "${SA[@]}" && rc=0 || rc=$?
    [ -n "${DRY:-}" ] && exit $rc
    fails=$rc
    for want in respect=16 forced=8; do
      got=$(sed -n "/^- ${want%%=*} start/,/^- /p" "$OUT/envrespect/report.md" | grep -o "CUDA_DEVICE_MAX_CONNECTIONS=[0-9]*" | sort -u | tr '\n' ' ')
      echo "envrespect: arm ${want%%=*}: want CUDA_DEVICE_MAX_CONNECTIONS=${want#*=}, rank lines show: ${got:-NONE}" | tee -a "$OUT/envrespect/summary.txt"
      [ "$got" = "CUDA_DEVICE_MAX_CONNECTIONS=${want#*=} " ] || fails=$((fails + 1))
    done
    exit $fails ;;
  tp2)
    # Both TP2 starts of the first GPU session stalled right after FlashInfer's allreduce-fusion workspace
    # (SymmDeviceMemory, auto-enabled for DeepSeek-V3 on SM90 at TP > 1) was set up: turn that fusion and the
    # custom all-reduce off, so the comparison is NCCL's all-reduce under each env profile.
    run $PY -m bench ab --arms none=full pcie=full@nccl_pcie "${M[@]}" --out "$OUT/tp2" -- "${SA[@]}" --tp 2 \
      --enforce-disable-flashinfer-allreduce-fusion --disable-custom-all-reduce ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
