// Kernels of the GPU primitives benchmark (gpu_primitives_kernels.cu), built into weft-bench on GPU builds
// (WEFT_BENCH_GPU). Each ping-pong kernel times the weft protocol and its raw floor in one launch, on the GPU's
// clock, so both halves see the same launch skew between the two ranks (absorbed by the warm-up rounds).
#pragma once

#include <cstdint>
#include <weft/gpu.hpp>
#include <weft/memory_channel_device.hpp>
#include <weft/port_channel_device.hpp>

namespace weft::bench {

/// Nanoseconds a ping-pong kernel measured: `iters` round trips of weft's protocol, then of the raw floor.
struct PingPongTimes {
  uint64_t weftNs;
  uint64_t rawNs;
  uint64_t rawDeviceScopeNs;  ///< the semaphore row's second floor (device scope), when the semaphore uses it; else 0
};

/// The raw floor's words: this rank's flag, the peer's flag (mapped peer GPU memory), for data floors the peer's
/// landing area, and the count both flags hold already (each floor round trip adds one to each; the words are never
/// reset, so a kernel counts on from there, or its waits would be satisfied by earlier kernels' signals).
struct RawPeer {
  uint64_t* mine;
  uint64_t* theirs;
  uint8_t* landing;
  uint64_t base;
};

/// Which LL packet format a ping-pong uses.
enum class PacketFormat { kLL8, kLL16 };

/// One GPU thread per rank: signal + wait on a MemoryDevice2DeviceSemaphore, then the same with a raw release
/// store / acquire spin on `raw`. `first` starts each round trip. `out` is device memory.
void launchSemaphorePingPong(MemoryDevice2DeviceSemaphoreDeviceHandle sem, RawPeer raw, bool first, int warmup,
                             int iters, PingPongTimes* out, hipStream_t stream);

/// One block: `bytes` from local offset 0 go out as packets under a fresh flag each round (putPackets into the
/// peer's packet buffer, unpackPackets from ours into local offset `landing`). Floor: the block copies the bytes
/// into raw.landing with plain stores, synchronises, and one thread release-stores the flag; the peer acquires it.
/// `flagBase` must exceed every flag used before on these packet buffers.
void launchPacketPingPong(PacketFormat format, MemoryChannelDeviceHandle ch, RawPeer raw, uint64_t bytes,
                          uint64_t landing, uint32_t flagBase, bool first, int warmup, int iters, int threads,
                          PingPongTimes* out, hipStream_t stream);

/// One GPU thread: putWithSignal(landing, 0, bytes) then wait (or the reverse when !first), `iters` times after
/// `warmup`, then a flush. With `floor` (raw.landing set, `src` the local source) the same thread then does the raw
/// equivalent of the direct path, a one-thread copy into raw.landing and a release-store flag, into out->rawNs;
/// otherwise out->rawNs is 0.
void launchPortPingPong(PortChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, bool first, int warmup, int iters,
                        bool floor, RawPeer raw, const uint8_t* src, PingPongTimes* out, hipStream_t stream);

/// One GPU thread: `iters` puts of `bytes` into the peer at `landing`, then one flush.
void launchPortPutStream(PortChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, int iters, hipStream_t stream);

/// `blocks` x `threads` GPU threads put `bytes` from local offset 0 to remote offset `landing`, `iters` times
/// (MemoryChannel::put with every thread of the grid).
void launchMemoryPutStream(MemoryChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, int iters, int blocks,
                           int threads, hipStream_t stream);

/// The floor of launchMemoryPutStream: the same grid copies with a plain unrolled 16-byte copy loop written for
/// this benchmark alone. `bytes` must be a multiple of 16 and both pointers 16-byte aligned.
void launchRawCopyStream(uint8_t* dst, const uint8_t* src, uint64_t bytes, int iters, int blocks, int threads,
                         hipStream_t stream);

}  // namespace weft::bench
