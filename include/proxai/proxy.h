/**
 * proxy.h - the protocol-neutral request core (routing, auth, retries,
 * fallbacks, pass-through and translation of answers, finalize).
 */
#ifndef PROXAI_PROXY_H
#define PROXAI_PROXY_H

#include "proxai/server.h"

/** The server's request handler: answers every endpoint of SPEC section 4. */
void px_proxy_request(px_worker_t *w, px_conn_t *c, px_req_t *r);
/** The server's early errors, in the error shape of the protocol the path
 *  names (else the default protocol's), like every error the gateway
 *  writes. */
int px_proxy_early_error(px_buf_t *out, px_str_t path, int status, const char *msg,
                         const char *request_id);

/** Starts this worker's trace exporter (SPEC 15) on the worker's loop and
 *  upstream client; it sends only while [trace] is configured. */
void px_trace_export_start(px_worker_t *w);
/** Stops it before the upstream client closes: a batch in flight or
 *  waiting is dropped (counted); a drain in progress is abandoned (its
 *  callback never runs). */
void px_trace_export_stop(void);
/** A draining worker's last export: the spans waiting are sent (up to the
 *  export deadline), then the exporter stops and cb(arg) runs (at once when
 *  nothing waits). */
void px_trace_export_drain(void (*cb)(void *arg), void *arg);

#endif
