/**
 * xfer.c - the transfer core under the lanes: the client's handle
 * bookkeeping, the pool slots and queue, timers, the response head rules,
 * body delivery, pause and resume, cancel and the one finish. A lane
 * (upstream_h1.c, upstream_curl.c) moves the bytes and calls back here
 * (upstream_lane.h); this file reaches the lanes only through their
 * px_lane_t tables: a transfer's own lane, and the client's lanes for what
 * concerns all of them (collect, nudge, close). upstream.c, above, opens
 * transfers and picks their lane.
 *
 * Ownership: the client owns its transfers, pools and the lanes' objects. A
 * transfer is freed in the close callback of its timer, the client in the
 * last close callback after px_uclient_close(), so no object is freed while
 * a stack frame of ours may still point at it (c->depth counts those).
 *
 * Transfer states:
 *
 *   QUEUED --(pool slot)--> RUNNING --(lane done / timeout / cancel)--> DONE
 *      \________________________(cancel)____________________________/
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "upstream_lane.h"

static void arm_idle(px_xfer_t *x);

/* ---- handle bookkeeping ---- */

void px_up_enter(px_uclient_t *c) {
  c->depth++;
}

void px_up_leave(px_uclient_t *c) {
  if (--c->depth == 0 && c->closing && !c->closed) px_up_close(c);
}

void px_up_handle_closed(px_uclient_t *c) {
  if (--c->nhandles == 0 && c->closed) {
    void (*cb)(void *) = c->close_cb;
    void *arg = c->close_arg;
    while (!dl_empty(&c->spare)) {
      px_link_t *l = c->spare.next;
      dl_del(l);
      free(PX_CONTAINER(l, px_xfer_t, all));
    }
    free(c->h1.slab);
    free(c);
    if (cb) cb(arg);
  }
}

/* ---- the response head ---- */

static bool name_is(px_str_t n, const char *lit, size_t len) {
  return n.len == len && strncasecmp(n.ptr, lit, len) == 0;
}
#define NAME_IS(n, lit) name_is((n), (lit), sizeof(lit) - 1)

/* Whether token (a header name) is listed in a Connection value. */
static bool conn_lists(px_str_t conn, px_str_t token) {
  const char *p = conn.ptr, *e = p + conn.len;
  while (p < e) {
    while (p < e && (*p == ',' || *p == ' ' || *p == '\t')) p++;
    const char *s = p;
    while (p < e && *p != ',') p++;
    const char *te = p;
    while (te > s && (te[-1] == ' ' || te[-1] == '\t')) te--;
    if ((size_t)(te - s) == token.len && strncasecmp(s, token.ptr, token.len) == 0)
      return true;
  }
  return false;
}

/* Headers that describe this hop or the upstream's framing: the gateway
 * frames every response itself (SPEC section 10), so none is handed up. */
static bool hop_header(px_str_t n) {
  return NAME_IS(n, "content-length") || NAME_IS(n, "transfer-encoding") ||
         NAME_IS(n, "connection") || NAME_IS(n, "keep-alive") ||
         NAME_IS(n, "proxy-connection") || NAME_IS(n, "te") || NAME_IS(n, "trailer") ||
         NAME_IS(n, "upgrade") || NAME_IS(n, "proxy-authenticate");
}

int px_up_head_line(px_xfer_t *x, const char *p, size_t n) {
  if (px_buf_append(&x->hbuf, p, n) < 0 || px_buf_append(&x->hbuf, "\n", 1) < 0) {
    x->fail = "upstream response headers too large";
    return -1;
  }
  return 0;
}

int px_up_head_done(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  px_hdr_t hv[PX_UP_MAX_HEADERS];
  size_t n = 0;
  px_str_t conn = PX_STR_NULL;
  bool clen = false, te = false;
  px_te_t tes = {0};
  int64_t len = -1;
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
      while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t' || ve[-1] == '\r')) ve--;
      hv[n].name = (px_str_t){p, (size_t)(colon - p)};
      hv[n].value = (px_str_t){v, (size_t)(ve - v)};
      if (NAME_IS(hv[n].name, "content-length")) {
        clen = true;
        len = 0;
        for (size_t i = 0; i < hv[n].value.len && len >= 0; i++) {
          char ch = hv[n].value.ptr[i];
          len = ch >= '0' && ch <= '9' && len < (INT64_MAX - 9) / 10
                    ? len * 10 + (ch - '0')
                    : -1;
        }
        if (hv[n].value.len == 0) len = -1;
      }
      if (NAME_IS(hv[n].name, "transfer-encoding")) {
        te = true;
        px_te_scan(&tes, hv[n].value.ptr, hv[n].value.len);
      }
      if (NAME_IS(hv[n].name, "connection")) conn = hv[n].value;
      n++;
    }
    p = nl + 1;
  }
  if (clen && te) {
    /* RFC 9112 6.3: a sign of smuggling; an intermediary treats it as an
     * error. Both lanes answer the same. */
    x->fail = "upstream sent both Content-Length and Transfer-Encoding";
    x->fail_res = PX_XFER_EPROTO;
    return 0;
  }
  if (te && (tes.bad || tes.other || tes.chunked != 1)) {
    /* a transfer coding the lanes do not decode (gzip, ...): its bytes are
     * never handed up as the body (SPEC 10) */
    x->fail = "upstream sent a Transfer-Encoding other than chunked";
    x->fail_res = PX_XFER_EPROTO;
    return 0;
  }
  /* Keep only what may be handed up: no framing or hop-by-hop header, no
   * value breaking the header rule, no "Content-Encoding: identity". */
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (hop_header(hv[i].name) || !px_header_value_ok(hv[i].value.ptr, hv[i].value.len) ||
        hv[i].name.len == 0 || (conn.len && conn_lists(conn, hv[i].name)))
      continue;
    if (NAME_IS(hv[i].name, "content-encoding") &&
        (hv[i].value.len == 0 || NAME_IS(hv[i].value, "identity")))
      continue;
    hv[k++] = hv[i];
  }
  /* the length the lane enforces (it reads exactly that many bytes, or the
   * transfer fails): never a header to forward, but a length to reuse */
  x->content_length = x->status == 204 || x->status == 304 ? -1 : len;
  x->hdrs_done = true;
  x->last_activity = uv_now(c->loop);
  arm_idle(x);
  int rc = x->cbs.on_headers ? x->cbs.on_headers(x->arg, x->status, hv, k) : 0;
  px_buf_free(&x->hbuf);
  if (x->cancelled) return 0;
  if (rc != 0) {
    px_xfer_cancel(x);
    return 0;
  }
  return 1;
}

int px_up_deliver(px_xfer_t *x, const char *p, size_t n) {
  x->last_activity = uv_now(x->c->loop);
  if (!x->cbs.on_data || n == 0) return 0;
  int rc = x->cbs.on_data(x->arg, p, n);
  if (x->cancelled || x->c->closing) return -1;
  if (rc == PX_XFER_PAUSE) {
    x->paused = true;
    return PX_XFER_PAUSE;
  }
  if (rc < 0) {
    x->aborted = true;
    return -1;
  }
  return 0;
}

/* ---- transfers ---- */

/* Most closed transfers kept for the next ones: a transfer is a large
 * object, and malloc + free of it cost more than the rest of its set-up. */
#define PX_UP_SPARE_XFERS 64

static void on_xfer_closed(uv_handle_t *h) {
  px_xfer_t *x = h->data;
  px_uclient_t *c = x->c;
  if (!c->closed && c->nspare < PX_UP_SPARE_XFERS) {
    dl_push(&c->spare, &x->all); /* holds nothing now: lane released, timer closed */
    c->nspare++;
  } else {
    free(x);
  }
  px_up_handle_closed(c);
}

void px_up_finish(px_xfer_t *x, px_xfer_result_t res, const char *msg, bool notify) {
  px_uclient_t *c = x->c;
  if (x->state == XS_DONE) return;
  x->state = XS_DONE;
  dl_del(&x->q);
  dl_del(&x->reap);
  dl_del(&x->resume);
  dl_del(&x->all);
  if (!x->uncounted) c->active--;
  x->lane->release(x);
  px_buf_free(&x->hbuf);
  uv_timer_stop(&x->timer);
  uv_close((uv_handle_t *)&x->timer, on_xfer_closed);
  px_pool_t *p = x->pool;
  if (x->holds_slot) {
    x->holds_slot = false;
    p->running--;
  }
  px_up_kick(c, p);
  if (notify && !x->cancelled && !c->closing && x->cbs.on_done)
    x->cbs.on_done(x->arg, res, msg);
}

static void on_xfer_timer(uv_timer_t *t) {
  px_xfer_t *x = t->data;
  px_uclient_t *c = x->c;
  if (!px_up_live(x)) return;
  px_up_enter(c);
  uint64_t now = uv_now(c->loop);
  if (!x->hdrs_done) {
    /* one timer for two deadlines: connect (when the lane leaves it to us),
     * then first byte */
    bool connecting = x->connect_deadline && x->lane->connecting(x);
    if (connecting && now >= x->connect_deadline)
      px_up_finish(x, PX_XFER_ETIMEOUT_CONNECT, "upstream connect timeout", true);
    else if (x->first_byte_deadline && now >= x->first_byte_deadline)
      px_up_finish(x, PX_XFER_ETIMEOUT_FIRST_BYTE, "upstream first byte timeout", true);
    else {
      uint64_t next = x->first_byte_deadline;
      if (connecting && (!next || x->connect_deadline < next)) next = x->connect_deadline;
      if (next) uv_timer_start(t, on_xfer_timer, next > now ? next - now : 0, 0);
    }
  } else if (x->paused) {
    uv_timer_start(t, on_xfer_timer, x->idle_ms, 0); /* paused: not idle */
  } else {
    uint64_t el = now - x->last_activity;
    /* bytes already waiting in the socket (read in this loop iteration's
     * poll phase, after the timers) are not idleness */
    if (el >= x->idle_ms && x->lane->bytes_waiting(x)) el = 0;
    if (el >= x->idle_ms)
      px_up_finish(x, PX_XFER_ETIMEOUT_IDLE, "upstream idle timeout", true);
    else
      uv_timer_start(t, on_xfer_timer, x->idle_ms - el, 0);
  }
  px_up_leave(c);
}

/* The idle timer replaces the head timers once headers are in. */
static void arm_idle(px_xfer_t *x) {
  if (!x->idle_ms) {
    uv_timer_stop(&x->timer);
    return;
  }
  /* A timer due sooner (the head's deadlines) is left as it is: when it
   * fires it finds the headers in and re-arms for what is left of the idle
   * time, as after any activity. One timer start less per request. */
  if (uv_is_active((const uv_handle_t *)&x->timer) &&
      uv_timer_get_due_in(&x->timer) <= x->idle_ms)
    return;
  uv_timer_start(&x->timer, on_xfer_timer, x->idle_ms, 0);
}

int px_up_run(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  x->state = XS_RUNNING;
  x->holds_slot = true;
  x->pool->running++;
  uint64_t now = uv_now(c->loop);
  x->first_byte_deadline = x->first_byte_ms ? now + x->first_byte_ms : 0;
  if (!x->lane->times_connect) /* else the lane times its own connects */
    x->connect_deadline = now + (x->connect_ms ? x->connect_ms : 300000);
  uint64_t next = x->first_byte_deadline;
  if (x->connect_deadline && (!next || x->connect_deadline < next))
    next = x->connect_deadline;
  if (next) uv_timer_start(&x->timer, on_xfer_timer, next - now, 0);
  return x->lane->run(x);
}

void px_up_kick(px_uclient_t *c, px_pool_t *p) {
  if (c->closing) return;
  if (c->in_lane) {
    c->kick_pending = true;
    return;
  }
  while (!dl_empty(&p->queue) && (p->max == 0 || p->running < p->max)) {
    px_xfer_t *x = PX_CONTAINER(p->queue.next, px_xfer_t, q);
    dl_del(&x->q);
    if (px_up_run(x) < 0)
      px_up_finish(x, PX_XFER_EOTHER, "cannot start the transfer", true);
    if (c->closing) return;
  }
}

void px_up_after(px_uclient_t *c) {
  for (;;) {
    if (c->closing || c->in_lane) return;
    if (!dl_empty(&c->reap)) {
      px_xfer_t *x = PX_CONTAINER(c->reap.next, px_xfer_t, reap);
      px_up_finish(x, PX_XFER_EOTHER, NULL, false);
      continue;
    }
    if (c->kick_pending) {
      c->kick_pending = false;
      for (px_link_t *l = c->pools.next; l != &c->pools && !c->closing; l = l->next)
        px_up_kick(c, PX_CONTAINER(l, px_pool_t, link));
      continue;
    }
    /* one finished transfer a lane reports at a time (curl's): its
     * on_done may cancel or start others */
    bool got = false;
    for (size_t i = 0; i < PX_LANES && !got; i++)
      got = c->lanes[i]->collect && c->lanes[i]->collect(c);
    if (!got) return;
  }
}

static void on_defer(uv_timer_t *t) {
  px_uclient_t *c = t->data;
  if (c->closing) return;
  px_up_enter(c);
  while (!dl_empty(&c->resumes) && !c->closing) {
    px_xfer_t *x = PX_CONTAINER(c->resumes.next, px_xfer_t, resume);
    dl_del(&x->resume);
    px_xfer_resume(x);
  }
  for (size_t i = 0; i < PX_LANES && !c->closing; i++)
    if (c->lanes[i]->nudge) c->lanes[i]->nudge(c);
  px_up_leave(c);
}

void px_up_defer(px_uclient_t *c) {
  uv_timer_start(&c->defer, on_defer, 0, 0);
}

void px_xfer_resume(px_xfer_t *x) {
  if (!x || x->state != XS_RUNNING || !x->paused || x->cancelled) return;
  px_uclient_t *c = x->c;
  if (c->closing) return;
  if (c->in_lane) {
    if (!dl_linked(&x->resume)) dl_push(&c->resumes, &x->resume);
    px_up_defer(c);
    return;
  }
  px_up_enter(c);
  x->paused = false;
  x->last_activity = uv_now(c->loop);
  x->lane->resume(x);
  px_up_after(c);
  px_up_leave(c);
}

int64_t px_xfer_content_length(const px_xfer_t *x) {
  return x && x->hdrs_done ? x->content_length : -1;
}

int px_xfer_paused(const px_xfer_t *x) {
  return x && x->paused;
}

void px_xfer_cancel(px_xfer_t *x) {
  if (!x || x->state == XS_DONE || x->cancelled) return;
  px_uclient_t *c = x->c;
  x->cancelled = true;
  if (c->in_lane && x->state == XS_RUNNING) {
    /* Inside a lane call: its callbacks now fail; reaped after the call. */
    dl_push(&c->reap, &x->reap);
    x->uncounted = true;
    c->active--;
    return;
  }
  px_up_enter(c);
  px_up_finish(x, PX_XFER_EOTHER, NULL, false);
  px_up_leave(c);
}


static void on_client_timer_closed(uv_handle_t *h) {
  px_up_handle_closed(h->data);
}

void px_up_close(px_uclient_t *c) {
  c->closed = true;
  while (!dl_empty(&c->xfers))
    px_up_finish(PX_CONTAINER(c->xfers.next, px_xfer_t, all), PX_XFER_EOTHER, NULL,
                 false);
  for (size_t i = 0; i < PX_LANES; i++)
    if (c->lanes[i]->client_close) c->lanes[i]->client_close(c);
  while (!dl_empty(&c->pools)) {
    px_pool_t *p = PX_CONTAINER(c->pools.next, px_pool_t, link);
    dl_del(&p->link);
    for (size_t i = 0; i < PX_LANES; i++)
      if (c->lanes[i]->pool_free) c->lanes[i]->pool_free(p);
    free(p);
  }
  uv_close((uv_handle_t *)&c->defer, on_client_timer_closed);
}
