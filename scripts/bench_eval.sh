#!/usr/bin/env bash
# Evaluation throughput on the CPU (issue: evaluation): examples/s of `adacc eval` on LAMBADA
# and ARC-Easy for a gpt-117m-sized model and a tiny one (the quickstart shape), both with
# random weights (made by one optimizer step of `adacc train`; scores are then near chance,
# speed is what is measured). Run it on an otherwise idle machine.
#   scripts/bench_eval.sh [BUILD_DIR]      (default build; needs ../shared/data or datasets/ with
#                                           lambada_openai/, arc_easy/ and gpt2_tokenizer/)
# Environment: LIMIT_117M (default 64 documents per task), LIMIT_TINY (default 0 = the full
# test sets), BATCH (default 8), THREADS (default 0 = all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
ADACC="$BUILD/adacc"
[ -x "$ADACC" ] || bash scripts/build.sh "$BUILD" >/dev/null
DATA=../shared/data
[ -d "$DATA/lambada_openai" ] || DATA=datasets
VOCAB="$DATA/gpt2_tokenizer"
[ -d "$VOCAB" ] || VOCAB=datasets/gpt2_tokenizer
LIMIT_117M="${LIMIT_117M:-64}"
LIMIT_TINY="${LIMIT_TINY:-0}"
BATCH="${BATCH:-8}"
THREADS="${THREADS:-0}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# One training step on a shard of random tokens: a checkpoint with (near-)random weights.
python3 scripts/random_token_shard.py "$WORK/tokens.bin" 8192 1
TRAIN="$WORK/tokens.bin"
make_model() {  # make_model NAME CONFIG [--set ...]
  local name=$1 config=$2; shift 2
  "$ADACC" train --config "$config" --set "logging.run_dir=$WORK/$name" --set training.steps=1 \
    --set training.grad_accum=1 --set training.batch_size=1 --set training.seq_len=64 --set training.val_every=0 --set data.val= \
    --set "data.train=$TRAIN" --set eval.every=0 "$@" >/dev/null
}
make_model gpt-117m configs/gpt-117m.toml
make_model tiny configs/quickstart.toml

printf '%-9s %-15s %6s %6s %8s %10s %12s %12s %8s %8s\n' model task n batch threads seconds examples/s tokens/s acc ppl
bench() {  # bench NAME TASK LIMIT
  local json
  json=$("$ADACC" eval --checkpoint "$WORK/$1" --vocab "$VOCAB" --task "$2" --data "$DATA" --limit "$3" \
         --batch "$BATCH" --threads "$THREADS" 2>/dev/null | tail -1)
  python3 -c '
import json, sys
s = json.loads(sys.argv[2])
ppl = "-" if s["ppl"] is None else "%.4g" % s["ppl"]
print("%-9s %-15s %6d %6d %8d %10.2f %12.2f %12.0f %8.4f %8s" % (sys.argv[1], s["task"], s["n"], s["batch"], s["threads"],
      s["seconds"], s["examples_per_s"], s["tokens"] / s["seconds"], s["acc"], ppl))' "$1" "$json"
}
bench gpt-117m lambada "$LIMIT_117M"
bench gpt-117m arc_easy "$LIMIT_117M"
bench tiny lambada "$LIMIT_TINY"
bench tiny arc_easy "$LIMIT_TINY"
