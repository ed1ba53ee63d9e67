#!/usr/bin/env bash
# Checks that the C++ and CUDA files changed since BASE follow .clang-format (clang-format 14,
# Debian's clang-format package). The whole tree is not formatted at once: a file is formatted
# when a change touches it, so this checks what a branch changed.
#   dev/check_format.sh BASE          files changed between BASE and the working tree
#   dev/check_format.sh BASE --fix    formats them in place
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${1:?usage: dev/check_format.sh BASE [--fix]}"
FIX="${2:-}"
command -v clang-format >/dev/null || { echo "error: no clang-format (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git diff --name-only --diff-filter=AMR "$BASE" -- '*.cpp' '*.h' '*.cu' '*.cuh')
[ "${#files[@]}" -gt 0 ] || { echo "check_format: no C++ file changed since $BASE"; exit 0; }
if [ "$FIX" = --fix ]; then
  clang-format -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
elif clang-format --dry-run -Werror "${files[@]}" 2>/dev/null; then
  echo "check_format: ok (${#files[@]} files changed since $BASE)"
else
  clang-format --dry-run "${files[@]}" 2>&1 | grep -E '^[^ ].*: (warning|error):' | cut -d: -f1 | sort -u |
    sed 's/^/check_format: not formatted: /'
  echo "check_format: run dev/check_format.sh $BASE --fix"
  exit 1
fi
