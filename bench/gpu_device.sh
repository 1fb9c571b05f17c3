#!/usr/bin/env bash
# Device-side driver for the recorded GPU runs (the commands themselves are in bench/gpu_runs.sh).
#
#   bash bench/gpu_device.sh setup                       # once, after the wheel bundles are installed
#   CALL_S=540 bash bench/gpu_device.sh run 0:validate,plain 1:fp8,fp8plain ...
#   RESUME_FROM=bench/results/2026-12-01-h200-run2 CALL_S=540 bash bench/gpu_device.sh run 0:inpatch  # go on with a record
#
# `run` takes streams GPU[SLOT]:STEP[,STEP...]; streams run in parallel, each stream's steps in order.
# GPU 0 patches the installed sglang (/tmp/site, an "installed" tree); GPU 1 an embedded tree made from the
# pinned wheel by `apply.py fetch --wheel` (a "checkout"-layout tree), so parallel streams never share a tree.
# Two streams on one GPU (slots a, b) are for correctness runs only: they perturb each other's timings, and
# SGLang's memory profiling counts the other server's memory (0.25 each failed on an H200: see
# bench/results/2026-11-30-h200x2/validate): start such servers one after the other, not together.
# Results persist in /tmp/results while the machine stays warm (inpatch reuses null42's starts) and are
# packed into $OUT/<stream>.tgz for the trip back.
set -uo pipefail
cd "$(dirname "$0")/.."
dirs=$(ls -d .gpu/b* 2>/dev/null | tr '\n' ' ')
# Later calls carry no bundle folders: `set --` keeps this script's own arguments out of install.sh's "$@".
args=("$@"); set -- $dirs
# Every call carries .gpu/install.sh: an ignored path a call does not carry is gone there (run8's call 5).
[ -f .gpu/install.sh ] || {
  echo "gpu_device.sh: .gpu/install.sh is missing: carry it in every call (carry: [\".gpu/install.sh\", \".whl\"])" >&2
  exit 2; }
# shellcheck disable=SC1091
source .gpu/install.sh "$@"
set -- "${args[@]}"
# The project's own needs beyond the bundles (unidiff), carried as `.whl` (see the
# header of bench/gpu_runs.sh): without them every bench command stops at the manifest (run7's call 4).
if [ -d .whl ] && [ ! -e /tmp/whl/.installed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/whl .whl/*.whl \
    && touch /tmp/whl/.installed
fi
[ -d /tmp/whl ] && export PYTHONPATH=/tmp/whl:$PYTHONPATH
# requirements.txt's list: PyYAML and packaging come with the bundles, unidiff does not (GitPython is not needed).
python3 -c "import unidiff, yaml, packaging" 2>/dev/null || {
  echo "gpu_device.sh: unidiff missing: carry .whl (python3 -m pip download --no-deps -d .whl unidiff)" >&2
  exit 2; }
# A machine idle for ~30 s is given back and the next call gets a bare one (run8's call 7): say so before a step
# spends its budget on a missing tree. Bundles go only to calls that install them (`setup` needs them all).
if [ "${1:-}" = run ] && [ -z "${DRY:-}" ] && ! python3 -c "import sglang" 2>/dev/null; then
  echo "gpu_device.sh: sglang does not import here: a fresh machine? install the bundles again (.gpu/b1..bN, one call each)" >&2
  exit 2
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHON=python3 TINY=/tmp/tiny KIMI=/tmp/kimi
RES=${RES:-/tmp/results}  # the run dirs a warm machine keeps between calls
mkdir -p "$RES"
# the pin comes from the manifest, never from this script
read -r PIN_VERSION PIN_WHEEL < <(python3 -c "import yaml; p = yaml.safe_load(open('manifest.yaml'))['pin']; print(p['version'], p['wheel'])")
EMB=$PWD/.sglang/sglang-$PIN_VERSION

case "${1:?usage: gpu_device.sh setup | run STREAM...}" in
  setup)
    set -e
    nvidia-smi -L
    python3 -c "import torch; print('torch', torch.__version__, 'gpus', torch.cuda.device_count())"
    # the embedded tree (GPU 1's streams) needs the pinned wheel, carried only by the call of its bundle
    wheel=$(ls .gpu/b*/"$PIN_WHEEL" 2>/dev/null | head -1 || true)
    if [ -n "$wheel" ]; then python3 apply.py fetch --wheel "$wheel"
    else echo "setup: $PIN_WHEEL is not carried in this call: no embedded tree (GPU 1's streams need one)"; fi
    python3 -m bench tinymodel "$TINY"
    python3 -m bench tinymodel "$KIMI" --profile kimi-width
    python3 tests/sglang_patches/gpu_check.py 2>&1 | tee "$OUT/gpu_check.txt"
    # the 0.5.23 pin's overlays on this torch (its SGLang needs torch 2.14.1, which this host lacks)
    python3 tests/sglang_patches/gpu_check.py --overlay pins/0.5.23/overlay 2>&1 | tee "$OUT/gpu_check_0.5.23.txt"
    python3 apply.py --tree /tmp/site status | tee "$OUT/status_installed.txt"
    ;;
  run)
    shift
    deadline=$(( $(date +%s) + ${CALL_S:-540} ))
    # RESUME_FROM=bench/results/<record>: its run dirs (results.jsonl) go on where an earlier session left them
    # (a bare machine has none); a run dir already here is kept
    # (a step's run dir or one level below it: kimi_speed/eagle, kimi_speed/plain)
    if [ -n "${RESUME_FROM:-}" ]; then
      while read -r f; do
        d=$(dirname "${f#./}")
        [ -e "$RES/$d" ] && continue
        # beside, then renamed: a call killed mid-copy leaves no cut store that the next call would keep
        mkdir -p "$RES/$(dirname "$d")" && rm -rf "$RES/$d.part" && cp -r "$RESUME_FROM/$d" "$RES/$d.part" \
          && mv "$RES/$d.part" "$RES/$d" && echo "resuming $d from $RESUME_FROM/$d"
      done < <(cd "$RESUME_FROM" && find . -mindepth 2 -maxdepth 3 -name results.jsonl -size +0c | sort)
    fi
    pids=()
    for spec in "$@"; do
      stream=${spec%%:*}; steps=${spec#*:}; gpu=${stream:0:1}; slot=${stream:1:1}
      case "$gpu" in 0) tree=/tmp/site ;; *) tree=$EMB ;; esac
      [ "$stream" = "01" ] && gpu=0,1 && tree=/tmp/site
      # apart per GPU and slot: two streams never share a port
      port=$((30000 + ${gpu%%,*} * 5000 + $( [ "$slot" = b ] && echo 500 || echo 0 )))
      memf=${MEMF:-$( [ -n "$slot" ] && echo 0.25 || echo 0.6 )}
      (
        for step in ${steps//,/ }; do
          echo "=== $(date +%T) stream $stream step $step (gpu $gpu, tree $tree, port $port)"
          start=$(date +%s)
          # each step's --time-budget is what is left of this call (device calls end at 600 s)
          left=$(( deadline - $(date +%s) ))
          [ "$left" -lt 150 ] && { echo "=== skip $step: ${left}s left"; continue; }
          # timeout: a step that overruns is interrupted (SIGINT: the bench stops its server and keeps its
          # store) so the results are still packed before the device call's own limit kills everything
          CUDA_VISIBLE_DEVICES=$gpu PORT=$port MEMF=$memf SGL_TREE=$tree OUT=$RES BUDGET=$left \
            REUSE=${REUSE:-} timeout -s INT -k 20 "$left" bash bench/gpu_runs.sh "$step"
          rc=$?  # before any command substitution below resets $?
          echo "=== $(date +%T) stream $stream step $step exit $rc after $(( $(date +%s) - start )) s of GPU time"
        done
      ) > "$OUT/stream-$stream.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
    tar czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null
    # a note, not the run's result: a host without nvidia-smi (DRY runs in CI) still exits 0
    nvidia-smi --query-gpu=name,memory.used --format=csv > "$OUT/gpus.txt" 2>&1 || true
    ;;
esac
