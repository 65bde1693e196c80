/*
 * weft transport plugin C ABI, major version 1.
 *
 * FROZEN: once released, this header never changes except by appending entries at the end of a table (a minor
 * addition). Core detects appended entries through `structSize` and calls one only when the plugin's table covers it.
 * A breaking change makes transport_v2.h beside this file.
 *
 * Rules of the ABI: only fixed-width integers, opaque `void*` objects and fixed-size character or byte blobs cross it;
 * no C enums, no bool, no C++ types. Every function returns a weftResult_t; outputs are written only on success; no
 * C++ exception ever escapes a plugin. After a failure, lastError() gives the calling thread's message.
 */
#ifndef WEFT_PLUGIN_TRANSPORT_V1_H_
#define WEFT_PLUGIN_TRANSPORT_V1_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Result codes (shared by every major version: a later header repeats them with the same values) ---- */

/** What every ABI function returns. */
typedef int32_t weftResult_t;

#define weftSuccess ((weftResult_t)0)         /**< the call did what it was asked */
#define weftNotSupported ((weftResult_t)1)    /**< this plugin or device does not offer the operation */
#define weftInvalidArgument ((weftResult_t)2) /**< an argument or blob is malformed, out of bounds or NULL */
#define weftSystemError ((weftResult_t)3)     /**< an operating-system call failed (lastError carries errno text) */
#define weftTimeout ((weftResult_t)4)         /**< the call ran out of its time budget */
#define weftRemoteError ((weftResult_t)5)     /**< the peer is gone, refused, or answered something malformed */
#define weftInternalError ((weftResult_t)6)   /**< a broken invariant inside the plugin */
#define weftOutOfMemory ((weftResult_t)7)     /**< an allocation failed */
#define weftInvalidUsage ((weftResult_t)8)    /**< the call is not allowed in the object's current state */

/* ---- Versioning ---- */

/** The major ABI version this header describes; a table of another major version is refused by core. */
#define weftTransportAbiVersion_v1 ((uint32_t)1)

/** Capacity, in bytes, of every blob output buffer core passes (endpoint and memory blobs must fit). */
#define weftBlobMaxBytes_v1 ((uint64_t)1024)

/** Capacity of fixed-size name fields, including the terminating NUL. */
#define weftNameMaxBytes_v1 64

/* ---- Host services: what core offers a plugin, so that the plugin never links libweft ---- */

/** Log levels for weftHostServices_v1.log. */
#define weftLogTrace ((int32_t)0)
#define weftLogDebug ((int32_t)1)
#define weftLogInfo ((int32_t)2)
#define weftLogWarn ((int32_t)3)
#define weftLogError ((int32_t)4)

/** Services core passes into init. Valid from init until finalize returns. */
typedef struct weftHostServices_v1 {
  uint32_t structSize; /**< sizeof(weftHostServices_v1) as core compiled it */
  uint32_t abiVersion; /**< weftTransportAbiVersion_v1 */
  /** Opaque pointer core wants back as the first argument of every service. */
  void* context;
  /**
   * Writes one log line (`message`: NUL-terminated, lowercase, no trailing newline) at `level` (weftLog*).
   * Non-blocking apart from the log sink's I/O; thread-safe; copies `message` before returning.
   * NULL means core offers no logger: the plugin stays silent.
   */
  void (*log)(void* context, int32_t level, const char* message);
} weftHostServices_v1;

/* ---- Devices ---- */

/** Device flags (weftDeviceInfo_v1.flags). */
#define weftDeviceHostMemory ((uint64_t)1) /**< can register and reach host (CPU) memory */
#define weftDeviceGpuMemory ((uint64_t)2)  /**< can register and reach GPU memory */
#define weftDeviceLoadStore ((uint64_t)4)  /**< importMemory maps peer memory for load/store in this process */
/** With weftDeviceGpuMemory: GPU memory registers only as a write source (copied through host memory), so a
 *  peer cannot write or add into this device's GPU memory. Added in ABI 1.1; older plugins never set it. */
#define weftDeviceGpuSourceOnly ((uint64_t)8)

/** What a device offers. Core sets structSize and abiVersion before the call; the plugin fills the rest. */
typedef struct weftDeviceInfo_v1 {
  uint32_t structSize;
  uint32_t abiVersion;
  char name[weftNameMaxBytes_v1]; /**< NUL-terminated, e.g. "host", "mlx5_0", "efa0" */
  uint64_t flags;                 /**< weftDevice* bits */
  int32_t numaNode;               /**< NUMA node the device is attached to, -1 when unknown */
  int32_t gpuDevice;              /**< GPU ordinal the device belongs to, -1 for none */
} weftDeviceInfo_v1;

/* ---- Memory ---- */

/** Memory kinds (weftMemoryDescriptor_v1.kind). */
#define weftMemoryHost ((uint32_t)0) /**< CPU memory */
#define weftMemoryGpu ((uint32_t)1)  /**< GPU memory of weftMemoryDescriptor_v1.gpuDevice */

/** A buffer to register. Read by registerMemory during the call only. */
typedef struct weftMemoryDescriptor_v1 {
  uint32_t structSize;
  uint32_t abiVersion;
  uint64_t address;  /**< first byte of the buffer in this process */
  uint64_t size;     /**< length in bytes, > 0 */
  uint32_t kind;     /**< weftMemoryHost or weftMemoryGpu */
  int32_t fd;        /**< a file (memfd, dma-buf) backing the buffer, -1 if none; the plugin dup()s what it keeps */
  uint64_t fdOffset; /**< offset of `address` inside `fd` (0 when fd is -1) */
  int32_t gpuDevice; /**< GPU ordinal for weftMemoryGpu, -1 for host memory */
  uint32_t reserved; /**< 0 */
} weftMemoryDescriptor_v1;

/* ---- The operations table ---- */

/**
 * A transport plugin: one table per plugin, returned by the entry point named in transport.h. The table and its
 * strings are static: they live as long as the shared object is loaded.
 *
 * Objects: `state` (one per init), `endpoint`, `connection`, `memory` (a local registration) and `remote` (an imported
 * peer registration) are opaque pointers owned by the plugin, freed by the matching destroy/close/deregister/release.
 * Children must be freed before their parents (connections before their endpoint; everything before finalize).
 *
 * Thread safety, unless an entry says otherwise: init and finalize are not called concurrently with anything on the
 * same state; every other entry may be called from several threads at once, also on the same object, except that an
 * object is never used concurrently with (or after) its own destruction.
 *
 * Operations that do not apply point at a stub that returns weftNotSupported (see weftNotSupported*_v1 below).
 */
typedef struct weftTransport_v1 {
  uint32_t structSize;            /**< sizeof the plugin's table; entries beyond it do not exist */
  uint32_t abiVersion;            /**< weftTransportAbiVersion_v1 */
  char name[weftNameMaxBytes_v1]; /**< NUL-terminated transport name, equal to <name> in libweft-transport-<name>.so */

  /**
   * Text of the calling thread's most recent failure in this plugin ("" when none), for core's error message.
   * Never NULL. Valid until this thread's next call into the plugin. Thread-safe (thread-local), non-blocking.
   */
  const char* (*lastError)(void);

  /**
   * Starts an instance. `host` is valid until finalize. Options: `numOptions` key/value pairs of NUL-terminated
   * strings (keys[i] = values[i]), read during the call only; an unknown key is weftInvalidArgument. On success
   * `*state` gets the new instance. May block briefly (opening devices, starting service threads).
   */
  weftResult_t (*init)(const weftHostServices_v1* host, uint64_t numOptions, const char* const* keys,
                       const char* const* values, void** state);

  /** Stops an instance and frees everything it still holds (threads joined, files closed). Blocks until done. */
  weftResult_t (*finalize)(void* state);

  /** Number of devices this instance drives, into `*count`. Non-blocking. */
  weftResult_t (*deviceCount)(void* state, uint32_t* count);

  /**
   * Describes device `device` (< deviceCount) into `*info`, whose structSize/abiVersion core has set; the plugin
   * writes only the fields that structSize covers. Non-blocking.
   */
  weftResult_t (*deviceInfo)(void* state, uint32_t device, weftDeviceInfo_v1* info);

  /**
   * Creates an endpoint on `device`, into `*endpoint`, and writes the bytes a peer needs to connect to it into
   * `blob` (capacity `blobCapacity` >= weftBlobMaxBytes_v1), its length into `*blobUsed`. The blob holds no pointers
   * meaningful to the peer; it is opaque to core. May block briefly.
   */
  weftResult_t (*createEndpoint)(void* state, uint32_t device, void** endpoint, void* blob, uint64_t blobCapacity,
                                 uint64_t* blobUsed);

  /** Frees an endpoint that has no open connections left. */
  weftResult_t (*destroyEndpoint)(void* endpoint);

  /**
   * Connects local `endpoint` with the peer endpoint described by `peerBlob` (`peerBlobBytes` long, read during the
   * call only), into `*connection`. Both sides call connect with the other's blob; it may block until the peer does,
   * at most `timeoutNs` nanoseconds (then weftTimeout). A blob from another transport or host is weftInvalidArgument.
   * Core confirms to each side that the other's connect returned before either uses the connection, so a plugin may
   * open its connection from one side inside connect and rely on the other sending nothing before that is done.
   */
  weftResult_t (*connect)(void* endpoint, const void* peerBlob, uint64_t peerBlobBytes, uint64_t timeoutNs,
                          void** connection);

  /** Closes a connection. Writes not yet flushed may be lost. Blocks only to release resources. */
  weftResult_t (*closeConnection)(void* connection);

  /**
   * Registers the buffer `*desc` (read during the call only), into `*memory`, and writes the bytes a peer needs to
   * import it into `blob` (as for createEndpoint). The buffer must stay allocated until deregisterMemory.
   * A buffer the plugin cannot reach (wrong kind, no backing file it needs) is weftNotSupported with lastError saying
   * what it needs. May block (pinning).
   */
  weftResult_t (*registerMemory)(void* state, const weftMemoryDescriptor_v1* desc, void** memory, void* blob,
                                 uint64_t blobCapacity, uint64_t* blobUsed);

  /** Frees a registration. Peers that imported it must not access it afterwards (the owner's protocol ensures it). */
  weftResult_t (*deregisterMemory)(void* memory);

  /**
   * Imports a peer's registration from its blob (`blobBytes` long, read during the call only; malformed or
   * tampered input is weftInvalidArgument or weftRemoteError, never a crash), into `*remote`. `*mappedAddress` gets the
   * peer buffer's address in this process when the device has weftDeviceLoadStore, else 0. Blocks at most `timeoutNs`
   * nanoseconds talking to the owner; an owner that has exited is weftRemoteError.
   */
  weftResult_t (*importMemory)(void* state, const void* blob, uint64_t blobBytes, uint64_t timeoutNs, void** remote,
                               uint64_t* mappedAddress);

  /** Frees an imported registration (unmaps it). No write through it may be outstanding. */
  weftResult_t (*releaseMemory)(void* remote);

  /**
   * Copies `bytes` bytes from local registration `srcMemory` at `srcOffset` to imported `dstRemote` at `dstOffset`
   * over `connection`. Out-of-bounds ranges are weftInvalidArgument. May return before the data has arrived: it is
   * complete after a later flush on the same connection succeeds. The source must not change until then.
   */
  weftResult_t (*write)(void* connection, void* dstRemote, uint64_t dstOffset, void* srcMemory, uint64_t srcOffset,
                        uint64_t bytes);

  /**
   * Atomically adds `value` to the 64-bit word at `dstOffset` (8-byte aligned, else weftInvalidArgument) of
   * `dstRemote`: the signal. Ordered after every write on `connection` that returned before this call began: a peer
   * that sees the added value also sees those writes. May return before it is performed (complete after flush).
   */
  weftResult_t (*atomicAdd)(void* connection, void* dstRemote, uint64_t dstOffset, uint64_t value);

  /**
   * Blocks until every write and atomicAdd on `connection` that returned before this call began is complete at the
   * destination, at most `timeoutNs` nanoseconds (then weftTimeout; the operations stay pending).
   */
  weftResult_t (*flush)(void* connection, uint64_t timeoutNs);

  /* ---- Version 1.1 (appended; a 1.0 table ends before this, and core then never calls it) ---- */

  /**
   * Optional (NULL: the transport progresses by itself). Drives the instance's progress once from the calling thread
   * and sets `*handled` to the number of events it handled (completions, peers' signals applied). For transports
   * whose target side moves only while someone reads its completion queue (libfabric's manual-progress providers):
   * core's proxy threads call it while they wait for triggers, so that the plugin may let its own progress thread
   * rest instead of spinning beside them. Thread-safe; non-blocking.
   */
  weftResult_t (*progress)(void* state, uint32_t* handled);
} weftTransport_v1;

/** Smallest structSize core accepts for a v1 table: every entry of version 1.0. */
#define weftTransportMinStructSize_v1 ((uint32_t)offsetof(weftTransport_v1, progress))

/* ---- Shared not-supported stubs, one per entry shape: point an entry that does not apply at its stub ---- */

static inline weftResult_t weftNotSupportedCreateEndpoint_v1(void* state, uint32_t device, void** endpoint, void* blob,
                                                             uint64_t blobCapacity, uint64_t* blobUsed) {
  (void)state, (void)device, (void)endpoint, (void)blob, (void)blobCapacity, (void)blobUsed;
  return weftNotSupported;
}
static inline weftResult_t weftNotSupportedObject_v1(void* object) {
  (void)object;
  return weftNotSupported;
}
static inline weftResult_t weftNotSupportedConnect_v1(void* endpoint, const void* peerBlob, uint64_t peerBlobBytes,
                                                      uint64_t timeoutNs, void** connection) {
  (void)endpoint, (void)peerBlob, (void)peerBlobBytes, (void)timeoutNs, (void)connection;
  return weftNotSupported;
}
static inline weftResult_t weftNotSupportedRegisterMemory_v1(void* state, const weftMemoryDescriptor_v1* desc,
                                                             void** memory, void* blob, uint64_t blobCapacity,
                                                             uint64_t* blobUsed) {
  (void)state, (void)desc, (void)memory, (void)blob, (void)blobCapacity, (void)blobUsed;
  return weftNotSupported;
}
static inline weftResult_t weftNotSupportedImportMemory_v1(void* state, const void* blob, uint64_t blobBytes,
                                                           uint64_t timeoutNs, void** remote, uint64_t* mappedAddress) {
  (void)state, (void)blob, (void)blobBytes, (void)timeoutNs, (void)remote, (void)mappedAddress;
  return weftNotSupported;
}
static inline weftResult_t weftNotSupportedWrite_v1(void* connection, void* dstRemote, uint64_t dstOffset,
                                                    void* srcMemory, uint64_t srcOffset, uint64_t bytes) {
  (void)connection, (void)dstRemote, (void)dstOffset, (void)srcMemory, (void)srcOffset, (void)bytes;
  return weftNotSupported;
}
static inline weftResult_t weftNotSupportedAtomicAdd_v1(void* connection, void* dstRemote, uint64_t dstOffset,
                                                        uint64_t value) {
  (void)connection, (void)dstRemote, (void)dstOffset, (void)value;
  return weftNotSupported;
}
static inline weftResult_t weftNotSupportedFlush_v1(void* connection, uint64_t timeoutNs) {
  (void)connection, (void)timeoutNs;
  return weftNotSupported;
}

/** The entry point's type: returns the plugin's static table (never NULL). Thread-safe, non-blocking. */
typedef const weftTransport_v1* (*weftTransportPluginFn_v1)(void);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_PLUGIN_TRANSPORT_V1_H_ */
