#!/usr/bin/env bash
# Accounted memory against the process's peak RSS, per memory mode: trains a config for a few
# steps in each mode on random tokens and reads the run's last line ("memory: accounted X, the
# process's peak RSS Y"). Prints both, their difference and whether the accounting is within the
# README's promise: max(5% of the peak, 64 MiB).
#   CONFIG=FILE (default configs/gpt-117m.toml)  BATCH=B (default 4)  SEQ=T (default 256)
#   STEPS=N (default 2)  MODES="none full ..." (default: every mode; adacc and recompute-opt
#   plan for BUDGET, default halfway between full's and none's totals from `adacc memory`)
#   EXTRA="--set k=v ..." (more overrides, e.g. a small model's shape)
# CPU only: on CUDA the run's line gives the device's memory in use instead.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG="${CONFIG:-configs/gpt-117m.toml}"
BATCH="${BATCH:-4}"
SEQ="${SEQ:-256}"
STEPS="${STEPS:-2}"
MODES="${MODES:-none full selective quant adacc recompute-opt}"
read -r -a EXTRA_SETS <<<"${EXTRA:-}"
[ -x build/adacc ] || bash scripts/build.sh build >/dev/null
OUT=bench_out/memory_rss
rm -rf "$OUT" && mkdir -p "$OUT"
python3 scripts/random_token_shard.py "$OUT/tokens.bin" $((1 << 18)) 7
SETS=(--set "data.train=$OUT/tokens.bin" --set data.val= --set "training.steps=$STEPS"
      --set "training.batch_size=$BATCH" --set "training.seq_len=$SEQ" --set training.grad_accum=1
      --set checkpoint.every=0 --set training.val_every=0 --set eval.every=0 "${EXTRA_SETS[@]}")
if [ -z "${BUDGET:-}" ]; then
  # Halfway between full recomputation's total and keep-all's (the last column of `adacc memory`).
  BUDGET=$(build/adacc memory --config "$CONFIG" "${SETS[@]}" --modes none full | python3 -c '
import sys
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
total = {w[0]: float(w[-2]) * units[w[-1]] for w in (l.split() for l in sys.stdin) if w and w[0] in ("none", "full")}
print(int(total["none"] + total["full"]) // 2)')
fi
printf '%-14s %14s %14s %14s %8s  %s\n' mode accounted peak_rss rss-accounted ratio within
for mode in $MODES; do
  budget=()  # the fixed modes run unbudgeted: the budget is between their totals
  case "$mode" in adacc|recompute-opt) budget=(--set "memory.budget=$BUDGET") ;; esac
  line=$(build/adacc train --config "$CONFIG" "${SETS[@]}" --set "memory.mode=$mode" "${budget[@]}" \
    --set "logging.run_dir=$OUT/$mode" --overwrite 2>&1 | grep '^memory: accounted' || true)
  [ -n "$line" ] || { echo "bench_memory_rss: mode $mode printed no memory line (see $OUT/$mode)" >&2; exit 1; }
  python3 - "$mode" "$line" <<'PY'
import re, sys
mode, line = sys.argv[1], sys.argv[2]
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
acc, rss = ([float(v) * units[u] for v, u in re.findall(r"([\d.]+) (B|KiB|MiB|GiB|TiB)", line)] + [0, 0])[:2]
bound = max(0.05 * rss, 64 * 2**20)
within = "yes" if abs(rss - acc) <= bound else "NO"
print(f"{mode:<14} {acc / 2**20:10.1f} MiB {rss / 2**20:10.1f} MiB {(rss - acc) / 2**20:10.1f} MiB {rss / acc:8.3f}  {within}")
PY
done
