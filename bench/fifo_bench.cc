// weft-bench FIFO figures (see fifo_bench.hpp).
#include "fifo_bench.hpp"

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <weft/error.hpp>
#include <weft/fifo.hpp>
#include <weft/gpu.hpp>

#include "fifo_bench_kernels.hpp"

namespace weft::bench {

namespace {

constexpr int kRateTriggers = 10000;

// Host memory the producer (GPU or host) and this process share: mapped pinned memory when the producer is a GPU.
class SharedWords {
 public:
  SharedWords(size_t bytes, bool gpu) : gpu_(gpu) {
    if (gpu_) {
      checkGpu(hipHostMalloc(&host_, bytes, hipHostMallocMapped), "hipHostMalloc for the fifo benchmark");
      checkGpu(hipHostGetDevicePointer(&device_, host_, 0), "hipHostGetDevicePointer for the fifo benchmark");
    } else {
      host_ = device_ = std::calloc(1, bytes);
      if (host_ == nullptr) throw Error(ErrorCode::kSystemError, "fifo benchmark: out of host memory");
    }
    std::memset(host_, 0, bytes);
  }
  ~SharedWords() {
    if (gpu_) {
      (void)hipHostFree(host_);
    } else {
      std::free(host_);
    }
  }
  SharedWords(const SharedWords&) = delete;
  SharedWords& operator=(const SharedWords&) = delete;
  template <class T>
  T* host(size_t byteOffset) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(host_) + byteOffset);
  }
  template <class T>
  T* device(size_t byteOffset) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(device_) + byteOffset);
  }

 private:
  bool gpu_;
  void* host_ = nullptr;
  void* device_ = nullptr;
};

}  // namespace

std::vector<BenchRow> runFifoBench(const BenchOptions& options) {
  const int roundTrips = options.iterations > 0 ? options.iterations : 2000;
#if defined(WEFT_FIFO_BENCH_GPU)
  const bool gpu = kHasGpuRuntime && gpuDeviceCount() > 0;
#else
  const bool gpu = false;
#endif
  Fifo fifo(kDefaultFifoSize, gpu ? HandleSide::kDevice : HandleSide::kHost);
  const uint32_t rawSlots = kDefaultFifoSize;
  // Layout of the shared words: flag at 0, ack at 128, times at 256, raw slots from 512.
  SharedWords words(512 + sizeof(FifoTrigger) * rawSlots, gpu);
  RawRing raw{words.device<uint64_t>(0), words.device<uint64_t>(128), words.device<FifoTrigger>(512), rawSlots};
  auto* times = words.host<FifoBenchTimes>(256);

  // The proxy stand-in: pops the FIFO's triggers and echoes the raw flag, until the producer is done.
  std::atomic<bool> done{false};
  const uint64_t expected = static_cast<uint64_t>(roundTrips) + kRateTriggers;
  std::thread proxy([&] {
    uint64_t* flag = words.host<uint64_t>(0);
    uint64_t* ack = words.host<uint64_t>(128);
    uint64_t echoed = 0;
    while (!done.load(std::memory_order_relaxed)) {
      FifoTrigger t{};
      if (fifo.finished() < expected && fifo.poll(&t)) fifo.pop();
      const uint64_t f = atomicLoad<MemoryOrder::kAcquire>(flag);
      if (f != echoed) {
        atomicStore<MemoryOrder::kRelease>(ack, f);
        echoed = f;
      }
    }
  });
  const FifoDeviceHandle handle = fifo.deviceHandle();
  try {
#if defined(WEFT_FIFO_BENCH_GPU)
    if (gpu) {
      runFifoBenchProducerOnGpu(handle, raw, roundTrips, kRateTriggers, words.device<FifoBenchTimes>(256));
    } else {
      fifoBenchProducer(handle, raw, roundTrips, kRateTriggers, times);
    }
#else
    fifoBenchProducer(handle, raw, roundTrips, kRateTriggers, times);
#endif
  } catch (...) {
    done = true;
    proxy.join();
    throw;
  }
  done = true;
  proxy.join();

  const std::string who = gpu ? " (gpu producer)" : " (host producer)";
  std::vector<BenchRow> rows;
  BenchRow rt;
  rt.benchmark = "fifo round trip" + who;
  rt.unit = "us";
  rt.bytes = sizeof(FifoTrigger);
  rt.iterations = roundTrips;
  rt.weft = times->roundTripNs / 1e3 / roundTrips;
  rt.floor = times->rawRoundTripNs / 1e3 / roundTrips;
  rows.push_back(rt);
  BenchRow rate;
  rate.benchmark = "fifo trigger rate" + who;
  rate.unit = "us";
  rate.bytes = sizeof(FifoTrigger);
  rate.iterations = kRateTriggers;
  rate.weft = times->rateNs / 1e3 / kRateTriggers;
  rate.floor = times->rawRateNs / 1e3 / kRateTriggers;
  rows.push_back(rate);
  return rows;
}

}  // namespace weft::bench
