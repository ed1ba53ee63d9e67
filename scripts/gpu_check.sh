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
#      in this GPU's memory. (adacc and recompute-opt do not train on CUDA yet, so their step
#      times and R are not measured here.)
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

step "GPU"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv > "$RESULTS/gpu.txt" 2>&1; then
  echo "gpu_check: no NVIDIA GPU visible here (nvidia-smi failed): nothing to check"
  exit 2
fi
cat "$RESULTS/gpu.txt"
[ -f "$HERE/COMMIT" ] && echo "bundle of commit $(cat "$HERE/COMMIT")"

step "CUDA tests on the device"
timeout 240 "$BIN/test_cuda_device" --gtest_brief=1 2>&1 | tee "$RESULTS/cuda_tests.txt" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "CUDA TESTS FAILED"; status=1; }

# The kernel tests only (the model tests would take the sanitizers minutes).
KERNEL_TESTS='Cuda*:-CudaModel*:CudaKernelCoverage*'
for tool in memcheck racecheck; do
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

step "bench_gpu"
timeout 200 "$BIN/bench_gpu" --presets gpt-117m,gpt-345m --seq 1024 --steps 5 --warmup 2 \
  --json "$RESULTS/bench_gpu.json" 2>&1 | tee "$RESULTS/bench_gpu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "BENCH FAILED"; status=1; }

step "largest batch per mode, T=1024, by exact accounting"
CONFIGS="$HERE/configs"; [ -d "$CONFIGS" ] || CONFIGS="$HERE/../configs"
GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -d ' ')
for spec in "gpt-345m 32GiB" "gpt-4.7b ${GPU_MIB}MiB"; do
  set -- $spec
  for attention in materialized fused; do
    echo "-- $1, budget $2, attention $attention"
    timeout 150 "$BIN/adacc" memory --config "$CONFIGS/$1.toml" --device cuda --set training.seq_len=1024 \
      --set model.attention=$attention --modes none,full,selective,quant,adacc,recompute-opt --memory-budget "$2" \
      2>&1 | tee "$RESULTS/max_batch_${1}_${attention}.txt" | grep -E '^(mode|none|full|selective|quant|adacc|recompute-opt) '
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "ADACC MEMORY FAILED ($1, $attention)"; status=1; }
  done
done

step "done: status $status"
exit $status
