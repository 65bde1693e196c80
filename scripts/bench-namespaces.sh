#!/usr/bin/env bash
# weft-bench primitives between two network namespaces joined by a veth pair: two "hosts" on one machine, so the
# ranks are other_host peers and talk over libfabric through a real (virtual) network path. Needs root and ip.
#
#   scripts/bench-namespaces.sh [BUILD_DIR] [PROVIDER] [weft-bench primitives options...]
#   scripts/bench-namespaces.sh build tcp -b 8 -e 16M --json out.jsonl
#
# The namespaces (weft-bn-<pid>-0/1, addresses 10.214.0.1 and .2) are deleted on exit.
set -euo pipefail

build=${1:-build}
provider=${2:-tcp}
shift $(($# < 2 ? $# : 2))
bench="$build/bin/weft-bench"
[[ -x $bench ]] || { echo "no $bench: build weft-bench first (cmake --build $build)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "needs root (ip netns)" >&2; exit 1; }
command -v ip > /dev/null || { echo "needs ip (iproute2)" >&2; exit 1; }

ns=(weft-bn-$$-0 weft-bn-$$-1)
cleanup() { for n in "${ns[@]}"; do ip netns delete "$n" 2> /dev/null || true; done; }
trap cleanup EXIT
for i in 0 1; do
  ip netns add "${ns[$i]}"
  ip -n "${ns[$i]}" link set lo up
done
ip link add weft-bn$$a netns "${ns[0]}" type veth peer name weft-bn$$b netns "${ns[1]}"
ip -n "${ns[0]}" link set weft-bn$$a name weft0
ip -n "${ns[1]}" link set weft-bn$$b name weft0
for i in 0 1; do
  ip -n "${ns[$i]}" addr add "10.214.0.$((i + 1))/24" dev weft0
  ip -n "${ns[$i]}" link set weft0 up
done

# A veth end reports NO-CARRIER for a moment after both are up; libfabric's tcp lists only running interfaces, and a
# rank started before would land on loopback (the plugin then refuses to connect, naming it).
for i in 0 1; do
  for _ in $(seq 50); do
    ip -n "${ns[$i]}" link show weft0 | grep -q NO-CARRIER || break
    sleep 0.1
  done
done

port=$((20000 + $$ % 20000))
pids=()
for i in 0 1; do
  ip netns exec "${ns[$i]}" env WEFT_RANK=$i WEFT_SIZE=2 WEFT_LOCAL_RANK=0 WEFT_ROOT_ADDR="10.214.0.1:$port" \
    WEFT_BOOTSTRAP_INTERFACE=weft0 WEFT_PLUGIN_PATH="$build/lib/weft" WEFT_TRANSPORTS_OTHER_HOST=libfabric \
    WEFT_TRANSPORT_LIBFABRIC_PROVIDER="$provider" ${WEFT_BENCH_WRAP:-} "$bench" primitives "$@" 2>&1 | sed "s/^/[rank $i] /" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
