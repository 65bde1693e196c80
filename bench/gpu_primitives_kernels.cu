// GPU kernels of the primitives benchmark. Added to weft-bench by bench/CMakeLists.txt on GPU builds only.
#include "gpu_primitives_kernels.hpp"

#include <weft/copy_device.hpp>
#include <weft/packet_device.hpp>

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
namespace weft::bench {
namespace {

constexpr uint64_t kRawBudgetNs = 30'000'000'000ull;

// The raw floor's signal: count up in the peer's word with one release store; wait with acquire loads (at scope S).
template <Scope S = Scope::kSystem>
struct RawFlag {
  RawPeer peer;
  uint64_t sent = peer.base;
  uint64_t seenCount = peer.base;
  WEFT_DEVICE_INLINE void signal() { atomicStore<MemoryOrder::kRelease, S>(peer.theirs, ++sent); }
  WEFT_DEVICE_INLINE void wait() {
    const uint64_t want = ++seenCount;
    // Bounded like every wait in weft: a dead peer ends the benchmark with a trap, never a hang.
    uint64_t seen = 0;
    if (!spinWaitUntil(
            [&] {
              seen = atomicLoad<MemoryOrder::kAcquire, S>(peer.mine);
              return seen >= want;
            },
            WaitBudget{kRawBudgetNs})) {
      reportWaitTimeout(WaitSite{}, WaitOp::kSemaphoreWait, want, seen, kRawBudgetNs);
    }
  }
};

WEFT_GLOBAL void semaphorePingPongKernel(MemoryDevice2DeviceSemaphoreDeviceHandle sem, RawPeer raw, bool first,
                                         int warmup, int iters, PingPongTimes* out) {
  auto rounds = [&](auto& s, int n) {
    for (int i = 0; i < n; ++i) {
      if (first) {
        s.signal();
        s.wait();
      } else {
        s.wait();
        s.signal();
      }
    }
  };
  rounds(sem, warmup);
  const uint64_t t0 = clockNanoseconds();
  rounds(sem, iters);
  const uint64_t t1 = clockNanoseconds();
  RawFlag<> flag{raw};
  rounds(flag, warmup);
  const uint64_t t2 = clockNanoseconds();
  rounds(flag, iters);
  const uint64_t t3 = clockNanoseconds();
  out->weftNs = t1 - t0;
  out->rawNs = t3 - t2;
  out->rawDeviceScopeNs = 0;
  if (sem.deviceScope != 0) {  // the floor at the semaphore's own scope too, on the same words
    RawPeer next = raw;
    next.base = flag.sent;
    RawFlag<Scope::kDevice> deviceFlag{next};
    rounds(deviceFlag, warmup);
    const uint64_t t4 = clockNanoseconds();
    rounds(deviceFlag, iters);
    out->rawDeviceScopeNs = clockNanoseconds() - t4;
  }
}

// Launched with up to 1024 threads: the bound keeps the register count within what such a block may use.
template <class Packet>
WEFT_GLOBAL void __launch_bounds__(1024)
    packetPingPongKernel(MemoryChannelDeviceHandle ch, RawPeer raw, uint64_t bytes, uint64_t landing, uint32_t flagBase,
                         bool first, int warmup, int iters, PingPongTimes* out) {
  const uint32_t tid = threadIdx.x;
  const uint32_t n = blockDim.x;
  uint32_t flag = flagBase;
  auto packetRounds = [&](int count) {
    for (int i = 0; i < count; ++i) {
      ++flag;
      if (first) {
        ch.putPackets<Packet>(0, 0, bytes, flag, tid, n);
        ch.unpackPackets<Packet>(0, landing, bytes, flag, tid, n);
      } else {
        ch.unpackPackets<Packet>(0, landing, bytes, flag, tid, n);
        ch.putPackets<Packet>(0, 0, bytes, flag, tid, n);
      }
    }
  };
  RawFlag<> rawFlag{raw};
  auto send = [&] {
    copyCooperative(raw.landing, ch.local, bytes, tid, n);
    __syncthreads();
    if (tid == 0) rawFlag.signal();
  };
  auto receive = [&] {
    if (tid == 0) rawFlag.wait();
    __syncthreads();
  };
  auto rawRounds = [&](int count) {
    for (int i = 0; i < count; ++i) {
      if (first) {
        send();
        receive();
      } else {
        receive();
        send();
      }
    }
  };
  packetRounds(warmup);
  __syncthreads();
  const uint64_t t0 = clockNanoseconds();
  packetRounds(iters);
  __syncthreads();
  const uint64_t t1 = clockNanoseconds();
  rawRounds(warmup);
  const uint64_t t2 = clockNanoseconds();
  rawRounds(iters);
  const uint64_t t3 = clockNanoseconds();
  if (tid == 0) {
    out->weftNs = t1 - t0;
    out->rawNs = t3 - t2;
  }
}

WEFT_GLOBAL void portPingPongKernel(PortChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, bool first,
                                    int warmup, int iters, bool floor, RawPeer raw, const uint8_t* src,
                                    PingPongTimes* out) {
  auto rounds = [&](int n) {
    for (int i = 0; i < n; ++i) {
      if (first) {
        ch.putWithSignal(landing, 0, bytes);
        ch.wait();
      } else {
        ch.wait();
        ch.putWithSignal(landing, 0, bytes);
      }
    }
  };
  rounds(warmup);
  const uint64_t t0 = clockNanoseconds();
  rounds(iters);
  const uint64_t t1 = clockNanoseconds();
  ch.flush();
  out->weftNs = t1 - t0;
  out->rawNs = 0;
  if (!floor) return;
  RawFlag<> flag{raw};
  auto send = [&] {
    copyByOneThread(raw.landing, src, bytes);  // the copy the direct path does
    flag.signal();
  };
  auto rawRounds = [&](int n) {
    for (int i = 0; i < n; ++i) {
      if (first) {
        send();
        flag.wait();
      } else {
        flag.wait();
        send();
      }
    }
  };
  rawRounds(warmup);
  const uint64_t t2 = clockNanoseconds();
  rawRounds(iters);
  out->rawNs = clockNanoseconds() - t2;
}

WEFT_GLOBAL void portPutStreamKernel(PortChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, int iters) {
  for (int i = 0; i < iters; ++i) ch.put(landing, 0, bytes);
  ch.flush();
}

WEFT_GLOBAL void memoryPutStreamKernel(MemoryChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, int iters) {
  const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t n = gridDim.x * blockDim.x;
  for (int i = 0; i < iters; ++i) ch.put(landing, 0, bytes, tid, n);
}

// Four 16-byte loads in flight per thread, then four stores: the usual shape of a bandwidth-bound copy kernel.
WEFT_GLOBAL void rawCopyStreamKernel(uint4* dst, const uint4* src, uint64_t units, int iters) {
  const uint64_t tid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t n = gridDim.x * static_cast<uint64_t>(blockDim.x);
  for (int it = 0; it < iters; ++it) {
    uint64_t i = tid;
    for (; i + 3 * n < units; i += 4 * n) {
      const uint4 a = src[i];
      const uint4 b = src[i + n];
      const uint4 c = src[i + 2 * n];
      const uint4 d = src[i + 3 * n];
      dst[i] = a;
      dst[i + n] = b;
      dst[i + 2 * n] = c;
      dst[i + 3 * n] = d;
    }
    for (; i < units; i += n) dst[i] = src[i];
  }
}

void checkLaunch(const char* what) { checkGpu(hipGetLastError(), what); }

}  // namespace

void launchSemaphorePingPong(MemoryDevice2DeviceSemaphoreDeviceHandle sem, RawPeer raw, bool first, int warmup,
                             int iters, PingPongTimes* out, hipStream_t stream) {
  semaphorePingPongKernel<<<1, 1, 0, stream>>>(sem, raw, first, warmup, iters, out);
  checkLaunch("launching the semaphore ping-pong kernel");
}

void launchPacketPingPong(PacketFormat format, MemoryChannelDeviceHandle ch, RawPeer raw, uint64_t bytes,
                          uint64_t landing, uint32_t flagBase, bool first, int warmup, int iters, int threads,
                          PingPongTimes* out, hipStream_t stream) {
  if (format == PacketFormat::kLL8) {
    packetPingPongKernel<LL8Packet>
        <<<1, threads, 0, stream>>>(ch, raw, bytes, landing, flagBase, first, warmup, iters, out);
  } else {
    packetPingPongKernel<LL16Packet>
        <<<1, threads, 0, stream>>>(ch, raw, bytes, landing, flagBase, first, warmup, iters, out);
  }
  checkLaunch("launching the packet ping-pong kernel");
}

void launchPortPingPong(PortChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, bool first, int warmup, int iters,
                        bool floor, RawPeer raw, const uint8_t* src, PingPongTimes* out, hipStream_t stream) {
  portPingPongKernel<<<1, 1, 0, stream>>>(ch, bytes, landing, first, warmup, iters, floor, raw, src, out);
  checkLaunch("launching the port channel ping-pong kernel");
}

void launchPortPutStream(PortChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, int iters, hipStream_t stream) {
  portPutStreamKernel<<<1, 1, 0, stream>>>(ch, bytes, landing, iters);
  checkLaunch("launching the port channel put kernel");
}

void launchMemoryPutStream(MemoryChannelDeviceHandle ch, uint64_t bytes, uint64_t landing, int iters, int blocks,
                           int threads, hipStream_t stream) {
  memoryPutStreamKernel<<<blocks, threads, 0, stream>>>(ch, bytes, landing, iters);
  checkLaunch("launching the memory channel put kernel");
}

void launchRawCopyStream(uint8_t* dst, const uint8_t* src, uint64_t bytes, int iters, int blocks, int threads,
                         hipStream_t stream) {
  rawCopyStreamKernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<uint4*>(dst),
                                                      reinterpret_cast<const uint4*>(src), bytes / 16, iters);
  checkLaunch("launching the raw copy kernel");
}

}  // namespace weft::bench
#endif
