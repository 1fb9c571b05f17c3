#!/usr/bin/env bash
# The recorded GPU runs, one H200 (tp2: two). Each step is one or more bench commands guarded by --time-budget;
# results go to $OUT/<step>/ and belong in bench/results/<date>-<gpu>/ afterwards.
#
# Start-up and noise (issue 12):
#   cold         the machine's first start (FlashInfer JIT, Triton, graph capture): its seconds, recorded
#   warm         two single starts on a warm machine (the second with the bench's bytecode cache filled)
#   variance     one set, three arms (CPU placement spread twice: a null pair; none): start-to-start CV
# Issue 42 on one warm machine (PROJ42: the project copy whose oea_topk carries a GPU-side plant):
#   inpatch      bisect default -> full on that copy
#   hostbisect   bisect default -> full_result_host (a host-side delay in the scheduler's result processing)
#   null42       default against itself
# Earlier issues' correctness and configuration runs: validate, plain, edge, before, fp8, fp8plain, tp2,
#   envrespect (a user-set CUDA_DEVICE_MAX_CONNECTIONS with and without engine_env_respect at TP1).
# Issue 17 (drafts that agree: bench train-draft trains them against the dummy_init_normal target):
#   draft_check  SGLang's own DummyModelLoader against train-draft's reconstruction, parameter by parameter
#   train        the tiny model's draft; train_edge its draft_edge; each first asks one plain server for its
#                greedy continuations (bench server-seqs), then trains on them
#   kimi_seqs    the Kimi-width proxy's sequences only (a bare machine's cold start, without training)
#   kimi_train   the proxy's draft; kimi_train5 over 5 steps of training-time test
#   trained      tiny: none / full / OEA K0=3 with the trained draft, then plain decoding; trained/summary.md
#   kimi_trained the proxy, full and OEA K0=3 with the trained draft; kimi_plain its plain decoding
#   kimi_speed   issue 17's 1.5x on the proxy: EAGLE-3 with the trained draft against plain decoding
#   kimi_speed5  the same with kimi_train5's draft at steps 5 / 6 draft tokens
#
# DRY=1 prints the plan (sets, launch commands, number of starts) without starting anything.
set -euo pipefail
step=${1:?usage: gpu_runs.sh cold|warm|variance|inpatch|hostbisect|null42|validate|plain|edge|before|fp8|fp8plain|envrespect|tp2|draft_check|train|train_edge|kimi_seqs|kimi_train|kimi_train5|trained|kimi_trained|kimi_plain|kimi_speed|kimi_speed5}
OUT=${OUT:-bench/results/manual}
PY=${PYTHON:-python}
BUDGET=${BUDGET:-500}
# The tree the tool patches: the sglang installed in this interpreter (site-packages), found without importing it.
SGL_TREE=${SGL_TREE:-$($PY -c "import importlib.util as u,os;print(os.path.dirname(os.path.dirname(u.find_spec('sglang').origin)))")}
TINY=${TINY:-/tmp/tiny}
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
case "$step" in
  cold)
    # the machine's first start (FlashInfer JIT, Triton, page cache): what a throwaway start absorbs
    one_start cold --no-warmup-start -- "${SA[@]}" ;;
  warm)
    # warm starts alone, on a machine that has served starts: issue 12's "<= 20 s"; two, since the first may
    # still compile this tree's bytecode into the bench's cache (bench.runner.bytecode_env)
    one_start warm1 --no-warmup-start -- "${SA[@]}"
    one_start warm2 --no-warmup-start -- "${SA[@]}" ;;
  variance)
    # Start-to-start variance of one set: CPU placement spread (two arms: a null pair, 10 starts of one
    # configuration between them) against none. Every arm carries the same patches.
    # NONE=0 leaves the `none` arm out (a session's budget holds about 10 measured starts: the null pair first).
    ARMS=(spread=default null=default --arm-env null:BENCH_NULL=1)
    [ "${NONE:-1}" = 1 ] && ARMS=(spread=default null=default none=default --arm-env null:BENCH_NULL=1
                                  --arm-env none:BENCH_CPU_PLACEMENT=none)
    run $PY -m bench ab --manifest $PLANTED --arms "${ARMS[@]}" \
      "${M[@]}" --restarts "${VRESTARTS:-4}" --max-starts "${VMAXS:-5}" --out "$OUT/variance" -- "${SA[@]}" ;;
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
  kimi_speed)
    kimi_trained_args
    speed_pair kimi_speed "$OUT/kimi_speed/eagle" "$KIMI/draft_trained/train.json" ;;
  kimi_speed5)
    # issue 17's 1.5x with a longer chain: the draft trained over 5 steps (kimi_train5) served at steps 5, topk 1,
    # 6 draft tokens; plain decoding is kimi_speed's run (resumed, so a call finds it done or finishes it)
    kimi_long_args
    speed_pair kimi_speed5 "$OUT/kimi_speed5/eagle" "$KIMI/draft5_trained/train.json" ;;
  inpatch|hostbisect|null42)
    # Issue 42 on one warm machine. inpatch: bisect default -> full on a copy of the project whose real oea_topk
    # carries a GPU-side plant (tests/bench/planted/oea_inpatch.diff: torch.cuda._sleep in maybe_apply_oea, even
    # at K0=0); hostbisect: default -> full_result_host (a host-side busy wait in the scheduler's result
    # processing); null42: default against itself. One --env for all three, so their default starts pool.
    # 30 repetitions (~33 s) a start: a repetition is cheap next to a start (~35 s), and on run 3's H100, whose
    # speed switched every ~7 s, 30 take 57 % of the device time per decision that 8 take (tests/bench/test_method.py)
    P42=(--env SGLANG_PLANTED_OEA_GPU_CYCLES="${OEA_CYCLES:-400000}" --env SGLANG_PLANTED_RESULT_DELAY_US="${PLANT_US:-300}"
         --tree "$SGL_TREE" --restarts 3 --max-starts "${MAXS:-6}" --reps-per-start "${REPS:-30}" --warmup-reps 1
         --max-new-tokens 64 --b1-requests 1 --concurrency 8 --ttft-requests 2 --time-budget "$BUDGET" ${DRY:+--dry-run})
    PROJ=${PROJ42:-/tmp/proj42}
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
