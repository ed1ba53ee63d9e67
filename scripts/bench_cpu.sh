#!/usr/bin/env bash
# CPU training-step benchmark (issue: CPU training engine). For gpt-117m at B=4 T=64 and a
# small config, prints step ms (median after warm-up, with forward / backward / optimizer
# parts), tokens/s, achieved GFLOP/s, and that as a percentage of the SGEMM peak measured with
# Eigen in the same run. Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/bench_cpu ] || bash scripts/build.sh build >/dev/null
build/bench_cpu --preset gpt-117m --batch 4 --seq 64 --steps 5 --warmup 2
build/bench_cpu --preset gpt-small-cpu --batch 8 --seq 128 --steps 5 --warmup 2
