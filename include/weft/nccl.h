/// weft's NCCL-compatible C API (libweft_nccl.so). The names, enum values, struct layouts, macros and function
/// signatures are those of NCCL 2.28, so a program compiled against NVIDIA's nccl.h runs against libweft_nccl.so
/// (LD_PRELOAD, or the drop-in build whose SONAME is libnccl.so.2) and a program compiled against this header runs
/// against NVIDIA's library. test/unit/nccl_abi_test.cc checks the two headers agree.
///
/// Every function returns an ncclResult_t and never throws. What weft does natively, what it forwards to a real
/// NCCL/RCCL (the fallback) and what it refuses is described in docs/nccl.md.
///
/// Embedding: when the library is built with -DWEFT_NCCL_SYMBOL_PREFIX=<prefix> (CMake option of the same name),
/// every function is exported as <prefix><name> (e.g. weft_ncclAllReduce). Define WEFT_NCCL_SYMBOL_PREFIX to the same
/// token before including this header to declare those names.
#ifndef WEFT_NCCL_H_
#define WEFT_NCCL_H_

/* The stream type of the signatures: CUDA's own on CUDA builds, HIP's on ROCm (as RCCL does), and an opaque
 * stand-in of the same size without a GPU runtime (host builds ignore streams). */
#if defined(__HIP_PLATFORM_AMD__) && !defined(WEFT_NCCL_NO_GPU_RUNTIME)
#include <hip/hip_runtime.h>
#define WEFT_NCCL_STREAM hipStream_t
#elif !defined(WEFT_NCCL_NO_GPU_RUNTIME) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define WEFT_NCCL_STREAM cudaStream_t
#endif
#endif
#ifndef WEFT_NCCL_STREAM
typedef struct CUstream_st* cudaStream_t;
#define WEFT_NCCL_STREAM cudaStream_t
#endif

#include <limits.h>
#include <stddef.h>

/* The version this API corresponds to. NCCL_VERSION encodes as NCCL does (two schemes, split at 2.9). */
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

/* Name of an exported function: <prefix><name> when built for embedding, else the name itself. */
#define WEFT_NCCL_CONCAT_(a, b) a##b
#define WEFT_NCCL_CONCAT(a, b) WEFT_NCCL_CONCAT_(a, b)
#ifdef WEFT_NCCL_SYMBOL_PREFIX
#define WEFT_NCCL_FN(name) WEFT_NCCL_CONCAT(WEFT_NCCL_SYMBOL_PREFIX, name)
#else
#define WEFT_NCCL_FN(name) name
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator: one rank's handle on a group of ranks. */
typedef struct ncclComm* ncclComm_t;
/* A registered window (NCCL 2.27+ symmetric memory). */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The job id every rank of a communicator is given (weft: root address and job secret). */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Result codes. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* ncclCommRevoke flags (none defined yet). */
#define NCCL_REVOKE_DEFAULT 0x00

/* Per-communicator settings, NCCL 2.28 layout. Initialize with NCCL_CONFIG_INITIALIZER: size, magic and version say
 * which layout the caller was compiled with. weft reads `blocking` and `commName`; the rest is accepted and ignored
 * (or passed on to the fallback NCCL). */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                                \
  {                                                                                                            \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT                                                                                  \
  }

/* What ncclGroupSimulateEnd reports. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

/* Reductions. Values from ncclNumOps up are handles made by ncclRedOpCreatePreMulSum. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  /* The largest signed value that keeps the enum the size of ncclRedOp_dummy_t. */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Element types. */
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Memory for collectives: GPU memory of the current device (host memory in host builds). */
ncclResult_t WEFT_NCCL_FN(ncclMemAlloc)(void** ptr, size_t size);
ncclResult_t WEFT_NCCL_FN(pncclMemAlloc)(void** ptr, size_t size);
ncclResult_t WEFT_NCCL_FN(ncclMemFree)(void* ptr);
ncclResult_t WEFT_NCCL_FN(pncclMemFree)(void* ptr);

/* NCCL_VERSION_CODE of the API the library implements. */
ncclResult_t WEFT_NCCL_FN(ncclGetVersion)(int* version);
ncclResult_t WEFT_NCCL_FN(pncclGetVersion)(int* version);

/* A new job id; call on one rank and give the bytes to every rank. */
ncclResult_t WEFT_NCCL_FN(ncclGetUniqueId)(ncclUniqueId* uniqueId);
ncclResult_t WEFT_NCCL_FN(pncclGetUniqueId)(ncclUniqueId* uniqueId);

/* Joins communicator `commId` as `rank` of `nranks` on the current device (collective over the ranks). */
ncclResult_t WEFT_NCCL_FN(ncclCommInitRankConfig)(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                  ncclConfig_t* config);
ncclResult_t WEFT_NCCL_FN(pncclCommInitRankConfig)(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                   ncclConfig_t* config);
ncclResult_t WEFT_NCCL_FN(ncclCommInitRank)(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t WEFT_NCCL_FN(pncclCommInitRank)(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);

/* One communicator per listed device (devlist NULL: devices 0..ndev-1), all in this process. */
ncclResult_t WEFT_NCCL_FN(ncclCommInitAll)(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t WEFT_NCCL_FN(pncclCommInitAll)(ncclComm_t* comm, int ndev, const int* devlist);

/* Finishes outstanding work; the communicator must still be destroyed. */
ncclResult_t WEFT_NCCL_FN(ncclCommFinalize)(ncclComm_t comm);
ncclResult_t WEFT_NCCL_FN(pncclCommFinalize)(ncclComm_t comm);

/* Frees the communicator. */
ncclResult_t WEFT_NCCL_FN(ncclCommDestroy)(ncclComm_t comm);
ncclResult_t WEFT_NCCL_FN(pncclCommDestroy)(ncclComm_t comm);

/* Stops the communicator's work and frees it. */
ncclResult_t WEFT_NCCL_FN(ncclCommAbort)(ncclComm_t comm);
ncclResult_t WEFT_NCCL_FN(pncclCommAbort)(ncclComm_t comm);

/* Stops the communicator's work without freeing it (NCCL 2.28). */
ncclResult_t WEFT_NCCL_FN(ncclCommRevoke)(ncclComm_t comm, int revokeFlags);
ncclResult_t WEFT_NCCL_FN(pncclCommRevoke)(ncclComm_t comm, int revokeFlags);

/* Splits `comm` by `color` (NCCL_SPLIT_NOCOLOR: no new communicator), ranks ordered by `key` (collective). */
ncclResult_t WEFT_NCCL_FN(ncclCommSplit)(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                         ncclConfig_t* config);
ncclResult_t WEFT_NCCL_FN(pncclCommSplit)(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                          ncclConfig_t* config);

/* A new communicator of the ranks of `comm` not listed in excludeRanksList (collective over those ranks). */
ncclResult_t WEFT_NCCL_FN(ncclCommShrink)(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                          ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t WEFT_NCCL_FN(pncclCommShrink)(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                           ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);

/* InitRankConfig from several ids (NCCL spreads the bootstrap over them). */
ncclResult_t WEFT_NCCL_FN(ncclCommInitRankScalable)(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                    ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t WEFT_NCCL_FN(pncclCommInitRankScalable)(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                     ncclUniqueId* commIds, ncclConfig_t* config);

/* Text of a result code. */
const char* WEFT_NCCL_FN(ncclGetErrorString)(ncclResult_t result);
const char* WEFT_NCCL_FN(pncclGetErrorString)(ncclResult_t result);

/* The message of the last error on `comm` (NULL: of this thread's last error on any communicator). */
const char* WEFT_NCCL_FN(ncclGetLastError)(ncclComm_t comm);
const char* WEFT_NCCL_FN(pncclGetLastError)(ncclComm_t comm);

/* Reads the log settings (WEFT_LOG_LEVEL, WEFT_LOG_SUBSYS) from the environment again. Deprecated in NVIDIA's
   nccl.h, which still declares it, so programs built against that header may call it. */
void WEFT_NCCL_FN(ncclResetDebugInit)(void);
void WEFT_NCCL_FN(pncclResetDebugInit)(void);

/* The error a communicator's asynchronous work left, or ncclInProgress while a nonblocking call runs. */
ncclResult_t WEFT_NCCL_FN(ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t WEFT_NCCL_FN(pncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t* asyncError);

/* Size, device and rank of a communicator. */
ncclResult_t WEFT_NCCL_FN(ncclCommCount)(const ncclComm_t comm, int* count);
ncclResult_t WEFT_NCCL_FN(pncclCommCount)(const ncclComm_t comm, int* count);
ncclResult_t WEFT_NCCL_FN(ncclCommCuDevice)(const ncclComm_t comm, int* device);
ncclResult_t WEFT_NCCL_FN(pncclCommCuDevice)(const ncclComm_t comm, int* device);
ncclResult_t WEFT_NCCL_FN(ncclCommUserRank)(const ncclComm_t comm, int* rank);
ncclResult_t WEFT_NCCL_FN(pncclCommUserRank)(const ncclComm_t comm, int* rank);

/* Buffer registration (a hint; collectives work on unregistered buffers too). */
ncclResult_t WEFT_NCCL_FN(ncclCommRegister)(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t WEFT_NCCL_FN(pncclCommRegister)(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t WEFT_NCCL_FN(ncclCommDeregister)(const ncclComm_t comm, void* handle);
ncclResult_t WEFT_NCCL_FN(pncclCommDeregister)(const ncclComm_t comm, void* handle);

/* Symmetric window registration (collective). */
ncclResult_t WEFT_NCCL_FN(ncclCommWindowRegister)(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                  int winFlags);
ncclResult_t WEFT_NCCL_FN(pncclCommWindowRegister)(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                   int winFlags);
ncclResult_t WEFT_NCCL_FN(ncclCommWindowDeregister)(ncclComm_t comm, ncclWindow_t win);
ncclResult_t WEFT_NCCL_FN(pncclCommWindowDeregister)(ncclComm_t comm, ncclWindow_t win);

/* A sum that first multiplies each input by *scalar, for use on `comm` with `datatype` only. */
ncclResult_t WEFT_NCCL_FN(ncclRedOpCreatePreMulSum)(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                    ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t WEFT_NCCL_FN(pncclRedOpCreatePreMulSum)(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                     ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t WEFT_NCCL_FN(ncclRedOpDestroy)(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t WEFT_NCCL_FN(pncclRedOpDestroy)(ncclRedOp_t op, ncclComm_t comm);

/* Collectives: every rank of `comm` calls them in the same order with matching counts, types and roots. */
ncclResult_t WEFT_NCCL_FN(ncclReduce)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclRedOp_t op, int root, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclReduce)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclRedOp_t op, int root, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclBcast)(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                     WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclBcast)(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                      WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclBroadcast)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         int root, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclBroadcast)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                          int root, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclAllReduce)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         ncclRedOp_t op, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclAllReduce)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                          ncclRedOp_t op, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclReduceScatter)(const void* sendbuff, void* recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                             WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclReduceScatter)(const void* sendbuff, void* recvbuff, size_t recvcount,
                                              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                              WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclAllGather)(const void* sendbuff, void* recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclAllGather)(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          ncclDataType_t datatype, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclAlltoAll)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclAlltoAll)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclGather)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      int root, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclGather)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclScatter)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclScatter)(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        int root, ncclComm_t comm, WEFT_NCCL_STREAM stream);

/* Point-to-point: a send matches the receive its peer posts with the same count and type. */
ncclResult_t WEFT_NCCL_FN(ncclSend)(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                    ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclSend)(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                     ncclComm_t comm, WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(ncclRecv)(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                    WEFT_NCCL_STREAM stream);
ncclResult_t WEFT_NCCL_FN(pncclRecv)(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                     WEFT_NCCL_STREAM stream);

/* Groups: calls between Start and End (nestable) are queued on this thread and issued together at the outer End. */
ncclResult_t WEFT_NCCL_FN(ncclGroupStart)(void);
ncclResult_t WEFT_NCCL_FN(pncclGroupStart)(void);
ncclResult_t WEFT_NCCL_FN(ncclGroupEnd)(void);
ncclResult_t WEFT_NCCL_FN(pncclGroupEnd)(void);
ncclResult_t WEFT_NCCL_FN(ncclGroupSimulateEnd)(ncclSimInfo_t* simInfo);
ncclResult_t WEFT_NCCL_FN(pncclGroupSimulateEnd)(ncclSimInfo_t* simInfo);

#ifdef __cplusplus
}
#endif

#endif  // WEFT_NCCL_H_
