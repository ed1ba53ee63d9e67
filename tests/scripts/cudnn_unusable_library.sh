#!/usr/bin/env bash
# A libcudnn.so.9 that opens but cannot serve cuDNN's attention makes cuDNN unavailable, with the
# reason, and the default attention on CUDA materialized; it never lets adacc pick cudnn and then
# fail at the first attention call (ctest: Scripts.UnusableCudnnIsUnavailableWithTheReason). No GPU
# is needed: `adacc config` resolves the default attention for a CUDA run on any machine
# (src/config/config.cpp, resolve_default_attention; src/cuda/cudnn_library.cpp says why not).
# Two stand-ins for the library, compiled here, each found first through LD_LIBRARY_PATH: one that
# reports cuDNN 8, and a cuDNN 9 that has cudnnGetVersion and none of the functions the frontend calls.
# Usage: cudnn_unusable_library.sh ADACC_EXECUTABLE
set -euo pipefail
adacc="$1"
command -v cc >/dev/null || { echo "skipped: no C compiler (cc) to build the stand-in libraries"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0

# fake NAME VERSION: $work/NAME/libcudnn.so.9 whose cudnnGetVersion returns VERSION, and nothing else.
fake() {
  mkdir -p "$work/$1"
  printf '#include <stddef.h>\nsize_t cudnnGetVersion(void) { return %s; }\n' "$2" >"$work/$1/fake.c"
  cc -shared -fPIC -o "$work/$1/libcudnn.so.9" "$work/$1/fake.c"
}

# expect NAME FRAGMENT: with NAME's library, adacc config for a bf16 CUDA run takes materialized
# attention and says why, with FRAGMENT.
expect() {
  local out bad=0
  out="$(LD_LIBRARY_PATH="$work/$1" "$adacc" config --set training.device=cuda --set model.dtype=bf16 2>&1)" || {
    echo "FAIL $1: adacc config exited $?: $out"
    failed=1
    return
  }
  if ! grep -q '^model.attention  *"materialized"' <<<"$out"; then
    echo "FAIL $1: the default attention is not materialized: $(grep 'model.attention' <<<"$out")"
    bad=1
  fi
  if ! grep -qF "model.attention: materialized, not cudnn ($2" <<<"$out"; then
    echo "FAIL $1: no line saying why with '$2'"
    bad=1
  fi
  if [ "$bad" = 1 ]; then failed=1; else echo "ok   $1: $(grep -F 'not cudnn' <<<"$out")"; fi
}

fake cudnn8 80907
expect cudnn8 "libcudnn.so.9 reports version 80907, not cuDNN 9"
fake functionless 90100
expect functionless "libcudnn.so.9 (version 90100) has no cudnnCreate, which this adacc's cuDNN frontend calls"
exit "$failed"
