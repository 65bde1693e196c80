#!/usr/bin/env bash
# Installs every Debian package weft's builds and tests use (Debian 12 / Ubuntu 24.04). Idempotent.
set -euo pipefail
packages=(
  cmake ninja-build g++ clang pkg-config git
  libgtest-dev libgmock-dev
  libboost-dev libtomlplusplus-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libhwloc-dev
  libfabric-dev libfabric-bin libibverbs-dev
  iproute2 clang-format python3-matplotlib
)
# The HIP flavour compiles with Debian's ROCm (CI proves it builds); skip with WEFT_NO_HIP=1.
if [ "${WEFT_NO_HIP:-0}" != 1 ]; then packages+=(hipcc libamdhip64-dev rocm-device-libs); fi
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
