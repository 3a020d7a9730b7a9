/* server_int.h - what the two halves of the client HTTP/1.1 server share
 * (not installed): server.c reads requests (listeners, connections,
 * llhttp, limits, timers, keep-alive and pipelining, lingering close);
 * server_write.c writes responses (head, body framing, the write queue,
 * the send timeout, the access log once the bytes are out). The reader
 * sits above: it calls the writer by name, the writer calls back through
 * the connection's px_srv_reader_t. */
#ifndef PROXAI_SERVER_INT_H
#define PROXAI_SERVER_INT_H

#include "proxai/log.h"
#include "proxai/server.h"
#include "proxai/worker.h"

#define PX_MAX_PIPELINED (1u << 20) /* unread input kept while busy */
#define PX_MAX_URL 16384            /* request target -> 414 */
#define PX_MAX_CHUNK_EXT 4096       /* chunk extension bytes in one request */
#define PX_LINGER_MS 2000           /* lingering close: longest drain */
#define PX_LINGER_MAX (8u << 20)    /* lingering close: most bytes drained */
#define PX_BODY_PRESIZE (1u << 20)  /* body buffer sized from Content-Length */
#define PX_HEAD_READ 4096           /* a new request's first read: at most */

/* deferred jobs run by t_tick on the next loop iteration */
enum { TICK_FLUSH_HEAD = 1, TICK_FAIL = 2, TICK_RESUME = 4 };

/* where the raw head scan is (obs-fold detection, see head_scan) */
enum { HS_PRE, HS_LINE, HS_SOL, HS_CR, HS_BODY };

typedef enum { C_IDLE, C_READING, C_BUSY } conn_state_t;

typedef struct hdr_off {
  size_t no, nl, vo, vl;
} hdr_off_t;

/* server.c: what the reading half does when the writing half reports; the
 * writer (the lower half) calls it through c->rd, never by name */
typedef struct px_srv_reader {
  void (*close)(px_conn_t *c);              /* close (idempotent) */
  void (*tick)(px_conn_t *c, unsigned job); /* run TICK_* on the next iteration */
  void (*flushed)(px_conn_t *c);            /* the write queue is empty */
  void (*request_done)(px_conn_t *c);       /* the response ended: next request */
} px_srv_reader_t;

typedef struct wreq {
  uv_write_t req;
  px_conn_t *conn;
  size_t len;
  char *owned;     /* a body handed over (PX_RESP_TAKE), or NULL */
  unsigned gen;    /* resp_gen when queued */
  char data[];
} wreq_t;

struct px_conn {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_timer_t t_read;       /* head/body deadline, then lingering deadline */
  uv_timer_t t_idle;       /* keep-alive idle, nothing queued */
  uv_timer_t t_send;       /* send timeout, bytes queued */
  uint64_t queued;         /* bytes ever handed to the kernel or uv_write */
  uint64_t send_mark;      /* bytes_taken() when t_send was armed */
  uv_timer_t t_tick;       /* 0 ms deferred jobs (TICK_*) */
  unsigned tick_jobs;
  uv_shutdown_t shut;
  int open_handles;
  int admin; /* accepted on admin_listen */
  px_server_t *srv;
  llhttp_t parser;
  conn_state_t state;
  px_req_t req;
  hdr_off_t *offs;
  size_t noffs, offs_size;
  int last_was_value;
  int trailers;            /* the head is parsed: header callbacks now carry
                            * a chunked body's trailer fields, never stored */
  size_t chunk_ext;        /* chunk extension bytes of this request */
  int body_direct;         /* a Content-Length body is being read: libuv
                            * reads it straight into req.body (on_alloc) */
  int head_scan;           /* HS_*: raw head bytes seen so far */
  size_t head_bytes;
  int err_status;          /* error found by a parser callback */
  const char *err_msg;     /* its message (static), or NULL */
  int eof;                 /* the client half-closed while idle */
  px_buf_t in;             /* bytes read while busy */
  size_t in_off;           /* of them, those already fed to the parser */
  int reading;             /* uv_read_start active */
  int closing;
  int failing;             /* a write failed: close on the next tick */
  int close_after_flush;
  int linger;              /* close lingering once flushed */
  int lingering;           /* write side shut down, draining input */
  size_t linger_bytes;
  int resp_started, resp_chunked;
  px_buf_t head;           /* response head held back for the first body bytes */
  int head_pending;
  size_t pending;
  int above_high;
  uint64_t bytes_out;      /* bytes of the current response written */
  unsigned resp_gen;       /* which response a queued write belongs to */
  px_access_rec_t *log;    /* access log record waiting for the last byte */
  const px_conn_handler_t *handler;
  void *harg;
  const px_srv_reader_t *rd; /* the reading half (server.c) */
  struct px_conn *next, *prev;
};

/* server_write.c */
/* every byte to the client: bufs (the held-back head first, if any), what
 * the socket takes at once, the rest queued; owned (may be NULL) is a
 * malloc'd buffer among bufs, freed once written */
int px_srv_send(px_conn_t *c, uv_buf_t *bufs, unsigned n, char *owned, size_t owned_len);
int px_srv_write(px_conn_t *c, const char *p, size_t n); /* one piece, copied */
void px_srv_log_emit(px_conn_t *c); /* the waiting access log line, if any */
int px_srv_header_name_ok(const char *p, size_t n); /* RFC 9110 token */

#endif
