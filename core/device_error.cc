#include <cstdlib>
#include <weft/device_error.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/params.hpp>

namespace weft {

namespace {
std::string describeRecord(const DeviceErrorRecord& r) {
  std::string text = "rank " + std::to_string(r.rank) + ": " + waitOpName(static_cast<WaitOp>(r.op));
  if (r.peer >= 0) text += " on peer " + std::to_string(r.peer);
  if (r.channel >= 0) text += " channel " + std::to_string(r.channel);
  text += " ran out of its " + std::to_string(r.budgetNs / 1000000) + " ms budget: expected " +
          std::to_string(r.expected) + ", observed " + std::to_string(r.observed);
  return text;
}
}  // namespace

namespace detail {
void throwWaitTimeout(const DeviceErrorRecord& record) { throw Error(ErrorCode::kTimeout, describeRecord(record)); }
}  // namespace detail

DeviceErrorBlock::DeviceErrorBlock() {
  if (gpuDeviceCount() > 0) {
    void* p = nullptr;
    checkGpu(hipHostMalloc(&p, sizeof(DeviceErrorRecord), hipHostMallocMapped | hipHostMallocPortable),
             "hipHostMalloc of the device error record");
    host_ = static_cast<DeviceErrorRecord*>(p);
    void* d = nullptr;
    checkGpu(hipHostGetDevicePointer(&d, p, 0), "hipHostGetDevicePointer of the device error record");
    device_ = static_cast<DeviceErrorRecord*>(d);
    pinned_ = true;
    void* c = nullptr;
    checkGpu(hipMalloc(&c, sizeof(uint32_t)), "hipMalloc of the device error record's claim word");
    claim_ = static_cast<uint32_t*>(c);
  } else {
    host_ = new DeviceErrorRecord{};
    device_ = host_;
  }
  clear();
}

DeviceErrorBlock::~DeviceErrorBlock() {
  if (pinned_) {
    (void)hipFree(claim_);
    (void)hipHostFree(host_);
  } else {
    delete host_;
  }
}

bool DeviceErrorBlock::hasError() const { return atomicLoad<MemoryOrder::kAcquire>(&host_->state) == 2u; }

std::string DeviceErrorBlock::describe() const { return hasError() ? describeRecord(*host_) : ""; }

void DeviceErrorBlock::check() const {
  if (hasError()) detail::throwWaitTimeout(*host_);
}

void DeviceErrorBlock::clear() {
  if (claim_ != nullptr) checkGpu(hipMemset(claim_, 0, sizeof(uint32_t)), "clearing the device error claim word");
  *host_ = DeviceErrorRecord{};
  host_->claim = claim_;
  fence<MemoryOrder::kSeqCst>();
}

uint64_t defaultWaitBudgetNs() { return static_cast<uint64_t>(paramInt("WEFT_WAIT_TIMEOUT_MS")) * 1000000ull; }

}  // namespace weft
