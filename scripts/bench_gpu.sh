#!/usr/bin/env bash
# GPU training-step benchmark (benchmarks/bench_gpu.cpp) from a checkout built with the CUDA
# backend: gpt-117m and gpt-345m at T=1024, step ms, tokens/s and MFU (6N + 6LCT per token, as
# llm.c counts), then the fixed memory modes at one batch; JSON in bench_out/bench_gpu.json.
# Prints a message and measures nothing on a machine without a GPU. On a bare GPU machine use
# the bundle instead (README, "The GPU check").
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/bench_gpu ] || bash scripts/build.sh build >/dev/null
mkdir -p bench_out
build/bench_gpu --presets gpt-117m,gpt-345m --seq 1024 --steps 5 --warmup 2 --json bench_out/bench_gpu.json "$@"
