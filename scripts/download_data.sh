#!/usr/bin/env bash
# Downloads third-party data from its official sources (never committed to the project).
#   scripts/download_data.sh vocab [DIR]            GPT-2 encoder.json + vocab.bpe (OpenAI)  -> DIR (default datasets/gpt2_tokenizer)
#   scripts/download_data.sh tinyshakespeare [DIR]  char-rnn's input.txt (karpathy/char-rnn)  -> DIR (default datasets/tinyshakespeare_text)
#   scripts/download_data.sh lambada [DIR]          OpenAI's lambada_test.jsonl             -> DIR (default datasets/lambada_openai)
#   scripts/download_data.sh arc_easy [DIR]         AI2's ARC-V1-Feb2018 zip, ARC-Easy jsonl -> DIR (default datasets/arc_easy)
# When ../shared/data holds a file already, it is copied from there instead (same bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=../shared/data
fetch() {  # fetch URL OUT [SHARED_COPY]
  if [ -n "${3:-}" ] && [ -f "$3" ]; then cp "$3" "$2"; return; fi
  curl -fL --retry 3 -o "$2.part" "$1" && mv "$2.part" "$2"
}
what="${1:-}"
case "$what" in
  vocab)
    dir="${2:-datasets/gpt2_tokenizer}"; mkdir -p "$dir"
    for f in encoder.json vocab.bpe; do
      [ -f "$dir/$f" ] || fetch "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/$f" "$dir/$f" "$SHARED/gpt2_tokenizer/$f"
    done ;;
  tinyshakespeare)
    dir="${2:-datasets/tinyshakespeare_text}"; mkdir -p "$dir"
    [ -f "$dir/input.txt" ] || fetch "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt" "$dir/input.txt" "$SHARED/tinyshakespeare/input.txt" ;;
  lambada)
    dir="${2:-datasets/lambada_openai}"; mkdir -p "$dir"
    [ -f "$dir/lambada_test.jsonl" ] || fetch "https://openaipublic.blob.core.windows.net/gpt-2/data/lambada_test.jsonl" "$dir/lambada_test.jsonl" "$SHARED/lambada_openai/lambada_test.jsonl" ;;
  arc_easy)
    dir="${2:-datasets/arc_easy}"; mkdir -p "$dir"
    if [ -f "$SHARED/arc_easy/ARC-Easy-Test.jsonl" ]; then cp "$SHARED"/arc_easy/ARC-Easy-*.jsonl "$dir/"
    else
      tmp=$(mktemp -d); fetch "https://ai2-public-datasets.s3.amazonaws.com/arc/ARC-V1-Feb2018.zip" "$tmp/arc.zip"
      (cd "$tmp" && unzip -q arc.zip) && cp "$tmp"/ARC-V1-Feb2018-2/ARC-Easy/ARC-Easy-*.jsonl "$dir/"
    fi ;;
  *) echo "usage: $0 vocab|tinyshakespeare|lambada|arc_easy [DIR]" >&2; exit 2 ;;
esac
echo "ready: ${dir}"
