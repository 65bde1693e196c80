/*
 * weft proxy handler plugin C ABI, major version 1.
 *
 * A proxy handler plugin sees every request a ProxyService's proxy threads pop from their FIFOs: before the built-in
 * handling (it may take the request over, e.g. for the custom request types) and after it (with the time it took).
 * It is a shared object exporting `weftProxyHandlerPlugin_v1`, a weftProxyHandler_v1 table, loaded by
 * ProxyService (ProxyServiceOptions::handlerPlugins) by path or by name (libweft-proxy-<name>.so on the plugin path).
 *
 * Same rules as the transport ABI (transport_v1.h, whose result codes and host services this header reuses): fixed-
 * width integers only, outputs written only on success, no exception crosses. Minor additions append to a table;
 * core calls an entry only when `structSize` covers it.
 */
#ifndef WEFT_PLUGIN_PROXY_HANDLER_H_
#define WEFT_PLUGIN_PROXY_HANDLER_H_

#include <stdint.h>
#include <weft/plugin/transport_v1.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The major ABI version this header describes. */
#define weftProxyHandlerAbiVersion_v1 ((uint32_t)1)

/** The symbol core looks up. */
#define weftProxyHandlerSymbol_v1 "weftProxyHandlerPlugin_v1"

/** Request types (weftProxyRequest_v1.type): bits put, signal and flush combine; 8 and up are single operations. */
#define weftProxyPut ((uint32_t)1)
#define weftProxySignal ((uint32_t)2)
#define weftProxyFlush ((uint32_t)4)
#define weftProxyAtomicAdd ((uint32_t)8)
#define weftProxyCustomFirst ((uint32_t)9) /**< 9..14: left to plugins; core fails on one no plugin handled */
#define weftProxyCustomLast ((uint32_t)14)

/** One decoded request. Valid only during the call it is passed to. */
typedef struct weftProxyRequest_v1 {
  uint32_t type;        /**< weftProxy* value */
  uint32_t channel;     /**< port channel id */
  uint64_t dstOffset;   /**< byte offset in the channel's destination memory */
  uint64_t srcOffset;   /**< byte offset in the channel's source memory */
  uint64_t size;        /**< bytes of a put; the value of an atomicAdd; free for custom types */
  uint32_t proxyThread; /**< index of the proxy thread (0..threads-1) calling */
  int32_t peer;         /**< rank of the channel's peer */
} weftProxyRequest_v1;

/** The table a proxy handler plugin exports. */
typedef struct weftProxyHandler_v1 {
  uint32_t structSize; /**< sizeof(weftProxyHandler_v1) as the plugin compiled it */
  uint32_t abiVersion; /**< weftProxyHandlerAbiVersion_v1 */
  /** NUL-terminated name, e.g. "trigger_stats". */
  const char* name;
  /**
   * Makes one handler instance for one ProxyService with `threads` proxy threads and writes it into `*state`.
   * `host` stays valid until finalize returns. Blocks briefly; called once per service, before any proxy thread runs.
   */
  weftResult_t (*init)(const weftHostServices_v1* host, uint32_t threads, void** state);
  /**
   * Called by a proxy thread before core handles `request`. Writes 1 into `*handled` when the plugin did the whole
   * request itself (core then does nothing but finish the trigger), 0 to let core handle it. Must not block for long
   * (the GPU waits behind it). Called concurrently from different proxy threads (never twice at once from one).
   * NULL: the plugin never takes a request over. A result other than weftSuccess fails the proxy thread.
   */
  weftResult_t (*onRequest)(void* state, const weftProxyRequest_v1* request, uint32_t* handled);
  /**
   * Called by a proxy thread after `request` was handled (by core or by onRequest), with the nanoseconds that took.
   * Same threading as onRequest. NULL: not called.
   */
  weftResult_t (*onComplete)(void* state, const weftProxyRequest_v1* request, uint64_t elapsedNs);
  /** Called once when the service shuts down, after every proxy thread stopped; frees `state`. */
  weftResult_t (*finalize)(void* state);
} weftProxyHandler_v1;

#ifdef __cplusplus
}
#endif

#endif /* WEFT_PLUGIN_PROXY_HANDLER_H_ */
