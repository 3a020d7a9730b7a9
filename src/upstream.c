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
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
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
} px_sock_t;

enum { XS_QUEUED, XS_RUNNING, XS_DONE };

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
  uint64_t first_byte_ms, idle_ms;
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
  if (s->owned) close(s->fd);
  free(s);
  handle_closed(c);
}

/* Forget s: its poll handle is closed before the descriptor (if ours). */
static void sock_drop(px_uclient_t *c, px_sock_t *s) {
  if (sock_get(c, s->fd) == s) c->socks[s->fd] = NULL;
  if (s->polling) {
    uv_close((uv_handle_t *)&s->poll, on_sock_closed);
    return;
  }
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
  if (old) sock_drop(c, old); /* stale entry of a descriptor closed by curl */
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

static void on_xfer_timer(uv_timer_t *t) {
  px_xfer_t *x = t->data;
  px_uclient_t *c = x->c;
  if (x->state != XS_RUNNING || x->cancelled || c->closing) return;
  enter(c);
  if (!x->hdrs_done) {
    finish_xfer(x, PX_XFER_ETIMEOUT_FIRST_BYTE, "upstream first byte timeout", true);
  } else if (x->paused) {
    uv_timer_start(t, on_xfer_timer, x->idle_ms, 0); /* paused: not idle */
  } else {
    uint64_t el = uv_now(c->loop) - x->last_activity;
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
  px_buf_init(&x->hbuf, PX_UP_MAX_HEADER_BYTES);
  x->state = XS_QUEUED;
  if (!(x->easy = curl_easy_init())) goto fail;
  if (setup_easy(x, o) < 0) goto fail;
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
  if (c->in_curl && x->in_multi) {
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
  for (size_t i = 0; i < c->nsocks; i++)
    if (c->socks[i]) sock_drop(c, c->socks[i]);
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
