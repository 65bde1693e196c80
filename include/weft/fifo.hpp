/// The host side of the trigger FIFO: owns the ring and its counters, and is the one consumer (the proxy thread).
/// The protocol is described in fifo_device.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <weft/device_error.hpp>
#include <weft/fifo_device.hpp>

namespace weft {

/// Where the producers of a FIFO (and of the handles built on it) run.
enum class HandleSide {
  kDevice,  ///< GPU threads: counters in GPU memory, ring and tail in mapped pinned memory. Without a GPU
            ///< (WEFT_GPU=none, or no device present) this falls back to kHost.
  kHost,    ///< host threads: everything in plain host memory (CPU tests on any build)
};

/// Default number of slots of a FIFO.
inline constexpr uint32_t kDefaultFifoSize = 512;

/// A FIFO of 16-byte triggers. Not copyable; one thread at a time may call poll/pop (the consumer).
class Fifo {
 public:
  /// Allocates a ring of `size` slots (1..kMaxFifoSize, else Error(kInvalidArgument)) for producers on `side`.
  /// `errors` is where producers' wait timeouts are recorded (it must outlive the Fifo); nullptr makes the Fifo own
  /// one. `rank` names this process in such records. Throws Error(kGpuError) when allocation fails.
  explicit Fifo(uint32_t size = kDefaultFifoSize, HandleSide side = HandleSide::kDevice,
                DeviceErrorBlock* errors = nullptr, int rank = -1);
  ~Fifo();
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;

  /// The handle producers push through. Every pointer in it is valid on side(); its default budget is
  /// defaultWaitBudgetNs() unless `budgetNs` is non-zero.
  FifoDeviceHandle deviceHandle(uint64_t budgetNs = 0) const;

  /// Reads the trigger `ahead` positions after the first unfinished one, if its producer has published it: returns
  /// true and writes it (lap bit cleared) into `*out`; false when that slot is not written yet. Acquire: the
  /// producer's writes before its push are visible after a true return. Never waits.
  bool poll(FifoTrigger* out, uint32_t ahead = 0) const;

  /// Marks the next `count` triggers finished and publishes the new tail to producers (release, system scope), which
  /// frees their slots and ends sync() on them. `count` must not pass a trigger poll() has not returned.
  void pop(uint32_t count = 1);

  /// Triggers finished so far (the tail).
  uint64_t finished() const { return tailLocal_; }

  /// Number of slots.
  uint32_t size() const { return size_; }

  /// Where the producers run (kDevice only when a GPU is present).
  HandleSide side() const { return side_; }

  /// The block producers report wait timeouts into.
  DeviceErrorBlock& errors() const { return *errors_; }

 private:
  uint32_t size_;
  HandleSide side_;
  int rank_;
  uint64_t tailLocal_ = 0;
  FifoTrigger* ringHost_ = nullptr;    // the consumer's view
  FifoTrigger* ringDevice_ = nullptr;  // the producers' view
  uint64_t* tailHost_ = nullptr;
  uint64_t* tailDevice_ = nullptr;
  uint64_t* counters_ = nullptr;  // head and tailCache, on the producers' side
  void* pinned_ = nullptr;        // ring + tail, when pinned
  void* hostBlock_ = nullptr;     // ring + tail + counters, when plain host memory
  std::unique_ptr<DeviceErrorBlock> ownBlock_;
  DeviceErrorBlock* errors_ = nullptr;
};

}  // namespace weft
