// A program written against NVIDIA's nccl.h: every collective, a grouped send/recv ring and a split on GPU
// buffers, each result checked. Rank and size come from WEFT_RANK/WEFT_SIZE (weft-run), OMPI_COMM_WORLD_* or
// RANK/WORLD_SIZE; rank 0 writes the unique id to NCCL_CHECK_ID_FILE (default /tmp/weft-nccl-check.id) and the
// others read it. Run it with LD_PRELOAD=libweft_nccl.so to check weft, or without to check NVIDIA's NCCL.
// Exit status 0 when every check passed.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int failures = 0;

#define CHECK_CALL(call)                                                                            \
  do {                                                                                              \
    auto r_ = (call);                                                                               \
    if (r_ != 0) {                                                                                  \
      std::fprintf(stderr, "nccl_check: %s failed with %d at line %d\n", #call, (int)r_, __LINE__); \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

int envInt(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n)) return std::atoi(v);
  }
  return fallback;
}

float valueOf(int r, size_t i) { return static_cast<float>(r * 100 + static_cast<int>(i % 89)); }

void expect(bool ok, const char* what, int rank, size_t i) {
  if (!ok && failures++ < 10) std::fprintf(stderr, "nccl_check: rank %d: %s wrong at %zu\n", rank, what, i);
}

std::vector<float> download(const float* d, size_t n) {
  std::vector<float> h(n);
  CHECK_CALL(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

int main() {
  const int rank = envInt({"WEFT_RANK", "OMPI_COMM_WORLD_RANK", "RANK"}, 0);
  const int n = envInt({"WEFT_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"}, 1);
  const int local = envInt({"WEFT_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"}, rank);
  int devices = 0;
  CHECK_CALL(cudaGetDeviceCount(&devices));
  CHECK_CALL(cudaSetDevice(local % devices));
  const char* file = std::getenv("NCCL_CHECK_ID_FILE");
  const std::string path = file != nullptr ? file : "/tmp/weft-nccl-check.id";

  ncclUniqueId id;
  if (rank == 0) {
    CHECK_CALL(ncclGetUniqueId(&id));
    std::ofstream(path + ".tmp", std::ios::binary).write(id.internal, sizeof(id.internal));
    std::rename((path + ".tmp").c_str(), path.c_str());
  } else {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::ifstream in;
    while (!(in = std::ifstream(path, std::ios::binary)) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!in.read(id.internal, sizeof(id.internal))) {
      std::fprintf(stderr, "nccl_check: rank %d: no unique id in %s\n", rank, path.c_str());
      return 2;
    }
  }
  ncclComm_t comm;
  CHECK_CALL(ncclCommInitRank(&comm, n, id, rank));
  if (rank == 0) unlink(path.c_str());
  int version = 0;
  CHECK_CALL(ncclGetVersion(&version));
  cudaStream_t stream;
  CHECK_CALL(cudaStreamCreate(&stream));

  const size_t count = 1 << 20;
  std::vector<float> host(count * n);
  for (size_t i = 0; i < host.size(); ++i) host[i] = valueOf(rank, i);
  float *send, *recv;
  CHECK_CALL(cudaMalloc(&send, host.size() * sizeof(float)));
  CHECK_CALL(cudaMalloc(&recv, host.size() * sizeof(float)));
  CHECK_CALL(cudaMemcpy(send, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));

  CHECK_CALL(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
  CHECK_CALL(cudaStreamSynchronize(stream));
  std::vector<float> out = download(recv, count);
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += valueOf(r, i);
    expect(out[i] == want, "allreduce", rank, i);
  }
  CHECK_CALL(ncclAllGather(send, recv, count, ncclFloat, comm, stream));
  CHECK_CALL(cudaStreamSynchronize(stream));
  out = download(recv, count * n);
  for (size_t i = 0; i < count * n; ++i) expect(out[i] == valueOf(i / count, i % count), "allgather", rank, i);
  CHECK_CALL(ncclReduceScatter(send, recv, count, ncclFloat, ncclMax, comm, stream));
  CHECK_CALL(cudaStreamSynchronize(stream));
  out = download(recv, count);
  for (size_t i = 0; i < count; ++i) expect(out[i] == valueOf(n - 1, rank * count + i), "reducescatter", rank, i);
  CHECK_CALL(ncclBroadcast(send, recv, count, ncclFloat, n - 1, comm, stream));
  CHECK_CALL(cudaStreamSynchronize(stream));
  out = download(recv, count);
  for (size_t i = 0; i < count; ++i) expect(out[i] == valueOf(n - 1, i), "broadcast", rank, i);
  CHECK_CALL(ncclReduce(send, recv, count, ncclFloat, ncclMin, 0, comm, stream));
  CHECK_CALL(cudaStreamSynchronize(stream));
  if (rank == 0) {
    out = download(recv, count);
    for (size_t i = 0; i < count; ++i) expect(out[i] == valueOf(0, i), "reduce", rank, i);
  }
  CHECK_CALL(ncclAlltoAll(send, recv, count, ncclFloat, comm, stream));
  CHECK_CALL(cudaStreamSynchronize(stream));
  out = download(recv, count * n);
  for (size_t i = 0; i < count * n; ++i) {
    expect(out[i] == valueOf(i / count, rank * count + i % count), "alltoall", rank, i);
  }
  // A ring of sends and receives in one group.
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  CHECK_CALL(ncclGroupStart());
  CHECK_CALL(ncclSend(send, count, ncclFloat, right, comm, stream));
  CHECK_CALL(ncclRecv(recv, count, ncclFloat, left, comm, stream));
  CHECK_CALL(ncclGroupEnd());
  CHECK_CALL(cudaStreamSynchronize(stream));
  out = download(recv, count);
  for (size_t i = 0; i < count; ++i) expect(out[i] == valueOf(left, i), "send/recv ring", rank, i);
  // Split into halves; allreduce of ranks in each half.
  ncclComm_t half;
  CHECK_CALL(ncclCommSplit(comm, rank % 2, rank, &half, nullptr));
  CHECK_CALL(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, half, stream));
  CHECK_CALL(cudaStreamSynchronize(stream));
  out = download(recv, 16);
  for (size_t i = 0; i < 16; ++i) {
    float want = 0;
    for (int r = rank % 2; r < n; r += 2) want += valueOf(r, i);
    expect(out[i] == want, "split allreduce", rank, i);
  }
  CHECK_CALL(ncclCommDestroy(half));
  ncclResult_t async;
  CHECK_CALL(ncclCommGetAsyncError(comm, &async));
  expect(async == ncclSuccess, "async error", rank, 0);
  CHECK_CALL(ncclCommFinalize(comm));
  CHECK_CALL(ncclCommDestroy(comm));
  std::printf("nccl_check: rank %d of %d (version %d): %s\n", rank, n, version, failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}
