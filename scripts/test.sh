#!/usr/bin/env bash
# Installs what is needed, builds weft (GPU platform auto-detected unless WEFT_GPU is set) and runs every test
# that needs no GPU. On a machine with a GPU, `ctest --test-dir build -L gpu` runs the GPU tests too.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${WEFT_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DWEFT_GPU="${WEFT_GPU:-none}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "${WEFT_CI_JOBS:-$(nproc)}"
ctest --test-dir "$build" --output-on-failure -LE gpu -j 2 --timeout 300
