#!/usr/bin/env bash
# Installs what is needed, builds weft and runs the main job: weft-bench primitives over N local ranks
# (default 2), each figure beside its floor measured in the same run. Extra arguments go to weft-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${WEFT_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DWEFT_GPU="${WEFT_GPU:-auto}" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF
cmake --build "$build" -j "$(nproc)" --target weft-run weft-bench weft-info weft-transport-host
"$build/bin/weft-run" -n "${WEFT_RANKS:-2}" -- "$build/bin/weft-bench" primitives "$@"
