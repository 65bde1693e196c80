// The libfabric transport plugin: one FI_EP_RDM endpoint per instance (tcp through ofi_rxm, shm, efa, cxi, verbs...),
// fi_write for data and fi_atomic(FI_SUM, FI_UINT64) for signals. A signal is held back in software until every
// earlier write of its connection has completed with FI_DELIVERY_COMPLETE semantics, so a peer that sees the added
// value also sees the data, whatever ordering the provider promises. A progress thread drives providers with manual
// progress, so that the target side of a transfer moves even when its process never calls in.
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <weft/plugin/transport.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <weft/gpu.hpp>

#include "libfabric_wire.hpp"

namespace weft::fabric {
namespace {

using Clock = std::chrono::steady_clock;

thread_local std::string tLastError;

/// The API version asked of fi_getinfo: the headers this plugin was compiled with, so a newer library keeps the
/// structure layouts (fi_mr_attr and friends) of those headers.
constexpr uint32_t kFiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
/// Largest piece of one write posted as one fi_write.
constexpr uint64_t kMaxChunkBytes = uint64_t{4} << 20;
/// How long a post may wait for room in the transmit queue, and a staged chunk for its completion.
constexpr std::chrono::seconds kPostTimeout{10};
/// Bytes of the pinned bounce buffer that stages GPU sources when the provider has no FI_HMEM.
constexpr uint64_t kStagingBytes = uint64_t{4} << 20;
/// Largest registration accepted.
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 48;

/// A failure with the ABI result code to return for it.
class Failure : public std::runtime_error {
 public:
  Failure(weftResult_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  weftResult_t code() const noexcept { return code_; }

 private:
  weftResult_t code_;
};

/// Throws for a libfabric call that returned the negative error `rc`.
[[noreturn]] void throwFi(const std::string& what, long rc, weftResult_t code = weftSystemError) {
  throw Failure(code, "libfabric transport: " + what + " failed: " + fi_strerror(static_cast<int>(-rc)) + " (" +
                          std::to_string(rc) + ")");
}

/// Tags at the start of each object, so a handle of the wrong kind is refused instead of misused.
enum class Tag : uint32_t {
  kState = 0x53464657,
  kEndpoint = 0x45464657,
  kConnection = 0x43464657,
  kRegion = 0x52464657,
  kRemote = 0x49464657,
  kDead = 0
};

struct FabricState;
struct Tracker;

/// One posted operation; its fi_context2 is what the completion queue hands back.
struct Op {
  fi_context2 context;  // first member: the CQ entry's op_context points here
  std::shared_ptr<Tracker> tracker;
  uint64_t seq = 0;
  bool write = false;
  uint64_t operand = 0;  // an atomic's source value, alive until its completion
};

/// An operation not posted yet: a signal waiting for the writes before it, or anything behind a full queue.
struct QueuedOp {
  uint64_t seq;
  bool write;
  uint8_t* source;  // write: local bytes and their descriptor
  void* desc;
  uint64_t bytes;
  uint64_t address;  // target RMA address and key
  uint64_t key;
  uint64_t value;  // signal: the value to add
};

/// The operations of one connection: what is in flight (by sequence number), what waits to be posted (in order),
/// the first error.
struct Tracker {
  FabricState* state = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::string peerName;
  std::mutex mutex;
  uint64_t nextSeq = 1;
  std::map<uint64_t, Op*> outstanding;  // every posted, uncompleted operation
  std::set<uint64_t> writes;            // the writes among them
  std::deque<QueuedOp> queue;
  std::string error;  // first completion error ("" while none)
  bool closed = false;
  std::weak_ptr<Tracker> self;  // what each Op holds, so the tracker outlives a closed connection's operations
};

struct FabricRegion {
  Tag tag = Tag::kRegion;
  FabricState* state = nullptr;
  fid_mr* mr = nullptr;  // nullptr for a staged GPU source
  void* desc = nullptr;
  uint8_t* address = nullptr;
  uint64_t size = 0;
  uint32_t kind = weftMemoryHost;
  bool staged = false;
};

struct FabricRemote {
  Tag tag = Tag::kRemote;
  uint64_t key = 0;
  uint64_t rmaBase = 0;  // what offset 0 is at the target: its address (FI_MR_VIRT_ADDR) or 0
  uint64_t size = 0;
};

struct FabricEndpoint {
  Tag tag = Tag::kEndpoint;
  FabricState* state = nullptr;
};

struct FabricConnection {
  Tag tag = Tag::kConnection;
  FabricEndpoint* endpoint = nullptr;
  std::shared_ptr<Tracker> tracker;
};

struct FabricState {
  Tag tag = Tag::kState;
  weftHostServices_v1 services{};
  fi_info* info = nullptr;  // the chosen fi_info (a copy, ours to free)
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  std::string provider;
  std::string domainName;
  uint64_t mrMode = 0;
  uint64_t opFlags = 0;  // FI_DELIVERY_COMPLETE when the provider offers it
  bool deliveryComplete = false;
  bool hmem = false;
  bool atomics = false;
  size_t injectSize = 0;
  uint64_t chunkBytes = kMaxChunkBytes;
  uint32_t addressFormat = 0;
  std::vector<uint8_t> address;  // fi_getname of ep
  std::atomic<uint64_t> nextKey{1};

  std::mutex avMutex;
  std::map<std::vector<uint8_t>, fi_addr_t> peers;  // address bytes -> AV entry (one per peer, shared)

  std::mutex trackersMutex;
  std::vector<std::weak_ptr<Tracker>> trackers;
  std::atomic<bool> anyPending{false};
  // Operations in flight on the endpoint, kept at most half the transmit queue: the provider then never answers
  // -FI_EAGAIN (shm 1.17 applies some atomics twice when it does under load).
  std::atomic<uint64_t> inFlight{0};
  uint64_t maxInFlight = 256;

  // Serializes every data-path libfabric call (posts and CQ reads): shm 1.17 crashes reading its CQ while other
  // threads post atomics, even with FI_THREAD_SAFE. Taken after a tracker's mutex, never before.
  std::mutex fiMutex;

  bool progressThread = true;
  std::atomic<bool> stop{false};
  std::thread progress;

  // Staging of GPU sources (only with a GPU runtime and no FI_HMEM).
  std::mutex stagingMutex;
  void* staging = nullptr;
  fid_mr* stagingMr = nullptr;
};

void logf(const FabricState* s, int32_t level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void logf(const FabricState* s, int32_t level, const char* fmt, ...) {
  if (s == nullptr || s->services.log == nullptr) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  s->services.log(s->services.context, level, line);
}

template <class F>
weftResult_t guard(F&& body) noexcept {
  try {
    body();
    return weftSuccess;
  } catch (const Failure& e) {
    tLastError = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    tLastError = "libfabric transport: out of memory";
    return weftOutOfMemory;
  } catch (const std::exception& e) {
    tLastError = std::string("libfabric transport: internal error: ") + e.what();
    return weftInternalError;
  } catch (...) {
    tLastError = "libfabric transport: unknown internal error";
    return weftInternalError;
  }
}

template <class T>
T* checked(void* object, Tag tag, const char* what) {
  auto* o = static_cast<T*>(object);
  if (o == nullptr || o->tag != tag) {
    throw Failure(weftInvalidArgument, std::string("libfabric transport: not a valid ") + what);
  }
  return o;
}

void requireOut(const void* p, const char* what) {
  if (p == nullptr) {
    throw Failure(weftInvalidArgument, std::string("libfabric transport: output pointer ") + what + " is NULL");
  }
}

template <size_t N>
void setField(char (&field)[N], const std::string& value) {
  std::memset(field, 0, N);
  std::memcpy(field, value.data(), std::min(value.size(), N - 1));
}

template <size_t N>
std::string getField(const char (&field)[N], const char* what) {
  size_t len = strnlen(field, N);
  if (len == N) {
    throw Failure(weftInvalidArgument,
                  std::string("libfabric transport: malformed blob: ") + what + " is not terminated");
  }
  return std::string(field, len);
}

uint64_t clampTimeoutNs(uint64_t timeoutNs) {
  constexpr uint64_t kYear = uint64_t{365} * 24 * 3600 * 1000000000ull;  // keeps time_point arithmetic sane
  return std::min(timeoutNs, kYear);
}

bool parseBool(const std::string& v, bool* out) {
  std::string s;
  for (char c : v) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return *out = true, true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return *out = false, true;
  return false;
}

// ---- choosing a provider ----

/// Lower is better: hardware first, then tcp (reaches every peer), then shm (same host only), then the rest.
int providerRank(const std::string& prov) {
  static const char* const kOrder[] = {"efa", "cxi", "verbs", "psm3", "opx", "tcp", "shm", "net", "sockets"};
  std::string first = prov.substr(0, prov.find(';'));
  for (size_t i = 0; i < sizeof(kOrder) / sizeof(kOrder[0]); ++i) {
    if (first == kOrder[i]) return static_cast<int>(i);
  }
  return 100;
}

/// Lower is better among the domains of one provider: the interface WEFT_BOOTSTRAP_INTERFACE names, then anything
/// but loopback (a peer in another namespace or host cannot reach 127.0.0.1), IPv4 before IPv6 (link-local IPv6
/// addresses need a scope).
int domainRank(const fi_info* fi) {
  int rank = 0;
  const char* name = fi->domain_attr != nullptr ? fi->domain_attr->name : nullptr;
  const char* wanted = std::getenv("WEFT_BOOTSTRAP_INTERFACE");
  if (wanted != nullptr && *wanted != '\0' && (name == nullptr || std::strcmp(name, wanted) != 0)) rank += 4;
  if (name != nullptr && std::strcmp(name, "lo") == 0) rank += 2;
  if (fi->addr_format == FI_SOCKADDR_IN6) rank += 1;
  return rank;
}

std::string providerOf(const fi_info* fi) {
  return fi->fabric_attr != nullptr && fi->fabric_attr->prov_name != nullptr ? fi->fabric_attr->prov_name : "?";
}

/// The providers fi_getinfo offers RDM endpoints of at all, for the error that says a named one is missing.
std::string offeredProviders() {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) return "(fi_allocinfo failed)";
  hints->ep_attr->type = FI_EP_RDM;
  fi_info* list = nullptr;
  int rc = fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0) return std::string("none (fi_getinfo: ") + fi_strerror(-rc) + ")";
  std::set<std::string> names;
  for (fi_info* p = list; p != nullptr; p = p->next) {
    std::string caps = (p->caps & FI_RMA) ? "" : " (no FI_RMA)";
    names.insert(providerOf(p) + caps);
  }
  fi_freeinfo(list);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

/// fi_getinfo for RDM endpoints with RMA and atomics, as `provider`/`domain` (empty: any) ask. nullptr when none.
fi_info* query(const std::string& provider, const std::string& domain, bool hmem, bool deliveryComplete) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) throw std::bad_alloc();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | (hmem ? FI_HMEM : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | (hmem ? FI_MR_HMEM : 0);
  hints->domain_attr->threading = FI_THREAD_SAFE;
  if (deliveryComplete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  if (!provider.empty()) hints->fabric_attr->prov_name = strdup(provider.c_str());
  if (!domain.empty()) hints->domain_attr->name = strdup(domain.c_str());
  fi_info* list = nullptr;
  int rc = fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc == -FI_ENODATA) return nullptr;
  if (rc != 0) throwFi("fi_getinfo", rc);
  return list;
}

/// Picks the best entry of `list` (see providerRank/domainRank); nullptr for an empty list.
const fi_info* best(const fi_info* list) {
  const fi_info* pick = nullptr;
  std::pair<int, int> pickRank{1 << 20, 1 << 20};
  for (const fi_info* p = list; p != nullptr; p = p->next) {
    std::pair<int, int> r{providerRank(providerOf(p)), domainRank(p)};
    if (pick == nullptr || r < pickRank) pick = p, pickRank = r;
  }
  return pick;
}

// ---- progress and completions ----

void closeFid(fid_t fid) {
  if (fid != nullptr) fi_close(fid);
}

/// Finishes one operation: takes it off its tracker and frees it. Records `error` as the tracker's first error.
void complete(Op* op, const std::string* error) {
  std::shared_ptr<Tracker> t = std::move(op->tracker);
  t->state->inFlight.fetch_sub(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(t->mutex);
    t->outstanding.erase(op->seq);
    if (op->write) t->writes.erase(op->seq);
    if (error != nullptr && t->error.empty()) t->error = *error;
  }
  delete op;
}

/// Posts every held-back signal of `t` whose earlier writes have completed. Caller holds t->mutex.
void drainLocked(Tracker* t);

/// Reads what the completion queue has (driving a manual-progress provider) and posts signals that became due.
/// Returns how many completions it handled.
int progressOnce(FabricState* s) {
  int handled = 0;
  for (;;) {
    fi_cq_entry entries[32];
    Op* failed = nullptr;
    std::string message;
    ssize_t n = 0;
    {
      std::lock_guard<std::mutex> lock(s->fiMutex);
      n = fi_cq_read(s->cq, entries, 32);
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        char buf[256] = {};
        if (fi_cq_readerr(s->cq, &err, 0) == 1) {
          const char* text = fi_cq_strerror(s->cq, err.prov_errno, err.err_data, buf, sizeof(buf));
          message = "libfabric transport: operation to the peer failed: " + std::string(fi_strerror(err.err)) +
                    " (provider " + s->provider + ": " + (text != nullptr ? text : "?") + ")";
          failed = static_cast<Op*>(err.op_context);
          if (failed == nullptr) n = 0;
        } else {
          n = 0;
        }
      }
    }
    // Completions are applied outside fiMutex: complete() takes a tracker's mutex, which posters hold before fiMutex.
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) complete(static_cast<Op*>(entries[i].op_context), nullptr);
      handled += static_cast<int>(n);
      if (n == 32) continue;
      break;
    }
    if (failed != nullptr) {
      message += " [peer " + failed->tracker->peerName + "]";
      complete(failed, &message);
      ++handled;
      continue;
    }
    break;  // -FI_EAGAIN (empty) or an error of the CQ itself (seen again by the next call)
  }
  if (s->anyPending.exchange(false)) {
    std::vector<std::shared_ptr<Tracker>> live;
    {
      std::lock_guard<std::mutex> lock(s->trackersMutex);
      for (auto& w : s->trackers) {
        if (auto t = w.lock()) live.push_back(std::move(t));
      }
    }
    for (auto& t : live) {
      std::lock_guard<std::mutex> lock(t->mutex);
      drainLocked(t.get());
    }
  }
  return handled;
}

void progressLoop(FabricState* s) {
  int idle = 0;
  while (!s->stop.load(std::memory_order_relaxed)) {
    if (progressOnce(s) > 0) {
      idle = 0;
      continue;
    }
    // Spin briefly, then back off: the target side of a transfer must move while its process is idle, without
    // taking a core from the ranks.
    if (++idle < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(idle < 1024 ? 20 : 200));
    }
  }
}

/// Registers a new operation of `t` (caller holds t->mutex).
Op* newOpLocked(Tracker* t, uint64_t seq, bool write) {
  auto op = std::make_unique<Op>();
  op->tracker = t->self.lock();
  if (op->tracker == nullptr) throw Failure(weftInternalError, "libfabric transport: operation on a freed tracker");
  op->seq = seq;
  op->write = write;
  t->outstanding[seq] = op.get();
  if (write) t->writes.insert(seq);
  return op.release();
}

/// Undoes newOpLocked for an operation that was not posted.
void dropOpLocked(Tracker* t, Op* op) {
  t->outstanding.erase(op->seq);
  if (op->write) t->writes.erase(op->seq);
  delete op;
}

ssize_t postAtomic(FabricState* s, Tracker* t, Op* op, const QueuedOp& sig) {
  op->operand = sig.value;
  fi_ioc ioc{&op->operand, 1};
  fi_rma_ioc rma{sig.address, 1, sig.key};
  fi_msg_atomic msg{};
  msg.msg_iov = &ioc;
  msg.desc = nullptr;  // the operand lives in the Op until completion; no FI_MR_LOCAL provider is supported
  msg.iov_count = 1;
  msg.addr = t->peer;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.datatype = FI_UINT64;
  msg.op = FI_SUM;
  msg.context = &op->context;
  // No FI_INJECT: ofi_rxm generates no completion for injected atomics, and flush counts completions.
  std::lock_guard<std::mutex> lock(s->fiMutex);
  return fi_atomicmsg(s->ep, &msg, s->opFlags | FI_COMPLETION);
}

ssize_t postWrite(FabricState* s, Tracker* t, Op* op, const QueuedOp& q) {
  iovec iov{q.source, q.bytes};
  void* desc = q.desc;
  fi_rma_iov rma{q.address, q.bytes, q.key};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = t->peer;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = &op->context;
  std::lock_guard<std::mutex> lock(s->fiMutex);
  return fi_writemsg(s->ep, &msg, s->opFlags | FI_COMPLETION);
}

void drainLocked(Tracker* t) {
  FabricState* s = t->state;
  while (!t->queue.empty() && !t->closed && t->error.empty()) {
    const QueuedOp& q = t->queue.front();
    if (!q.write && !t->writes.empty() && *t->writes.begin() < q.seq) break;   // an earlier write is in flight
    if (s->inFlight.load(std::memory_order_relaxed) >= s->maxInFlight) break;  // progress posts it later
    Op* op = newOpLocked(t, q.seq, q.write);
    ssize_t rc = q.write ? postWrite(s, t, op, q) : postAtomic(s, t, op, q);
    if (rc == -FI_EAGAIN) {  // connection being set up, or the provider out of room: progress retries it
      dropOpLocked(t, op);
      break;
    }
    if (rc != 0) {
      dropOpLocked(t, op);
      t->error = std::string("libfabric transport: ") + (q.write ? "fi_write" : "fi_atomic (signal)") + " to peer " +
                 t->peerName + " failed: " + fi_strerror(static_cast<int>(-rc));
      break;
    }
    s->inFlight.fetch_add(1, std::memory_order_relaxed);
    t->queue.pop_front();
  }
  if (!t->error.empty()) t->queue.clear();
  if (!t->queue.empty()) s->anyPending.store(true);
}

/// Queues `q` behind what waits on `t` and posts what can go now. Caller holds t->mutex.
void enqueueLocked(Tracker* t, QueuedOp q) {
  q.seq = t->nextSeq++;
  t->queue.push_back(q);
  drainLocked(t);
}

/// Drives progress from the calling thread when there is no progress thread; otherwise lets it run.
void waitStep(FabricState* s) {
  if (!s->progressThread) {
    if (progressOnce(s) == 0) std::this_thread::yield();
  } else {
    std::this_thread::yield();
  }
}

[[noreturn]] void throwTrackerError(const Tracker* t) { throw Failure(weftRemoteError, t->error); }

/// Largest number of queued (unposted) operations per connection before write/atomicAdd wait for room.
constexpr size_t kMaxQueued = 65536;

/// Waits, with t's lock held by `lock`, until t's queue has room, at most kPostTimeout.
void waitForRoom(Tracker* t, std::unique_lock<std::mutex>& lock, const char* what) {
  const auto deadline = Clock::now() + kPostTimeout;
  while (t->queue.size() >= kMaxQueued) {
    lock.unlock();
    if (Clock::now() > deadline) {
      throw Failure(weftTimeout, std::string("libfabric transport: ") + what + " to peer " + t->peerName + ": " +
                                     std::to_string(kMaxQueued) + " operations stayed queued for " +
                                     std::to_string(kPostTimeout.count()) + " s (peer not progressing?)");
    }
    waitStep(t->state);
    lock.lock();
  }
  if (!t->error.empty()) throwTrackerError(t);
}

// ---- entry points ----

const char* fabricLastError() { return tLastError.c_str(); }

void openResources(FabricState* s, const fi_info* chosen) {
  s->info = fi_dupinfo(chosen);
  if (s->info == nullptr) throw std::bad_alloc();
  fi_info* fi = s->info;
  s->provider = providerOf(fi);
  s->domainName = fi->domain_attr->name != nullptr ? fi->domain_attr->name : "?";
  s->mrMode = static_cast<uint64_t>(fi->domain_attr->mr_mode);
  s->hmem = (fi->caps & FI_HMEM) != 0;
  s->deliveryComplete = (fi->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;
  s->opFlags = s->deliveryComplete ? FI_DELIVERY_COMPLETE : 0;
  s->injectSize = fi->tx_attr->inject_size;
  s->maxInFlight = std::max<uint64_t>(1, fi->tx_attr->size / 2);
  if (fi->ep_attr->max_msg_size > 0) s->chunkBytes = std::min<uint64_t>(kMaxChunkBytes, fi->ep_attr->max_msg_size);
  if (s->mrMode & FI_MR_RAW) {
    throw Failure(weftNotSupported, "libfabric transport: provider " + s->provider +
                                        " needs raw memory keys (FI_MR_RAW), which this transport does not carry");
  }
  int rc = fi_fabric(fi->fabric_attr, &s->fabric, nullptr);
  if (rc != 0) throwFi("fi_fabric", rc);
  rc = fi_domain(s->fabric, fi, &s->domain, nullptr);
  if (rc != 0) throwFi("fi_domain", rc);
  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_CONTEXT;
  cqAttr.wait_obj = FI_WAIT_NONE;
  cqAttr.size = fi->tx_attr->size + fi->rx_attr->size;
  rc = fi_cq_open(s->domain, &cqAttr, &s->cq, nullptr);
  if (rc != 0) throwFi("fi_cq_open", rc);
  fi_av_attr avAttr{};
  avAttr.type = fi->domain_attr->av_type != FI_AV_UNSPEC ? fi->domain_attr->av_type : FI_AV_TABLE;
  rc = fi_av_open(s->domain, &avAttr, &s->av, nullptr);
  if (rc != 0) throwFi("fi_av_open", rc);
  rc = fi_endpoint(s->domain, fi, &s->ep, nullptr);
  if (rc != 0) throwFi("fi_endpoint", rc);
  rc = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV);
  if (rc != 0) throwFi("fi_ep_bind (cq)", rc);
  rc = fi_ep_bind(s->ep, &s->av->fid, 0);
  if (rc != 0) throwFi("fi_ep_bind (av)", rc);
  rc = fi_enable(s->ep);
  if (rc != 0) throwFi("fi_enable", rc);
  std::vector<uint8_t> addr(kMaxAddressBytes);
  size_t len = addr.size();
  rc = fi_getname(&s->ep->fid, addr.data(), &len);
  if (rc != 0) throwFi("fi_getname", rc);
  addr.resize(len);
  s->address = std::move(addr);
  s->addressFormat = fi->addr_format;
  fi_atomic_attr atomicAttr{};
  s->atomics = fi_query_atomic(s->domain, FI_UINT64, FI_SUM, &atomicAttr, 0) == 0 && atomicAttr.count >= 1;
}

void closeResources(FabricState* s) {
  closeFid(s->ep != nullptr ? &s->ep->fid : nullptr);
  s->ep = nullptr;
  // Operations that never completed (a dead peer) are freed here: nothing reads the CQ any more.
  std::vector<Op*> leftover;
  {
    std::lock_guard<std::mutex> lock(s->trackersMutex);
    for (auto& w : s->trackers) {
      if (auto t = w.lock()) {
        std::lock_guard<std::mutex> tl(t->mutex);
        for (auto& [seq, op] : t->outstanding) leftover.push_back(op);
        t->outstanding.clear();
        t->writes.clear();
        t->queue.clear();
      }
    }
    s->trackers.clear();
  }
  for (Op* op : leftover) delete op;
  closeFid(s->stagingMr != nullptr ? &s->stagingMr->fid : nullptr);
  s->stagingMr = nullptr;
#if !WEFT_BUILD_GPU_NONE
  if (s->staging != nullptr) (void)hipHostFree(s->staging);
#endif
  s->staging = nullptr;
  closeFid(s->av != nullptr ? &s->av->fid : nullptr);
  closeFid(s->cq != nullptr ? &s->cq->fid : nullptr);
  closeFid(s->domain != nullptr ? &s->domain->fid : nullptr);
  closeFid(s->fabric != nullptr ? &s->fabric->fid : nullptr);
  s->av = nullptr, s->cq = nullptr, s->domain = nullptr, s->fabric = nullptr;
  if (s->info != nullptr) fi_freeinfo(s->info);
  s->info = nullptr;
}

/// Owns a state during init, so a failure half-way closes what was opened.
struct StateCloser {
  FabricState* s;
  ~StateCloser() {
    if (s == nullptr) return;
    if (s->progress.joinable()) {
      s->stop = true;
      s->progress.join();
    }
    closeResources(s);
    delete s;
  }
};

weftResult_t fabricInit(const weftHostServices_v1* host, uint64_t numOptions, const char* const* keys,
                        const char* const* values, void** stateOut) {
  return guard([&] {
    requireOut(stateOut, "state");
    if (numOptions > 0 && (keys == nullptr || values == nullptr)) {
      throw Failure(weftInvalidArgument, "libfabric transport: options given without key or value arrays");
    }
    auto* s = new FabricState();
    StateCloser closer{s};
    if (host != nullptr && host->structSize >= offsetof(weftHostServices_v1, log) + sizeof(host->log)) {
      s->services = *host;
    }
    std::string provider, domain;
    int progressOption = -1;
    for (uint64_t i = 0; i < numOptions; ++i) {
      std::string key = keys[i] != nullptr ? keys[i] : "", value = values[i] != nullptr ? values[i] : "";
      if (key == "provider") {
        provider = value;
      } else if (key == "domain") {
        domain = value;
      } else if (key == "progress_thread") {
        bool on = false;
        if (!parseBool(value, &on)) {
          throw Failure(weftInvalidArgument,
                        "libfabric transport: option progress_thread='" + value + "' is not a boolean");
        }
        progressOption = on ? 1 : 0;
      } else {
        throw Failure(weftInvalidArgument,
                      "libfabric transport: unknown option '" + key + "' (known: provider, domain, progress_thread)");
      }
    }
    // With a GPU runtime, prefer an entry that registers GPU memory itself (FI_HMEM); else stage through host memory.
    std::vector<fi_info*> lists;
    struct ListFree {
      std::vector<fi_info*>& l;
      ~ListFree() {
        for (fi_info* p : l) fi_freeinfo(p);
      }
    } listFree{lists};
    const fi_info* chosen = nullptr;
    for (int attempt = 0; attempt < 4 && chosen == nullptr; ++attempt) {
      const bool hmem = attempt < 2, delivery = attempt % 2 == 0;
      if (hmem && WEFT_BUILD_GPU_NONE) continue;
      fi_info* list = query(provider, domain, hmem, delivery);
      if (list == nullptr) continue;
      lists.push_back(list);
      chosen = best(list);
    }
    if (chosen == nullptr) {
      std::string what = provider.empty() ? "no provider" : "provider '" + provider + "'";
      if (!domain.empty()) what += " with domain '" + domain + "'";
      throw Failure(weftInvalidArgument, "libfabric transport: " + what +
                                             " offers FI_EP_RDM endpoints with FI_RMA and FI_ATOMIC; fi_getinfo "
                                             "offers RDM endpoints of: " +
                                             offeredProviders());
    }
    openResources(s, chosen);
    if (!s->atomics) {
      throw Failure(weftNotSupported, "libfabric transport: provider " + s->provider +
                                          " has no FI_SUM atomic on FI_UINT64 (fi_query_atomic), which signals need");
    }
    const bool manual = s->info->domain_attr->data_progress == FI_PROGRESS_MANUAL;
    // Default on for every provider: held-back signals are posted by whoever drives progress, and the thread makes
    // that happen without the caller. Off means callers drive progress (see docs/libfabric.md).
    s->progressThread = progressOption != 0;
#if !WEFT_BUILD_GPU_NONE
    if (!s->hmem) {
      hipError_t e = hipHostMalloc(&s->staging, kStagingBytes, hipHostMallocDefault);
      if (e != hipSuccess) {
        s->staging = nullptr;  // no GPU runtime usable here: GPU memory is refused at registration
      } else {
        int rc = fi_mr_reg(s->domain, s->staging, kStagingBytes, FI_READ | FI_WRITE, 0,
                           (s->mrMode & FI_MR_PROV_KEY) ? 0 : s->nextKey.fetch_add(1), 0, &s->stagingMr, nullptr);
        if (rc != 0) throwFi("fi_mr_reg of the staging buffer", rc);
        if (s->mrMode & FI_MR_ENDPOINT) {
          rc = fi_mr_bind(s->stagingMr, &s->ep->fid, 0);
          if (rc == 0) rc = fi_mr_enable(s->stagingMr);
          if (rc != 0) throwFi("fi_mr_bind/enable of the staging buffer", rc);
        }
      }
    }
#endif
    if (s->progressThread) s->progress = std::thread(progressLoop, s);
    logf(s, weftLogInfo,
         "libfabric transport up: provider %s domain %s, %s progress%s, delivery-complete %s, hmem %s, mr_mode "
         "0x%" PRIx64,
         s->provider.c_str(), s->domainName.c_str(), manual ? "manual" : "auto",
         s->progressThread ? " (thread)" : " (callers)", s->deliveryComplete ? "yes" : "no", s->hmem ? "yes" : "no",
         s->mrMode);
    *stateOut = s;
    closer.s = nullptr;
  });
}

weftResult_t fabricFinalize(void* state) {
  return guard([&] {
    auto* s = checked<FabricState>(state, Tag::kState, "libfabric transport state");
    StateCloser closer{s};
    s->tag = Tag::kDead;
  });
}

weftResult_t fabricDeviceCount(void* state, uint32_t* count) {
  return guard([&] {
    checked<FabricState>(state, Tag::kState, "libfabric transport state");
    requireOut(count, "count");
    *count = 1;
  });
}

weftResult_t fabricDeviceInfo(void* state, uint32_t device, weftDeviceInfo_v1* info) {
  return guard([&] {
    auto* s = checked<FabricState>(state, Tag::kState, "libfabric transport state");
    requireOut(info, "info");
    if (device != 0) {
      throw Failure(weftInvalidArgument, "libfabric transport has one device (0), not " + std::to_string(device));
    }
    auto covers = [&](size_t offset, size_t size) { return info->structSize >= offset + size; };
    if (covers(offsetof(weftDeviceInfo_v1, name), sizeof(info->name))) setField(info->name, s->domainName);
    if (covers(offsetof(weftDeviceInfo_v1, flags), sizeof(info->flags))) {
      info->flags = weftDeviceHostMemory | ((s->hmem || s->stagingMr != nullptr) ? weftDeviceGpuMemory : 0);
    }
    if (covers(offsetof(weftDeviceInfo_v1, numaNode), sizeof(info->numaNode))) info->numaNode = -1;
    if (covers(offsetof(weftDeviceInfo_v1, gpuDevice), sizeof(info->gpuDevice))) info->gpuDevice = -1;
  });
}

weftResult_t fabricCreateEndpoint(void* state, uint32_t device, void** endpointOut, void* blob, uint64_t blobCapacity,
                                  uint64_t* blobUsed) {
  return guard([&] {
    auto* s = checked<FabricState>(state, Tag::kState, "libfabric transport state");
    requireOut(endpointOut, "endpoint");
    requireOut(blob, "blob");
    requireOut(blobUsed, "blobUsed");
    if (device != 0) throw Failure(weftInvalidArgument, "libfabric transport has no device " + std::to_string(device));
    if (blobCapacity < sizeof(EndpointBlob)) {
      throw Failure(weftInvalidArgument, "libfabric transport: endpoint blob buffer is too small");
    }
    EndpointBlob b{};
    b.magic = kEndpointMagic;
    b.version = kWireVersion;
    setField(b.provider, s->provider);
    b.addressFormat = s->addressFormat;
    b.addressBytes = static_cast<uint32_t>(s->address.size());
    std::memcpy(b.address, s->address.data(), s->address.size());
    auto e = std::make_unique<FabricEndpoint>();
    e->state = s;
    std::memcpy(blob, &b, sizeof(b));
    *blobUsed = sizeof(b);
    *endpointOut = e.release();
  });
}

weftResult_t fabricDestroyEndpoint(void* endpoint) {
  return guard([&] {
    auto* e = checked<FabricEndpoint>(endpoint, Tag::kEndpoint, "libfabric transport endpoint");
    e->tag = Tag::kDead;
    delete e;
  });
}

std::string addressText(FabricState* s, const uint8_t* addr, size_t len) {
  char buf[128] = {};
  size_t n = sizeof(buf);
  fi_av_straddr(s->av, addr, buf, &n);
  (void)len;
  return buf;
}

weftResult_t fabricConnect(void* endpoint, const void* peerBlob, uint64_t peerBlobBytes, uint64_t /*timeoutNs*/,
                           void** connectionOut) {
  return guard([&] {
    auto* e = checked<FabricEndpoint>(endpoint, Tag::kEndpoint, "libfabric transport endpoint");
    FabricState* s = e->state;
    requireOut(connectionOut, "connection");
    if (peerBlob == nullptr || peerBlobBytes != sizeof(EndpointBlob)) {
      throw Failure(weftInvalidArgument, "libfabric transport: peer endpoint blob has " +
                                             std::to_string(peerBlobBytes) + " bytes, expected " +
                                             std::to_string(sizeof(EndpointBlob)));
    }
    EndpointBlob b;
    std::memcpy(&b, peerBlob, sizeof(b));
    if (b.magic != kEndpointMagic || b.version != kWireVersion) {
      throw Failure(weftInvalidArgument, "libfabric transport: peer blob is not a libfabric endpoint of wire version " +
                                             std::to_string(kWireVersion));
    }
    std::string peerProvider = getField(b.provider, "provider");
    if (peerProvider != s->provider || b.addressFormat != s->addressFormat) {
      throw Failure(weftInvalidArgument,
                    "libfabric transport: peer runs provider '" + peerProvider + "' (address format " +
                        std::to_string(b.addressFormat) + "), this process runs '" + s->provider + "' (format " +
                        std::to_string(s->addressFormat) + "): set the same [transport.libfabric] provider on both");
    }
    if (b.addressBytes == 0 || b.addressBytes > kMaxAddressBytes) {
      throw Failure(weftInvalidArgument,
                    "libfabric transport: peer address length " + std::to_string(b.addressBytes) + " is out of range");
    }
    std::vector<uint8_t> key(b.address, b.address + b.addressBytes);
    fi_addr_t peer = FI_ADDR_UNSPEC;
    {
      std::lock_guard<std::mutex> lock(s->avMutex);
      auto it = s->peers.find(key);
      if (it != s->peers.end()) {
        peer = it->second;
      } else {
        int n = fi_av_insert(s->av, key.data(), 1, &peer, 0, nullptr);
        if (n != 1) {
          throw Failure(weftInvalidArgument, "libfabric transport: fi_av_insert refused the peer address " +
                                                 addressText(s, key.data(), key.size()) + " (" +
                                                 (n < 0 ? fi_strerror(-n) : "0 inserted") + ")");
        }
        s->peers[key] = peer;
      }
    }
    auto t = std::make_shared<Tracker>();
    t->state = s;
    t->peer = peer;
    t->peerName = addressText(s, key.data(), key.size());
    t->self = t;
    {
      std::lock_guard<std::mutex> lock(s->trackersMutex);
      // Forget trackers that are gone, so connect/close cycles do not grow the list.
      s->trackers.erase(std::remove_if(s->trackers.begin(), s->trackers.end(),
                                       [](const std::weak_ptr<Tracker>& w) { return w.expired(); }),
                        s->trackers.end());
      s->trackers.push_back(t);
    }
    auto c = std::make_unique<FabricConnection>();
    c->endpoint = e;
    c->tracker = std::move(t);
    *connectionOut = c.release();
  });
}

weftResult_t fabricCloseConnection(void* connection) {
  return guard([&] {
    auto* c = checked<FabricConnection>(connection, Tag::kConnection, "libfabric transport connection");
    {
      std::lock_guard<std::mutex> lock(c->tracker->mutex);
      c->tracker->closed = true;  // queued operations are dropped (unflushed work may be lost)
      c->tracker->queue.clear();
    }
    c->tag = Tag::kDead;
    delete c;  // operations still in flight keep the tracker until they complete (or finalize frees them)
  });
}

void bindMr(FabricState* s, fid_mr* mr) {
  if (!(s->mrMode & FI_MR_ENDPOINT)) return;
  int rc = fi_mr_bind(mr, &s->ep->fid, 0);
  if (rc == 0) rc = fi_mr_enable(mr);
  if (rc != 0) {
    fi_close(&mr->fid);
    throwFi("fi_mr_bind/fi_mr_enable (FI_MR_ENDPOINT)", rc);
  }
}

weftResult_t fabricRegisterMemory(void* state, const weftMemoryDescriptor_v1* desc, void** memoryOut, void* blob,
                                  uint64_t blobCapacity, uint64_t* blobUsed) {
  return guard([&] {
    auto* s = checked<FabricState>(state, Tag::kState, "libfabric transport state");
    requireOut(memoryOut, "memory");
    requireOut(blob, "blob");
    requireOut(blobUsed, "blobUsed");
    if (desc == nullptr || desc->structSize < offsetof(weftMemoryDescriptor_v1, reserved)) {
      throw Failure(weftInvalidArgument, "libfabric transport: memory descriptor is NULL or too small");
    }
    if (blobCapacity < sizeof(MemoryBlob)) {
      throw Failure(weftInvalidArgument, "libfabric transport: memory blob buffer is too small");
    }
    if (desc->address == 0 || desc->size == 0 || desc->size > kMaxRegionBytes) {
      throw Failure(weftInvalidArgument, "libfabric transport: buffer address is 0 or its size " +
                                             std::to_string(desc->size) + " is not in [1, 2^48]");
    }
    if (desc->kind != weftMemoryHost && desc->kind != weftMemoryGpu) {
      throw Failure(weftInvalidArgument, "libfabric transport: unknown memory kind " + std::to_string(desc->kind));
    }
    auto r = std::make_unique<FabricRegion>();
    r->state = s;
    r->address = reinterpret_cast<uint8_t*>(desc->address);
    r->size = desc->size;
    r->kind = desc->kind;
    if (desc->kind == weftMemoryGpu && !s->hmem) {
      if (s->stagingMr == nullptr) {
        throw Failure(weftNotSupported,
                      "libfabric transport: provider " + s->provider +
                          " cannot register GPU memory (no FI_HMEM) and this build has no GPU runtime to stage it "
                          "through host memory" +
                          (WEFT_BUILD_GPU_NONE ? " (built with WEFT_GPU=none)" : " (pinned allocation failed)"));
      }
      r->staged = true;  // a write source copied through the bounce buffer; peers cannot write into it
    } else {
      iovec iov{r->address, r->size};
      fi_mr_attr attr{};
      attr.mr_iov = &iov;
      attr.iov_count = 1;
      attr.access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
      attr.requested_key = (s->mrMode & FI_MR_PROV_KEY) ? 0 : s->nextKey.fetch_add(1);
      attr.iface = FI_HMEM_SYSTEM;
      if (desc->kind == weftMemoryGpu) {
        attr.iface = WEFT_BUILD_GPU_HIP ? FI_HMEM_ROCR : FI_HMEM_CUDA;
        attr.device.cuda = desc->gpuDevice;
      }
      int rc = fi_mr_regattr(s->domain, &attr, 0, &r->mr);
      if (rc != 0) throwFi("fi_mr_regattr of " + std::to_string(r->size) + " bytes", rc);
      bindMr(s, r->mr);
      r->desc = fi_mr_desc(r->mr);
    }
    MemoryBlob b{};
    b.magic = kMemoryMagic;
    b.version = kWireVersion;
    setField(b.provider, s->provider);
    b.flags = (r->staged ? kMemoryStaged : 0) | ((s->mrMode & FI_MR_VIRT_ADDR) ? kMemoryVirtAddr : 0);
    b.kind = r->kind;
    b.key = r->mr != nullptr ? fi_mr_key(r->mr) : 0;
    b.base = desc->address;
    b.size = r->size;
    if (r->mr != nullptr && b.key == FI_KEY_NOTAVAIL) {
      fi_close(&r->mr->fid);
      throw Failure(weftNotSupported, "libfabric transport: provider " + s->provider + " gives no 64-bit memory key");
    }
    std::memcpy(blob, &b, sizeof(b));
    *blobUsed = sizeof(b);
    *memoryOut = r.release();
  });
}

weftResult_t fabricDeregisterMemory(void* memory) {
  return guard([&] {
    auto* r = checked<FabricRegion>(memory, Tag::kRegion, "libfabric transport registration");
    if (r->mr != nullptr) fi_close(&r->mr->fid);
    r->tag = Tag::kDead;
    delete r;
  });
}

weftResult_t fabricImportMemory(void* state, const void* blob, uint64_t blobBytes, uint64_t /*timeoutNs*/,
                                void** remoteOut, uint64_t* mappedAddress) {
  return guard([&] {
    auto* s = checked<FabricState>(state, Tag::kState, "libfabric transport state");
    requireOut(remoteOut, "remote");
    requireOut(mappedAddress, "mappedAddress");
    if (blob == nullptr || blobBytes != sizeof(MemoryBlob)) {
      throw Failure(weftInvalidArgument, "libfabric transport: memory blob has " + std::to_string(blobBytes) +
                                             " bytes, expected " + std::to_string(sizeof(MemoryBlob)));
    }
    MemoryBlob b;
    std::memcpy(&b, blob, sizeof(b));
    if (b.magic != kMemoryMagic || b.version != kWireVersion) {
      throw Failure(weftInvalidArgument, "libfabric transport: blob is not a libfabric memory handle of wire version " +
                                             std::to_string(kWireVersion));
    }
    std::string owner = getField(b.provider, "provider");
    if (owner != s->provider) {
      throw Failure(weftInvalidArgument, "libfabric transport: memory was registered with provider '" + owner +
                                             "', this process runs '" + s->provider + "'");
    }
    if (b.size == 0 || b.size > kMaxRegionBytes || (b.flags & ~(kMemoryStaged | kMemoryVirtAddr)) != 0 ||
        (b.kind != weftMemoryHost && b.kind != weftMemoryGpu)) {
      throw Failure(weftInvalidArgument, "libfabric transport: memory blob has an invalid size, kind or flags");
    }
    if (b.flags & kMemoryStaged) {
      throw Failure(weftNotSupported, "libfabric transport: the peer's GPU memory is staged (its provider " + owner +
                                          " has no FI_HMEM), so it can be a write source there but not a destination");
    }
    auto remote = std::make_unique<FabricRemote>();
    remote->key = b.key;
    remote->rmaBase = (b.flags & kMemoryVirtAddr) ? b.base : 0;
    remote->size = b.size;
    *mappedAddress = 0;
    *remoteOut = remote.release();
  });
}

weftResult_t fabricReleaseMemory(void* remoteHandle) {
  return guard([&] {
    auto* r = checked<FabricRemote>(remoteHandle, Tag::kRemote, "libfabric transport imported memory");
    r->tag = Tag::kDead;
    delete r;
  });
}

void checkRange(uint64_t offset, uint64_t bytes, uint64_t size, const char* what) {
  if (offset > size || bytes > size - offset) {
    throw Failure(weftInvalidArgument, std::string("libfabric transport: ") + what + " range [" +
                                           std::to_string(offset) + ", +" + std::to_string(bytes) + ") exceeds its " +
                                           std::to_string(size) + " bytes");
  }
}

#if !WEFT_BUILD_GPU_NONE
/// Waits until operation `seq` of `t` has completed (staged writes), at most kPostTimeout.
void waitOp(Tracker* t, uint64_t seq) {
  const auto deadline = Clock::now() + kPostTimeout;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(t->mutex);
      if (!t->error.empty()) throwTrackerError(t);
      bool queued = !t->queue.empty() && t->queue.front().seq <= seq;
      if (t->outstanding.count(seq) == 0 && !queued) return;
    }
    if (Clock::now() > deadline) {
      throw Failure(weftTimeout, "libfabric transport: staged write to peer " + t->peerName + " did not complete in " +
                                     std::to_string(kPostTimeout.count()) + " s");
    }
    waitStep(t->state);
  }
}
#endif

void stagedWrite(FabricState* s, Tracker* t, FabricRemote* dst, uint64_t dstOffset, FabricRegion* src,
                 uint64_t srcOffset, uint64_t bytes) {
#if WEFT_BUILD_GPU_NONE
  (void)s, (void)t, (void)dst, (void)dstOffset, (void)src, (void)srcOffset, (void)bytes;
  throw Failure(weftInternalError, "libfabric transport: staged registration in a build without GPU runtime");
#else
  std::lock_guard<std::mutex> staging(s->stagingMutex);
  void* desc = fi_mr_desc(s->stagingMr);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min({bytes - done, kStagingBytes, s->chunkBytes});
    hipError_t e = hipMemcpy(s->staging, src->address + srcOffset + done, n, hipMemcpyDeviceToHost);
    if (e != hipSuccess) {
      throw Failure(weftSystemError,
                    std::string("libfabric transport: staging copy from GPU memory failed: ") + hipGetErrorString(e));
    }
    uint64_t seq = 0;
    {
      std::unique_lock<std::mutex> lock(t->mutex);
      waitForRoom(t, lock, "fi_write (staged)");
      seq = t->nextSeq;
      enqueueLocked(t, QueuedOp{0, true, static_cast<uint8_t*>(s->staging), desc, n, dst->rmaBase + dstOffset + done,
                                dst->key, 0});
    }
    waitOp(t, seq);  // the bounce buffer is reused next: this chunk must have left it (and arrived)
    done += n;
  }
#endif
}

weftResult_t fabricWrite(void* connection, void* dstRemote, uint64_t dstOffset, void* srcMemory, uint64_t srcOffset,
                         uint64_t bytes) {
  return guard([&] {
    auto* c = checked<FabricConnection>(connection, Tag::kConnection, "libfabric transport connection");
    auto* dst = checked<FabricRemote>(dstRemote, Tag::kRemote, "libfabric transport imported memory (destination)");
    auto* src = checked<FabricRegion>(srcMemory, Tag::kRegion, "libfabric transport registration (source)");
    checkRange(dstOffset, bytes, dst->size, "destination");
    checkRange(srcOffset, bytes, src->size, "source");
    Tracker* t = c->tracker.get();
    FabricState* s = t->state;
    if (bytes == 0) return;
    if (src->staged) {
      stagedWrite(s, t, dst, dstOffset, src, srcOffset, bytes);
      return;
    }
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min(bytes - done, s->chunkBytes);
      {
        std::unique_lock<std::mutex> lock(t->mutex);
        waitForRoom(t, lock, "fi_write");
        enqueueLocked(t, QueuedOp{0, true, src->address + srcOffset + done, src->desc, n,
                                  dst->rmaBase + dstOffset + done, dst->key, 0});
      }
      done += n;
    }
  });
}

weftResult_t fabricAtomicAdd(void* connection, void* dstRemote, uint64_t dstOffset, uint64_t value) {
  return guard([&] {
    auto* c = checked<FabricConnection>(connection, Tag::kConnection, "libfabric transport connection");
    auto* dst = checked<FabricRemote>(dstRemote, Tag::kRemote, "libfabric transport imported memory (destination)");
    checkRange(dstOffset, sizeof(uint64_t), dst->size, "atomicAdd destination");
    if (dstOffset % sizeof(uint64_t) != 0) {
      throw Failure(weftInvalidArgument, "libfabric transport: atomicAdd destination offset " +
                                             std::to_string(dstOffset) + " is not 8-byte aligned");
    }
    Tracker* t = c->tracker.get();
    FabricState* s = t->state;
    const uint64_t address = dst->rmaBase + dstOffset;
    uint64_t seq = 0;
    {
      std::unique_lock<std::mutex> lock(t->mutex);
      waitForRoom(t, lock, "fi_atomic (signal)");
      seq = t->nextSeq;
      // Posted now when no write of this connection is in flight; else held back until they complete.
      enqueueLocked(t, QueuedOp{0, false, nullptr, nullptr, 0, address, dst->key, value});
    }
    if (s->progressThread) return;
    // No progress thread: post it from here, waiting for the earlier writes.
    const auto deadline = Clock::now() + kPostTimeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(t->mutex);
        drainLocked(t);
        if (!t->error.empty()) throwTrackerError(t);
        if (t->queue.empty() || t->queue.front().seq > seq) return;
      }
      if (Clock::now() > deadline) {
        throw Failure(weftTimeout, "libfabric transport: signal to peer " + t->peerName +
                                       " waited too long for the writes before it");
      }
      waitStep(s);
    }
  });
}

weftResult_t fabricFlush(void* connection, uint64_t timeoutNs) {
  return guard([&] {
    auto* c = checked<FabricConnection>(connection, Tag::kConnection, "libfabric transport connection");
    Tracker* t = c->tracker.get();
    FabricState* s = t->state;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::nanoseconds(clampTimeoutNs(timeoutNs));
    uint64_t last = 0;
    {
      std::lock_guard<std::mutex> lock(t->mutex);
      last = t->nextSeq - 1;  // everything that returned before this call began has a sequence number <= last
    }
    for (;;) {
      size_t left = 0;
      {
        std::lock_guard<std::mutex> lock(t->mutex);
        if (!t->error.empty()) throwTrackerError(t);
        for (auto it = t->outstanding.begin(); it != t->outstanding.end() && it->first <= last; ++it) ++left;
        for (const auto& q : t->queue) left += q.seq <= last;
      }
      if (left == 0) return;
      if (Clock::now() >= deadline) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
        throw Failure(weftTimeout, "libfabric transport: flush to peer " + t->peerName + " timed out after " +
                                       std::to_string(ms) + " ms with " + std::to_string(left) +
                                       " operations outstanding (provider " + s->provider + ")");
      }
      waitStep(s);
    }
  });
}

const weftTransport_v1 kFabricTransport = {
    .structSize = sizeof(weftTransport_v1),
    .abiVersion = weftTransportAbiVersion_v1,
    .name = "libfabric",
    .lastError = fabricLastError,
    .init = fabricInit,
    .finalize = fabricFinalize,
    .deviceCount = fabricDeviceCount,
    .deviceInfo = fabricDeviceInfo,
    .createEndpoint = fabricCreateEndpoint,
    .destroyEndpoint = fabricDestroyEndpoint,
    .connect = fabricConnect,
    .closeConnection = fabricCloseConnection,
    .registerMemory = fabricRegisterMemory,
    .deregisterMemory = fabricDeregisterMemory,
    .importMemory = fabricImportMemory,
    .releaseMemory = fabricReleaseMemory,
    .write = fabricWrite,
    .atomicAdd = fabricAtomicAdd,
    .flush = fabricFlush,
};

}  // namespace
}  // namespace weft::fabric

extern "C" WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) {
  return &weft::fabric::kFabricTransport;
}
