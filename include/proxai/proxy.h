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

#endif
