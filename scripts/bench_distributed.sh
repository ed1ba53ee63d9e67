#!/usr/bin/env bash
# Data-parallel scaling, and the gradient sums overlapped with backward: the same config trained by
# 1 process and by `mpirun -np 2` (the same per-rank batch), the 2-rank job once with
# training.overlap_grads = false (the sums start after the whole backward) and once with true
# (each block's sums start as backward finishes it), from the same weights on the same tokens.
# The runs are interleaved over ROUNDS rounds (the two 2-rank runs in alternating order), so a busy
# machine slows all of them alike; each run counts its median tokens/s over all ranks. Prints, over
# the rounds, the median and the range of each, the scaling efficiency
#   E = tokens/s(2 ranks) / (2 x tokens/s(1 rank)),
# 1.0 being perfect, and overlap's speed-up on / off, per round (the two runs of a round are
# neighbours in time) and their median.
#   CONFIG=FILE (default configs/tiny-shakespeare.toml)  STEPS=N (default 12; the first 2 are warm-up)
#   ROUNDS=N (default 3)  DEVICE=cpu|cuda (default cpu: each rank one thread; cuda: one GPU per rank,
#   NCCL, two GPUs needed)  ZERO=0|1 (default 0: training.zero)
# Random tokens: the speed does not depend on the text.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG="${CONFIG:-configs/tiny-shakespeare.toml}"
STEPS="${STEPS:-12}"
ROUNDS="${ROUNDS:-3}"
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
two_ranks() {  # RUN OVERLAP
  mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 2 build/adacc train --config "$CONFIG" "${SETS[@]}" \
    --set "training.overlap_grads=$2" --set "logging.run_dir=$OUT/$1" >/dev/null
}
for round in $(seq 1 "$ROUNDS"); do
  build/adacc train --config "$CONFIG" "${SETS[@]}" --set "logging.run_dir=$OUT/one_$round" >/dev/null
  if [ $((round % 2)) = 1 ]; then
    two_ranks "off_$round" false
    two_ranks "on_$round" true
  else
    two_ranks "on_$round" true
    two_ranks "off_$round" false
  fi
done
python3 - "$OUT" "$DEVICE" "$ZERO" "$ROUNDS" <<'PY'
import json, statistics, sys
out, device, zero, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def median_tokens_per_s(run):
    rows = [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
    return statistics.median(r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] > 2)
runs = {kind: [median_tokens_per_s(f"{kind}_{r}") for r in range(1, rounds + 1)] for kind in ("one", "off", "on")}
def line(label, values):
    return f"{label:<22}{statistics.median(values):10.0f} tokens/s  [{min(values):.0f} .. {max(values):.0f}]"
print(f"device {device}, training.zero = {zero}, {rounds} rounds: median [range] of each run's median")
print(line("1 rank", runs["one"]))
print(line("2 ranks, overlap off", runs["off"]) + "  (all ranks)")
print(line("2 ranks, overlap on", runs["on"]) + "  (all ranks)")
one = statistics.median(runs["one"])
print(f"scaling efficiency 2 vs 1: overlap off {statistics.median(runs['off']) / (2 * one):.2f}, "
      f"on {statistics.median(runs['on']) / (2 * one):.2f}")
ratios = [on / off for on, off in zip(runs["on"], runs["off"])]
print(f"overlap on / off: {statistics.median(ratios):.3f} (per round: {' '.join(f'{r:.3f}' for r in ratios)})")
PY
