#!/usr/bin/env bash
# The main job on a fresh machine: installs dependencies, builds Release, prepares the default
# English corpus (Debian's fortunes package: ~15k short texts), trains the quickstart config for
# a few minutes with the loss falling, samples text from the result, then compares the memory
# modes on the same model (tape bytes, step time, loss). The GPT-2 vocab comes from
# ../shared/data when present, else from OpenAI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# Only the engine (the test suite is scripts/test.sh's job): a fresh build takes a few minutes.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target adacc -j"$(nproc)"
bash scripts/download_data.sh vocab datasets/gpt2_tokenizer
if [ ! -f datasets/fortunes/val_000000.bin ]; then
  build/adacc prepare --input /usr/share/games/fortunes --out datasets/fortunes \
    --vocab datasets/gpt2_tokenizer --val-tokens 20000
fi
rm -rf runs/quickstart
build/adacc train --config configs/quickstart.toml
build/adacc sample --checkpoint runs/quickstart --vocab datasets/gpt2_tokenizer \
  --prompt "The secret of life is" --tokens 40 --temperature 0.8 --top-k 40 --seed 1
echo
echo "== memory modes: same weights and batches, 4 steps each =="
build/adacc compare --config configs/quickstart.toml --modes none,full,selective,quant --batch 8,16 --steps 4 2>/dev/null
echo
echo "metrics: runs/quickstart/metrics.jsonl   config: runs/quickstart/config.toml"
echo "plot:    python3 scripts/plot_metrics.py runs/quickstart --out runs/quickstart/loss.png"
