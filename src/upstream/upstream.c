/**
 * upstream.c - the transfer interface: a transfer is opened here on a pool
 * and a lane, upstream_h1.c (built-in HTTP/1.1, the default for http://
 * and https:// upstreams) or upstream_curl.c (libcurl multi: HTTP/2,
 * `client = curl`); the client is created and closed here with its lanes.
 * Everything else of a transfer's life is the transfer core's (xfer.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "upstream_lane.h"

_Static_assert(PX_XFER_CLIENT_AUTO == 0 && PX_XFER_CLIENT_CURL == 1 &&
                   PX_XFER_CLIENT_BUILTIN == 2,
               "config.h's client values");

/* A pool was added or its limit changed (a lane may follow the sum). */
static void pools_changed(px_uclient_t *c) {
  for (size_t i = 0; i < PX_LANES; i++)
    if (c->lanes[i]->pools_changed) c->lanes[i]->pools_changed(c);
}

static px_pool_t *pool_get(px_uclient_t *c, const char *name, unsigned max) {
  if (!name) name = "";
  for (px_link_t *l = c->pools.next; l != &c->pools; l = l->next) {
    px_pool_t *p = PX_CONTAINER(l, px_pool_t, link);
    if (strcmp(p->name, name) == 0) {
      if (p->max != max) {
        p->max = max;
        pools_changed(c);
      }
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
  pools_changed(c);
  return p;
}

static const px_lane_t *pick_lane(px_uclient_t *c, const px_xfer_opts_t *o,
                                  const char *m) {
  int want = o->client ? o->client : c->default_client;
  if (want == PX_XFER_CLIENT_CURL || o->http2) return &px_lane_curl;
  if (strcmp(m, "POST") != 0 && strcmp(m, "GET") != 0) return &px_lane_curl;
  return &px_lane_h1; /* its prepare refuses a URL it does not take: then curl */
}

px_xfer_t *px_xfer_start(px_uclient_t *c, const px_xfer_opts_t *o,
                         const px_xfer_cbs_t *cbs, void *arg) {
  if (!c || c->closing || !o || !o->url) return NULL;
  /* not calloc: the lanes' large arrays need no zeroing */
  px_xfer_t *x;
  if (!dl_empty(&c->spare)) {
    x = PX_CONTAINER(c->spare.next, px_xfer_t, all);
    dl_del(&x->all);
    c->nspare--;
  } else if (!(x = malloc(sizeof(*x)))) {
    return NULL;
  }
  memset(x, 0, offsetof(px_xfer_t, errbuf));
  x->errbuf[0] = 0;
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
  x->fail_res = PX_XFER_EOTHER;
  px_buf_init(&x->hbuf, PX_UP_MAX_HEADER_BYTES);
  x->state = XS_QUEUED;
  if (!(x->pool = pool_get(c, o->pool, o->max_connections))) goto fail;
  const char *m = o->method ? o->method : (o->body ? "POST" : "GET");
  x->lane = pick_lane(c, o, m);
  if (x->lane->prepare(x, o) < 0) {
    if (x->lane == &px_lane_curl) goto fail;
    x->lane = &px_lane_curl; /* a URL the built-in lane cannot take */
    if (x->lane->prepare(x, o) < 0) goto fail;
  }
  uv_timer_init(c->loop, &x->timer);
  x->timer.data = x;
  c->nhandles++;
  dl_push(&c->xfers, &x->all);
  c->active++;
  px_pool_t *p = x->pool;
  px_up_enter(c);
  if (!c->in_lane && dl_empty(&p->queue) && (p->max == 0 || p->running < p->max)) {
    if (px_up_run(x) < 0) {
      x->cancelled = true; /* no callback: the caller gets NULL */
      px_up_finish(x, PX_XFER_EOTHER, NULL, false);
      x = NULL;
    }
  } else {
    dl_push(&p->queue, &x->q);
    px_up_kick(c, p);
  }
  px_up_leave(c);
  return x;
fail:
  px_buf_free(&x->hbuf);
  free(x);
  return NULL;
}

px_uclient_t *px_uclient_new(uv_loop_t *loop) {
  px_uclient_t *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->loop = loop;
  dl_init(&c->xfers);
  dl_init(&c->reap);
  dl_init(&c->resumes);
  dl_init(&c->pools);
  dl_init(&c->spare);
  c->lanes[0] = &px_lane_curl; /* closed in this order: curl, then built-in */
  c->lanes[1] = &px_lane_h1;
  /* The lane of upstreams with no `client =`: built-in for plain http://.
   * PROXAI_UPSTREAM_CLIENT=curl overrides that default (the test suites run
   * once per lane with it). */
  const char *env = getenv("PROXAI_UPSTREAM_CLIENT");
  c->default_client =
      env && strcmp(env, "curl") == 0 ? PX_XFER_CLIENT_CURL : PX_XFER_CLIENT_BUILTIN;
  for (size_t i = 0; i < PX_LANES; i++) {
    if (c->lanes[i]->client_init && c->lanes[i]->client_init(c) < 0) {
      while (i-- > 0)
        if (c->lanes[i]->client_close) c->lanes[i]->client_close(c);
      free(c);
      return NULL;
    }
  }
  uv_timer_init(loop, &c->defer);
  c->defer.data = c;
  c->nhandles++;
  return c;
}

size_t px_uclient_active(const px_uclient_t *c) {
  return c ? c->active : 0;
}

void px_uclient_close(px_uclient_t *c, void (*cb)(void *arg), void *arg) {
  if (!c || c->closing) return;
  c->closing = true;
  c->close_cb = cb;
  c->close_arg = arg;
  /* No callback fires from here on, even for transfers a lane is inside. */
  for (px_link_t *l = c->xfers.next; l != &c->xfers; l = l->next)
    PX_CONTAINER(l, px_xfer_t, all)->cancelled = true;
  if (c->depth == 0) px_up_close(c);
}
