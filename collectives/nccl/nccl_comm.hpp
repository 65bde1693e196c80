// The communicator behind an ncclComm_t, the queue of a group (ncclGroupStart ... ncclGroupEnd) and how one NCCL
// call is checked, routed (native engine or fallback NCCL) and run.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <weft/bootstrap.hpp>
#include <weft/collectives.hpp>
#include <weft/communicator.hpp>

#include "nccl_support.hpp"

namespace weft::detail {

/// One rank's communicator. Shared by the handle and every call running on it, so ncclCommAbort can drop the
/// handle's reference and return while a call on another thread still finishes with it.
struct NcclCommState {
  int rank = -1;
  int size = 0;
  int device = 0;
  bool blocking = true;
  Config config;
  NcclSettings settings;
  std::shared_ptr<Bootstrap> bootstrap;
  std::shared_ptr<Communicator> communicator;
  std::unique_ptr<CollectiveComm> collectives;  ///< null when the ranks cannot run natively (nativeUnavailable)
  std::string nativeUnavailable;                ///< why nothing runs natively on this communicator ("" when it does)
  std::shared_ptr<FallbackLibrary> fallback;    ///< null without a fallback library
  ncclComm_t fallbackComm = nullptr;            ///< the fallback library's communicator of the same ranks
  std::atomic<bool> aborted{false};
  std::atomic<bool> finalized{false};
  std::atomic<int> asyncError{ncclSuccess};
  int childCount = 0;  ///< splits/shrinks made from this communicator (makes their bootstrap tags unique)
  std::mutex mutex;    ///< guards lastError and fallbackOps
  std::string lastError;
  std::set<int> fallbackOps;  ///< ncclRedOp_t handles made by the fallback (PreMulSum)

  /// Frees the fallback communicator (ncclCommAbort when aborted, else ncclCommDestroy), then the engine, the
  /// communicator and the bootstrap in that order.
  ~NcclCommState();
};

/// How a communicator is to be made: by ncclCommInitRank(Config), InitAll, Split or Shrink.
struct NcclInitRequest {
  int size = 0;
  int rank = -1;
  int device = 0;
  UniqueId id;
  bool blocking = true;
};

/// Joins the job of `request` on its device: bootstrap, Communicator, CollectiveComm and, when a fallback library is
/// configured, the fallback's communicator (its unique id broadcast from rank 0 over weft's bootstrap). Ranks the
/// engine cannot serve (CollectiveComm refuses them alike on every rank: not all on one host, or a config that
/// picks a transport without load/store) get no engine: every call goes to the fallback, or fails with
/// ncclInvalidUsage and the reason. Throws Error.
std::shared_ptr<NcclCommState> createCommState(const NcclInitRequest& request);

}  // namespace weft::detail

/// The object an ncclComm_t points at (global namespace: NCCL's header declares `struct ncclComm`).
struct ncclComm {
  static constexpr uint64_t kMagic = 0x7765667463636c31ull;  // "weftccl1"
  static constexpr uint64_t kDead = 0xdeadbeefdeadbeefull;
  std::atomic<uint64_t> magic{kMagic};
  std::mutex mutex;  ///< guards state, initThread, initError
  std::shared_ptr<weft::detail::NcclCommState> state;
  std::atomic<int> initResult{ncclSuccess};  ///< ncclInProgress while a nonblocking or grouped init runs
  std::string initError;
  std::thread initThread;
  weft::detail::NcclInitRequest pending;  ///< what a grouped init will do at ncclGroupEnd
};

namespace weft::detail {

/// One queued operation of a group: either p2p (native send/recv, gathered into one sendRecv per communicator) or a
/// closure that runs the operation natively or through the fallback and returns its result.
struct NcclTask {
  ncclComm* comm = nullptr;
  std::shared_ptr<NcclCommState> state;
  bool viaFallback = false;
  bool isP2p = false;
  PointToPoint p2p{};
  hipStream_t stream = nullptr;
  std::function<ncclResult_t()> run;
};

/// This thread's group: nesting depth, queued tasks and communicators whose init waits for the outer End.
struct NcclGroup {
  int depth = 0;
  std::vector<NcclTask> tasks;
  std::vector<ncclComm*> inits;
  ncclResult_t firstError = ncclSuccess;
};
/// The calling thread's group.
NcclGroup& threadGroup();

/// Runs `tasks` (in queue order per communicator): fallback tasks inside one group of each fallback library,
/// native collectives in order, then each communicator's p2p as one CollectiveComm::sendRecv; communicators run in
/// parallel threads when there are several (each waits for its peers in host builds). Returns the first failure.
ncclResult_t runTasks(std::vector<NcclTask>& tasks);

/// Runs `fn` (an engine call) on `state`'s device and turns what it throws into a result, recorded as the last
/// error; a remote, system or GPU failure also becomes the communicator's async error. An aborted communicator
/// gives ncclInvalidUsage without calling `fn`.
ncclResult_t runNative(NcclCommState& state, const std::string& what, const std::function<void()>& fn);

/// The engine's recorded failure (a wait that ran out, a peer gone) as a result, through runNative; ncclSuccess where
/// the communicator has no engine (it runs on the fallback library).
ncclResult_t checkEngine(NcclCommState& state, const std::string& what);

/// Records `message` as the last error of `state` (may be null) and of this thread, and logs it at warn.
void recordError(NcclCommState* state, ncclResult_t result, const std::string& message);
/// This thread's last error message ("" when none).
const std::string& threadLastError();

}  // namespace weft::detail
