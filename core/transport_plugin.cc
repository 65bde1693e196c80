#include "transport_plugin.hpp"

#include <cstring>
#include <limits>
#include <weft/shared_host_memory.hpp>

#include "logging.hpp"

namespace weft {
namespace {

/// Converts a budget to the ABI's unsigned nanoseconds (negative means none left).
uint64_t toNs(std::chrono::nanoseconds t) { return t.count() < 0 ? 0 : static_cast<uint64_t>(t.count()); }

ErrorCode errorCodeFor(weftResult_t rc) {
  switch (rc) {
    case weftNotSupported: return ErrorCode::kNotSupported;
    case weftTimeout: return ErrorCode::kTimeout;
    case weftRemoteError: return ErrorCode::kRemoteError;
    case weftInvalidArgument: return ErrorCode::kInvalidArgument;
    default: return ErrorCode::kTransportError;
  }
}

/// A fixed-size name field as a string, stopping at the first NUL or the field's end.
std::string fieldString(const char* field, size_t capacity) { return std::string(field, strnlen(field, capacity)); }

}  // namespace

const char* transportResultName(weftResult_t rc) {
  switch (rc) {
    case weftSuccess: return "success";
    case weftNotSupported: return "not supported";
    case weftInvalidArgument: return "invalid argument";
    case weftSystemError: return "system error";
    case weftTimeout: return "timeout";
    case weftRemoteError: return "remote error";
    case weftInternalError: return "internal error";
    case weftOutOfMemory: return "out of memory";
    case weftInvalidUsage: return "invalid usage";
  }
  return "unknown result code";
}

std::shared_ptr<TransportPlugin> loadTransportPlugin(const std::string& name, const std::vector<std::string>& extraPath,
                                                     const std::map<std::string, std::string>& options) {
  return loadTransportPluginFile(findTransportPlugin(name, extraPath), name, options);
}

std::shared_ptr<TransportPlugin> loadTransportPluginFile(const std::string& path, const std::string& expectedName,
                                                         const std::map<std::string, std::string>& options) {
  std::shared_ptr<TransportPlugin> plugin(new TransportPlugin());
  plugin->library_ = std::make_unique<SharedLibrary>(path);
  void* sym = plugin->library_->symbol(WEFT_TRANSPORT_PLUGIN_SYMBOL);
  if (sym == nullptr) {
    throw Error(ErrorCode::kPluginError, "plugin " + path + " does not export " + WEFT_TRANSPORT_PLUGIN_SYMBOL +
                                             ": not a weft transport plugin, or one of another ABI major version");
  }
  auto getTable = reinterpret_cast<weftTransportPluginFn_v1>(sym);
  const weftTransport_v1* table = getTable();
  if (table == nullptr) throw Error(ErrorCode::kPluginError, "plugin " + path + " returned no operations table");
  if (table->abiVersion != weftTransportAbiVersion_v1) {
    throw Error(ErrorCode::kPluginError, "plugin " + path + " has transport ABI version " +
                                             std::to_string(table->abiVersion) + ", expected " +
                                             std::to_string(weftTransportAbiVersion_v1));
  }
  if (table->structSize < weftTransportMinStructSize_v1) {
    throw Error(ErrorCode::kPluginError, "plugin " + path + " has an operations table of " +
                                             std::to_string(table->structSize) + " bytes, expected at least " +
                                             std::to_string(weftTransportMinStructSize_v1));
  }
  plugin->table_ = table;
  plugin->name_ = fieldString(table->name, sizeof(table->name));
  if (!expectedName.empty() && plugin->name_ != expectedName) {
    throw Error(ErrorCode::kPluginError,
                "plugin " + path + " calls itself '" + plugin->name_ + "', expected '" + expectedName + "'");
  }
  if (table->lastError == nullptr || table->init == nullptr || table->finalize == nullptr) {
    throw Error(ErrorCode::kPluginError, "plugin " + path + " lacks lastError, init or finalize");
  }

  std::vector<const char*> keys, values;
  for (const auto& [k, v] : options) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  plugin->services_.structSize = sizeof(weftHostServices_v1);
  plugin->services_.abiVersion = weftTransportAbiVersion_v1;
  plugin->services_.context = plugin.get();
  plugin->services_.log = &TransportPlugin::logFromPlugin;
  void* state = nullptr;
  weftResult_t rc = table->init(&plugin->services_, keys.size(), keys.data(), values.data(), &state);
  if (rc != weftSuccess) {
    throw Error(ErrorCode::kPluginError, "transport '" + plugin->name_ + "' (" + path + ") failed to initialize (" +
                                             transportResultName(rc) + "): " + table->lastError());
  }
  plugin->state_ = state;  // from here on the destructor finalizes

  auto deviceCount = plugin->requireEntry(&weftTransport_v1::deviceCount, "deviceCount");
  auto deviceInfo = plugin->requireEntry(&weftTransport_v1::deviceInfo, "deviceInfo");
  uint32_t count = 0;
  if ((rc = deviceCount(state, &count)) != weftSuccess) plugin->throwFailure("deviceCount", rc);
  constexpr uint32_t kMaxDevices = 4096;  // bounds what a broken plugin can make us allocate
  if (count > kMaxDevices) {
    throw Error(ErrorCode::kPluginError, "transport '" + plugin->name_ + "' reports " + std::to_string(count) +
                                             " devices, more than " + std::to_string(kMaxDevices));
  }
  for (uint32_t i = 0; i < count; ++i) {
    weftDeviceInfo_v1 info{};
    info.structSize = sizeof(info);
    info.abiVersion = weftTransportAbiVersion_v1;
    info.numaNode = -1;
    info.gpuDevice = -1;
    if ((rc = deviceInfo(state, i, &info)) != weftSuccess) plugin->throwFailure("deviceInfo", rc);
    TransportDeviceInfo d;
    d.index = i;
    d.name = fieldString(info.name, sizeof(info.name));
    d.hostMemory = (info.flags & weftDeviceHostMemory) != 0;
    d.gpuMemory = (info.flags & weftDeviceGpuMemory) != 0;
    d.loadStore = (info.flags & weftDeviceLoadStore) != 0;
    d.gpuSourceOnly = d.gpuMemory && (info.flags & weftDeviceGpuSourceOnly) != 0;
    d.numaNode = info.numaNode;
    d.gpuDevice = info.gpuDevice;
    plugin->devices_.push_back(d);
  }
  logInfo(LogSubsys::kPlugin, "loaded transport '{}' from {} ({} devices)", plugin->name_, path, count);
  return plugin;
}

TransportPlugin::~TransportPlugin() {
  if (state_ != nullptr) {
    weftResult_t rc = table_->finalize(state_);
    if (rc != weftSuccess) {
      logWarn(LogSubsys::kPlugin, "transport '{}': finalize failed ({}): {}", name_, transportResultName(rc),
              table_->lastError());
    }
  }
}

void TransportPlugin::logFromPlugin(void* context, int32_t level, const char* message) {
  if (context == nullptr || message == nullptr) return;
  auto* self = static_cast<TransportPlugin*>(context);
  LogLevel l = level <= weftLogTrace   ? LogLevel::kTrace
               : level == weftLogDebug ? LogLevel::kDebug
               : level == weftLogInfo  ? LogLevel::kInfo
               : level == weftLogWarn  ? LogLevel::kWarn
                                       : LogLevel::kError;
  logAt(l, LogSubsys::kPlugin, "[{}] {}", self->name_, message);
}

void TransportPlugin::throwFailure(const char* op, weftResult_t rc) const {
  std::string text = table_->lastError();
  if (text.empty()) text = "(the plugin gave no message)";
  throw Error(errorCodeFor(rc),
              "transport '" + name_ + "': " + op + " failed (" + transportResultName(rc) + "): " + text);
}

void TransportPlugin::throwMissing(const char* op) const {
  throw Error(ErrorCode::kNotSupported, "transport '" + name_ + "' (" + path() + ") does not offer " + op);
}

TransportEndpoint TransportPlugin::createEndpoint(uint32_t device) {
  if (device >= devices_.size()) {
    throw Error(ErrorCode::kInvalidArgument, "transport '" + name_ + "': device " + std::to_string(device) +
                                                 " does not exist (it has " + std::to_string(devices_.size()) + ")");
  }
  auto create = requireEntry(&weftTransport_v1::createEndpoint, "createEndpoint");
  auto destroy = requireEntry(&weftTransport_v1::destroyEndpoint, "destroyEndpoint");
  std::vector<uint8_t> blob(weftBlobMaxBytes_v1);
  uint64_t used = 0;
  void* handle = nullptr;
  weftResult_t rc = create(state_, device, &handle, blob.data(), blob.size(), &used);
  if (rc != weftSuccess) throwFailure("createEndpoint", rc);
  auto object = std::make_shared<detail::TransportObject>();
  object->plugin = shared_from_this();
  object->handle = handle;
  object->destroy = destroy;
  object->destroyName = "destroyEndpoint";
  if (used > blob.size()) throw Error(ErrorCode::kPluginError, "transport '" + name_ + "': endpoint blob overflow");
  blob.resize(used);
  object->blob = std::move(blob);
  return TransportEndpoint(std::move(object));
}

TransportMemory TransportPlugin::registerMemory(void* ptr, uint64_t bytes, MemoryKind kind, int gpuDevice) {
  if (ptr == nullptr || bytes == 0) {
    throw Error(ErrorCode::kInvalidArgument, "transport '" + name_ + "': registerMemory of a null or empty buffer");
  }
  auto reg = requireEntry(&weftTransport_v1::registerMemory, "registerMemory");
  auto dereg = requireEntry(&weftTransport_v1::deregisterMemory, "deregisterMemory");
  weftMemoryDescriptor_v1 desc{};
  desc.structSize = sizeof(desc);
  desc.abiVersion = weftTransportAbiVersion_v1;
  desc.address = reinterpret_cast<uint64_t>(ptr);
  desc.size = bytes;
  desc.kind = kind == MemoryKind::kGpu ? weftMemoryGpu : weftMemoryHost;
  desc.fd = -1;
  desc.fdOffset = 0;
  desc.gpuDevice = kind == MemoryKind::kGpu ? gpuDevice : -1;
  int fd = -1;
  uint64_t offset = 0;
  if (kind == MemoryKind::kHost && findSharedHostMemory(ptr, bytes, &fd, &offset)) {
    desc.fd = fd;
    desc.fdOffset = offset;
  }
  std::vector<uint8_t> blob(weftBlobMaxBytes_v1);
  uint64_t used = 0;
  void* handle = nullptr;
  weftResult_t rc = reg(state_, &desc, &handle, blob.data(), blob.size(), &used);
  if (rc != weftSuccess) throwFailure("registerMemory", rc);
  auto object = std::make_shared<detail::TransportObject>();
  object->plugin = shared_from_this();
  object->handle = handle;
  object->destroy = dereg;
  object->destroyName = "deregisterMemory";
  if (used > blob.size()) throw Error(ErrorCode::kPluginError, "transport '" + name_ + "': memory blob overflow");
  blob.resize(used);
  object->blob = std::move(blob);
  return TransportMemory(std::move(object), ptr, bytes);
}

TransportRemoteMemory TransportPlugin::importMemory(const std::vector<uint8_t>& blob,
                                                    std::chrono::nanoseconds timeout) {
  auto import = requireEntry(&weftTransport_v1::importMemory, "importMemory");
  auto release = requireEntry(&weftTransport_v1::releaseMemory, "releaseMemory");
  void* handle = nullptr;
  uint64_t mapped = 0;
  weftResult_t rc = import(state_, blob.data(), blob.size(), toNs(timeout), &handle, &mapped);
  if (rc != weftSuccess) throwFailure("importMemory", rc);
  auto object = std::make_shared<detail::TransportObject>();
  object->plugin = shared_from_this();
  object->handle = handle;
  object->destroy = release;
  object->destroyName = "releaseMemory";
  return TransportRemoteMemory(std::move(object), reinterpret_cast<void*>(mapped));
}

detail::TransportObject::~TransportObject() {
  if (handle == nullptr || destroy == nullptr) return;
  weftResult_t rc = destroy(handle);
  if (rc != weftSuccess) {
    logWarn(LogSubsys::kPlugin, "transport '{}': {} failed ({}): {}", plugin->name(), destroyName,
            transportResultName(rc), plugin->table().lastError());
  }
}

const std::vector<uint8_t>& TransportEndpoint::blob() const {
  if (!object_) throw Error(ErrorCode::kInvalidUsage, "blob() of an empty TransportEndpoint");
  return object_->blob;
}

const std::shared_ptr<TransportPlugin>& TransportEndpoint::plugin() const {
  if (!object_) throw Error(ErrorCode::kInvalidUsage, "plugin() of an empty TransportEndpoint");
  return object_->plugin;
}

TransportConnection TransportEndpoint::connect(const std::vector<uint8_t>& peerBlob, std::chrono::nanoseconds timeout) {
  if (!object_) throw Error(ErrorCode::kInvalidUsage, "connect() on an empty TransportEndpoint");
  const auto& plugin = object_->plugin;
  auto connect = plugin->requireEntry(&weftTransport_v1::connect, "connect");
  auto close = plugin->requireEntry(&weftTransport_v1::closeConnection, "closeConnection");
  void* handle = nullptr;
  weftResult_t rc = connect(object_->handle, peerBlob.data(), peerBlob.size(), toNs(timeout), &handle);
  if (rc != weftSuccess) plugin->throwFailure("connect", rc);
  auto object = std::make_shared<detail::TransportObject>();
  object->plugin = plugin;
  object->handle = handle;
  object->destroy = close;
  object->destroyName = "closeConnection";
  object->parent = object_;
  return TransportConnection(std::move(object));
}

void TransportConnection::write(const TransportRemoteMemory& dst, uint64_t dstOffset, const TransportMemory& src,
                                uint64_t srcOffset, uint64_t bytes) {
  if (!object_ || !dst || !src) throw Error(ErrorCode::kInvalidUsage, "write() with an empty connection or memory");
  const auto& plugin = object_->plugin;
  auto write = plugin->requireEntry(&weftTransport_v1::write, "write");
  weftResult_t rc = write(object_->handle, dst.handle(), dstOffset, src.handle(), srcOffset, bytes);
  if (rc != weftSuccess) plugin->throwFailure("write", rc);
}

void TransportConnection::atomicAdd(const TransportRemoteMemory& dst, uint64_t dstOffset, uint64_t value) {
  if (!object_ || !dst) throw Error(ErrorCode::kInvalidUsage, "atomicAdd() with an empty connection or memory");
  const auto& plugin = object_->plugin;
  auto add = plugin->requireEntry(&weftTransport_v1::atomicAdd, "atomicAdd");
  weftResult_t rc = add(object_->handle, dst.handle(), dstOffset, value);
  if (rc != weftSuccess) plugin->throwFailure("atomicAdd", rc);
}

uint32_t TransportPlugin::progress() {
  auto fn = entry(&weftTransport_v1::progress);
  if (fn == nullptr) return 0;
  uint32_t handled = 0;
  weftResult_t rc = fn(state_, &handled);
  if (rc != weftSuccess) throwFailure("progress", rc);
  return handled;
}

void TransportConnection::flush(std::chrono::nanoseconds timeout) {
  if (!object_) throw Error(ErrorCode::kInvalidUsage, "flush() on an empty TransportConnection");
  const auto& plugin = object_->plugin;
  auto flush = plugin->requireEntry(&weftTransport_v1::flush, "flush");
  weftResult_t rc = flush(object_->handle, toNs(timeout));
  if (rc != weftSuccess) plugin->throwFailure("flush", rc);
}

const std::vector<uint8_t>& TransportMemory::blob() const {
  if (!object_) throw Error(ErrorCode::kInvalidUsage, "blob() of an empty TransportMemory");
  return object_->blob;
}

void* TransportMemory::handle() const { return object_ ? object_->handle : nullptr; }

void* TransportRemoteMemory::handle() const { return object_ ? object_->handle : nullptr; }

}  // namespace weft
