#!/usr/bin/env bash
# Measures GPT-2 tokenizer throughput (MB/s, one core) with `adacc tokenize --count`.
#
#   scripts/bench_tokenizer.sh [TEXT_FILE] [VOCAB_DIR]
#
# Defaults: ../shared/data/tinyshakespeare/input.txt and ../shared/data/gpt2_tokenizer.
# Builds BUILD_DIR/adacc (default build/) if it is missing. The text is repeated REPEAT times
# (default 8) so encoding, not process start and vocabulary loading, dominates; the time of a
# run on empty input (start + load) is subtracted.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
text="${1:-$repo/../shared/data/tinyshakespeare/input.txt}"
vocab="${2:-$repo/../shared/data/gpt2_tokenizer}"
build_dir="${BUILD_DIR:-$repo/build}"
repeat="${REPEAT:-8}"

if [[ ! -x "$build_dir/adacc" ]]; then
    cmake -S "$repo" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$build_dir" --target adacc -j"$(nproc)" >/dev/null
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for _ in $(seq "$repeat"); do cat "$text"; done >"$scratch/text"

# Best of three runs, in seconds.
best_seconds() {
    local best=""
    for _ in 1 2 3; do
        local start end
        start=$(date +%s.%N)
        "$build_dir/adacc" tokenize --count --vocab "$vocab" <"$1" >"$scratch/count"
        end=$(date +%s.%N)
        best=$(awk -v b="$best" -v s="$start" -v e="$end" 'BEGIN { t = e - s; print (b == "" || t < b) ? t : b }')
    done
    echo "$best"
}

: >"$scratch/empty"
overhead=$(best_seconds "$scratch/empty")
total=$(best_seconds "$scratch/text")
bytes=$(stat -c %s "$scratch/text")
awk -v bytes="$bytes" -v tokens="$(cat "$scratch/count")" -v total="$total" -v overhead="$overhead" -v name="$text" 'BEGIN {
    printf "%s x%d: %d bytes -> %d tokens, encode %.3f s (+%.3f s start and vocabulary load)\n",
           name, '"$repeat"', bytes, tokens, total - overhead, overhead
    printf "tokenizer: %.1f MB/s\n", bytes / 1e6 / (total - overhead)
}'
