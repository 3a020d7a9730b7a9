/**
 * proxy.h - the protocol-neutral request core (routing, auth, retries,
 * fallbacks, pass-through and translation of answers, finalize).
 */
#ifndef PROXAI_PROXY_H
#define PROXAI_PROXY_H

#include "proxai/server.h"

/** The server's request handler: answers every endpoint of SPEC section 4. */
void px_proxy_request(px_server_t *s, px_conn_t *c, px_req_t *r);

/** Starts this worker's trace exporter (SPEC 15) on the server's loop and
 *  upstream client; it sends only while [trace] is configured. */
void px_trace_export_start(px_server_t *s);
/** Stops it before the upstream client closes: a batch in flight or
 *  waiting is dropped (counted); a drain in progress is abandoned (its
 *  callback never runs). */
void px_trace_export_stop(void);
/** A draining worker's last export: the spans waiting are sent (up to the
 *  export deadline), then the exporter stops and cb(arg) runs (at once when
 *  nothing waits). */
void px_trace_export_drain(void (*cb)(void *arg), void *arg);

#endif
