/// The bootstrap: how the ranks of a job find each other and exchange small amounts of host data at setup
/// (addresses, serialized memory handles) before any transport exists.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <weft/params.hpp>
#include <weft/unique_id.hpp>

namespace weft {

/// Rank-to-rank host messaging used to set up a job. Abstract so that a job can bring its own (e.g. over MPI).
///
/// Contract for every implementation: the collectives (allGather, barrier, broadcast) are called by every rank in
/// the same order, from one thread at a time; tagged send/recv may be called from many threads at once, and
/// messages of one (peer, tag) arrive in the order they were sent while different tags never wait on each other.
/// Every call that waits has a deadline and throws weft::Error (kTimeout, kRemoteError, ...) instead of hanging.
class Bootstrap {
 public:
  virtual ~Bootstrap();

  /// This process's rank, in [0, size()).
  virtual int rank() const = 0;

  /// Number of ranks in the job.
  virtual int size() const = 0;

  /// Every rank contributes the bytesPerRank bytes at allData + rank() * bytesPerRank; on return allData holds
  /// every rank's slice in rank order. bytesPerRank must be the same on every rank.
  virtual void allGather(void* allData, uint64_t bytesPerRank) = 0;

  /// Returns once every rank has entered the barrier.
  virtual void barrier() = 0;

  /// Copies `bytes` bytes at `data` on rank `root` into `data` on every other rank; `bytes` must match everywhere.
  virtual void broadcast(void* data, uint64_t bytes, int root) = 0;

  /// Sends `bytes` bytes to `peer` under `tag`. The buffer may be reused as soon as the call returns.
  virtual void send(const void* data, uint64_t bytes, int peer, int tag) = 0;

  /// Receives the next message that `peer` sent under `tag` into `data`. Its size must equal `bytes`, else
  /// Error(kInvalidArgument) is thrown (and that message is consumed).
  virtual void recv(void* data, uint64_t bytes, int peer, int tag) = 0;

  /// Whether a message that `peer` sent under `tag` is waiting, so that recv would return without waiting; never
  /// waits. A bootstrap that cannot tell returns false (the default), and callers that only poll then never receive:
  /// they must treat "no message yet" as a normal answer.
  virtual bool hasMessage(int peer, int tag);

  /// Sends a message of any length (up to kMaxBootstrapMessageBytes) that recvBytes on `peer` can receive without
  /// knowing its size. Uses two messages on (peer, tag): do not run it concurrently with other traffic on the
  /// same (peer, tag).
  void sendBytes(const std::vector<uint8_t>& data, int peer, int tag);

  /// Receives what sendBytes sent to this rank from `peer` under `tag`. A length above kMaxBootstrapMessageBytes
  /// gives Error(kProtocolError) and allocates nothing.
  std::vector<uint8_t> recvBytes(int peer, int tag);
};

/// Largest message a bootstrap carries (1 GiB): a garbled length never makes a receiver allocate more.
inline constexpr uint64_t kMaxBootstrapMessageBytes = uint64_t{1} << 30;

/// Default time every blocking bootstrap call may wait.
inline constexpr std::chrono::milliseconds kDefaultBootstrapTimeout{30000};

/// The bootstrap over TCP (Boost.Asio, one I/O thread per instance).
///
/// Rank 0 (the root) listens at the address in the id; every rank also listens on an ephemeral port of the
/// interface it reaches the root through and registers that address with the root, which sends everyone the
/// table of addresses. Then every pair of ranks connects directly (one connection per pair, made during
/// construction), and all messages flow over those connections. Every connection first presents the job's secret;
/// one that does not is refused and logged and does not disturb the job.
///
/// Failures: every blocking call (including the constructor) waits at most timeout() and then throws
/// Error(kTimeout) naming the rank(s) it waited for; a peer whose connection closes makes calls that need it throw
/// Error(kRemoteError) naming that rank; a malformed message throws Error(kProtocolError).
///
/// Scale: each rank holds size() - 1 sockets, so size() is bounded by the process's file descriptor limit.
class TcpBootstrap : public Bootstrap {
 public:
  /// Makes a new job id: the root will listen at `address` ("" means the address of WEFT_BOOTSTRAP_INTERFACE when
  /// set, else this host's first non-loopback interface address, or 127.0.0.1 if there is none; otherwise "host",
  /// "host:port", "[ipv6]:port" or an IPv6 literal). Without a port, one that is free at the time of the call is
  /// chosen. The secret is 32 random bytes from the OS (getrandom). Throws Error(kInvalidArgument) when the address
  /// cannot be parsed or resolved.
  static UniqueId createUniqueId(const std::string& address = "");

  /// Joins the job identified by `id` as `rank` of `size`. Blocks until this rank is connected to every other
  /// rank, at most `timeout`. Throws kInvalidArgument (bad rank/size/id), kTimeout (names who is missing),
  /// kRemoteError (the root or a peer failed; the root's reason is passed on) or kSystemError (cannot listen).
  TcpBootstrap(int rank, int size, const UniqueId& id, std::chrono::milliseconds timeout = kDefaultBootstrapTimeout);

  /// Joins the job whose root listens at `rootAddress` ("host:port"; rank 0 listens on that port on all of its
  /// interfaces). The secret is taken from WEFT_BOOTSTRAP_SECRET when it is set (the same text on every rank);
  /// otherwise it is derived from the rootAddress text, which keeps out stray connections and mistakes but is no
  /// protection against anyone who knows the address. Every rank must be given the same text.
  TcpBootstrap(int rank, int size, const std::string& rootAddress,
               std::chrono::milliseconds timeout = kDefaultBootstrapTimeout);

  /// Reads rank, size, root and timeout from the launcher's environment (see parseLauncherEnvironment) and joins
  /// the job. Throws Error(kConfigError) explaining what to set when the environment does not say enough.
  static std::unique_ptr<TcpBootstrap> fromEnvironment();

  /// Closes every connection and joins the I/O thread; safe after any error. No call may still be running on
  /// another thread. Peers that later need this rank get Error(kRemoteError) naming it.
  ~TcpBootstrap() override;

  TcpBootstrap(const TcpBootstrap&) = delete;
  TcpBootstrap& operator=(const TcpBootstrap&) = delete;

  int rank() const override;
  int size() const override;
  void allGather(void* allData, uint64_t bytesPerRank) override;
  void barrier() override;
  void broadcast(void* data, uint64_t bytes, int root) override;
  void send(const void* data, uint64_t bytes, int peer, int tag) override;
  void recv(void* data, uint64_t bytes, int peer, int tag) override;
  bool hasMessage(int peer, int tag) override;

  /// The budget of every blocking call.
  std::chrono::milliseconds timeout() const;

  /// The rank within this host as the launcher reported it (fromEnvironment), or -1 when unknown.
  int localRank() const;

  /// The address this rank listens on for its peers, "ip:port" (for logs and tests).
  std::string listenAddress() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int localRank_ = -1;
};

/// What a launcher's environment says about this process's place in the job.
struct LauncherEnvironment {
  std::string launcher;              ///< "weft", "openmpi", "pmi", "slurm" or "torchrun"
  int rank = -1;                     ///< this process's rank
  int size = 0;                      ///< number of ranks
  int localRank = -1;                ///< rank within the host, -1 when the launcher does not say
  std::optional<UniqueId> uniqueId;  ///< from WEFT_UNIQUE_ID (takes precedence over rootAddress)
  std::string rootAddress;           ///< "host:port" of the root when uniqueId is empty
  std::chrono::milliseconds timeout = kDefaultBootstrapTimeout;  ///< WEFT_BOOTSTRAP_TIMEOUT_MS
};

/// Interprets environment variables (name -> value). Rank and size come from the first of: WEFT_RANK/WEFT_SIZE,
/// OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI), PMI_RANK/PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID/
/// SLURM_NTASKS (srun), RANK/WORLD_SIZE (torchrun). The root is WEFT_UNIQUE_ID (hex) or WEFT_ROOT_ADDR
/// (host:port); under torchrun without either, MASTER_ADDR:(MASTER_PORT + 1), because torch's own TCPStore
/// already listens on MASTER_PORT. The local rank is WEFT_LOCAL_RANK, else the launcher's own variable
/// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, LOCAL_RANK). The timeout is
/// WEFT_BOOTSTRAP_TIMEOUT_MS (milliseconds, default 30000). Throws Error(kConfigError) naming the variable that
/// is missing or malformed and what to set.
LauncherEnvironment parseLauncherEnvironment(const std::map<std::string, std::string>& vars);

}  // namespace weft
