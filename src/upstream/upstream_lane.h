/**
 * upstream_lane.h - private to src/upstream*.c: the transfer core and its
 * two lanes.
 *
 * upstream.c opens a transfer and picks its lane; xfer.c, the transfer
 * core, owns what every transfer has (pool slot, queue, timers,
 * response-head filtering, body delivery, pause bookkeeping, the one
 * finish); a lane owns the bytes on the wire:
 *
 *   upstream_curl.c  libcurl multi on libuv: TLS, HTTP/2, anything unusual
 *   upstream_h1.c    built-in HTTP/1.1 over llhttp: http:// and https://
 *                    (TLS from upstream_tls.c) upstreams
 *
 * The core reaches a lane only through its px_lane_t table. A lane calls
 * back into the core through px_up_head_line() /
 * px_up_head_done(), px_up_deliver() and px_up_finish(). While a lane runs
 * code that must not be re-entered (inside a libcurl call, inside
 * llhttp_execute) it raises c->in_lane: cancels, starts and resumes asked
 * for meanwhile are deferred to px_up_after().
 */
#ifndef PROXAI_UPSTREAM_LANE_H
#define PROXAI_UPSTREAM_LANE_H

#include <curl/curl.h>
#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "proxai/upstream.h"

/** Response header block cap (curl has its own 100 KiB limit too). */
#define PX_UP_MAX_HEADER_BYTES (64 * 1024)
/** Most response headers handed to on_headers. */
#define PX_UP_MAX_HEADERS 128
/** Addresses kept per resolved name. */
#define PX_H1_MAX_ADDRS 4
/** Request headers the curl lane links without allocating. */
#define PX_CURL_INLINE_HDRS 24

typedef struct px_link {
  struct px_link *prev, *next;
} px_link_t;

#define PX_CONTAINER(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

static inline void dl_init(px_link_t *l) {
  l->prev = l->next = l;
}
static inline bool dl_empty(const px_link_t *h) {
  return h->next == h;
}
static inline bool dl_linked(const px_link_t *l) {
  return l->next != l;
}
static inline void dl_push(px_link_t *h, px_link_t *n) {
  n->prev = h->prev;
  n->next = h;
  h->prev->next = n;
  h->prev = n;
}
static inline void dl_del(px_link_t *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  dl_init(n);
}

/** A URL curl parsed once (CURLOPT_CURLU); lives as long as the client. */
typedef struct px_curl_url {
  char *url;
  CURLU *uh;
} px_curl_url_t;

#define PX_POOL_URLS 4
#define PX_POOL_FREE_EASY 64

/** Most HTTP/1.1 transfers one curl multi handle runs at once. curl 7.88
 *  looks for a reusable connection by walking every connection to the same
 *  host and port, busy ones included, at each transfer's start; beyond this
 *  many, the lane opens another multi handle (a shard) so that walk stays
 *  short (8,000 streams in one multi stalled most of them). */
#define PX_CURL_SHARD_XFERS 256

/** One curl multi handle: its own connection cache, socket hash and timer. */
typedef struct px_cshard {
  px_uclient_t *c;
  CURLM *multi;
  uv_timer_t timer; /* curl's timeout for this multi */
  unsigned nrun;    /* transfers added to it */
  unsigned nconn;   /* its connections' sockets now open */
  long maxconnects;
  bool nudge; /* a resumed transfer: socket_action due */
} px_cshard_t;

/** One connection limit group (an upstream): FIFO queue, slot count, and the
 *  curl lane's per-upstream state (idle easy handles carrying this pool's
 *  options, parsed URLs). */
typedef struct px_pool {
  px_link_t link;   /* client's pools */
  px_link_t queue;  /* FIFO of QUEUED transfers */
  unsigned max;     /* 0 = no limit */
  unsigned running; /* transfers holding a slot */
  /* curl lane */
  CURL *free_easy[PX_POOL_FREE_EASY];
  size_t nfree_easy;
  bool sig_set;     /* the options the idle handles carry */
  unsigned sig_gen; /* changes with them: older handles are not kept */
  int sig_http2, sig_noverify;
  uint64_t sig_cto;
  char *sig_ca;
  px_curl_url_t urls[PX_POOL_URLS];
  size_t nurls;
  char name[];
} px_pool_t;

typedef struct px_lane px_lane_t;
typedef struct px_h1conn px_h1conn_t;
typedef struct px_h1res px_h1res_t;

enum { XS_QUEUED, XS_RUNNING, XS_DONE };

struct px_xfer {
  px_uclient_t *c;
  const px_lane_t *lane;
  px_link_t all;    /* c->xfers */
  px_link_t q;      /* pool->queue */
  px_link_t reap;   /* c->reap: cancelled inside a lane call */
  px_link_t resume; /* c->resumes: resume deferred out of a lane call */
  px_pool_t *pool;
  px_xfer_cbs_t cbs;
  void *arg;
  uv_timer_t timer; /* connect / first byte, then idle */
  uint64_t first_byte_ms, idle_ms, connect_ms;
  uint64_t last_activity;
  uint64_t connect_deadline; /* 0: the lane times connects itself */
  uint64_t first_byte_deadline;
  px_buf_t hbuf; /* current header block, "name:value\n" lines */
  int status;
  int state;
  int64_t content_length; /* body length the lane enforces, -1 unknown */
  bool hdrs_done;         /* on_headers fired */
  bool paused;
  bool cancelled;
  bool aborted; /* on_data returned < 0 */
  bool holds_slot;
  bool uncounted;               /* already left c->active (cancel deferred to reaping) */
  const char *fail;             /* our own reason to abort from a callback */
  px_xfer_result_t fail_res;    /* its result (PX_XFER_EOTHER unless set) */
  char errbuf[CURL_ERROR_SIZE]; /* from here on, set by the lane's prepare */
  union {
    struct { /* curl lane; zeroed by prepare up to hl */
      CURL *easy;
      px_cshard_t *sh; /* the multi it runs in */
      unsigned gen;    /* pool->sig_gen its options match */
      bool in_multi;
      bool h2;                 /* may multiplex: always the first shard */
      bool in_block;           /* inside a header block (status line seen) */
      const px_str_t *parts;   /* the body in parts (px_xfer_opts_t), or NULL */
      size_t nparts, part, off; /* the read callback's place in them */
      struct curl_slist *hdrs; /* hl or a heap array */
      struct curl_slist hl[PX_CURL_INLINE_HDRS];
    } cu;
    struct { /* built-in lane; zeroed by prepare up to parser */
      px_h1conn_t *hc;
      px_h1res_t *res; /* name resolution in flight */
      bool got;        /* response bytes seen on this connection */
      bool retried;    /* already retried once on a fresh connection */
      bool msg_done;   /* final response complete */
      bool val;        /* last header callback was a value */
      bool keep;       /* the response allows keep-alive */
      bool ok;         /* completed: the connection may be parked */
      char *reqhead;   /* request line and headers */
      size_t reqhead_len;
      const char *body;
      size_t body_len;
      const px_str_t *parts; /* the body in parts (px_xfer_opts_t), or NULL */
      size_t nparts;
      unsigned naddr, addr_i;
      unsigned short port;
      size_t host_len; /* key[0..host_len) is the host (no brackets) */
      struct px_tls_ctx *tctx; /* https://: TLS context (upstream_tls.c) */
      px_buf_t pend;   /* body bytes received while paused */
      llhttp_t parser; /* set by llhttp_init before each use */
      struct sockaddr_storage addr[PX_H1_MAX_ADDRS];
      char key[280]; /* "host:port": pool of idle connections, DNS cache */
    } h1;
  } u;
};

/** Lanes of a client: the built-in one and curl. */
#define PX_LANES 2

struct px_uclient {
  uv_loop_t *loop;
  const px_lane_t *lanes[PX_LANES]; /* set by px_uclient_new */
  uv_timer_t defer; /* deferred resumes and the curl nudge after them */
  px_link_t xfers;
  px_link_t reap;
  px_link_t resumes;
  px_link_t pools;
  px_link_t spare;    /* closed transfers kept for reuse (px_xfer_t.all) */
  unsigned nspare;
  size_t active;
  unsigned nhandles;  /* open uv handles and requests we own */
  unsigned depth;     /* frames of ours on the stack */
  unsigned in_lane;   /* inside a libcurl call or llhttp_execute */
  int default_client; /* PX_XFER_CLIENT_* for AUTO (PROXAI_UPSTREAM_CLIENT) */
  bool kick_pending;
  bool closing; /* px_uclient_close called */
  bool closed;  /* finish_close ran */
  void (*close_cb)(void *arg);
  void *close_arg;
  struct {                /* curl lane */
    px_cshard_t **shards; /* [0] made with the client, more under load */
    size_t nshards;
    bool nudge;             /* some shard's nudge is set */
    long maxconnects;       /* the sum of the pools' limits, 0: none */
    struct px_sock **socks; /* by descriptor, every shard's */
    size_t nsocks;
  } cu;
  struct {          /* built-in lane */
    px_link_t idle; /* idle connections, most recent last */
    size_t nidle;
    px_link_t dns; /* resolved names */
    size_t ndns;
    px_link_t resolving;
    char *slab;             /* read buffer */
    struct px_tls_ctx *tls; /* TLS contexts (upstream_tls.c) */
  } h1;
};

/** A lane: what the core asks of the code that moves the bytes. */
struct px_lane {
  const char *name;
  /** Build the request from o (the lane may keep pointers the caller keeps
   *  alive: body, headers). A header line with a CR, LF or NUL is dropped
   *  (SPEC section 10). -1: not possible (nothing to release). */
  int (*prepare)(px_xfer_t *x, const px_xfer_opts_t *o);
  /** A pool slot is granted: start the I/O. <0: could not start. */
  int (*run)(px_xfer_t *x);
  /** Continue a paused transfer (in_lane == 0). */
  void (*resume)(px_xfer_t *x);
  /** The transfer is finishing: leave the lane, release what prepare and run
   *  took (park or close the connection, return the easy handle). */
  void (*release)(px_xfer_t *x);
  /** Still connecting (the connect deadline applies)? */
  bool (*connecting)(px_xfer_t *x);
  /** Response bytes already waiting in the socket (not idleness)? */
  bool (*bytes_waiting)(px_xfer_t *x);
  /** The lane times its own connects (else the core's connect deadline). */
  bool times_connect;

  /* The lane's part of the client; each may be NULL. */
  /** Client creation: the lane's state in c. <0: cannot. */
  int (*client_init)(px_uclient_t *c);
  /** Client close: the lane's connections, sockets, caches. */
  void (*client_close)(px_uclient_t *c);
  /** Finish one transfer the lane reports done (from px_up_after,
   *  in_lane == 0); false when there is none. */
  bool (*collect)(px_uclient_t *c);
  /** A pool was added or its limit changed. */
  void (*pools_changed)(px_uclient_t *c);
  /** Free the lane's per-pool state (client close). */
  void (*pool_free)(px_pool_t *p);
  /** The deferred work of the lane (the defer timer, after resumes). */
  void (*nudge)(px_uclient_t *c);
};

extern const px_lane_t px_lane_curl;
extern const px_lane_t px_lane_h1;

/* ---- core services for the lanes (xfer.c) ---- */

void px_up_enter(px_uclient_t *c);
void px_up_leave(px_uclient_t *c);
/** Reap deferred cancels, start queued transfers, collect curl's finished
 *  transfers. Call after every lane call, with in_lane == 0. */
void px_up_after(px_uclient_t *c);
/** One open uv handle or request of the client's was closed/completed. */
void px_up_handle_closed(px_uclient_t *c);
/** Finish x (no-op when done); calls on_done when notify and not cancelled.
 *  Only with in_lane == 0 (lanes call it from their own loop callbacks). */
void px_up_finish(px_xfer_t *x, px_xfer_result_t res, const char *msg, bool notify);
/** Append one "name:value" header line of the current block. 0 or -1
 *  (x->fail set). */
int px_up_head_line(px_xfer_t *x, const char *p, size_t n);
/** The final header block is complete (x->status set): filter the headers,
 *  call on_headers. 1: go on; 0: stop reading (x->fail set, or cancelled). */
int px_up_head_done(px_xfer_t *x);
/** Body bytes: 0 consumed, PX_XFER_PAUSE (not consumed, now paused), -1
 *  stop (aborted or cancelled). */
int px_up_deliver(px_xfer_t *x, const char *p, size_t n);
/** Whether x may still call back (running, not cancelled, client open). */
static inline bool px_up_live(const px_xfer_t *x) {
  return x->state == XS_RUNNING && !x->cancelled && !x->c->closing;
}

/** Run the deferred resumes (and the lanes' nudges) in this loop
 *  iteration's timer phase: a 0 ms timer, never 1 ms. */
void px_up_defer(px_uclient_t *c);

/* ---- the core for upstream.c ---- */

/** A pool slot for x: start its lane. <0: could not start. */
int px_up_run(px_xfer_t *x);
/** Start what p's queue holds while p has slots (deferred inside a lane). */
void px_up_kick(px_uclient_t *c, px_pool_t *p);
/** Close the client now: every transfer, the lanes, the pools. */
void px_up_close(px_uclient_t *c);

#endif
