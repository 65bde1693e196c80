// The libfabric transport plugin: one FI_EP_RDM endpoint per instance (tcp through ofi_rxm, shm, efa, cxi, verbs...),
// fi_write for data. A signal goes one of three ways (SignalPath, docs/libfabric.md "Signals"):
//  - as remote CQ data on a zero-length fi_writedata posted right behind the writes, where the provider delivers a
//    connection's RMA writes in order (kDataOrdered): the target's progress thread reads the completion, finds the
//    semaphore word from the 64 bits and adds to it with a release atomic, so one one-way trip carries put and signal;
//  - the same writedata, held back until every earlier write has completed (kDataAfterCompletion), where the order
//    is not promised;
//  - fi_atomic(FI_SUM, FI_UINT64), held back the same way (kAtomic): values or destinations the 64 bits cannot name,
//    providers without remote CQ data.
// A progress thread drives providers with manual progress, so that the target side of a transfer (and the adds it
// carries) moves even when its process never calls in.
#include <dlfcn.h>
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

#include <netinet/in.h>
#include <poll.h>
#include <vector>
#include <weft/gpu.hpp>

#include "../common/usable_cpus.hpp"
#include "libfabric_wire.hpp"
#include "staging_ring.hpp"

namespace weft::fabric {
namespace {

using Clock = std::chrono::steady_clock;

thread_local std::string tLastError;

/// The API version asked of fi_getinfo: the headers this plugin was compiled with, so a newer library keeps the
/// structure layouts (fi_mr_attr and friends) of those headers.
constexpr uint32_t kFiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
/// Largest piece of one write posted as one fi_write.
constexpr uint64_t kMaxChunkBytes = uint64_t{4} << 20;
/// How long a post may wait for room in the transmit queue, and a staged piece for room in the staging ring.
constexpr std::chrono::seconds kPostTimeout{10};
/// Bytes of the pinned ring that stages GPU sources when the provider has no FI_HMEM, and the largest piece of a
/// staged write: several pieces are on the wire while the next is copied, and a write returns once its bytes are
/// copied out (the source may change then), not once they arrived.
constexpr uint64_t kStagingBytes = uint64_t{8} << 20;
constexpr uint64_t kStagedChunkBytes = uint64_t{1} << 20;
/// How long a write may wait for the signal that follows it, to carry it as CQ data. A proxy or host thread issues
/// put and signal microseconds apart; a lone write pays this once (a flush posts it at once).
constexpr std::chrono::microseconds kCombineWindow{20};
/// Bytes of the landing line CQ data signals write into (a cache line, so it shares one with nothing).
constexpr uint64_t kLandingBytes = 64;
/// How long finalize waits for each peer to answer its teardown probe (see everyPeerAnswers).
constexpr std::chrono::milliseconds kTeardownProbe{1000};
/// How long after a peer's last signal finalize keeps this endpoint answering (see lingerForPeersFlushes).
constexpr std::chrono::milliseconds kTeardownLinger{100};
/// Largest registration accepted.
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 48;

/// A signal carried as remote CQ data is 64 bits: the target registration's signal id (1..65535, from its memory
/// blob), the 8-byte word index within it, the value to add. Anything else goes as fi_atomic.
constexpr int kSignalIdBits = 16, kSignalWordBits = 32, kSignalValueBits = 16;
constexpr uint64_t kMaxSignalId = (uint64_t{1} << kSignalIdBits) - 1;
constexpr uint64_t kMaxSignalWord = (uint64_t{1} << kSignalWordBits) - 1;
constexpr uint64_t kMaxSignalValue = (uint64_t{1} << kSignalValueBits) - 1;
static_assert(kSignalIdBits + kSignalWordBits + kSignalValueBits == 64);

constexpr uint64_t encodeSignal(uint64_t id, uint64_t word, uint64_t value) {
  return id << (kSignalWordBits + kSignalValueBits) | word << kSignalValueBits | value;
}

/// How atomicAdd reaches the peer (see the file comment). Chosen once per instance at init.
enum class SignalPath { kAtomic, kDataAfterCompletion, kDataOrdered };

const char* signalPathName(SignalPath p) {
  switch (p) {
    case SignalPath::kDataOrdered: return "cq data behind the writes";
    case SignalPath::kDataAfterCompletion: return "cq data after the writes complete";
    case SignalPath::kAtomic: break;
  }
  return "fi_atomic after the writes complete";
}

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

/// What a queued or posted operation is.
enum class OpKind : uint8_t {
  kWrite,       // fi_write of data
  kWriteData,   // fi_writedata: a write that carries the signal after it as remote CQ data (put and signal fused)
  kAtomic,      // a signal as fi_atomic FI_SUM
  kSignalData,  // a signal as a zero-length fi_writedata whose CQ data the target applies
};

constexpr const char* kLandingReadName = "fi_read (landing line)";

/// One posted operation; its fi_context2 is what the completion queue hands back.
struct Op {
  fi_context2 context;  // first member: the CQ entry's op_context points here
  std::shared_ptr<Tracker> tracker;
  uint64_t seq = 0;
  bool write = false;
  uint64_t operand = 0;  // an atomic's source value, alive until its completion
  // What it is and when it was posted, for a flush's timeout message.
  const char* what = "";  // kLandingReadName for the read that confirms a flush
  uint64_t bytes = 0;
  Clock::time_point postedAt{};
};

/// An operation not posted yet: a signal waiting for the writes before it, or anything behind a full queue.
struct QueuedOp {
  uint64_t seq;
  OpKind kind;
  uint8_t* source;  // write: local bytes and their descriptor
  void* desc;
  uint64_t bytes;
  uint64_t address;  // target RMA address and key
  uint64_t key;
  uint64_t value;    // kAtomic: the value to add; kSignalData: the encoded CQ data
  int64_t queuedNs;  // isolated states: when the caller queued it (steadyNs), for the statistics
};

/// The operations of one connection: what is in flight (by sequence number), what waits to be posted (in order),
/// the signals held back for the writes before them, the first error.
struct Tracker {
  FabricState* state = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t peerLandingKey = 0;  // the peer's landing line (EndpointBlob), target of CQ data signals
  uint64_t peerLandingAddress = 0;
  bool peerLanding = false;
  std::string peerName;
  std::mutex mutex;
  uint64_t nextSeq = 1;
  std::map<uint64_t, Op*> outstanding;  // every posted, uncompleted operation
  std::set<uint64_t> writes;            // the writes among them
  std::deque<QueuedOp> queue;
  // Signals taken off the queue's front while a write before them was in flight, oldest first. Writes behind them
  // are posted meanwhile: a signal orders the writes before it (release), not those after it, and waiting for the
  // completion round trip before posting the next write cost streams of put+signal most of their bandwidth.
  std::deque<QueuedOp> held;
  // The queue's only entry is a write held back for a moment (kCombineWindow) so that a signal right behind it can
  // ride on it as its CQ data: one message instead of two (see enqueueLocked).
  bool tailDeferred = false;
  Clock::time_point tailSince{};
  std::string error;       // first completion error ("" while none)
  uint64_t delivered = 0;  // flushByRead: operations up to this sequence number are known to be at the peer
  // Landing-line reads asked for by callers of an isolated state (sequence numbers, oldest first): the progress
  // thread posts each once everything queued before it is posted.
  std::deque<uint64_t> readRequests;
  // An isolated state's progress thread is in the provider posting for this tracker, without its mutex (see
  // OutsideTrackerLock); other threads leave the queues' fronts alone meanwhile.
  bool posting = false;
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
  int gpuDevice = -1;     // a staged source's GPU
  uint32_t signalId = 0;  // index into FabricState::signalTargets, 0 when signals to it go as fi_atomic
};

struct FabricRemote {
  Tag tag = Tag::kRemote;
  uint64_t key = 0;
  uint64_t rmaBase = 0;  // what offset 0 is at the target: its address (FI_MR_VIRT_ADDR) or 0
  uint64_t size = 0;
  uint32_t signalId = 0;  // the owner's signal id of it (0: none)
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
  uint64_t opFlags = 0;  // FI_DELIVERY_COMPLETE when the provider offers it and flush does not read (below)
  bool deliveryComplete = false;
  // flush posts an 8-byte read of the peer's landing line behind everything before it and waits for that: the
  // provider delivers one peer's RMA in order, read after write (FI_ORDER_RMA_RAW), so the read comes back only
  // after the earlier writes are at the target. Writes then go without FI_DELIVERY_COMPLETE, whose acknowledgement
  // of every write cost the put+signal ping-pong over tcp a few us. Only with in-order signals (kDataOrdered): the
  // other paths wait for the writes' completions before a signal and need those to mean "delivered".
  bool flushByRead = false;
  bool hmem = false;
  bool atomics = false;
  SignalPath signalPath = SignalPath::kAtomic;
  size_t injectSize = 0;
  uint64_t chunkBytes = kMaxChunkBytes;
  uint32_t addressFormat = 0;
  std::vector<uint8_t> address;  // fi_getname of ep
  std::atomic<uint64_t> nextKey{1};

  // One per peer address, shared by its connections: its AV entry and its landing line (the teardown probe reads it).
  struct Peer {
    fi_addr_t address = FI_ADDR_UNSPEC;
    std::string name;
    bool landing = false;
    uint64_t landingKey = 0;
    uint64_t landingBase = 0;
  };
  std::mutex avMutex;
  std::map<std::vector<uint8_t>, Peer> peers;  // keyed by address bytes

  // Where peers' CQ data signals write their 8 bytes (its content is never read; peers' teardown probes read it),
  // and what ours write from (and probes read into).
  uint64_t* landing = nullptr;  // kLandingBytes, registered for remote writes and reads
  fid_mr* landingMr = nullptr;
  uint64_t* operand = nullptr;  // 8 bytes, registered as a write source
  fid_mr* operandMr = nullptr;
  void* operandDesc = nullptr;

  // Registrations that peers may signal through remote CQ data, by signal id (slot 0 unused; a freed id is reused).
  // The progress thread looks them up for every signal it applies.
  std::mutex signalMutex;
  std::vector<FabricRegion*> signalTargets{nullptr};
  std::vector<uint32_t> freeSignalIds;
  std::atomic<uint64_t> strayData{0};        // CQ data naming no live registration (logged once)
  std::atomic<int64_t> lastPeerSignalNs{0};  // when a peer's signal was last applied (steady clock ns, 0: never)

  std::mutex trackersMutex;
  std::vector<std::weak_ptr<Tracker>> trackers;
  std::atomic<bool> anyPending{false};
  std::atomic<bool> progressSleeping{false};  // the progress thread is (about to be) blocked on waitFd
  // When a caller last drove progress through the progress entry (steady clock ns, 0: never): a proxy thread that
  // polls for triggers does so while idle, and the progress thread then blocks instead of spinning beside it.
  std::atomic<int64_t> externalProgressNs{0};
  int waitFd = -1;  // the CQ's FI_WAIT_FD object, -1 when it has none
  // Operations in flight on the endpoint, kept at most half the transmit queue: the provider then never answers
  // -FI_EAGAIN (shm 1.17 applies some atomics twice when it does under load).
  std::atomic<uint64_t> inFlight{0};
  // Where the time of a slow run goes, logged at debug level when the state closes (see logProgressStats).
  // Posters', the progress thread's and callers' counters sit on cache lines of their own, so that counting does
  // not move a line between the cores of a ping-pong.
  struct Stats {
    alignas(64) std::atomic<uint64_t> posted{0}, again{0}, capped{0}, fused{0};
    alignas(64) std::atomic<uint64_t> threadRounds{0}, threadHandled{0}, rests{0}, blocks{0}, blockedUs{0}, yields{0};
    alignas(64) std::atomic<uint64_t> callerRounds{0}, callerHandled{0}, waitSteps{0};
    // Isolated states: operations the progress thread posted for callers, how long they waited in the queue and
    // how long the provider calls took, in all.
    alignas(64) std::atomic<uint64_t> handedOver{0}, handOverNs{0}, handedPostNs{0};
  } stats;
  uint64_t maxInFlight = 256;

  // Serializes every data-path libfabric call (posts and CQ reads): shm 1.17 crashes reading its CQ while other
  // threads post atomics, even with FI_THREAD_SAFE. Taken after a tracker's mutex, never before.
  std::mutex fiMutex;

  bool progressThread = true;
  // Only the progress thread calls into the provider (posts, completion reads); callers queue and wait with their
  // budgets. Meant for shm: libfabric 1.17's shm spins on a lock inside the peer's shared memory, and a peer
  // that died holding it (a crash mid-transfer) leaves that spin going forever; a caller caught in it could never
  // return, the progress thread can be left behind. Needs the progress thread.
  bool isolated = false;
  bool restsBesideCallers = false;  // the progress thread stays out of the provider while callers drive progress
  std::atomic<bool> progressExited{false};
  std::atomic<bool> stop{false};
  std::thread progress;

  // Staging of GPU sources (only with a GPU runtime and no FI_HMEM).
  std::mutex stagingMutex;
  void* staging = nullptr;  // kStagingBytes, handed out as stagingRing says
  // Whose write reads a piece of the ring: taken until operation `seq` of `tracker` has completed (or the tracker is
  // gone: then every operation of it has).
  struct StagingOwner {
    std::weak_ptr<Tracker> tracker;
    uint64_t seq = 0;
  };
  transport_support::StagingRing<StagingOwner> stagingRing{kStagingBytes};
  fid_mr* stagingMr = nullptr;
  bool stages = false;  // GPU memory is staged (no FI_HMEM, a GPU build): the buffer is made on first use
#if !WEFT_BUILD_GPU_NONE
  // One non-blocking stream per GPU for the staging copies: a copy on the legacy default stream would wait for
  // every kernel on the application's blocking streams, among them a kernel spinning on this very write's signal.
  std::map<int, hipStream_t> stagingStreams;
#endif
};

void logf(const FabricState* s, int32_t level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void logf(const FabricState* s, int32_t level, const char* fmt, ...) {
  if (s == nullptr || s->services.log == nullptr) return;
  char line[1024];
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
/// A boolean option's value as 1 or 0; anything parseBool does not take is refused naming the option.
int boolOption(const std::string& key, const std::string& value) {
  bool on = false;
  if (!parseBool(value, &on)) {
    throw Failure(weftInvalidArgument, "libfabric transport: option " + key + "='" + value + "' is not a boolean");
  }
  return on ? 1 : 0;
}

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
/// `cqData` asks for 8 bytes of remote CQ data (the signals' carrier): a provider may enable it only when asked.
/// `order`: message order to ask for on both sides (0: none; providers report what they give by default).
fi_info* query(const std::string& provider, const std::string& domain, bool hmem, bool deliveryComplete, bool cqData,
               uint64_t order = 0) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) throw std::bad_alloc();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | (hmem ? FI_HMEM : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | (hmem ? FI_MR_HMEM : 0);
  hints->domain_attr->threading = FI_THREAD_SAFE;
  if (cqData) hints->domain_attr->cq_data_size = sizeof(uint64_t);
  if (deliveryComplete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->tx_attr->msg_order = order;
  hints->rx_attr->msg_order = order;
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
/// Only entries on domain `domain` count when it is set: fi_getinfo treats the domain name as a hint (tcp;ofi_rxm in
/// 1.17 returns every interface for domain "lo").
const fi_info* best(const fi_info* list, const std::string& domain) {
  const fi_info* pick = nullptr;
  std::pair<int, int> pickRank{1 << 20, 1 << 20};
  for (const fi_info* p = list; p != nullptr; p = p->next) {
    if (!domain.empty() && (p->domain_attr->name == nullptr || domain != p->domain_attr->name)) continue;
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

inline void count(std::atomic<uint64_t>& counter, uint64_t n = 1) { counter.fetch_add(n, std::memory_order_relaxed); }

/// The state whose progress thread this thread is (nullptr on every other thread).
thread_local const FabricState* tProgressOf = nullptr;

/// Whether this thread may call into s's provider now (see FabricState::isolated).
bool mayEnterProvider(const FabricState* s) { return !s->isolated || tProgressOf == s; }

/// Lets go of t->mutex (held by the caller) for the length of one provider call when the state is isolated. Only the
/// progress thread posts then, and a call that never comes back (a dead shm peer's lock, see FabricState::isolated)
/// must not take the connection's mutex with it: the callers' flushes and writes keep their budgets and time out.
class OutsideTrackerLock {
 public:
  explicit OutsideTrackerLock(Tracker* t) : t_(t->state->isolated ? t : nullptr) {
    if (t_ == nullptr) return;
    t_->posting = true;
    t_->mutex.unlock();
  }
  ~OutsideTrackerLock() {
    if (t_ == nullptr) return;
    t_->mutex.lock();
    t_->posting = false;
  }
  OutsideTrackerLock(const OutsideTrackerLock&) = delete;
  OutsideTrackerLock& operator=(const OutsideTrackerLock&) = delete;

 private:
  Tracker* t_;
};

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

/// Applies a signal a peer carried as remote CQ data: adds its value to the word it names, with release order.
/// The provider reports the write only once it has been processed at this target, and it was posted behind the
/// writes it orders (see SignalPath): their bytes are in this process's memory before the add makes them visible to
/// a waiter's acquire load.
void applySignal(FabricState* s, uint64_t data) {
  const uint64_t id = data >> (kSignalWordBits + kSignalValueBits);
  const uint64_t offset = ((data >> kSignalValueBits) & kMaxSignalWord) * sizeof(uint64_t);
  const uint64_t value = data & kMaxSignalValue;
  {
    std::lock_guard<std::mutex> lock(s->signalMutex);
    FabricRegion* r = id < s->signalTargets.size() ? s->signalTargets[id] : nullptr;
    if (r != nullptr && offset + sizeof(uint64_t) <= r->size) {
      __atomic_fetch_add(reinterpret_cast<uint64_t*>(r->address + offset), value, __ATOMIC_RELEASE);
      return;
    }
  }
  // A peer signalled a registration this process no longer has (or a corrupt value): nothing to add to.
  if (s->strayData.fetch_add(1) == 0) {
    logf(s, weftLogWarn,
         "libfabric transport: a peer's signal names registration %" PRIu64 " offset %" PRIu64
         ", which is not registered here (deregistered while the peer still signals it?); dropped",
         id, offset);
  }
}

/// Reads what the completion queue has (driving a manual-progress provider) and posts signals that became due.
/// Returns how many completions it handled.
int progressOnce(FabricState* s) {
  int handled = 0;
  for (;;) {
    fi_cq_data_entry entries[32];
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
      // Peers' signals first: a loopback signal and its own local completion can share a batch, and a flush that
      // returns on the completion should find the add done.
      bool signalled = false;
      for (ssize_t i = 0; i < n; ++i) {
        if (entries[i].flags & FI_REMOTE_CQ_DATA) {
          applySignal(s, entries[i].data);
          signalled = true;
        }
      }
      if (signalled) s->lastPeerSignalNs.store(steadyNs(), std::memory_order_relaxed);  // one clock read a batch
      for (ssize_t i = 0; i < n; ++i) {
        if (!(entries[i].flags & FI_REMOTE_CQ_DATA) && entries[i].op_context != nullptr) {
          complete(static_cast<Op*>(entries[i].op_context), nullptr);
        }
      }
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

/// How long after a caller's progress call the progress thread counts on more of them (see externalProgressNs).
constexpr std::chrono::milliseconds kExternalProgressGrace{1};

/// Whether a caller drove progress within `window` (default: the grace period).
bool externalProgressRecent(const FabricState* s, std::chrono::nanoseconds window = kExternalProgressGrace) {
  const int64_t last = s->externalProgressNs.load(std::memory_order_relaxed);
  return last != 0 && steadyNs() - last < window.count();
}

/// Blocks the progress thread until the CQ has something (its wait fd) or `timeoutMs` passes; where the provider has
/// no wait fd, sleeps `fallback`. fi_trywait says whether blocking is safe (nothing already waiting in the CQ).
void blockOnCq(FabricState* s, int timeoutMs, std::chrono::microseconds fallback) {
  if (s->waitFd < 0) {
    std::this_thread::sleep_for(fallback);
    return;
  }
  // Work queued after our anyPending check finds progressSleeping set and is posted by its caller (enqueueLocked).
  s->progressSleeping.store(true);
  int rc = -FI_EAGAIN;
  if (!s->anyPending.load()) {
    std::lock_guard<std::mutex> lock(s->fiMutex);
    fid_t fid = &s->cq->fid;
    rc = fi_trywait(s->fabric, &fid, 1);
  }
  if (rc == FI_SUCCESS) {
    pollfd pfd{s->waitFd, POLLIN, 0};
    const int64_t from = steadyNs();
    (void)::poll(&pfd, 1, timeoutMs);
    count(s->stats.blocks);
    count(s->stats.blockedUs, static_cast<uint64_t>((steadyNs() - from) / 1000));
  } else if (s->anyPending.load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));  // the caller driving progress posts it
  }
  s->progressSleeping.store(false);
}

/// A caller that drove progress this recently is polling it (see progressLoop).
constexpr std::chrono::microseconds kCallerPolls{50};

void progressLoop(FabricState* s) {
  // After the last completion, spin (yielding) for a moment, then block on the CQ's wait fd (tcp: its sockets), or
  // sleep where the provider has none: the target side of a transfer must move while its process is idle, without
  // taking a core from the ranks. While the thread spins, a write can wait for its signal (enqueueLocked); the 50 us
  // cover a ping-pong's turnaround. Spinning 1 ms instead measured the same put+signal ping-pong over tcp here.
  constexpr auto kSpin = std::chrono::microseconds(50);
  constexpr auto kShortSleeps = std::chrono::milliseconds(50);
  tProgressOf = s;
  auto lastWork = Clock::now();
  uint32_t idle = 0;
  while (!s->stop.load(std::memory_order_relaxed)) {
    // Where cores are to spare, stay out of the provider while a caller polls progress (a proxy thread idle between
    // triggers, a host waiter): reading the CQ beside it, the two contended for the provider's locks and took each
    // other's completions (a put+signal ping-pong over tcp on 16 cores: 9.2-10.2 us one way, 5.5-5.8 us resting).
    // Only while it polls (a call within 50 us): a proxy busy posting a stream calls less often, and completions
    // then need this thread. Resting through the whole 1 ms grace cut a GPU stream of 8-64 KB puts over tcp to
    // 0.30-0.51x of the rate without resting; resting so still costs it 0.57-0.88x (docs/performance.md). On 2
    // cores resting cost 1.5-2.5 us instead: there the thread's few rounds after each rest (below) help.
    if (s->restsBesideCallers && externalProgressRecent(s, kCallerPolls)) {
      std::this_thread::sleep_for(kCallerPolls);
      count(s->stats.rests);
      continue;
    }
    const int handled = progressOnce(s);
    count(s->stats.threadRounds);
    if (handled > 0) {
      count(s->stats.threadHandled, static_cast<uint64_t>(handled));
      idle = 0;
      lastWork = Clock::now();
      continue;
    }
    if ((++idle & 15u) != 0) {  // read the clock every 16 idle rounds only
      std::this_thread::yield();
      continue;
    }
    if (externalProgressRecent(s) && !s->isolated) {
      // A caller drives progress: sleep rather than take a core from it or wake on the CQ's fd for every message it
      // handles anyway; look again within the grace period.
      std::this_thread::sleep_for(std::chrono::microseconds(250));
      count(s->stats.rests);
      continue;
    }
    const auto quiet = Clock::now() - lastWork;
    // Queued work (a held-back write, a full queue) is retried soon; an isolated state's waiting callers count on
    // this thread alone.
    if (quiet < kSpin || s->anyPending.load() || (s->isolated && externalProgressRecent(s))) {
      count(s->stats.yields);
      std::this_thread::yield();
    } else {
      blockOnCq(s, 10, std::chrono::microseconds(quiet < kShortSleeps ? 20 : 200));
    }
  }
  s->progressExited.store(true);
}

/// Registers a new operation of `t`, `what` of `bytes`, posted now (caller holds t->mutex).
Op* newOpLocked(Tracker* t, uint64_t seq, bool write, const char* what, uint64_t bytes) {
  auto op = std::make_unique<Op>();
  op->tracker = t->self.lock();
  if (op->tracker == nullptr) throw Failure(weftInternalError, "libfabric transport: operation on a freed tracker");
  op->seq = seq;
  op->write = write;
  op->what = what;
  op->bytes = bytes;
  op->postedAt = Clock::now();
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
  const bool data = q.kind == OpKind::kWriteData;
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
  msg.data = data ? q.value : 0;
  std::lock_guard<std::mutex> lock(s->fiMutex);
  return fi_writemsg(s->ep, &msg, s->opFlags | FI_COMPLETION | (data ? FI_REMOTE_CQ_DATA : 0));
}

/// A signal as an 8-byte write into the peer's landing line (its endpoint blob names it) carrying `sig.value` as
/// remote CQ data. Not zero bytes: shm (1.17) never completes a zero-length write. FI_DELIVERY_COMPLETE where
/// offered, as for writes.
ssize_t postSignalData(FabricState* s, Tracker* t, Op* op, const QueuedOp& sig) {
  iovec iov{s->operand, sizeof(uint64_t)};
  void* desc = s->operandDesc;
  fi_rma_iov rma{sig.address, sizeof(uint64_t), sig.key};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = t->peer;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = &op->context;
  msg.data = sig.value;
  std::lock_guard<std::mutex> lock(s->fiMutex);
  return fi_writemsg(s->ep, &msg, s->opFlags | FI_REMOTE_CQ_DATA | FI_COMPLETION);
}

const char* opName(OpKind kind) {
  switch (kind) {
    case OpKind::kWrite: return "fi_write";
    case OpKind::kWriteData: return "fi_writedata (put with signal)";
    case OpKind::kSignalData: return "fi_writedata (signal)";
    case OpKind::kAtomic: break;
  }
  return "fi_atomic (signal)";
}

bool postLandingReadLocked(Tracker* t, uint64_t seq);

/// Posts `q` (caller holds t->mutex). False when it has to wait: the in-flight cap, -FI_EAGAIN, or an error
/// (then recorded in t->error).
bool postLocked(Tracker* t, const QueuedOp& q) {
  FabricState* s = t->state;
  if (!mayEnterProvider(s)) return false;                               // the progress thread posts it
  if (s->inFlight.load(std::memory_order_relaxed) >= s->maxInFlight) {  // progress posts it later
    count(s->stats.capped);
    return false;
  }
  const bool write = q.kind == OpKind::kWrite || q.kind == OpKind::kWriteData;
  Op* op = newOpLocked(t, q.seq, write, opName(q.kind), write ? q.bytes : sizeof(uint64_t));
  ssize_t rc = 0;
  const int64_t postedAt = s->isolated ? steadyNs() : 0;
  {
    OutsideTrackerLock unlocked(t);
    rc = write                           ? postWrite(s, t, op, q)
         : q.kind == OpKind::kSignalData ? postSignalData(s, t, op, q)
                                         : postAtomic(s, t, op, q);
  }
  if (s->isolated && rc == 0) {
    count(s->stats.handedOver);
    count(s->stats.handOverNs, static_cast<uint64_t>(postedAt - q.queuedNs));
    count(s->stats.handedPostNs, static_cast<uint64_t>(steadyNs() - postedAt));
  }
  if (rc == -FI_EAGAIN) {  // connection being set up, or the provider out of room: progress retries it
    count(s->stats.again);
    dropOpLocked(t, op);
    return false;
  }
  if (rc != 0) {
    dropOpLocked(t, op);
    t->error = std::string("libfabric transport: ") + opName(q.kind) + " to peer " + t->peerName +
               " failed: " + fi_strerror(static_cast<int>(-rc));
    return false;
  }
  s->inFlight.fetch_add(1, std::memory_order_relaxed);
  count(s->stats.posted);
  return true;
}

void drainLocked(Tracker* t) {
  FabricState* s = t->state;
  if (t->posting) {  // the progress thread is posting the front (isolated); it drains again afterwards
    s->anyPending.store(true);
    return;
  }
  auto writeBefore = [t](uint64_t seq) { return !t->writes.empty() && *t->writes.begin() < seq; };
  // Each post is of a copy: an isolated state posts without t->mutex, and a connection closed meanwhile has cleared
  // the queues (nothing to pop then).
  // Held signals first, oldest first; one still waiting means every later one waits too (it follows the same writes).
  while (!t->held.empty() && !t->closed && t->error.empty()) {
    const QueuedOp q = t->held.front();
    if (writeBefore(q.seq) || !postLocked(t, q) || t->closed) break;
    t->held.pop_front();
  }
  // A signal carried as CQ data on a provider that delivers RMA writes in order goes straight behind its writes. It
  // may pass signals held above: adds commute, and each one still lands after every write posted before it.
  const bool ordered = s->signalPath == SignalPath::kDataOrdered;
  while (!t->queue.empty() && !t->closed && t->error.empty()) {
    if (t->tailDeferred) {  // the queue's only entry; it goes once the window has passed
      if (Clock::now() - t->tailSince < kCombineWindow) break;
      t->tailDeferred = false;
    }
    const QueuedOp q = t->queue.front();
    const bool holdable = q.kind == OpKind::kAtomic || (q.kind == OpKind::kSignalData && !ordered);
    if (holdable && (!t->held.empty() || writeBefore(q.seq))) {
      t->held.push_back(q);  // every write before it is posted; it goes once they have completed
      t->queue.pop_front();
      continue;
    }
    if (!postLocked(t, q) || t->closed) break;
    t->queue.pop_front();
  }
  // A requested landing-line read goes once everything queued before it is posted (flush: it must follow them).
  while (!t->readRequests.empty() && t->queue.empty() && t->held.empty() && !t->closed && t->error.empty() &&
         mayEnterProvider(s)) {
    if (!postLandingReadLocked(t, t->readRequests.front()) || t->closed) break;
    t->readRequests.pop_front();
  }
  if (!t->error.empty()) {
    t->queue.clear();
    t->held.clear();
    t->readRequests.clear();
  }
  if (!t->queue.empty() || !t->held.empty() || !t->readRequests.empty()) s->anyPending.store(true);
}

/// Queues `q` behind what waits on `t` and posts what can go now. Caller holds t->mutex.
/// With signals carried as CQ data behind the writes, a write that would be posted at once (`combinable`: the last
/// piece of a write, nothing queued before it) waits up to kCombineWindow for a signal: the signal then rides on it
/// (kWriteData) and put + signal cost one message, as in the raw fi_writedata loop; over tcp a second small message
/// right behind the first cost about 13 us more here (raw loop, 8 B to 4 KB). Only while the progress thread is awake
/// to post it when the window ends.
/// Whether a signal can ride on the write at the queue's tail as its CQ data. In order delivery (kDataOrdered): always.
/// Otherwise when no earlier write is still in flight: the target reports a write's CQ data only once that write is in
/// its memory, and every write before it has completed (delivered).
bool canFuseLocked(const Tracker* t) {
  const SignalPath path = t->state->signalPath;
  return path == SignalPath::kDataOrdered ||
         (path == SignalPath::kDataAfterCompletion && t->writes.empty() && t->held.empty());
}

void enqueueLocked(Tracker* t, QueuedOp q, bool combinable = false) {
  FabricState* s = t->state;
  q.seq = t->nextSeq++;
  q.queuedNs = s->isolated ? steadyNs() : 0;
  if (t->tailDeferred) {
    t->tailDeferred = false;
    if (q.kind == OpKind::kSignalData && canFuseLocked(t)) {
      QueuedOp& tail = t->queue.back();
      tail.kind = OpKind::kWriteData;  // keeps its sequence number; the signal's (q.seq) is never used
      count(s->stats.fused);
      tail.value = q.value;
      drainLocked(t);
      return;
    }
  }
  t->queue.push_back(q);
  if (combinable && q.kind == OpKind::kWrite && t->queue.size() == 1 && s->progressThread && canFuseLocked(t) &&
      !t->closed) {
    // Dekker with the progress thread (both seq_cst): it sets progressSleeping, then reads anyPending before it
    // blocks; we set anyPending, then read progressSleeping. One of us sees the other: it stays awake, or we post now.
    s->anyPending.store(true);
    if (!s->progressSleeping.load() || externalProgressRecent(s)) {  // someone drains it when the window ends
      t->tailDeferred = true;
      t->tailSince = Clock::now();
      return;
    }
  }
  drainLocked(t);
}

/// One step of a caller's wait (flush, a full queue): drives progress from the calling thread when there is no
/// progress thread, or while callers drive it and the thread rests (a proxy thread that flushes is the caller that
/// would otherwise have read these completions); else lets the thread run.
void waitStep(FabricState* s) {
  count(s->stats.waitSteps);
  if (s->isolated) {  // keep the progress thread awake; it does the work
    s->externalProgressNs.store(steadyNs(), std::memory_order_relaxed);
    std::this_thread::yield();
  } else if (!s->progressThread || externalProgressRecent(s)) {
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
  while (t->queue.size() + t->held.size() >= kMaxQueued) {
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

/// What the `signals` option asks for.
enum class SignalChoice { kAuto, kDataAfterCompletion, kAtomic };

/// Whether the provider delivers one peer's RMA writes to the target in the order they were posted, the bytes of
/// each in memory before the next is reported: what a signal needs to travel as CQ data right behind its writes.
/// libfabric documents it as message order FI_ORDER_(RMA_)WAW on both sides plus FI_ORDER_DATA in the receive
/// completion order. tcp;ofi_rxm reports FI_ORDER_RMA_WAW but no completion order; its tcp layer (xnet) reads each
/// peer's one TCP stream a message at a time (header, payload into the target buffer, then the completion), so the
/// order holds there by construction; ofi_rxm sends one peer's RMA writes down that one connection.
bool deliversWritesInOrder(const fi_info* fi) {
  const uint64_t waw = FI_ORDER_WAW | FI_ORDER_RMA_WAW;
  if ((fi->tx_attr->msg_order & waw) == 0 || (fi->rx_attr->msg_order & waw) == 0) return false;
  if (fi->rx_attr->comp_order & FI_ORDER_DATA) return true;
  // shm processes one peer's commands in order from one queue and places a write's bytes before it reports the
  // write's CQ data (its completion order is FI_ORDER_STRICT, without FI_ORDER_DATA).
  const std::string prov = providerOf(fi);
  return prov == "tcp;ofi_rxm" || prov == "shm";
}

void chooseSignalPath(FabricState* s, SignalChoice choice) {
  const fi_info* fi = s->info;
  // 64 bits of CQ data, reported without a posted receive (no FI_RX_CQ_DATA mode: hints never accept it).
  const bool data = fi->domain_attr->cq_data_size >= sizeof(uint64_t) && !(fi->mode & FI_RX_CQ_DATA);
  if (choice == SignalChoice::kAtomic || !data) {
    s->signalPath = SignalPath::kAtomic;
  } else if (choice == SignalChoice::kAuto && deliversWritesInOrder(fi)) {
    s->signalPath = SignalPath::kDataOrdered;
  } else {
    s->signalPath = SignalPath::kDataAfterCompletion;
  }
}

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
  cqAttr.format = FI_CQ_FORMAT_DATA;  // flags and data: a peer's signal arrives as a remote CQ data entry
  cqAttr.size = fi->tx_attr->size + fi->rx_attr->size;
  // A file descriptor to sleep on when idle where the provider offers one (tcp: its sockets' epoll set), so the
  // progress thread wakes when data arrives instead of competing for a core with the ranks' own spinning threads.
  cqAttr.wait_obj = FI_WAIT_FD;
  rc = fi_cq_open(s->domain, &cqAttr, &s->cq, nullptr);
  if (rc == 0 && fi_control(&s->cq->fid, FI_GETWAIT, &s->waitFd) != 0) s->waitFd = -1;
  if (rc != 0) {
    cqAttr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(s->domain, &cqAttr, &s->cq, nullptr);
  }
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
  // shm names its region after the pid: a region left in /dev/shm by a dead process whose pid this one now has, or
  // by another libfabric version, makes the first enable fail with EBUSY after removing it, so the next one succeeds.
  for (int attempt = 0; rc == -FI_EBUSY && attempt < 3; ++attempt) rc = fi_enable(s->ep);
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
        t->held.clear();
      }
    }
    s->trackers.clear();
  }
  for (Op* op : leftover) delete op;
  closeFid(s->stagingMr != nullptr ? &s->stagingMr->fid : nullptr);
  s->stagingMr = nullptr;
  closeFid(s->landingMr != nullptr ? &s->landingMr->fid : nullptr);
  closeFid(s->operandMr != nullptr ? &s->operandMr->fid : nullptr);
  s->landingMr = nullptr, s->operandMr = nullptr;
  std::free(s->landing);
  std::free(s->operand);
  s->landing = nullptr, s->operand = nullptr;
#if !WEFT_BUILD_GPU_NONE
  for (auto& [device, stream] : s->stagingStreams) (void)hipStreamDestroy(stream);
  s->stagingStreams.clear();
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

void bindMr(FabricState* s, fid_mr* mr);

/// Registers `bytes` of host memory at `address` for `access` (bound to the endpoint where FI_MR_ENDPOINT asks).
fid_mr* registerInternal(FabricState* s, void* address, uint64_t bytes, uint64_t access, const char* what) {
  fid_mr* mr = nullptr;
  int rc = fi_mr_reg(s->domain, address, bytes, access, 0, (s->mrMode & FI_MR_PROV_KEY) ? 0 : s->nextKey.fetch_add(1),
                     0, &mr, nullptr);
  if (rc != 0) throwFi(std::string("fi_mr_reg of the ") + what, rc);
  bindMr(s, mr);
  return mr;
}

/// The landing line peers' CQ data signals write into, and the 8 bytes ours write from.
void openSignalLines(FabricState* s) {
  void* p = nullptr;
  if (posix_memalign(&p, kLandingBytes, kLandingBytes) != 0) throw std::bad_alloc();
  std::memset(p, 0, kLandingBytes);
  s->landing = static_cast<uint64_t*>(p);
  if (posix_memalign(&p, sizeof(uint64_t), sizeof(uint64_t)) != 0) throw std::bad_alloc();
  s->operand = static_cast<uint64_t*>(p);
  *s->operand = 0;
  s->landingMr = registerInternal(s, s->landing, kLandingBytes, FI_REMOTE_WRITE | FI_REMOTE_READ | FI_WRITE | FI_READ,
                                  "landing line");
  s->operandMr = registerInternal(s, s->operand, sizeof(uint64_t), FI_READ | FI_WRITE, "signal operand");
  s->operandDesc = fi_mr_desc(s->operandMr);
  if (fi_mr_key(s->landingMr) == FI_KEY_NOTAVAIL) {
    throw Failure(weftNotSupported, "libfabric transport: provider " + s->provider + " gives no 64-bit memory key");
  }
}

/// Owns a state during init, so a failure half-way closes what was opened.
/// Logs (debug) what posting and progress did over the state's life: whether operations waited for room, and
/// which thread read the completions, spun, rested or blocked.
void logProgressStats(const FabricState* s) {
  const auto& c = s->stats;
  auto v = [](const std::atomic<uint64_t>& a) { return static_cast<unsigned long long>(a.load()); };
  std::string handOver;
  if (s->isolated && c.handedOver.load() > 0) {
    const double n = static_cast<double>(c.handedOver.load());
    char text[160];
    std::snprintf(text, sizeof(text), "; %llu posts handed to the thread, queued %.0f ns and posting %.0f ns each",
                  v(c.handedOver), static_cast<double>(c.handOverNs.load()) / n,
                  static_cast<double>(c.handedPostNs.load()) / n);
    handOver = text;
  }
  logf(s, weftLogDebug,
       "libfabric transport stats (provider %s): posted %llu (fused put+signal %llu), -FI_EAGAIN %llu, at the "
       "in-flight cap %llu; progress thread %llu rounds handling %llu completions, %llu yields, %llu rests, "
       "%llu blocks on the CQ for %llu us in all; callers %llu progress calls handling %llu, %llu wait steps%s",
       s->provider.c_str(), v(c.posted), v(c.fused), v(c.again), v(c.capped), v(c.threadRounds), v(c.threadHandled),
       v(c.yields), v(c.rests), v(c.blocks), v(c.blockedUs), v(c.callerRounds), v(c.callerHandled), v(c.waitSteps),
       handOver.c_str());
}

/// States left open until the process ends (abandonState).
std::vector<FabricState*>* abandonedStates = new std::vector<FabricState*>();

/// Leaves s, its endpoint and buffers, and this library (RTLD_NODELETE) in place until the process ends, where
/// closing could crash or never return; `why` is logged as a warning.
void abandonState(FabricState* s, const std::string& why) {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&abandonState), &self) != 0 && self.dli_fname != nullptr) {
    (void)dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
  abandonedStates->push_back(s);
  logf(s, weftLogWarn, "%s", why.c_str());
}

/// From how many usable CPUs (transport_support::usableCpus: the affinity mask, at most the cgroup's quota) a
/// process has cores to spare: isolate_provider is then on by default for shm, and the progress thread rests while
/// callers drive progress.
constexpr int kSpareCpusFrom = 8;

/// How long teardown waits for the progress thread to come back from the provider.
constexpr std::chrono::seconds kProgressStopWait{2};

/// Stops and joins the progress thread. False when it has not come back from a provider call within
/// kProgressStopWait (it is detached then; it still uses s, which must stay).
bool stopProgressThread(FabricState* s) {
  if (!s->progress.joinable()) return true;
  s->stop = true;
  const auto until = Clock::now() + kProgressStopWait;
  while (!s->progressExited.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!s->progressExited.load()) {
    s->progress.detach();
    return false;
  }
  s->progress.join();
  return true;
}

struct StateCloser {
  FabricState* s;
  ~StateCloser() {
    if (s == nullptr) return;
    if (!stopProgressThread(s)) {
      abandonState(s, "libfabric transport: the progress thread has not come back from provider " + s->provider +
                          " for " + std::to_string(kProgressStopWait.count()) +
                          " s (a peer that died inside the provider may hold a lock it spins on); the endpoint is "
                          "left open until the process ends");
      return;
    }
    if (s->ep != nullptr) logProgressStats(s);
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
    int progressOption = -1, isolateOption = -1;
    SignalChoice signals = SignalChoice::kAuto;
    for (uint64_t i = 0; i < numOptions; ++i) {
      std::string key = keys[i] != nullptr ? keys[i] : "", value = values[i] != nullptr ? values[i] : "";
      if (key == "provider") {
        provider = value;
      } else if (key == "domain") {
        domain = value;
      } else if (key == "progress_thread") {
        progressOption = boolOption(key, value);
      } else if (key == "isolate_provider") {
        isolateOption = boolOption(key, value);
      } else if (key == "signals") {
        if (value == "auto") {
          signals = SignalChoice::kAuto;
        } else if (value == "data_after_completion") {
          signals = SignalChoice::kDataAfterCompletion;
        } else if (value == "atomic") {
          signals = SignalChoice::kAtomic;
        } else {
          throw Failure(weftInvalidArgument, "libfabric transport: option signals='" + value +
                                                 "' is not one of auto, data_after_completion, atomic");
        }
      } else {
        throw Failure(weftInvalidArgument,
                      "libfabric transport: unknown option '" + key +
                          "' (known: provider, domain, progress_thread, isolate_provider, signals)");
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
    // Most wanted first: FI_HMEM, then delivery complete, then 8 bytes of remote CQ data.
    bool hmem = false, delivery = false, cqData = false;
    for (int attempt = 0; attempt < 8 && chosen == nullptr; ++attempt) {
      hmem = attempt < 4, delivery = (attempt & 2) == 0, cqData = (attempt & 1) == 0;
      if (hmem && WEFT_BUILD_GPU_NONE) continue;
      fi_info* list = query(provider, domain, hmem, delivery, cqData);
      if (list == nullptr) continue;
      lists.push_back(list);
      chosen = best(list, domain);
    }
    // In-order RMA lets signals ride behind their writes and flush read instead of acknowledging every write
    // (deliversWritesInOrder, flushByRead). shm (1.17) reports only send-after-send order unless asked, and then grants
    // it; with delivery complete instead it kept one write in flight per endpoint, and two processes writing to each
    // other on busy cores fell to a few hundred operations a second (docs/libfabric.md). So ask the chosen provider.
    constexpr uint64_t kRmaOrder = FI_ORDER_RMA_WAW | FI_ORDER_RMA_RAW;
    if (chosen != nullptr && ((chosen->tx_attr->msg_order & kRmaOrder) != kRmaOrder ||
                              (chosen->rx_attr->msg_order & kRmaOrder) != kRmaOrder)) {
      const std::string chosenDomain = chosen->domain_attr->name != nullptr ? chosen->domain_attr->name : "";
      if (fi_info* list = query(providerOf(chosen), chosenDomain, hmem, delivery, cqData, kRmaOrder)) {
        lists.push_back(list);
        if (const fi_info* ordered = best(list, chosenDomain)) chosen = ordered;
      }
    }
    if (chosen == nullptr) {
      std::string what = provider.empty() ? "no provider" : "provider '" + provider + "'";
      if (!domain.empty()) what += " with domain '" + domain + "'";
      throw Failure(weftInvalidArgument, "libfabric transport: " + what +
                                             " offers FI_EP_RDM endpoints with FI_RMA and FI_ATOMIC; fi_getinfo "
                                             "offers RDM endpoints of: " +
                                             offeredProviders());
    }
    const char* wanted = std::getenv("WEFT_BOOTSTRAP_INTERFACE");
    if (domain.empty() && wanted != nullptr && *wanted != '\0' && chosen->domain_attr->name != nullptr &&
        std::strcmp(chosen->domain_attr->name, wanted) != 0) {
      logf(s, weftLogWarn,
           "libfabric transport: WEFT_BOOTSTRAP_INTERFACE is %s, but provider %s offers no domain on it (not up "
           "yet?); using domain %s",
           wanted, providerOf(chosen).c_str(), chosen->domain_attr->name);
    }
    openResources(s, chosen);
    chooseSignalPath(s, signals);
    const uint64_t raw = FI_ORDER_RAW | FI_ORDER_RMA_RAW;
    s->flushByRead = s->signalPath == SignalPath::kDataOrdered && (s->info->caps & FI_READ) &&
                     (s->info->tx_attr->msg_order & raw) && (s->info->rx_attr->msg_order & raw);
    if (s->flushByRead) s->opFlags = 0;
    openSignalLines(s);  // CQ data signals land there; every path's teardown probe reads it
    if (!s->atomics) {
      throw Failure(weftNotSupported, "libfabric transport: provider " + s->provider +
                                          " has no FI_SUM atomic on FI_UINT64 (fi_query_atomic), which signals need");
    }
    const bool manual = s->info->domain_attr->data_progress == FI_PROGRESS_MANUAL;
    // Default on for every provider: held-back signals are posted by whoever drives progress, and the thread makes
    // that happen without the caller. Off means callers drive progress (see docs/libfabric.md).
    s->progressThread = progressOption != 0;
    if (isolateOption == 1 && !s->progressThread) {
      throw Failure(weftInvalidArgument,
                    "libfabric transport: isolate_provider needs the progress thread (progress_thread is off)");
    }
    // Unless asked either way: on for shm where the process has cores to spare (kSpareCpusFrom), the hosts where
    // a dead peer's spin lock was seen to hang callers. On fewer cores the thread that alone enters the provider
    // shares a core with the spinning waiters, and a put+signal ping-pong took 147 us instead of 2 (2 cores).
    const bool spareCpus = transport_support::usableCpus() >= kSpareCpusFrom;
    s->isolated =
        s->progressThread && (isolateOption == 1 || (isolateOption == -1 && s->provider == "shm" && spareCpus));
    s->restsBesideCallers = s->progressThread && !s->isolated && spareCpus;
    // GPU sources are staged when the provider has no FI_HMEM; the bounce buffer is made at the first GPU
    // registration, so that a process that never registers GPU memory never starts the GPU runtime here (a runtime
    // started before fork() is unusable in the children).
    s->stages = !s->hmem && !WEFT_BUILD_GPU_NONE;
    if (s->progressThread) s->progress = std::thread(progressLoop, s);
    logf(s, weftLogInfo,
         "libfabric transport up: provider %s domain %s, %s progress%s%s, flush: %s, hmem %s, mr_mode "
         "0x%" PRIx64 ", signals: %s, idle wait: %s, at most %" PRIu64 " operations in flight",
         s->provider.c_str(), s->domainName.c_str(), manual ? "manual" : "auto",
         s->progressThread ? " (thread)" : " (callers)", s->isolated ? ", only that thread enters the provider" : "",
         s->flushByRead        ? "read behind the writes"
         : s->deliveryComplete ? "delivery-complete writes"
                               : "completions",
         s->hmem ? "yes" : "no", s->mrMode, signalPathName(s->signalPath), s->waitFd >= 0 ? "fd" : "sleep",
         s->maxInFlight);
    *stateOut = s;
    closer.s = nullptr;
  });
}

/// Posts an 8-byte read of the peer's landing line as operation `seq` of `t`: the read that ends a flush (see
/// FabricState::flushByRead) and the teardown probe. Caller holds t->mutex. False while the provider has no room
/// (-FI_EAGAIN): the caller retries. A refusal is recorded in t->error.
bool postLandingReadLocked(Tracker* t, uint64_t seq) {
  FabricState* s = t->state;
  Op* op = newOpLocked(t, seq, false, kLandingReadName, sizeof(uint64_t));
  ssize_t rc = 0;
  {
    OutsideTrackerLock unlocked(t);
    std::lock_guard<std::mutex> lock(s->fiMutex);
    rc = fi_read(s->ep, s->operand, sizeof(uint64_t), s->operandDesc, t->peer, t->peerLandingAddress, t->peerLandingKey,
                 &op->context);
  }
  if (rc == -FI_EAGAIN) {
    dropOpLocked(t, op);
    return false;
  }
  if (rc != 0) {
    dropOpLocked(t, op);
    t->error = "libfabric transport: fi_read of the landing line from peer " + t->peerName +
               " failed: " + fi_strerror(static_cast<int>(-rc));
    return true;
  }
  s->inFlight.fetch_add(1, std::memory_order_relaxed);
  count(s->stats.posted);
  return true;
}

/// A caller's landing-line read as operation `seq` of `t`: posted now, or, where only the progress thread enters the
/// provider, asked of it (t->readRequests). Caller holds t->mutex; false as postLandingReadLocked.
bool requestLandingReadLocked(Tracker* t, uint64_t seq) {
  if (mayEnterProvider(t->state)) return postLandingReadLocked(t, seq);
  t->readRequests.push_back(seq);
  t->state->anyPending.store(true);
  return true;
}

/// Whether operation `seq` of `t` (a landing-line read) is still to complete: posted, or asked for and not posted.
bool readPendingLocked(const Tracker* t, uint64_t seq) {
  return t->outstanding.count(seq) != 0 ||
         std::find(t->readRequests.begin(), t->readRequests.end(), seq) != t->readRequests.end();
}

/// One step of a teardown wait: the progress thread, while it runs, does the work; else this thread drives progress.
void teardownWaitStep(FabricState* s) {
  if (s->progressThread && !s->progressExited.load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  } else if (progressOnce(s) == 0) {
    std::this_thread::yield();
  }
}

/// Whether every peer this endpoint talked to answers an 8-byte read of its landing line within kTeardownProbe
/// (an error answer counts: the connection is known broken). `silent` lists those that did not.
/// Why: ofi_rxm (libfabric 1.17) crashes inside fi_close(ep) when a peer's connection stopped mid-message (a cut
/// link): it reads the completion error of the cancelled remote write and dereferences its context, which is null.
/// A peer that cannot answer a read may be in that state; one that answers, or whose connection failed, is not.
bool everyPeerAnswers(FabricState* s, std::string* silent) {
  std::vector<std::shared_ptr<Tracker>> probes;
  {
    std::lock_guard<std::mutex> lock(s->avMutex);
    for (const auto& [bytes, peer] : s->peers) {
      if (!peer.landing) continue;  // an older peer without a landing line: nothing to read
      auto t = std::make_shared<Tracker>();
      t->state = s;
      t->peer = peer.address;
      t->peerName = peer.name;
      t->self = t;
      t->peerLanding = true;
      t->peerLandingKey = peer.landingKey;
      t->peerLandingAddress = peer.landingBase;
      std::lock_guard<std::mutex> tl(t->mutex);
      for (auto until = Clock::now() + kTeardownProbe; !postLandingReadLocked(t.get(), 1) && Clock::now() < until;) {
        if (!s->progressThread) (void)progressOnce(s);
        std::this_thread::yield();
      }
      if (t->outstanding.empty()) continue;  // refused at once: the connection is down and known to be
      probes.push_back(std::move(t));
    }
  }
  auto unanswered = [&] {
    size_t n = 0;
    for (auto& t : probes) {
      std::lock_guard<std::mutex> lock(t->mutex);
      n += !t->outstanding.empty();
    }
    return n;
  };
  const auto deadline = Clock::now() + kTeardownProbe;
  while (unanswered() > 0 && Clock::now() < deadline) teardownWaitStep(s);
  for (auto& t : probes) {
    std::lock_guard<std::mutex> lock(t->mutex);
    if (!t->outstanding.empty()) *silent += (silent->empty() ? "" : ", ") + t->peerName;
  }
  // A probe still in flight keeps its tracker through its Op, which the provider holds as the operation's context.
  return silent->empty();
}

/// Keeps the endpoint answering for kTeardownLinger after the last signal a peer sent here. A peer that signals and
/// then flushes confirms its writes with a read this endpoint serves (FabricState::flushByRead), posted right behind
/// the signal; a process that saw the signal and closed at once left that read unanswered and the peer's flush timed
/// out although everything had arrived (1 run in 10 of a test on 2 busy cores). Idle endpoints pay nothing.
void lingerForPeersFlushes(FabricState* s) {
  const int64_t last = s->lastPeerSignalNs.load(std::memory_order_relaxed);
  if (last == 0) return;
  const int64_t until = last + std::chrono::nanoseconds(kTeardownLinger).count();
  while (steadyNs() < until) teardownWaitStep(s);
}

/// States finalize left open (see fabricFinalize); never destroyed, so a leak checker sees them reachable.
weftResult_t fabricFinalize(void* state) {
  return guard([&] {
    auto* s = checked<FabricState>(state, Tag::kState, "libfabric transport state");
    s->tag = Tag::kDead;
    lingerForPeersFlushes(s);
    std::string silent;
    if (s->provider.find("ofi_rxm") != std::string::npos && !everyPeerAnswers(s, &silent)) {
      // Closing would crash in the provider (see everyPeerAnswers): stop our thread and leave the rest.
      (void)stopProgressThread(s);
      abandonState(s, "libfabric transport: peer " + silent + " did not answer at teardown (link down?); provider " +
                          s->provider + " could crash closing the endpoint, so it is left open until the process ends");
      return;
    }
    StateCloser closer{s};
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
      info->flags = weftDeviceHostMemory | ((s->hmem || s->stages) ? weftDeviceGpuMemory : 0) |
                    (s->stages ? weftDeviceGpuSourceOnly : 0);
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
    if (s->landingMr != nullptr) {
      b.flags = kEndpointLanding;
      b.landingKey = fi_mr_key(s->landingMr);
      b.landingBase = (s->mrMode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(s->landing) : 0;
    }
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

/// Whether `addr` (of the endpoint's address format) is a loopback address: 127.0.0.0/8 or ::1. False for formats
/// that are not IP (shm's names).
bool isLoopback(uint32_t format, const uint8_t* addr, size_t len) {
  if (format == FI_SOCKADDR_IN && len >= sizeof(sockaddr_in)) {
    sockaddr_in a{};
    std::memcpy(&a, addr, sizeof(a));
    return (ntohl(a.sin_addr.s_addr) >> 24) == 127;
  }
  if (format == FI_SOCKADDR_IN6 && len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 a{};
    std::memcpy(&a, addr, sizeof(a));
    return IN6_IS_ADDR_LOOPBACK(&a.sin6_addr);
  }
  return false;
}

std::string addressText(FabricState* s, const uint8_t* addr, size_t len) {
  char buf[128] = {};
  size_t n = sizeof(buf);
  fi_av_straddr(s->av, addr, buf, &n);
  (void)len;
  return buf;
}

/// Opens the provider's connection to the peer of `t` from this side: an 8-byte read of its landing line, waited for
/// until `deadline`. Called by the side whose address sorts first; the Communicator lets neither side return from
/// connect before both did, so the other side sends nothing before the connection is up. Why: when both sides of a
/// pair send first at once, ofi_rxm (libfabric 1.17) resolves the simultaneous connection requests by rejecting one,
/// and operations queued behind the rejected one were seen never to complete (on a 16-core machine, four threads per
/// side posting atomics from the start: flushes timed out with thousands outstanding).
void openConnection(Tracker* t, std::chrono::steady_clock::time_point deadline) {
  FabricState* s = t->state;
  std::unique_lock<std::mutex> lock(t->mutex);
  const uint64_t seq = t->nextSeq;
  while (!requestLandingReadLocked(t, seq)) {
    if (Clock::now() >= deadline) {
      throw Failure(weftTimeout, "libfabric transport: connecting to peer " + t->peerName + " timed out (provider " +
                                     s->provider + " had no room for the first read)");
    }
    lock.unlock();
    waitStep(s);
    lock.lock();
  }
  if (!t->error.empty()) throwTrackerError(t);
  t->nextSeq = seq + 1;
  for (;;) {
    if (!t->error.empty()) throwTrackerError(t);
    if (!readPendingLocked(t, seq)) return;
    if (Clock::now() >= deadline) {
      throw Failure(weftTimeout, "libfabric transport: connecting to peer " + t->peerName +
                                     " timed out: it did not answer the first read (provider " + s->provider + ")");
    }
    lock.unlock();
    waitStep(s);
    lock.lock();
  }
}

weftResult_t fabricConnect(void* endpoint, const void* peerBlob, uint64_t peerBlobBytes, uint64_t timeoutNs,
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
    if ((b.flags & ~kEndpointLanding) != 0 || b.reserved != 0) {
      throw Failure(weftInvalidArgument, "libfabric transport: peer endpoint blob has unknown flags");
    }
    if (b.addressBytes == 0 || b.addressBytes > kMaxAddressBytes) {
      throw Failure(weftInvalidArgument,
                    "libfabric transport: peer address length " + std::to_string(b.addressBytes) + " is out of range");
    }
    std::vector<uint8_t> key(b.address, b.address + b.addressBytes);
    // An endpoint on loopback reaches only this host's loopback, and is reached only from there: writes between it and
    // any other address would be queued and never arrive (a peer in another namespace or host). Say so now instead of
    // timing out later.
    const bool hereLoopback = isLoopback(s->addressFormat, s->address.data(), s->address.size());
    if (hereLoopback != isLoopback(b.addressFormat, key.data(), key.size())) {
      throw Failure(weftInvalidArgument,
                    "libfabric transport: " + std::string(hereLoopback ? "this endpoint" : "the peer's endpoint") +
                        " is on loopback, so this endpoint (domain " + s->domainName + ", " +
                        addressText(s, s->address.data(), s->address.size()) + ") cannot reach the peer at " +
                        addressText(s, key.data(), key.size()) +
                        ": set [transport.libfabric] domain (or WEFT_BOOTSTRAP_INTERFACE) on both to an interface "
                        "that routes between them, and check that it is up");
    }
    fi_addr_t peer = FI_ADDR_UNSPEC;
    {
      std::lock_guard<std::mutex> lock(s->avMutex);
      auto it = s->peers.find(key);
      if (it != s->peers.end()) {
        peer = it->second.address;
      } else {
        int n = fi_av_insert(s->av, key.data(), 1, &peer, 0, nullptr);
        if (n != 1) {
          throw Failure(weftInvalidArgument, "libfabric transport: fi_av_insert refused the peer address " +
                                                 addressText(s, key.data(), key.size()) + " (" +
                                                 (n < 0 ? fi_strerror(-n) : "0 inserted") + ")");
        }
        FabricState::Peer& entry = s->peers[key];
        entry.address = peer;
        entry.name = addressText(s, key.data(), key.size());
        entry.landing = (b.flags & kEndpointLanding) != 0;
        entry.landingKey = b.landingKey;
        entry.landingBase = b.landingBase;
      }
    }
    auto t = std::make_shared<Tracker>();
    t->state = s;
    t->peer = peer;
    t->peerName = addressText(s, key.data(), key.size());
    t->peerLanding = (b.flags & kEndpointLanding) != 0;
    t->peerLandingKey = b.landingKey;
    t->peerLandingAddress = b.landingBase;
    t->self = t;
    {
      std::lock_guard<std::mutex> lock(s->trackersMutex);
      // Forget trackers that are gone, so connect/close cycles do not grow the list.
      s->trackers.erase(std::remove_if(s->trackers.begin(), s->trackers.end(),
                                       [](const std::weak_ptr<Tracker>& w) { return w.expired(); }),
                        s->trackers.end());
      s->trackers.push_back(t);
    }
    // Only with a progress thread on both sides (the same config): the peer answers the read while it waits in the
    // Communicator's confirmation exchange, where nothing else drives its endpoint.
    if (t->peerLanding && s->progressThread &&
        std::lexicographical_compare(s->address.begin(), s->address.end(), key.begin(), key.end())) {
      openConnection(t.get(), Clock::now() + std::chrono::nanoseconds(clampTimeoutNs(timeoutNs)));
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
      c->tracker->held.clear();
      c->tracker->readRequests.clear();
      c->tracker->tailDeferred = false;
    }
    c->tag = Tag::kDead;
    delete c;  // operations still in flight keep the tracker until they complete (or finalize frees them)
  });
}

/// Takes `r` out of the signal table (a later CQ data signal naming its id is dropped, or reaches the registration
/// that reuses the id: peers must stop signalling a registration before it is deregistered, as for writes).
void forgetSignalTarget(FabricState* s, FabricRegion* r) {
  if (r->signalId == 0) return;
  std::lock_guard<std::mutex> lock(s->signalMutex);
  s->signalTargets[r->signalId] = nullptr;
  s->freeSignalIds.push_back(r->signalId);
  r->signalId = 0;
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

#if !WEFT_BUILD_GPU_NONE
/// Makes and registers the pinned bounce buffer of staged writes, once. Call with stagingMutex held.
void ensureStagingLocked(FabricState* s) {
  if (s->stagingMr != nullptr) return;
  if (s->staging == nullptr) {
    const hipError_t e = hipHostMalloc(&s->staging, kStagingBytes, hipHostMallocDefault);
    if (e != hipSuccess) {
      s->staging = nullptr;
      throw Failure(weftNotSupported, "libfabric transport: provider " + s->provider +
                                          " cannot register GPU memory (no FI_HMEM), and pinning its " +
                                          std::to_string(kStagingBytes >> 20) +
                                          " MiB staging buffer failed: " + hipGetErrorString(e));
    }
  }
  fid_mr* mr = nullptr;
  int rc = fi_mr_reg(s->domain, s->staging, kStagingBytes, FI_READ | FI_WRITE, 0,
                     (s->mrMode & FI_MR_PROV_KEY) ? 0 : s->nextKey.fetch_add(1), 0, &mr, nullptr);
  if (rc != 0) throwFi("fi_mr_reg of the staging buffer", rc);
  if (s->mrMode & FI_MR_ENDPOINT) {
    rc = fi_mr_bind(mr, &s->ep->fid, 0);
    if (rc == 0) rc = fi_mr_enable(mr);
    if (rc != 0) {
      closeFid(&mr->fid);
      throwFi("fi_mr_bind/enable of the staging buffer", rc);
    }
  }
  s->stagingMr = mr;
}

/// The staging stream of GPU `device`, made when its first staged region is registered (before the application's
/// kernels may be spinning on what the writes will signal). Call with stagingMutex held.
hipStream_t stagingStreamLocked(FabricState* s, int device) {
  auto it = s->stagingStreams.find(device);
  if (it != s->stagingStreams.end()) return it->second;
  int current = 0;
  hipError_t e = hipGetDevice(&current);
  if (e == hipSuccess && device >= 0) e = hipSetDevice(device);
  hipStream_t stream = nullptr;
  if (e == hipSuccess) e = hipStreamCreateWithFlags(&stream, hipStreamNonBlocking);
  if (device >= 0) (void)hipSetDevice(current);
  if (e != hipSuccess) {
    throw Failure(weftSystemError, std::string("libfabric transport: creating a staging stream on GPU ") +
                                       std::to_string(device) + ": " + hipGetErrorString(e));
  }
  s->stagingStreams.emplace(device, stream);
  return stream;
}
#endif

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
      if (!s->stages) {
        throw Failure(weftNotSupported, "libfabric transport: provider " + s->provider +
                                            " cannot register GPU memory (no FI_HMEM) and this build has no GPU "
                                            "runtime to stage it through host memory (built with WEFT_GPU=none)");
      }
      r->staged = true;  // a write source copied through the bounce buffer; peers cannot write into it
      r->gpuDevice = desc->gpuDevice;
#if !WEFT_BUILD_GPU_NONE
      std::lock_guard<std::mutex> staging(s->stagingMutex);
      ensureStagingLocked(s);
      (void)stagingStreamLocked(s, r->gpuDevice);
#endif
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
    // Host memory this process can add to with a CPU atomic (8-byte aligned words) may be signalled as CQ data.
    const bool signalTarget = s->signalPath != SignalPath::kAtomic && r->kind == weftMemoryHost && !r->staged &&
                              reinterpret_cast<uintptr_t>(r->address) % sizeof(uint64_t) == 0;
    if (signalTarget) {
      std::lock_guard<std::mutex> lock(s->signalMutex);
      if (!s->freeSignalIds.empty()) {
        r->signalId = s->freeSignalIds.back();
        s->freeSignalIds.pop_back();
      } else if (s->signalTargets.size() <= kMaxSignalId) {
        r->signalId = static_cast<uint32_t>(s->signalTargets.size());
        s->signalTargets.push_back(nullptr);
      }  // else: ids used up; signals to this registration go as fi_atomic
      if (r->signalId != 0) s->signalTargets[r->signalId] = r.get();
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
    b.signalId = r->signalId;
    if (r->mr != nullptr && b.key == FI_KEY_NOTAVAIL) {
      forgetSignalTarget(s, r.get());
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
    forgetSignalTarget(r->state, r);
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
        (b.kind != weftMemoryHost && b.kind != weftMemoryGpu) || b.signalId > kMaxSignalId || b.reserved != 0) {
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
    remote->signalId = b.signalId;
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
/// Whether the provider may still read the ring piece of `use`: its write is queued or posted and not completed. A
/// failed connection drops what it had queued, and a posted write stays until its completion (an error one too).
bool stagingInUse(const FabricState::StagingOwner& owner) {
  std::shared_ptr<Tracker> t = owner.tracker.lock();
  if (t == nullptr) return false;
  std::lock_guard<std::mutex> lock(t->mutex);
  // The queue posts in sequence order (writes are never held back), so a front at or before `seq` means it waits.
  return t->outstanding.count(owner.seq) != 0 || (!t->queue.empty() && t->queue.front().seq <= owner.seq);
}

/// Takes `bytes` (at most kStagedChunkBytes) of the staging ring for a write of `t`, waiting for the oldest pieces'
/// writes to complete while it is full, at most kPostTimeout. Returns the piece's offset. Call with stagingMutex held.
uint64_t takeStagingLocked(FabricState* s, Tracker* t, uint64_t bytes) {
  const auto deadline = Clock::now() + kPostTimeout;
  for (;;) {
    s->stagingRing.release(stagingInUse);
    if (const std::optional<uint64_t> at = s->stagingRing.room(bytes)) return *at;
    if (Clock::now() > deadline) {
      std::shared_ptr<Tracker> oldest = s->stagingRing.oldest().owner.tracker.lock();
      throw Failure(weftTimeout, "libfabric transport: staged write to peer " + t->peerName + ": the staging ring (" +
                                     std::to_string(kStagingBytes >> 20) + " MiB) stayed full for " +
                                     std::to_string(kPostTimeout.count()) + " s, its oldest piece on a write to peer " +
                                     (oldest != nullptr ? oldest->peerName : std::string("?")) +
                                     " that did not complete");
    }
    waitStep(s);
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
  hipStream_t stream = stagingStreamLocked(s, src->gpuDevice);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min({bytes - done, kStagedChunkBytes, s->chunkBytes});
    const uint64_t at = takeStagingLocked(s, t, n);
    uint8_t* piece = static_cast<uint8_t*>(s->staging) + at;
    hipError_t e = hipMemcpyAsync(piece, src->address + srcOffset + done, n, hipMemcpyDeviceToHost, stream);
    if (e == hipSuccess) e = hipStreamSynchronize(stream);
    if (e != hipSuccess) {
      throw Failure(weftSystemError,
                    std::string("libfabric transport: staging copy from GPU memory failed: ") + hipGetErrorString(e));
    }
    {
      std::unique_lock<std::mutex> lock(t->mutex);
      waitForRoom(t, lock, "fi_write (staged)");
      const uint64_t seq = t->nextSeq;
      // The last piece may carry the signal that follows as its CQ data, as an unstaged write does.
      enqueueLocked(t, QueuedOp{0, OpKind::kWrite, piece, desc, n, dst->rmaBase + dstOffset + done, dst->key, 0, 0},
                    done + n == bytes);
      s->stagingRing.take(at, n, FabricState::StagingOwner{t->self, seq});
    }
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
        enqueueLocked(t,
                      QueuedOp{0, OpKind::kWrite, src->address + srcOffset + done, src->desc, n,
                               dst->rmaBase + dstOffset + done, dst->key, 0, 0},
                      done + n == bytes);
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
    // CQ data where the peer gave the registration a signal id and the word and value fit the 64 bits.
    const uint64_t word = dstOffset / sizeof(uint64_t);
    const bool asData = s->signalPath != SignalPath::kAtomic && t->peerLanding && dst->signalId != 0 &&
                        word <= kMaxSignalWord && value <= kMaxSignalValue;
    QueuedOp op{0, OpKind::kAtomic, nullptr, nullptr, 0, address, dst->key, value, 0};
    if (asData) {
      op = QueuedOp{0, OpKind::kSignalData,   nullptr,           nullptr,
                    0, t->peerLandingAddress, t->peerLandingKey, encodeSignal(dst->signalId, word, value),
                    0};
    }
    uint64_t seq = 0;
    {
      std::unique_lock<std::mutex> lock(t->mutex);
      waitForRoom(t, lock, opName(op.kind));
      seq = t->nextSeq;
      // Posted now when it need not wait (ordered CQ data, or no write of this connection in flight); else held
      // back until the writes before it complete.
      enqueueLocked(t, op);
    }
    if (s->progressThread) return;
    // No progress thread: post it from here, waiting for the earlier writes.
    const auto deadline = Clock::now() + kPostTimeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(t->mutex);
        drainLocked(t);
        if (!t->error.empty()) throwTrackerError(t);
        // Both deques leave from the front in sequence order: this signal waits iff either front is at or before it.
        const bool queued = !t->queue.empty() && t->queue.front().seq <= seq;
        if (!queued && (t->held.empty() || t->held.front().seq > seq)) return;
      }
      if (Clock::now() > deadline) {
        throw Failure(weftTimeout, "libfabric transport: signal to peer " + t->peerName +
                                       " waited too long for the writes before it");
      }
      waitStep(s);
    }
  });
}

/// Whether an operation of `t` numbered `last` or lower is not posted yet: queued, held behind writes, or a landing
/// read asked of the progress thread. Each of these lists is in sequence order, so their fronts tell (O(1)).
bool unpostedUpToLocked(const Tracker* t, uint64_t last) {
  return (!t->queue.empty() && t->queue.front().seq <= last) || (!t->held.empty() && t->held.front().seq <= last) ||
         (!t->readRequests.empty() && t->readRequests.front() <= last);
}

/// What a flush that ran out of time reports: where its operations (sequence numbers up to `last`) wait.
std::string flushTimeoutMessage(const Tracker* t, uint64_t last, std::chrono::milliseconds waited) {
  const FabricState* s = t->state;
  size_t posted = 0, queued = 0, held = 0;
  for (auto it = t->outstanding.begin(); it != t->outstanding.end() && it->first <= last; ++it) ++posted;
  for (const auto& q : t->queue) queued += q.seq <= last;
  for (uint64_t r : t->readRequests) queued += r <= last;
  for (const auto& q : t->held) held += q.seq <= last;
  std::string oldest;
  if (!t->outstanding.empty() && t->outstanding.begin()->first <= last) {
    const Op* op = t->outstanding.begin()->second;
    oldest =
        "; the oldest posted: " + std::string(op->what) + " of " + std::to_string(op->bytes) + " B, " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - op->postedAt).count()) +
        " ms ago";
    if (posted == 1 && queued + held == 0 && op->what == kLandingReadName) {
      // Everything else completed: only the peer's answer is missing, and a peer that is stopped, not progressing or
      // already closed its endpoint (it saw the last signal and left) never gives it.
      oldest +=
          ", the read that confirms delivery; the peer must still be progressing to answer it (one that closed "
          "its endpoint never does: close only after the peer's flushes returned)";
    }
  }
  return "libfabric transport: flush to peer " + t->peerName + " timed out after " + std::to_string(waited.count()) +
         " ms with " + std::to_string(posted + queued + held) + " operations outstanding (" + std::to_string(posted) +
         " posted and not completed, " + std::to_string(queued) + " queued, " + std::to_string(held) +
         " signals held behind writes; " + std::to_string(s->inFlight.load()) + " in flight on the endpoint" + oldest +
         "; provider " + s->provider + ")";
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
      if (t->tailDeferred) {  // nothing more is coming to combine with: post it now
        t->tailDeferred = false;
        drainLocked(t);
      }
    }
    const bool byRead = s->flushByRead && t->peerLanding;
    const uint64_t covered = last;  // what this flush vouches for (operations issued later may pass the read)
    bool readPosted = false;
    // Each round holds t->mutex for O(1) work: a waiter that scanned thousands of queued operations per round kept
    // the progress thread, which needs the mutex for every post and completion, off it for hundreds of us at a time
    // on a 16-core host (streams of small puts at 0.01x the raw loop, four flushing threads that stalled).
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(t->mutex);
        if (!t->error.empty()) throwTrackerError(t);
        const bool unposted = unpostedUpToLocked(t, last);
        if (byRead && !readPosted && last > t->delivered && !unposted) {
          // Everything before is posted: the read goes behind it and comes back after it is delivered.
          const uint64_t seq = t->nextSeq;
          if (requestLandingReadLocked(t, seq)) {
            t->nextSeq = seq + 1;
            last = seq;
            readPosted = true;
          }
          if (!t->error.empty()) throwTrackerError(t);
        }
        const bool readToPost = byRead && !readPosted && last > t->delivered;
        const bool inFlight = !t->outstanding.empty() && t->outstanding.begin()->first <= last;
        if (!readToPost && !inFlight && !unpostedUpToLocked(t, last)) {
          if (readPosted) t->delivered = std::max(t->delivered, covered);
          return;
        }
        if (Clock::now() >= deadline) {
          throw Failure(weftTimeout,
                        flushTimeoutMessage(
                            t, last, std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start)));
        }
      }
      waitStep(s);
    }
  });
}

/// The 1.1 progress entry: one round of progressOnce from the caller's thread (a proxy thread while idle).
weftResult_t fabricProgress(void* state, uint32_t* handled) {
  return guard([&] {
    auto* s = checked<FabricState>(state, Tag::kState, "libfabric transport state");
    requireOut(handled, "handled");
    s->externalProgressNs.store(steadyNs(), std::memory_order_relaxed);
    *handled = mayEnterProvider(s) ? static_cast<uint32_t>(progressOnce(s)) : 0;
    count(s->stats.callerRounds);
    count(s->stats.callerHandled, *handled);
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
    .progress = fabricProgress,
};

}  // namespace
}  // namespace weft::fabric

extern "C" WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) {
  return &weft::fabric::kFabricTransport;
}
