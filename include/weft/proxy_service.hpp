/// ProxyService: the host threads that carry out what GPU threads ask for through the FIFO. It registers memories and
/// semaphores (ids), makes port channels from them, and turns each trigger into the transport's write / atomicAdd /
/// flush on the channel's Connection; a completed flush is told to the GPU through the FIFO's host-mapped tail.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <weft/communicator.hpp>
#include <weft/device_error.hpp>
#include <weft/fifo.hpp>
#include <weft/host_device_semaphore.hpp>
#include <weft/port_channel.hpp>

namespace weft {

namespace detail {
struct ProxyServiceImpl;
}

/// Largest number of memories and of semaphores one ProxyService registers (checked when one is added).
inline constexpr uint32_t kMaxProxyMemories = uint32_t{1} << 20;
inline constexpr uint32_t kMaxProxySemaphores = uint32_t{1} << 20;
/// Largest number of proxy threads of one ProxyService.
inline constexpr int kMaxProxyThreads = 64;

/// How a ProxyService runs.
struct ProxyServiceOptions {
  /// Proxy threads, each with its own FIFO (1..kMaxProxyThreads). A connection is served by one thread (its channels
  /// are spread round-robin over threads connection by connection), so requests on one connection stay in order.
  int threads = 1;
  /// Slots of each FIFO.
  uint32_t fifoSize = kDefaultFifoSize;
  /// Where the device handles run: kDevice (GPU threads; host memory when there is no GPU) or kHost (host threads).
  HandleSide side = HandleSide::kDevice;
  /// Default budget of every device handle's waits in nanoseconds; 0 = defaultWaitBudgetNs().
  uint64_t budgetNs = 0;
  /// Budget of each Connection::flush the proxy performs.
  uint64_t flushTimeoutMs = 30000;
  /// Proxy handler plugins to load: a path (containing '/') or a name, found as libweft-proxy-<name>.so on the plugin
  /// search path (the config's [plugins] path, WEFT_PLUGIN_PATH, the build and install directories).
  std::vector<std::string> handlerPlugins;
  /// Largest put a channel's calling thread does itself, with loads and stores into the peer's memory, where the
  /// connection maps it and the memories are on the handle side (GPU memory for GPU threads, host memory for host
  /// threads): see PortDirectPath in port_channel_device.hpp. 0 sends every request through the proxy.
  uint64_t directMaxBytes = kDefaultPortDirectMaxBytes;
  /// Pin each proxy thread to the NUMA node of the current GPU (through hwloc). A GPU that reports no NUMA node
  /// (-1, as in many VMs), or no GPU at all, leaves the threads unpinned; that is logged once.
  bool pinToGpuNumaNode = true;

  /// The defaults with what the config sets: [proxy] threads, pin_numa and direct_max_bytes (and their WEFT_PROXY_*
  /// variables, once
  /// Config::load applied them).
  static ProxyServiceOptions fromConfig(const Config& config);
};

/// The proxy of one rank. Set up (addMemory, buildSemaphore, portChannel) from one thread; these may also be called
/// while the proxy runs. Destruction stops the threads and finalizes the plugins.
class ProxyService {
 public:
  /// Prepares the FIFOs and loads the handler plugins; starts no thread yet. Throws Error(kInvalidArgument) for bad
  /// options, Error(kPluginError) for a plugin that cannot be found, loaded or initialized.
  ProxyService(Communicator& comm, ProxyServiceOptions options);
  /// As above with ProxyServiceOptions::fromConfig(comm.config()).
  explicit ProxyService(Communicator& comm);
  ~ProxyService();
  ProxyService(const ProxyService&) = delete;
  ProxyService& operator=(const ProxyService&) = delete;

  /// Registers memory the proxy may read from (local source) or write to (a peer's destination, from recvMemory).
  MemoryId addMemory(RegisteredMemory memory);

  /// Builds a Host2DeviceSemaphore with the peer of `connection` (pairwise: the peer calls it with the same tag)
  /// and keeps the connection. Its waiters run on the service's side.
  SemaphoreId buildSemaphore(std::shared_ptr<Connection> connection, int tag);

  /// The semaphore `id` (Error(kInvalidArgument) when unknown).
  Host2DeviceSemaphore& semaphore(SemaphoreId id);

  /// Makes a channel that signals `semaphore`'s peer and puts from local memory `src` into the peer's memory `dst`.
  /// Throws Error(kInvalidArgument) when an id is unknown, `dst` is not the semaphore's peer's memory, `src` is not
  /// local, or kMaxPortChannels channels exist already.
  PortChannel portChannel(SemaphoreId semaphore, MemoryId dst, MemoryId src);

  /// Starts the proxy threads (once; Error(kInvalidUsage) when already running).
  void start();
  /// Stops them (waits for each to finish its current request). Idempotent.
  void stop();
  /// Whether the threads run.
  bool running() const;

  /// Throws the error that stopped a proxy thread, if one did (e.g. a failed write, a malformed trigger); a stopped
  /// thread finishes no further triggers, so the GPU's waits on it run out and name the FIFO.
  void checkError() const;

  /// Requests finished by all proxy threads so far.
  uint64_t finishedRequests() const;

  /// The NUMA node proxy threads are pinned to, -1 when unpinned (known after start()).
  int numaNode() const;

  /// The block the device handles' waits report timeouts into.
  DeviceErrorBlock& errors() const;

  /// Proxy thread count and the FIFO of thread `i`.
  int threads() const;
  Fifo& fifo(int i) const;

 private:
  std::unique_ptr<detail::ProxyServiceImpl> impl_;
};

}  // namespace weft
