#!/usr/bin/env bash
# Records the behaviour fixture (tests/test_behaviour_fixture.cpp) for this platform: rewrites this
# platform's record in tests/fixtures/behaviour/expected_*.json from the numbers the build in
# BUILD_DIR produces, then runs the test once more in checking mode (it must pass: the numbers are
# deterministic). Run it only from a commit whose numbers are the reference (the fixture was first
# recorded at 0b85d84); a refactor that promises "no number changes" must pass the test WITHOUT
# re-recording.
#   scripts/record_behaviour_fixture.sh [BUILD_DIR]                 (default: build)
#   scripts/record_behaviour_fixture.sh [BUILD_DIR] --new-profile   also re-measure tiny_profile.json
# --new-profile replaces the committed profile the adacc case plans from (the plan and every adacc
# number may then change, and the budget may need another look: the test checks that the plan
# still compresses and recomputes something and that the run re-plans).
# It builds nothing: build adacc and test_behaviour_fixture first
#   (cmake --build BUILD_DIR --target adacc test_behaviour_fixture).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
NEW_PROFILE="${2:-}"
for f in "$BUILD_DIR/adacc" "$BUILD_DIR/test_behaviour_fixture"; do
  [ -x "$f" ] || { echo "error: $f is not built (cmake --build $BUILD_DIR --target adacc test_behaviour_fixture)" >&2; exit 2; }
done
FIX=tests/fixtures/behaviour
export OMP_WAIT_POLICY=passive

if [ "$NEW_PROFILE" = "--new-profile" ]; then
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  python3 "$FIX/make_inputs.py" --vocab "$TMP/vocab" >/dev/null
  "$BUILD_DIR/adacc" prepare --input "$FIX/corpus.txt" --out "$TMP/data" --vocab "$TMP/vocab" --val-tokens 0 >/dev/null
  # One step is enough: the profile is measured before training starts (RUN_DIR/profile.json).
  "$BUILD_DIR/adacc" train --config "$FIX/tiny_dropout.toml" --set data.train="$TMP/data/train_000000.bin" \
    --set logging.run_dir="$TMP/run" --set memory.mode=adacc --set memory.budget=5MiB --set training.steps=1 >/dev/null
  cp "$TMP/run/profile.json" "$FIX/tiny_profile.json"
  echo "re-measured $FIX/tiny_profile.json"
elif [ -n "$NEW_PROFILE" ]; then
  echo "error: unknown option $NEW_PROFILE (only --new-profile)" >&2
  exit 2
fi

ADACC_RECORD_FIXTURE=1 "$BUILD_DIR/test_behaviour_fixture"
"$BUILD_DIR/test_behaviour_fixture"
git status --short "$FIX"
