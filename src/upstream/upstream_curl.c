/**
 * upstream_curl.c - the libcurl lane: curl's multi interface on the libuv
 * loop. It carries HTTP/2 (https:// with `http2 = on`), upstreams with
 * `client = curl`, and what the built-in lane does not take.
 *
 * Glue: curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION) and
 * when to call it back (CURLMOPT_TIMERFUNCTION); we answer with one uv_poll_t
 * per socket and one uv_timer_t per multi handle. Every call into curl is
 * bracketed by in_lane++/-- and followed by px_up_after(). Nothing calls
 * libcurl while in_lane > 0.
 *
 * Shards: curl 7.88 looks for a connection to reuse by walking every
 * connection of its multi handle to the same host and port, busy ones
 * included, at the start of each transfer (and its socket hash has a fixed
 * 911 buckets): 8,000 concurrent streams in one multi cost 32 million steps
 * of that walk, seconds of CPU during which the other streams' events wait
 * (7,000 of 8,000 stalled in bench.py). So HTTP/1.1 transfers go to several
 * multi handles of at most PX_CURL_SHARD_XFERS transfers each (shard_pick:
 * the first with an idle connection, else the first with room, else a new
 * one); a shard other than the first is retired when its last transfer
 * leaves. HTTP/2 transfers stay in the first (they share connections).
 *
 * Sockets are opened and closed by us (CURLOPT_OPENSOCKETFUNCTION and
 * CURLOPT_CLOSESOCKETFUNCTION) so that a uv_poll_t is always closed before
 * its descriptor and a CURL_POLL_REMOVE for an unknown socket is harmless.
 *
 * Cost (bench/README.md): an easy handle is kept per pool (upstream) with
 * that pool's options set, and reused with only the per-request options
 * changed; the URL is parsed once per pool (CURLOPT_CURLU); the request
 * headers are linked in place (no copy); the connection cache holds the sum
 * of the pools' limits (CURLMOPT_MAXCONNECTS), so reuse does not churn
 * connections; proxy environment variables are not read (CURLOPT_NOPROXY
 * "*": the gateway never goes through a proxy, in either lane).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "upstream_lane.h"

typedef struct px_sock {
  px_uclient_t *c;
  px_cshard_t *sh; /* the multi that watches it */
  uv_poll_t poll;
  curl_socket_t fd;
  int events;   /* UV_READABLE|UV_WRITABLE curl asked for */
  bool owned;   /* opened by on_opensocket: we close the fd after the poll */
  bool polling; /* poll handle initialised */
  bool dropped; /* owned, poll closing: the fd closes in its close callback */
  bool counted; /* in sh->nconn */
} px_sock_t;

/* ---- sockets ---- */

static px_sock_t *sock_get(px_uclient_t *c, curl_socket_t fd) {
  if (fd < 0 || (size_t)fd >= c->cu.nsocks) return NULL;
  return c->cu.socks[fd];
}

static int sock_set(px_uclient_t *c, curl_socket_t fd, px_sock_t *s) {
  if ((size_t)fd >= c->cu.nsocks) {
    size_t n = c->cu.nsocks ? c->cu.nsocks : 64;
    while (n <= (size_t)fd) n *= 2;
    px_sock_t **t = realloc(c->cu.socks, n * sizeof(*t));
    if (!t) return -1;
    memset(t + c->cu.nsocks, 0, (n - c->cu.nsocks) * sizeof(*t));
    c->cu.socks = t;
    c->cu.nsocks = n;
  }
  c->cu.socks[fd] = s;
  return 0;
}

static void on_sock_closed(uv_handle_t *h) {
  px_sock_t *s = h->data;
  px_uclient_t *c = s->c;
  if (sock_get(c, s->fd) == s) c->cu.socks[s->fd] = NULL;
  if (s->owned) close(s->fd);
  free(s);
  px_up_handle_closed(c);
}

/* Forget s: its poll handle is closed before the descriptor (if ours).
 * An owned descriptor stays in c->cu.socks, marked dropped, until it is
 * really closed: curl has been seen asking to watch a socket after its
 * CLOSESOCKETFUNCTION ran (under wrk load, curl 7.88), and a watcher started
 * on a descriptor we are about to close makes libuv abort (epoll_ctl EBADF). */
static void sock_drop(px_uclient_t *c, px_sock_t *s) {
  if (s->dropped) return;
  if (s->counted) {
    s->counted = false;
    s->sh->nconn--;
  }
  if (s->polling) {
    if (s->owned)
      s->dropped = true;
    else if (sock_get(c, s->fd) == s)
      c->cu.socks[s->fd] = NULL;
    uv_close((uv_handle_t *)&s->poll, on_sock_closed);
    return;
  }
  if (sock_get(c, s->fd) == s) c->cu.socks[s->fd] = NULL;
  if (s->owned) close(s->fd);
  free(s);
}

static curl_socket_t on_opensocket(void *ud, curlsocktype purpose,
                                   struct curl_sockaddr *a) {
  px_cshard_t *sh = ud;
  px_uclient_t *c = sh->c;
  curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  if (fd < 0) return CURL_SOCKET_BAD;
  px_sock_t *s = calloc(1, sizeof(*s));
  if (!s) goto fail;
  s->c = c;
  s->sh = sh;
  s->fd = fd;
  s->owned = true;
  px_sock_t *old = sock_get(c, fd);
  if (old) {
    /* A stale entry: the kernel handed out its number again, so curl closed
     * that descriptor without our CLOSESOCKETFUNCTION (seen with curl 7.88
     * under load). Closing "it" in on_sock_closed would close the new
     * socket under its watcher (libuv aborts on epoll_ctl EBADF). */
    old->owned = false;
    if (sock_get(c, fd) == old) c->cu.socks[fd] = NULL;
    if (!old->dropped) sock_drop(c, old);
  }
  if (sock_set(c, fd, s) < 0) goto fail;
  s->counted = true;
  sh->nconn++;
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

static void drive(px_cshard_t *sh, curl_socket_t fd, int flags) {
  px_uclient_t *c = sh->c;
  int running;
  c->in_lane++;
  curl_multi_socket_action(sh->multi, fd, flags, &running);
  c->in_lane--;
  px_up_after(c);
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
  px_up_enter(c);
  drive(s->sh, s->fd, flags);
  /* libuv stops a poll handle after an error; curl may still want it. */
  if (status < 0 && !c->closing && sock_get(c, s->fd) == s && s->events &&
      !uv_is_active((uv_handle_t *)h))
    uv_poll_start(h, s->events, on_poll);
  px_up_leave(c);
}

static int on_curl_socket(CURL *e, curl_socket_t fd, int what, void *ud, void *sp) {
  px_cshard_t *sh = ud;
  px_uclient_t *c = sh->c;
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
    s->sh = sh;
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
  px_cshard_t *sh = t->data;
  px_uclient_t *c = sh->c;
  if (c->closing) return;
  px_up_enter(c);
  drive(sh, CURL_SOCKET_TIMEOUT, 0);
  px_up_leave(c);
}

static int on_curl_timer(CURLM *m, long ms, void *ud) {
  px_cshard_t *sh = ud;
  if (ms < 0)
    uv_timer_stop(&sh->timer);
  else /* 0 stays 0: rounding up costs a millisecond per request */
    uv_timer_start(&sh->timer, on_timer, (uint64_t)ms, 0);
  return 0;
}

/* ---- results ---- */

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
      curl_easy_getinfo(x->u.cu.easy, CURLINFO_CONNECT_TIME_T, &t);
      return t == 0 ? PX_XFER_ETIMEOUT_CONNECT : PX_XFER_ERECV;
    }
    case CURLE_RECV_ERROR:
      /* curl 7.88 reports a broken chunk as a receive error whose text
       * names it ("... in chunked-encoding") */
      if (strstr(x->errbuf, "chunked")) return PX_XFER_EPROTO;
      return PX_XFER_ERECV;
    case CURLE_WEIRD_SERVER_REPLY:
      return PX_XFER_EPROTO;
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_BAD_CONTENT_ENCODING:
      return PX_XFER_ERECV;
    default:
      return PX_XFER_EOTHER;
  }
}

/* One CURLMSG_DONE: true when a transfer was finished. */
static bool collect_one(CURLMsg *m) {
  CURLcode rc = m->data.result;
  char *priv = NULL;
  curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
  px_xfer_t *x = (px_xfer_t *)priv;
  if (!x || x->state != XS_RUNNING) return false;
  if (x->cancelled) {
    px_up_finish(x, PX_XFER_EOTHER, NULL, false);
    return true;
  }
  px_xfer_result_t res = map_result(x, rc);
  const char *msg;
  if (x->aborted)
    res = PX_XFER_EOTHER, msg = "aborted by on_data";
  else if (x->fail)
    res = x->fail_res, msg = x->fail;
  else if (rc == CURLE_OK && res != PX_XFER_OK)
    msg = "no response headers";
  else if (rc == CURLE_OK)
    msg = "ok";
  else
    msg = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
  px_up_finish(x, res, msg, true);
  return true;
}

static bool curl_collect(px_uclient_t *c) {
  for (size_t i = 0; i < c->cu.nshards; i++) {
    for (;;) {
      int left;
      CURLMsg *m = curl_multi_info_read(c->cu.shards[i]->multi, &left);
      if (!m) break;
      if (m->msg != CURLMSG_DONE) continue;
      if (collect_one(m)) return true;
    }
  }
  return false;
}

/* ---- callbacks ---- */

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
  px_xfer_t *x = ud;
  size_t len = sz * nm, l = len;
  if (x->cancelled || x->c->closing) return 0;
  if (x->hdrs_done) return len; /* trailers */
  while (l && (p[l - 1] == '\r' || p[l - 1] == '\n')) l--;
  if (!x->u.cu.in_block) {
    if (l == 0) return len;
    /* status line: "HTTP/1.1 200 OK", "HTTP/2 200" */
    const char *sp = memchr(p, ' ', l);
    int st = 0;
    if (sp)
      for (const char *q = sp + 1; q < p + l && *q >= '0' && *q <= '9' && st < 1000; q++)
        st = st * 10 + (*q - '0');
    x->status = st;
    x->u.cu.in_block = true;
    px_buf_reset(&x->hbuf);
    return len;
  }
  if (l == 0) {
    x->u.cu.in_block = false;
    if (x->status >= 100 && x->status < 200) return len; /* interim */
    return px_up_head_done(x) ? len : 0;
  }
  if (p[0] == ' ' || p[0] == '\t') return len; /* obsolete folding: dropped */
  return px_up_head_line(x, p, l) < 0 ? 0 : len;
}

static size_t on_write(char *p, size_t sz, size_t nm, void *ud) {
  px_xfer_t *x = ud;
  size_t len = sz * nm;
  if (x->cancelled || x->c->closing) return 0;
  if (!x->hdrs_done) return 0; /* body without a final header block */
  int rc = px_up_deliver(x, p, len);
  if (rc == PX_XFER_PAUSE) return CURL_WRITEFUNC_PAUSE;
  return rc < 0 ? 0 : len;
}

/* ---- per-pool state ---- */

/* A shard's connection cache: one connection per slot any pool may run at
 * once, at most one per transfer the shard runs (more would only make curl
 * walk longer lists). */
static void shard_maxconnects(px_cshard_t *sh) {
  long sum = sh->c->cu.maxconnects;
  long want = sum > 0 && sum < PX_CURL_SHARD_XFERS ? sum : PX_CURL_SHARD_XFERS;
  if (want != sh->maxconnects) {
    sh->maxconnects = want;
    curl_multi_setopt(sh->multi, CURLMOPT_MAXCONNECTS, want);
  }
}

static void curl_pools_changed(px_uclient_t *c) {
  long sum = 0;
  for (px_link_t *l = c->pools.next; l != &c->pools; l = l->next) {
    px_pool_t *p = PX_CONTAINER(l, px_pool_t, link);
    if (p->max == 0) {
      sum = 0;
      break;
    }
    sum += p->max;
  }
  c->cu.maxconnects = sum;
  for (size_t i = 0; i < c->cu.nshards; i++) shard_maxconnects(c->cu.shards[i]);
}

static void pool_flush_easy(px_pool_t *p) {
  while (p->nfree_easy) curl_easy_cleanup(p->free_easy[--p->nfree_easy]);
}

static void curl_pool_free(px_pool_t *p) {
  pool_flush_easy(p);
  for (size_t i = 0; i < p->nurls; i++) {
    curl_url_cleanup(p->urls[i].uh);
    free(p->urls[i].url);
  }
  p->nurls = 0;
  free(p->sig_ca);
  p->sig_ca = NULL;
}

/* The idle handles carry the options of o: take one, or NULL for a new one
 * (then the pool's options are o's from now on). */
static CURL *pool_take_easy(px_pool_t *p, const px_xfer_opts_t *o) {
  const char *ca = o->ca_file;
  if (p->sig_set && p->sig_http2 == o->http2 && p->sig_noverify == o->tls_no_verify &&
      p->sig_cto == o->connect_timeout_ms &&
      ((!ca && !p->sig_ca) || (ca && p->sig_ca && strcmp(ca, p->sig_ca) == 0))) {
    return p->nfree_easy ? p->free_easy[--p->nfree_easy] : NULL;
  }
  pool_flush_easy(p); /* the upstream's options changed (reload) */
  p->sig_gen++;
  free(p->sig_ca);
  p->sig_ca = ca ? strdup(ca) : NULL;
  p->sig_set = !ca || p->sig_ca;
  p->sig_http2 = o->http2;
  p->sig_noverify = o->tls_no_verify;
  p->sig_cto = o->connect_timeout_ms;
  return NULL;
}

/* The URL parsed once: kept as long as the client (a running transfer may
 * point at it), at most PX_POOL_URLS per pool; NULL: pass it as a string. */
static CURLU *pool_url(px_pool_t *p, const char *url) {
  for (size_t i = 0; i < p->nurls; i++)
    if (strcmp(p->urls[i].url, url) == 0) return p->urls[i].uh;
  if (p->nurls == PX_POOL_URLS) return NULL;
  CURLU *uh = curl_url();
  char *copy = strdup(url);
  if (!uh || !copy || curl_url_set(uh, CURLUPART_URL, url, 0) != CURLUE_OK) {
    curl_url_cleanup(uh);
    free(copy);
    return NULL;
  }
  p->urls[p->nurls++] = (px_curl_url_t){copy, uh};
  return uh;
}

/* ---- the lane ---- */

/* The lines the lane adds: each costs curl a formatted line and a name
 * check per header it looks for, so Expect: (no 100-continue round trip)
 * only where curl would send one, for bodies of 1 MiB and more (7.88). */
static const char *const fixed_hdrs[] = {
    "Accept-Encoding: identity", /* the gateway passes bodies as they are */
    "Expect:",
};
#define NFIXED (sizeof(fixed_hdrs) / sizeof(fixed_hdrs[0]))
#define PX_CURL_EXPECT_FROM (1u << 20)

/* The options every transfer of this pool shares: set once per handle. */
/* A body in parts (px_xfer_opts_t.body_parts) read by curl: as much as
 * fits from where the last read stopped. */
static size_t on_read(char *buf, size_t size, size_t nitems, void *arg) {
  px_xfer_t *x = arg;
  size_t room = size * nitems, n = 0;
  while (n < room && x->u.cu.part < x->u.cu.nparts) {
    px_str_t p = x->u.cu.parts[x->u.cu.part];
    size_t k = p.len - x->u.cu.off;
    if (k > room - n) k = room - n;
    memcpy(buf + n, p.ptr + x->u.cu.off, k);
    n += k;
    x->u.cu.off += k;
    if (x->u.cu.off == p.len) x->u.cu.part++, x->u.cu.off = 0;
  }
  return n;
}

/* curl sends the body again (a reused connection closed under it, a 307):
 * the read starts over at offset. */
static int on_seek(void *arg, curl_off_t offset, int origin) {
  px_xfer_t *x = arg;
  if (origin != SEEK_SET || offset < 0) return CURL_SEEKFUNC_CANTSEEK;
  size_t left = (size_t)offset, i = 0;
  while (i < x->u.cu.nparts && left >= x->u.cu.parts[i].len)
    left -= x->u.cu.parts[i++].len;
  if (i == x->u.cu.nparts && left > 0) return CURL_SEEKFUNC_FAIL;
  x->u.cu.part = i;
  x->u.cu.off = left;
  return CURL_SEEKFUNC_OK;
}

static CURLcode setup_new_easy(px_uclient_t *c, CURL *e, const px_xfer_opts_t *o) {
  CURLcode rc = CURLE_OK;
#define SET(opt, val) \
  if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val)
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TCP_NODELAY, 1L);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_NOPROXY, "*"); /* no proxy environment variable lookups */
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
  SET(CURLOPT_OPENSOCKETFUNCTION, on_opensocket); /* its data: the shard, at run */
  SET(CURLOPT_CLOSESOCKETFUNCTION, on_closesocket);
  SET(CURLOPT_CLOSESOCKETDATA, (void *)c);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_WRITEFUNCTION, on_write);
  SET(CURLOPT_READFUNCTION, on_read);
  SET(CURLOPT_SEEKFUNCTION, on_seek);
#undef SET
  return rc;
}

static int curl_prepare(px_xfer_t *x, const px_xfer_opts_t *o) {
  px_uclient_t *c = x->c;
  memset(&x->u.cu, 0, offsetof(px_xfer_t, u.cu.hl) - offsetof(px_xfer_t, u.cu));
  CURL *e = pool_take_easy(x->pool, o);
  bool fresh = e == NULL;
  if (fresh && !(e = curl_easy_init())) return -1;
  x->u.cu.easy = e;
  x->u.cu.gen = x->pool->sig_gen;
  x->u.cu.h2 = o->http2;
  CURLcode rc = fresh ? setup_new_easy(c, e, o) : CURLE_OK;
#define SET(opt, val) \
  if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val)
  CURLU *uh = pool_url(x->pool, o->url);
  if (uh) {
    SET(CURLOPT_CURLU, uh);
  } else {
    SET(CURLOPT_CURLU, (CURLU *)NULL);
    SET(CURLOPT_URL, o->url);
  }
  SET(CURLOPT_PRIVATE, (void *)x);
  SET(CURLOPT_HEADERDATA, (void *)x);
  SET(CURLOPT_WRITEDATA, (void *)x);
  SET(CURLOPT_ERRORBUFFER, x->errbuf);
  const char *m = o->method ? o->method : (o->body ? "POST" : "GET");
  if (strcmp(m, "GET") == 0) {
    SET(CURLOPT_CUSTOMREQUEST, (char *)NULL);
    SET(CURLOPT_HTTPGET, 1L);
  } else {
    SET(CURLOPT_CUSTOMREQUEST, strcmp(m, "POST") != 0 ? m : (char *)NULL);
    if (o->body_parts) {
      /* read from the parts as curl sends (no copy of the whole) */
      x->u.cu.parts = o->body_parts;
      x->u.cu.nparts = o->body_nparts;
      SET(CURLOPT_POSTFIELDS, (char *)NULL);
      SET(CURLOPT_POST, 1L);
      SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
      SET(CURLOPT_READDATA, (void *)x);
      SET(CURLOPT_SEEKDATA, (void *)x);
    } else if (o->body || strcmp(m, "POST") == 0) {
      /* The caller keeps the body alive: no copy (not COPYPOSTFIELDS). */
      SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
      SET(CURLOPT_POSTFIELDS, o->body ? o->body : "");
    } else {
      SET(CURLOPT_HTTPGET, 1L);
      SET(CURLOPT_CUSTOMREQUEST, m);
    }
  }
  /* The header list links the caller's lines in place: the caller keeps
   * them alive until on_done or cancel. */
  size_t n = 0;
  for (const char *const *h = o->headers; h && *h; h++) n++;
  n += o->trace_line != NULL;
  struct curl_slist *l = x->u.cu.hl;
  if (n + NFIXED > PX_CURL_INLINE_HDRS && !(l = malloc((n + NFIXED) * sizeof(*l)))) {
    rc = CURLE_OUT_OF_MEMORY;
  } else {
    size_t k = 0;
    l[k++].data = (char *)fixed_hdrs[0];
    if (o->body_len >= PX_CURL_EXPECT_FROM) l[k++].data = (char *)fixed_hdrs[1];
    /* never a second line (SPEC section 10) */
    for (size_t i = 0; i < n - (o->trace_line != NULL); i++)
      if (o->headers_checked || px_header_value_ok(o->headers[i], strlen(o->headers[i])))
        l[k++].data = (char *)o->headers[i];
    if (o->trace_line) l[k++].data = (char *)o->trace_line;
    for (size_t i = 0; i < k; i++) l[i].next = i + 1 < k ? &l[i + 1] : NULL;
    x->u.cu.hdrs = l;
    SET(CURLOPT_HTTPHEADER, l);
  }
#undef SET
  if (rc != CURLE_OK) {
    if (x->u.cu.hdrs && x->u.cu.hdrs != x->u.cu.hl) free(x->u.cu.hdrs);
    x->u.cu.hdrs = NULL;
    curl_easy_cleanup(e);
    x->u.cu.easy = NULL;
    return -1;
  }
  return 0;
}

static void on_shard_timer_closed(uv_handle_t *h) {
  px_cshard_t *sh = h->data;
  px_uclient_t *c = sh->c;
  free(sh);
  px_up_handle_closed(c);
}

static px_cshard_t *shard_new(px_uclient_t *c) {
  px_cshard_t **t = realloc(c->cu.shards, (c->cu.nshards + 1) * sizeof(*t));
  if (!t) return NULL;
  c->cu.shards = t;
  px_cshard_t *sh = calloc(1, sizeof(*sh));
  if (!sh) return NULL;
  if (!(sh->multi = curl_multi_init())) {
    free(sh);
    return NULL;
  }
  sh->c = c;
  curl_multi_setopt(sh->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  curl_multi_setopt(sh->multi, CURLMOPT_SOCKETDATA, (void *)sh);
  curl_multi_setopt(sh->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(sh->multi, CURLMOPT_TIMERDATA, (void *)sh);
  shard_maxconnects(sh);
  uv_timer_init(c->loop, &sh->timer);
  sh->timer.data = sh;
  c->nhandles++;
  c->cu.shards[c->cu.nshards++] = sh;
  return sh;
}

/* The multi a transfer runs in: the first shard for HTTP/2 (its streams
 * share connections); else the first with room where an idle connection may
 * wait (more connections open than transfers), else the first with room,
 * else a new one. Filling the first ones first lets the last ones drain and
 * retire when the load falls. */
static px_cshard_t *shard_pick(px_uclient_t *c, bool h2) {
  if (h2) return c->cu.shards[0];
  px_cshard_t *room = NULL;
  for (size_t i = 0; i < c->cu.nshards; i++) {
    px_cshard_t *sh = c->cu.shards[i];
    if (sh->nrun >= PX_CURL_SHARD_XFERS) continue;
    if (sh->nconn > sh->nrun) return sh;
    if (!room) room = sh;
  }
  if (room) return room;
  room = shard_new(c);
  return room ? room : c->cu.shards[0];
}

/* A shard other than the first whose last transfer left: its idle
 * connections are closed (the first shard keeps up to PX_CURL_SHARD_XFERS,
 * as the built-in lane keeps 256) and it goes. Not inside a curl call. */
static void shard_retire(px_uclient_t *c, px_cshard_t *sh) {
  size_t i = 1;
  while (i < c->cu.nshards && c->cu.shards[i] != sh) i++;
  if (i == c->cu.nshards) return;
  memmove(&c->cu.shards[i], &c->cu.shards[i + 1],
          (c->cu.nshards - i - 1) * sizeof(*c->cu.shards));
  c->cu.nshards--;
  c->in_lane++;
  curl_multi_cleanup(sh->multi); /* its connections close through on_closesocket */
  c->in_lane--;
  sh->multi = NULL;
  /* Nothing of ours may point at it any more: an entry left is a
   * descriptor curl closed without telling us (on_opensocket deals with it
   * when the number comes back). */
  for (size_t fd = 0; fd < c->cu.nsocks; fd++) {
    px_sock_t *s = c->cu.socks[fd];
    if (s && s->sh == sh) {
      if (s->counted) sh->nconn--;
      s->counted = false;
      s->sh = c->cu.shards[0];
    }
  }
  uv_close((uv_handle_t *)&sh->timer, on_shard_timer_closed);
}

static int curl_run(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  px_cshard_t *sh = shard_pick(c, x->u.cu.h2);
  curl_easy_setopt(x->u.cu.easy, CURLOPT_OPENSOCKETDATA, (void *)sh);
  c->in_lane++;
  CURLMcode rc = curl_multi_add_handle(sh->multi, x->u.cu.easy);
  c->in_lane--;
  if (rc != CURLM_OK) return -1;
  x->u.cu.in_multi = true;
  x->u.cu.sh = sh;
  sh->nrun++;
  return 0;
}

static void curl_resume(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  c->in_lane++;
  /* May call on_write (and on_data) before it returns. */
  CURLcode rc = curl_easy_pause(x->u.cu.easy, CURLPAUSE_CONT);
  c->in_lane--;
  /* curl may need a socket_action to read what waits in the socket. */
  x->u.cu.sh->nudge = true;
  c->cu.nudge = true;
  px_up_defer(c);
  if (rc != CURLE_OK && px_up_live(x))
    px_up_finish(x, x->aborted ? PX_XFER_EOTHER : PX_XFER_ERECV,
                 x->aborted ? "aborted by on_data" : curl_easy_strerror(rc), true);
}

static void curl_nudge(px_uclient_t *c) {
  if (!c->cu.nudge) return;
  c->cu.nudge = false;
  /* from the start after each drive: what it finishes may add or retire
   * shards */
  for (size_t i = 0; i < c->cu.nshards && !c->closing;) {
    px_cshard_t *sh = c->cu.shards[i];
    if (!sh->nudge) {
      i++;
      continue;
    }
    sh->nudge = false;
    drive(sh, CURL_SOCKET_TIMEOUT, 0);
    i = 0;
  }
  /* a shard emptied while curl was running */
  for (size_t i = c->cu.nshards; i > 1 && !c->closing && !c->in_lane; i--)
    if (c->cu.shards[i - 1]->nrun == 0) shard_retire(c, c->cu.shards[i - 1]);
}

static void curl_release(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  CURL *e = x->u.cu.easy;
  if (!e) return;
  bool clean = true;
  if (x->u.cu.in_multi) {
    /* Unfinished transfers get their connection closed by curl. */
    c->in_lane++;
    clean = curl_multi_remove_handle(x->u.cu.sh->multi, e) == CURLM_OK;
    c->in_lane--;
    x->u.cu.in_multi = false;
    if (--x->u.cu.sh->nrun == 0 && x->u.cu.sh != c->cu.shards[0] && !c->closing) {
      if (!c->in_lane) {
        shard_retire(c, x->u.cu.sh);
      } else { /* inside a curl call: curl_nudge retires it after */
        c->cu.nudge = true;
        px_up_defer(c);
      }
    }
  }
  if (x->u.cu.hdrs && x->u.cu.hdrs != x->u.cu.hl) free(x->u.cu.hdrs);
  x->u.cu.hdrs = NULL;
  x->u.cu.easy = NULL;
  px_pool_t *p = x->pool;
  if (clean && !c->closing && !x->paused && p->sig_set && x->u.cu.gen == p->sig_gen &&
      p->nfree_easy < PX_POOL_FREE_EASY) {
    /* back to the pool, pointing at nothing of x's */
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, (char *)NULL);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)NULL);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, (char *)NULL);
    p->free_easy[p->nfree_easy++] = e;
  } else {
    curl_easy_cleanup(e);
  }
}

static bool curl_connecting(px_xfer_t *x) {
  return false; /* curl times its connects (CURLOPT_CONNECTTIMEOUT_MS) */
}

static bool curl_bytes_waiting(px_xfer_t *x) {
  return false;
}


/* ---- client ---- */

static int curl_client_init(px_uclient_t *c) {
  if (shard_new(c)) return 0;
  free(c->cu.shards);
  c->cu.shards = NULL;
  return -1;
}

static void curl_client_close(px_uclient_t *c) {
  /* The pools' idle handles go first (pool free), then the multi closes
   * the cached connections through on_closesocket. */
  for (px_link_t *l = c->pools.next; l != &c->pools; l = l->next)
    pool_flush_easy(PX_CONTAINER(l, px_pool_t, link));
  c->in_lane++;
  for (size_t i = 0; i < c->cu.nshards; i++) {
    curl_multi_cleanup(c->cu.shards[i]->multi);
    c->cu.shards[i]->multi = NULL;
  }
  c->in_lane--;
  for (size_t i = 0; i < c->cu.nsocks; i++)
    if (c->cu.socks[i] && !c->cu.socks[i]->dropped) sock_drop(c, c->cu.socks[i]);
  free(c->cu.socks);
  c->cu.socks = NULL;
  c->cu.nsocks = 0;
  for (size_t i = 0; i < c->cu.nshards; i++)
    uv_close((uv_handle_t *)&c->cu.shards[i]->timer, on_shard_timer_closed);
  free(c->cu.shards);
  c->cu.shards = NULL;
  c->cu.nshards = 0;
}

const px_lane_t px_lane_curl = {
    .name = "curl",
    .prepare = curl_prepare,
    .run = curl_run,
    .resume = curl_resume,
    .release = curl_release,
    .connecting = curl_connecting,
    .bytes_waiting = curl_bytes_waiting,
    .times_connect = true,
    .client_init = curl_client_init,
    .client_close = curl_client_close,
    .collect = curl_collect,
    .pools_changed = curl_pools_changed,
    .pool_free = curl_pool_free,
    .nudge = curl_nudge,
};
