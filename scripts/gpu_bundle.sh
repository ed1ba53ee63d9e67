#!/usr/bin/env bash
# Prepares, on a CPU machine with this project's dependencies and the CUDA toolkit, everything the
# GPU check (scripts/gpu_check.sh) needs on a bare GPU machine (driver + CUDA toolkit, no Debian
# packages, no network), in DIR (default gpu_bundle/, ignored by git), within 64 MiB:
#   DIR/bin/   adacc, bench_gpu, test_cuda_device (Release, -march=x86-64-v3 so any x86 server
#              CPU of the last decade runs them; CUDA runtime linked statically; kernels for
#              sm_80 and sm_90 plus sm_90 PTX)
#   DIR/lib/   the shared libraries they need that a bare machine may lack (libstdc++, libgomp,
#              pcre2, toml++, ...), found with ldd; cuBLASLt is taken from the GPU machine's toolkit
#   DIR/gpu_check.sh, DIR/configs/   the check itself and the model configs
# Usage: bash scripts/gpu_bundle.sh [DIR]   then on the GPU machine: bash DIR/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-gpu_bundle}"
BUILD="build-gpu-bundle"
command -v nvcc >/dev/null || { echo "gpu_bundle: nvcc not found: install the CUDA toolkit (or put it on PATH)" >&2; exit 1; }
# Without MPI: the check runs single processes, and a bare GPU machine has no Open MPI to launch more.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DADACC_CUDA=ON -DADACC_NATIVE=OFF -DADACC_MPI=OFF \
  -DCMAKE_CXX_FLAGS="-march=x86-64-v3" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target adacc bench_gpu test_cuda_device
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib" "$DIR/configs"
for exe in adacc bench_gpu test_cuda_device; do
  cp "$BUILD/$exe" "$DIR/bin/"
  strip --strip-debug "$DIR/bin/$exe"
done
# Shared libraries besides glibc's own and the GPU stack (the driver's libcuda, the toolkit's cuBLASLt).
for exe in "$DIR"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*) ;;
    *) cp -L "$lib" "$DIR/lib/" ;;
  esac
done
cp scripts/gpu_check.sh "$DIR/"
cp configs/*.toml "$DIR/configs/"
git rev-parse HEAD > "$DIR/COMMIT" 2>/dev/null || echo unknown > "$DIR/COMMIT"
SIZE=$(du -sb "$DIR" | cut -f1)
echo "gpu_bundle: $DIR holds $((SIZE / 1024 / 1024)) MiB ($(ls "$DIR/lib" | wc -l) shared libraries)"
if [ "$SIZE" -gt $((64 * 1024 * 1024)) ]; then
  echo "gpu_bundle: over the 64 MiB a device run can carry" >&2
  exit 1
fi
