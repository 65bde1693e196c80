#!/usr/bin/env bash
# Compares weft libraries on one GPU machine in one go: the same weft-bench binaries run with each library set put
# in front through LD_LIBRARY_PATH, alternately, so that every figure has its baseline from the same machine and
# the same minutes (docs/gpu-testing.md, "Comparing two trees").
#
#   bash scripts/gpu-compare.sh BUILD_DIR [OUT_DIR]
#
# BUILD_DIR is a CUDA build (its own libraries are the variant "new"); every BUILD_DIR/variants/NAME/ holding
# libweft.so.0 and libweft_collectives.so.0 of another tree is one more variant. Knobs: ROUNDS (default 2),
# RANKS (default "2 4": the forced zero-copy rows), BARS_SIZES (weft-bench -b/-e/-f of the allreduce rows), GRAPH
# (default "-G 10"; empty for eager calls, and for a WEFT_GPU=none build, where the script also runs).
# FABRIC_PROVIDERS (e.g. "tcp shm"; default none) adds `weft-bench primitives` over libfabric (FABRIC_SIZES) for
# the build's plugins and for every BUILD_DIR/plugin-variants/NAME/ (a full plugin folder, as lib/weft, with
# some plugins built differently), alternately, in the same rounds.
set -uo pipefail
build=${1:?usage: gpu-compare.sh BUILD_DIR [OUT_DIR]}
out=${2:-${OUT:-gpu-compare}}
mkdir -p "$out"
source "$(dirname "${BASH_SOURCE[0]}")/gpu-build-here.sh"
run=$build/bin/weft-run
bench=$build/bin/weft-bench
rounds=${ROUNDS:-2}
sizes=${BARS_SIZES:-"-b 1K -e 64M -f 4"}
graph=${GRAPH--G 10}
variants=(new)
for d in "$build"/variants/*/; do [ -e "$d/libweft_collectives.so.0" ] && variants+=("$(basename "$d")"); done
libs() { [ "$1" = new ] && echo "$build/lib" || echo "$build/variants/$1"; }

gpu=0
command -v nvidia-smi >/dev/null && gpu=1
if [ $gpu = 1 ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  mps_start
fi
failed=0
step() {  # step NAME COMMAND...: logs to $out/NAME.log and a line to $out/steps.txt
  local name=$1 start=$SECONDS
  shift
  if "$@" >"$out/$name.log" 2>&1; then local rc=0; else local rc=$?; failed=1; fi
  echo "$name rc=$rc $((SECONDS - start))s" | tee -a "$out/steps.txt"
}
for r in $(seq "$rounds"); do
  for v in "${variants[@]}"; do
    # Issue 5's bars: float allreduce, 2 ranks, CUDA graph, default selection.
    step "allreduce-2-$v-$r" env LD_LIBRARY_PATH="$(libs "$v")" "$run" -n 2 --timeout 120 -- "$bench" collectives \
      -O allreduce -d float $sizes $graph -n 20 -w 20 --json "$out/allreduce-2-$v.jsonl"
    # The zero-copy path's fixed cost: forced at 1 KB and 16 MB.
    for n in ${RANKS:-2 4}; do
      step "zerocopy-$n-$v-$r" env LD_LIBRARY_PATH="$(libs "$v")" WEFT_ALLREDUCE_ALGO=scatter_gather "$run" -n "$n" \
        --timeout 120 -- "$bench" collectives -O allreduce -d float -b 1K -e 16M -f 16384 $graph -n 20 -w 20
    done
  done
  for p in ${FABRIC_PROVIDERS:-}; do
    for d in "$build/lib/weft" "$build"/plugin-variants/*/; do
      [ -d "$d" ] || continue
      name=$(basename "$d")
      [ "$d" = "$build/lib/weft" ] && name=new
      step "fabric-$p-$name-$r" env WEFT_PLUGIN_PATH="$d" WEFT_TRANSPORTS_SAME_HOST=libfabric \
        WEFT_TRANSPORT_LIBFABRIC_PROVIDER="$p" "$run" -n 2 --timeout 120 -- "$bench" primitives \
        ${FABRIC_SIZES:--b 8 -e 32K -f 8} --json "$out/fabric-$p-$name.jsonl"
    done
  done
done
[ $gpu = 1 ] && mps_stop
exit $failed
