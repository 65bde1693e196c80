#include "nccl_comm.hpp"

#include <algorithm>
#include <new>
#include <weft/gpu.hpp>

#include "logging.hpp"

namespace weft::detail {

namespace {

thread_local std::string tLastError;

struct FallbackIdMessage {
  int32_t status;
  ncclUniqueId id;
};

std::string fallbackText(const FallbackLibrary& lib, ncclComm_t comm, ncclResult_t r) {
  std::string text = lib.api().getErrorString(r);
  if (lib.api().getLastError != nullptr) {
    const char* last = lib.api().getLastError(comm);
    if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  }
  return text;
}

}  // namespace

NcclCommState::~NcclCommState() {
  if (fallbackComm != nullptr && fallback != nullptr) {
    ncclResult_t r = aborted ? fallback->api().commAbort(fallbackComm) : fallback->api().commDestroy(fallbackComm);
    if (r != ncclSuccess)
      logWarn(LogSubsys::kColl, "nccl rank {}: freeing the fallback communicator failed: {}", rank, r);
  }
  collectives.reset();
  communicator.reset();
  bootstrap.reset();
}

std::shared_ptr<NcclCommState> createCommState(const NcclInitRequest& request) {
  auto s = std::make_shared<NcclCommState>();
  s->rank = request.rank;
  s->size = request.size;
  s->device = request.device;
  s->blocking = request.blocking;
  checkGpu(hipSetDevice(request.device), "hipSetDevice for ncclCommInitRank");
  s->config = Config::load();
  s->settings = NcclSettings::fromConfig(s->config);
  auto bootstrap = std::make_shared<TcpBootstrap>(request.rank, request.size, request.id, s->config.bootstrapTimeout);
  s->bootstrap = bootstrap;
  s->communicator = std::make_shared<Communicator>(bootstrap, s->config);
  try {
    s->collectives = std::make_unique<CollectiveComm>(s->communicator);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotSupported) throw;
    s->nativeUnavailable = e.what();
  }
  if (!s->settings.fallbackLibrary.empty()) {
    s->fallback = FallbackLibrary::open(s->settings.fallbackLibrary);
    const FallbackApi& fb = s->fallback->api();
    FallbackIdMessage message{};
    if (request.rank == 0) message.status = fb.getUniqueId(&message.id);
    // Rank 0 says whether it got an id, so the others fail with its reason instead of waiting inside NCCL's init.
    bootstrap->broadcast(&message, sizeof(message), 0);
    if (message.status != ncclSuccess) {
      throw Error(ErrorCode::kRemoteError,
                  "rank 0's fallback ncclGetUniqueId failed: " +
                      std::string(fb.getErrorString(static_cast<ncclResult_t>(message.status))));
    }
    ncclResult_t r = fb.commInitRank(&s->fallbackComm, request.size, message.id, request.rank);
    if (r != ncclSuccess) {
      s->fallbackComm = nullptr;
      throw Error(ErrorCode::kPluginError, "fallback " + s->fallback->path() + " ncclCommInitRank (rank " +
                                               std::to_string(request.rank) + " of " + std::to_string(request.size) +
                                               ") failed: " + fallbackText(*s->fallback, nullptr, r));
    }
  }
  logInfo(LogSubsys::kColl, "nccl comm rank {} of {} on device {} ready ({})", s->rank, s->size, s->device,
          s->fallback ? "fallback " + s->fallback->path() : std::string("no fallback"));
  if (!s->nativeUnavailable.empty()) {
    logWarn(LogSubsys::kColl, "nccl comm rank {} of {}: nothing runs natively, every call {}: {}", s->rank, s->size,
            s->fallback ? "goes to the fallback" : "fails with ncclInvalidUsage (no fallback library)",
            s->nativeUnavailable);
  }
  return s;
}

void recordError(NcclCommState* state, ncclResult_t result, const std::string& message) {
  static constexpr const char* kNames[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                           "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                           "ncclRemoteError",   "ncclInProgress"};
  const int r = static_cast<int>(result);
  logWarn(LogSubsys::kColl, "{} ({})", message, r >= 0 && r < ncclNumResults ? kNames[r] : "unknown result");
  tLastError = message;
  if (state != nullptr) {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->lastError = message;
  }
}

const std::string& threadLastError() { return tLastError; }

NcclGroup& threadGroup() {
  thread_local NcclGroup group;
  return group;
}

ncclResult_t runNative(NcclCommState& s, const std::string& what, const std::function<void()>& fn) {
  if (s.aborted) {
    recordError(&s, ncclInvalidUsage, what + ": the communicator was aborted");
    return ncclInvalidUsage;
  }
  ncclResult_t result = ncclSuccess;
  std::string message;
  try {
    checkGpu(hipSetDevice(s.device), "hipSetDevice to the communicator's device");
    fn();
    return ncclSuccess;
  } catch (const Error& e) {
    result = toResult(e.code());
    message = what + " on rank " + std::to_string(s.rank) + ": " + e.what();
  } catch (const std::bad_alloc&) {
    result = ncclSystemError;
    message = what + ": out of memory";
  } catch (const std::exception& e) {
    result = ncclInternalError;
    message = what + ": " + e.what();
  } catch (...) {
    result = ncclInternalError;
    message = what + ": unknown exception";
  }
  // A peer that failed or timed out leaves the communicator unusable, as NCCL's async errors do.
  if (result == ncclRemoteError || result == ncclSystemError || result == ncclUnhandledCudaError) {
    int expected = ncclSuccess;
    s.asyncError.compare_exchange_strong(expected, result);
  }
  recordError(&s, result, message);
  return result;
}

ncclResult_t checkEngine(NcclCommState& s, const std::string& what) {
  return runNative(s, what, [&] {
    if (s.collectives) s.collectives->checkError();
  });
}

ncclResult_t runTasks(std::vector<NcclTask>& tasks) {
  ncclResult_t first = ncclSuccess;
  auto note = [&](ncclResult_t r) {
    if (first == ncclSuccess && r != ncclSuccess) first = r;
  };

  // Fallback tasks: one group per fallback library, so its send/recv pairs and collectives run as NCCL would.
  std::vector<FallbackLibrary*> libs;
  for (NcclTask& t : tasks) {
    if (!t.viaFallback) continue;
    FallbackLibrary* lib = t.state->fallback.get();
    if (std::find(libs.begin(), libs.end(), lib) == libs.end()) libs.push_back(lib);
  }
  for (FallbackLibrary* lib : libs) note(lib->api().groupStart());
  for (NcclTask& t : tasks) {
    if (t.viaFallback) note(t.run());
  }
  for (auto it = libs.rbegin(); it != libs.rend(); ++it) {
    ncclResult_t r = (*it)->api().groupEnd();
    if (r != ncclSuccess) recordError(nullptr, r, "ncclGroupEnd of fallback " + (*it)->path() + " failed");
    note(r);
  }

  std::vector<ncclComm*> comms;
  for (NcclTask& t : tasks) {
    if (!t.viaFallback && std::find(comms.begin(), comms.end(), t.comm) == comms.end()) comms.push_back(t.comm);
  }
  auto runComm = [&tasks](ncclComm* comm) {
    ncclResult_t result = ncclSuccess;
    std::vector<PointToPoint> p2p;
    hipStream_t stream = nullptr;
    NcclCommState* state = nullptr;
    for (NcclTask& t : tasks) {
      if (t.comm != comm || t.viaFallback) continue;
      state = t.state.get();
      if (t.isP2p) {
        if (p2p.empty()) stream = t.stream;
        p2p.push_back(t.p2p);
        continue;
      }
      ncclResult_t r = t.run();
      if (result == ncclSuccess) result = r;
    }
    if (!p2p.empty()) {
      ncclResult_t r = runNative(*state, "ncclGroupEnd (" + std::to_string(p2p.size()) + " sends/recvs)",
                                 [&] { state->collectives->sendRecv(p2p, stream); });
      if (result == ncclSuccess) result = r;
    }
    return result;
  };
  if (comms.size() == 1) {
    note(runComm(comms[0]));
  } else if (comms.size() > 1) {
    // Several communicators of this process (InitAll, or one thread driving several ranks): in host builds each
    // call returns only when its peers took part, so every communicator gets its own thread.
    std::vector<ncclResult_t> results(comms.size(), ncclSuccess);
    std::vector<std::thread> threads;
    threads.reserve(comms.size());
    for (size_t i = 0; i < comms.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = runComm(comms[i]); });
    }
    for (std::thread& t : threads) t.join();
    for (ncclResult_t r : results) note(r);
  }
  return first;
}

}  // namespace weft::detail
