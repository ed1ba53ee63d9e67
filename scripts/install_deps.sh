#!/usr/bin/env bash
# Installs everything the engine, its tests and its scripts need, from Debian's archive
# (and matplotlib from PyPI for the plot script, when pip is there). Safe to run again.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PACKAGES=(build-essential cmake pkg-config
          libeigen3-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libpcre2-dev
          liblpsolve55-dev libgtest-dev
          fortunes fortunes-min curl ca-certificates)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
