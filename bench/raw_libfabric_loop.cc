// The raw libfabric floor: fi_getinfo with the hints weft's plugin uses, one FI_EP_RDM endpoint per rank, memory
// registered as the provider's mr_mode asks, addresses and keys exchanged over the bootstrap, and a loop that posts
// and reads the completion queue itself (manual progress: nothing moves unless someone reads it).
#include "raw_libfabric_loop.hpp"

#include <weft/error.hpp>

#if WEFT_BENCH_LIBFABRIC
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#endif

namespace weft::bench {

const char* rawFabricSignalName(RawFabricSignal signal) {
  return signal == RawFabricSignal::kWriteData ? "fi_writedata" : "write+fi_atomic";
}

#if WEFT_BENCH_LIBFABRIC

bool rawLibfabricAvailable() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

/// The API version asked of fi_getinfo: the headers compiled against (what the plugin asks too).
constexpr uint32_t kFiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
/// How long any wait of the loop may take before it throws.
constexpr std::chrono::seconds kWaitBudget{30};
/// A destination is the data, then a line with the atomic counter, then a line that fi_writedata signals land in.
constexpr uint64_t kLine = 64;

[[noreturn]] void throwFi(const std::string& what, long rc) {
  throw Error(ErrorCode::kTransportError, "raw libfabric loop: " + what + " failed: " +
                                              fi_strerror(static_cast<int>(-rc)) + " (" + std::to_string(rc) + ")");
}

std::string providerOf(const fi_info* fi) {
  return fi->fabric_attr != nullptr && fi->fabric_attr->prov_name != nullptr ? fi->fabric_attr->prov_name : "?";
}

// The plugin's choice among fi_getinfo's entries (transports/libfabric/libfabric_transport.cc, providerRank and
// domainRank), restated here because bench may not include a transport's private code: hardware providers, then
// tcp, then shm; among domains the one WEFT_BOOTSTRAP_INTERFACE names, then not loopback, then IPv4.
int providerRank(const std::string& prov) {
  static const char* const kOrder[] = {"efa", "cxi", "verbs", "psm3", "opx", "tcp", "shm", "net", "sockets"};
  const std::string first = prov.substr(0, prov.find(';'));
  for (size_t i = 0; i < sizeof(kOrder) / sizeof(kOrder[0]); ++i) {
    if (first == kOrder[i]) return static_cast<int>(i);
  }
  return 100;
}

int domainRank(const fi_info* fi) {
  int rank = 0;
  const char* name = fi->domain_attr != nullptr ? fi->domain_attr->name : nullptr;
  const char* wanted = std::getenv("WEFT_BOOTSTRAP_INTERFACE");
  if (wanted != nullptr && *wanted != '\0' && (name == nullptr || std::strcmp(name, wanted) != 0)) rank += 4;
  if (name != nullptr && std::strcmp(name, "lo") == 0) rank += 2;
  if (fi->addr_format == FI_SOCKADDR_IN6) rank += 1;
  return rank;
}

/// fi_getinfo with the plugin's hints (RDM, RMA + atomics, FI_CONTEXT2, the mr_mode bits it can honour).
fi_info* query(const std::string& provider, const std::string& domain, bool deliveryComplete, bool cqData) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) throw Error(ErrorCode::kSystemError, "raw libfabric loop: fi_allocinfo");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  if (cqData) hints->domain_attr->cq_data_size = sizeof(uint64_t);  // as the plugin asks: 8 bytes of CQ data
  if (deliveryComplete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  if (!provider.empty()) hints->fabric_attr->prov_name = strdup(provider.c_str());
  if (!domain.empty()) hints->domain_attr->name = strdup(domain.c_str());
  fi_info* list = nullptr;
  const int rc = fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc == -FI_ENODATA) return nullptr;
  if (rc != 0) throwFi("fi_getinfo", rc);
  return list;
}

/// Page-aligned, zeroed host memory freed with free().
uint8_t* allocate(uint64_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) throw Error(ErrorCode::kSystemError, "raw libfabric loop: buffers");
  std::memset(p, 0, bytes);
  return static_cast<uint8_t*>(p);
}

uint8_t patternByte(uint64_t i, uint64_t seed) { return static_cast<uint8_t>((i * 131 + seed * 29 + 3) & 0xff); }

void putU64(std::vector<uint8_t>& out, uint64_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(v));
}

uint64_t getU64(const std::vector<uint8_t>& in, size_t at) {
  uint64_t v = 0;
  if (at + sizeof(v) > in.size()) throw Error(ErrorCode::kProtocolError, "raw libfabric loop: short peer message");
  std::memcpy(&v, in.data() + at, sizeof(v));
  return v;
}

}  // namespace

/// One posted operation: its fi_context2 (FI_CONTEXT2 mode: ours until the completion) and what it was.
struct RawOp {
  fi_context2 context;  // first member: op_context in the CQ entry points here
  bool write = false;
};

struct RawFabricPair::Impl {
  Bootstrap& boot;
  int peer;
  bool first;
  int tag;
  uint64_t capacity;    // largest message
  uint64_t flagOffset;  // where the atomic counter sits in a destination; fi_writedata signals land a line later

  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* srcMr = nullptr;
  fid_mr* dstMr = nullptr;
  fid_mr* operandMr = nullptr;
  uint8_t* src = nullptr;
  uint8_t* dst = nullptr;       // data, the counter line, the writedata line
  uint64_t* operand = nullptr;  // an atomic's addend (1), or the 8 bytes a writedata signal carries
  void* srcDesc = nullptr;
  void* operandDesc = nullptr;
  std::string provider, domainName;
  uint64_t mrMode = 0;
  uint64_t deliveryFlag = 0;  // FI_DELIVERY_COMPLETE where the provider offers it and writes arrive out of order
  // The provider delivers one peer's RMA writes in order (tcp;ofi_rxm: one TCP stream per peer, read a message at a
  // time), so a writedata signal right behind the writes orders them without waiting for their completions, and
  // writes need no delivery-complete acknowledgement: the strongest floor, and what the plugin does there.
  bool ordered = false;
  uint64_t maxMessage = ~uint64_t{0};
  uint64_t window = 1;  // most operations in flight (half the transmit queue, as the plugin keeps)
  uint64_t nextKey = 1;
  bool remoteData = false;  // remote CQ data (cq_data_size > 0)
  bool atomics = false;     // FI_SUM on FI_UINT64

  fi_addr_t peerAddress = FI_ADDR_UNSPEC;
  uint64_t peerKey = 0;
  uint64_t peerBase = 0;  // RMA address of the peer destination's offset 0

  std::vector<RawOp> ops;
  std::vector<RawOp*> freeOps;
  uint64_t inFlight = 0;        // posted, not completed
  uint64_t writesInFlight = 0;  // the writes among them
  uint64_t dataSignals = 0;     // remote CQ data completions seen (kWriteData)

  Impl(Bootstrap& b, int p, int t, uint64_t bytes)
      : boot(b), peer(p), first(b.rank() < p), tag(t), capacity(std::max<uint64_t>(bytes, 8)) {
    flagOffset = (capacity + kLine - 1) / kLine * kLine;
  }

  ~Impl() {
    // Read the CQ for a moment first: ofi_rxm (libfabric 1.17) crashes in fi_close(ep) when a peer that has closed its
    // side (its FIN unread, as when it finished first) was never progressed since (see docs/libfabric.md).
    if (cq != nullptr) {
      for (const auto until = Clock::now() + std::chrono::milliseconds(20); Clock::now() < until;) {
        try {
          progress();
        } catch (const Error&) {  // a failed operation of the dead connection: nothing to report at teardown
        }
        std::this_thread::yield();
      }
    }
    // Endpoint first: nothing may complete into memory that is about to go.
    if (ep != nullptr) fi_close(&ep->fid);
    for (fid_mr* mr : {srcMr, dstMr, operandMr}) {
      if (mr != nullptr) fi_close(&mr->fid);
    }
    if (av != nullptr) fi_close(&av->fid);
    if (cq != nullptr) fi_close(&cq->fid);
    if (domain != nullptr) fi_close(&domain->fid);
    if (fabric != nullptr) fi_close(&fabric->fid);
    if (info != nullptr) fi_freeinfo(info);
    std::free(src);
    std::free(dst);
    std::free(operand);
  }

  void open(const std::string& wantProvider, const std::string& wantDomain) {
    fi_info* list = nullptr;
    for (int attempt = 0; attempt < 4 && list == nullptr; ++attempt) {
      list = query(wantProvider, wantDomain, (attempt & 2) == 0, (attempt & 1) == 0);
    }
    if (list == nullptr) {
      throw Error(ErrorCode::kNotSupported, "raw libfabric loop: provider '" + wantProvider + "' domain '" +
                                                wantDomain + "' offers no RDM endpoint with RMA and atomics");
    }
    const fi_info* pick = nullptr;
    std::pair<int, int> pickRank{1 << 20, 1 << 20};
    for (const fi_info* p = list; p != nullptr; p = p->next) {
      // The domain name is only a hint to fi_getinfo: keep to the one asked for, as the plugin does.
      if (!wantDomain.empty() && (p->domain_attr->name == nullptr || wantDomain != p->domain_attr->name)) continue;
      std::pair<int, int> r{providerRank(providerOf(p)), domainRank(p)};
      if (pick == nullptr || r < pickRank) pick = p, pickRank = r;
    }
    if (pick == nullptr) {
      fi_freeinfo(list);
      throw Error(ErrorCode::kNotSupported, "raw libfabric loop: provider '" + wantProvider +
                                                "' offers no RDM endpoint on domain '" + wantDomain + "'");
    }
    info = fi_dupinfo(pick);
    fi_freeinfo(list);
    if (info == nullptr) throw Error(ErrorCode::kSystemError, "raw libfabric loop: fi_dupinfo");
    provider = providerOf(info);
    domainName = info->domain_attr->name != nullptr ? info->domain_attr->name : "?";
    mrMode = static_cast<uint64_t>(info->domain_attr->mr_mode);
    if (mrMode & FI_MR_RAW) throw Error(ErrorCode::kNotSupported, "raw libfabric loop: FI_MR_RAW keys not carried");
    ordered = provider == "tcp;ofi_rxm";
    deliveryFlag = !ordered && (info->tx_attr->op_flags & FI_DELIVERY_COMPLETE) ? FI_DELIVERY_COMPLETE : 0;
    if (info->ep_attr->max_msg_size > 0) maxMessage = info->ep_attr->max_msg_size;
    window = std::max<uint64_t>(1, info->tx_attr->size / 2);
    remoteData = info->domain_attr->cq_data_size > 0;

    int rc = fi_fabric(info->fabric_attr, &fabric, nullptr);
    if (rc != 0) throwFi("fi_fabric", rc);
    rc = fi_domain(fabric, info, &domain, nullptr);
    if (rc != 0) throwFi("fi_domain", rc);
    fi_cq_attr cqAttr{};
    cqAttr.format = FI_CQ_FORMAT_DATA;  // flags and data: a remote write's CQ data is the signal
    cqAttr.wait_obj = FI_WAIT_NONE;
    cqAttr.size = info->tx_attr->size + info->rx_attr->size;
    rc = fi_cq_open(domain, &cqAttr, &cq, nullptr);
    if (rc != 0) throwFi("fi_cq_open", rc);
    fi_av_attr avAttr{};
    avAttr.type = info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type : FI_AV_TABLE;
    rc = fi_av_open(domain, &avAttr, &av, nullptr);
    if (rc != 0) throwFi("fi_av_open", rc);
    rc = fi_endpoint(domain, info, &ep, nullptr);
    if (rc != 0) throwFi("fi_endpoint", rc);
    rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc != 0) throwFi("fi_ep_bind (cq)", rc);
    rc = fi_ep_bind(ep, &av->fid, 0);
    if (rc != 0) throwFi("fi_ep_bind (av)", rc);
    rc = fi_enable(ep);
    if (rc != 0) throwFi("fi_enable", rc);
    fi_atomic_attr attr{};
    atomics = fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr, 0) == 0 && attr.count >= 1;
    if (!remoteData && !atomics) {
      throw Error(ErrorCode::kNotSupported,
                  "raw libfabric loop: provider " + provider + " has neither remote CQ data nor FI_SUM on FI_UINT64");
    }

    src = allocate(capacity);
    dst = allocate(flagOffset + 2 * kLine);
    operand = reinterpret_cast<uint64_t*>(allocate(kLine));
    srcMr = registerRegion(src, capacity, FI_READ | FI_WRITE);
    dstMr = registerRegion(dst, flagOffset + 2 * kLine, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
    operandMr = registerRegion(operand, kLine, FI_READ | FI_WRITE);
    srcDesc = fi_mr_desc(srcMr);
    operandDesc = fi_mr_desc(operandMr);

    ops.resize(window + 8);
    for (RawOp& op : ops) freeOps.push_back(&op);
  }

  fid_mr* registerRegion(void* address, uint64_t bytes, uint64_t access) {
    fid_mr* mr = nullptr;
    const uint64_t key = (mrMode & FI_MR_PROV_KEY) ? 0 : nextKey++;
    int rc = fi_mr_reg(domain, address, bytes, access, 0, key, 0, &mr, nullptr);
    if (rc != 0) throwFi("fi_mr_reg of " + std::to_string(bytes) + " bytes", rc);
    if (mrMode & FI_MR_ENDPOINT) {
      rc = fi_mr_bind(mr, &ep->fid, 0);
      if (rc == 0) rc = fi_mr_enable(mr);
      if (rc != 0) {
        fi_close(&mr->fid);
        throwFi("fi_mr_bind/fi_mr_enable", rc);
      }
    }
    return mr;
  }

  /// Sends this rank's endpoint address, provider and destination key/base; takes the peer's.
  void exchange() {
    std::vector<uint8_t> name(256);
    size_t len = name.size();
    int rc = fi_getname(&ep->fid, name.data(), &len);
    if (rc != 0) throwFi("fi_getname", rc);
    name.resize(len);
    std::vector<uint8_t> mine;
    putU64(mine, fi_mr_key(dstMr));
    putU64(mine, (mrMode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(dst) : 0);
    putU64(mine, provider.size());
    mine.insert(mine.end(), provider.begin(), provider.end());
    mine.insert(mine.end(), name.begin(), name.end());
    std::vector<uint8_t> theirs;
    if (first) {
      boot.sendBytes(mine, peer, tag);
      theirs = boot.recvBytes(peer, tag);
    } else {
      theirs = boot.recvBytes(peer, tag);
      boot.sendBytes(mine, peer, tag);
    }
    peerKey = getU64(theirs, 0);
    peerBase = getU64(theirs, 8);
    const uint64_t provLen = getU64(theirs, 16);
    if (provLen > 256 || 24 + provLen >= theirs.size()) {
      throw Error(ErrorCode::kProtocolError, "raw libfabric loop: malformed peer message");
    }
    const std::string peerProvider(theirs.begin() + 24, theirs.begin() + 24 + static_cast<long>(provLen));
    if (peerProvider != provider) {
      throw Error(ErrorCode::kInvalidArgument,
                  "raw libfabric loop: the peer opened provider " + peerProvider + ", this rank " + provider);
    }
    const uint8_t* address = theirs.data() + 24 + provLen;
    if (fi_av_insert(av, address, 1, &peerAddress, 0, nullptr) != 1) {
      throw Error(ErrorCode::kSystemError, "raw libfabric loop: fi_av_insert refused the peer's address");
    }
  }

  /// Both ranks leave this within a bootstrap message of each other.
  void meet() {
    uint8_t byte = 1;
    if (first) {
      boot.send(&byte, 1, peer, tag + 1);
      boot.recv(&byte, 1, peer, tag + 1);
    } else {
      boot.recv(&byte, 1, peer, tag + 1);
      boot.send(&byte, 1, peer, tag + 1);
    }
  }

  /// Reads what the completion queue holds: frees the contexts of local completions, counts remote CQ data.
  void progress() {
    fi_cq_data_entry entries[16];
    for (;;) {
      const ssize_t n = fi_cq_read(cq, entries, 16);
      if (n == -FI_EAGAIN) return;
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        char text[256] = {};
        if (fi_cq_readerr(cq, &err, 0) != 1) return;
        const char* detail = fi_cq_strerror(cq, err.prov_errno, err.err_data, text, sizeof(text));
        throw Error(ErrorCode::kRemoteError, std::string("raw libfabric loop: operation failed: ") +
                                                 fi_strerror(err.err) + " (" + (detail != nullptr ? detail : "?") +
                                                 ")");
      }
      if (n < 0) throwFi("fi_cq_read", n);
      for (ssize_t i = 0; i < n; ++i) {
        if (entries[i].flags & FI_REMOTE_CQ_DATA) {
          ++dataSignals;
          continue;
        }
        auto* op = static_cast<RawOp*>(entries[i].op_context);
        if (op == nullptr) continue;
        --inFlight;
        if (op->write) --writesInFlight;
        freeOps.push_back(op);
      }
      if (n < 16) return;
    }
  }

  /// Reads the completion queue until `done()`, at most kWaitBudget.
  template <class Done>
  void progressUntil(Done&& done, const char* what) {
    const auto deadline = Clock::now() + kWaitBudget;
    for (uint32_t spins = 0; !done(); ++spins) {
      progress();
      if ((spins & 1023u) == 1023u && Clock::now() > deadline) {
        throw Error(ErrorCode::kTimeout, std::string("raw libfabric loop: ") + what + " (peer rank " +
                                             std::to_string(peer) + ") took more than 30 s");
      }
    }
  }

  /// Signals of kind `signal` received: remote CQ data completions, or the counter's value.
  uint64_t received(RawFabricSignal signal) const {
    if (signal == RawFabricSignal::kWriteData) return dataSignals;
    return __atomic_load_n(reinterpret_cast<const uint64_t*>(dst + flagOffset), __ATOMIC_ACQUIRE);
  }

  RawFabricSignal cheapest() const {
    return remoteData ? RawFabricSignal::kWriteData : RawFabricSignal::kAtomicAfterCompletion;
  }

  void require(RawFabricSignal signal) const {
    if (signal == RawFabricSignal::kWriteData ? !remoteData : !atomics) {
      throw Error(ErrorCode::kNotSupported, std::string("raw libfabric loop: provider ") + provider +
                                                " does not offer " + rawFabricSignalName(signal));
    }
  }

  RawOp* takeOp(bool write) {
    progressUntil([&] { return !freeOps.empty() && inFlight < window; }, "room in the transmit window");
    RawOp* op = freeOps.back();
    freeOps.pop_back();
    op->write = write;
    return op;
  }

  /// Posts through `post` (returns a libfabric rc) until it is not -FI_EAGAIN, reading the CQ in between.
  template <class Post>
  void posted(RawOp* op, Post&& post, const char* what) {
    const auto deadline = Clock::now() + kWaitBudget;
    for (uint32_t spins = 0;; ++spins) {
      const ssize_t rc = post();
      if (rc == 0) break;
      if (rc != -FI_EAGAIN) {
        freeOps.push_back(op);
        throwFi(what, rc);
      }
      progress();
      if ((spins & 1023u) == 1023u && Clock::now() > deadline) {
        freeOps.push_back(op);
        throw Error(ErrorCode::kTimeout, std::string("raw libfabric loop: ") + what + " stayed -FI_EAGAIN for 30 s");
      }
    }
    ++inFlight;
    if (op->write) ++writesInFlight;
  }

  /// One fi_writemsg of src[offset, +bytes) to the peer's destination at the same offset.
  void postWrite(uint64_t offset, uint64_t bytes, uint64_t flags, uint64_t data) {
    RawOp* op = takeOp(true);
    iovec iov{src + offset, bytes};
    void* desc = srcDesc;
    fi_rma_iov rma{peerBase + offset, bytes, peerKey};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = peerAddress;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &op->context;
    msg.data = data;
    posted(
        op, [&] { return fi_writemsg(ep, &msg, flags | FI_COMPLETION); }, "fi_writemsg");
  }

  /// Writes src[0, bytes) to the peer, split at the provider's largest message, each piece delivery-complete.
  void writeAll(uint64_t bytes) {
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min(bytes - done, maxMessage);
      postWrite(done, n, deliveryFlag, 0);
      done += n;
    }
  }

  /// Signals the peer: every write posted before must be in the peer's memory once it sees the signal.
  void sendSignal(RawFabricSignal signal) {
    if (!(ordered && signal == RawFabricSignal::kWriteData)) {
      progressUntil([&] { return writesInFlight == 0; }, "completion of the writes before a signal");
    }
    if (signal == RawFabricSignal::kWriteData) {
      // 8 bytes into the peer's writedata line, carrying the CQ data the peer counts.
      RawOp* op = takeOp(false);
      iovec iov{operand, sizeof(uint64_t)};
      void* desc = operandDesc;
      fi_rma_iov rma{peerBase + flagOffset + kLine, sizeof(uint64_t), peerKey};
      fi_msg_rma msg{};
      msg.msg_iov = &iov;
      msg.desc = &desc;
      msg.iov_count = 1;
      msg.addr = peerAddress;
      msg.rma_iov = &rma;
      msg.rma_iov_count = 1;
      msg.context = &op->context;
      msg.data = 1;
      posted(
          op, [&] { return fi_writemsg(ep, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION); }, "fi_writedata (signal)");
      return;
    }
    RawOp* op = takeOp(false);
    posted(
        op,
        [&] {
          return fi_atomic(ep, operand, 1, operandDesc, peerAddress, peerBase + flagOffset, peerKey, FI_UINT64, FI_SUM,
                           &op->context);
        },
        "fi_atomic (signal)");
  }

  /// put + signal of src[0, bytes): with kWriteData the write carries the signal (its last piece, once the pieces
  /// before it have completed); else the write completes, then the atomic goes.
  void putWithSignal(uint64_t bytes, RawFabricSignal signal) {
    if (signal == RawFabricSignal::kAtomicAfterCompletion) {
      writeAll(bytes);
      sendSignal(signal);
      return;
    }
    const uint64_t last = bytes > maxMessage ? bytes - (bytes - 1) % maxMessage - 1 : 0;  // start of the last piece
    if (last > 0) {
      writeAll(last);
      if (!ordered)
        progressUntil([&] { return writesInFlight == 0; }, "completion of the pieces before a signalled one");
    }
    postWrite(last, bytes - last, FI_REMOTE_CQ_DATA, 1);
  }

  void waitReceived(RawFabricSignal signal, uint64_t value, const char* what) {
    progressUntil([&] { return received(signal) >= value; }, what);
  }
};

RawFabricPair::RawFabricPair(Bootstrap& boot, int peer, const std::string& provider, const std::string& domain,
                             uint64_t bytes, int tag)
    : impl_(std::make_unique<Impl>(boot, peer, tag, bytes)) {
  impl_->open(provider, domain);
  *impl_->operand = 1;
  impl_->exchange();
  impl_->meet();
}

RawFabricPair::~RawFabricPair() = default;

std::string RawFabricPair::description() const {
  const Impl& m = *impl_;
  std::string signals;
  if (m.remoteData) signals += "fi_writedata";
  if (m.atomics) signals += std::string(signals.empty() ? "" : ", ") + "write+fi_atomic";
  return "provider " + m.provider + ", domain " + m.domainName + ", signals " + signals +
         (m.deliveryFlag ? ", writes FI_DELIVERY_COMPLETE" : "") +
         (m.ordered ? ", in-order delivery (signals right behind the writes)" : "") + ", window " +
         std::to_string(m.window) + ", the waiting thread reads the CQ";
}

bool RawFabricPair::offers(RawFabricSignal signal) const {
  return signal == RawFabricSignal::kWriteData ? impl_->remoteData : impl_->atomics;
}

RawFabricSignal RawFabricPair::cheapestSignal() const { return impl_->cheapest(); }

int RawFabricPair::checkWrite(uint64_t bytes, uint64_t seed, RawFabricSignal signal) {
  Impl& m = *impl_;
  m.require(signal);
  bytes = std::min(bytes, m.capacity);
  uint8_t ready = 1;
  if (m.first) {
    for (uint64_t i = 0; i < bytes; ++i) m.src[i] = patternByte(i, seed);
    m.boot.recv(&ready, 1, m.peer, m.tag + 2);  // the peer has cleared its destination
    m.putWithSignal(bytes, signal);
    // Drive it out before blocking on the bootstrap: with manual progress, what the socket did not take at posting
    // moves only while this rank reads its CQ (over a veth between namespaces 128 KB already did not fit).
    m.progressUntil([&] { return m.inFlight == 0; }, "completion of the check-run write");
    m.boot.recv(&ready, 1, m.peer, m.tag + 2);  // and checked it
    return 0;
  }
  std::memset(m.dst, 0, bytes);
  const uint64_t base = m.received(signal);
  m.boot.send(&ready, 1, m.peer, m.tag + 2);
  m.waitReceived(signal, base + 1, "check-run signal");
  int wrong = 0;
  for (uint64_t i = 0; i < bytes; ++i) wrong += m.dst[i] != patternByte(i, seed);
  m.boot.send(&ready, 1, m.peer, m.tag + 2);
  return wrong;
}

double RawFabricPair::pingPongMicros(uint64_t bytes, int iters, RawFabricSignal signal) {
  Impl& m = *impl_;
  m.require(signal);
  bytes = std::min(bytes, m.capacity);
  const uint64_t base = m.received(signal);
  m.meet();  // the peer has read its base too: no signal of this run can be counted in it
  const auto t = Clock::now();
  for (int i = 1; i <= iters; ++i) {
    if (m.first) {
      m.putWithSignal(bytes, signal);
      m.waitReceived(signal, base + i, "ping-pong answer");
    } else {
      m.waitReceived(signal, base + i, "ping-pong put");
      m.putWithSignal(bytes, signal);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t).count();
  m.progressUntil([&] { return m.inFlight == 0; }, "completion of the last ping-pong operations");
  return seconds * 1e6 / iters / 2;
}

double RawFabricPair::streamGigabytesPerSecond(uint64_t bytes, int iters) {
  Impl& m = *impl_;
  const RawFabricSignal signal = m.cheapest();
  bytes = std::min(bytes, m.capacity);
  const uint64_t base = m.received(signal);
  m.meet();
  const auto t = Clock::now();
  if (m.first) {
    for (int i = 0; i < iters; ++i) m.writeAll(bytes);
    m.sendSignal(signal);
    m.waitReceived(signal, base + 1, "stream acknowledgement");
  } else {
    m.waitReceived(signal, base + 1, "stream signal");
    m.sendSignal(signal);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t).count();
  m.progressUntil([&] { return m.inFlight == 0; }, "completion of the last stream operations");
  return m.first ? static_cast<double>(bytes) * iters / seconds / 1e9 : 0;
}

#else  // no libfabric in this build

bool rawLibfabricAvailable() { return false; }

struct RawFabricPair::Impl {};

RawFabricPair::RawFabricPair(Bootstrap&, int, const std::string&, const std::string&, uint64_t, int) {
  throw Error(ErrorCode::kNotSupported, "weft-bench was built without libfabric (CMake did not find it)");
}
RawFabricPair::~RawFabricPair() = default;
std::string RawFabricPair::description() const { return ""; }
bool RawFabricPair::offers(RawFabricSignal) const { return false; }
RawFabricSignal RawFabricPair::cheapestSignal() const { return RawFabricSignal::kWriteData; }
int RawFabricPair::checkWrite(uint64_t, uint64_t, RawFabricSignal) { return 0; }
double RawFabricPair::pingPongMicros(uint64_t, int, RawFabricSignal) { return 0; }
double RawFabricPair::streamGigabytesPerSecond(uint64_t, int) { return 0; }

#endif

}  // namespace weft::bench
