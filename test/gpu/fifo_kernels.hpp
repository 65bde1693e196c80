// Kernel launchers of the GPU FIFO and PortChannel tests (fifo_test.cc, port_channel_test.cc). The kernels sit in
// fifo_kernels.cu / port_channel_kernels.cu, apart from GoogleTest (see device_atomics_kernels.hpp for why).
#pragma once

#include <cstdint>
#include <weft/fifo_device.hpp>
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
/// One GPU thread waits on the channel once with `budgetNs` (a test of the timeout path).
void launchPortWait(PortChannelDeviceHandle channel, uint64_t budgetNs);

}  // namespace weft::test
