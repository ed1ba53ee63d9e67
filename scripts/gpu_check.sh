#!/usr/bin/env bash
# The GPU check: on a machine with one NVIDIA GPU, its driver and the CUDA toolkit (no Debian
# packages or network needed), in under 8 minutes:
#   1. the CUDA tests on the device (test_cuda_device: every kernel against its CPU twin, the
#      whole-model training steps against the CPU backend, recompute bit-identity, checkpoints);
#   2. compute-sanitizer memcheck and racecheck on the kernel tests;
#   3. bench_gpu: gpt-117m and gpt-345m at T=1024 (step ms, tokens/s, MFU) and the fixed memory
#      modes at one batch: a table on stdout and bench_gpu.json;
#   4. the largest batch per memory mode by exact accounting (`adacc memory --device cuda`; the
#      planned modes through the planner on the profiler's slice, profiled on this machine's CPU):
#      gpt-345m at T=1024 in 32 GiB (the Adacc paper's V100-32GB setting) and gpt-4.7b at T=1024
#      in this GPU's memory;
#   5. the planned modes training on the GPU: gpt-345m at T=1024, batch 32 (twice what none
#      holds in 32 GiB), `adacc compare` of none (unbudgeted, the reference), full, quant,
#      recompute-opt and adacc under a 32 GiB budget: step ms, tokens/s, and
#      R = (t_full - t_adacc) / (t_full - t_none);
#   6. gpt-4.7b at T=1024 with fused attention: adacc at the largest batch step 4 found within
#      this GPU's free memory, three steps (tokens/s).
# Steps 5 and 6 train on random tokens (a shard written here with python3): their speed does not
# depend on the text. GPU_CHECK_STEPS picks steps (comma-separated names: tests, sanitizers, bench,
# batches, planned, large; default all), so a check that would outlast one device call can be
# split into two.
# Run from a bundle (bash scripts/gpu_bundle.sh DIR on a CPU machine, then bash DIR/gpu_check.sh),
# or from a checkout whose build/ has the CUDA targets (bash scripts/gpu_check.sh).
# Results go to $OUT when set (the device tool's folder), else gpu_check_out/.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
if [ -x "$HERE/bin/test_cuda_device" ]; then BIN="$HERE/bin"; export LD_LIBRARY_PATH="$HERE/lib:${LD_LIBRARY_PATH:-}"
else BIN="$HERE/../build"; fi
RESULTS="${OUT:-gpu_check_out}"
mkdir -p "$RESULTS"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}"
export PATH="$CUDA_HOME/bin:$CUDA_HOME/compute-sanitizer:$PATH"
status=0
step() { echo; echo "== $* ($(date +%T))"; }
STEPS=",${GPU_CHECK_STEPS:-tests,sanitizers,bench,batches,planned,large},"
want() { [[ "$STEPS" == *",$1,"* ]]; }

step "GPU"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv > "$RESULTS/gpu.txt" 2>&1; then
  echo "gpu_check: no NVIDIA GPU visible here (nvidia-smi failed): nothing to check"
  exit 2
fi
cat "$RESULTS/gpu.txt"
[ -f "$HERE/COMMIT" ] && echo "bundle of commit $(cat "$HERE/COMMIT")"

if want tests; then
  step "CUDA tests on the device"
  timeout 240 "$BIN/test_cuda_device" --gtest_brief=1 2>&1 | tee "$RESULTS/cuda_tests.txt" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "CUDA TESTS FAILED"; status=1; }
fi

# The kernel tests only (the model tests would take the sanitizers minutes).
KERNEL_TESTS='Cuda*:-CudaModel*:CudaKernelCoverage*'
for tool in memcheck racecheck; do
  want sanitizers || break
  step "compute-sanitizer $tool"
  if command -v compute-sanitizer >/dev/null; then
    timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN/test_cuda_device" \
      --gtest_filter="$KERNEL_TESTS" --gtest_brief=1 > "$RESULTS/sanitizer_$tool.txt" 2>&1
    rc=$?
    tail -4 "$RESULTS/sanitizer_$tool.txt"
    [ "$rc" -eq 0 ] || { echo "compute-sanitizer $tool: exit $rc (see sanitizer_$tool.txt)"; status=1; }
  else
    echo "compute-sanitizer not found in $CUDA_HOME: skipped"
  fi
done

if want bench; then
  step "bench_gpu"
  timeout 200 "$BIN/bench_gpu" --presets gpt-117m,gpt-345m --seq 1024 --steps 5 --warmup 2 \
    --json "$RESULTS/bench_gpu.json" 2>&1 | tee "$RESULTS/bench_gpu.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "BENCH FAILED"; status=1; }
fi

CONFIGS="$HERE/configs"; [ -d "$CONFIGS" ] || CONFIGS="$HERE/../configs"
GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -d ' ')
want batches && step "largest batch per mode, T=1024, by exact accounting"
for spec in "gpt-345m 32GiB" "gpt-4.7b ${GPU_MIB}MiB"; do
  want batches || break
  set -- $spec
  for attention in materialized fused; do
    echo "-- $1, budget $2, attention $attention"
    timeout 150 "$BIN/adacc" memory --config "$CONFIGS/$1.toml" --device cuda --set training.seq_len=1024 \
      --set model.attention=$attention --modes none,full,selective,quant,adacc,recompute-opt --memory-budget "$2" \
      2>&1 | tee "$RESULTS/max_batch_${1}_${attention}.txt" | grep -E '^(mode|none|full|selective|quant|adacc|recompute-opt) '
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "ADACC MEMORY FAILED ($1, $attention)"; status=1; }
  done
done

# llm.c's token shard format (data/token_shard.h): 256 int32 of header, then uint16 ids.
SHARD="$RESULTS/random_tokens.bin"
{ want planned || want large; } && python3 - "$SHARD" <<'PY'
import random, struct, sys
random.seed(1337)
n = 1 << 20
header = [20240520, 1, n] + [0] * 253
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % n, *(random.randrange(50257) for _ in range(n))))
PY
DATA_SETS=(--set "data.train=$SHARD" --set data.val= --set training.grad_accum=1 --set training.seq_len=1024)

if want planned; then
  step "planned modes on the GPU: gpt-345m, T=1024, batch 32, 32 GiB"
  timeout 240 "$BIN/adacc" compare --config "$CONFIGS/gpt-345m.toml" --device cuda "${DATA_SETS[@]}" \
    --modes none,full,quant,recompute-opt,adacc --batch 32 --steps 6 --warmup 2 --memory-budget 32GiB \
    2>&1 | tee "$RESULTS/compare_345m.txt" | grep -vE '^compare: '
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "ADACC COMPARE FAILED (gpt-345m)"; status=1; }
fi

if want large; then
  step "gpt-4.7b, adacc at its largest batch in this GPU's free memory, fused attention"
  FREE_MIB=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1 | tr -d ' ')
  BUDGET_MIB=$((FREE_MIB - 1024))  # room for the CUDA context and cuBLASLt's own
  B47=$(timeout 150 "$BIN/adacc" memory --config "$CONFIGS/gpt-4.7b.toml" --device cuda --set training.seq_len=1024 \
    --set model.attention=fused --modes none,adacc --memory-budget "${BUDGET_MIB}MiB" 2>/dev/null \
    | tee "$RESULTS/max_batch_4.7b_free.txt" | awk '$1 == "adacc" {print $NF}')
  grep -E '^(none|adacc) ' "$RESULTS/max_batch_4.7b_free.txt"
  if [ -n "$B47" ] && [ "$B47" -gt 0 ]; then
    timeout 300 "$BIN/adacc" compare --config "$CONFIGS/gpt-4.7b.toml" --device cuda "${DATA_SETS[@]}" \
      --set model.attention=fused --modes adacc --batch "$B47" --steps 3 --warmup 1 \
      --memory-budget "${BUDGET_MIB}MiB" --no-fidelity 2>&1 | tee "$RESULTS/compare_4.7b.txt" | grep -vE '^compare: '
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "ADACC COMPARE FAILED (gpt-4.7b)"; status=1; }
  else
    echo "no adacc batch of gpt-4.7b fits ${BUDGET_MIB} MiB"; status=1
  fi
fi

step "done: status $status"
exit $status
