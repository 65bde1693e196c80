// Kernels of memory_channel_test (see memory_channel_kernels.hpp).
#include "memory_channel_kernels.hpp"

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)

namespace weft::test {
namespace {

WEFT_DEVICE_INLINE void countWrong(uint64_t* counter, uint64_t wrong) {
  if (wrong != 0) atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(counter, wrong);
}

// Thread 0 signals and waits; the barriers around it make every thread's earlier stores part of the release and
// every thread's later loads see what the acquire made visible.
WEFT_DEVICE_INLINE void exchangeSignals(const MemoryChannelDeviceHandle& ch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    ch.signal();
    ch.wait();
  }
  __syncthreads();
}

// One rank of an LL ping-pong: rank 0 sends round r and waits for the echo; rank 1 waits, then echoes. Because
// each side writes round r + 1 only after reading round r from the other, one packet slot per side suffices.
template <class Packet>
WEFT_DEVICE_INLINE void packetPingPong(const MemoryChannelDeviceHandle& packet, int rank, uint64_t bytes, int rounds,
                                       uint32_t firstFlag, uint64_t* wrong) {
  const uint32_t tid = threadIdx.x;
  const uint32_t n = blockDim.x;
  const int peer = 1 - rank;
  uint8_t* mine = packet.local + bytes * rank;
  uint8_t* staging = packet.local + 2 * bytes;
  for (int round = 1; round <= rounds; ++round) {
    const uint32_t flag = firstFlag + static_cast<uint32_t>(round);
    for (uint64_t i = tid; i < bytes; i += n) mine[i] = channelPattern(rank, round, i);
    __syncthreads();
    if (rank == 0) {
      packet.putPackets<Packet>(0, bytes * rank, bytes, flag, tid, n);
      packet.unpackPackets<Packet>(0, 2 * bytes, bytes, flag, tid, n);
    } else {
      packet.unpackPackets<Packet>(0, 2 * bytes, bytes, flag, tid, n);
      packet.putPackets<Packet>(0, bytes * rank, bytes, flag, tid, n);
    }
    // Each thread unpacked whole packets; the check below reads bytes other threads wrote.
    __syncthreads();
    uint64_t bad = 0;
    for (uint64_t i = tid; i < bytes; i += n) bad += staging[i] != channelPattern(peer, round, i) ? 1 : 0;
    countWrong(wrong, bad);
    __syncthreads();
  }
}

WEFT_GLOBAL void channelExerciseKernel(MemoryChannelDeviceHandle put, MemoryChannelDeviceHandle packet, int rank,
                                       uint64_t bytes, int rounds, ChannelCheck* check) {
  const uint32_t tid = threadIdx.x;
  const uint32_t n = blockDim.x;
  const int peer = 1 - rank;

  // put + signal/wait: this rank's slice lands in the same slice of the peer's buffer.
  put.put(bytes * rank, bytes * rank, bytes, tid, n);
  exchangeSignals(put);
  uint64_t bad = 0;
  for (uint64_t i = tid; i < bytes; i += n) bad += put.local[bytes * peer + i] != channelPattern(peer, 0, i) ? 1 : 0;
  countWrong(&check->putWrong, bad);

  // get: the peer's own slice, from an odd offset into an offset of a different alignment (2-byte units).
  put.get(bytes * peer + 3, 2 * bytes + 1, bytes - 3, tid, n);
  __syncthreads();
  bad = 0;
  for (uint64_t i = tid; i + 3 < bytes; i += n) {
    bad += put.local[2 * bytes + 1 + i] != channelPattern(peer, 0, i + 3) ? 1 : 0;
  }
  countWrong(&check->getWrong, bad);
  exchangeSignals(put);  // both have finished reading before anyone reuses a buffer

  // single elements: each writes its tag into the peer's tail element, then reads both back.
  const uint64_t element = (3 * bytes + 8) / 8;
  if (tid == 0) put.write<uint64_t>(element, 0xabcd0000ull + rank);
  exchangeSignals(put);
  if (tid == 0) {
    bad = reinterpret_cast<const uint64_t*>(put.local)[element] != 0xabcd0000ull + peer ? 1 : 0;
    bad += put.read<uint64_t>(element) != 0xabcd0000ull + rank ? 1 : 0;
    countWrong(&check->elementWrong, bad);
  }
  exchangeSignals(put);

  // LL16 then LL8 ping-pong on the same packet buffers, never cleared: LL8 flags continue after LL16's.
  packetPingPong<LL16Packet>(packet, rank, bytes, rounds, 0, &check->ll16Wrong);
  packetPingPong<LL8Packet>(packet, rank, bytes, rounds, static_cast<uint32_t>(rounds), &check->ll8Wrong);

  // relaxed signal/wait rounds, then one ordered exchange; afterwards nothing is left to poll.
  if (tid == 0) {
    for (int r = 0; r < rounds; ++r) {
      put.relaxedSignal();
      put.relaxedWait();
      check->relaxedRounds += 1;
    }
    fence<MemoryOrder::kSeqCst, Scope::kSystem>();
  }
  exchangeSignals(put);
  if (tid == 0) {
    check->pollAfterAll = put.poll() ? 1 : 0;
    check->finalReceived = put.semaphore.received();
  }
}

WEFT_GLOBAL void stuckPacketKernel(MemoryChannelDeviceHandle channel, uint32_t flag) {
  (void)channel.readPacket<LL16Packet>(0, 0, flag);
}

}  // namespace

void launchChannelExercise(const MemoryChannelDeviceHandle& put, const MemoryChannelDeviceHandle& packet, int rank,
                           uint64_t bytes, int rounds, int threads, ChannelCheck* check, hipStream_t stream) {
  channelExerciseKernel<<<1, threads, 0, stream>>>(put, packet, rank, bytes, rounds, check);
  checkGpu(hipGetLastError(), "launching channelExerciseKernel");
}

hipError_t runStuckPacketRead(const MemoryChannelDeviceHandle& channel, uint32_t flag, hipStream_t stream) {
  stuckPacketKernel<<<1, 1, 0, stream>>>(channel, flag);
  hipError_t e = hipGetLastError();
  return e != hipSuccess ? e : hipStreamSynchronize(stream);
}

}  // namespace weft::test

#endif
