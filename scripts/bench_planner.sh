#!/usr/bin/env bash
# Planner solve-time benchmark (issue: Adacc planner). Times MilpPlanner's block and global forms
# for gpt-1.5b (48 layers, B=8, T=1024, dropout masks planned): one class of 48 identical layers
# and two classes of 24 with different compressed sizes, at budgets from 5% to 90% of the
# keep-everything activations, with one compress option per candidate codec of `--codecs`
# (memory.codecs: paper, paper+group (default) or all). Targets: block <= 50 ms, global <= 500 ms.
# Exits non-zero when a target is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/bench_planner ] || bash scripts/build.sh build >/dev/null
build/bench_planner --preset gpt-1.5b --batch 8 --seq 1024 --reps 20 "$@"
