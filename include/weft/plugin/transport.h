/*
 * weft transport plugin C ABI: the current version.
 *
 * A transport plugin is a shared object named libweft-transport-<name>.so that includes only this header (and its
 * vendor library) and exports one C function:
 *
 *     const weftTransport_v1* weftTransportPlugin_v1(void);
 *
 * returning its static operations table (see transport_v1.h for every entry's contract). Core dlopen()s the file,
 * looks up WEFT_TRANSPORT_PLUGIN_SYMBOL, checks the table's abiVersion and structSize, then calls init.
 * Declare the entry point with WEFT_TRANSPORT_PLUGIN_EXPORT so it stays visible under -fvisibility=hidden.
 */
#ifndef WEFT_PLUGIN_TRANSPORT_H_
#define WEFT_PLUGIN_TRANSPORT_H_

#include <weft/plugin/transport_v1.h>

/** The entry point core looks up with dlsym. */
#define WEFT_TRANSPORT_PLUGIN_SYMBOL "weftTransportPlugin_v1"

/** The current major ABI version and its types. */
#define weftTransportAbiVersion weftTransportAbiVersion_v1
typedef weftTransport_v1 weftTransport;
typedef weftTransportPluginFn_v1 weftTransportPluginFn;

/** Marks the entry point for export from the plugin's shared object. */
#define WEFT_TRANSPORT_PLUGIN_EXPORT __attribute__((visibility("default")))

#endif /* WEFT_PLUGIN_TRANSPORT_H_ */
