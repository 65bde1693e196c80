#include <hwloc.h>

#include <weft/plugin/proxy_handler.h>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <deque>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/proxy_service.hpp>

#include "logging.hpp"
#include "plugin_loader.hpp"

namespace weft {

namespace {

// What a proxy thread needs to carry out one channel's requests. Pointers refer to objects the service keeps alive.
struct ChannelInfo {
  Connection* connection = nullptr;
  const RegisteredMemory* dst = nullptr;
  const RegisteredMemory* src = nullptr;
  const RegisteredMemory* remoteInbound = nullptr;
  int peer = -1;
};

// One loaded handler plugin.
struct HandlerPlugin {
  std::unique_ptr<SharedLibrary> library;
  const weftProxyHandler_v1* table = nullptr;
  void* state = nullptr;
  std::string name;
  bool hasOnRequest = false;
  bool hasOnComplete = false;
};

void logFromPlugin(void*, int32_t level, const char* message) {
  if (message == nullptr) return;
  LogLevel l = level <= weftLogTrace   ? LogLevel::kTrace
               : level == weftLogDebug ? LogLevel::kDebug
               : level == weftLogInfo  ? LogLevel::kInfo
               : level == weftLogWarn  ? LogLevel::kWarn
                                       : LogLevel::kError;
  logAt(l, LogSubsys::kPlugin, "proxy handler: {}", message);
}

const weftHostServices_v1 kPluginHost = {sizeof(weftHostServices_v1), weftTransportAbiVersion_v1, nullptr,
                                         &logFromPlugin};

std::string resolvePluginPath(const std::string& spec, const std::vector<std::string>& extraPath) {
  if (spec.find('/') != std::string::npos) return spec;
  const bool valid = !spec.empty() && std::all_of(spec.begin(), spec.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '_' || c == '-';
  });
  if (!valid)
    throw Error(ErrorCode::kInvalidArgument, "proxy handler plugin name '" + spec + "' is not [A-Za-z0-9_-]+");
  const std::string file = "libweft-proxy-" + spec + ".so";
  std::string searched;
  for (const std::string& dir : pluginSearchPath(extraPath)) {
    const std::string path = dir + "/" + file;
    if (std::ifstream(path).good()) return path;
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  throw Error(ErrorCode::kPluginError, "proxy handler plugin " + file + " not found in: " + searched);
}

HandlerPlugin loadHandler(const std::string& spec, const std::vector<std::string>& extraPath, uint32_t threads) {
  HandlerPlugin h;
  const std::string path = resolvePluginPath(spec, extraPath);
  h.library = std::make_unique<SharedLibrary>(path);
  h.table = static_cast<const weftProxyHandler_v1*>(h.library->symbol(weftProxyHandlerSymbol_v1));
  if (h.table == nullptr) {
    throw Error(ErrorCode::kPluginError, path + " does not export " + std::string(weftProxyHandlerSymbol_v1));
  }
  const size_t minimum = offsetof(weftProxyHandler_v1, finalize) + sizeof(h.table->finalize);
  if (h.table->abiVersion != weftProxyHandlerAbiVersion_v1 || h.table->structSize < minimum) {
    throw Error(ErrorCode::kPluginError, path + ": proxy handler ABI version " + std::to_string(h.table->abiVersion) +
                                             " with a table of " + std::to_string(h.table->structSize) +
                                             " bytes; this weft needs version 1 and at least " +
                                             std::to_string(minimum) + " bytes");
  }
  if (h.table->init == nullptr || h.table->finalize == nullptr) {
    throw Error(ErrorCode::kPluginError, path + ": proxy handler table lacks init or finalize");
  }
  h.name = h.table->name != nullptr ? std::string(h.table->name) : spec;
  h.hasOnRequest = h.table->onRequest != nullptr;
  h.hasOnComplete = h.table->onComplete != nullptr;
  void* state = nullptr;
  weftResult_t rc = h.table->init(&kPluginHost, threads, &state);
  if (rc != weftSuccess) {
    throw Error(ErrorCode::kPluginError, path + ": proxy handler init failed with code " + std::to_string(rc));
  }
  h.state = state;
  logInfo(LogSubsys::kPlugin, "loaded proxy handler {} from {}", h.name, path);
  return h;
}

// The NUMA node of GPU `device` as the kernel reports it for its PCI function, -1 when unknown.
int gpuNumaNode(int device) {
#if WEFT_BUILD_GPU_NONE
  (void)device;
  return -1;
#else
  char bus[64] = {};
  if (hipDeviceGetPCIBusId(bus, sizeof(bus), device) != hipSuccess) return -1;
  std::string id(bus);
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  std::ifstream in("/sys/bus/pci/devices/" + id + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
#endif
}

}  // namespace

namespace detail {

struct ProxyServiceImpl {
  Communicator& comm;
  ProxyServiceOptions options;
  DeviceErrorBlock errors;
  std::vector<std::unique_ptr<Fifo>> fifos;
  std::vector<HandlerPlugin> plugins;

  std::mutex mutex;  // guards the tables below while proxy threads may read them
  std::deque<RegisteredMemory> memories;
  std::deque<std::unique_ptr<Host2DeviceSemaphore>> semaphores;
  std::vector<ChannelInfo> channels;
  std::map<const Connection*, int> threadOfConnection;
  std::map<const Connection*, PortOrder*> orderOfConnection;  // direct-path order state, on the handle side
  int nextThread = 0;
  std::atomic<uint64_t> channelsVersion{0};  // bumped by each portChannel, so idle threads refresh their copies

  std::vector<std::thread> threads;
  std::atomic<bool> stopping{false};
  std::atomic<bool> isRunning{false};
  std::atomic<uint64_t> finished{0};
  mutable std::mutex errorMutex;
  std::exception_ptr error;
  int numaNode = -1;
  hwloc_topology_t topology = nullptr;

  ProxyServiceImpl(Communicator& c, ProxyServiceOptions o) : comm(c), options(std::move(o)) {}

  ~ProxyServiceImpl() {
    if (topology != nullptr) hwloc_topology_destroy(topology);
    for (auto& [connection, order] : orderOfConnection) {
      if (options.side == HandleSide::kDevice) {
        (void)hipFree(order);
      } else {
        delete order;
      }
    }
  }

  // The order state of `connection`'s direct path, made at its first channel.
  PortOrder* orderFor(const Connection* connection) {
    auto it = orderOfConnection.find(connection);
    if (it != orderOfConnection.end()) return it->second;
    PortOrder* order = nullptr;
    if (options.side == HandleSide::kDevice) {
      void* p = nullptr;
      checkGpu(hipMalloc(&p, sizeof(PortOrder)), "hipMalloc of a port channel's order state");
      order = static_cast<PortOrder*>(p);
      orderOfConnection.emplace(connection, order);
      checkGpu(hipMemset(p, 0, sizeof(PortOrder)), "hipMemset of a port channel's order state");
      checkGpu(hipDeviceSynchronize(), "waiting for the order state's fill (kernels run on non-blocking streams)");
    } else {
      order = new PortOrder{};
      orderOfConnection.emplace(connection, order);
    }
    return order;
  }

  // The direct path of a channel, or a disabled one (order == nullptr) where the connection does not map the peer's
  // memory, a memory is not on the handle side, or directMaxBytes is 0.
  PortDirectPath directPath(const Connection& connection, const RegisteredMemory& dst, const RegisteredMemory& src,
                            const RegisteredMemory& remoteInbound) {
    PortDirectPath d{};
    if (options.directMaxBytes == 0 || !connection.mapsPeerMemory()) return d;
    const MemoryKind side = options.side == HandleSide::kDevice ? MemoryKind::kGpu : MemoryKind::kHost;
    if (dst.kind() != side || src.kind() != side || remoteInbound.kind() != side) return d;
    if (dst.data() == nullptr || src.data() == nullptr || remoteInbound.data() == nullptr) return d;
    d.dst = static_cast<uint8_t*>(dst.data());
    d.src = static_cast<const uint8_t*>(src.data());
    d.dstBytes = dst.size();
    d.srcBytes = src.size();
    d.peerInbound = static_cast<uint64_t*>(remoteInbound.data());
    d.maxBytes = options.directMaxBytes;
    d.order = orderFor(&connection);
    return d;
  }

  void fail(const std::string& where, std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(errorMutex);
    if (!error) {
      error = e;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        logError(LogSubsys::kProxy, "rank {}: {} stopped: {}", comm.rank(), where, ex.what());
      }
    }
  }

  void choosePinning() {
    numaNode = -1;
    if (!options.pinToGpuNumaNode) return;
    if (options.side != HandleSide::kDevice || !kHasGpuRuntime || gpuDeviceCount() == 0) {
      logInfo(LogSubsys::kProxy, "rank {}: no GPU; proxy threads run unpinned on all cores", comm.rank());
      return;
    }
    int device = 0;
    checkGpu(hipGetDevice(&device), "hipGetDevice for proxy pinning");
    const int node = gpuNumaNode(device);
    if (node < 0) {
      logInfo(LogSubsys::kProxy, "rank {}: gpu {} reports no NUMA node; proxy threads run unpinned on all cores",
              comm.rank(), device);
      return;
    }
    if (topology == nullptr) {
      if (hwloc_topology_init(&topology) != 0 || hwloc_topology_load(topology) != 0) {
        logWarn(LogSubsys::kProxy, "rank {}: hwloc could not load the topology; proxy threads run unpinned",
                comm.rank());
        if (topology != nullptr) hwloc_topology_destroy(topology);
        topology = nullptr;
        return;
      }
    }
    if (hwloc_get_numanode_obj_by_os_index(topology, static_cast<unsigned>(node)) == nullptr) {
      logWarn(LogSubsys::kProxy, "rank {}: hwloc knows no NUMA node {} (gpu {}); proxy threads run unpinned",
              comm.rank(), node, device);
      return;
    }
    numaNode = node;
    logInfo(LogSubsys::kProxy, "rank {}: proxy threads pinned to NUMA node {} of gpu {}", comm.rank(), node, device);
  }

  void pinThisThread(int index) {
    if (numaNode < 0 || topology == nullptr) return;
    hwloc_obj_t obj = hwloc_get_numanode_obj_by_os_index(topology, static_cast<unsigned>(numaNode));
    if (obj == nullptr || hwloc_set_cpubind(topology, obj->cpuset, HWLOC_CPUBIND_THREAD) != 0) {
      logWarn(LogSubsys::kProxy, "rank {}: proxy thread {} could not be pinned to NUMA node {}", comm.rank(), index,
              numaNode);
    }
  }

  // Carries out one request; throws on failure.
  void handle(const PortRequest& r, const ChannelInfo& c, uint32_t threadIndex) {
    weftProxyRequest_v1 request{r.type, r.channel, r.dstOffset, r.srcOffset, r.size, threadIndex, c.peer};
    const auto start = std::chrono::steady_clock::now();
    bool handled = false;
    for (HandlerPlugin& p : plugins) {
      if (!p.hasOnRequest) continue;
      uint32_t took = 0;
      weftResult_t rc = p.table->onRequest(p.state, &request, &took);
      if (rc != weftSuccess) {
        throw Error(ErrorCode::kPluginError,
                    "proxy handler " + p.name + " failed on a request with code " + std::to_string(rc));
      }
      if (took != 0) {
        handled = true;
        break;
      }
    }
    if (!handled) {
      if (r.type == kPortAtomicAdd) {
        c.connection->atomicAdd(*c.dst, r.dstOffset, r.size);
      } else if (r.type >= kPortAtomicAdd) {
        throw Error(ErrorCode::kInvalidUsage, "request type " + std::to_string(r.type) + " on channel " +
                                                  std::to_string(r.channel) + " was handled by no proxy plugin");
      } else {
        if (r.type & kPortPut) c.connection->write(*c.dst, r.dstOffset, *c.src, r.srcOffset, r.size);
        if (r.type & kPortSignal) c.connection->atomicAdd(*c.remoteInbound, 0, 1);
        if (r.type & kPortFlush) c.connection->flush(std::chrono::milliseconds(options.flushTimeoutMs));
      }
    }
    if (!plugins.empty()) {
      const uint64_t ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
      for (HandlerPlugin& p : plugins) {
        if (p.hasOnComplete) (void)p.table->onComplete(p.state, &request, ns);
      }
    }
  }

  void run(int index) {
    pinThisThread(index);
    Fifo& fifo = *fifos[index];
    std::vector<ChannelInfo> known;  // this thread's copy of `channels`, refreshed when an id is beyond it
    // One connection per transport among this thread's channels: while idle the thread drives those transports'
    // progress (libfabric's manual progress), so their own progress threads can rest instead of spinning beside it.
    std::vector<Connection*> progressors;
    uint64_t seenVersion = ~uint64_t{0};
    auto refresh = [&] {
      std::lock_guard<std::mutex> lock(mutex);
      known = channels;
      seenVersion = channelsVersion.load();
      progressors.clear();
      std::set<std::string> transports;
      for (const ChannelInfo& c : known) {
        auto it = threadOfConnection.find(c.connection);
        if (it != threadOfConnection.end() && it->second == index &&
            transports.insert(c.connection->transport()).second) {
          progressors.push_back(c.connection);
        }
      }
    };
    auto idleSince = std::chrono::steady_clock::now();
    uint32_t idlePolls = 0;
    const std::string where = "proxy thread " + std::to_string(index);
    try {
      while (!stopping.load(std::memory_order_relaxed)) {
        FifoTrigger head{};
        if (!fifo.poll(&head)) {
          if (seenVersion != channelsVersion.load(std::memory_order_relaxed)) refresh();
          uint32_t moved = 0;
          for (Connection* c : progressors) moved += c->progress();
          if (moved > 0) {
            idlePolls = 0;
            continue;
          }
          // Spin while requests are fresh (latency), back off when idle for a while (CPU for others).
          if (++idlePolls < 4096) continue;
          if (idlePolls == 4096) idleSince = std::chrono::steady_clock::now();
          if (std::chrono::steady_clock::now() - idleSince < std::chrono::milliseconds(2)) {
            std::this_thread::yield();
          } else {
            std::this_thread::sleep_for(std::chrono::microseconds(20));
          }
          continue;
        }
        idlePolls = 0;
        FifoTrigger extension{};
        uint32_t count = 1;
        if (portTriggerIsWide(head)) {
          // The producer publishes the extension right after the head (same fetch-add); a short wait.
          const bool ok = spinWaitUntil([&] { return fifo.poll(&extension, 1) || stopping.load(); },
                                        WaitBudget{options.budgetNs != 0 ? options.budgetNs : defaultWaitBudgetNs()});
          if (stopping.load()) break;
          if (!ok) {
            throw Error(ErrorCode::kTimeout, "rank " + std::to_string(comm.rank()) + ": " + where +
                                                 ": the second trigger of a wide request at fifo position " +
                                                 std::to_string(fifo.finished()) + " never arrived");
          }
          count = 2;
        }
        PortRequest r{};
        if (!decodePortRequest(head, extension, &r)) {
          throw Error(ErrorCode::kProtocolError, "rank " + std::to_string(comm.rank()) + ": " + where +
                                                     ": malformed trigger at fifo position " +
                                                     std::to_string(fifo.finished()));
        }
        if (r.channel >= known.size()) refresh();
        if (r.channel >= known.size()) {
          throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(comm.rank()) + ": " + where +
                                                       ": trigger names port channel " + std::to_string(r.channel) +
                                                       ", which does not exist");
        }
        handle(r, known[r.channel], static_cast<uint32_t>(index));
        fifo.pop(count);
        finished.fetch_add(1, std::memory_order_relaxed);
      }
    } catch (...) {
      fail(where, std::current_exception());
    }
  }
};

}  // namespace detail

ProxyServiceOptions ProxyServiceOptions::fromConfig(const Config& config) {
  ProxyServiceOptions o;
  o.threads = config.proxyThreads;
  o.pinToGpuNumaNode = config.proxyPinNuma;
  o.directMaxBytes = config.proxyDirectMaxBytes;
  return o;
}

ProxyService::ProxyService(Communicator& comm) : ProxyService(comm, ProxyServiceOptions::fromConfig(comm.config())) {}

ProxyService::ProxyService(Communicator& comm, ProxyServiceOptions options)
    : impl_(std::make_unique<detail::ProxyServiceImpl>(comm, std::move(options))) {
  auto& o = impl_->options;
  if (o.threads < 1 || o.threads > kMaxProxyThreads) {
    throw Error(ErrorCode::kInvalidArgument, "proxy thread count " + std::to_string(o.threads) + " is outside 1.." +
                                                 std::to_string(kMaxProxyThreads));
  }
  if (o.directMaxBytes > kMaxPortDirectBytes) {
    throw Error(ErrorCode::kInvalidArgument, "directMaxBytes " + std::to_string(o.directMaxBytes) +
                                                 " is above the most one thread should copy, " +
                                                 std::to_string(kMaxPortDirectBytes));
  }
  if (o.side == HandleSide::kDevice && (!kHasGpuRuntime || gpuDeviceCount() == 0)) o.side = HandleSide::kHost;
  for (int i = 0; i < o.threads; ++i) {
    impl_->fifos.push_back(std::make_unique<Fifo>(o.fifoSize, o.side, &impl_->errors, comm.rank()));
  }
  try {
    for (const std::string& spec : o.handlerPlugins) {
      impl_->plugins.push_back(loadHandler(spec, comm.config().pluginPath, static_cast<uint32_t>(o.threads)));
    }
  } catch (...) {
    for (HandlerPlugin& p : impl_->plugins) (void)p.table->finalize(p.state);
    throw;
  }
}

ProxyService::~ProxyService() {
  stop();
  for (HandlerPlugin& p : impl_->plugins) (void)p.table->finalize(p.state);
}

MemoryId ProxyService::addMemory(RegisteredMemory memory) {
  if (!memory) throw Error(ErrorCode::kInvalidArgument, "ProxyService::addMemory: empty RegisteredMemory");
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->memories.size() >= kMaxProxyMemories) {
    throw Error(ErrorCode::kInvalidArgument,
                "ProxyService::addMemory: already " + std::to_string(kMaxProxyMemories) + " memories (the limit)");
  }
  impl_->memories.push_back(std::move(memory));
  return static_cast<MemoryId>(impl_->memories.size() - 1);
}

SemaphoreId ProxyService::buildSemaphore(std::shared_ptr<Connection> connection, int tag) {
  if (impl_->semaphores.size() >= kMaxProxySemaphores) {
    throw Error(ErrorCode::kInvalidArgument, "ProxyService::buildSemaphore: already " +
                                                 std::to_string(kMaxProxySemaphores) + " semaphores (the limit)");
  }
  auto sem = std::make_unique<Host2DeviceSemaphore>(impl_->comm, std::move(connection), tag, impl_->options.side,
                                                    &impl_->errors);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->semaphores.push_back(std::move(sem));
  return static_cast<SemaphoreId>(impl_->semaphores.size() - 1);
}

Host2DeviceSemaphore& ProxyService::semaphore(SemaphoreId id) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (id >= impl_->semaphores.size()) {
    throw Error(ErrorCode::kInvalidArgument, "semaphore id " + std::to_string(id) + " is unknown (" +
                                                 std::to_string(impl_->semaphores.size()) + " built)");
  }
  return *impl_->semaphores[id];
}

PortChannel ProxyService::portChannel(SemaphoreId semaphore, MemoryId dst, MemoryId src) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto& m = impl_->memories;
  if (semaphore >= impl_->semaphores.size()) {
    throw Error(ErrorCode::kInvalidArgument, "portChannel: semaphore id " + std::to_string(semaphore) +
                                                 " is unknown (" + std::to_string(impl_->semaphores.size()) +
                                                 " built)");
  }
  if (dst >= m.size() || src >= m.size()) {
    throw Error(ErrorCode::kInvalidArgument, "portChannel: memory id " + std::to_string(dst >= m.size() ? dst : src) +
                                                 " is unknown (" + std::to_string(m.size()) + " added)");
  }
  if (impl_->channels.size() >= kMaxPortChannels) {
    throw Error(ErrorCode::kInvalidArgument,
                "portChannel: already " + std::to_string(kMaxPortChannels) + " channels, the most a trigger can name");
  }
  Host2DeviceSemaphore& sem = *impl_->semaphores[semaphore];
  if (m[dst].isLocal() || m[dst].rank() != sem.peer()) {
    throw Error(ErrorCode::kInvalidArgument, "portChannel: destination memory " + std::to_string(dst) +
                                                 " belongs to rank " + std::to_string(m[dst].rank()) +
                                                 ", not to the semaphore's peer " + std::to_string(sem.peer()));
  }
  if (!m[src].isLocal()) {
    throw Error(ErrorCode::kInvalidArgument, "portChannel: source memory " + std::to_string(src) + " belongs to rank " +
                                                 std::to_string(m[src].rank()) + ", not to this rank");
  }
  const Connection* conn = sem.connection().get();
  auto it = impl_->threadOfConnection.find(conn);
  if (it == impl_->threadOfConnection.end()) {
    it = impl_->threadOfConnection.emplace(conn, impl_->nextThread).first;
    impl_->nextThread = (impl_->nextThread + 1) % impl_->options.threads;
  }
  const uint32_t id = static_cast<uint32_t>(impl_->channels.size());
  impl_->channels.push_back(ChannelInfo{sem.connection().get(), &m[dst], &m[src], &sem.remoteInbound(), sem.peer()});
  impl_->channelsVersion.fetch_add(1);
  PortChannelDeviceHandle h{};
  h.fifo = impl_->fifos[it->second]->deviceHandle(impl_->options.budgetNs);
  h.fifo.site.channel = static_cast<int32_t>(id);
  h.semaphore = sem.deviceHandle(impl_->options.budgetNs);
  h.semaphore.site.channel = static_cast<int32_t>(id);
  h.channel = id;
  h.reserved = 0;
  h.direct = impl_->directPath(*conn, m[dst], m[src], sem.remoteInbound());
  return PortChannel(id, semaphore, dst, src, sem.peer(), h);
}

void ProxyService::start() {
  if (impl_->isRunning.load()) throw Error(ErrorCode::kInvalidUsage, "ProxyService::start: already running");
  impl_->choosePinning();
  impl_->stopping = false;
  for (int i = 0; i < impl_->options.threads; ++i) impl_->threads.emplace_back([this, i] { impl_->run(i); });
  impl_->isRunning = true;
}

void ProxyService::stop() {
  impl_->stopping = true;
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
  impl_->isRunning = false;
}

bool ProxyService::running() const { return impl_->isRunning.load(); }

void ProxyService::checkError() const {
  std::lock_guard<std::mutex> lock(impl_->errorMutex);
  if (impl_->error) std::rethrow_exception(impl_->error);
}

uint64_t ProxyService::finishedRequests() const { return impl_->finished.load(std::memory_order_relaxed); }

int ProxyService::numaNode() const { return impl_->numaNode; }

DeviceErrorBlock& ProxyService::errors() const { return impl_->errors; }

int ProxyService::threads() const { return impl_->options.threads; }

Fifo& ProxyService::fifo(int i) const {
  if (i < 0 || i >= impl_->options.threads) {
    throw Error(ErrorCode::kInvalidArgument, "proxy fifo " + std::to_string(i) + " does not exist");
  }
  return *impl_->fifos[i];
}

}  // namespace weft
