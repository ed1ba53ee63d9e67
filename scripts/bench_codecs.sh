#!/usr/bin/env bash
# Activation codec benchmark (issue: compression codecs). Prints, per codec and realistic GPT-2
# shape, on 1 and 2 threads: compress and decompress GB/s of the fp32 input (mask bytes for
# bitpack), best of 5 runs; the compression ratio; the relative L2 error; and the time of one
# matmul_forward of the same activation through a C x C weight, i.e. the least a recompute of the
# tensor would cost. Targets per core: group_int4 >= 6 GB/s compress and >= 20 GB/s decompress,
# outlier_int4 >= 4 GB/s compress, bitpack >= 10 GB/s. Run it on an otherwise idle machine:
# timings taken while other processes compete for the cores are meaningless (the load average
# is printed first). Extra arguments go to bench_codecs (e.g. --threads 1 --no-matmul).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
if [ ! -x "$BUILD_DIR/bench_codecs" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target bench_codecs -j"$(nproc)" >/dev/null
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
"$BUILD_DIR/bench_codecs" --reps 5 --threads 1,2 "$@"
