#!/usr/bin/env bash
# Data-parallel scaling: the same config trained by 1 process and by `mpirun -np 2` (the same
# per-rank batch), from the same weights on the same tokens. Prints each run's median tokens/s
# (over all ranks) and the scaling efficiency
#   E = tokens/s(2 ranks) / (2 x tokens/s(1 rank)),
# 1.0 being perfect; the gradient collectives (the whole model every step) are what it costs.
#   CONFIG=FILE (default configs/tiny-shakespeare.toml)  STEPS=N (default 12; the first 2 are warm-up)
#   DEVICE=cpu|cuda (default cpu: each rank one thread; cuda: one GPU per rank, NCCL, two GPUs needed)
#   ZERO=0|1 (default 0: training.zero)
# Random tokens: the speed does not depend on the text.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG="${CONFIG:-configs/tiny-shakespeare.toml}"
STEPS="${STEPS:-12}"
DEVICE="${DEVICE:-cpu}"
ZERO="${ZERO:-0}"
if [ "$DEVICE" = cuda ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$gpus" -ge 2 ] || { echo "bench_distributed: DEVICE=cuda needs two GPUs (NCCL takes one per rank); nvidia-smi lists ${gpus:-0}" >&2; exit 1; }
fi
[ -x build/adacc ] || bash scripts/build.sh build >/dev/null
command -v mpirun >/dev/null || { echo "bench_distributed: mpirun not found (scripts/install_deps.sh installs openmpi-bin)" >&2; exit 1; }
OUT=bench_out/distributed
rm -rf "$OUT" && mkdir -p "$OUT"
python3 scripts/random_token_shard.py "$OUT/tokens.bin" $((1 << 20)) 7
SETS=(--set "data.train=$OUT/tokens.bin" --set data.val= --set "training.steps=$STEPS" --set training.threads=1
      --set checkpoint.every=0 --set checkpoint.keep=1 --set training.grad_accum=1 --set logging.print_every=1000
      --set "training.device=$DEVICE" --set "training.zero=$ZERO")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
build/adacc train --config "$CONFIG" "${SETS[@]}" --set "logging.run_dir=$OUT/one" >/dev/null
mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 2 build/adacc train --config "$CONFIG" "${SETS[@]}" \
  --set "logging.run_dir=$OUT/two" >/dev/null
python3 - "$OUT" "$DEVICE" "$ZERO" <<'PY'
import json, statistics, sys
def median_tokens_per_s(run):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl")]
    return statistics.median(r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] > 2)
one, two = median_tokens_per_s("one"), median_tokens_per_s("two")
print(f"device {sys.argv[2]}, training.zero = {sys.argv[3]}")
print(f"1 rank : {one:10.0f} tokens/s")
print(f"2 ranks: {two:10.0f} tokens/s (all ranks)")
print(f"scaling efficiency 2 vs 1: {two / (2 * one):.2f}")
PY
