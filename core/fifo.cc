#include <cstdlib>
#include <cstring>
#include <new>
#include <weft/error.hpp>
#include <weft/fifo.hpp>
#include <weft/gpu.hpp>

namespace weft {

namespace {
// Producers' counters and the consumer's tail sit on separate cache lines, so the proxy's tail stores do not
// bounce the line producers fetch-add on (host producers), and the ring starts on its own line.
constexpr size_t kLine = 128;
constexpr size_t kCountersBytes = 2 * kLine;  // head at 0, tailCache at kLine

void* hostAlloc(size_t bytes) {
  size_t rounded = (bytes + kLine - 1) / kLine * kLine;
  void* p = std::aligned_alloc(kLine, rounded);
  if (p == nullptr)
    throw Error(ErrorCode::kSystemError, "fifo: out of host memory for " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  return p;
}
}  // namespace

Fifo::Fifo(uint32_t size, HandleSide side, DeviceErrorBlock* errors, int rank) : size_(size), side_(side), rank_(rank) {
  if (size == 0 || size > kMaxFifoSize) {
    throw Error(ErrorCode::kInvalidArgument,
                "fifo size " + std::to_string(size) + " is outside 1.." + std::to_string(kMaxFifoSize));
  }
  if (side_ == HandleSide::kDevice && (!kHasGpuRuntime || gpuDeviceCount() == 0)) side_ = HandleSide::kHost;
  if (errors == nullptr) {
    ownBlock_ = std::make_unique<DeviceErrorBlock>();
    errors = ownBlock_.get();
  }
  errors_ = errors;
  const size_t ringBytes = sizeof(FifoTrigger) * size_;
  if (side_ == HandleSide::kHost) {
    auto* base = static_cast<uint8_t*>(hostAlloc(kCountersBytes + kLine + ringBytes));
    hostBlock_ = base;
    counters_ = reinterpret_cast<uint64_t*>(base);
    tailHost_ = tailDevice_ = reinterpret_cast<uint64_t*>(base + kCountersBytes);
    ringHost_ = ringDevice_ = reinterpret_cast<FifoTrigger*>(base + kCountersBytes + kLine);
    return;
  }
  // GPU producers: the ring and tail in mapped pinned host memory (the GPU writes triggers across PCIe, the proxy
  // reads them from its own memory), head and tailCache in GPU memory (fetch-adds stay on the GPU).
  void* pinned = nullptr;
  checkGpu(hipHostMalloc(&pinned, kLine + ringBytes, hipHostMallocMapped | hipHostMallocPortable),
           "hipHostMalloc of the fifo ring");
  pinned_ = pinned;
  std::memset(pinned, 0, kLine + ringBytes);
  void* mapped = nullptr;
  void* counters = nullptr;
  try {
    checkGpu(hipHostGetDevicePointer(&mapped, pinned, 0), "hipHostGetDevicePointer of the fifo ring");
    checkGpu(hipMalloc(&counters, kCountersBytes), "hipMalloc of the fifo counters");
    counters_ = static_cast<uint64_t*>(counters);
    checkGpu(hipMemset(counters, 0, kCountersBytes), "hipMemset of the fifo counters");
  } catch (...) {
    if (counters != nullptr) (void)hipFree(counters);
    (void)hipHostFree(pinned);
    throw;
  }
  tailHost_ = static_cast<uint64_t*>(pinned);
  ringHost_ = reinterpret_cast<FifoTrigger*>(static_cast<uint8_t*>(pinned) + kLine);
  tailDevice_ = static_cast<uint64_t*>(mapped);
  ringDevice_ = reinterpret_cast<FifoTrigger*>(static_cast<uint8_t*>(mapped) + kLine);
}

Fifo::~Fifo() {
  if (hostBlock_ != nullptr) std::free(hostBlock_);
  if (pinned_ != nullptr) (void)hipHostFree(pinned_);
  if (side_ == HandleSide::kDevice && counters_ != nullptr) (void)hipFree(counters_);
}

FifoDeviceHandle Fifo::deviceHandle(uint64_t budgetNs) const {
  FifoDeviceHandle h{};
  h.ring = ringDevice_;
  h.head = counters_;
  h.tail = tailDevice_;
  h.tailCache = counters_ + kLine / sizeof(uint64_t);
  h.size = size_;
  h.reserved = 0;
  h.defaultBudgetNs = budgetNs != 0 ? budgetNs : defaultWaitBudgetNs();
  h.site = WaitSite{side_ == HandleSide::kDevice ? errors_->deviceRecord() : errors_->hostRecord(), rank_, -1, -1};
  return h;
}

bool Fifo::poll(FifoTrigger* out, uint32_t ahead) const {
  const uint64_t p = tailLocal_ + ahead;
  FifoTrigger* slot = ringHost_ + (p % size_);
  // Acquire on word1 pairs with the producer's release (HIP, host) or fence + single 16-byte store (CUDA): once the
  // lap bit is the one position p expects, word0 is the same trigger's.
  const uint64_t word1 = atomicLoad<MemoryOrder::kAcquire>(&slot->word1);
  if ((word1 & kFifoLapBit) != fifoLapBitFor(p, size_)) return false;
  out->word0 = atomicLoad<MemoryOrder::kRelaxed>(&slot->word0);
  out->word1 = word1 & ~kFifoLapBit;
  return true;
}

void Fifo::pop(uint32_t count) {
  tailLocal_ += count;
  // Release: our reads of the finished slots (and whatever the proxy did for them, e.g. a flush) happen before a
  // producer that sees the new tail reuses a slot or returns from sync().
  atomicStore<MemoryOrder::kRelease>(tailHost_, tailLocal_);
}

}  // namespace weft
