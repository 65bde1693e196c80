// Kernel launchers of the GPU FIFO and PortChannel tests (fifo_test.cc, port_channel_test.cc). The kernels sit in
// fifo_kernels.cu / port_channel_kernels.cu, apart from GoogleTest (see device_atomics_kernels.hpp for why).
#pragma once

#include <cstdint>
#include <weft/fifo_device.hpp>
#include <weft/gpu.hpp>
#include <weft/port_channel_device.hpp>

namespace weft::test {

/// The trigger producer `thread` pushes as its `i`-th: word0 names both, word1 is a checksum of them.
WEFT_HOST_DEVICE_INLINE FifoTrigger gpuTestTrigger(uint32_t thread, uint32_t i) {
  return FifoTrigger{(static_cast<uint64_t>(thread) << 32) | i, (static_cast<uint64_t>(thread) * 7 + i * 3 + 1)};
}

/// Starts blocks x threadsPerBlock producers, each pushing `perThread` triggers (does not wait for the kernel).
void launchFifoProducers(FifoDeviceHandle fifo, int blocks, int threadsPerBlock, int perThread);
/// One GPU thread pushes `count` triggers and syncs on each once per `syncEvery` pushes (and on the last).
void launchFifoPushAndSync(FifoDeviceHandle fifo, int count, int syncEvery);
/// Waits for the kernels launched so far; throws Error(kGpuError) when one failed (e.g. trapped on a timeout).
void finishGpuKernels(const char* what);

/// One GPU thread: `rounds` times putWithSignal(offset r * bytes, bytes) then flush, then a final wait for the peer.
void launchPortSender(PortChannelDeviceHandle channel, uint64_t bytes, int rounds);
/// One GPU thread: waits for `rounds` signals, then signals the peer once (the acknowledgement).
void launchPortReceiver(PortChannelDeviceHandle channel, int rounds);
/// Byte i of the source a rank of `role` (0 or 1) puts in round `round` of the port exercise.
WEFT_HOST_DEVICE_INLINE uint8_t portPattern(int role, int round, uint64_t i) {
  return static_cast<uint8_t>(role * 53 + round * 17 + i * 7 + 3);
}

/// What one rank's port exercise kernel counted: all zero but `rounds` means success.
struct PortCheck {
  uint64_t putWrong;             ///< bytes of put + signal that arrived wrong
  uint64_t putWithSignalWrong;   ///< bytes of putWithSignal that arrived wrong
  uint64_t putSignalFlushWrong;  ///< bytes of putWithSignalAndFlush that arrived wrong
  uint64_t counterWrong;         ///< rounds whose atomicAdd total was not what the peer added
  uint64_t pollAfterAll;         ///< 1 when poll() found a signal after the last wait (it must not)
  uint64_t rounds;               ///< rounds completed
};

/// Port exercise layout of each rank's data buffer (`bytes` per slice): slice 0 the source, slices 1-3 where the
/// peer's put, putWithSignal and putWithSignalAndFlush land, then an 8-byte-aligned counter the peer adds to.
WEFT_HOST_DEVICE_INLINE uint64_t portCounterOffset(uint64_t bytes) { return (4 * bytes + 7) / 8 * 8; }
inline uint64_t portDataBytes(uint64_t bytes) { return portCounterOffset(bytes) + 64; }

/// Runs every PortChannel method symmetrically on both ranks of a pair, `rounds` times, in one block of `threads`
/// threads (thread 0 drives the channel, all fill and check data): fill the source with portPattern(role, round),
/// put + signal, wait, check; putWithSignal, wait, check; putWithSignalAndFlush, wait, check; atomicAdd(round + 1)
/// + signal, wait, check the counter; flush. Then poll() must find nothing. `data` is this rank's buffer (the
/// channel's source memory); results go to *check (device memory, zeroed). Does not wait for the kernel.
void launchPortExercise(PortChannelDeviceHandle channel, uint8_t* data, uint64_t bytes, int role, int rounds,
                        int threads, PortCheck* check, hipStream_t stream);

/// One GPU thread waits on the channel once with `budgetNs` (a test of the timeout path).
void launchPortWait(PortChannelDeviceHandle channel, uint64_t budgetNs);

}  // namespace weft::test
