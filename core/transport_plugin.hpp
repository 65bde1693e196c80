// C++ face of a transport plugin (core-internal): the loaded, initialized plugin and RAII handles for its objects.
// Every method calls the C ABI (include/weft/plugin/transport.h) and turns a failure into a weft::Error carrying the
// plugin's own error text.
#pragma once

#include <weft/plugin/transport.h>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <weft/error.hpp>
#include <weft/registered_memory.hpp>

#include "plugin_loader.hpp"

namespace weft {

class TransportPlugin;
class TransportEndpoint;
class TransportConnection;
class TransportMemory;
class TransportRemoteMemory;

/// Budget for plugin calls that talk to a peer (connect, importMemory, flush) when the caller gives none.
inline constexpr std::chrono::milliseconds kDefaultTransportTimeout{30000};

/// What one device of a plugin offers.
struct TransportDeviceInfo {
  uint32_t index = 0;          ///< the device number to pass to createEndpoint
  std::string name;            ///< e.g. "host", "mlx5_0"
  bool hostMemory = false;     ///< can register host memory
  bool gpuMemory = false;      ///< can register GPU memory
  bool loadStore = false;      ///< importMemory maps peer memory for load/store
  bool gpuSourceOnly = false;  ///< GPU memory is a write source only (staged): no writes or adds into it
  int numaNode = -1;           ///< -1 when unknown
  int gpuDevice = -1;          ///< GPU ordinal, -1 for none
};

/// Loads transport `name`: finds libweft-transport-<name>.so on the search path (see pluginSearchPath), opens it,
/// checks its ABI version and table size, and initializes it with `options`. Throws Error(kPluginError) saying which
/// of those steps failed (with the directories searched, dlerror's text, found vs expected version, or the plugin's
/// init error). Each call makes a separate instance (its own init state).
std::shared_ptr<TransportPlugin> loadTransportPlugin(const std::string& name, const std::vector<std::string>& extraPath,
                                                     const std::map<std::string, std::string>& options = {});

/// As loadTransportPlugin, from an explicit file; `expectedName` ("" for any) must match the table's name.
std::shared_ptr<TransportPlugin> loadTransportPluginFile(const std::string& path, const std::string& expectedName,
                                                         const std::map<std::string, std::string>& options = {});

/// A loaded and initialized transport plugin. Finalized and unloaded when the last shared_ptr goes; every handle it
/// made holds one, so the plugin outlives its objects. Thread-safe as the ABI is (see transport_v1.h).
class TransportPlugin : public std::enable_shared_from_this<TransportPlugin> {
 public:
  ~TransportPlugin();
  TransportPlugin(const TransportPlugin&) = delete;
  TransportPlugin& operator=(const TransportPlugin&) = delete;

  /// The transport's name (the table's name, equal to <name> of its file).
  const std::string& name() const { return name_; }
  /// The file it was loaded from.
  const std::string& path() const { return library_->path(); }
  /// Its devices, read once at load.
  const std::vector<TransportDeviceInfo>& devices() const { return devices_; }
  /// The table's structSize (how many ABI entries this plugin has).
  uint32_t tableSize() const { return table_->structSize; }

  /// Creates an endpoint on `device` (an index into devices()). Throws Error(kInvalidArgument) for a bad index, and
  /// the plugin's error (see below) when it fails.
  TransportEndpoint createEndpoint(uint32_t device);

  /// Registers [ptr, ptr + bytes) of `kind`. For host memory the backing file is looked up among
  /// allocSharedHostMemory allocations (fd -1 when it is not one); `gpuDevice` is the GPU ordinal for GPU memory.
  TransportMemory registerMemory(void* ptr, uint64_t bytes, MemoryKind kind, int gpuDevice = -1);

  /// Imports a peer's registration from the blob its TransportMemory::blob() gave, waiting at most `timeout` for the
  /// owner.
  TransportRemoteMemory importMemory(const std::vector<uint8_t>& blob,
                                     std::chrono::nanoseconds timeout = kDefaultTransportTimeout);

  /// Whether the plugin has a progress entry (ABI 1.1): its target side moves only while someone reads its
  /// completions, and progress() is how a caller's thread does that.
  bool drivesProgress() const { return entry(&weftTransport_v1::progress) != nullptr; }
  /// Drives the plugin's progress once from this thread; returns how many events it handled (0 without the entry).
  /// Throws the plugin's error when it fails.
  uint32_t progress();

  /// The raw table and state, for code that must call the ABI itself.
  const weftTransport_v1& table() const { return *table_; }
  void* state() const { return state_; }

  /// Internal: throws the Error for a failed entry `op` that returned `rc` (code from rc, text from lastError).
  [[noreturn]] void throwFailure(const char* op, weftResult_t rc) const;

  /// Internal: entry `member` of the table when structSize covers it and it is set, else nullptr.
  template <class Fn>
  Fn entry(Fn weftTransport_v1::*member) const {
    const auto offset =
        static_cast<size_t>(reinterpret_cast<const char*>(&(table_->*member)) - reinterpret_cast<const char*>(table_));
    if (offset + sizeof(Fn) > table_->structSize) return nullptr;
    return table_->*member;
  }

  /// Internal: entry `member`, or throws Error(kNotSupported) naming `op` when the plugin lacks it.
  template <class Fn>
  Fn requireEntry(Fn weftTransport_v1::*member, const char* op) const {
    Fn fn = entry(member);
    if (fn == nullptr) throwMissing(op);
    return fn;
  }

 private:
  friend std::shared_ptr<TransportPlugin> loadTransportPluginFile(const std::string&, const std::string&,
                                                                  const std::map<std::string, std::string>&);
  TransportPlugin() = default;
  [[noreturn]] void throwMissing(const char* op) const;
  static void logFromPlugin(void* context, int32_t level, const char* message);

  std::unique_ptr<SharedLibrary> library_;
  const weftTransport_v1* table_ = nullptr;
  weftHostServices_v1 services_{};
  void* state_ = nullptr;
  std::string name_;
  std::vector<TransportDeviceInfo> devices_;
};

namespace detail {
/// A plugin object and the plugin that owns it; the destroy entry runs when the last reference goes.
struct TransportObject {
  std::shared_ptr<TransportPlugin> plugin;
  void* handle = nullptr;
  weftResult_t (*destroy)(void*) = nullptr;
  const char* destroyName = "";
  std::shared_ptr<TransportObject> parent;  ///< an object that must outlive this one (a connection's endpoint)
  std::vector<uint8_t> blob;
  ~TransportObject();
};
}  // namespace detail

/// An endpoint: one side of future connections. Copies share it; destroyed with destroyEndpoint when the last copy
/// goes (after its connections, which keep it alive).
class TransportEndpoint {
 public:
  TransportEndpoint() = default;
  /// What a peer passes to its connect(): opaque bytes.
  const std::vector<uint8_t>& blob() const;
  /// Connects to the peer endpoint described by `peerBlob`; the peer calls connect with this endpoint's blob.
  /// Waits at most `timeout` for the peer.
  TransportConnection connect(const std::vector<uint8_t>& peerBlob,
                              std::chrono::nanoseconds timeout = kDefaultTransportTimeout);
  /// The plugin that made it.
  const std::shared_ptr<TransportPlugin>& plugin() const;
  /// True when it holds an endpoint.
  explicit operator bool() const { return object_ != nullptr; }

 private:
  friend class TransportPlugin;
  explicit TransportEndpoint(std::shared_ptr<detail::TransportObject> o) : object_(std::move(o)) {}
  std::shared_ptr<detail::TransportObject> object_;
};

/// A connection between a local and a peer endpoint: write, atomicAdd (signal) and flush. Closed when the
/// last copy goes (copies share it). Thread-safe: several threads may use one connection at once.
class TransportConnection {
 public:
  TransportConnection() = default;
  /// Copies `bytes` from `src` at `srcOffset` to `dst` at `dstOffset`; complete after a later flush() returns.
  void write(const TransportRemoteMemory& dst, uint64_t dstOffset, const TransportMemory& src, uint64_t srcOffset,
             uint64_t bytes);
  /// Atomically adds `value` to the 8-byte aligned 64-bit word at `dstOffset` of `dst`, ordered after this
  /// connection's earlier writes (a peer that sees the new value sees them); complete after a later flush().
  void atomicAdd(const TransportRemoteMemory& dst, uint64_t dstOffset, uint64_t value);
  /// Waits until every earlier write and atomicAdd is complete, at most `timeout` (then Error(kTimeout)).
  void flush(std::chrono::nanoseconds timeout = kDefaultTransportTimeout);
  /// True when it holds a connection.
  explicit operator bool() const { return object_ != nullptr; }

 private:
  friend class TransportEndpoint;
  explicit TransportConnection(std::shared_ptr<detail::TransportObject> o) : object_(std::move(o)) {}
  std::shared_ptr<detail::TransportObject> object_;
};

/// A local registration. Copies share it; deregistered when the last copy goes.
class TransportMemory {
 public:
  TransportMemory() = default;
  /// What a peer passes to its importMemory(): opaque bytes.
  const std::vector<uint8_t>& blob() const;
  /// The registered buffer and its length.
  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  /// The plugin's object, for ABI calls.
  void* handle() const;
  /// True when it holds a registration.
  explicit operator bool() const { return object_ != nullptr; }

 private:
  friend class TransportPlugin;
  TransportMemory(std::shared_ptr<detail::TransportObject> o, void* data, uint64_t size)
      : object_(std::move(o)), data_(data), size_(size) {}
  std::shared_ptr<detail::TransportObject> object_;
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

/// A peer's registration imported here. Copies share it; released (unmapped) when the last copy goes.
class TransportRemoteMemory {
 public:
  TransportRemoteMemory() = default;
  /// The peer buffer mapped into this process when the transport can load/store, else nullptr.
  void* mappedAddress() const { return mapped_; }
  /// The plugin's object, for ABI calls.
  void* handle() const;
  /// True when it holds an imported registration.
  explicit operator bool() const { return object_ != nullptr; }

 private:
  friend class TransportPlugin;
  TransportRemoteMemory(std::shared_ptr<detail::TransportObject> o, void* mapped)
      : object_(std::move(o)), mapped_(mapped) {}
  std::shared_ptr<detail::TransportObject> object_;
  void* mapped_ = nullptr;
};

/// Short lowercase name of an ABI result code, e.g. "timeout".
const char* transportResultName(weftResult_t rc);

}  // namespace weft
