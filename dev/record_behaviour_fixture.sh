#!/usr/bin/env bash
# Records the behaviour fixture (tests/test_behaviour_fixture.cpp) on this machine from
# BASE_COMMIT's numbers, then checks this tree against them: the proof that a change moves no
# number, on the machine at hand.
#   dev/record_behaviour_fixture.sh BASE_COMMIT [--build-dir DIR] [--only-this-platform] [--new-profile]
# 1. builds BASE_COMMIT's adacc in a scratch worktree, with the options DIR (default build/) was
#    configured with, so that both compile the same code (the record's key says which);
# 2. runs this tree's test_behaviour_fixture against that adacc, recording (ADACC_RECORD_FIXTURE=1):
#    this platform's record in tests/fixtures/behaviour/expected_*.json is replaced, noting the commit;
# 3. runs it again against this tree's adacc, checking: it passes when this tree gives BASE_COMMIT's
#    numbers bit for bit (and every other platform's record within rounding).
# --only-this-platform drops the other platforms' records: for a commit that changes numbers on
#   purpose (record from that commit: BASE_COMMIT = HEAD), whose old records would no longer hold.
# --new-profile re-measures tiny_profile.json, which the adacc case plans from, with BASE_COMMIT's
#   adacc first (the plan and every adacc number may then change; the test checks that the plan
#   still compresses and recomputes something and that the run re-plans).
# Builds DIR's adacc and test_behaviour_fixture first (DIR must be configured: scripts/build.sh DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
BASE="" BUILD_DIR=build ONLY_THIS=0 NEW_PROFILE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="${2:?--build-dir needs a folder}"; shift 2 ;;
    --only-this-platform) ONLY_THIS=1; shift ;;
    --new-profile) NEW_PROFILE=1; shift ;;
    -h|--help) usage ;;
    -*) echo "error: unknown option $1" >&2; usage ;;
    *) [ -z "$BASE" ] || { echo "error: one BASE_COMMIT only (got $BASE and $1)" >&2; exit 2; }; BASE="$1"; shift ;;
  esac
done
[ -n "$BASE" ] || { echo "error: name the commit whose numbers are the reference (e.g. HEAD, or the commit before a refactor)" >&2; usage; }
COMMIT=$(git rev-parse --verify --quiet "$BASE^{commit}") ||
  { echo "error: '$BASE' is not a commit of this repository (git rev-parse $BASE)" >&2; exit 2; }
[ -f "$BUILD_DIR/CMakeCache.txt" ] ||
  { echo "error: $BUILD_DIR is not a configured build folder; configure and build it first: bash scripts/build.sh $BUILD_DIR" >&2; exit 2; }
cmake --build "$BUILD_DIR" -j"$(nproc)" --target adacc test_behaviour_fixture >/dev/null

# The base's build takes DIR's code-generation options, so both builds compile the same code.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt"; }
TMP=$(mktemp -d)
trap 'git worktree remove --force "$TMP/base" >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT
git worktree add --detach --quiet "$TMP/base" "$COMMIT"
echo "building adacc at ${COMMIT:0:12} in $TMP/base (the options of $BUILD_DIR)"
cmake -S "$TMP/base" -B "$TMP/base-build" -DCMAKE_BUILD_TYPE="$(cache CMAKE_BUILD_TYPE)" \
  -DADACC_NATIVE="$(cache ADACC_NATIVE)" -DADACC_SANITIZE="$(cache ADACC_SANITIZE)" \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$(cache CMAKE_CXX_COMPILER_LAUNCHER)" \
  -DADACC_CUDA=OFF -DADACC_BUILD_TESTS=OFF >/dev/null
CCACHE_BASEDIR="$TMP/base" cmake --build "$TMP/base-build" -j"$(nproc)" --target adacc >/dev/null
BASE_ADACC="$TMP/base-build/adacc"

FIX=tests/fixtures/behaviour
export OMP_WAIT_POLICY=passive
if [ "$NEW_PROFILE" = 1 ]; then
  python3 "$FIX/make_inputs.py" --vocab "$TMP/vocab" >/dev/null
  "$BASE_ADACC" prepare --input "$FIX/corpus.txt" --out "$TMP/data" --vocab "$TMP/vocab" --val-tokens 0 >/dev/null
  # One step is enough: the profile is measured before training starts (RUN_DIR/profile.json).
  "$BASE_ADACC" train --config "$FIX/tiny_dropout.toml" --set data.train="$TMP/data/train_000000.bin" \
    --set logging.run_dir="$TMP/run" --set memory.mode=adacc --set memory.budget=5MiB --set training.steps=1 >/dev/null
  cp "$TMP/run/profile.json" "$FIX/tiny_profile.json"
  echo "re-measured $FIX/tiny_profile.json"
fi
if [ "$ONLY_THIS" = 1 ]; then
  for f in "$FIX"/expected_*.json; do
    python3 -c 'import json, sys; p = sys.argv[1]; d = json.load(open(p)); d["platforms"] = {}
open(p, "w").write(json.dumps(d, indent=1, ensure_ascii=False) + "\n")' "$f"
  done
  echo "dropped the other platforms' records"
fi

ADACC_RECORD_FIXTURE=1 ADACC_FIXTURE_COMMIT="$COMMIT" ADACC_TEST_BINARY="$BASE_ADACC" "$BUILD_DIR/test_behaviour_fixture"
echo "checking this tree's adacc ($BUILD_DIR/adacc) against the numbers of ${COMMIT:0:12}"
"$BUILD_DIR/test_behaviour_fixture"
git status --short "$FIX"
