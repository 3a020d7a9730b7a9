/**
 * upstream.c - libcurl multi driven by the libuv loop.
 *
 * Glue: curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION) and
 * when to call it back (CURLMOPT_TIMERFUNCTION); we answer with one uv_poll_t
 * per socket and one uv_timer_t. Every call into curl is bracketed by
 * in_curl++/-- and followed by after_curl(), which finishes transfers that
 * curl reports done, reaps transfers cancelled from inside a curl callback
 * and starts queued transfers. Nothing calls libcurl while in_curl > 0.
 *
 * Sockets are opened and closed by us (CURLOPT_OPENSOCKETFUNCTION and
 * CURLOPT_CLOSESOCKETFUNCTION) so that a uv_poll_t is always closed before
 * its descriptor and a CURL_POLL_REMOVE for an unknown socket is harmless.
 *
 * Ownership: the client owns its transfers, sockets and pools. A transfer
 * is freed in the close callback of its timer, a socket in the close callback
 * of its poll handle, the client in the last close callback after
 * px_uclient_close(). So no object is freed while a stack frame of ours may
 * still point at it.
 *
 * Transfer states:
 *
 *   QUEUED --(pool slot)--> RUNNING --(curl done / timeout / cancel)--> DONE
 *      \________________________(cancel)____________________________/
 */
#include "proxai/upstream.h"

#include <curl/curl.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/** Response header block cap (curl has its own 100 KiB limit too). */
#define PX_UP_MAX_HEADER_BYTES (64 * 1024)
/** Most response headers handed to on_headers. */
#define PX_UP_MAX_HEADERS 128

typedef struct px_link {
  struct px_link *prev, *next;
} px_link_t;

#define PX_CONTAINER(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))

static void dl_init(px_link_t *l) {
  l->prev = l->next = l;
}
static bool dl_empty(const px_link_t *h) {
  return h->next == h;
}
static bool dl_linked(const px_link_t *l) {
  return l->next != l;
}
static void dl_push(px_link_t *h, px_link_t *n) {
  n->prev = h->prev;
  n->next = h;
  h->prev->next = n;
  h->prev = n;
}
static void dl_del(px_link_t *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  dl_init(n);
}

typedef struct px_pool {
  px_link_t link;   /* client's pools */
  px_link_t queue;  /* FIFO of QUEUED transfers */
  unsigned max;     /* 0 = no limit */
  unsigned running; /* transfers holding a slot */
  char name[];
} px_pool_t;

typedef struct px_sock {
  px_uclient_t *c;
  uv_poll_t poll;
  curl_socket_t fd;
  int events;   /* UV_READABLE|UV_WRITABLE curl asked for */
  bool owned;   /* opened by on_opensocket: we close the fd after the poll */
  bool polling; /* poll handle initialised */
  bool dropped; /* owned, poll closing: the fd closes in its close callback */
} px_sock_t;

enum { XS_QUEUED, XS_RUNNING, XS_DONE };

/* Most idle keep-alive connections the HTTP/1.1 fast path keeps. */
#define PX_H1_MAX_IDLE 256

/* One connection of the HTTP/1.1 fast path (plain http, IP literal). */
typedef struct px_h1conn {
  px_uclient_t *c;
  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_write_t wreq;
  px_link_t idle;    /* c->h1idle while idle */
  struct px_xfer *x; /* current transfer */
  char key[80];      /* "host:port" */
  bool connected;
  bool reused;  /* carried an earlier response */
  bool reading;
  bool writing; /* a request write is in flight */
  bool dead;    /* not reusable (EOF, error, stray bytes) */
  bool closing;
} px_h1conn_t;

struct px_xfer {
  px_uclient_t *c;
  px_link_t all;    /* c->xfers */
  px_link_t q;      /* pool->queue */
  px_link_t reap;   /* c->reap: cancelled inside a curl callback */
  px_link_t resume; /* c->resumes: resume deferred out of a curl callback */
  CURL *easy;
  struct curl_slist *hdrs;
  px_pool_t *pool;
  px_xfer_cbs_t cbs;
  void *arg;
  uv_timer_t timer; /* first byte, then idle */
  uint64_t first_byte_ms, idle_ms, connect_ms;
  uint64_t last_activity;
  px_buf_t hbuf; /* current header block, "name: value\n" lines */
  int status;
  int state;
  bool in_block;  /* inside a header block (status line seen) */
  bool hdrs_done; /* on_headers fired */
  bool paused;
  bool cancelled;
  bool aborted; /* on_data returned < 0 */
  bool in_multi;
  bool holds_slot;
  bool uncounted;   /* already left c->active (cancel deferred to reaping) */
  const char *fail; /* our own reason to abort from a callback */
  /* HTTP/1.1 fast path (easy == NULL) */
  bool h1;
  bool h1_got;      /* response bytes seen on this connection */
  bool h1_retried;  /* already retried once on a fresh connection */
  bool h1_msg_done; /* final response complete */
  bool h1_val;      /* last header callback was a value */
  bool h1_keep;     /* the response allows keep-alive */
  bool h1_ok;       /* completed: the connection may be parked */
  px_h1conn_t *hc;
  llhttp_t parser;
  char *reqhead; /* request line and headers */
  size_t reqhead_len;
  const char *body;
  size_t body_len;
  struct sockaddr_storage addr;
  char key[80];
  px_buf_t pend;   /* body bytes received while paused */
  uint64_t connect_deadline;
  uint64_t first_byte_deadline;
  char errbuf[CURL_ERROR_SIZE];
};

struct px_uclient {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer; /* curl's timeout */
  uv_timer_t defer; /* deferred resumes and the nudge after them */
  px_link_t xfers;
  px_link_t reap;
  px_link_t resumes;
  px_link_t pools;
  px_link_t h1idle;  /* idle fast-path connections, most recent last */
  size_t nh1idle;
  bool no_h1;        /* a proxy is configured in the environment: curl only */
  char *h1slab;      /* read buffer of the fast path */
  px_sock_t **socks; /* by descriptor */
  size_t nsocks;
  size_t active;
  unsigned nhandles; /* open uv handles we own */
  unsigned depth;    /* frames of ours on the stack */
  unsigned in_curl;  /* inside a libcurl call */
  bool kick_pending;
  bool nudge;
  bool closing; /* px_uclient_close called */
  bool closed;  /* finish_close ran */
  void (*close_cb)(void *arg);
  void *close_arg;
};

static void after_curl(px_uclient_t *c);
static void finish_close(px_uclient_t *c);
static void finish_xfer(px_xfer_t *x, px_xfer_result_t res, const char *msg, bool notify);
static void pool_kick(px_uclient_t *c, px_pool_t *p);
static int h1_begin(px_xfer_t *x);
static void h1_detach(px_xfer_t *x);

/* ---- handle bookkeeping ---- */

static void enter(px_uclient_t *c) {
  c->depth++;
}

static void leave(px_uclient_t *c) {
  if (--c->depth == 0 && c->closing && !c->closed) finish_close(c);
}

static void handle_closed(px_uclient_t *c) {
  if (--c->nhandles == 0 && c->closed) {
    void (*cb)(void *) = c->close_cb;
    void *arg = c->close_arg;
    free(c->h1slab);
    free(c);
    if (cb) cb(arg);
  }
}

/* ---- sockets ---- */

static px_sock_t *sock_get(px_uclient_t *c, curl_socket_t fd) {
  if (fd < 0 || (size_t)fd >= c->nsocks) return NULL;
  return c->socks[fd];
}

static int sock_set(px_uclient_t *c, curl_socket_t fd, px_sock_t *s) {
  if ((size_t)fd >= c->nsocks) {
    size_t n = c->nsocks ? c->nsocks : 64;
    while (n <= (size_t)fd) n *= 2;
    px_sock_t **t = realloc(c->socks, n * sizeof(*t));
    if (!t) return -1;
    memset(t + c->nsocks, 0, (n - c->nsocks) * sizeof(*t));
    c->socks = t;
    c->nsocks = n;
  }
  c->socks[fd] = s;
  return 0;
}

static void on_sock_closed(uv_handle_t *h) {
  px_sock_t *s = h->data;
  px_uclient_t *c = s->c;
  if (sock_get(c, s->fd) == s) c->socks[s->fd] = NULL;
  if (s->owned) close(s->fd);
  free(s);
  handle_closed(c);
}

/* Forget s: its poll handle is closed before the descriptor (if ours).
 * An owned descriptor stays in c->socks, marked dropped, until it is really
 * closed: curl has been seen asking to watch a socket after its
 * CLOSESOCKETFUNCTION ran (under wrk load, curl 7.88), and a watcher started
 * on a descriptor we are about to close makes libuv abort (epoll_ctl EBADF). */
static void sock_drop(px_uclient_t *c, px_sock_t *s) {
  if (s->dropped) return;
  if (s->polling) {
    if (s->owned) s->dropped = true;
    else if (sock_get(c, s->fd) == s) c->socks[s->fd] = NULL;
    uv_close((uv_handle_t *)&s->poll, on_sock_closed);
    return;
  }
  if (sock_get(c, s->fd) == s) c->socks[s->fd] = NULL;
  if (s->owned) close(s->fd);
  free(s);
}

static curl_socket_t on_opensocket(void *ud, curlsocktype purpose,
                                   struct curl_sockaddr *a) {
  px_uclient_t *c = ud;
  curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  if (fd < 0) return CURL_SOCKET_BAD;
  px_sock_t *s = calloc(1, sizeof(*s));
  if (!s) goto fail;
  s->c = c;
  s->fd = fd;
  s->owned = true;
  px_sock_t *old = sock_get(c, fd);
  if (old) {
    /* A stale entry: the kernel handed out its number again, so curl closed
     * that descriptor without our CLOSESOCKETFUNCTION (seen with curl 7.88
     * under load). Closing "it" in on_sock_closed would close the new
     * socket under its watcher (libuv aborts on epoll_ctl EBADF). */
    old->owned = false;
    if (sock_get(c, fd) == old) c->socks[fd] = NULL;
    if (!old->dropped) sock_drop(c, old);
  }
  if (sock_set(c, fd, s) < 0) goto fail;
  return fd;
fail:
  free(s);
  close(fd);
  return CURL_SOCKET_BAD;
}

static int on_closesocket(void *ud, curl_socket_t fd) {
  px_uclient_t *c = ud;
  px_sock_t *s = sock_get(c, fd);
  if (!s) return close(fd);
  if (s->dropped) return 0; /* already closing */
  if (!s->owned) {
    sock_drop(c, s);
    return close(fd);
  }
  sock_drop(c, s);
  return 0;
}

static void drive(px_uclient_t *c, curl_socket_t fd, int flags) {
  int running;
  c->in_curl++;
  curl_multi_socket_action(c->multi, fd, flags, &running);
  c->in_curl--;
  after_curl(c);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  px_sock_t *s = h->data;
  px_uclient_t *c = s->c;
  int flags = 0;
  if (c->closing) return;
  if (status < 0) {
    flags = CURL_CSELECT_ERR;
  } else {
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  }
  enter(c);
  drive(c, s->fd, flags);
  /* libuv stops a poll handle after an error; curl may still want it. */
  if (status < 0 && !c->closing && sock_get(c, s->fd) == s && s->events &&
      !uv_is_active((uv_handle_t *)h))
    uv_poll_start(h, s->events, on_poll);
  leave(c);
}

static int on_curl_socket(CURL *e, curl_socket_t fd, int what, void *ud, void *sp) {
  px_uclient_t *c = ud;
  px_sock_t *s = sock_get(c, fd);
  if (s && s->dropped) return 0; /* closed by us already: nothing to watch */
  if (what == CURL_POLL_REMOVE) {
    if (!s) return 0;
    s->events = 0;
    if (!s->owned)
      sock_drop(c, s); /* e.g. the resolver's socketpair: curl closes it */
    else if (s->polling)
      uv_poll_stop(&s->poll);
    return 0;
  }
  if (!s) {
    s = calloc(1, sizeof(*s));
    if (!s) return -1;
    s->c = c;
    s->fd = fd;
    if (sock_set(c, fd, s) < 0) {
      free(s);
      return -1;
    }
  }
  if (!s->polling) {
    if (uv_poll_init_socket(c->loop, &s->poll, fd) < 0) return -1;
    s->poll.data = s;
    s->polling = true;
    c->nhandles++;
  }
  int ev = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) ev |= UV_READABLE;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) ev |= UV_WRITABLE;
  s->events = ev;
  return uv_poll_start(&s->poll, ev, on_poll) < 0 ? -1 : 0;
}

static void on_timer(uv_timer_t *t) {
  px_uclient_t *c = t->data;
  if (c->closing) return;
  enter(c);
  drive(c, CURL_SOCKET_TIMEOUT, 0);
  leave(c);
}

static int on_curl_timer(CURLM *m, long ms, void *ud) {
  px_uclient_t *c = ud;
  if (ms < 0)
    uv_timer_stop(&c->timer);
  else /* 0 stays 0: rounding up costs a millisecond per request */
    uv_timer_start(&c->timer, on_timer, (uint64_t)ms, 0);
  return 0;
}

/* ---- transfers ---- */

static px_xfer_result_t map_result(px_xfer_t *x, CURLcode rc) {
  switch (rc) {
    case CURLE_OK:
      return x->hdrs_done ? PX_XFER_OK : PX_XFER_ERECV;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CRL_BADFILE:
      return PX_XFER_ECONNECT;
    case CURLE_OPERATION_TIMEDOUT: {
      /* We set no total timeout: curl times out only while connecting. */
      curl_off_t t = 0;
      curl_easy_getinfo(x->easy, CURLINFO_CONNECT_TIME_T, &t);
      return t == 0 ? PX_XFER_ETIMEOUT_CONNECT : PX_XFER_ERECV;
    }
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
      return PX_XFER_ERECV;
    default:
      return PX_XFER_EOTHER;
  }
}

static void on_xfer_closed(uv_handle_t *h) {
  px_xfer_t *x = h->data;
  px_uclient_t *c = x->c;
  free(x->reqhead);
  free(x);
  handle_closed(c);
}

/* Only with in_curl == 0. After this x is DONE; it is freed later. */
static void finish_xfer(px_xfer_t *x, px_xfer_result_t res, const char *msg,
                        bool notify) {
  px_uclient_t *c = x->c;
  if (x->state == XS_DONE) return;
  x->state = XS_DONE;
  dl_del(&x->q);
  dl_del(&x->reap);
  dl_del(&x->resume);
  dl_del(&x->all);
  if (!x->uncounted) c->active--;
  if (x->in_multi) {
    /* Unfinished transfers get their connection closed by curl. */
    c->in_curl++;
    curl_multi_remove_handle(c->multi, x->easy);
    c->in_curl--;
    x->in_multi = false;
  }
  if (x->h1) h1_detach(x); /* parked when reusable, else closed */
  px_buf_free(&x->pend);
  curl_easy_cleanup(x->easy);
  x->easy = NULL;
  curl_slist_free_all(x->hdrs);
  x->hdrs = NULL;
  px_buf_free(&x->hbuf);
  uv_timer_stop(&x->timer);
  uv_close((uv_handle_t *)&x->timer, on_xfer_closed);
  px_pool_t *p = x->pool;
  if (x->holds_slot) {
    x->holds_slot = false;
    p->running--;
  }
  pool_kick(c, p);
  if (notify && !x->cancelled && !c->closing && x->cbs.on_done)
    x->cbs.on_done(x->arg, res, msg);
}

static bool h1_waiting(px_xfer_t *x);

static void on_xfer_timer(uv_timer_t *t) {
  px_xfer_t *x = t->data;
  px_uclient_t *c = x->c;
  if (x->state != XS_RUNNING || x->cancelled || c->closing) return;
  enter(c);
  uint64_t now = uv_now(c->loop);
  if (x->h1 && !x->hdrs_done) {
    /* one timer for two deadlines: connect, then first byte */
    bool connecting = !x->hc || !x->hc->connected;
    if (connecting && x->connect_deadline && now >= x->connect_deadline)
      finish_xfer(x, PX_XFER_ETIMEOUT_CONNECT, "upstream connect timeout", true);
    else if (x->first_byte_deadline && now >= x->first_byte_deadline)
      finish_xfer(x, PX_XFER_ETIMEOUT_FIRST_BYTE, "upstream first byte timeout", true);
    else {
      uint64_t next = x->first_byte_deadline;
      if (connecting && x->connect_deadline && (!next || x->connect_deadline < next))
        next = x->connect_deadline;
      if (next) uv_timer_start(t, on_xfer_timer, next > now ? next - now : 0, 0);
    }
  } else if (!x->hdrs_done) {
    finish_xfer(x, PX_XFER_ETIMEOUT_FIRST_BYTE, "upstream first byte timeout", true);
  } else if (x->paused) {
    uv_timer_start(t, on_xfer_timer, x->idle_ms, 0); /* paused: not idle */
  } else {
    uint64_t el = uv_now(c->loop) - x->last_activity;
    /* Fast path: bytes already waiting in the socket (read in this loop
     * iteration's poll phase, after the timers) are not idleness. */
    if (el >= x->idle_ms && x->h1 && h1_waiting(x)) el = 0;
    if (el >= x->idle_ms)
      finish_xfer(x, PX_XFER_ETIMEOUT_IDLE, "upstream idle timeout", true);
    else
      uv_timer_start(t, on_xfer_timer, x->idle_ms - el, 0);
  }
  leave(c);
}

static int start_running(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  x->state = XS_RUNNING;
  x->holds_slot = true;
  x->pool->running++;
  if (x->h1) {
    uint64_t now = uv_now(c->loop);
    x->first_byte_deadline = x->first_byte_ms ? now + x->first_byte_ms : 0;
    /* curl's default connect timeout is 300 s */
    x->connect_deadline = now + (x->connect_ms ? x->connect_ms : 300000);
    uint64_t next = x->connect_deadline;
    if (x->first_byte_deadline && x->first_byte_deadline < next) next = x->first_byte_deadline;
    uv_timer_start(&x->timer, on_xfer_timer, next - now, 0);
    return h1_begin(x);
  }
  c->in_curl++;
  CURLMcode rc = curl_multi_add_handle(c->multi, x->easy);
  c->in_curl--;
  if (rc != CURLM_OK) return -1;
  x->in_multi = true;
  if (x->first_byte_ms) uv_timer_start(&x->timer, on_xfer_timer, x->first_byte_ms, 0);
  return 0;
}

static void pool_kick(px_uclient_t *c, px_pool_t *p) {
  if (c->closing) return;
  if (c->in_curl) {
    c->kick_pending = true;
    return;
  }
  while (!dl_empty(&p->queue) && (p->max == 0 || p->running < p->max)) {
    px_xfer_t *x = PX_CONTAINER(p->queue.next, px_xfer_t, q);
    dl_del(&x->q);
    if (start_running(x) < 0)
      finish_xfer(x, PX_XFER_EOTHER, "curl_multi_add_handle failed", true);
    if (c->closing) return;
  }
}

/* Reap cancelled transfers, start queued ones, finish what curl finished. */
static void after_curl(px_uclient_t *c) {
  for (;;) {
    if (c->closing || c->in_curl) return;
    if (!dl_empty(&c->reap)) {
      px_xfer_t *x = PX_CONTAINER(c->reap.next, px_xfer_t, reap);
      finish_xfer(x, PX_XFER_EOTHER, NULL, false);
      continue;
    }
    if (c->kick_pending) {
      c->kick_pending = false;
      for (px_link_t *l = c->pools.next; l != &c->pools && !c->closing; l = l->next)
        pool_kick(c, PX_CONTAINER(l, px_pool_t, link));
      continue;
    }
    int left;
    CURLMsg *m = curl_multi_info_read(c->multi, &left);
    if (!m) return;
    if (m->msg != CURLMSG_DONE) continue;
    CURLcode rc = m->data.result;
    char *priv = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
    px_xfer_t *x = (px_xfer_t *)priv;
    if (!x || x->state != XS_RUNNING) continue;
    if (x->cancelled) {
      finish_xfer(x, PX_XFER_EOTHER, NULL, false);
      continue;
    }
    px_xfer_result_t res = map_result(x, rc);
    const char *msg;
    if (x->aborted)
      res = PX_XFER_EOTHER, msg = "aborted by on_data";
    else if (x->fail)
      res = PX_XFER_EOTHER, msg = x->fail;
    else if (rc == CURLE_OK && res != PX_XFER_OK)
      msg = "no response headers";
    else if (rc == CURLE_OK)
      msg = "ok";
    else
      msg = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
    finish_xfer(x, res, msg, true);
  }
}

static int headers_complete(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  px_hdr_t hv[PX_UP_MAX_HEADERS];
  size_t n = 0;
  const char *p = x->hbuf.data, *end = p + x->hbuf.len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *colon = memchr(p, ':', (size_t)(nl - p));
    if (colon) {
      if (n == PX_UP_MAX_HEADERS) {
        x->fail = "too many upstream response headers";
        return 0;
      }
      const char *v = colon + 1;
      while (v < nl && (*v == ' ' || *v == '\t')) v++;
      const char *ve = nl;
      while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      hv[n].name = (px_str_t){p, (size_t)(colon - p)};
      hv[n].value = (px_str_t){v, (size_t)(ve - v)};
      n++;
    }
    p = nl + 1;
  }
  x->hdrs_done = true;
  x->last_activity = uv_now(c->loop);
  if (x->idle_ms)
    uv_timer_start(&x->timer, on_xfer_timer, x->idle_ms, 0);
  else
    uv_timer_stop(&x->timer);
  int rc = x->cbs.on_headers ? x->cbs.on_headers(x->arg, x->status, hv, n) : 0;
  px_buf_free(&x->hbuf);
  if (x->cancelled) return 0;
  if (rc != 0) {
    px_xfer_cancel(x);
    return 0;
  }
  return 1;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
  px_xfer_t *x = ud;
  size_t len = sz * nm, l = len;
  if (x->cancelled || x->c->closing) return 0;
  if (x->hdrs_done) return len; /* trailers */
  while (l && (p[l - 1] == '\r' || p[l - 1] == '\n')) l--;
  if (!x->in_block) {
    if (l == 0) return len;
    /* status line: "HTTP/1.1 200 OK", "HTTP/2 200" */
    const char *sp = memchr(p, ' ', l);
    int st = 0;
    if (sp)
      for (const char *q = sp + 1; q < p + l && *q >= '0' && *q <= '9'; q++)
        st = st * 10 + (*q - '0');
    x->status = st;
    x->in_block = true;
    px_buf_reset(&x->hbuf);
    return len;
  }
  if (l == 0) {
    x->in_block = false;
    if (x->status >= 100 && x->status < 200) return len; /* interim */
    return headers_complete(x) ? len : 0;
  }
  if (p[0] == ' ' || p[0] == '\t') return len; /* obsolete folding: dropped */
  if (px_buf_append(&x->hbuf, p, l) < 0 || px_buf_append(&x->hbuf, "\n", 1) < 0) {
    x->fail = "upstream response headers too large";
    return 0;
  }
  return len;
}

static size_t on_write(char *p, size_t sz, size_t nm, void *ud) {
  px_xfer_t *x = ud;
  size_t len = sz * nm;
  if (x->cancelled || x->c->closing) return 0;
  if (!x->hdrs_done) return 0; /* body without a final header block */
  x->last_activity = uv_now(x->c->loop);
  if (!x->cbs.on_data || len == 0) return len;
  int rc = x->cbs.on_data(x->arg, p, len);
  if (x->cancelled || x->c->closing) return 0;
  if (rc == PX_XFER_PAUSE) {
    x->paused = true;
    return CURL_WRITEFUNC_PAUSE;
  }
  if (rc < 0) {
    x->aborted = true;
    return 0;
  }
  return len;
}

static px_pool_t *pool_get(px_uclient_t *c, const char *name, unsigned max) {
  if (!name) name = "";
  for (px_link_t *l = c->pools.next; l != &c->pools; l = l->next) {
    px_pool_t *p = PX_CONTAINER(l, px_pool_t, link);
    if (strcmp(p->name, name) == 0) {
      p->max = max;
      return p;
    }
  }
  size_t n = strlen(name);
  px_pool_t *p = calloc(1, sizeof(*p) + n + 1);
  if (!p) return NULL;
  memcpy(p->name, name, n + 1);
  p->max = max;
  dl_init(&p->queue);
  dl_push(&c->pools, &p->link);
  return p;
}

static int setup_easy(px_xfer_t *x, const px_xfer_opts_t *o) {
  px_uclient_t *c = x->c;
  CURL *e = x->easy;
  CURLcode rc = CURLE_OK;
#define SET(opt, val) \
  if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val)
  SET(CURLOPT_URL, o->url);
  SET(CURLOPT_PRIVATE, (void *)x);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TCP_NODELAY, 1L);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  /* A proxy's CONNECT reply must not look like the response's headers. */
  SET(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  SET(CURLOPT_HTTP_VERSION,
      o->http2 ? (long)CURL_HTTP_VERSION_2TLS : (long)CURL_HTTP_VERSION_1_1);
  if (o->http2) SET(CURLOPT_PIPEWAIT, 1L);
  if (o->ca_file) SET(CURLOPT_CAINFO, o->ca_file);
  if (o->tls_no_verify) {
    SET(CURLOPT_SSL_VERIFYPEER, 0L);
    SET(CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (o->connect_timeout_ms) SET(CURLOPT_CONNECTTIMEOUT_MS, (long)o->connect_timeout_ms);
  SET(CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
  SET(CURLOPT_OPENSOCKETDATA, (void *)c);
  SET(CURLOPT_CLOSESOCKETFUNCTION, on_closesocket);
  SET(CURLOPT_CLOSESOCKETDATA, (void *)c);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, (void *)x);
  SET(CURLOPT_WRITEFUNCTION, on_write);
  SET(CURLOPT_WRITEDATA, (void *)x);
  SET(CURLOPT_ERRORBUFFER, x->errbuf);
  const char *m = o->method ? o->method : (o->body ? "POST" : "GET");
  if (strcmp(m, "GET") == 0) {
    SET(CURLOPT_HTTPGET, 1L);
  } else {
    if (strcmp(m, "POST") != 0) SET(CURLOPT_CUSTOMREQUEST, m);
    if (o->body || strcmp(m, "POST") == 0) {
      /* The caller keeps the body alive: no copy (not COPYPOSTFIELDS). */
      SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
      SET(CURLOPT_POSTFIELDS, o->body ? o->body : "");
    }
  }
#undef SET
  if (rc != CURLE_OK) return -1;
  struct curl_slist *l = NULL, *t;
  for (const char *const *h = o->headers; h && *h; h++) {
    if (!(t = curl_slist_append(l, *h))) goto fail;
    l = t;
  }
  if (!(t = curl_slist_append(l, "Expect:"))) goto fail;
  l = t;
  x->hdrs = l;
  if (curl_easy_setopt(e, CURLOPT_HTTPHEADER, l) != CURLE_OK) return -1;
  return 0;
fail:
  curl_slist_free_all(l);
  return -1;
}

/* ---- HTTP/1.1 fast path ----
 *
 * A plain-HTTP upstream named by an IP literal (no TLS, no name to resolve,
 * no HTTP/2, no proxy in the environment) is spoken to directly: one uv_tcp_t
 * per connection, llhttp for the response, keep-alive connections parked in
 * c->h1idle. It costs a fraction of a libcurl transfer (profiles in
 * bench/README.md) and keeps curl's observable behaviour: the same
 * callbacks, timeouts and results; Host and Accept: * / * as curl sends them;
 * a request that fails on a reused connection before any response byte is
 * sent once more on a fresh one. Everything else goes through libcurl.
 * Parser callbacks run with in_curl raised, so that cancels, starts and
 * resumes from inside them are deferred exactly as for curl callbacks. */

static llhttp_settings_t h1_settings;

/* "http://IP[:port][/path]": fills the address, the pool key "IP:port" and
 * the Host value; false for anything the fast path does not take. */
static bool h1_parse_url(const char *url, struct sockaddr_storage *ss, char *key,
                         size_t klen, char *host, size_t hlen, const char **path) {
  if (strncasecmp(url, "http://", 7) != 0) return false;
  const char *a = url + 7, *e = a + strcspn(a, "/?#");
  if (*e == '#' || strpbrk(url, "# \t\r\n@%") != NULL) return false;
  char ip[64];
  const char *pe;
  int port = 80;
  if (*a == '[') {
    const char *rb = memchr(a, ']', (size_t)(e - a));
    if (!rb || (size_t)(rb - a - 1) >= sizeof(ip)) return false;
    memcpy(ip, a + 1, (size_t)(rb - a - 1));
    ip[rb - a - 1] = 0;
    pe = rb + 1;
  } else {
    pe = memchr(a, ':', (size_t)(e - a));
    if (!pe) pe = e;
    if ((size_t)(pe - a) >= sizeof(ip) || pe == a) return false;
    memcpy(ip, a, (size_t)(pe - a));
    ip[pe - a] = 0;
  }
  if (pe < e) {
    if (*pe != ':' || pe + 1 == e) return false;
    port = 0;
    for (const char *q = pe + 1; q < e; q++) {
      if (*q < '0' || *q > '9' || port > 65535) return false;
      port = port * 10 + (*q - '0');
    }
    if (port < 1 || port > 65535) return false;
  }
  if (*a == '[') {
    if (uv_ip6_addr(ip, port, (struct sockaddr_in6 *)ss) != 0) return false;
  } else {
    /* dotted quad only: "localhost" or a name goes through curl's resolver */
    for (const char *q = ip; *q; q++)
      if ((*q < '0' || *q > '9') && *q != '.') return false;
    if (uv_ip4_addr(ip, port, (struct sockaddr_in *)ss) != 0) return false;
  }
  size_t kn = (size_t)(e - a), hn = port == 80 ? (size_t)(pe - a) : kn;
  if (kn >= klen || hn >= hlen) return false;
  memcpy(key, a, kn);
  key[kn] = 0;
  memcpy(host, a, hn); /* curl leaves the default port out of Host */
  host[hn] = 0;
  *path = e;
  return true;
}

static bool hdr_named(const char *h, const char *name) {
  size_t n = strlen(name);
  return strncasecmp(h, name, n) == 0 && (h[n] == ':' || h[n] == ';');
}

/* Request head as curl would send it for these options. */
static int h1_prepare(px_xfer_t *x, const px_xfer_opts_t *o, const char *m) {
  char host[96];
  const char *path;
  if (!h1_parse_url(o->url, &x->addr, x->key, sizeof(x->key), host, sizeof(host), &path))
    return -1;
  bool post = strcmp(m, "POST") == 0;
  bool has_host = false, has_accept = false, has_ctype = false, has_clen = false;
  px_buf_t b;
  px_buf_init(&b, 1u << 20);
  /* appends only: printf is a visible share of a request's cost */
  int rc = px_buf_puts(&b, m);
  if (rc == 0) rc = px_buf_puts(&b, *path == '/' ? " " : " /");
  if (rc == 0) rc = px_buf_puts(&b, path);
  if (rc == 0) rc = px_buf_puts(&b, " HTTP/1.1\r\n");
  for (const char *const *h = o->headers; h && *h; h++) {
    if (hdr_named(*h, "host")) has_host = true;
    if (hdr_named(*h, "accept")) has_accept = true;
    if (hdr_named(*h, "content-type")) has_ctype = true;
    if (hdr_named(*h, "content-length")) has_clen = true;
  }
  if (!has_host && rc == 0) {
    rc = px_buf_puts(&b, "Host: ");
    if (rc == 0) rc = px_buf_puts(&b, host);
    if (rc == 0) rc = px_buf_puts(&b, "\r\n");
  }
  if (!has_accept && rc == 0) rc = px_buf_puts(&b, "Accept: */*\r\n");
  for (const char *const *h = o->headers; rc == 0 && h && *h; h++) {
    const char *colon = strchr(*h, ':');
    const char *semi = strchr(*h, ';');
    if (colon && (!semi || colon < semi)) {
      const char *v = colon + 1;
      while (*v == ' ' || *v == '\t') v++;
      if (*v == 0) continue; /* "Name:" removes the header, as in curl */
      rc = px_buf_puts(&b, *h);
    } else if (semi) { /* "Name;" sends it empty */
      rc = px_buf_append(&b, *h, (size_t)(semi - *h));
      if (rc == 0) rc = px_buf_puts(&b, ":");
    } else {
      continue;
    }
    if (rc == 0) rc = px_buf_puts(&b, "\r\n");
  }
  if (post && rc == 0) {
    if (!has_clen) {
      char num[24];
      size_t k = sizeof(num), v = o->body_len;
      do num[--k] = (char)('0' + v % 10); while ((v /= 10) != 0);
      rc = px_buf_puts(&b, "Content-Length: ");
      if (rc == 0) rc = px_buf_append(&b, num + k, sizeof(num) - k);
      if (rc == 0) rc = px_buf_puts(&b, "\r\n");
    }
    if (!has_ctype && rc == 0)
      rc = px_buf_puts(&b, "Content-Type: application/x-www-form-urlencoded\r\n");
  }
  if (rc == 0) rc = px_buf_puts(&b, "\r\n");
  if (rc != 0) {
    px_buf_free(&b);
    return -1;
  }
  x->reqhead = px_buf_steal(&b, &x->reqhead_len);
  x->body = post ? (o->body ? o->body : "") : NULL;
  x->body_len = post ? o->body_len : 0;
  return 0;
}

static void h1_on_closed(uv_handle_t *h) {
  px_h1conn_t *hc = h->data;
  px_uclient_t *c = hc->c;
  free(hc);
  handle_closed(c);
}

static void h1_close(px_h1conn_t *hc) {
  if (hc->closing) return;
  hc->closing = true;
  if (dl_linked(&hc->idle)) {
    dl_del(&hc->idle);
    hc->c->nh1idle--;
  }
  if (hc->x) hc->x->hc = NULL;
  hc->x = NULL;
  uv_close((uv_handle_t *)&hc->tcp, h1_on_closed);
}

static void h1_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  px_h1conn_t *hc = h->data;
  (void)suggested;
  if (!hc->c->h1slab) hc->c->h1slab = malloc(65536);
  buf->base = hc->c->h1slab;
  buf->len = hc->c->h1slab ? 65536 : 0;
}

static void h1_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void h1_read_start(px_h1conn_t *hc) {
  if (hc->reading || hc->closing) return;
  if (uv_read_start((uv_stream_t *)&hc->tcp, h1_alloc, h1_on_read) == 0) hc->reading = true;
}

static void h1_read_stop(px_h1conn_t *hc) {
  if (!hc->reading) return;
  uv_read_stop((uv_stream_t *)&hc->tcp);
  hc->reading = false;
}

/* finish_xfer's part: park the connection when the response completed and
 * the connection may carry another one, else close it. */
static void h1_detach(px_xfer_t *x) {
  px_h1conn_t *hc = x->hc;
  if (!hc) return;
  px_uclient_t *c = x->c;
  x->hc = NULL;
  hc->x = NULL;
  if (!x->h1_ok || !x->h1_keep || hc->dead || hc->writing || c->closing || c->closed) {
    h1_close(hc);
    return;
  }
  hc->reused = true;
  dl_push(&c->h1idle, &hc->idle);
  if (++c->nh1idle > PX_H1_MAX_IDLE)
    h1_close(PX_CONTAINER(c->h1idle.next, px_h1conn_t, idle));
  h1_read_start(hc); /* an idle connection's EOF closes it */
}

static int h1_connect(px_xfer_t *x);

static void h1_on_written(uv_write_t *w, int status);

static int h1_send(px_xfer_t *x) {
  px_h1conn_t *hc = x->hc;
  llhttp_init(&x->parser, HTTP_RESPONSE, &h1_settings);
  x->parser.data = x;
  x->h1_got = false;
  x->h1_val = false;
  x->status = 0;
  px_buf_reset(&x->hbuf);
  uv_buf_t b[2] = {uv_buf_init(x->reqhead, (unsigned)x->reqhead_len),
                   uv_buf_init((char *)(x->body ? x->body : ""), (unsigned)x->body_len)};
  unsigned nb = x->body_len ? 2 : 1;
  /* most requests leave in one writev, without a write request */
  int rc = uv_try_write((uv_stream_t *)&hc->tcp, b, nb);
  if (rc < 0 && rc != UV_EAGAIN) return rc;
  size_t done = rc > 0 ? (size_t)rc : 0;
  uv_buf_t *rest = b;
  while (nb > 0 && done >= rest->len) {
    done -= rest->len;
    rest++;
    nb--;
  }
  h1_read_start(hc);
  if (nb == 0) return 0;
  rest->base += done;
  rest->len -= done;
  hc->wreq.data = hc;
  rc = uv_write(&hc->wreq, (uv_stream_t *)&hc->tcp, rest, nb, h1_on_written);
  if (rc < 0) return rc;
  hc->writing = true;
  return 0;
}

/* The connection failed under x (EOF, reset, write error). A reused
 * connection that failed before any response byte gets one fresh retry. */
static void h1_conn_failed(px_xfer_t *x, int err) {
  px_h1conn_t *hc = x->hc;
  if (hc) {
    hc->dead = true;
    if (hc->reused && !x->h1_got && !x->h1_retried) {
      x->h1_retried = true;
      h1_close(hc);
      if (h1_connect(x) == 0) return;
      finish_xfer(x, PX_XFER_ECONNECT, "cannot open a connection", true);
      return;
    }
  }
  snprintf(x->errbuf, sizeof(x->errbuf), "%s (%s)",
           x->h1_got ? "connection closed before the response was complete"
                     : "empty reply from upstream",
           uv_strerror(err));
  finish_xfer(x, PX_XFER_ERECV, x->errbuf, true);
}

static void h1_on_written(uv_write_t *w, int status) {
  px_h1conn_t *hc = w->data;
  hc->writing = false;
  if (status == 0 || status == UV_ECANCELED || hc->closing || !hc->x) return;
  px_xfer_t *x = hc->x;
  px_uclient_t *c = hc->c;
  if (x->state != XS_RUNNING || x->cancelled || c->closing) return;
  enter(c);
  h1_conn_failed(x, status);
  after_curl(c);
  leave(c);
}

static void h1_on_connect(uv_connect_t *req, int status) {
  px_h1conn_t *hc = req->data;
  if (status == UV_ECANCELED || hc->closing) return;
  px_xfer_t *x = hc->x;
  px_uclient_t *c = hc->c;
  if (!x) {
    h1_close(hc);
    return;
  }
  if (x->state != XS_RUNNING || x->cancelled || c->closing) return;
  enter(c);
  if (status < 0) {
    snprintf(x->errbuf, sizeof(x->errbuf), "Failed to connect to %s: %s", x->key,
             uv_strerror(status));
    hc->dead = true;
    finish_xfer(x, PX_XFER_ECONNECT, x->errbuf, true);
  } else {
    hc->connected = true;
    int rc = h1_send(x);
    if (rc < 0) {
      hc->dead = true;
      h1_conn_failed(x, rc);
    }
  }
  after_curl(c);
  leave(c);
}

static int h1_connect(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  px_h1conn_t *hc = calloc(1, sizeof(*hc));
  if (!hc) return -1;
  hc->c = c;
  dl_init(&hc->idle);
  memcpy(hc->key, x->key, sizeof(hc->key));
  if (uv_tcp_init(c->loop, &hc->tcp) < 0) {
    free(hc);
    return -1;
  }
  hc->tcp.data = hc;
  c->nhandles++;
  uv_tcp_nodelay(&hc->tcp, 1); /* applied when the socket is created */
  hc->x = x;
  x->hc = hc;
  hc->creq.data = hc;
  if (uv_tcp_connect(&hc->creq, &hc->tcp, (const struct sockaddr *)&x->addr, h1_on_connect) < 0) {
    h1_close(hc);
    return -1;
  }
  return 0;
}

static int h1_begin(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  for (px_link_t *l = c->h1idle.prev; l != &c->h1idle; l = l->prev) {
    px_h1conn_t *hc = PX_CONTAINER(l, px_h1conn_t, idle);
    if (strcmp(hc->key, x->key) != 0) continue;
    dl_del(&hc->idle);
    c->nh1idle--;
    hc->x = x;
    x->hc = hc;
    if (h1_send(x) == 0) return 0;
    hc->dead = true;
    h1_close(hc);
    break;
  }
  return h1_connect(x);
}

static bool h1_waiting(px_xfer_t *x) {
  uv_os_fd_t fd;
  char b;
  if (!x->hc || !x->hc->connected || !x->hc->reading ||
      uv_fileno((uv_handle_t *)&x->hc->tcp, &fd) != 0)
    return false;
  return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
}

/* Response complete and every byte delivered. */
static void h1_complete(px_xfer_t *x) {
  x->h1_ok = true;
  finish_xfer(x, PX_XFER_OK, "ok", true);
}

static void h1_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  px_h1conn_t *hc = s->data;
  px_uclient_t *c = hc->c;
  if (hc->closing) return;
  px_xfer_t *x = hc->x;
  if (!x) { /* idle: the server closed it (or sent stray bytes) */
    if (nread != 0) h1_close(hc);
    return;
  }
  if (nread == 0) return;
  if (x->state != XS_RUNNING || x->cancelled || c->closing) return;
  enter(c);
  if (nread < 0) {
    hc->dead = true;
    if (nread == UV_EOF && x->h1_got) {
      c->in_curl++;
      llhttp_finish(&x->parser); /* completes a body delimited by the close */
      c->in_curl--;
    }
    if (x->state == XS_RUNNING && !x->cancelled && !c->closing) {
      if (x->h1_msg_done && !x->paused)
        h1_complete(x);
      else if (!x->h1_msg_done)
        h1_conn_failed(x, (int)nread);
    }
    after_curl(c);
    leave(c);
    return;
  }
  x->h1_got = true;
  c->in_curl++;
  llhttp_errno_t e = llhttp_execute(&x->parser, buf->base, (size_t)nread);
  c->in_curl--;
  if (x->state == XS_RUNNING && !x->cancelled && !c->closing && x->hc == hc) {
    if (x->h1_msg_done) {
      const char *pos = llhttp_get_error_pos(&x->parser);
      if (e != HPE_PAUSED || (pos && pos != buf->base + nread)) hc->dead = true;
      if (x->paused)
        h1_read_stop(hc);
      else
        h1_complete(x);
    } else if (e != HPE_OK) {
      hc->dead = true;
      if (x->aborted)
        finish_xfer(x, PX_XFER_EOTHER, "aborted by on_data", true);
      else if (x->fail)
        finish_xfer(x, PX_XFER_EOTHER, x->fail, true);
      else {
        snprintf(x->errbuf, sizeof(x->errbuf), "bad upstream response: %s",
                 llhttp_errno_name(e));
        finish_xfer(x, PX_XFER_ERECV, x->errbuf, true);
      }
    } else if (x->paused) {
      h1_read_stop(hc);
    }
  }
  after_curl(c);
  leave(c);
}

static px_xfer_t *h1_x(llhttp_t *p) {
  px_xfer_t *x = p->data;
  return x->cancelled || x->c->closing || x->state != XS_RUNNING ? NULL : x;
}

static int h1_hdr_append(px_xfer_t *x, const char *p, size_t n) {
  if (px_buf_append(&x->hbuf, p, n) < 0) {
    x->fail = "upstream response headers too large";
    return -1;
  }
  return 0;
}

static int h1_on_header_field(llhttp_t *p, const char *at, size_t n) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  if (x->h1_val) { /* a header without a value-complete callback */
    if (h1_hdr_append(x, "\n", 1) < 0) return -1;
    x->h1_val = false;
  }
  return h1_hdr_append(x, at, n);
}

static int h1_on_header_field_complete(llhttp_t *p) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  x->h1_val = true;
  return h1_hdr_append(x, ":", 1);
}

static int h1_on_header_value(llhttp_t *p, const char *at, size_t n) {
  px_xfer_t *x = h1_x(p);
  return x ? h1_hdr_append(x, at, n) : -1;
}

static int h1_on_header_value_complete(llhttp_t *p) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  x->h1_val = false;
  return h1_hdr_append(x, "\n", 1);
}

static int h1_on_headers_complete(llhttp_t *p) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  if (x->h1_val && h1_hdr_append(x, "\n", 1) < 0) return -1;
  x->h1_val = false;
  x->status = p->status_code;
  if (x->status >= 100 && x->status < 200) { /* interim */
    px_buf_reset(&x->hbuf);
    return 0;
  }
  return headers_complete(x) ? 0 : -1;
}

static int h1_on_body(llhttp_t *p, const char *at, size_t n) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  if (!x->paused && x->pend.len == 0) {
    size_t r = on_write((char *)at, 1, n, x);
    if (r == n) return 0;
    if (r != CURL_WRITEFUNC_PAUSE) return -1;
  }
  /* paused: kept until px_xfer_resume (reading stops after this buffer) */
  return px_buf_append(&x->pend, at, n) < 0 ? -1 : 0;
}

static int h1_on_message_complete(llhttp_t *p) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  if (!x->hdrs_done) return 0; /* end of an interim response */
  x->h1_msg_done = true;
  x->h1_keep = llhttp_should_keep_alive(p);
  return HPE_PAUSED;
}

static void h1_settings_init(void) {
  static bool done;
  if (done) return;
  llhttp_settings_init(&h1_settings);
  h1_settings.on_header_field = h1_on_header_field;
  h1_settings.on_header_field_complete = h1_on_header_field_complete;
  h1_settings.on_header_value = h1_on_header_value;
  h1_settings.on_header_value_complete = h1_on_header_value_complete;
  h1_settings.on_headers_complete = h1_on_headers_complete;
  h1_settings.on_body = h1_on_body;
  h1_settings.on_message_complete = h1_on_message_complete;
  done = true;
}

/* px_xfer_resume for the fast path: deliver what waited, then read on. */
static void h1_resume(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  enter(c);
  x->paused = false;
  x->last_activity = uv_now(c->loop);
  size_t n = x->pend.len;
  if (n) {
    c->in_curl++;
    size_t r = on_write(x->pend.data, 1, n, x); /* may pause again */
    c->in_curl--;
    if (r == n) px_buf_reset(&x->pend);
    else if (r != CURL_WRITEFUNC_PAUSE) x->aborted = true;
  }
  if (x->state == XS_RUNNING && !x->cancelled && !c->closing && !x->paused) {
    if (x->aborted)
      finish_xfer(x, PX_XFER_EOTHER, "aborted by on_data", true);
    else if (x->h1_msg_done)
      h1_complete(x);
    else if (x->hc)
      h1_read_start(x->hc);
  }
  after_curl(c);
  leave(c);
}

px_xfer_t *px_xfer_start(px_uclient_t *c, const px_xfer_opts_t *o,
                         const px_xfer_cbs_t *cbs, void *arg) {
  if (!c || c->closing || !o || !o->url) return NULL;
  px_xfer_t *x = calloc(1, sizeof(*x));
  if (!x) return NULL;
  x->c = c;
  dl_init(&x->all);
  dl_init(&x->q);
  dl_init(&x->reap);
  dl_init(&x->resume);
  if (cbs) x->cbs = *cbs;
  x->arg = arg;
  x->first_byte_ms = o->first_byte_timeout_ms;
  x->idle_ms = o->idle_timeout_ms;
  x->connect_ms = o->connect_timeout_ms;
  px_buf_init(&x->hbuf, PX_UP_MAX_HEADER_BYTES);
  px_buf_init(&x->pend, 1u << 20);
  x->state = XS_QUEUED;
  const char *m = o->method ? o->method : (o->body ? "POST" : "GET");
  if (!c->no_h1 && !o->http2 && (strcmp(m, "POST") == 0 || strcmp(m, "GET") == 0) &&
      h1_prepare(x, o, m) == 0) {
    x->h1 = true;
    h1_settings_init();
  } else {
    if (!(x->easy = curl_easy_init())) goto fail;
    if (setup_easy(x, o) < 0) goto fail;
  }
  if (!(x->pool = pool_get(c, o->pool, o->max_connections))) goto fail;
  uv_timer_init(c->loop, &x->timer);
  x->timer.data = x;
  c->nhandles++;
  dl_push(&c->xfers, &x->all);
  c->active++;
  px_pool_t *p = x->pool;
  enter(c);
  if (!c->in_curl && dl_empty(&p->queue) && (p->max == 0 || p->running < p->max)) {
    if (start_running(x) < 0) {
      x->cancelled = true; /* no callback: the caller gets NULL */
      finish_xfer(x, PX_XFER_EOTHER, NULL, false);
      x = NULL;
    }
  } else {
    dl_push(&p->queue, &x->q);
    pool_kick(c, p);
  }
  leave(c);
  return x;
fail:
  if (x->easy) curl_easy_cleanup(x->easy);
  curl_slist_free_all(x->hdrs);
  px_buf_free(&x->hbuf);
  px_buf_free(&x->pend);
  free(x->reqhead);
  free(x);
  return NULL;
}

static void on_defer(uv_timer_t *t) {
  px_uclient_t *c = t->data;
  if (c->closing) return;
  enter(c);
  while (!dl_empty(&c->resumes) && !c->closing) {
    px_xfer_t *x = PX_CONTAINER(c->resumes.next, px_xfer_t, resume);
    dl_del(&x->resume);
    px_xfer_resume(x);
  }
  if (c->nudge && !c->closing) {
    c->nudge = false;
    drive(c, CURL_SOCKET_TIMEOUT, 0);
  }
  leave(c);
}

void px_xfer_resume(px_xfer_t *x) {
  if (!x || x->state != XS_RUNNING || !x->paused || x->cancelled) return;
  px_uclient_t *c = x->c;
  if (c->closing) return;
  if (c->in_curl) {
    if (!dl_linked(&x->resume)) dl_push(&c->resumes, &x->resume);
    uv_timer_start(&c->defer, on_defer, 0, 0);
    return;
  }
  if (x->h1) {
    h1_resume(x);
    return;
  }
  enter(c);
  x->paused = false;
  x->last_activity = uv_now(c->loop);
  c->in_curl++;
  /* May call on_write (and on_data) before it returns. */
  CURLcode rc = curl_easy_pause(x->easy, CURLPAUSE_CONT);
  c->in_curl--;
  /* curl may need a socket_action to read what waits in the socket. */
  c->nudge = true;
  uv_timer_start(&c->defer, on_defer, 0, 0);
  if (rc != CURLE_OK && x->state == XS_RUNNING && !x->cancelled && !c->closing)
    finish_xfer(x, x->aborted ? PX_XFER_EOTHER : PX_XFER_ERECV,
                x->aborted ? "aborted by on_data" : curl_easy_strerror(rc), true);
  after_curl(c);
  leave(c);
}

int px_xfer_paused(const px_xfer_t *x) {
  return x && x->paused;
}

void px_xfer_cancel(px_xfer_t *x) {
  if (!x || x->state == XS_DONE || x->cancelled) return;
  px_uclient_t *c = x->c;
  x->cancelled = true;
  if (c->in_curl && (x->in_multi || x->hc)) {
    /* Inside a curl call: its callbacks now fail; reaped after the call. */
    dl_push(&c->reap, &x->reap);
    x->uncounted = true;
    c->active--;
    return;
  }
  enter(c);
  finish_xfer(x, PX_XFER_EOTHER, NULL, false);
  leave(c);
}

/* ---- client ---- */

px_uclient_t *px_uclient_new(uv_loop_t *loop) {
  px_uclient_t *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->loop = loop;
  dl_init(&c->xfers);
  dl_init(&c->reap);
  dl_init(&c->resumes);
  dl_init(&c->pools);
  dl_init(&c->h1idle);
  /* libcurl is the upstream client. The built-in HTTP/1.1 path (plain
   * http:// to an IP literal) is an experimental opt-in for local upstreams:
   * PROXAI_UPSTREAM_NATIVE=1. It never speaks to proxies. */
  const char *native = getenv("PROXAI_UPSTREAM_NATIVE");
  c->no_h1 = !(native && strcmp(native, "1") == 0);
  static const char *const proxy_env[] = {"http_proxy", "all_proxy", "ALL_PROXY"};
  for (size_t i = 0; i < sizeof(proxy_env) / sizeof(proxy_env[0]); i++) {
    const char *v = getenv(proxy_env[i]);
    if (v && *v) c->no_h1 = true;
  }
  if (!(c->multi = curl_multi_init())) {
    free(c);
    return NULL;
  }
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, (void *)c);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, (void *)c);
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  uv_timer_init(loop, &c->defer);
  c->defer.data = c;
  c->nhandles = 2;
  return c;
}

size_t px_uclient_active(const px_uclient_t *c) {
  return c ? c->active : 0;
}

static void on_client_timer_closed(uv_handle_t *h) {
  handle_closed(h->data);
}

static void finish_close(px_uclient_t *c) {
  c->closed = true;
  while (!dl_empty(&c->xfers))
    finish_xfer(PX_CONTAINER(c->xfers.next, px_xfer_t, all), PX_XFER_EOTHER, NULL, false);
  /* Closes the cached connections through on_closesocket. */
  c->in_curl++;
  curl_multi_cleanup(c->multi);
  c->in_curl--;
  c->multi = NULL;
  while (!dl_empty(&c->h1idle)) h1_close(PX_CONTAINER(c->h1idle.next, px_h1conn_t, idle));
  for (size_t i = 0; i < c->nsocks; i++)
    if (c->socks[i] && !c->socks[i]->dropped) sock_drop(c, c->socks[i]);
  free(c->socks);
  c->socks = NULL;
  c->nsocks = 0;
  while (!dl_empty(&c->pools)) {
    px_pool_t *p = PX_CONTAINER(c->pools.next, px_pool_t, link);
    dl_del(&p->link);
    free(p);
  }
  uv_close((uv_handle_t *)&c->timer, on_client_timer_closed);
  uv_close((uv_handle_t *)&c->defer, on_client_timer_closed);
}

void px_uclient_close(px_uclient_t *c, void (*cb)(void *arg), void *arg) {
  if (!c || c->closing) return;
  c->closing = true;
  c->close_cb = cb;
  c->close_arg = arg;
  /* No callback fires from here on, even for transfers curl is inside. */
  for (px_link_t *l = c->xfers.next; l != &c->xfers; l = l->next)
    PX_CONTAINER(l, px_xfer_t, all)->cancelled = true;
  if (c->depth == 0) finish_close(c);
}
