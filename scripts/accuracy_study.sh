#!/usr/bin/env bash
# Accuracy study (issue 14): what each memory mode costs in accuracy, measured against run-to-run
# noise. A small GPT (L=4, C=128, H=4, T=64, B=8, dropout 0.1, GPT-2 BPE) trains on TinyShakespeare
# for STEPS steps in these runs (the same data and config but for what each line names):
#   none at seeds 1337, 1338, 1339   the noise band: spread of the final validation loss over seeds
#   full, quant, adacc, recompute-opt at seed 1337; adacc and recompute-opt at a budget equal to
#                                    quant's total memory (from `adacc memory`), so adacc must
#                                    compress about as much as quant
#   none, quant, adacc with the outlier hook ([stress]: 4 of ln1's and ln2's 128 channels scaled
#                                    50x at initialisation), seed 1337, the same budget
# Every run measures its gradient fidelity every 50 steps (training.fidelity_every: relative L2
# error and cosine of the parameter gradients vs keep-all at the run's current weights, first
# batch, dropout off). scripts/accuracy_study.py then writes accuracy_out/losses.csv (every logged
# point), accuracy_out/summary.csv, accuracy_out/accuracy.png (validation loss with the noise band
# shaded; gradient error vs step) and prints the table: final validation loss, gap vs none, gap in
# units of the noise (sigma over the three seeds), whether it is inside 2 sigma, mean gradient
# error, and the codecs adacc's last plan uses.
# About 25 minutes on 2 idle cores at the default 400 steps.
#   STEPS=N (default 400), OUTLIERS=0 skips the outlier-hook runs, CORPUS=FILE trains on another
#   text (default: TinyShakespeare from ../shared/data or its source), BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${STEPS:-400}"
OUTLIERS="${OUTLIERS:-1}"
BUILD_DIR="${BUILD_DIR:-build}"
OUT=accuracy_out
ADACC="$BUILD_DIR/adacc"
[ -x "$ADACC" ] || bash scripts/build.sh "$BUILD_DIR" >/dev/null
bash scripts/download_data.sh vocab datasets/gpt2_tokenizer >/dev/null
if [ -n "${CORPUS:-}" ]; then
  SHARDS=datasets/accuracy_corpus
  "$ADACC" prepare --input "$CORPUS" --out "$SHARDS" --vocab datasets/gpt2_tokenizer --val-tokens 32768 >/dev/null
else
  bash scripts/download_data.sh tinyshakespeare datasets/tinyshakespeare_text >/dev/null
  SHARDS=datasets/tinyshakespeare
  [ -f "$SHARDS/val_000000.bin" ] || "$ADACC" prepare --input datasets/tinyshakespeare_text/input.txt \
    --out "$SHARDS" --vocab datasets/gpt2_tokenizer --val-tokens 32768 >/dev/null
fi
mkdir -p "$OUT"
COMMON=(--config configs/tiny-shakespeare.toml
        --set model.n_layer=4 --set model.n_embd=128 --set model.n_head=4 --set model.max_seq_len=64
        --set model.dropout=0.1 --set training.batch_size=8 --set training.seq_len=64
        --set training.steps="$STEPS" --set training.val_every=50 --set training.val_batches=8
        --set training.fidelity_every=50
        --set lr.max=1e-3 --set lr.min=1e-4 --set lr.warmup_steps=50
        --set data.train="$SHARDS/train_*.bin" --set data.val="$SHARDS/val_*.bin"
        --set checkpoint.every=0 --set logging.print_every=50)
HOOK=(--set stress.outlier_channels=4 --set stress.outlier_scale=50)
# The budget: quant's total memory for this model and batch (from `adacc memory`).
BUDGET=$("$ADACC" memory "${COMMON[@]}" --modes quant | awk '$1 == "quant" {print $(NF-1) $NF}')
echo "budget for adacc and recompute-opt: $BUDGET (quant's total)"

# run NAME MODE SEED HOOK(0|1)
run() {
  local name=$1 mode=$2 seed=$3 hook=$4 extra=()
  [ "$hook" = 1 ] && extra+=("${HOOK[@]}")
  case "$mode" in adacc|recompute-opt) extra+=(--memory-budget "$BUDGET") ;; esac
  echo "== $name (mode $mode, seed $seed, outlier hook $hook) =="
  "$ADACC" train "${COMMON[@]}" --set memory.mode="$mode" --set training.seed="$seed" \
    --set logging.run_dir="$OUT/$name" --overwrite "${extra[@]}" \
    | { grep -E "^step .*(/$STEPS \||val_loss)|replan|plan \(" || true; } | tail -3
  if [ "$mode" = adacc ]; then  # the codecs of the plan the run ended with (its last profile)
    "$ADACC" plan "${COMMON[@]}" --set training.seed="$seed" "${extra[@]}" --profile "$OUT/$name/profile.json" \
      --format json >"$OUT/$name/final_plan.json"
  fi
  printf '%s,%s,%s,%s\n' "$name" "$mode" "$seed" "$hook" >>"$OUT/runs.csv"
}
echo "run,mode,seed,hook" >"$OUT/runs.csv"
run none none 1337 0
run none_seed1338 none 1338 0
run none_seed1339 none 1339 0
run full full 1337 0
run quant quant 1337 0
run adacc adacc 1337 0
run recompute-opt recompute-opt 1337 0
if [ "$OUTLIERS" = 1 ]; then
  run none_outliers none 1337 1
  run quant_outliers quant 1337 1
  run adacc_outliers adacc 1337 1
fi
python3 scripts/accuracy_study.py "$OUT"
