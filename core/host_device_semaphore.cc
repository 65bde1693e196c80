#include <unistd.h>

#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/host_device_semaphore.hpp>
#include <weft/shared_host_memory.hpp>

namespace weft {

namespace {
size_t pageBytes() {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<size_t>(p) : 4096;
}

// Maps host memory (a shared-memory page from allocSharedHostMemory) for the GPU and returns its device address.
uint64_t* registerHostForGpu(void* host, size_t bytes) {
#if WEFT_BUILD_GPU_CUDA
  checkGpu(cudaHostRegister(host, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
           "cudaHostRegister of a semaphore counter");
#elif WEFT_BUILD_GPU_HIP
  checkGpu(hipHostRegister(host, bytes, hipHostRegisterMapped | hipHostRegisterPortable),
           "hipHostRegister of a semaphore counter");
#else
  (void)bytes;
  return static_cast<uint64_t*>(host);
#endif
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
  void* device = nullptr;
  checkGpu(hipHostGetDevicePointer(&device, host, 0), "hipHostGetDevicePointer of a semaphore counter");
  return static_cast<uint64_t*>(device);
#endif
}

void unregisterHost(void* host) {
#if WEFT_BUILD_GPU_CUDA
  (void)cudaHostUnregister(host);
#elif WEFT_BUILD_GPU_HIP
  (void)hipHostUnregister(host);
#else
  (void)host;
#endif
}
}  // namespace

Host2DeviceSemaphore::Host2DeviceSemaphore(Communicator& comm, std::shared_ptr<Connection> connection, int tag,
                                           HandleSide side, DeviceErrorBlock* errors)
    : connection_(std::move(connection)), side_(side), errors_(errors) {
  if (!connection_) throw Error(ErrorCode::kInvalidArgument, "Host2DeviceSemaphore needs a connection");
  peer_ = connection_->remoteRank();
  rank_ = comm.rank();
  const bool gpu = side_ == HandleSide::kDevice && kHasGpuRuntime && gpuDeviceCount() > 0;
  if (!gpu) side_ = HandleSide::kHost;
  try {
    setUp(comm, tag, gpu);
  } catch (...) {
    release();
    throw;
  }
}

void Host2DeviceSemaphore::setUp(Communicator& comm, int tag, bool gpu) {
  MemoryKind kind = MemoryKind::kHost;
  if (gpu && connection_->transport() != "host" && connection_->writesGpuMemory()) {
    // Transports that reach GPU memory (cuda_ipc, RDMA, libfabric with FI_HMEM) add straight into the waiter's
    // GPU memory.
    void* p = nullptr;
    checkGpu(hipMalloc(&p, sizeof(uint64_t)), "hipMalloc of a semaphore counter");
    inboundOnGpu_ = true;
    inboundDevice_ = static_cast<uint64_t*>(p);
    checkGpu(hipMemset(p, 0, sizeof(uint64_t)), "hipMemset of a semaphore counter");
    kind = MemoryKind::kGpu;
  } else {
    // The host transport, and transports that cannot write GPU memory, add into host memory; GPU waiters read it
    // through a mapping. The peer imports it over the transport it uses for host memory: that must be this
    // connection's, or the adds would have no handle to go through.
    const std::string hostTransport = comm.transportFor(peer_, MemoryKind::kHost);
    if (hostTransport != connection_->transport()) {
      throw Error(ErrorCode::kInvalidUsage,
                  "Host2DeviceSemaphore to rank " + std::to_string(peer_) + ": its connection is over '" +
                      connection_->transport() + "', which cannot add into GPU memory, so the counter is in host " +
                      "memory; but host memory to that rank goes over '" + hostTransport +
                      "': route host memory over '" + connection_->transport() + "' too ([transports] config)");
    }
    inboundStorage_ = allocSharedHostMemory(sizeof(uint64_t));
    inboundHost_ = static_cast<uint64_t*>(inboundStorage_.get());
    inboundDevice_ = inboundHost_;
    if (gpu) {
      inboundDevice_ = registerHostForGpu(inboundHost_, pageBytes());
      hostRegistered_ = true;
    }
  }
  if (gpu) {
    void* p = nullptr;
    checkGpu(hipMalloc(&p, sizeof(uint64_t)), "hipMalloc of a semaphore's expected count");
    expected_ = static_cast<uint64_t*>(p);
    expectedOnGpu_ = true;
    checkGpu(hipMemset(p, 0, sizeof(uint64_t)), "hipMemset of a semaphore's expected count");
  } else {
    expected_ = new uint64_t{0};
  }
  void* local = inboundOnGpu_ ? static_cast<void*>(inboundDevice_) : static_cast<void*>(inboundHost_);
  localInbound_ = comm.registerMemory(local, sizeof(uint64_t), kind);
  comm.sendMemory(localInbound_, peer_, tag);
  remoteInbound_ = comm.recvMemory(peer_, tag);
}

Host2DeviceSemaphore::~Host2DeviceSemaphore() { release(); }

void Host2DeviceSemaphore::release() {
  localInbound_ = RegisteredMemory();
  if (hostRegistered_) unregisterHost(inboundHost_);
  if (inboundOnGpu_) (void)hipFree(inboundDevice_);
  if (expectedOnGpu_) {
    (void)hipFree(expected_);
  } else {
    delete expected_;
  }
  hostRegistered_ = inboundOnGpu_ = expectedOnGpu_ = false;
  expected_ = nullptr;
}

Host2DeviceSemaphoreDeviceHandle Host2DeviceSemaphore::deviceHandle(uint64_t budgetNs) const {
  Host2DeviceSemaphoreDeviceHandle h{};
  h.inbound = inboundDevice_;
  h.expected = expected_;
  h.defaultBudgetNs = budgetNs != 0 ? budgetNs : defaultWaitBudgetNs();
  DeviceErrorRecord* record = nullptr;
  if (errors_ != nullptr) record = side_ == HandleSide::kDevice ? errors_->deviceRecord() : errors_->hostRecord();
  h.site = WaitSite{record, rank_, peer_, -1};
  return h;
}

void Host2DeviceSemaphore::signal() { connection_->atomicAdd(remoteInbound_, 0, 1); }

uint64_t Host2DeviceSemaphore::received() const {
  if (inboundOnGpu_) {
    uint64_t v = 0;
    checkGpu(hipMemcpy(&v, inboundDevice_, sizeof(v), hipMemcpyDeviceToHost), "reading a semaphore counter");
    return v;
  }
  return atomicLoad<MemoryOrder::kRelaxed>(inboundHost_);
}

}  // namespace weft
