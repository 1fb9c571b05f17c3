#!/usr/bin/env bash
# The recorded GPU runs of issue 6, one H200 (tp2: two). Each step is one device command (< 9 min, guarded by
# --time-budget); results go to $OUT/<step>/ and belong in bench/results/<date>-<gpu>/ afterwards.
#
#   bash bench/gpu_runs.sh ablate              # 4 starts: full_planted, and each of 3 patches left out
#   bash bench/gpu_runs.sh bisect              # <= 4 starts; REUSE=<ablate results.jsonl> reuses the bad set's start
#   bash bench/gpu_runs.sh profiling           # 3 starts; REUSE=<ablate results.jsonl> reuses "on" and "not applied"
#   bash bench/gpu_runs.sh oea                 # no server; under 110 s in the recorded H200 run (34 GB of expert weights)
#   bash bench/gpu_runs.sh tp2                 # on 2 GPUs: 2 starts, nccl_pcie profile vs none
#   bash bench/gpu_runs.sh envrespect          # 2 starts: a user-set CUDA_DEVICE_MAX_CONNECTIONS with/without engine_env_respect
# RESTARTS=N (default 1) sets the server starts per arm of ablate, bisect, profiling and tp2.
#
# DRY=1 prints the plan (sets, launch commands, number of starts) without starting anything.
set -euo pipefail
step=${1:?usage: gpu_runs.sh ablate|bisect|profiling|oea|tp2|validate|plain|edge|before|fp8|fp8plain|envrespect}
OUT=${OUT:-bench/results/manual}
PY=${PYTHON:-python}
BUDGET=${BUDGET:-500}
# The tree the tool patches: the sglang installed in this interpreter (site-packages), found without importing it.
SGL_TREE=${SGL_TREE:-$($PY -c "import importlib.util as u,os;print(os.path.dirname(os.path.dirname(u.find_spec('sglang').origin)))")}
TINY=${TINY:-/tmp/tiny}
# (re)written when a dir is missing: an older tinymodel wrote fewer drafts
for d in target draft draft_edge draft_final draft_bad; do
  [ -f "$TINY/$d/config.json" ] || { $PY -m bench tinymodel "$TINY" >/dev/null; break; }
done
PLANTED=tests/bench/planted/manifest.yaml
DI=(--env SGLANG_DUMMY_INIT=normal)
# Tiny DeepSeek-V3 target + EAGLE-3 draft (steps 3, topk 1, 4 draft tokens), dummy weights; small CUDA-graph
# batch range to keep server starts short; decode-log-interval 8 so every phase has many step-time entries.
SA=(--model-path "$TINY/target" --load-format dummy --speculative-algorithm EAGLE3
    --speculative-draft-model-path "$TINY/draft" --speculative-draft-load-format dummy
    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
    --attention-backend flashinfer --cuda-graph-max-bs 8 --decode-log-interval 8 --disable-radix-cache
    --skip-server-warmup --mem-fraction-static "${MEMF:-0.6}" --port "${PORT:-30000}")
# The same model without speculative decoding (the lossless reference for EAGLE-3's greedy output).
PLAIN=(--model-path "$TINY/target" --load-format dummy --attention-backend flashinfer --cuda-graph-max-bs 8
       --decode-log-interval 8 --disable-radix-cache --skip-server-warmup --mem-fraction-static "${MEMF:-0.6}"
       --port "${PORT:-30000}")
# Same method options everywhere: --reuse only pools starts measured under an identical configuration.
M=(--tree "$SGL_TREE" --restarts "${RESTARTS:-1}" --reps-per-start 9 --warmup-reps 1 --max-new-tokens 128 --b1-requests 2
   --concurrency 8 --env SGLANG_OEA_K0=3 --time-budget "$BUDGET" ${DRY:+--dry-run})
# Issue 3's correctness runs: one start per arm, short outputs; greedy hashes and counters, not timings.
C=(--tree "$SGL_TREE" --restarts 1 --reps-per-start 2 --warmup-reps 1 --max-new-tokens 64 --b1-requests 2
   --concurrency 8 --time-budget "$BUDGET" ${DRY:+--dry-run})
run() { echo "+ $*" >&2; "$@"; }
# SA with another of bench/tinymodel.py's drafts, into ARGS
with_draft() { ARGS=(); for a in "${SA[@]}"; do [ "$a" = "$TINY/draft" ] && a=$TINY/$1; ARGS+=("$a"); done; }
case "$step" in
  ablate)
    run $PY -m bench ablate --manifest $PLANTED --full full_planted --mode leave-out \
      --patches planted_slow_verify,oea_topk,eagle_profiling "${M[@]}" --out "$OUT/ablate" -- "${SA[@]}" ;;
  bisect)
    run $PY -m bench bisect --manifest $PLANTED --good default --bad full_planted --metric eagle_verify_ms_b1 \
      ${REUSE:+--reuse "$REUSE"} "${M[@]}" --out "$OUT/bisect" -- "${SA[@]}" ;;
  profiling)
    run $PY -m bench ab --manifest $PLANTED --arms on=full_planted notapplied=full_planted-eagle_profiling \
      off=full_planted --arm-env off:SGLANG_EAGLE_PHASE_TIMING=0 \
      ${REUSE:+--reuse "$REUSE"} "${M[@]}" --out "$OUT/profiling" -- "${SA[@]}" ;;
  oea)
    run $PY -m bench oea "$OUT/oea" --experts 384 --topk 8 --hidden 7168 --moe-intermediate 2048 \
      --batches 1,4,16,64 --k0 off,3,4,5,6 --iters 200 ;;
  validate)
    # Issue 3 on a GPU: patches that must not change results (deepseek_v2, llama_eagle3, eagle_profiling,
    # flashinfer_mla with bf16 KV, oea_topk with K0=0) give the pristine greedy outputs; OEA with K0=3 runs.
    # Output hashes are compared by the report; start-up times are issue 5's launch timings.
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
        --tree "$SGL_TREE" --restarts 1 --reps-per-start 1 --warmup-reps 0 --max-new-tokens 16 --b1-requests 1 \
        --concurrency 2 --health-timeout 420 ${DRY:+--dry-run} --out "$OUT/before/$name" -- "${ARGS[@]}" && rc=0 || rc=$?
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
      got=$(sed -n "/^- ${want%%=*} round/,/^- /p" "$OUT/envrespect/report.md" | grep -o "CUDA_DEVICE_MAX_CONNECTIONS=[0-9]*" | sort -u | tr '\n' ' ')
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
