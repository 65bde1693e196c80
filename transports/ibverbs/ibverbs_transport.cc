// The ibverbs transport plugin: RC queue pairs on RDMA NICs. write = RDMA writes (striped over qps_per_peer QPs,
// batched per doorbell, selectively signalled: see ibverbs_sender.hpp); atomicAdd = an RDMA fetch-add into the peer's
// token, or with atomics = false a send that the peer's receiver thread applies; flush = wait for every signalled
// completion that covers what was posted. The NIC for each GPU is the nearest in the hwloc topology unless configured.
//
// Never run on RDMA hardware (none was available): see docs/ibverbs.md for what was tested and how.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if WEFT_IBVERBS_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

#include "ibverbs_failure.hpp"
#include "ibverbs_nic.hpp"
#include "ibverbs_options.hpp"
#include "ibverbs_sender.hpp"
#include "ibverbs_signal.hpp"
#include "ibverbs_split.hpp"
#include "ibverbs_wire.hpp"

namespace weft::ibverbs {
namespace {

thread_local std::string tLastError;

/// Send-queue depth asked for per QP (capped by the device's max_qp_wr).
constexpr uint32_t kQueueDepth = 512;
/// WRs per doorbell.
constexpr uint32_t kMaxBatch = 32;
/// At most this many WRs in a row go unsignalled.
constexpr uint32_t kSignalInterval = 64;
/// Receives kept posted on QP 0 of each connection for send-mode signals.
constexpr uint32_t kRecvSlots = 128;
/// Inline data asked for per QP: a send-mode signal (24 bytes) must fit.
constexpr uint32_t kInlineBytes = 64;
/// Budget of waits inside write/atomicAdd (queue room, flush-before-signal on other QPs): the ABI gives them none.
constexpr std::chrono::seconds kOperationTimeout{30};
/// Largest RDMA message posted, whatever the port allows (lengths are 32-bit in a WR).
constexpr uint64_t kMaxMessageCap = uint64_t{1} << 30;
/// Largest registration accepted (bounds a malformed blob).
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 48;

enum class Tag : uint32_t {
  kState = 0x53564257,
  kEndpoint = 0x45564257,
  kConnection = 0x43564257,
  kRegion = 0x52564257,
  kRemote = 0x49564257,
  kDead = 0
};

/// unique_ptr deleter for the verbs destroy calls, which all have the shape int f(T*).
template <class T, int (*Destroy)(T*)>
struct VerbsDeleter {
  void operator()(T* p) const {
    if (p != nullptr) Destroy(p);
  }
};
using ContextPtr = std::unique_ptr<ibv_context, VerbsDeleter<ibv_context, ibv_close_device>>;
using PdPtr = std::unique_ptr<ibv_pd, VerbsDeleter<ibv_pd, ibv_dealloc_pd>>;
using CqPtr = std::unique_ptr<ibv_cq, VerbsDeleter<ibv_cq, ibv_destroy_cq>>;
using QpPtr = std::unique_ptr<ibv_qp, VerbsDeleter<ibv_qp, ibv_destroy_qp>>;
using MrPtr = std::unique_ptr<ibv_mr, VerbsDeleter<ibv_mr, ibv_dereg_mr>>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, VerbsDeleter<ibv_comp_channel, ibv_destroy_comp_channel>>;

struct DeviceListDeleter {
  void operator()(ibv_device** l) const {
    if (l != nullptr) ibv_free_device_list(l);
  }
};

struct IbvState;
struct IbvEndpoint;

/// One opened RDMA device and port.
struct Nic {
  std::string name;
  std::string busId;
  int numaNode = -1;
  uint8_t port = 1;
  uint32_t gidIndex = 0;
  ibv_gid gid{};
  ibv_port_attr portAttr{};
  ibv_device_attr deviceAttr{};
  ContextPtr context;
  PdPtr pd;
  // Send-mode signals: one receive CQ and thread per NIC.
  ChannelPtr recvChannel;
  CqPtr recvCq;
  std::mutex recvMutex;                        // guards receivers and every re-post of a receive
  std::map<uint64_t, IbvEndpoint*> receivers;  // connected endpoints by id (the high bits of a receive's wr_id)
  std::thread receiver;
};

/// One device the plugin reports: a NIC, and the GPU it serves (-1 for none).
struct DeviceEntry {
  uint32_t nic;
  int gpu;
  NicAffinity affinity;
};

struct IbvState {
  Tag tag = Tag::kState;
  weftHostServices_v1 services{};
  IbvOptions options;
  std::vector<std::unique_ptr<Nic>> nics;
  std::vector<DeviceEntry> devices;
  SignalTargets targets;
  std::atomic<uint32_t> nextRegionKey{1};
  std::atomic<uint64_t> nextEndpointId{1};
  std::atomic<bool> stopping{false};
};

/// SendQueue over a real QP and its send CQ.
class VerbsQueue : public SendQueue {
 public:
  VerbsQueue(ibv_qp* qp, ibv_cq* cq) : qp_(qp), cq_(cq) {}
  int post(ibv_send_wr* first, ibv_send_wr** bad) override { return ibv_post_send(qp_, first, bad); }
  int poll(int max, ibv_wc* out) override { return ibv_poll_cq(cq_, max, out); }

 private:
  ibv_qp* qp_;
  ibv_cq* cq_;
};

struct IbvEndpoint {
  Tag tag = Tag::kEndpoint;
  IbvState* state = nullptr;
  uint32_t nic = 0;
  uint64_t id = 0;
  uint32_t depth = 0;
  uint32_t maxInline = 0;
  std::vector<CqPtr> sendCqs;
  std::vector<QpPtr> qps;
  std::vector<uint32_t> psns;
  std::vector<SignalMessage> recvSlots;  // send mode: what QP 0's receives land in
  MrPtr recvMr;
  uint64_t atomicResult = 0;  // where fetch-add writes the old value, which nobody reads
  MrPtr scratchMr;
  bool connected = false;
};

struct IbvConnection {
  Tag tag = Tag::kConnection;
  IbvEndpoint* endpoint = nullptr;
  uint32_t peerNic = 0;
  uint64_t maxMessage = 0;
  std::mutex mutex;  // the ABI lets several threads use one connection: every sender call holds it
  std::vector<std::unique_ptr<VerbsQueue>> queues;
  std::vector<std::unique_ptr<QpSender>> senders;
  std::vector<bool> dirty;  // QP has writes not yet flushed (multi-QP signal ordering)
  uint32_t nextQp = 0;
};

struct IbvRegion {
  Tag tag = Tag::kRegion;
  IbvState* state = nullptr;
  uint32_t key = 0;
  uint64_t address = 0;
  uint64_t size = 0;
  uint32_t kind = weftMemoryHost;
  std::vector<MrPtr> mrs;  // one per NIC of the state
};

struct IbvRemote {
  Tag tag = Tag::kRemote;
  uint64_t address = 0;
  uint64_t size = 0;
  uint32_t regionKey = 0;
  uint32_t nicCount = 0;
  uint32_t rkey[kMaxNics] = {};
};

void logf(const IbvState* s, int32_t level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void logf(const IbvState* s, int32_t level, const char* fmt, ...) {
  if (s == nullptr || s->services.log == nullptr) return;
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  s->services.log(s->services.context, level, line);
}

/// Runs `body`, turning every exception into a result code and the thread's lastError.
template <class F>
weftResult_t guard(F&& body) noexcept {
  try {
    body();
    return weftSuccess;
  } catch (const IbvFailure& e) {
    tLastError = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    tLastError = "ibverbs transport: out of memory";
    return weftOutOfMemory;
  } catch (const std::exception& e) {
    tLastError = std::string("ibverbs transport: internal error: ") + e.what();
    return weftInternalError;
  } catch (...) {
    tLastError = "ibverbs transport: unknown internal error";
    return weftInternalError;
  }
}

template <class T>
T* checked(void* object, Tag tag, const char* what) {
  auto* o = static_cast<T*>(object);
  if (o == nullptr || o->tag != tag) throw IbvFailure(weftInvalidArgument, std::string("not a valid ") + what);
  return o;
}

void requireOut(const void* p, const char* what) {
  if (p == nullptr) throw IbvFailure(weftInvalidArgument, std::string("output pointer ") + what + " is NULL");
}

std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// ---- GPU runtime (CUDA builds): bus ids for NIC choice, dma-buf export for registration ----

#if WEFT_IBVERBS_CUDA
std::vector<std::string> gpuBusIds() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no GPU: the application's next cudaGetLastError must not see it
    return {};
  }
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    char id[32] = {};
    if (cudaDeviceGetPCIBusId(id, sizeof(id), i) != cudaSuccess) {
      (void)cudaGetLastError();
      id[0] = '\0';
    }
    out.emplace_back(id);
  }
  return out;
}

/// A dma-buf fd for [base, base + size) of GPU memory (page-aligned), or -1 with `*why` saying why not.
int exportDmabuf(uint64_t base, uint64_t size, std::string* why) {
  using GetHandleFn = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
  static GetHandleFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &p, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<GetHandleFn>(p);
  }();
  if (fn == nullptr) {
    *why = "the CUDA driver has no cuMemGetHandleForAddressRange";
    return -1;
  }
  int fd = -1;
  CUresult r = fn(&fd, static_cast<CUdeviceptr>(base), size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS) {
    *why = "cuMemGetHandleForAddressRange(DMA_BUF_FD) failed with CUresult " + std::to_string(static_cast<int>(r));
    return -1;
  }
  return fd;
}
#else
std::vector<std::string> gpuBusIds() { return {}; }
int exportDmabuf(uint64_t, uint64_t, std::string* why) {
  *why = "this build has no GPU runtime to export a dma-buf";
  return -1;
}
#endif

// ---- opening devices ----

bool isIpv4Mapped(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i) {
    if (g.raw[i] != 0) return false;
  }
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

/// The GID index for a RoCE port: RoCE v2 with an IPv4-mapped address first, then any RoCE v2, then 0.
uint32_t chooseGidIndex(ibv_context* ctx, uint8_t port, const ibv_port_attr& attr) {
  int anyV2 = -1;
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, static_cast<uint32_t>(i), &e, 0) != 0) continue;
    if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    if (isIpv4Mapped(e.gid)) return static_cast<uint32_t>(i);
    if (anyV2 < 0) anyV2 = i;
  }
  return anyV2 >= 0 ? static_cast<uint32_t>(anyV2) : 0;
}

/// Opens `dev` on the configured or first active port; nullptr with `*why` when it cannot be used.
std::unique_ptr<Nic> openNic(ibv_device* dev, const IbvOptions& o, std::string* why) {
  auto nic = std::make_unique<Nic>();
  nic->name = ibv_get_device_name(dev);
  nic->context.reset(ibv_open_device(dev));
  if (!nic->context) {
    *why = "ibv_open_device failed: " + std::string(std::strerror(errno));
    return nullptr;
  }
  ibv_context* ctx = nic->context.get();
  if (int rc = ibv_query_device(ctx, &nic->deviceAttr); rc != 0) {
    *why = "ibv_query_device failed: " + std::string(std::strerror(rc));
    return nullptr;
  }
  int chosen = -1;
  for (int p = 1; p <= nic->deviceAttr.phys_port_cnt; ++p) {
    if (o.port != 0 && static_cast<uint32_t>(p) != o.port) continue;
    ibv_port_attr attr{};
    if (ibv_query_port(ctx, static_cast<uint8_t>(p), &attr) != 0) continue;
    if (attr.state == IBV_PORT_ACTIVE) {
      chosen = p;
      nic->portAttr = attr;
      break;
    }
  }
  if (chosen < 0) {
    *why = o.port != 0 ? "port " + std::to_string(o.port) + " is missing or not active"
                       : "no active port among " + std::to_string(nic->deviceAttr.phys_port_cnt);
    return nullptr;
  }
  nic->port = static_cast<uint8_t>(chosen);
  if (o.gidIndex >= 0) {
    nic->gidIndex = static_cast<uint32_t>(o.gidIndex);
  } else if (nic->portAttr.link_layer == IBV_LINK_LAYER_ETHERNET) {
    nic->gidIndex = chooseGidIndex(ctx, nic->port, nic->portAttr);
  }
  if (nic->gidIndex >= static_cast<uint32_t>(nic->portAttr.gid_tbl_len)) {
    *why = "gid_index " + std::to_string(nic->gidIndex) + " is beyond the port's GID table of " +
           std::to_string(nic->portAttr.gid_tbl_len);
    return nullptr;
  }
  if (int rc = ibv_query_gid(ctx, nic->port, static_cast<int>(nic->gidIndex), &nic->gid); rc != 0) {
    *why = "ibv_query_gid(" + std::to_string(nic->gidIndex) + ") failed";
    return nullptr;
  }
  if (o.signalMode == SignalMode::kAtomic && nic->deviceAttr.atomic_cap == IBV_ATOMIC_NONE) {
    *why = "the device offers no RDMA atomics (set atomics = false to signal with sends)";
    return nullptr;
  }
  nic->pd.reset(ibv_alloc_pd(ctx));
  if (!nic->pd) {
    *why = "ibv_alloc_pd failed: " + std::string(std::strerror(errno));
    return nullptr;
  }
  const std::string sys = std::string("/sys/class/infiniband/") + nic->name + "/device";
  std::error_code ec;
  nic->busId = std::filesystem::canonical(sys, ec).filename().string();
  std::string numa = readFirstLine(sys + "/numa_node");
  nic->numaNode = numa.empty() ? -1 : std::atoi(numa.c_str());
  return nic;
}

// ---- the receiver thread (send-mode signals) ----

void postRecv(IbvEndpoint* e, uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&e->recvSlots[slot]), sizeof(SignalMessage), e->recvMr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = (e->id << 16) | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(e->qps[0].get(), &wr, &bad); rc != 0) {
    throw IbvFailure(
        weftSystemError,
        "ibv_post_recv on " + std::string(ibv_get_device_name(e->qps[0]->context->device)) + ": " + std::strerror(rc));
  }
}

void handleRecv(IbvState* s, Nic* nic, const ibv_wc& wc) {
  std::lock_guard<std::mutex> lock(nic->recvMutex);
  auto it = nic->receivers.find(wc.wr_id >> 16);
  if (it == nic->receivers.end()) return;  // the connection closed: a flushed receive of its QP
  IbvEndpoint* e = it->second;
  const uint32_t slot = static_cast<uint32_t>(wc.wr_id & 0xffff);
  if (slot >= e->recvSlots.size()) return;
  if (wc.status != IBV_WC_SUCCESS) {
    if (wc.status != IBV_WC_WR_FLUSH_ERR) {
      logf(s, weftLogWarn, "ibverbs %s: signal receive failed: %s", nic->name.c_str(), ibv_wc_status_str(wc.status));
    }
    return;
  }
  std::string why = s->targets.apply(&e->recvSlots[slot], wc.byte_len);
  if (!why.empty()) logf(s, weftLogWarn, "ibverbs %s: dropped a signal: %s", nic->name.c_str(), why.c_str());
  try {
    postRecv(e, slot);
  } catch (const IbvFailure& f) {
    logf(s, weftLogError, "ibverbs %s: %s", nic->name.c_str(), f.what());
  }
}

void receiverLoop(IbvState* s, Nic* nic) {
  ibv_wc wcs[32];
  while (!s->stopping.load(std::memory_order_acquire)) {
    // Arm first, then drain: a completion that arrives in between raises the event, so none is slept through.
    if (ibv_req_notify_cq(nic->recvCq.get(), 0) != 0) {
      logf(s, weftLogError, "ibverbs %s: ibv_req_notify_cq failed: receiver stops", nic->name.c_str());
      return;
    }
    int n;
    while ((n = ibv_poll_cq(nic->recvCq.get(), 32, wcs)) > 0) {
      for (int i = 0; i < n; ++i) handleRecv(s, nic, wcs[i]);
    }
    pollfd pfd{nic->recvChannel->fd, POLLIN, 0};
    if (::poll(&pfd, 1, 100) > 0) {  // 100 ms: how long finalize waits for this thread at most
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      if (ibv_get_cq_event(nic->recvChannel.get(), &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
    }
  }
}

void stopReceivers(IbvState* s) {
  s->stopping.store(true, std::memory_order_release);
  for (auto& nic : s->nics) {
    if (nic->receiver.joinable()) nic->receiver.join();
  }
}

// ---- entry points ----

const char* ibvLastError() { return tLastError.c_str(); }

weftResult_t ibvInit(const weftHostServices_v1* host, uint64_t numOptions, const char* const* keys,
                     const char* const* values, void** stateOut) {
  return guard([&] {
    requireOut(stateOut, "state");
    if (numOptions > 0 && (keys == nullptr || values == nullptr)) {
      throw IbvFailure(weftInvalidArgument, "options given without key or value arrays");
    }
    std::vector<std::pair<std::string, std::string>> pairs;
    for (uint64_t i = 0; i < numOptions; ++i) {
      pairs.emplace_back(keys[i] != nullptr ? keys[i] : "", values[i] != nullptr ? values[i] : "");
    }
    auto s = std::make_unique<IbvState>();
    if (host != nullptr && host->structSize >= offsetof(weftHostServices_v1, log) + sizeof(host->log)) {
      s->services = *host;
    }
    s->options = parseOptions(pairs);
    const IbvOptions& o = s->options;

    int count = 0;
    std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&count));
    std::string reason;
    if (!list) {
      reason = std::string("ibv_get_device_list failed: ") + std::strerror(errno) +
               " (no RDMA support in this kernel or container?)";
    } else if (count == 0) {
      reason =
          "no RDMA devices found (ibv_get_device_list returned none: no RDMA NIC, or its kernel driver or rdma-core "
          "provider is missing)";
    } else {
      std::string names;
      bool configuredSeen = false;
      for (int i = 0; i < count && s->nics.size() < kMaxNics; ++i) {
        const char* name = ibv_get_device_name(list.get()[i]);
        names += std::string(names.empty() ? "" : ", ") + name;
        if (!o.device.empty() && o.device != name) continue;
        configuredSeen = true;
        std::string why;
        auto nic = openNic(list.get()[i], o, &why);
        if (!nic) {
          logf(s.get(), weftLogInfo, "ibverbs: skipping %s: %s", name, why.c_str());
          reason += std::string(reason.empty() ? "" : "; ") + name + ": " + why;
          continue;
        }
        s->nics.push_back(std::move(nic));
      }
      if (!o.device.empty() && !configuredSeen) {
        reason = "configured device '" + o.device + "' is not among the RDMA devices (" + names + ")";
      }
    }

    if (!s->nics.empty()) {
      std::vector<std::string> gpus = gpuBusIds();
      if (gpus.empty()) {
        for (uint32_t n = 0; n < s->nics.size(); ++n) s->devices.push_back({n, -1, NicAffinity::kUnknown});
      } else {
        std::vector<NicChoice> choice(gpus.size(), NicChoice{0, NicAffinity::kUnknown});
        if (o.device.empty() && s->nics.size() > 1) {
          hwloc_topology_t topo = nullptr;
          if (hwloc_topology_init(&topo) == 0) {
            hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
            if (hwloc_topology_load(topo) == 0) {
              std::vector<std::string> nicBus;
              for (auto& n : s->nics) nicBus.push_back(n->busId);
              choice = assignNics(topo, gpus, nicBus);
            } else {
              logf(s.get(), weftLogWarn, "ibverbs: hwloc could not load the topology: every GPU uses %s",
                   s->nics[0]->name.c_str());
            }
            hwloc_topology_destroy(topo);
          }
        }
        for (uint32_t g = 0; g < gpus.size(); ++g) {
          s->devices.push_back({choice[g].nic, static_cast<int>(g), choice[g].affinity});
          logf(s.get(), weftLogInfo, "ibverbs: GPU %u (%s) uses %s (%s)", g, gpus[g].c_str(),
               s->nics[choice[g].nic]->name.c_str(),
               o.device.empty() ? nicAffinityName(choice[g].affinity) : "configured");
        }
      }
      if (o.signalMode == SignalMode::kSend) {
        for (auto& nic : s->nics) {
          nic->recvChannel.reset(ibv_create_comp_channel(nic->context.get()));
          if (!nic->recvChannel) throwErrno("ibv_create_comp_channel on " + nic->name, errno);
          int flags = fcntl(nic->recvChannel->fd, F_GETFL);
          fcntl(nic->recvChannel->fd, F_SETFL, flags | O_NONBLOCK);
          const int cqe = std::min<int>(nic->deviceAttr.max_cqe, 4096);
          nic->recvCq.reset(ibv_create_cq(nic->context.get(), cqe, nullptr, nic->recvChannel.get(), 0));
          if (!nic->recvCq) throwErrno("ibv_create_cq (signal receives) on " + nic->name, errno);
        }
        try {
          for (auto& nic : s->nics) nic->receiver = std::thread(receiverLoop, s.get(), nic.get());
        } catch (...) {
          stopReceivers(s.get());
          throw;
        }
      }
    }
    if (s->devices.empty()) {
      logf(s.get(), weftLogInfo, "ibverbs: 0 devices: %s", reason.c_str());
    } else {
      logf(s.get(), weftLogDebug, "ibverbs: %zu devices on %zu NICs, %u QPs per peer, signals by %s", s->devices.size(),
           s->nics.size(), o.qpsPerPeer, o.signalMode == SignalMode::kAtomic ? "RDMA atomics" : "sends");
    }
    *stateOut = s.release();
  });
}

weftResult_t ibvFinalize(void* state) {
  return guard([&] {
    auto* s = checked<IbvState>(state, Tag::kState, "ibverbs transport state");
    stopReceivers(s);
    s->tag = Tag::kDead;
    delete s;
  });
}

weftResult_t ibvDeviceCount(void* state, uint32_t* count) {
  return guard([&] {
    auto* s = checked<IbvState>(state, Tag::kState, "ibverbs transport state");
    requireOut(count, "count");
    *count = static_cast<uint32_t>(s->devices.size());
  });
}

const DeviceEntry& deviceAt(IbvState* s, uint32_t device) {
  if (device >= s->devices.size()) {
    throw IbvFailure(weftInvalidArgument, "ibverbs transport has " + std::to_string(s->devices.size()) +
                                              " devices, not device " + std::to_string(device));
  }
  return s->devices[device];
}

weftResult_t ibvDeviceInfo(void* state, uint32_t device, weftDeviceInfo_v1* info) {
  return guard([&] {
    auto* s = checked<IbvState>(state, Tag::kState, "ibverbs transport state");
    requireOut(info, "info");
    const DeviceEntry& d = deviceAt(s, device);
    const Nic& nic = *s->nics[d.nic];
    auto covers = [&](size_t offset, size_t size) { return info->structSize >= offset + size; };
    if (covers(offsetof(weftDeviceInfo_v1, name), sizeof(info->name))) {
      std::memset(info->name, 0, sizeof(info->name));
      std::snprintf(info->name, sizeof(info->name), "%s", nic.name.c_str());
    }
    if (covers(offsetof(weftDeviceInfo_v1, flags), sizeof(info->flags))) {
      info->flags = weftDeviceHostMemory | (WEFT_IBVERBS_CUDA ? weftDeviceGpuMemory : 0);
    }
    if (covers(offsetof(weftDeviceInfo_v1, numaNode), sizeof(info->numaNode))) info->numaNode = nic.numaNode;
    if (covers(offsetof(weftDeviceInfo_v1, gpuDevice), sizeof(info->gpuDevice))) info->gpuDevice = d.gpu;
  });
}

void modifyQp(ibv_qp* qp, ibv_qp_attr& attr, int mask, const char* step) {
  if (int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
    throw IbvFailure(weftSystemError, std::string("ibv_modify_qp to ") + step + " of qp " + std::to_string(qp->qp_num) +
                                          " failed: " + std::strerror(rc));
  }
}

weftResult_t ibvCreateEndpoint(void* state, uint32_t device, void** endpointOut, void* blob, uint64_t blobCapacity,
                               uint64_t* blobUsed) {
  return guard([&] {
    auto* s = checked<IbvState>(state, Tag::kState, "ibverbs transport state");
    requireOut(endpointOut, "endpoint");
    requireOut(blob, "blob");
    requireOut(blobUsed, "blobUsed");
    if (blobCapacity < sizeof(EndpointBlob)) {
      throw IbvFailure(weftInvalidArgument, "endpoint blob buffer of " + std::to_string(blobCapacity) +
                                                " bytes is smaller than " + std::to_string(sizeof(EndpointBlob)));
    }
    const DeviceEntry& d = deviceAt(s, device);
    Nic& nic = *s->nics[d.nic];
    const bool sendMode = s->options.signalMode == SignalMode::kSend;
    auto e = std::make_unique<IbvEndpoint>();
    e->state = s;
    e->nic = d.nic;
    e->id = s->nextEndpointId.fetch_add(1);
    e->depth = std::min<uint32_t>(kQueueDepth, static_cast<uint32_t>(nic.deviceAttr.max_qp_wr));
    std::mt19937 rng(std::random_device{}());
    const uint32_t qpCount = s->options.qpsPerPeer;
    e->maxInline = kInlineBytes;
    for (uint32_t q = 0; q < qpCount; ++q) {
      CqPtr cq(ibv_create_cq(nic.context.get(), static_cast<int>(e->depth) + 1, nullptr, nullptr, 0));
      if (!cq) throwErrno("ibv_create_cq on " + nic.name, errno);
      ibv_qp_init_attr init{};
      init.send_cq = cq.get();
      init.recv_cq = sendMode && q == 0 ? nic.recvCq.get() : cq.get();
      init.qp_type = IBV_QPT_RC;
      init.cap.max_send_wr = e->depth;
      init.cap.max_recv_wr = sendMode && q == 0 ? kRecvSlots : 1;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      init.cap.max_inline_data = kInlineBytes;
      QpPtr qp(ibv_create_qp(nic.pd.get(), &init));
      if (!qp) throwErrno("ibv_create_qp (RC, " + std::to_string(e->depth) + " send WRs) on " + nic.name, errno);
      e->maxInline = std::min(e->maxInline, init.cap.max_inline_data);
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_INIT;
      attr.pkey_index = 0;
      attr.port_num = nic.port;
      attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      modifyQp(qp.get(), attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
      e->sendCqs.push_back(std::move(cq));
      e->qps.push_back(std::move(qp));
      e->psns.push_back(rng() & 0xffffff);
    }
    if (sendMode && e->maxInline < sizeof(SignalMessage)) {
      throw IbvFailure(weftNotSupported, nic.name + " gives " + std::to_string(e->maxInline) +
                                             " bytes of inline data, a signal send needs " +
                                             std::to_string(sizeof(SignalMessage)) + ": use atomics = true");
    }
    e->scratchMr.reset(ibv_reg_mr(nic.pd.get(), &e->atomicResult, sizeof(e->atomicResult), IBV_ACCESS_LOCAL_WRITE));
    if (!e->scratchMr) throwErrno("ibv_reg_mr of the atomic result word on " + nic.name, errno);
    if (sendMode) {
      e->recvSlots.resize(kRecvSlots);
      e->recvMr.reset(ibv_reg_mr(nic.pd.get(), e->recvSlots.data(), e->recvSlots.size() * sizeof(SignalMessage),
                                 IBV_ACCESS_LOCAL_WRITE));
      if (!e->recvMr) throwErrno("ibv_reg_mr of the signal receive buffers on " + nic.name, errno);
      for (uint32_t i = 0; i < kRecvSlots; ++i) postRecv(e.get(), i);
    }
    EndpointBlob b{};
    b.magic = kEndpointMagic;
    b.version = kWireVersion;
    b.qpCount = qpCount;
    b.signalMode = sendMode ? 1 : 0;
    b.nicIndex = d.nic;
    b.mtu = nic.portAttr.active_mtu;
    b.lid = nic.portAttr.lid;
    b.linkLayer = nic.portAttr.link_layer;
    b.portNum = nic.port;
    b.gidIndex = nic.gidIndex;
    std::memcpy(b.gid, nic.gid.raw, sizeof(b.gid));
    for (uint32_t q = 0; q < qpCount; ++q) {
      b.qpn[q] = e->qps[q]->qp_num;
      b.psn[q] = e->psns[q];
    }
    std::memcpy(blob, &b, sizeof(b));
    *blobUsed = sizeof(b);
    *endpointOut = e.release();
  });
}

weftResult_t ibvDestroyEndpoint(void* endpoint) {
  return guard([&] {
    auto* e = checked<IbvEndpoint>(endpoint, Tag::kEndpoint, "ibverbs transport endpoint");
    e->tag = Tag::kDead;
    delete e;  // QPs before CQs before MRs: members are destroyed in reverse order of declaration
  });
}

weftResult_t ibvConnect(void* endpoint, const void* peerBlob, uint64_t peerBlobBytes, uint64_t /*timeoutNs*/,
                        void** connectionOut) {
  return guard([&] {
    auto* e = checked<IbvEndpoint>(endpoint, Tag::kEndpoint, "ibverbs transport endpoint");
    requireOut(connectionOut, "connection");
    if (e->connected) throw IbvFailure(weftInvalidUsage, "ibverbs endpoint is connected already (one peer each)");
    if (peerBlob == nullptr || peerBlobBytes != sizeof(EndpointBlob)) {
      throw IbvFailure(weftInvalidArgument, "peer endpoint blob has " + std::to_string(peerBlobBytes) +
                                                " bytes, an ibverbs endpoint blob has " +
                                                std::to_string(sizeof(EndpointBlob)));
    }
    EndpointBlob b;
    std::memcpy(&b, peerBlob, sizeof(b));
    IbvState* s = e->state;
    Nic& nic = *s->nics[e->nic];
    if (b.magic != kEndpointMagic || b.version != kWireVersion) {
      throw IbvFailure(weftInvalidArgument,
                       "peer blob is not an ibverbs endpoint of wire version " + std::to_string(kWireVersion));
    }
    if (b.qpCount != e->qps.size() || b.nicIndex >= kMaxNics) {
      throw IbvFailure(weftInvalidArgument, "peer opens " + std::to_string(b.qpCount) + " queue pairs, this rank " +
                                                std::to_string(e->qps.size()) + ": give both the same qps_per_peer");
    }
    const uint32_t mode = s->options.signalMode == SignalMode::kSend ? 1 : 0;
    if (b.signalMode != mode) {
      throw IbvFailure(weftInvalidArgument, "peer signals with " + std::string(b.signalMode ? "sends" : "atomics") +
                                                ", this rank with " + (mode ? "sends" : "atomics") +
                                                ": give both the same atomics option");
    }
    if (b.linkLayer != nic.portAttr.link_layer) {
      throw IbvFailure(weftInvalidArgument,
                       "peer port is " + std::string(b.linkLayer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand") +
                           ", " + nic.name + " is not: they cannot reach each other");
    }
    const auto mtu = static_cast<ibv_mtu>(std::min<uint32_t>(b.mtu, nic.portAttr.active_mtu));
    const uint8_t rdAtomic = static_cast<uint8_t>(std::min(16, std::max(1, nic.deviceAttr.max_qp_rd_atom)));
    for (uint32_t q = 0; q < e->qps.size(); ++q) {
      ibv_qp_attr rtr{};
      rtr.qp_state = IBV_QPS_RTR;
      rtr.path_mtu = mtu;
      rtr.dest_qp_num = b.qpn[q];
      rtr.rq_psn = b.psn[q] & 0xffffff;
      rtr.max_dest_rd_atomic = rdAtomic;
      rtr.min_rnr_timer = 12;
      rtr.ah_attr.port_num = nic.port;
      rtr.ah_attr.dlid = b.lid;
      if (nic.portAttr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        rtr.ah_attr.is_global = 1;
        std::memcpy(rtr.ah_attr.grh.dgid.raw, b.gid, sizeof(b.gid));
        rtr.ah_attr.grh.sgid_index = static_cast<uint8_t>(nic.gidIndex);
        rtr.ah_attr.grh.hop_limit = 64;
      }
      modifyQp(e->qps[q].get(), rtr,
               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
               "RTR");
      ibv_qp_attr rts{};
      rts.qp_state = IBV_QPS_RTS;
      rts.timeout = 14;   // 4.096 us * 2^14 = 67 ms per transport retry
      rts.retry_cnt = 7;  // the most the spec allows
      rts.rnr_retry = 7;  // infinite: a send-mode signal waits for the receiver thread to re-post
      rts.sq_psn = e->psns[q];
      rts.max_rd_atomic = rdAtomic;
      modifyQp(
          e->qps[q].get(), rts,
          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
          "RTS");
    }
    auto c = std::make_unique<IbvConnection>();
    c->endpoint = e;
    c->peerNic = b.nicIndex;
    c->maxMessage = std::min<uint64_t>(nic.portAttr.max_msg_sz, kMaxMessageCap);
    if (c->maxMessage == 0) c->maxMessage = kMaxMessageCap;
    SenderLimits limits;
    limits.queueDepth = e->depth;
    limits.maxBatch = std::min(kMaxBatch, e->depth);
    limits.signalInterval = kSignalInterval;
    limits.maxInlineBytes = e->maxInline;
    for (uint32_t q = 0; q < e->qps.size(); ++q) {
      c->queues.push_back(std::make_unique<VerbsQueue>(e->qps[q].get(), e->sendCqs[q].get()));
      char name[128];
      std::snprintf(name, sizeof(name), "ibverbs %s qp %u (peer qp %u)", nic.name.c_str(), e->qps[q]->qp_num, b.qpn[q]);
      c->senders.push_back(std::make_unique<QpSender>(*c->queues.back(), limits, name));
    }
    c->dirty.assign(e->qps.size(), false);
    if (mode == 1) {
      std::lock_guard<std::mutex> lock(nic.recvMutex);
      nic.receivers[e->id] = e;
    }
    e->connected = true;
    *connectionOut = c.release();
  });
}

weftResult_t ibvCloseConnection(void* connection) {
  return guard([&] {
    auto* c = checked<IbvConnection>(connection, Tag::kConnection, "ibverbs transport connection");
    IbvEndpoint* e = c->endpoint;
    Nic& nic = *e->state->nics[e->nic];
    {
      std::lock_guard<std::mutex> lock(nic.recvMutex);
      nic.receivers.erase(e->id);
    }
    // Error state stops the QPs: nothing more is sent or received on them, and their endpoint can be destroyed.
    for (auto& qp : e->qps) {
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      ibv_modify_qp(qp.get(), &attr, IBV_QP_STATE);
    }
    c->tag = Tag::kDead;
    delete c;
  });
}

weftResult_t ibvRegisterMemory(void* state, const weftMemoryDescriptor_v1* desc, void** memoryOut, void* blob,
                               uint64_t blobCapacity, uint64_t* blobUsed) {
  return guard([&] {
    auto* s = checked<IbvState>(state, Tag::kState, "ibverbs transport state");
    requireOut(memoryOut, "memory");
    requireOut(blob, "blob");
    requireOut(blobUsed, "blobUsed");
    if (desc == nullptr || desc->structSize < offsetof(weftMemoryDescriptor_v1, gpuDevice)) {
      throw IbvFailure(weftInvalidArgument, "memory descriptor is NULL or too small");
    }
    if (blobCapacity < sizeof(MemoryBlob)) {
      throw IbvFailure(weftInvalidArgument, "memory blob buffer of " + std::to_string(blobCapacity) +
                                                " bytes is smaller than " + std::to_string(sizeof(MemoryBlob)));
    }
    if (desc->kind != weftMemoryHost && desc->kind != weftMemoryGpu) {
      throw IbvFailure(weftNotSupported, "memory kind " + std::to_string(desc->kind) + " is unknown");
    }
    if (desc->address == 0 || desc->size == 0 || desc->size > kMaxRegionBytes) {
      throw IbvFailure(weftInvalidArgument,
                       "buffer address is 0 or its size " + std::to_string(desc->size) + " is not in [1, 2^48]");
    }
    if (s->nics.empty()) throw IbvFailure(weftInvalidUsage, "the ibverbs transport has no devices to register on");
    const int access =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    auto r = std::make_unique<IbvRegion>();
    r->state = s;
    r->address = desc->address;
    r->size = desc->size;
    r->kind = desc->kind;
    for (auto& nic : s->nics) {
      ibv_mr* mr = nullptr;
      std::string how;
      if (desc->kind == weftMemoryGpu) {
        // dma-buf first (no peer-memory kernel module needed), the plain registration second (nvidia-peermem).
        if (desc->fd >= 0) {
          mr = ibv_reg_dmabuf_mr(nic->pd.get(), desc->fdOffset, desc->size, desc->address, desc->fd, access);
          how = mr ? "" : "ibv_reg_dmabuf_mr with the given fd: " + std::string(std::strerror(errno)) + "; ";
        } else {
          const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
          const uint64_t base = desc->address / page * page;
          const uint64_t end = (desc->address + desc->size + page - 1) / page * page;
          std::string why;
          int fd = exportDmabuf(base, end - base, &why);
          if (fd >= 0) {
            mr = ibv_reg_dmabuf_mr(nic->pd.get(), desc->address - base, desc->size, desc->address, fd, access);
            if (mr == nullptr) why = std::string("ibv_reg_dmabuf_mr: ") + std::strerror(errno);
            close(fd);  // the MR holds its own reference to the dma-buf
          }
          if (mr == nullptr) how = why + "; ";
        }
      }
      if (mr == nullptr) {
        mr = ibv_reg_mr(nic->pd.get(), reinterpret_cast<void*>(desc->address), desc->size, access);
        if (mr == nullptr) {
          throw IbvFailure(
              desc->kind == weftMemoryGpu ? weftNotSupported : weftSystemError,
              "registering " + std::to_string(desc->size) + " bytes of " +
                  (desc->kind == weftMemoryGpu ? "GPU" : "host") + " memory on " + nic->name + " failed: " + how +
                  "ibv_reg_mr: " + std::strerror(errno) +
                  (desc->kind == weftMemoryGpu ? " (GPU memory needs dma-buf support or nvidia-peermem)" : ""));
        }
      }
      r->mrs.emplace_back(mr);
    }
    r->key = s->nextRegionKey.fetch_add(1);
    MemoryBlob b{};
    b.magic = kMemoryMagic;
    b.version = kWireVersion;
    b.regionKey = r->key;
    b.nicCount = static_cast<uint32_t>(r->mrs.size());
    b.address = r->address;
    b.size = r->size;
    b.kind = r->kind;
    for (uint32_t i = 0; i < b.nicCount; ++i) b.rkey[i] = r->mrs[i]->rkey;
    s->targets.add(r->key, reinterpret_cast<uint8_t*>(r->address), r->size, r->kind == weftMemoryHost);
    std::memcpy(blob, &b, sizeof(b));
    *blobUsed = sizeof(b);
    *memoryOut = r.release();
  });
}

weftResult_t ibvDeregisterMemory(void* memory) {
  return guard([&] {
    auto* r = checked<IbvRegion>(memory, Tag::kRegion, "ibverbs transport registration");
    r->state->targets.remove(r->key);  // waits for a signal being applied to it
    r->tag = Tag::kDead;
    delete r;
  });
}

weftResult_t ibvImportMemory(void* state, const void* blob, uint64_t blobBytes, uint64_t /*timeoutNs*/,
                             void** remoteOut, uint64_t* mappedAddress) {
  return guard([&] {
    checked<IbvState>(state, Tag::kState, "ibverbs transport state");
    requireOut(remoteOut, "remote");
    requireOut(mappedAddress, "mappedAddress");
    if (blob == nullptr || blobBytes != sizeof(MemoryBlob)) {
      throw IbvFailure(weftInvalidArgument, "memory blob has " + std::to_string(blobBytes) +
                                                " bytes, an ibverbs memory blob has " +
                                                std::to_string(sizeof(MemoryBlob)));
    }
    MemoryBlob b;
    std::memcpy(&b, blob, sizeof(b));
    if (b.magic != kMemoryMagic || b.version != kWireVersion) {
      throw IbvFailure(weftInvalidArgument,
                       "blob is not an ibverbs memory handle of wire version " + std::to_string(kWireVersion));
    }
    if (b.size == 0 || b.size > kMaxRegionBytes || b.address > UINT64_MAX - b.size || b.nicCount == 0 ||
        b.nicCount > kMaxNics || (b.kind != weftMemoryHost && b.kind != weftMemoryGpu)) {
      throw IbvFailure(weftInvalidArgument, "ibverbs memory blob has an invalid size, address, kind or key count");
    }
    auto r = std::make_unique<IbvRemote>();
    r->address = b.address;
    r->size = b.size;
    r->regionKey = b.regionKey;
    r->nicCount = b.nicCount;
    std::memcpy(r->rkey, b.rkey, sizeof(r->rkey));
    *mappedAddress = 0;  // no load/store: the peer's memory is reached through the NIC only
    *remoteOut = r.release();
  });
}

weftResult_t ibvReleaseMemory(void* remote) {
  return guard([&] {
    auto* r = checked<IbvRemote>(remote, Tag::kRemote, "ibverbs transport imported memory");
    r->tag = Tag::kDead;
    delete r;
  });
}

void checkRange(uint64_t offset, uint64_t bytes, uint64_t size, const char* what) {
  if (offset > size || bytes > size - offset) {
    throw IbvFailure(weftInvalidArgument, std::string(what) + " range [" + std::to_string(offset) + ", +" +
                                              std::to_string(bytes) + ") exceeds its " + std::to_string(size) +
                                              " bytes");
  }
}

uint32_t peerRkey(const IbvConnection* c, const IbvRemote* dst) {
  if (c->peerNic >= dst->nicCount) {
    throw IbvFailure(weftInvalidArgument, "imported memory has no key for the peer's NIC " +
                                              std::to_string(c->peerNic) + " (was it imported from this peer?)");
  }
  return dst->rkey[c->peerNic];
}

weftResult_t ibvWrite(void* connection, void* dstRemote, uint64_t dstOffset, void* srcMemory, uint64_t srcOffset,
                      uint64_t bytes) {
  return guard([&] {
    auto* c = checked<IbvConnection>(connection, Tag::kConnection, "ibverbs transport connection");
    auto* dst = checked<IbvRemote>(dstRemote, Tag::kRemote, "ibverbs transport imported memory (destination)");
    auto* src = checked<IbvRegion>(srcMemory, Tag::kRegion, "ibverbs transport registration (source)");
    checkRange(dstOffset, bytes, dst->size, "destination");
    checkRange(srcOffset, bytes, src->size, "source");
    if (bytes == 0) return;
    const uint32_t rkey = peerRkey(c, dst);
    const uint32_t lkey = src->mrs[c->endpoint->nic]->lkey;
    const auto deadline = Clock::now() + kOperationTimeout;
    std::lock_guard<std::mutex> lock(c->mutex);
    const auto qps = static_cast<uint32_t>(c->senders.size());
    for (const WriteChunk& k : splitWrite(bytes, qps, c->nextQp, c->maxMessage)) {
      WorkRequest wr;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.localAddress = src->address + srcOffset + k.offset;
      wr.length = static_cast<uint32_t>(k.bytes);
      wr.lkey = lkey;
      wr.remoteAddress = dst->address + dstOffset + k.offset;
      wr.rkey = rkey;
      c->senders[k.qp]->enqueue(wr, deadline);
      c->dirty[k.qp] = true;
    }
    c->nextQp = (c->nextQp + 1) % qps;
  });
}

weftResult_t ibvAtomicAdd(void* connection, void* dstRemote, uint64_t dstOffset, uint64_t value) {
  return guard([&] {
    auto* c = checked<IbvConnection>(connection, Tag::kConnection, "ibverbs transport connection");
    auto* dst = checked<IbvRemote>(dstRemote, Tag::kRemote, "ibverbs transport imported memory (destination)");
    checkRange(dstOffset, sizeof(uint64_t), dst->size, "atomicAdd destination");
    if ((dst->address + dstOffset) % alignof(uint64_t) != 0) {
      throw IbvFailure(weftInvalidArgument,
                       "atomicAdd destination offset " + std::to_string(dstOffset) + " is not 8-byte aligned");
    }
    const uint32_t rkey = peerRkey(c, dst);
    IbvEndpoint* e = c->endpoint;
    const auto deadline = Clock::now() + kOperationTimeout;
    std::lock_guard<std::mutex> lock(c->mutex);
    // Ordering: an RC QP executes its requests in order, so writes on QP 0 land before a signal on QP 0. Writes on
    // the other QPs are not ordered with it: they are flushed (complete at the peer) before the signal is posted.
    for (uint32_t q = 1; q < c->senders.size(); ++q) {
      if (c->dirty[q]) {
        c->senders[q]->flush(deadline);
        c->dirty[q] = false;
      }
    }
    WorkRequest wr;
    SignalMessage message{kSignalMagic, dst->regionKey, dstOffset, value};
    if (e->state->options.signalMode == SignalMode::kAtomic) {
      wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
      wr.localAddress = reinterpret_cast<uint64_t>(&e->atomicResult);
      wr.length = sizeof(uint64_t);
      wr.lkey = e->scratchMr->lkey;
      wr.remoteAddress = dst->address + dstOffset;
      wr.rkey = rkey;
      wr.addValue = value;
      wr.fence = true;  // belt and braces: keeps the add behind earlier atomics of this QP too
    } else {
      wr.opcode = IBV_WR_SEND;  // inline (24 bytes <= maxInline, checked at createEndpoint): copied when posted
      wr.localAddress = reinterpret_cast<uint64_t>(&message);
      wr.length = sizeof(message);
    }
    c->senders[0]->enqueue(wr, deadline);
    c->senders[0]->post(deadline);  // a signal goes out now, with the writes batched before it: one doorbell
    c->dirty[0] = false;
  });
}

weftResult_t ibvFlush(void* connection, uint64_t timeoutNs) {
  return guard([&] {
    auto* c = checked<IbvConnection>(connection, Tag::kConnection, "ibverbs transport connection");
    const auto deadline = deadlineAfter(timeoutNs);
    std::lock_guard<std::mutex> lock(c->mutex);
    // Post everywhere first so the QPs drain in parallel, then wait for each.
    for (auto& sender : c->senders) sender->post(deadline);
    for (uint32_t q = 0; q < c->senders.size(); ++q) {
      c->senders[q]->flush(deadline);
      c->dirty[q] = false;
    }
  });
}

const weftTransport_v1 kIbverbsTransport = {
    .structSize = sizeof(weftTransport_v1),
    .abiVersion = weftTransportAbiVersion_v1,
    .name = "ibverbs",
    .lastError = ibvLastError,
    .init = ibvInit,
    .finalize = ibvFinalize,
    .deviceCount = ibvDeviceCount,
    .deviceInfo = ibvDeviceInfo,
    .createEndpoint = ibvCreateEndpoint,
    .destroyEndpoint = ibvDestroyEndpoint,
    .connect = ibvConnect,
    .closeConnection = ibvCloseConnection,
    .registerMemory = ibvRegisterMemory,
    .deregisterMemory = ibvDeregisterMemory,
    .importMemory = ibvImportMemory,
    .releaseMemory = ibvReleaseMemory,
    .write = ibvWrite,
    .atomicAdd = ibvAtomicAdd,
    .flush = ibvFlush,
    .progress = nullptr,  // progresses by itself
};

}  // namespace
}  // namespace weft::ibverbs

extern "C" WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) {
  return &weft::ibverbs::kIbverbsTransport;
}
