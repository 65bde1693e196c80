// Kernels of memory_channel_test: every MemoryChannel method run by GPU threads on GPU memory mapped between
// ranks. GoogleTest stays out of the GPU translation units (clang 15's HIP
// mode crashes on its headers in C++20; see device_atomics_kernels.hpp), so the tests call these launchers.
#pragma once

#include <cstdint>
#include <weft/gpu.hpp>
#include <weft/memory_channel_device.hpp>

namespace weft::test {

/// Byte i of `rank`'s data in round `round`.
WEFT_HOST_DEVICE_INLINE uint8_t channelPattern(int rank, int round, uint64_t i) {
  return static_cast<uint8_t>(rank * 37 + round * 11 + i * 5 + 2);
}

/// What one rank's exercise kernel counted (0 everywhere but `relaxedRounds` and `finalReceived` means success).
struct ChannelCheck {
  uint64_t putWrong;       ///< bytes of the peer's put that arrived wrong
  uint64_t getWrong;       ///< bytes fetched by get that were wrong
  uint64_t elementWrong;   ///< single-element write/read mismatches
  uint64_t ll16Wrong;      ///< bytes of LL16 ping-pong rounds that arrived wrong
  uint64_t ll8Wrong;       ///< bytes of LL8 ping-pong rounds that arrived wrong
  uint64_t relaxedRounds;  ///< relaxedSignal/relaxedWait rounds completed
  uint64_t pollAfterAll;   ///< 1 when poll() found a signal after the last wait (it must not)
  uint64_t finalReceived;  ///< signals received in all
};

/// Buffer layout of the exercise, per rank (`bytes` per slice): slices 0 and 1 (rank r's data lives in slice
/// r of its own buffer and arrives in slice r of the peer's), a staging slice, and a tail of 64 bytes holding
/// the single element. Packet buffers hold packetBufferBytes<LL16Packet>(bytes).
inline uint64_t channelDataBytes(uint64_t bytes) { return 3 * bytes + 64; }

/// Runs the exercise in one block of `threads` threads on `stream`, without waiting for it: `put` reaches the
/// peer's data buffer, `packet` the peer's packet buffer (both share one semaphore). The local slice `rank`
/// must already hold channelPattern(rank, 0, i). Results go to *check (device memory, zeroed).
void launchChannelExercise(const MemoryChannelDeviceHandle& put, const MemoryChannelDeviceHandle& packet, int rank,
                           uint64_t bytes, int rounds, int threads, ChannelCheck* check, hipStream_t stream);

/// One thread reads an LL16 packet whose flag never comes; returns what hipStreamSynchronize gave.
hipError_t runStuckPacketRead(const MemoryChannelDeviceHandle& channel, uint32_t flag, hipStream_t stream);

}  // namespace weft::test
