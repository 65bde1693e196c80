/*
 * trigger_stats: a proxy handler plugin that counts the requests proxy threads carry out, by type, with the time each
 * took, and prints a summary to stderr when the ProxyService shuts down:
 *
 *   weft trigger_stats: <type> count <n> total_us <t> mean_us <m> max_us <x>
 *
 * one line per type seen, then "weft trigger_stats: total <n>". It takes no request over (onRequest leaves them to
 * core). Written in C11 against include/weft/plugin/proxy_handler.h alone, as any outside plugin would be.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <weft/plugin/proxy_handler.h>

#define kTypes 16

typedef struct Counters {
  atomic_uint_fast64_t count;
  atomic_uint_fast64_t totalNs;
  atomic_uint_fast64_t maxNs;
} Counters;

typedef struct Stats {
  Counters byType[kTypes];
  const weftHostServices_v1* host;
} Stats;

static const char* typeName(uint32_t type) {
  switch (type) {
    case 1: return "put";
    case 2: return "signal";
    case 3: return "put+signal";
    case 4: return "flush";
    case 5: return "put+flush";
    case 6: return "signal+flush";
    case 7: return "put+signal+flush";
    case 8: return "atomic_add";
    default: return "custom";
  }
}

static weftResult_t statsInit(const weftHostServices_v1* host, uint32_t threads, void** state) {
  (void)threads;
  if (state == NULL) return weftInvalidArgument;
  Stats* s = (Stats*)calloc(1, sizeof(Stats));
  if (s == NULL) return weftOutOfMemory;
  for (int i = 0; i < kTypes; ++i) {
    atomic_init(&s->byType[i].count, 0);
    atomic_init(&s->byType[i].totalNs, 0);
    atomic_init(&s->byType[i].maxNs, 0);
  }
  s->host = host;
  *state = s;
  return weftSuccess;
}

static weftResult_t statsOnComplete(void* state, const weftProxyRequest_v1* request, uint64_t elapsedNs) {
  if (state == NULL || request == NULL) return weftInvalidArgument;
  Counters* c = &((Stats*)state)->byType[request->type % kTypes];
  atomic_fetch_add_explicit(&c->count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->totalNs, elapsedNs, memory_order_relaxed);
  uint_fast64_t seen = atomic_load_explicit(&c->maxNs, memory_order_relaxed);
  while (elapsedNs > seen && !atomic_compare_exchange_weak_explicit(&c->maxNs, &seen, elapsedNs, memory_order_relaxed,
                                                                    memory_order_relaxed)) {
  }
  return weftSuccess;
}

static weftResult_t statsFinalize(void* state) {
  Stats* s = (Stats*)state;
  if (s == NULL) return weftInvalidArgument;
  uint64_t total = 0;
  for (uint32_t t = 0; t < kTypes; ++t) {
    uint64_t n = atomic_load(&s->byType[t].count);
    if (n == 0) continue;
    uint64_t ns = atomic_load(&s->byType[t].totalNs);
    uint64_t mx = atomic_load(&s->byType[t].maxNs);
    fprintf(stderr, "weft trigger_stats: %s count %llu total_us %.3f mean_us %.3f max_us %.3f\n", typeName(t),
            (unsigned long long)n, ns / 1e3, ns / 1e3 / (double)n, mx / 1e3);
    total += n;
  }
  fprintf(stderr, "weft trigger_stats: total %llu\n", (unsigned long long)total);
  fflush(stderr);
  if (s->host != NULL && s->host->log != NULL) s->host->log(s->host->context, weftLogInfo, "trigger_stats finalized");
  free(s);
  return weftSuccess;
}

__attribute__((visibility("default"))) const weftProxyHandler_v1 weftProxyHandlerPlugin_v1 = {
    .structSize = sizeof(weftProxyHandler_v1),
    .abiVersion = weftProxyHandlerAbiVersion_v1,
    .name = "trigger_stats",
    .init = statsInit,
    .onRequest = NULL,
    .onComplete = statsOnComplete,
    .finalize = statsFinalize,
};
