// The extern "C" entry points of libweft_nccl. Every body runs inside guard(): no exception crosses the C boundary,
// every failure is logged once and kept for ncclGetLastError, and outputs are written only on success.
#include <cstddef>
#include <cstring>
#include <weft/gpu.hpp>

#include "logging.hpp"
#include "nccl_comm.hpp"

#define WEFT_NCCL_STR_(x) #x
#define WEFT_NCCL_STR(x) WEFT_NCCL_STR_(x)
#define WEFT_NCCL_EXPORT __attribute__((visibility("default")))
// The profiling name p<name> is the same function under a second symbol.
#define WEFT_NCCL_ALIAS(pname, name)                                           \
  extern "C" WEFT_NCCL_EXPORT decltype(WEFT_NCCL_FN(name)) WEFT_NCCL_FN(pname) \
      __attribute__((alias(WEFT_NCCL_STR(WEFT_NCCL_FN(name)))));

using weft::Error;
using weft::ErrorCode;
using namespace weft::detail;  // NOLINT: this file is the C shim over weft::detail

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;
constexpr int kChildTagBase = 0x4e430000;  // bootstrap tags of split/shrink id exchange ("NC" + child number)

std::string str(const char* s) { return s; }

template <class F>
ncclResult_t guard(const char* fn, F&& body) noexcept {
  try {
    return body();
  } catch (const Error& e) {
    ncclResult_t r = toResult(e.code());
    // Messages already start with the function's name.
    std::string message = e.message();
    if (message.rfind(fn, 0) != 0) message = str(fn) + ": " + message;
    recordError(nullptr, r, message);
    return r;
  } catch (const std::bad_alloc&) {
    recordError(nullptr, ncclSystemError, str(fn) + ": out of memory");
    return ncclSystemError;
  } catch (const std::exception& e) {
    recordError(nullptr, ncclInternalError, str(fn) + ": " + e.what());
    return ncclInternalError;
  } catch (...) {
    recordError(nullptr, ncclInternalError, str(fn) + ": unknown exception");
    return ncclInternalError;
  }
}

void check(bool ok, ErrorCode code, const std::string& what) {
  if (!ok) throw Error(code, what);
}

ncclComm* liveHandle(ncclComm_t comm, const char* fn) {
  check(comm != nullptr, ErrorCode::kInvalidArgument, str(fn) + ": comm is NULL");
  check(comm->magic.load() == ncclComm::kMagic, ErrorCode::kInvalidArgument,
        str(fn) + ": comm is not a live communicator (destroyed, or not made by ncclCommInit*)");
  return comm;
}

// The state of a communicator whose init finished; `forWork` also refuses aborted and finalized ones.
std::shared_ptr<NcclCommState> acquire(ncclComm_t comm, const char* fn, bool forWork = true) {
  ncclComm* h = liveHandle(comm, fn);
  std::shared_ptr<NcclCommState> s;
  {
    std::lock_guard<std::mutex> lock(h->mutex);
    s = h->state;
    if (!s) {
      check(h->initResult.load() != ncclInProgress, ErrorCode::kInvalidUsage,
            str(fn) + ": the communicator's init is still in progress (poll ncclCommGetAsyncError)");
      throw Error(ErrorCode::kInvalidUsage, str(fn) + ": the communicator's init failed: " + h->initError);
    }
  }
  if (forWork) {
    check(!s->aborted, ErrorCode::kInvalidUsage, str(fn) + ": the communicator was aborted or revoked");
    check(!s->finalized, ErrorCode::kInvalidUsage, str(fn) + ": the communicator was finalized");
    int async = s->asyncError.load();
    check(async == ncclSuccess, ErrorCode::kRemoteError,
          str(fn) + ": the communicator failed earlier: " + resultString(static_cast<ncclResult_t>(async)));
  }
  return s;
}

hipStream_t toHip(WEFT_NCCL_STREAM stream) { return reinterpret_cast<hipStream_t>(stream); }

// Runs the init a handle describes and stores the outcome in it.
void runInit(ncclComm* h) {
  try {
    std::shared_ptr<NcclCommState> s = createCommState(h->pending);
    std::lock_guard<std::mutex> lock(h->mutex);
    h->state = std::move(s);
    h->initResult = ncclSuccess;
  } catch (const Error& e) {
    ncclResult_t r = toResult(e.code());
    recordError(nullptr, r,
                "ncclCommInitRank (rank " + std::to_string(h->pending.rank) + " of " + std::to_string(h->pending.size) +
                    "): " + e.message());
    std::lock_guard<std::mutex> lock(h->mutex);
    h->initError = e.message();
    h->initResult = r;
  } catch (const std::exception& e) {
    recordError(nullptr, ncclInternalError, str("ncclCommInitRank: ") + e.what());
    std::lock_guard<std::mutex> lock(h->mutex);
    h->initError = e.what();
    h->initResult = ncclInternalError;
  }
}

bool blockingOf(const ncclConfig_t* config, const char* fn) {
  if (config == nullptr) return true;
  check(config->magic == kConfigMagic, ErrorCode::kInvalidArgument,
        str(fn) + ": config was not initialized with NCCL_CONFIG_INITIALIZER (bad magic)");
  check(config->size >= offsetof(ncclConfig_t, blocking) + sizeof(int), ErrorCode::kInvalidArgument,
        str(fn) + ": config->size " + std::to_string(config->size) + " is too small");
  return config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
}

int currentDevice() {
  int device = 0;
  weft::checkGpu(hipGetDevice(&device), "hipGetDevice");
  return device;
}

// Starts (or queues, inside a group) the init of a new handle; returns what the NCCL call returns.
ncclResult_t startInit(ncclComm_t* out, NcclInitRequest request) {
  auto h = std::make_unique<ncclComm>();
  h->pending = request;
  NcclGroup& group = threadGroup();
  if (group.depth > 0) {
    h->initResult = ncclInProgress;
    group.inits.push_back(h.get());
    *out = h.release();
    return ncclSuccess;
  }
  if (!request.blocking) {
    h->initResult = ncclInProgress;
    ncclComm* raw = h.get();
    h->initThread = std::thread([raw] { runInit(raw); });
    *out = h.release();
    return ncclInProgress;
  }
  runInit(h.get());
  ncclResult_t r = static_cast<ncclResult_t>(h->initResult.load());
  if (r == ncclSuccess) *out = h.release();
  return r;
}

// A handle around a state that is ready now (InitAll, Split, Shrink).
ncclComm_t wrapReady(std::shared_ptr<NcclCommState> s) {
  auto h = std::make_unique<ncclComm>();
  h->state = std::move(s);
  return h.release();
}

// One NCCL operation: checked now, then run now or queued in this thread's group.
struct Operation {
  const char* fn;
  NcclOp op;
  std::optional<weft::CollectiveKind> kind;  // the engine's kind, when supports() decides; none: always native
  ncclDataType_t type;
  std::optional<ncclRedOp_t> redOp;
  uint64_t count;
  WEFT_NCCL_STREAM stream;
  std::function<void(NcclCommState&, weft::DataType, weft::ReduceOp, hipStream_t)> native;
  std::function<ncclResult_t(const FallbackApi&, ncclComm_t)> viaFallback;  // null entry -> returns -1
  std::optional<weft::PointToPoint> p2p;
};

ncclResult_t submit(ncclComm_t comm, Operation o) {
  std::shared_ptr<NcclCommState> s = acquire(comm, o.fn);
  std::optional<weft::DataType> type = toDataType(o.type);
  check(type.has_value(), ErrorCode::kInvalidArgument,
        str(o.fn) + ": datatype " + std::to_string(static_cast<int>(o.type)) + " is not an ncclDataType_t");
  weft::ReduceOp op = weft::ReduceOp::kSum;
  std::string reason;
  if (o.redOp) {
    std::optional<weft::ReduceOp> builtin = toReduceOp(*o.redOp);
    if (builtin) {
      op = *builtin;
    } else {
      bool known;
      {
        std::lock_guard<std::mutex> lock(s->mutex);
        known = s->fallbackOps.count(static_cast<int>(*o.redOp)) != 0;
      }
      check(known, ErrorCode::kInvalidArgument,
            str(o.fn) + ": reduction op " + std::to_string(static_cast<int>(*o.redOp)) +
                " is neither built in nor made by ncclRedOpCreatePreMulSum on this communicator");
      reason = "reduction op " + std::to_string(static_cast<int>(*o.redOp)) + " (PreMulSum) lives in the fallback";
    }
  }
  if (reason.empty() && !s->collectives) reason = s->nativeUnavailable;
  if (reason.empty() && s->settings.forced(o.op)) {
    reason = str(ncclOpName(o.op)) + " is forced to the fallback ([nccl] force_fallback / WEFT_NCCL_FORCE_FALLBACK)";
  }
  if (reason.empty() && o.kind) {
    weft::CollectiveSupport support = s->collectives->supports(*o.kind, *type, op, o.count);
    if (!support.native) reason = support.reason;
  }
  NcclTask task;
  task.comm = comm;
  task.state = s;
  task.stream = toHip(o.stream);
  if (!reason.empty()) {
    check(s->fallbackComm != nullptr, ErrorCode::kInvalidUsage,
          str(o.fn) + ": not run natively (" + reason +
              ") and no fallback library is configured (WEFT_NCCL_FALLBACK or [nccl] fallback_library)");
    task.viaFallback = true;
    task.run = [s, fn = o.fn, call = std::move(o.viaFallback)]() -> ncclResult_t {
      ncclResult_t r = call(s->fallback->api(), s->fallbackComm);
      if (static_cast<int>(r) == -1) {
        recordError(s.get(), ncclInvalidUsage, str(fn) + ": the fallback library " + s->fallback->path() + " lacks it");
        return ncclInvalidUsage;
      }
      if (r != ncclSuccess) recordError(s.get(), r, str(fn) + " in the fallback " + s->fallback->path() + " failed");
      return r;
    };
    logDebug(weft::LogSubsys::kColl, "{} on rank {} goes to the fallback: {}", o.fn, s->rank, reason);
  } else if (o.p2p) {
    task.isP2p = true;
    task.p2p = *o.p2p;
    task.p2p.type = *type;
    task.run = [s, p2p = task.p2p, stream = task.stream, fn = o.fn] {
      return runNative(*s, fn, [&] { s->collectives->sendRecv(std::span<const weft::PointToPoint>(&p2p, 1), stream); });
    };
  } else {
    task.run = [s, fn = o.fn, native = std::move(o.native), t = *type, op, stream = task.stream] {
      return runNative(*s, fn, [&] { native(*s, t, op, stream); });
    };
  }
  NcclGroup& group = threadGroup();
  if (group.depth > 0) {
    group.tasks.push_back(std::move(task));
    return ncclSuccess;
  }
  if (task.viaFallback) return task.run();
  return task.run();
}

void checkRoot(int root, const NcclCommState& s, const char* fn) {
  check(root >= 0 && root < s.size, ErrorCode::kInvalidArgument,
        str(fn) + ": root " + std::to_string(root) + " outside [0, " + std::to_string(s.size) + ")");
}

void checkBuffer(const void* p, size_t count, const char* fn, const char* name) {
  check(count == 0 || p != nullptr, ErrorCode::kInvalidArgument, str(fn) + ": " + name + " is NULL");
}

int rootCheckedSize(ncclComm_t comm, int root, const char* fn) {
  std::shared_ptr<NcclCommState> s = acquire(comm, fn);
  checkRoot(root, *s, fn);
  return s->size;
}

// Gather/scatter natively: the root exchanges one block with every other rank in one sendRecv group.
void rootedExchange(NcclCommState& s, bool gather, const void* send, void* recv, uint64_t count, weft::DataType t,
                    int root, hipStream_t stream) {
  const uint64_t bytes = count * weft::dataTypeBytes(t);
  std::vector<weft::PointToPoint> ops;
  if (s.rank == root) {
    for (int r = 0; r < s.size; ++r) {
      uint8_t* block = static_cast<uint8_t*>(gather ? recv : const_cast<void*>(send)) + r * bytes;
      if (r == s.rank) {
        void* dst = gather ? static_cast<void*>(block) : recv;
        const void* src = gather ? send : block;
        if (dst != src && bytes > 0) weft::checkGpu(hipMemcpyAsync(dst, src, bytes, hipMemcpyDefault, stream), "copy");
        continue;
      }
      ops.push_back(
          {gather ? weft::PointToPoint::Direction::kRecv : weft::PointToPoint::Direction::kSend, block, count, t, r});
    }
  } else {
    ops.push_back({gather ? weft::PointToPoint::Direction::kSend : weft::PointToPoint::Direction::kRecv,
                   gather ? const_cast<void*>(send) : recv, count, t, root});
  }
  s.collectives->sendRecv(ops, stream);
}

// Made by Split/Shrink: joins the child job whose id `leader` makes, with `members` (parent ranks in new order).
std::shared_ptr<NcclCommState> joinChild(NcclCommState& parent, const std::vector<int>& members, const ncclConfig_t*,
                                         const char* fn, int tag) {
  int newRank = static_cast<int>(std::find(members.begin(), members.end(), parent.rank) - members.begin());
  NcclInitRequest request;
  request.size = static_cast<int>(members.size());
  request.rank = newRank;
  request.device = parent.device;
  if (newRank == 0) {
    request.id = weft::TcpBootstrap::createUniqueId(parent.config.bootstrapInterface);
    for (size_t i = 1; i < members.size(); ++i) {
      parent.bootstrap->send(request.id.bytes.data(), weft::kUniqueIdBytes, members[i], tag);
    }
  } else {
    parent.bootstrap->recv(request.id.bytes.data(), weft::kUniqueIdBytes, members[0], tag);
  }
  logInfo(weft::LogSubsys::kColl, "{}: rank {} of the parent becomes rank {} of {}", fn, parent.rank, newRank,
          members.size());
  return createCommState(request);
}

}  // namespace

extern "C" {

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclGetVersion)(int* version) {
  return guard("ncclGetVersion", [&] {
    check(version != nullptr, ErrorCode::kInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclGetUniqueId)(ncclUniqueId* uniqueId) {
  return guard("ncclGetUniqueId", [&] {
    check(uniqueId != nullptr, ErrorCode::kInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    static_assert(sizeof(ncclUniqueId) == weft::kUniqueIdBytes);
    weft::UniqueId id = weft::TcpBootstrap::createUniqueId(weft::Config::load().bootstrapInterface);
    std::memcpy(uniqueId->internal, id.bytes.data(), sizeof(uniqueId->internal));
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommInitRankConfig)(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                                   int rank, ncclConfig_t* config) {
  return guard("ncclCommInitRankConfig", [&] {
    const char* fn = "ncclCommInitRankConfig";
    check(comm != nullptr, ErrorCode::kInvalidArgument, str(fn) + ": comm is NULL");
    check(nranks >= 1, ErrorCode::kInvalidArgument, str(fn) + ": nranks " + std::to_string(nranks) + " < 1");
    check(rank >= 0 && rank < nranks, ErrorCode::kInvalidArgument,
          str(fn) + ": rank " + std::to_string(rank) + " outside [0, " + std::to_string(nranks) + ")");
    NcclInitRequest request;
    request.size = nranks;
    request.rank = rank;
    request.device = currentDevice();
    request.blocking = blockingOf(config, fn);
    std::memcpy(request.id.bytes.data(), commId.internal, weft::kUniqueIdBytes);
    return startInit(comm, request);
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommInitRank)(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                             int rank) {
  return WEFT_NCCL_FN(ncclCommInitRankConfig)(comm, nranks, commId, rank, nullptr);
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommInitRankScalable)(ncclComm_t* newcomm, int nranks, int myrank,
                                                                     int nId, ncclUniqueId* commIds,
                                                                     ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr) {
    recordError(nullptr, ncclInvalidArgument, "ncclCommInitRankScalable: needs nId >= 1 ids in commIds");
    return ncclInvalidArgument;
  }
  // weft's bootstrap has one root; the first id names it (every rank is given the same array).
  return WEFT_NCCL_FN(ncclCommInitRankConfig)(newcomm, nranks, commIds[0], myrank, config);
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommInitAll)(ncclComm_t* comms, int ndev, const int* devlist) {
  return guard("ncclCommInitAll", [&] {
    check(comms != nullptr, ErrorCode::kInvalidArgument, "ncclCommInitAll: comms is NULL");
    check(ndev >= 1, ErrorCode::kInvalidArgument, "ncclCommInitAll: ndev " + std::to_string(ndev) + " < 1");
    weft::UniqueId id = weft::TcpBootstrap::createUniqueId("127.0.0.1");
    std::vector<std::shared_ptr<NcclCommState>> states(ndev);
    std::vector<std::string> errors(ndev);
    std::vector<ncclResult_t> results(ndev, ncclSuccess);
    std::vector<std::thread> threads;
    for (int i = 0; i < ndev; ++i) {
      threads.emplace_back([&, i] {
        NcclInitRequest request{ndev, i, devlist != nullptr ? devlist[i] : i, id, true};
        try {
          states[i] = createCommState(request);
        } catch (const Error& e) {
          results[i] = toResult(e.code());
          errors[i] = e.message();
        } catch (const std::exception& e) {
          results[i] = ncclInternalError;
          errors[i] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < ndev; ++i) {
      if (results[i] != ncclSuccess)
        throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(i) + ": " + errors[i]);
    }
    for (int i = 0; i < ndev; ++i) comms[i] = wrapReady(std::move(states[i]));
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommSplit)(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                                          ncclConfig_t* config) {
  return guard("ncclCommSplit", [&] {
    const char* fn = "ncclCommSplit";
    check(newcomm != nullptr, ErrorCode::kInvalidArgument, str(fn) + ": newcomm is NULL");
    check(color >= 0 || color == NCCL_SPLIT_NOCOLOR, ErrorCode::kInvalidArgument,
          str(fn) + ": color " + std::to_string(color) + " is negative (only NCCL_SPLIT_NOCOLOR may be)");
    blockingOf(config, fn);
    std::shared_ptr<NcclCommState> s = acquire(comm, fn);
    struct Entry {
      int32_t color, key;
    };
    std::vector<Entry> all(s->size);
    all[s->rank] = {color, key};
    s->bootstrap->allGather(all.data(), sizeof(Entry));
    const int tag = kChildTagBase + s->childCount++;
    if (color == NCCL_SPLIT_NOCOLOR) {
      *newcomm = nullptr;
      return ncclSuccess;
    }
    std::vector<int> members;
    for (int r = 0; r < s->size; ++r) {
      if (all[r].color == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
    *newcomm = wrapReady(joinChild(*s, members, config, fn, tag));
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommShrink)(ncclComm_t comm, int* excludeRanksList,
                                                           int excludeRanksCount, ncclComm_t* newcomm,
                                                           ncclConfig_t* config, int shrinkFlags) {
  return guard("ncclCommShrink", [&] {
    const char* fn = "ncclCommShrink";
    check(newcomm != nullptr, ErrorCode::kInvalidArgument, str(fn) + ": newcomm is NULL");
    check(excludeRanksCount >= 0 && (excludeRanksCount == 0 || excludeRanksList != nullptr),
          ErrorCode::kInvalidArgument, str(fn) + ": bad exclude list");
    check(shrinkFlags == NCCL_SHRINK_DEFAULT || shrinkFlags == NCCL_SHRINK_ABORT, ErrorCode::kInvalidArgument,
          str(fn) + ": unknown shrinkFlags " + std::to_string(shrinkFlags));
    blockingOf(config, fn);
    std::shared_ptr<NcclCommState> s = acquire(comm, fn, shrinkFlags != NCCL_SHRINK_ABORT);
    std::vector<bool> excluded(s->size, false);
    for (int i = 0; i < excludeRanksCount; ++i) {
      int r = excludeRanksList[i];
      check(r >= 0 && r < s->size, ErrorCode::kInvalidArgument,
            str(fn) + ": excluded rank " + std::to_string(r) + " outside [0, " + std::to_string(s->size) + ")");
      excluded[r] = true;
    }
    check(!excluded[s->rank], ErrorCode::kInvalidUsage, str(fn) + ": called on an excluded rank");
    std::vector<int> members;
    for (int r = 0; r < s->size; ++r) {
      if (!excluded[r]) members.push_back(r);
    }
    // The excluded ranks take no part (they may be gone): the id travels over tagged messages only.
    const int tag = kChildTagBase + s->childCount++;
    if (shrinkFlags == NCCL_SHRINK_ABORT) s->aborted = true;
    *newcomm = wrapReady(joinChild(*s, members, config, fn, tag));
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommFinalize)(ncclComm_t comm) {
  return guard("ncclCommFinalize", [&] {
    std::shared_ptr<NcclCommState> s = acquire(comm, "ncclCommFinalize");
    ncclResult_t r = checkEngine(*s, "ncclCommFinalize");
    if (r == ncclSuccess && s->fallbackComm != nullptr && s->fallback->api().commFinalize != nullptr) {
      r = s->fallback->api().commFinalize(s->fallbackComm);
      if (r != ncclSuccess) recordError(s.get(), r, "ncclCommFinalize of the fallback communicator failed");
    }
    s->finalized = true;
    return r;
  });
}

namespace {
// Destroy and Abort: the handle dies now; the state dies when the last call still using it returns.
static ncclResult_t release(ncclComm_t comm, const char* fn, bool abort) {
  return guard(fn, [&] {
    if (comm == nullptr) return ncclSuccess;  // as NCCL: freeing NULL is a no-op
    ncclComm* h = liveHandle(comm, fn);
    std::shared_ptr<NcclCommState> s;
    {
      std::lock_guard<std::mutex> lock(h->mutex);
      s = h->state;
    }
    if (s && abort) s->aborted = true;
    // A nonblocking init still running is bounded by the bootstrap timeout.
    if (h->initThread.joinable()) h->initThread.join();
    {
      std::lock_guard<std::mutex> lock(h->mutex);
      s = std::move(h->state);
    }
    h->magic = ncclComm::kDead;
    delete h;
    return ncclSuccess;
  });
}
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommDestroy)(ncclComm_t comm) {
  return release(comm, "ncclCommDestroy", false);
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommAbort)(ncclComm_t comm) {
  return release(comm, "ncclCommAbort", true);
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommRevoke)(ncclComm_t comm, int revokeFlags) {
  return guard("ncclCommRevoke", [&] {
    check(revokeFlags == NCCL_REVOKE_DEFAULT, ErrorCode::kInvalidArgument,
          "ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT");
    std::shared_ptr<NcclCommState> s = acquire(comm, "ncclCommRevoke", false);
    s->aborted = true;
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT const char* WEFT_NCCL_FN(ncclGetErrorString)(ncclResult_t result) { return resultString(result); }

WEFT_NCCL_EXPORT const char* WEFT_NCCL_FN(ncclGetLastError)(ncclComm_t comm) {
  if (comm != nullptr && comm->magic.load() == ncclComm::kMagic) {
    std::shared_ptr<NcclCommState> s;
    {
      std::lock_guard<std::mutex> lock(comm->mutex);
      s = comm->state;
    }
    if (s) {
      std::lock_guard<std::mutex> lock(s->mutex);
      if (!s->lastError.empty()) return s->lastError.c_str();
    }
  }
  return threadLastError().c_str();
}

WEFT_NCCL_EXPORT void WEFT_NCCL_FN(ncclResetDebugInit)() { weft::reloadLogSettings(); }

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t* asyncError) {
  return guard("ncclCommGetAsyncError", [&] {
    check(asyncError != nullptr, ErrorCode::kInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    ncclComm* h = liveHandle(comm, "ncclCommGetAsyncError");
    std::shared_ptr<NcclCommState> s;
    {
      std::lock_guard<std::mutex> lock(h->mutex);
      s = h->state;
      if (!s) {
        *asyncError = static_cast<ncclResult_t>(h->initResult.load());
        return ncclSuccess;
      }
    }
    ncclResult_t r = static_cast<ncclResult_t>(s->asyncError.load());
    if (r == ncclSuccess && !s->aborted) {
      ncclResult_t engine = checkEngine(*s, "ncclCommGetAsyncError");
      if (engine != ncclSuccess) r = engine;
    }
    if (r == ncclSuccess && s->fallbackComm != nullptr && s->fallback->api().commGetAsyncError != nullptr) {
      ncclResult_t fb = ncclSuccess;
      if (s->fallback->api().commGetAsyncError(s->fallbackComm, &fb) == ncclSuccess) r = fb;
    }
    *asyncError = r;
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommCount)(const ncclComm_t comm, int* count) {
  return guard("ncclCommCount", [&] {
    check(count != nullptr, ErrorCode::kInvalidArgument, "ncclCommCount: count is NULL");
    *count = acquire(comm, "ncclCommCount", false)->size;
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommCuDevice)(const ncclComm_t comm, int* device) {
  return guard("ncclCommCuDevice", [&] {
    check(device != nullptr, ErrorCode::kInvalidArgument, "ncclCommCuDevice: device is NULL");
    *device = acquire(comm, "ncclCommCuDevice", false)->device;
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommUserRank)(const ncclComm_t comm, int* rank) {
  return guard("ncclCommUserRank", [&] {
    check(rank != nullptr, ErrorCode::kInvalidArgument, "ncclCommUserRank: rank is NULL");
    *rank = acquire(comm, "ncclCommUserRank", false)->rank;
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclMemAlloc)(void** ptr, size_t size) {
  return guard("ncclMemAlloc", [&] {
    check(ptr != nullptr, ErrorCode::kInvalidArgument, "ncclMemAlloc: ptr is NULL");
    check(size > 0, ErrorCode::kInvalidArgument, "ncclMemAlloc: size is 0");
    void* p = nullptr;
    weft::checkGpu(hipMalloc(&p, size), "ncclMemAlloc: hipMalloc");
    *ptr = p;
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclMemFree)(void* ptr) {
  return guard("ncclMemFree", [&] {
    check(ptr != nullptr, ErrorCode::kInvalidArgument, "ncclMemFree: ptr is NULL");
    weft::checkGpu(hipFree(ptr), "ncclMemFree: hipFree");
    return ncclSuccess;
  });
}

namespace {
// A registration: weft's engine stages through its own registered scratch, so it keeps only the range (and the
// fallback's handle when a fallback communicator exists, so fallback collectives see the registration).
struct NcclRegistration {
  static constexpr uint64_t kMagic = 0x7765667472656731ull;
  uint64_t magic = kMagic;
  void* buffer;
  size_t size;
  void* fallbackHandle = nullptr;
};
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommRegister)(const ncclComm_t comm, void* buff, size_t size,
                                                             void** handle) {
  return guard("ncclCommRegister", [&] {
    check(buff != nullptr && size > 0 && handle != nullptr, ErrorCode::kInvalidArgument,
          "ncclCommRegister: buff, size and handle must be non-zero");
    std::shared_ptr<NcclCommState> s = acquire(comm, "ncclCommRegister");
    auto reg = std::make_unique<NcclRegistration>(NcclRegistration{NcclRegistration::kMagic, buff, size});
    if (s->fallbackComm != nullptr && s->fallback->api().commRegister != nullptr) {
      ncclResult_t r = s->fallback->api().commRegister(s->fallbackComm, buff, size, &reg->fallbackHandle);
      if (r != ncclSuccess) {
        recordError(s.get(), r, "ncclCommRegister in the fallback failed");
        return r;
      }
    }
    *handle = reg.release();
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommDeregister)(const ncclComm_t comm, void* handle) {
  return guard("ncclCommDeregister", [&] {
    auto* reg = static_cast<NcclRegistration*>(handle);
    check(reg != nullptr && reg->magic == NcclRegistration::kMagic, ErrorCode::kInvalidArgument,
          "ncclCommDeregister: handle was not made by ncclCommRegister");
    std::shared_ptr<NcclCommState> s = acquire(comm, "ncclCommDeregister", false);
    ncclResult_t r = ncclSuccess;
    if (reg->fallbackHandle != nullptr && s->fallbackComm != nullptr) {
      r = s->fallback->api().commDeregister(s->fallbackComm, reg->fallbackHandle);
    }
    reg->magic = 0;
    delete reg;
    return r;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommWindowRegister)(ncclComm_t comm, void* buff, size_t size,
                                                                   ncclWindow_t* win, int winFlags) {
  return guard("ncclCommWindowRegister", [&] {
    std::shared_ptr<NcclCommState> s = acquire(comm, "ncclCommWindowRegister");
    check(s->fallbackComm != nullptr && s->fallback->api().commWindowRegister != nullptr, ErrorCode::kInvalidUsage,
          "ncclCommWindowRegister: symmetric windows are not offered natively and no fallback library with "
          "ncclCommWindowRegister is configured");
    return s->fallback->api().commWindowRegister(s->fallbackComm, buff, size, win, winFlags);
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclCommWindowDeregister)(ncclComm_t comm, ncclWindow_t win) {
  return guard("ncclCommWindowDeregister", [&] {
    std::shared_ptr<NcclCommState> s = acquire(comm, "ncclCommWindowDeregister", false);
    check(s->fallbackComm != nullptr && s->fallback->api().commWindowDeregister != nullptr, ErrorCode::kInvalidUsage,
          "ncclCommWindowDeregister: no window was registered (no fallback library)");
    return s->fallback->api().commWindowDeregister(s->fallbackComm, win);
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclRedOpCreatePreMulSum)(ncclRedOp_t* op, void* scalar,
                                                                     ncclDataType_t datatype,
                                                                     ncclScalarResidence_t residence, ncclComm_t comm) {
  return guard("ncclRedOpCreatePreMulSum", [&] {
    check(op != nullptr && scalar != nullptr, ErrorCode::kInvalidArgument,
          "ncclRedOpCreatePreMulSum: op and scalar must be non-NULL");
    std::shared_ptr<NcclCommState> s = acquire(comm, "ncclRedOpCreatePreMulSum");
    check(s->fallbackComm != nullptr && s->fallback->api().redOpCreatePreMulSum != nullptr, ErrorCode::kInvalidUsage,
          "ncclRedOpCreatePreMulSum: weft has no native PreMulSum and no fallback library is configured");
    ncclRedOp_t made{};
    ncclResult_t r = s->fallback->api().redOpCreatePreMulSum(&made, scalar, datatype, residence, s->fallbackComm);
    if (r != ncclSuccess) return r;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->fallbackOps.insert(static_cast<int>(made));
    }
    *op = made;
    return ncclSuccess;
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclRedOpDestroy)(ncclRedOp_t op, ncclComm_t comm) {
  return guard("ncclRedOpDestroy", [&] {
    std::shared_ptr<NcclCommState> s = acquire(comm, "ncclRedOpDestroy", false);
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      check(s->fallbackOps.erase(static_cast<int>(op)) == 1, ErrorCode::kInvalidArgument,
            "ncclRedOpDestroy: op " + std::to_string(static_cast<int>(op)) +
                " was not made by ncclRedOpCreatePreMulSum on this communicator");
    }
    return s->fallback->api().redOpDestroy != nullptr ? s->fallback->api().redOpDestroy(op, s->fallbackComm)
                                                      : ncclSuccess;
  });
}

// -1 marks "the fallback library lacks this entry point" for submit().
#define WEFT_NCCL_FALLBACK_CALL(member, ...) \
  [=](const FallbackApi& fb, ncclComm_t fc) { return fb.member ? fb.member(__VA_ARGS__) : ncclResult_t(-1); }

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclAllReduce)(const void* sendbuff, void* recvbuff, size_t count,
                                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                          WEFT_NCCL_STREAM stream) {
  return guard("ncclAllReduce", [&] {
    checkBuffer(sendbuff, count, "ncclAllReduce", "sendbuff");
    checkBuffer(recvbuff, count, "ncclAllReduce", "recvbuff");
    return submit(
        comm, {"ncclAllReduce", NcclOp::kAllReduce, weft::CollectiveKind::kAllReduce, datatype, op, count, stream,
               [=](NcclCommState& s, weft::DataType t, weft::ReduceOp o, hipStream_t st) {
                 s.collectives->allReduce(sendbuff, recvbuff, count, t, o, st);
               },
               WEFT_NCCL_FALLBACK_CALL(allReduce, sendbuff, recvbuff, count, datatype, op, fc, stream), std::nullopt});
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclBroadcast)(const void* sendbuff, void* recvbuff, size_t count,
                                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                                          WEFT_NCCL_STREAM stream) {
  return guard("ncclBroadcast", [&] {
    rootCheckedSize(comm, root, "ncclBroadcast");
    checkBuffer(recvbuff, count, "ncclBroadcast", "recvbuff");
    return submit(
        comm,
        {"ncclBroadcast", NcclOp::kBroadcast, weft::CollectiveKind::kBroadcast, datatype, std::nullopt, count, stream,
         [=](NcclCommState& s, weft::DataType t, weft::ReduceOp, hipStream_t st) {
           s.collectives->broadcast(sendbuff, recvbuff, count, t, root, st);
         },
         WEFT_NCCL_FALLBACK_CALL(broadcast, sendbuff, recvbuff, count, datatype, root, fc, stream), std::nullopt});
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclBcast)(void* buff, size_t count, ncclDataType_t datatype, int root,
                                                      ncclComm_t comm, WEFT_NCCL_STREAM stream) {
  return WEFT_NCCL_FN(ncclBroadcast)(buff, buff, count, datatype, root, comm, stream);
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclReduce)(const void* sendbuff, void* recvbuff, size_t count,
                                                       ncclDataType_t datatype, ncclRedOp_t op, int root,
                                                       ncclComm_t comm, WEFT_NCCL_STREAM stream) {
  return guard("ncclReduce", [&] {
    rootCheckedSize(comm, root, "ncclReduce");
    checkBuffer(sendbuff, count, "ncclReduce", "sendbuff");
    return submit(comm, {"ncclReduce", NcclOp::kReduce, weft::CollectiveKind::kReduce, datatype, op, count, stream,
                         [=](NcclCommState& s, weft::DataType t, weft::ReduceOp o, hipStream_t st) {
                           s.collectives->reduce(sendbuff, recvbuff, count, t, o, root, st);
                         },
                         WEFT_NCCL_FALLBACK_CALL(reduce, sendbuff, recvbuff, count, datatype, op, root, fc, stream),
                         std::nullopt});
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclAllGather)(const void* sendbuff, void* recvbuff, size_t sendcount,
                                                          ncclDataType_t datatype, ncclComm_t comm,
                                                          WEFT_NCCL_STREAM stream) {
  return guard("ncclAllGather", [&] {
    checkBuffer(sendbuff, sendcount, "ncclAllGather", "sendbuff");
    checkBuffer(recvbuff, sendcount, "ncclAllGather", "recvbuff");
    return submit(
        comm, {"ncclAllGather", NcclOp::kAllGather, weft::CollectiveKind::kAllGather, datatype, std::nullopt, sendcount,
               stream,
               [=](NcclCommState& s, weft::DataType t, weft::ReduceOp, hipStream_t st) {
                 s.collectives->allGather(sendbuff, recvbuff, sendcount, t, st);
               },
               WEFT_NCCL_FALLBACK_CALL(allGather, sendbuff, recvbuff, sendcount, datatype, fc, stream), std::nullopt});
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclReduceScatter)(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                              WEFT_NCCL_STREAM stream) {
  return guard("ncclReduceScatter", [&] {
    checkBuffer(sendbuff, recvcount, "ncclReduceScatter", "sendbuff");
    checkBuffer(recvbuff, recvcount, "ncclReduceScatter", "recvbuff");
    return submit(comm,
                  {"ncclReduceScatter", NcclOp::kReduceScatter, weft::CollectiveKind::kReduceScatter, datatype, op,
                   recvcount, stream,
                   [=](NcclCommState& s, weft::DataType t, weft::ReduceOp o, hipStream_t st) {
                     s.collectives->reduceScatter(sendbuff, recvbuff, recvcount, t, o, st);
                   },
                   WEFT_NCCL_FALLBACK_CALL(reduceScatter, sendbuff, recvbuff, recvcount, datatype, op, fc, stream),
                   std::nullopt});
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclAlltoAll)(const void* sendbuff, void* recvbuff, size_t count,
                                                         ncclDataType_t datatype, ncclComm_t comm,
                                                         WEFT_NCCL_STREAM stream) {
  return guard("ncclAlltoAll", [&] {
    checkBuffer(sendbuff, count, "ncclAlltoAll", "sendbuff");
    checkBuffer(recvbuff, count, "ncclAlltoAll", "recvbuff");
    return submit(
        comm,
        {"ncclAlltoAll", NcclOp::kAllToAll, weft::CollectiveKind::kAllToAll, datatype, std::nullopt, count, stream,
         [=](NcclCommState& s, weft::DataType t, weft::ReduceOp, hipStream_t st) {
           s.collectives->allToAll(sendbuff, recvbuff, count, t, st);
         },
         WEFT_NCCL_FALLBACK_CALL(allToAll, sendbuff, recvbuff, count, datatype, fc, stream), std::nullopt});
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclGather)(const void* sendbuff, void* recvbuff, size_t count,
                                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                                       WEFT_NCCL_STREAM stream) {
  return guard("ncclGather", [&] {
    rootCheckedSize(comm, root, "ncclGather");
    checkBuffer(sendbuff, count, "ncclGather", "sendbuff");
    return submit(
        comm, {"ncclGather", NcclOp::kGather, weft::CollectiveKind::kSendRecv, datatype, std::nullopt, count, stream,
               [=](NcclCommState& s, weft::DataType t, weft::ReduceOp, hipStream_t st) {
                 rootedExchange(s, true, sendbuff, recvbuff, count, t, root, st);
               },
               WEFT_NCCL_FALLBACK_CALL(gather, sendbuff, recvbuff, count, datatype, root, fc, stream), std::nullopt});
  });
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclScatter)(const void* sendbuff, void* recvbuff, size_t count,
                                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                                        WEFT_NCCL_STREAM stream) {
  return guard("ncclScatter", [&] {
    rootCheckedSize(comm, root, "ncclScatter");
    checkBuffer(recvbuff, count, "ncclScatter", "recvbuff");
    return submit(
        comm, {"ncclScatter", NcclOp::kScatter, weft::CollectiveKind::kSendRecv, datatype, std::nullopt, count, stream,
               [=](NcclCommState& s, weft::DataType t, weft::ReduceOp, hipStream_t st) {
                 rootedExchange(s, false, sendbuff, recvbuff, count, t, root, st);
               },
               WEFT_NCCL_FALLBACK_CALL(scatter, sendbuff, recvbuff, count, datatype, root, fc, stream), std::nullopt});
  });
}

namespace {
static ncclResult_t pointToPoint(const char* fn, bool isSend, void* buffer, size_t count, ncclDataType_t datatype,
                                 int peer, ncclComm_t comm, WEFT_NCCL_STREAM stream) {
  return guard(fn, [&] {
    std::shared_ptr<NcclCommState> s = acquire(comm, fn);
    check(peer >= 0 && peer < s->size, ErrorCode::kInvalidArgument,
          str(fn) + ": peer " + std::to_string(peer) + " outside [0, " + std::to_string(s->size) + ")");
    checkBuffer(buffer, count, fn, isSend ? "sendbuff" : "recvbuff");
    weft::PointToPoint p2p{isSend ? weft::PointToPoint::Direction::kSend : weft::PointToPoint::Direction::kRecv, buffer,
                           count, weft::DataType::kUint8, peer};
    std::function<ncclResult_t(const FallbackApi&, ncclComm_t)> viaFallback;
    if (isSend) {
      viaFallback = WEFT_NCCL_FALLBACK_CALL(send, buffer, count, datatype, peer, fc, stream);
    } else {
      viaFallback = WEFT_NCCL_FALLBACK_CALL(recv, buffer, count, datatype, peer, fc, stream);
    }
    return submit(comm, {fn, NcclOp::kSendRecv, std::nullopt, datatype, std::nullopt, count, stream, nullptr,
                         std::move(viaFallback), p2p});
  });
}
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclSend)(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                                     int peer, ncclComm_t comm, WEFT_NCCL_STREAM stream) {
  return pointToPoint("ncclSend", true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclRecv)(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                                     ncclComm_t comm, WEFT_NCCL_STREAM stream) {
  return pointToPoint("ncclRecv", false, recvbuff, count, datatype, peer, comm, stream);
}

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclGroupStart)(void) {
  ++threadGroup().depth;
  return ncclSuccess;
}

namespace {
// Ends the outermost group: runs the queued inits (in parallel: each waits for its peers), then, unless
// `simulateOnly`, the queued operations.
static ncclResult_t endGroup(const char* fn, bool simulateOnly) {
  return guard(fn, [&] {
    NcclGroup& group = threadGroup();
    check(group.depth > 0, ErrorCode::kInvalidUsage, str(fn) + " without ncclGroupStart");
    if (--group.depth > 0) return ncclSuccess;
    std::vector<ncclComm*> inits = std::move(group.inits);
    std::vector<NcclTask> tasks = std::move(group.tasks);
    group = NcclGroup{};
    ncclResult_t result = ncclSuccess;
    std::vector<std::thread> threads;
    for (ncclComm* h : inits) threads.emplace_back([h] { runInit(h); });
    for (std::thread& t : threads) t.join();
    for (ncclComm* h : inits) {
      ncclResult_t r = static_cast<ncclResult_t>(h->initResult.load());
      if (result == ncclSuccess) result = r;
    }
    if (simulateOnly) {
      throw Error(ErrorCode::kNotSupported, str(fn) + ": weft has no cost model; " + std::to_string(tasks.size()) +
                                                " queued operations were dropped, not run");
    }
    ncclResult_t r = runTasks(tasks);
    return result != ncclSuccess ? result : r;
  });
}
}  // namespace

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclGroupEnd)(void) { return endGroup("ncclGroupEnd", false); }

WEFT_NCCL_EXPORT ncclResult_t WEFT_NCCL_FN(ncclGroupSimulateEnd)(ncclSimInfo_t* simInfo) {
  if (simInfo == nullptr) {
    recordError(nullptr, ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo is NULL");
    return ncclInvalidArgument;
  }
  return endGroup("ncclGroupSimulateEnd", true);
}

}  // extern "C"

WEFT_NCCL_ALIAS(pncclGetVersion, ncclGetVersion)
WEFT_NCCL_ALIAS(pncclGetUniqueId, ncclGetUniqueId)
WEFT_NCCL_ALIAS(pncclCommInitRankConfig, ncclCommInitRankConfig)
WEFT_NCCL_ALIAS(pncclCommInitRank, ncclCommInitRank)
WEFT_NCCL_ALIAS(pncclCommInitRankScalable, ncclCommInitRankScalable)
WEFT_NCCL_ALIAS(pncclCommInitAll, ncclCommInitAll)
WEFT_NCCL_ALIAS(pncclCommSplit, ncclCommSplit)
WEFT_NCCL_ALIAS(pncclCommShrink, ncclCommShrink)
WEFT_NCCL_ALIAS(pncclCommFinalize, ncclCommFinalize)
WEFT_NCCL_ALIAS(pncclCommDestroy, ncclCommDestroy)
WEFT_NCCL_ALIAS(pncclCommAbort, ncclCommAbort)
WEFT_NCCL_ALIAS(pncclCommRevoke, ncclCommRevoke)
WEFT_NCCL_ALIAS(pncclGetErrorString, ncclGetErrorString)
WEFT_NCCL_ALIAS(pncclGetLastError, ncclGetLastError)
WEFT_NCCL_ALIAS(pncclResetDebugInit, ncclResetDebugInit)
WEFT_NCCL_ALIAS(pncclCommGetAsyncError, ncclCommGetAsyncError)
WEFT_NCCL_ALIAS(pncclCommCount, ncclCommCount)
WEFT_NCCL_ALIAS(pncclCommCuDevice, ncclCommCuDevice)
WEFT_NCCL_ALIAS(pncclCommUserRank, ncclCommUserRank)
WEFT_NCCL_ALIAS(pncclMemAlloc, ncclMemAlloc)
WEFT_NCCL_ALIAS(pncclMemFree, ncclMemFree)
WEFT_NCCL_ALIAS(pncclCommRegister, ncclCommRegister)
WEFT_NCCL_ALIAS(pncclCommDeregister, ncclCommDeregister)
WEFT_NCCL_ALIAS(pncclCommWindowRegister, ncclCommWindowRegister)
WEFT_NCCL_ALIAS(pncclCommWindowDeregister, ncclCommWindowDeregister)
WEFT_NCCL_ALIAS(pncclRedOpCreatePreMulSum, ncclRedOpCreatePreMulSum)
WEFT_NCCL_ALIAS(pncclRedOpDestroy, ncclRedOpDestroy)
WEFT_NCCL_ALIAS(pncclAllReduce, ncclAllReduce)
WEFT_NCCL_ALIAS(pncclBroadcast, ncclBroadcast)
WEFT_NCCL_ALIAS(pncclBcast, ncclBcast)
WEFT_NCCL_ALIAS(pncclReduce, ncclReduce)
WEFT_NCCL_ALIAS(pncclAllGather, ncclAllGather)
WEFT_NCCL_ALIAS(pncclReduceScatter, ncclReduceScatter)
WEFT_NCCL_ALIAS(pncclAlltoAll, ncclAlltoAll)
WEFT_NCCL_ALIAS(pncclGather, ncclGather)
WEFT_NCCL_ALIAS(pncclScatter, ncclScatter)
WEFT_NCCL_ALIAS(pncclSend, ncclSend)
WEFT_NCCL_ALIAS(pncclRecv, ncclRecv)
WEFT_NCCL_ALIAS(pncclGroupStart, ncclGroupStart)
WEFT_NCCL_ALIAS(pncclGroupEnd, ncclGroupEnd)
WEFT_NCCL_ALIAS(pncclGroupSimulateEnd, ncclGroupSimulateEnd)
