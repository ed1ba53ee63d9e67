#!/usr/bin/env bash
# Prepares, on a CPU machine with this project's dependencies and the CUDA toolkit, everything the
# GPU check (scripts/gpu_check.sh) needs on a bare GPU machine (driver + CUDA toolkit, no Debian
# packages, no network), in DIR (default gpu_bundle/, ignored by git), within 64 MiB:
#   DIR/bin/   adacc, bench_gpu, test_cuda_device (Release, -march=x86-64-v3 so any x86 server
#              CPU of the last decade runs them; CUDA runtime linked statically; kernels for
#              sm_80 and sm_90 plus sm_90 PTX)
#   DIR/lib/   the shared libraries they need that a bare machine may lack (libstdc++, libgomp,
#              pcre2, toml++, ...), found with ldd; cuBLASLt and cuDNN are the GPU machine's own
#              (its CUDA toolkit's or pip's nvidia-* wheels'), found by gpu_check.sh's preflight
#   DIR/gpu_check.sh, DIR/hf_gpt2_check.py, DIR/torch_reference.py, DIR/random_token_shard.py,
#   DIR/configs/, DIR/COMMIT   the check, its Hugging Face and PyTorch-peer steps, its random token
#              shard's writer, the model configs, the commit
# Usage: bash scripts/gpu_bundle.sh [DIR]   then on the GPU machine, one call after the other:
#   bash DIR/gpu_check.sh 1; bash DIR/gpu_check.sh 2   (it ends by printing the device tool's calls)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-gpu_bundle}"
BUILD="build-gpu-bundle"
command -v nvcc >/dev/null || { echo "gpu_bundle: nvcc not found: install the CUDA toolkit (or put it on PATH)" >&2; exit 1; }
# cuDNN's frontend headers, so the bundle has model.attention = "cudnn" (libcudnn.so.9 is the GPU
# machine's own, opened at run time); without them it builds without it, and says so.
bash scripts/fetch_cudnn_frontend.sh ||
  echo "gpu_bundle: WARNING: no cuDNN frontend headers: the bundle has no model.attention = \"cudnn\"" >&2
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
# Shared libraries besides glibc's own and the GPU stack (the driver's libcuda, the toolkit's cuBLASLt
# and cuDNN).
for exe in "$DIR"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*|libcudnn*) ;;
    *) cp -L "$lib" "$DIR/lib/" ;;
  esac
done
cp scripts/gpu_check.sh scripts/bench_llmc.py scripts/hf_gpt2_check.py scripts/random_token_shard.py scripts/torch_reference.py "$DIR/"
cp configs/*.toml "$DIR/configs/"
git rev-parse HEAD > "$DIR/COMMIT" 2>/dev/null || echo unknown > "$DIR/COMMIT"
SIZE=$(du -sb "$DIR" | cut -f1)
echo "gpu_bundle: $DIR holds $((SIZE / 1024 / 1024)) MiB ($(ls "$DIR/lib" | wc -l) shared libraries)"
if [ "$SIZE" -gt $((64 * 1024 * 1024)) ]; then
  echo "gpu_bundle: over the 64 MiB a device run can carry" >&2
  exit 1
fi

# What to give the device tool: the bundle carried (an ignored path, relative to the repository
# root), call 1 and then at once call 2 while the machine is warm, then give the machine back.
case "$DIR" in
  /*) REL="${DIR#"$PWD"/}" ;;
  *) REL="${DIR#./}" ;;
esac
REL="${REL%/}"
echo
echo "gpu_bundle: on a GPU machine, two calls of the device tool (run), then give_back; kind nvidia-h200,"
echo "  the card README's measurements were made on (the tool's default kind is an H100):"
for call in 1 2; do
  echo "  run command=\"bash $REL/gpu_check.sh $call\" carry=[\"$REL\"] kind=nvidia-h200 timeout_s=540"
done
case "$REL" in /* | ../*) echo "  ($DIR is outside this repository: carry needs a path inside it)" ;; esac
echo "  each brings back one file, gpu_check_call<N>.tar.gz; if less than 540 s of device time is left"
echo "  for a call, prefix it with GPU_CHECK_BUDGET_S=<seconds left less 30>"
echo "  with 8 minutes left, call 3 puts adacc beside llm.c's train_gpt2cu, built by hand in an ignored"
echo "  folder such as llmc_peer/ (README, 'llm.c beside adacc'):"
echo "  run command=\"LLMC_TRAIN_GPT2CU=llmc_peer/train_gpt2cu bash $REL/gpu_check.sh 3\" carry=[\"$REL\", \"llmc_peer\"] kind=nvidia-h200 timeout_s=460"
echo
bash "$DIR/gpu_check.sh" --plan || { echo "gpu_bundle: a call's step timeouts add up to more than 480 s" >&2; exit 1; }
