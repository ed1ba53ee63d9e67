#!/usr/bin/env bash
# The test command: installs dependencies, builds Release, runs the whole suite with ctest.
#   scripts/test.sh              full suite, Release build in build/
#   scripts/test.sh --sanitize   the suite under AddressSanitizer + UBSan, in build-asan/
# Both build with host-compiler warnings as errors (ADACC_WERROR): CI keeps the code warning-free.
# Tests that need ../shared/data skip with a message when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
if [ "${1:-}" = "--sanitize" ]; then
  # The CUDA kernels run here under the SIMT emulation (sanitized); the nvcc targets are built and
  # linked by the Release build.
  # The benchmarks are left out (nothing tests them; the Release build compiles them).
  bash scripts/build.sh build-asan -DADACC_SANITIZE=ON -DADACC_NATIVE=ON -DADACC_CUDA_EMULATION_ONLY=ON \
    -DADACC_BUILD_BENCHMARKS=OFF -DADACC_WERROR=ON
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The SIGKILL resume tests kill a training process at moments chosen by wall time; they run in
  # the Release suite (a sanitized adacc is ~10x slower, so they would mostly test the timing).
  ctest --test-dir build-asan -j2 --output-on-failure --timeout 1200 -E '^(Resume|DataParallel|emulated\.CudaDataParallel)\.'
  # The mpirun tests without the leak checker: Open MPI does not free what MPI_Init allocates, and
  # its plugins are unloaded before the check, so those reports cannot even be told apart from ours
  # (every other test still checks this code for leaks).
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 ctest --test-dir build-asan -j2 --output-on-failure --timeout 1200 \
    -R '^(DataParallel|emulated\.CudaDataParallel)\.'

else
  bash scripts/build.sh build -DADACC_WERROR=ON
  ctest --test-dir build -j2 --output-on-failure --timeout 900
fi
