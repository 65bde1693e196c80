#include <weft/port_channel.hpp>

namespace weft {

PortChannel::PortChannel(uint32_t id, SemaphoreId semaphore, MemoryId dst, MemoryId src, int peer, DeviceHandle handle)
    : id_(id), semaphore_(semaphore), dst_(dst), src_(src), peer_(peer), handle_(handle) {}

}  // namespace weft
