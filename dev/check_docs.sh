#!/usr/bin/env bash
# Checks that the documentation names only what the repository holds (ctest: Docs.ArchitectureNamesExist).
#
#   dev/check_docs.sh [REPO_ROOT]      (default: the folder above this script)
#
# 1. Every reference in docs/architecture.md and docs/design.md to a file of the repository names
#    one that exists. A reference is a repository path ending in a source or document extension,
#    optionally followed by a colon and a symbol of that file, written without spaces:
#        src/engine/tape.h                      the file must exist
#        src/engine/driver.h:Driver::weight     ... and mention the symbol
#    A symbol exists when the file contains its last component (after the last `::` or `.`) as a
#    whole word: `weight` for Driver::weight, `ATrainingStepCopiesOnlyTokensInAndTheLossAndNormOut`
#    for tests/test_backend.cpp:Backend.ATrainingStepCopiesOnlyTokensInAndTheLossAndNormOut. That
#    catches a renamed or removed name, not a name that moved to another class of the same file:
#    it is a grep, not a C++ parser. A path holding the placeholder NAME (kernels/cpu/NAME.cpp)
#    only needs its folder to exist; a backticked folder (`src/adacc/`) must exist; a relative
#    Markdown link must reach a file.
# 2. Every citation of a design section in the code, written as docs/design.md, 'The tape', names
#    a heading of docs/design.md (the name and its quotes on one line; "..., 'A' and 'B'" cites two).
# 3. No file cites the design card this project started from, which lives outside the repository:
#    the card's section sign or its file name (the patterns are split below, so this script does
#    not match itself).
# 4. What a user's clone builds and runs (src/, kernels/, models/, configs/, benchmarks/, the CMake
#    files) names no folder beside the repository: only tests and scripts may read the optional
#    test data in ../shared/data, and they skip without it.
# Prints every problem and exits 1 when there is one; prints a one-line summary and exits 0
# otherwise.
set -uo pipefail
export LC_ALL=C
ROOT="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$ROOT" 2>/dev/null || { echo "check_docs: no folder $ROOT" >&2; exit 2; }
REAL_ROOT=$(pwd -P)

DOCS=(docs/architecture.md docs/design.md)
SCANNED=(docs src kernels models data benchmarks tests scripts dev cmake configs CMakeLists.txt README.md)
EXT='h|hpp|cpp|cu|cuh|inc|md|sh|py|toml|cmake|txt|json|jsonl'
PATH_RE="(\\.\\./)*[A-Za-z0-9_.-]*[A-Za-z0-9_]/[A-Za-z0-9_./-]*\\.($EXT)"
SYMBOL_RE='(:[A-Za-z_][A-Za-z0-9_:.]*[A-Za-z0-9_])?'

problems=0 refs=0 symbols=0 citations=0
fail() {
  echo "check_docs: $*"
  problems=$((problems + 1))
}

for doc in "${DOCS[@]}"; do
  if [ ! -f "$doc" ]; then
    fail "$doc is missing"
    continue
  fi
  # 1. path and path:symbol references, with the line they are on.
  while IFS=: read -r line ref; do
    [ -n "$ref" ] || continue
    refs=$((refs + 1))
    path=${ref%%:*}
    symbol=
    [ "$path" != "$ref" ] && symbol=${ref#*:}
    if [[ $path == ../* ]]; then
      fail "$doc:$line: \`$ref\`: outside the repository"
      continue
    fi
    if [[ $path == *NAME* ]]; then
      [ -d "$(dirname "$path")" ] || fail "$doc:$line: \`$ref\`: no folder $(dirname "$path")"
      continue
    fi
    if [ ! -f "$path" ]; then
      fail "$doc:$line: \`$ref\`: no file $path"
      continue
    fi
    [ -n "$symbol" ] || continue
    symbols=$((symbols + 1))
    last=${symbol##*::}
    last=${last##*.}
    grep -qw -- "$last" "$path" || fail "$doc:$line: \`$ref\`: $path does not mention $last"
  done < <(grep -noE "$PATH_RE$SYMBOL_RE" "$doc")
  # Backticked folders.
  while IFS=: read -r line dir; do
    dir=${dir//\`/}
    refs=$((refs + 1))
    [ -d "$dir" ] || fail "$doc:$line: \`$dir\`: no folder $dir"
  done < <(grep -noE '`[A-Za-z0-9_.-]+/([A-Za-z0-9_.-]+/)*`' "$doc")
  # Relative Markdown links (to another document, maybe with an anchor).
  while IFS=: read -r line link; do
    target=${link#](}
    target=${target%)}
    target=${target%%#*}
    [ -n "$target" ] || continue
    refs=$((refs + 1))
    resolved=$(realpath -m "$(dirname "$doc")/$target")
    if [[ $resolved != "$REAL_ROOT"/* ]]; then
      fail "$doc:$line: link ($target) leaves the repository"
    elif [ ! -e "$resolved" ]; then
      fail "$doc:$line: link ($target) reaches no file"
    fi
  done < <(grep -noE '\]\([^)#:]*(#[^)]*)?\)' "$doc")
done

# 2. Citations of docs/design.md's sections.
if [ -f docs/design.md ]; then
  while IFS=: read -r file line cite; do
    while IFS= read -r quoted; do
      name=${quoted#\'}
      name=${name%\'}
      citations=$((citations + 1))
      sed -nE "s/^#+ //p" docs/design.md | grep -qxF -- "$name" ||
        fail "$file:$line: cites section '$name' of docs/design.md, which has no such heading"
    done < <(printf '%s\n' "$cite" | grep -oE "'[^']+'")
  done < <(grep -rnoE "docs/design\\.md, '[^']+'( and '[^']+')*" "${SCANNED[@]}" 2>/dev/null)
fi

# 3. The old card: its section sign, a numbered section, or its file name.
card_section="DESIGN"' §'
card_number="DESIGN"' [0-9]'
card_file="DESIGN"'\.md'
while IFS= read -r hit; do
  fail "${hit%%:*}:$(cut -d: -f2 <<<"$hit"): cites the design card outside the repository: $(cut -d: -f3- <<<"$hit" | sed 's/^[[:space:]]*//')"
done < <(grep -rnE -e "$card_section" -e "$card_number" -e "$card_file" "${SCANNED[@]}" 2>/dev/null)

# 4. The engine's own files and folders beside the repository.
beside=".."'/shared'
while IFS= read -r hit; do
  fail "${hit%%:*}:$(cut -d: -f2 <<<"$hit"): names a folder outside the repository: $(cut -d: -f3- <<<"$hit" | sed 's/^[[:space:]]*//')"
done < <(grep -rnF -e "$beside" src kernels models configs benchmarks CMakeLists.txt cmake 2>/dev/null)

if [ "$problems" -gt 0 ]; then
  echo "check_docs: $problems problem(s); names in docs/architecture.md and docs/design.md must be files and symbols of this repository, and the code cites docs/design.md's headings"
  exit 1
fi
echo "check_docs: ok ($refs references, $symbols of them symbols; $citations citations of docs/design.md)"
