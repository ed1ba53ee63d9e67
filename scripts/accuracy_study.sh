#!/usr/bin/env bash
# Accuracy study (planner issue): the same small GPT (L=4, C=256, H=4, T=128, dropout 0.1) trained
# from the same initialisation on the same TinyShakespeare batches in modes none, full (the
# identity check: bit-identical to none), quant (plain INT4) and adacc (planner + outlier-aware
# codecs + monitor) at a budget equal to quant's total memory, so adacc must compress about as
# much as quant. Writes accuracy_out/losses.csv (mode, step, loss, val_loss) and
# accuracy_out/loss.png, and prints each mode's final validation loss and its gap to none.
# About 14 minutes on 2 idle cores at the default 400 steps (0.5 s per step).
#   STEPS=N (default 400), CORPUS=FILE (default: TinyShakespeare from ../shared/data or its source)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${STEPS:-400}"
OUT=accuracy_out
[ -x build/adacc ] || bash scripts/build.sh build >/dev/null
bash scripts/download_data.sh vocab datasets/gpt2_tokenizer >/dev/null
if [ -n "${CORPUS:-}" ]; then
  SHARDS=datasets/accuracy_corpus
  build/adacc prepare --input "$CORPUS" --out "$SHARDS" --vocab datasets/gpt2_tokenizer --val-tokens 32768 >/dev/null
else
  bash scripts/download_data.sh tinyshakespeare datasets/tinyshakespeare_text >/dev/null
  SHARDS=datasets/tinyshakespeare
  [ -f "$SHARDS/val_000000.bin" ] || build/adacc prepare --input datasets/tinyshakespeare_text/input.txt \
    --out "$SHARDS" --vocab datasets/gpt2_tokenizer --val-tokens 32768 >/dev/null
fi
mkdir -p "$OUT"
COMMON=(--config configs/tiny-shakespeare.toml
        --set model.n_layer=4 --set model.n_embd=256 --set model.n_head=4 --set model.max_seq_len=128
        --set model.dropout=0.1 --set training.batch_size=8 --set training.seq_len=128
        --set training.steps="$STEPS" --set training.val_every=50 --set training.val_batches=8
        --set lr.max=1e-3 --set lr.min=1e-4 --set lr.warmup_steps=50
        --set data.train="$SHARDS/train_*.bin" --set data.val="$SHARDS/val_*.bin"
        --set checkpoint.every=0 --set logging.print_every=50)
# The budget: quant's total memory for this model and batch (from `adacc memory`).
BUDGET=$(build/adacc memory "${COMMON[@]}" --modes quant | awk '$1 == "quant" {print $(NF-1) $NF}')
echo "budget for adacc: $BUDGET (quant's total)"
for mode in none full quant adacc; do
  echo "== $mode =="
  extra=()
  [ "$mode" = adacc ] && extra=(--memory-budget "$BUDGET")
  build/adacc train "${COMMON[@]}" --set memory.mode="$mode" --set logging.run_dir="$OUT/$mode" "${extra[@]}" \
    | { grep -E "^step .*(/$STEPS \||val_loss)|replan|plan \(" || true; } | tail -4
done
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows, final = [], {}
for mode in ["none", "full", "quant", "adacc"]:
    for line in (out / mode / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "loss" in r or "val_loss" in r:
            rows.append((mode, r["step"], r.get("loss", ""), r.get("val_loss", "")))
        if "val_loss" in r:
            final[mode] = r["val_loss"]
with open(out / "losses.csv", "w") as f:
    f.write("mode,step,loss,val_loss\n")
    for row in rows:
        f.write(",".join(str(x) for x in row) + "\n")
print(f"wrote {out}/losses.csv")
print(f"{'mode':8} {'final val_loss':>15} {'gap vs none':>12}")
for mode, v in final.items():
    print(f"{mode:8} {v:15.4f} {100 * (v - final['none']) / final['none']:11.3f}%")
PY
python3 scripts/plot_metrics.py "$OUT"/none "$OUT"/full "$OUT"/quant "$OUT"/adacc --out "$OUT/loss.png" \
  --title "accuracy study: none / full / quant / adacc" || echo "(matplotlib missing: pip install matplotlib for the plot)"
