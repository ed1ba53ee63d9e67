#!/usr/bin/env bash
# Memory-mode comparison (tape issue): `adacc compare` on gpt-117m at T=256, B=1,2,4, and on
# the small tiny-shakespeare config, on TinyShakespeare tokens. Prints the tables and writes
# them as CSV to bench_out/. Expected shape: `full` keeps ~2*N*C bytes per layer (fp32: 4*N*C)
# plus one layer's working set, `selective` drops the T x T tensors, `quant` ~1/4 of none's
# float tensors plus scales (1/8 for bit-packed masks).
#   STEPS=N (default 3) measured steps after one warm-up step per (mode, batch).
# compare takes training's steps, grad_accum micro-batches each: gpt-117m's 32 are set to 1 here,
# so a step is one micro-batch of B x 256 tokens (as README's figures were measured).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${STEPS:-3}"
[ -x build/adacc ] || bash scripts/build.sh build >/dev/null
bash scripts/download_data.sh vocab datasets/gpt2_tokenizer >/dev/null
bash scripts/download_data.sh tinyshakespeare datasets/tinyshakespeare_text >/dev/null
if [ ! -f datasets/tinyshakespeare/val_000000.bin ]; then
  build/adacc prepare --input datasets/tinyshakespeare_text/input.txt --out datasets/tinyshakespeare \
    --vocab datasets/gpt2_tokenizer --val-tokens 32768 >/dev/null
fi
mkdir -p bench_out
DATA=(--set data.train=datasets/tinyshakespeare/train_000000.bin --set data.val=datasets/tinyshakespeare/val_000000.bin)
echo "== gpt-117m, T=256 =="
build/adacc compare --config configs/gpt-117m.toml "${DATA[@]}" --set training.seq_len=256 --set model.dropout=0.1 \
  --set training.grad_accum=1 --modes none,full,selective,quant --batch 1,2,4 --steps $((STEPS + 1)) --warmup 1 2>/dev/null \
  | tee bench_out/memory_modes_gpt117m.txt
echo
echo "== tiny-shakespeare config (L4 C128 T128, dropout 0.1) =="
build/adacc compare --config configs/tiny-shakespeare.toml "${DATA[@]}" --set model.dropout=0.1 \
  --modes none,full,selective,quant --batch 4,8,16 --steps $((STEPS + 1)) --warmup 1 2>/dev/null \
  | tee bench_out/memory_modes_small.txt
