/**
 * upstream.h - upstream HTTP client: libcurl multi driven by a libuv loop.
 *
 * One px_uclient_t per loop owns the CURLM handle, one uv_timer_t for curl's
 * timeout and one uv_poll_t per socket curl asks about. Each px_xfer_t is one
 * HTTP exchange (one easy handle, reused connections from the multi's pool).
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

/** Response header: views valid only during on_headers. Names as sent. */
typedef struct px_hdr {
  px_str_t name;
  px_str_t value;
} px_hdr_t;

/** on_data return value asking to pause the transfer. The bytes of that
 *  call are NOT consumed: curl delivers them again after px_xfer_resume(). */
#define PX_XFER_PAUSE 1

/** Transfer outcome passed to on_done. */
typedef enum px_xfer_result {
  PX_XFER_OK = 0,             /**< complete response received */
  PX_XFER_ECONNECT,           /**< could not connect / resolve / TLS */
  PX_XFER_ETIMEOUT_CONNECT,   /**< connect_timeout */
  PX_XFER_ETIMEOUT_FIRST_BYTE,/**< no response headers within first_byte_timeout */
  PX_XFER_ETIMEOUT_IDLE,      /**< gap between body bytes > idle_timeout */
  PX_XFER_ERECV,              /**< connection reset / truncated body */
  PX_XFER_EOTHER,             /**< anything else */
} px_xfer_result_t;

typedef struct px_xfer_cbs {
  /** Response status line and headers complete (fires once, before any
   *  on_data). Return 0, or non-zero to cancel the transfer (on_done is then
   *  NOT called). */
  int (*on_headers)(void *arg, int status, const px_hdr_t *hdrs, size_t n);
  /** Body bytes as they arrive (after content/transfer decoding). Return 0
   *  (consumed), PX_XFER_PAUSE (not consumed, pause) or <0 (abort: on_done
   *  follows with PX_XFER_EOTHER). */
  int (*on_data)(void *arg, const char *p, size_t n);
  /** Transfer finished; errmsg is a short text for logs (no secrets). The
   *  transfer is freed right after this returns. */
  void (*on_done)(void *arg, px_xfer_result_t result, const char *errmsg);
} px_xfer_cbs_t;

typedef struct px_xfer_opts {
  const char *method;        /**< "POST" or "GET" */
  const char *url;
  const char *const *headers;/**< "Name: value" lines, NULL-terminated */
  const char *body;          /**< caller keeps it alive until on_done/cancel */
  size_t body_len;
  uint64_t connect_timeout_ms;
  uint64_t first_byte_timeout_ms;
  uint64_t idle_timeout_ms;
  int http2;                 /**< 0: HTTP/1.1 only; 1: negotiate h2 */
  const char *ca_file;       /**< CA bundle for HTTPS; NULL = system default */
  int tls_no_verify;         /**< 1: skip peer and host name verification */
  const char *pool;          /**< name of the connection limit group */
  unsigned max_connections;  /**< per pool; excess transfers wait FIFO; 0 = no limit */
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
 *  (not from inside this transfer's curl callbacks: it then defers itself).
 *  on_data may run before this returns. */
void px_xfer_resume(px_xfer_t *x);
/** Whether the transfer is paused. */
int px_xfer_paused(const px_xfer_t *x);
/** Stop the transfer now; no callback fires afterwards. Safe from inside its
 *  own callbacks. The connection is closed, not reused. */
void px_xfer_cancel(px_xfer_t *x);

#endif
