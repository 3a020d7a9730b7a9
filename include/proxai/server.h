/**
 * server.h - listener, client connections, inbound HTTP/1.1 (llhttp) and the
 * response writer (status line, headers, Content-Length or chunked body, a
 * write queue with high/low water marks).
 *
 * Ownership: the px_server_t owns its connections; a connection owns its
 * current px_req_t. The server runs on a worker (worker.h: loop,
 * configuration, draining) and knows nothing above it: requests go to
 * on_request, the bodies of its own early errors come from on_early_error.
 * The request handler attaches its own context through px_conn_set_handler()
 * and must stop touching the connection after on_close fired.
 */
#ifndef PROXAI_SERVER_H
#define PROXAI_SERVER_H

#include <llhttp.h>
#include <stdint.h>
#include <uv.h>

#include "proxai/buf.h"

typedef struct px_config px_config_t;         /* config.h */
typedef struct px_worker px_worker_t;         /* worker.h */
typedef struct px_access_rec px_access_rec_t; /* log.h */

typedef struct px_server px_server_t;
typedef struct px_conn px_conn_t;

/** Client write queue: above HIGH the upstream is paused, below LOW it is
 *  resumed. */
#define PX_WQ_HIGH (256u * 1024)
#define PX_WQ_LOW (64u * 1024)

/** One inbound request, valid until the response ends. */
typedef struct px_req {
  int method;          /**< llhttp_method_t */
  px_buf_t url;        /**< path and query, NUL-terminated */
  size_t path_len;     /**< length of the path part of url */
  px_buf_t hbuf;       /**< header names and values, NUL-separated */
  px_hdr_t *hdrs;      /**< views into hbuf, resolved when headers complete */
  size_t nhdrs;
  size_t hdrs_size;
  px_buf_t body;       /**< NUL-terminated */
  int keep_alive;
  char request_id[72];
  uint64_t start_ns;   /**< uv_hrtime() at first byte */
  /** The W3C trace context headers (SPEC 15), the last of each, noted by
   *  the head's one pass over its fields; len 0: absent. */
  px_str_t traceparent, tracestate;
} px_req_t;

/** Header value by case-insensitive name, or NULL. NUL-terminated. */
const char *px_req_header(const px_req_t *r, const char *name);

/** What the request handler gets told by the connection. */
typedef struct px_conn_handler {
  void (*on_drain)(void *arg);   /**< write queue fell below PX_WQ_LOW */
  void (*on_close)(void *arg);   /**< client gone; stop using the conn */
} px_conn_handler_t;

/** Handle one complete request; the handler answers with px_resp_*(). */
typedef void (*px_request_fn)(px_worker_t *w, px_conn_t *c, px_req_t *r);

/** The body of an error the server answers itself, before any request
 *  handler exists (a limit, a timeout, a malformed head): for the request
 *  target's path, status and message, into out. 0, or <0 for the server's
 *  plain text line. */
typedef int (*px_early_error_fn)(px_buf_t *out, px_str_t path, int status, const char *msg,
                                 const char *request_id);

/** The client side of one worker: its listeners and connections. */
struct px_server {
  px_worker_t *w;            /**< loop, current configuration, draining */
  px_request_fn on_request;
  px_early_error_fn on_early_error; /**< NULL: plain text */
  uv_handle_t *listener;     /**< uv_tcp_t or uv_pipe_t */
  uv_handle_t *admin;        /**< admin_listen (/metrics), or NULL */
  size_t nconns;
  size_t active;             /**< requests in flight */
  struct px_conn *conns;     /**< intrusive list */
  void (*on_idle)(px_server_t *s); /**< draining and no request in flight */
};

/** Start listening on cfg->server.listen (fd >= 0: use that bound socket).
 *  Returns 0 or a negative error; errmsg filled. */
int px_server_listen(px_server_t *s, char *errmsg, size_t len);
/** Bind the unix: listeners of cfg once, before forking workers, so that
 *  they all accept on one socket. Returns 0 or a negative error; errmsg
 *  filled. */
int px_server_prebind(const px_config_t *cfg, char *errmsg, size_t len);
/** Stop accepting; close idle connections; in-flight ones close when their
 *  response ends. */
void px_server_drain(px_server_t *s);
/** Close the listener and every connection; graceful: connections still
 *  flushing a finished response close when their writes are done. */
void px_server_close_all(px_server_t *s, int graceful);

void px_conn_set_handler(px_conn_t *c, const px_conn_handler_t *h, void *arg);
/** Bytes queued to the client and not yet written. */
size_t px_conn_pending(const px_conn_t *c);
px_server_t *px_conn_server(const px_conn_t *c);
/** Whether the connection came in on admin_listen. */
int px_conn_is_admin(const px_conn_t *c);

/** Start the response. content_length < 0: chunked. Extra headers are
 *  "Name: value" pairs. x-request-id is added here. */
int px_resp_start(px_conn_t *c, int status, const px_hdr_t *hdrs, size_t n,
                  int64_t content_length);
/** p is a malloc'd buffer the server takes (px_resp_write) */
#define PX_RESP_TAKE 1u
/** Append body bytes: the one write path of every response body (framed
 *  chunked when the response is). Without PX_RESP_TAKE the bytes are copied
 *  when they cannot leave at once; with it, p (malloc'd) belongs to the
 *  server from the call on: freed once written, or at once on failure. For
 *  large pieces. */
int px_resp_write(px_conn_t *c, const char *p, size_t n, unsigned flags);
/** End the response; the connection goes on with the next request or
 *  closes. The request is freed; the handler must not use it afterwards. */
void px_resp_end(px_conn_t *c);
/** Abort: close the connection without ending the response properly. */
void px_resp_abort(px_conn_t *c);
/** Whole response in one call. */
int px_resp_simple(px_conn_t *c, int status, const char *content_type,
                   const char *body, size_t len, const px_hdr_t *hdrs, size_t n);
/** Bytes of the current response (head, framing and body) actually written
 *  to the socket so far, not merely queued (for the access log). */
uint64_t px_conn_bytes_out(const px_conn_t *c);

/** Write the access log record of the current response once its last byte
 *  was written (or the connection closed), with bytes_out set to the bytes
 *  actually written. The record is copied. */
void px_conn_access_log(px_conn_t *c, const px_access_rec_t *r);

/** Serve an already connected stream socket (AF_UNIX) as a client
 *  connection, as if accepted: for tests and the request fuzz target. The
 *  server takes the descriptor. 0 or a negative error. */
int px_server_adopt_fd(px_server_t *s, int fd);

#endif
