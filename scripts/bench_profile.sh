#!/usr/bin/env bash
# Profile stability (issue: timings you can trust). Profiles the same config RUNS times with
# `adacc plan --save-profile` and plans each profile at one budget; prints each op's forward time
# per profile (the median of the profiler's repeats, with their range) and whether every profile
# gave the same plan. Run it on an otherwise idle machine: on a busy one the ranges show it.
#   scripts/bench_profile.sh [--config FILE] [--budget SIZE] [--runs N]
# Defaults: configs/quickstart-compare.toml at 596MiB (the quickstart's comparison, a budget that
# mixes keep, compress and recompute), 3 runs. Exits 1 when two profiles plan differently.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=configs/quickstart-compare.toml BUDGET=596MiB RUNS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG="${2:?--config needs a file}"; shift 2 ;;
    --budget) BUDGET="${2:?--budget needs a size}"; shift 2 ;;
    --runs) RUNS="${2:?--runs needs a count}"; shift 2 ;;
    *) echo "error: unknown option $1 (scripts/bench_profile.sh [--config FILE] [--budget SIZE] [--runs N])" >&2
       exit 2 ;;
  esac
done
[ -x build/adacc ] || bash scripts/build.sh build >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for i in $(seq 1 "$RUNS"); do
  build/adacc plan --config "$CONFIG" --memory-budget "$BUDGET" --save-profile "$OUT/profile_$i.json" \
    --format json >"$OUT/plan_$i.json" 2>"$OUT/log_$i.txt" || { cat "$OUT/log_$i.txt" >&2; exit 2; }
done
python3 - "$OUT" "$RUNS" <<'EOF'
import json, sys
out, runs = sys.argv[1], int(sys.argv[2])
profiles = [json.load(open(f"{out}/profile_{i}.json")) for i in range(1, runs + 1)]
plans = [json.load(open(f"{out}/plan_{i}.json")) for i in range(1, runs + 1)]
print("forward ms per layer: the median of the profiler's repeats (their range) in each profile")
print(f"{'op':18s}" + "".join(f"{'profile ' + str(i + 1):>22s}" for i in range(runs)))
for k, op in enumerate(profiles[0]["ops"]):
    cells = "".join(f"{p['ops'][k]['forward_ms']:>12.3f} ({p['ops'][k]['forward_spread_ms']:7.3f})" for p in profiles)
    print(f"{op['name']:18s}{cells}")
decisions = [json.dumps(p["decisions"], sort_keys=True) for p in plans]
for i, p in enumerate(plans):
    print(f"profile {i + 1}: {p['message']}")
same = all(d == decisions[0] for d in decisions)
print(f"plans: {'the same from every profile' if same else 'DIFFERENT between profiles'} ({runs} profiles)")
sys.exit(0 if same else 1)
EOF
