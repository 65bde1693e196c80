#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/params.hpp>

#include "connection_impl.hpp"
#include "logging.hpp"
#include "registered_memory_impl.hpp"
#include "serialization.hpp"
#include "transport_plugin.hpp"
#include "transport_selector.hpp"

namespace weft {

namespace {

constexpr uint32_t kEndpointMagic = 0x50454657;  // "WFEP"
constexpr uint32_t kMaxEndpointBlob = 64 * 1024;

uint64_t fnv1a(std::string_view text, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

uint64_t localHostHash() {
  if (auto id = paramString("WEFT_HOST_ID")) return fnv1a(*id);
  // The network namespace is part of a host's identity: namespaces on one machine act as separate hosts
  // (the multi-host tests rely on this), while processes of one namespace share memory.
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  char netns[128] = {};
  ssize_t n = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  if (n < 0) netns[0] = '\0';
  return fnv1a(netns, fnv1a(readFirstLine("/proc/sys/kernel/random/boot_id"), fnv1a(hostname)));
}

namespace detail {

struct CommunicatorImpl {
  std::shared_ptr<Bootstrap> bootstrap;
  Config config;
  std::vector<PeerInfo> peers;
  std::unique_ptr<TransportSelector> selector;

  std::shared_ptr<TransportPlugin> plugin(const std::string& name) { return selector->plugin(name); }
  const std::string& choose(PeerClass cls) { return selector->choose(cls); }
  const std::string& choose(PeerClass cls, MemoryKind kind) { return selector->choose(cls, kind); }

  /// Both sides exchange endpoints over `name` through the bootstrap and connect.
  std::shared_ptr<Connection> connectOver(int peer, int tag, const std::string& name, uint32_t device);

  PeerClass classOf(int peer) const {
    const PeerInfo& me = peers[bootstrap->rank()];
    const PeerInfo& other = peers.at(peer);
    if (me.hostHash != other.hostHash) return PeerClass::kOtherHost;
    return me.pid == other.pid ? PeerClass::kSameProcess : PeerClass::kSameHost;
  }

  void checkPeer(int peer) const {
    if (peer < 0 || peer >= bootstrap->size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "peer rank " + std::to_string(peer) + " is outside [0, " + std::to_string(bootstrap->size()) + ")");
    }
  }
};

}  // namespace detail

Communicator::Communicator(std::shared_ptr<Bootstrap> bootstrap, Config config)
    : impl_(std::make_unique<detail::CommunicatorImpl>()) {
  if (!bootstrap) throw Error(ErrorCode::kInvalidArgument, "Communicator needs a bootstrap");
  impl_->bootstrap = std::move(bootstrap);
  impl_->config = std::move(config);
  if (!impl_->config.logLevel.empty() || !impl_->config.logSubsys.empty()) {
    applyLogConfig(impl_->config.logLevel, impl_->config.logSubsys);
  }
  impl_->selector = std::make_unique<TransportSelector>(impl_->config);
  const int n = impl_->bootstrap->size();
  struct Wire {
    uint64_t hostHash;
    uint32_t pid;
    int32_t rank;
  };
  std::vector<Wire> all(n);
  all[impl_->bootstrap->rank()] = Wire{localHostHash(), static_cast<uint32_t>(getpid()), impl_->bootstrap->rank()};
  impl_->bootstrap->allGather(all.data(), sizeof(Wire));
  for (int r = 0; r < n; ++r) {
    if (all[r].rank != r)
      throw Error(ErrorCode::kProtocolError,
                  "rank " + std::to_string(r) + " reported rank " + std::to_string(all[r].rank) + " at setup");
    impl_->peers.push_back(PeerInfo{r, all[r].hostHash, all[r].pid});
  }
}

Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->bootstrap->rank(); }
int Communicator::size() const { return impl_->bootstrap->size(); }
Bootstrap& Communicator::bootstrap() const { return *impl_->bootstrap; }
const Config& Communicator::config() const { return impl_->config; }
const std::vector<PeerInfo>& Communicator::peers() const { return impl_->peers; }

uint64_t Communicator::gpuPlacementKey() const {
  uint64_t key = impl_->peers[static_cast<size_t>(rank())].hostHash;
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
  if (gpuDeviceCount() > 0) {
    int device = 0;
    char bus[64] = {};
    checkGpu(hipGetDevice(&device), "hipGetDevice");
    checkGpu(hipDeviceGetPCIBusId(bus, sizeof(bus), device), "hipDeviceGetPCIBusId");
    key ^= fnv1a(bus) * 0x9e3779b97f4a7c15ull;
  }
#endif
  return key;
}

PeerClass Communicator::peerClass(int peer) const {
  impl_->checkPeer(peer);
  return impl_->classOf(peer);
}

std::string Communicator::transportFor(int peer) const { return impl_->choose(peerClass(peer)); }

std::string Communicator::transportFor(int peer, MemoryKind kind) const { return impl_->choose(peerClass(peer), kind); }

RegisteredMemory Communicator::registerMemory(void* ptr, uint64_t bytes, MemoryKind kind) {
  if (ptr == nullptr || bytes == 0) {
    throw Error(ErrorCode::kInvalidArgument, "registerMemory needs a non-null pointer and a non-zero size");
  }
  std::set<PeerClass> classes;
  for (int r = 0; r < size(); ++r) {
    if (r != rank()) classes.insert(impl_->classOf(r));
  }
  if (size() == 1) classes.insert(PeerClass::kSameProcess);
  auto mem = std::make_shared<detail::RegisteredMemoryImpl>();
  mem->local = true;
  mem->data = ptr;
  auto& d = mem->descriptor;
  d.rank = rank();
  d.size = bytes;
  d.kind = kind;
  d.hostHash = impl_->peers[rank()].hostHash;
  d.pid = impl_->peers[rank()].pid;
  d.address = reinterpret_cast<uint64_t>(ptr);
  int gpuDevice = -1;
  if (kind == MemoryKind::kGpu) {
    checkGpu(hipGetDevice(&gpuDevice), "hipGetDevice");
  }
  for (PeerClass cls : classes) {
    const std::string& name = impl_->choose(cls, kind);
    if (mem->localRegistrations.count(name)) continue;
    try {
      TransportMemory reg = impl_->plugin(name)->registerMemory(ptr, bytes, kind, gpuDevice);
      d.entries.push_back({name, reg.blob()});
      mem->localRegistrations.emplace(name, std::move(reg));
    } catch (const Error& e) {
      throw Error(e.code(), "rank " + std::to_string(rank()) + ": registering " + std::to_string(bytes) +
                                " bytes with '" + name + "' (for " + peerClassName(cls) + " peers): " + e.message());
    }
  }
  return RegisteredMemory(std::move(mem));
}

void Communicator::sendMemory(const RegisteredMemory& memory, int peer, int tag) {
  impl_->checkPeer(peer);
  impl_->bootstrap->sendBytes(memory.serialize(), peer, tag);
}

RegisteredMemory Communicator::recvMemory(int peer, int tag) {
  impl_->checkPeer(peer);
  std::vector<uint8_t> blob = impl_->bootstrap->recvBytes(peer, tag);
  auto mem = std::make_shared<detail::RegisteredMemoryImpl>();
  mem->descriptor = RegisteredMemoryDescriptor::deserialize(blob.data(), blob.size());
  const auto& d = mem->descriptor;
  if (d.rank != peer) {
    throw Error(ErrorCode::kProtocolError, "memory received from rank " + std::to_string(peer) + " claims to be rank " +
                                               std::to_string(d.rank) + "'s");
  }
  const std::string name = transportFor(peer, d.kind);
  std::string available;
  for (const auto& e : d.entries) {
    available += (available.empty() ? "" : ", ") + e.transport;
    if (e.transport != name) continue;
    TransportRemoteMemory remote = impl_->plugin(name)->importMemory(e.handle, impl_->config.bootstrapTimeout);
    mem->data = remote.mappedAddress();
    mem->remoteRegistrations.emplace(name, std::move(remote));
    return RegisteredMemory(std::move(mem));
  }
  throw Error(ErrorCode::kInvalidUsage,
              "rank " + std::to_string(peer) + "'s memory is not registered with '" + name +
                  "', the transport this rank uses for it (it has: " + (available.empty() ? "none" : available) + ")");
}

std::shared_ptr<Connection> Communicator::connect(int peer, int tag) {
  impl_->checkPeer(peer);
  return impl_->connectOver(peer, tag, transportFor(peer), 0);
}

std::shared_ptr<Connection> Communicator::connect(int peer, int tag, MemoryKind kind) {
  impl_->checkPeer(peer);
  const std::string name = transportFor(peer, kind);
  int gpu = -1;
  if (kind == MemoryKind::kGpu) checkGpu(hipGetDevice(&gpu), "hipGetDevice");
  return impl_->connectOver(peer, tag, name, TransportSelector::deviceFor(*impl_->plugin(name), kind, gpu));
}

std::shared_ptr<Connection> detail::CommunicatorImpl::connectOver(int peer, int tag, const std::string& name,
                                                                  uint32_t device) {
  const int rank = bootstrap->rank();
  auto plugin = this->plugin(name);
  auto impl = std::make_unique<detail::ConnectionImpl>();
  impl->transport = name;
  impl->remoteRank = peer;
  impl->endpoint = plugin->createEndpoint(device);
  for (const TransportDeviceInfo& d : plugin->devices()) {
    if (d.index != device) continue;
    impl->writesGpuMemory = d.gpuMemory && !d.gpuSourceOnly;
    impl->mapsPeerMemory = d.loadStore;
  }
  detail::ByteWriter w;
  w.put<uint32_t>(kEndpointMagic);
  w.putString(name);
  w.putBlob(impl->endpoint.blob());
  bootstrap->sendBytes(w.take(), peer, tag);
  std::vector<uint8_t> reply = bootstrap->recvBytes(peer, tag);
  detail::ByteReader r(reply.data(), reply.size(), "endpoint from rank " + std::to_string(peer));
  if (r.get<uint32_t>() != kEndpointMagic) r.fail("bad magic (is the peer calling connect with the same tag?)");
  std::string peerTransport = r.getString(RegisteredMemoryDescriptor::kMaxTransportName);
  std::vector<uint8_t> peerBlob = r.getBlob(kMaxEndpointBlob);
  if (peerTransport != name) {
    throw Error(ErrorCode::kInvalidUsage, "rank " + std::to_string(rank) + " connects to rank " + std::to_string(peer) +
                                              " over '" + name + "' but rank " + std::to_string(peer) + " chose '" +
                                              peerTransport + "': give both the same [transports] config");
  }
  impl->connection = impl->endpoint.connect(peerBlob, config.bootstrapTimeout);
  // Neither side returns before both connected: a transport may open its connection from one side inside connect
  // (libfabric does, so that the two sides never open it at once), and the other must not send before that is done.
  const uint32_t connected = kEndpointMagic;
  uint32_t peerConnected = 0;
  bootstrap->send(&connected, sizeof(connected), peer, tag);
  bootstrap->recv(&peerConnected, sizeof(peerConnected), peer, tag);
  if (peerConnected != kEndpointMagic) {
    throw Error(ErrorCode::kProtocolError, "rank " + std::to_string(rank) + ": rank " + std::to_string(peer) +
                                               " sent something else than its connect confirmation (tag " +
                                               std::to_string(tag) + ")");
  }
  logDebug(LogSubsys::kP2p, "rank {} connected to rank {} over {}", rank, peer, name);
  return std::make_shared<Connection>(std::move(impl));
}

}  // namespace weft
