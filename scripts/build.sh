#!/usr/bin/env bash
# Configures and builds Release into build/ (or the folder given as $1 with extra CMake args).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"
shift || true
# ccache (scripts/install_deps.sh installs it) makes a rebuild of unchanged files nearly free;
# paths relative to the checkout let another clone or worktree share its cache.
LAUNCHER=()
export CCACHE_BASEDIR="$PWD"
if command -v ccache >/dev/null 2>&1; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
