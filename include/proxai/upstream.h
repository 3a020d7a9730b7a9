/**
 * upstream.h - the upstream transfer interface and its two lanes.
 *
 * One px_uclient_t per loop. Each px_xfer_t is one HTTP exchange, carried by
 * a lane: the built-in HTTP/1.1 client over llhttp (the default for http://
 * and https:// upstreams: IP literals and host names resolved with
 * uv_getaddrinfo, cached 60 s; TLS on OpenSSL, verified as curl verifies) or
 * libcurl's multi interface (HTTP/2, or `client = curl`). Both lanes keep connections
 * alive per upstream and give the same callbacks, timeouts and results.
 *
 * Both lanes ask for `Accept-Encoding: identity` and hand up no framing or
 * hop-by-hop header (Content-Length, Transfer-Encoding, Connection, ...)
 * and no header whose value holds a CR, LF or NUL: the gateway frames every
 * response itself (SPEC section 10).
 *
 * Callbacks of a transfer fire on the loop thread, never after
 * px_xfer_cancel() returned, and never after on_done.
 */
#ifndef PROXAI_UPSTREAM_H
#define PROXAI_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proxai/buf.h"

typedef struct px_uclient px_uclient_t;
typedef struct px_xfer px_xfer_t;

/* Response headers (px_hdr_t, buf.h): views valid only during on_headers.
 * Names as sent. A `Content-Encoding` header among them means the body is
 * encoded (it is handed up only when not `identity`): the body must not be
 * passed on as if it were plain. */

/** on_data return value asking to pause the transfer. The bytes of that
 *  call are NOT consumed: curl delivers them again after px_xfer_resume(). */
#define PX_XFER_PAUSE 1

/** Transfer outcome passed to on_done. */
typedef enum px_xfer_result {
  PX_XFER_OK = 0,              /**< complete response received */
  PX_XFER_ECONNECT,            /**< could not connect / resolve / TLS */
  PX_XFER_ETIMEOUT_CONNECT,    /**< connect_timeout */
  PX_XFER_ETIMEOUT_FIRST_BYTE, /**< no response headers within first_byte_timeout */
  PX_XFER_ETIMEOUT_IDLE,       /**< gap between body bytes > idle_timeout */
  PX_XFER_ERECV,               /**< connection reset / truncated body */
  PX_XFER_EOTHER,              /**< anything else */
  PX_XFER_EPROTO,              /**< the upstream broke HTTP framing: invalid
                                    chunked encoding, both Content-Length and
                                    Transfer-Encoding, a malformed head */
} px_xfer_result_t;

/** Which lane carries an upstream's transfers (the config's `client`). */
typedef enum px_xfer_client {
  PX_XFER_CLIENT_AUTO = 0,    /**< built-in for http:// and https://, curl for
                                   HTTP/2 and what the built-in lane cannot
                                   take (other methods, unusual URLs) */
  PX_XFER_CLIENT_CURL = 1,    /**< always libcurl */
  PX_XFER_CLIENT_BUILTIN = 2, /**< as AUTO */
} px_xfer_client_t;

typedef struct px_xfer_cbs {
  /** Response status line and headers complete (fires once, before any
   *  on_data). Return 0, or non-zero to cancel the transfer (on_done is then
   *  NOT called). */
  int (*on_headers)(void *arg, int status, const px_hdr_t *hdrs, size_t n);
  /** Body bytes as they arrive (after transfer decoding). Return 0
   *  (consumed), PX_XFER_PAUSE (not consumed, pause) or <0 (abort: on_done
   *  follows with PX_XFER_EOTHER). */
  int (*on_data)(void *arg, const char *p, size_t n);
  /** Transfer finished; errmsg is a short text for logs (no secrets). The
   *  transfer is freed right after this returns. */
  void (*on_done)(void *arg, px_xfer_result_t result, const char *errmsg);
} px_xfer_cbs_t;

/** Length of px_xfer_opts_t.trace_line: "traceparent: " and a version-00
 *  value (trace.h's PX_TRACEPARENT_LEN). */
#define PX_XFER_TRACE_LINE_LEN 68

typedef struct px_xfer_opts {
  const char *method; /**< "POST" or "GET" */
  const char *url;
  const char *const *headers; /**< "Name: value" lines, NULL-terminated; the
                                   caller keeps them alive until on_done/cancel */
  int headers_checked;        /**< 1: every line passes px_header_value_ok (the
                                   caller checked it): not checked again */
  const char *trace_line;     /**< NULL, or a "traceparent: <value>" line of
                                   PX_XFER_TRACE_LINE_LEN bytes (NUL-terminated)
                                   the caller wrote and keeps alive as the
                                   headers: sent after them as it is (its
                                   value may be written until the start) */
  const char *body;           /**< caller keeps it alive until on_done/cancel */
  size_t body_len;            /**< the whole body's length (parts included) */
  const px_str_t *body_parts; /**< NULL: the body is body; else it is these
                                   parts one after the other (a translated
                                   body with spans of the client's): the
                                   caller keeps them and the array alive
                                   until on_done/cancel */
  size_t body_nparts;
  uint64_t connect_timeout_ms;
  uint64_t first_byte_timeout_ms;
  uint64_t idle_timeout_ms;
  int http2;                /**< 0: HTTP/1.1 only; 1: negotiate h2 */
  const char *ca_file;      /**< CA bundle for HTTPS; NULL = system default */
  int tls_no_verify;        /**< 1: skip peer and host name verification */
  const char *pool;         /**< name of the connection limit group */
  unsigned max_connections; /**< per pool; excess transfers wait FIFO; 0 = no limit */
  int client;               /**< px_xfer_client_t; PROXAI_UPSTREAM_CLIENT=curl in the
                                 environment makes AUTO mean curl (tests) */
} px_xfer_opts_t;

/** Create the client on loop. NULL on failure. */
px_uclient_t *px_uclient_new(uv_loop_t *loop);
/** Cancel every transfer (no callbacks), close handles; cb (may be NULL)
 *  fires when all handles are closed and the client is freed. */
void px_uclient_close(px_uclient_t *c, void (*cb)(void *arg), void *arg);
/** Number of transfers running or queued. */
size_t px_uclient_active(const px_uclient_t *c);

/** Start a transfer (it may wait in the pool's queue). NULL on failure
 *  (no callback fires then). */
px_xfer_t *px_xfer_start(px_uclient_t *c, const px_xfer_opts_t *o,
                         const px_xfer_cbs_t *cbs, void *arg);
/** Resume a transfer paused by on_data. Safe to call from any loop callback
 *  (from inside this transfer's callbacks it defers itself).
 *  on_data may run before this returns. */
void px_xfer_resume(px_xfer_t *x);
/** From on_headers on: the exact number of body bytes the transfer will
 *  deliver when the upstream framed its body by a Content-Length (the lane
 *  enforces it: fewer bytes end in PX_XFER_ERECV), else -1 (chunked, ended
 *  by close, 204/304). A length to reuse for the client's framing, never
 *  the upstream's header itself. */
int64_t px_xfer_content_length(const px_xfer_t *x);
/** Whether the transfer is paused. */
int px_xfer_paused(const px_xfer_t *x);
/** Stop the transfer now; no callback fires afterwards. Safe from inside its
 *  own callbacks. The connection is closed, not reused. */
void px_xfer_cancel(px_xfer_t *x);

#endif
