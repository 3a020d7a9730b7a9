/* stored.c - stored responses in the request core (SPEC section 14): a
 * client protocol whose clients name responses kept on the server (its ops
 * have `store`) talking to an upstream that cannot keep them (no
 * PX_CAP_STORED_RESPONSES) gets them kept by the gateway, in the state
 * backend (rstore.h). It knows no protocol: the client protocol's store ops
 * read and write the bodies.
 *
 *   admission: previous id -> the chain, one read -> the body expanded
 *              (or 404 / 413 / 503 before anything is sent upstream)
 *   attempt:   the upstream cannot store -> the response id is minted here
 *   answer:    JSON: the body held; stream: the terminal event held ->
 *              one write -> then the client gets it (a follow-up sent the
 *              instant it arrives finds the turn)
 *   endpoints: GET / DELETE {id}, GET {id}/input_items
 *
 * finalize() waits for a pending write while the client is there to get
 * what is held (defer, x->rs_part). A client that leaves does not cut the
 * turn short: its write is with the backend already; only its answer is no
 * longer waited for.
 */
#include "stored.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxai/log.h"
#include "proxai/rstore.h"
#include "proxai/worker.h"

/* Turns a chain may have: past it, the conversation is refused as too big. */
#define PX_STORED_MAX_TURNS 10000
/* Bytes of a chain's turns released between two returns of their pages */
#define PX_STORED_TRIM (2u << 20)

struct px_stored_x {
  int save;            /* the client's store flag (and the gateway's) */
  int saving;          /* this attempt's upstream cannot store: the gateway does */
  int busy;            /* a write is pending: finalize waits */
  int finalize_wanted; /* finalize came while busy */
  int taken;           /* the terminal event was looked at */
  int held_json;       /* held is a whole JSON answer (else a stream's last event) */
  char id[40];
  char prev[PX_STORED_ID_MAX + 1];
  px_buf_t input; /* the request's own input items */
  px_buf_t held;  /* what the client gets once the turn is written */
  px_rs_op_t *op;
  void (*go)(px_exch_t *x); /* the attempt, after a pending admission */
};

static int defer(px_exch_t *x);
static void part_free(px_exch_t *x);
static const px_exch_part_t part = {defer, part_free};

static const px_store_ops_t *sops(px_exch_t *x) {
  return px_exch_client_ops(x)->store;
}

static px_rs_where_t where(uv_loop_t *loop, const px_config_t *cfg) {
  return (px_rs_where_t){loop, cfg->state.prefix ? cfg->state.prefix : "",
                         cfg->responses.ttl_ms, cfg->responses.max_size,
                         cfg->responses.timeout_ms};
}

/* Who owns a stored response: the key's name ("" for an open gateway). */
static const char *owner_of(const px_key_conf_t *k) {
  return k ? k->name : "";
}

static int can_store(px_proto_t p) {
  return (px_proto_get(p)->caps & PX_CAP_STORED_RESPONSES) != 0;
}

/* "resp_" + 24 random letters and digits; <0 without randomness. The
 * bytes come from OpenSSL's generator in batches (one call costs about as
 * much for 1 KiB as for 24 bytes). */
static int mint(char *out, size_t cap) {
  static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  static unsigned char pool[1008];
  static size_t used = sizeof(pool);
  static pid_t owner; /* a pool never serves two processes (fork) */
  if (used + 24 > sizeof(pool) || owner != getpid()) {
    if (RAND_bytes(pool, sizeof(pool)) != 1) return -1;
    used = 0;
    owner = getpid();
  }
  char s[25];
  for (size_t i = 0; i < 24; i++) s[i] = al[pool[used + i] % 36];
  memset(pool + used, 0, 24); /* each byte serves once */
  used += 24;
  s[24] = 0;
  snprintf(out, cap, "resp_%s", s);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* admission: the chain                                                      */

static void not_found(px_exch_t *x, const char *prev, const char *missing) {
  char msg[400];
  if (missing == NULL || strcmp(missing, prev) == 0)
    snprintf(msg, sizeof(msg), "Previous response with id '%s' not found.", prev);
  else
    snprintf(msg, sizeof(msg),
             "Previous response with id '%s' cannot be continued: '%s' in its "
             "conversation was not found (expired or deleted).",
             prev, missing);
  px_exch_error(x, PX_ERR_NOT_FOUND, msg, "previous_response_id");
}

static void too_big(px_exch_t *x) {
  char msg[400];
  snprintf(msg, sizeof(msg),
           "the conversation of previous_response_id '%s' is over the request size limit "
           "(max_body %llu bytes); start a new conversation",
           x->rs->prev, (unsigned long long)x->cfg->server.max_body);
  px_exch_error(x, PX_ERR_TOO_LARGE, msg, "previous_response_id");
}

/* The chain being copied into the expanded body (expand's used callback). */
typedef struct chain_use {
  px_rs_op_t *op;
  const px_stored_turn_t *turns;
  size_t freed; /* bytes released since their pages last went back */
} chain_use_t;

/* A turn is in the expanded body: the backend's copy of it goes. glibc
 * keeps freed heap pages resident when live chunks sit between them (the
 * reply's small parts do): every PX_STORED_TRIM bytes they are given back,
 * so the chain is in memory once while it is copied, not twice. */
static void turn_used(void *arg, size_t t) {
  chain_use_t *u = arg;
  u->freed += u->turns[t].input.len + u->turns[t].response.len;
  px_rs_release(u->op, t);
#if defined(__GLIBC__)
  if (u->freed >= PX_STORED_TRIM) {
    malloc_trim(0);
    u->freed = 0;
  }
#endif
}

/* The body carries the chain from here on: scanned again, as a client's.
 * It is written once at its final size (no growth by copies), each turn
 * released from the backend's reply as soon as it is in (turn_used): the
 * chain is in memory once, never twice (issue 23). */
static int expand(px_exch_t *x, px_rs_op_t *op, const px_stored_turn_t *turns, size_t n) {
  px_buf_t nb;
  px_buf_init(&nb, x->cfg->server.max_body);
  size_t need = x->req->body.len + 64;
  for (size_t t = 0; t < n; t++) need += turns[t].input.len + turns[t].response.len + 2;
  const char *bd = x->req->body.data ? x->req->body.data : "";
  int rc = px_buf_reserve(&nb, need < nb.cap ? need : nb.cap);
  chain_use_t use = {op, turns, 0};
  if (rc == 0)
    rc = sops(x)->expand(bd, x->req->body.len, &x->jreq, turns, n, &nb, turn_used, &use);
  if (rc == 0) rc = px_buf_reserve(&nb, 1); /* NUL-terminated, as a client's */
  if (rc == 0) nb.data[nb.len] = 0;
  /* the same scan as admission's (its output cap included) */
  if (rc == 0 &&
      px_json_request_watch(nb.data, nb.len, px_exch_client_ops(x)->max_tokens_keys,
                            sops(x)->members, &x->jreq) < 0)
    rc = PX_EPROTO;
  if (rc < 0) {
    px_buf_free(&nb);
    if (rc == PX_ETOOBIG)
      too_big(x);
    else
      px_exch_error(x, PX_ERR_API, "the stored conversation cannot be read back",
                    "previous_response_id");
    return -1;
  }
  nb.cap = x->req->body.cap > nb.cap ? x->req->body.cap : nb.cap;
  px_buf_free(&x->req->body);
  x->req->body = nb;
  return 0;
}

/* The attempt starts once the chain's copy is released: the conversation
 * is in memory once (the expanded body) while it is translated. */
static void on_expanded(void *arg, px_rs_status_t st) {
  px_exch_t *x = arg;
  x->rs->op = NULL;
  x->rs->go(x);
}

static void on_chain(void *arg, px_rs_status_t st, const px_stored_turn_t *turns,
                     size_t n, const char *missing) {
  px_exch_t *x = arg;
  px_stored_x_t *rs = x->rs;
  px_rs_op_t *op = rs->op; /* alive until this returns */
  rs->op = NULL;
  const px_upstream_conf_t *up = &x->cfg->upstreams[x->route->upstream];
  switch (st) {
    case PX_RS_OK: {
      if (expand(x, op, turns, n) < 0) return;
      px_rs_where_t w = where(x->w->loop, x->cfg);
      if ((rs->op = px_rs_defer(&w, on_expanded, x)) != NULL) return;
      break;
    }
    case PX_RS_NOT_FOUND:
      /* not the gateway's: an upstream that stores may know it */
      if (can_store(up->protocol) && missing && strcmp(missing, rs->prev) == 0) {
        rs->prev[0] = 0;
        break;
      }
      not_found(x, rs->prev, missing);
      return;
    case PX_RS_TOO_BIG:
      too_big(x);
      return;
    default:
      px_exch_error(x, PX_ERR_UNAVAILABLE,
                    "stored responses cannot be read: the state backend is unreachable",
                    "previous_response_id");
      return;
  }
  rs->go(x);
}

/* Whether a target of the route (deployment or fallback) cannot store. */
static int route_may_keep(const px_exch_t *x) {
  const px_route_conf_t *rt = x->route;
  for (size_t d = 0; d < rt->ndeployments; d++)
    if (!can_store(x->cfg->upstreams[rt->deployments[d].upstream].protocol)) return 1;
  for (size_t f = 0; f < rt->nfallbacks; f++)
    if (!can_store(x->cfg->upstreams[rt->fallbacks[f].upstream].protocol)) return 1;
  return 0;
}

int px_stored_admit(px_exch_t *x, void (*go)(px_exch_t *x)) {
  const px_store_ops_t *so = sops(x);
  if (so == NULL || x->ep != PX_EP_GENERATE || !x->cfg->responses.store) return 0;
  const char *bd = x->req->body.data ? x->req->body.data : "";
  char prev[PX_STORED_ID_MAX + 1];
  int store = 1;
  if (so->fields(bd, &x->jreq, prev, sizeof(prev), &store) < 0) {
    px_exch_error(x, PX_ERR_INVALID,
                  "previous_response_id must be a response id (letters, digits, '_' and "
                  "'-', at most 128)",
                  "previous_response_id");
    return -1;
  }
  /* nothing to keep nor to read: a route of upstreams that store, or no
   * backend to keep them in */
  int backend = px_rs_available();
  if (prev[0] == 0 && (!store || !backend || !route_may_keep(x))) return 0;
  px_stored_x_t *rs = calloc(1, sizeof(*rs));
  if (rs == NULL) {
    px_exch_error(x, PX_ERR_API, "out of memory", NULL);
    return -1;
  }
  x->rs = rs;
  x->rs_part = &part;
  rs->go = go;
  px_buf_init(&rs->input, 2 * x->cfg->server.max_body + 4096); /* ids added */
  px_buf_init(&rs->held, SIZE_MAX);
  /* a body whose input cannot be read is the translator's to refuse */
  rs->save = store && backend && mint(rs->id, sizeof(rs->id)) == 0 &&
             so->input_items(bd, &x->jreq, rs->id, &rs->input) == 0;
  if (prev[0] == 0) return 0;
  int up_stores = can_store(x->cfg->upstreams[x->route->upstream].protocol);
  if (!backend) { /* nowhere to keep them: an upstream that stores may know it */
    if (up_stores) return 0;
    px_exch_error(
        x, PX_ERR_INVALID,
        "previous_response_id needs stored responses, which need a state backend "
        "([state] dir, or backend = redis); send the full conversation in input",
        "previous_response_id");
    return -1;
  }
  snprintf(rs->prev, sizeof(rs->prev), "%s", prev);
  px_rs_where_t w = where(x->w->loop, x->cfg);
  rs->op = px_rs_chain(&w, owner_of(x->key), prev, x->cfg->server.max_body,
                       PX_STORED_MAX_TURNS, on_chain, x);
  if (rs->op == NULL) { /* never a shortened conversation */
    px_exch_error(x, PX_ERR_UNAVAILABLE,
                  "stored responses cannot be read: the state backend is unreachable",
                  "previous_response_id");
    return -1;
  }
  return 1;
}

/* ---------------------------------------------------------------------- */
/* the attempt and the answer                                                */

void px_stored_ctx(px_exch_t *x, px_tr_ctx_t *ctx) {
  px_stored_x_t *rs = x->rs;
  if (rs == NULL || can_store(x->out)) {
    if (rs) rs->saving = 0;
    return;
  }
  rs->saving = rs->save;
  if (rs->saving) ctx->resp_id = rs->id;
  if (rs->prev[0]) ctx->prev_id = rs->prev;
}

/* The turn is written (or not): the client gets what was held. */
static void on_put(void *arg, px_rs_status_t st) {
  px_exch_t *x = arg;
  px_stored_x_t *rs = x->rs;
  rs->op = NULL;
  rs->busy = 0;
  if (st != PX_RS_OK)
    px_log_req(PX_LOG_WARN, x->req->request_id, "response %s not stored: %s", rs->id,
               st == PX_RS_TOO_BIG     ? "larger than [responses] max_size"
               : st == PX_RS_NOT_FOUND ? "its id is taken"
                                       : "the state backend is unreachable");
  if (rs->held_json) {
    if (x->conn != NULL &&
        px_exch_respond(x, 200, "application/json", 0, (int64_t)rs->held.len) == 0)
      px_exch_write(x, rs->held.data, rs->held.len);
    px_exch_finalize(x);
    return;
  }
  /* the terminal event goes out as every other event of the stream does
   * (px_exch_flush; the trace read it when the encoder wrote it) */
  if (px_buf_append(&x->obuf, rs->held.data, rs->held.len) == 0)
    px_exch_flush(x);
  else
    px_exch_write(x, rs->held.data, rs->held.len);
  if (rs->finalize_wanted) px_exch_finalize(x);
}

/* Write the turn whose response object is the span resp of rs->held. */
static int put(px_exch_t *x, px_str_t resp) {
  px_stored_x_t *rs = x->rs;
  px_rs_where_t w = where(x->w->loop, x->cfg);
  rs->op = px_rs_put(&w, rs->id, owner_of(x->key), rs->prev,
                     (px_str_t){rs->input.data ? rs->input.data : "[]", rs->input.len},
                     resp, on_put, x);
  if (rs->op == NULL) {
    px_log_req(PX_LOG_WARN, x->req->request_id,
               "response %s not stored: the state backend is unreachable", rs->id);
    return -1;
  }
  rs->busy = 1;
  return 0;
}

int px_stored_json(px_exch_t *x, const char *p, size_t n) {
  px_stored_x_t *rs = x->rs;
  if (rs == NULL || !rs->saving || rs->taken || x->conn == NULL) return 0;
  rs->taken = 1;
  px_buf_reset(&rs->held);
  if (px_buf_append(&rs->held, p, n) < 0) return 0;
  rs->held_json = 1;
  return put(x, (px_str_t){rs->held.data, rs->held.len}) == 0;
}

void px_stored_stream(px_exch_t *x) {
  px_stored_x_t *rs = x->rs;
  if (rs == NULL || !rs->saving || rs->taken || x->str == NULL ||
      !px_stream_tr_done(x->str))
    return;
  rs->taken = 1;
  size_t at;
  px_str_t resp;
  if (!sops(x)->final_event(x->obuf.data, x->obuf.len, &at, &resp)) return;
  size_t off = (size_t)(resp.ptr - (x->obuf.data + at));
  px_buf_reset(&rs->held);
  if (px_buf_append(&rs->held, x->obuf.data + at, x->obuf.len - at) < 0) return;
  x->obuf.len = at;
  if (put(x, (px_str_t){rs->held.data + off, resp.len}) < 0) {
    /* not kept: the event goes out as it is */
    px_buf_append(&x->obuf, rs->held.data, rs->held.len);
  }
}

/* finalize() waits while a write is pending: 1 (it is called again). */
static int defer(px_exch_t *x) {
  px_stored_x_t *rs = x->rs;
  if (rs == NULL || !rs->busy) return 0;
  if (x->conn == NULL) {
    /* the client is gone (and its request with the connection, soon):
     * nobody waits for the held answer. The write was handed to the
     * backend already (Redis: sent; the host's store: done) and completes
     * there; only its answer is not waited for. */
    px_rs_cancel(rs->op);
    rs->op = NULL;
    rs->busy = 0;
    return 0;
  }
  rs->finalize_wanted = 1;
  /* the answer is complete (its last event held): nothing more from
   * upstream is read */
  if (x->xfer) {
    px_xfer_cancel(x->xfer);
    x->xfer = NULL;
  }
  return 1;
}

static void part_free(px_exch_t *x) {
  px_stored_x_t *rs = x->rs;
  if (rs == NULL) return;
  if (rs->op) px_rs_cancel(rs->op);
  px_buf_free(&rs->input);
  px_buf_free(&rs->held);
  free(rs);
  x->rs = NULL;
}

/* ---------------------------------------------------------------------- */
/* GET / DELETE {id}, GET {id}/input_items                                   */

typedef struct serve {
  px_conn_t *conn;
  const px_proto_ops_t *ops;
  px_rs_op_t *op;
  px_config_t *cfg;
  px_worker_t *w;
  const px_upstream_conf_t *fwd; /* where an id it does not hold goes, or NULL */
  const px_req_t *req;
  /* forwarded to an upstream that stores its own */
  px_xfer_t *xfer;
  int up_status;
  px_buf_t body;
  char *url;
  char *hdrs[4 + 32];
  char *lines; /* what hdrs point into */
  int items;
  int del;
  char id[PX_STORED_ID_MAX + 1];
  char *query;
  size_t qlen;
} serve_t;

static void serve_free(serve_t *s) {
  px_config_unref(s->cfg);
  free(s->query);
  free(s->url);
  free(s->lines);
  px_buf_free(&s->body);
  free(s);
}

static void serve_closed(void *arg) {
  serve_t *s = arg;
  if (s->op) px_rs_cancel(s->op);
  if (s->xfer) px_xfer_cancel(s->xfer);
  serve_free(s);
}

static const px_conn_handler_t serve_handler = {NULL, serve_closed};

static void serve_error(px_conn_t *c, const px_proto_ops_t *ops, px_errkind_t kind,
                        const char *msg, const char *param) {
  px_buf_t b;
  px_buf_init(&b, 4096);
  ops->encode_error(&b, kind, ops->error_type(kind), msg, param, NULL);
  px_resp_simple(c, px_errkind_status(kind), "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
}

static void serve_not_found(serve_t *s) {
  char msg[256];
  snprintf(msg, sizeof(msg), "Response with id '%s' not found.", s->id);
  serve_error(s->conn, s->ops, PX_ERR_NOT_FOUND, msg, "response_id");
}

static void serve_unavailable(px_conn_t *c, const px_proto_ops_t *ops) {
  serve_error(c, ops, PX_ERR_UNAVAILABLE,
              "stored responses cannot be read: the state backend is unreachable", NULL);
}

/* The answer is due: the connection goes back to the server first. */
static px_conn_t *serve_take(serve_t *s) {
  s->op = NULL;
  px_conn_set_handler(s->conn, NULL, NULL);
  return s->conn;
}

/* The upstream a stored response the gateway does not hold may belong to:
 * the first one in file order whose protocol stores (PX_CAP_STORED_RESPONSES)
 * and that a route of a model the key may use sends to. */
static const px_upstream_conf_t *owner_upstream(const px_config_t *cfg,
                                                const px_key_conf_t *k) {
  for (size_t u = 0; u < cfg->nupstreams; u++) {
    if (!can_store(cfg->upstreams[u].protocol)) continue;
    for (size_t r = 0; r < cfg->nroutes; r++) {
      const px_route_conf_t *rt = &cfg->routes[r];
      int uses = 0;
      for (size_t d = 0; d < rt->ndeployments && !uses; d++)
        uses = rt->deployments[d].upstream == u;
      for (size_t f = 0; f < rt->nfallbacks && !uses; f++)
        uses = rt->fallbacks[f].upstream == u;
      if (uses && (k == NULL || px_key_allows(k, rt->pattern))) return &cfg->upstreams[u];
    }
  }
  return NULL;
}

static int fwd_headers(void *arg, int status, const px_hdr_t *h, size_t n) {
  serve_t *s = arg;
  s->up_status = status;
  return 0;
}

static int fwd_data(void *arg, const char *p, size_t n) {
  serve_t *s = arg;
  return px_buf_append(&s->body, p, n) < 0 ? -1 : 0;
}

static void fwd_done(void *arg, px_xfer_result_t r, const char *errmsg) {
  serve_t *s = arg;
  s->xfer = NULL;
  px_conn_t *c = s->conn;
  px_conn_set_handler(c, NULL, NULL);
  if (r != PX_XFER_OK || s->up_status < 200) {
    serve_error(c, s->ops, r == PX_XFER_OK ? PX_ERR_BAD_GATEWAY : px_exch_result_kind(r),
                "bad gateway: the upstream that stores this response did not answer",
                NULL);
  } else {
    px_resp_simple(c, s->up_status, "application/json", s->body.data ? s->body.data : "",
                   s->body.len, NULL, 0);
  }
  serve_free(s);
}

static const px_xfer_cbs_t fwd_cbs = {fwd_headers, fwd_data, fwd_done};

/* Ask the upstream that stores it (SPEC 14): 0 when the transfer started. */
static int forward(serve_t *s, const px_upstream_conf_t *up) {
  const px_proto_ops_t *uops = px_proto_get(up->protocol);
  px_buf_t b;
  px_buf_init(&b, 64u << 10);
  int rc = px_buf_puts(&b, up->base_url);
  if (rc == 0) rc = px_buf_puts(&b, uops->upstream_path);
  if (rc == 0) rc = px_buf_printf(&b, "/%s%s", s->id, s->items ? "/input_items" : "");
  if (rc == 0 && s->qlen) rc = px_buf_append(&b, s->query, s->qlen);
  if (rc == 0) rc = px_buf_append(&b, "", 1);
  if (rc < 0) {
    px_buf_free(&b);
    return -1;
  }
  s->url = px_buf_steal(&b, NULL);
  /* auth, the request id, the upstream's own header lines */
  px_buf_init(&b, 1u << 20);
  size_t at[36], n = 0;
  if (up->api_key) {
    at[n++] = b.len;
    rc = px_buf_printf(&b, "%s%s", uops->auth_header, up->api_key);
    if (rc == 0) rc = px_buf_append(&b, "", 1);
  }
  if (rc == 0) {
    at[n++] = b.len;
    rc = px_buf_printf(&b, "x-request-id: %s", s->req->request_id);
    if (rc == 0) rc = px_buf_append(&b, "", 1);
  }
  for (size_t i = 0; rc == 0 && i < up->nheaders && n < 35; i++) {
    at[n++] = b.len;
    rc = px_buf_puts(&b, up->headers[i]);
    if (rc == 0) rc = px_buf_append(&b, "", 1);
  }
  if (rc < 0) {
    px_buf_free(&b);
    return -1;
  }
  s->lines = px_buf_steal(&b, NULL);
  for (size_t i = 0; i < n; i++) s->hdrs[i] = s->lines + at[i];
  s->hdrs[n] = NULL;
  px_buf_init(&s->body, 64u << 20);
  px_xfer_opts_t o = {
      .method = s->del ? "DELETE" : "GET",
      .url = s->url,
      .headers = (const char *const *)s->hdrs,
      .connect_timeout_ms = up->connect_timeout_ms,
      .first_byte_timeout_ms = up->first_byte_timeout_ms,
      .idle_timeout_ms = up->idle_timeout_ms,
      .http2 = up->http2,
      .ca_file = up->ca_file,
      .tls_no_verify = !up->tls_verify,
      .pool = up->name,
      .max_connections = up->max_connections,
      .client = up->client,
  };
  s->xfer = px_xfer_start(s->w->uclient, &o, &fwd_cbs, s);
  return s->xfer ? 0 : -1;
}

/* Not the gateway's: the upstream that stores its own answers, if any (the
 * connection stays with s), else 404. 1 when forwarded. */
static int not_ours(serve_t *s) {
  return s->fwd != NULL && forward(s, s->fwd) == 0;
}

static void on_got(void *arg, px_rs_status_t st, const px_stored_turn_t *t, size_t n,
                   const char *missing) {
  serve_t *s = arg;
  s->op = NULL;
  if ((st == PX_RS_NOT_FOUND || (st == PX_RS_OK && n == 0)) && not_ours(s)) return;
  serve_take(s);
  if (st == PX_RS_NOT_FOUND || (st == PX_RS_OK && n == 0)) {
    serve_not_found(s);
  } else if (st != PX_RS_OK) {
    serve_unavailable(s->conn, s->ops);
  } else if (!s->items) {
    px_resp_simple(s->conn, 200, "application/json", t[n - 1].response.ptr,
                   t[n - 1].response.len, NULL, 0);
  } else {
    px_buf_t b;
    char err[256];
    px_buf_init(&b, SIZE_MAX);
    if (s->ops->store->list_items(t[n - 1].input, s->query, s->qlen, &b, err,
                                  sizeof(err)) < 0)
      serve_error(s->conn, s->ops, PX_ERR_INVALID, err, NULL);
    else
      px_resp_simple(s->conn, 200, "application/json", b.data, b.len, NULL, 0);
    px_buf_free(&b);
  }
  serve_free(s);
}

static void on_deleted(void *arg, px_rs_status_t st) {
  serve_t *s = arg;
  s->op = NULL;
  if (st == PX_RS_NOT_FOUND && not_ours(s)) return;
  serve_take(s);
  if (st == PX_RS_NOT_FOUND) {
    serve_not_found(s);
  } else if (st != PX_RS_OK) {
    serve_unavailable(s->conn, s->ops);
  } else {
    px_buf_t b;
    px_buf_init(&b, 4096);
    s->ops->store->deleted(&b, s->id);
    px_resp_simple(s->conn, 200, "application/json", b.data, b.len, NULL, 0);
    px_buf_free(&b);
  }
  serve_free(s);
}

void px_stored_serve(px_worker_t *w, px_conn_t *c, px_req_t *r, const px_proto_ops_t *ops,
                     const px_key_conf_t *k, px_str_t id, int items) {
  px_config_t *cfg = w->config;
  int del = r->method == HTTP_DELETE;
  if (!(r->method == HTTP_GET || r->method == HTTP_HEAD || (del && !items))) {
    serve_error(c, ops, PX_ERR_METHOD, "method not allowed", NULL);
    return;
  }
  char idb[PX_STORED_ID_MAX + 1];
  size_t l = id.len < PX_STORED_ID_MAX ? id.len : PX_STORED_ID_MAX;
  memcpy(idb, id.ptr, l);
  idb[l] = 0;
  int ok = id.len <= PX_STORED_ID_MAX;
  for (size_t i = 0; ok && i < l; i++)
    ok = (idb[i] >= 'a' && idb[i] <= 'z') || (idb[i] >= 'A' && idb[i] <= 'Z') ||
         (idb[i] >= '0' && idb[i] <= '9') || idb[i] == '_' || idb[i] == '-';
  if (!ok) {
    serve_error(c, ops, PX_ERR_INVALID,
                "invalid response id: letters, digits, '_' and '-', at most 128",
                "response_id");
    return;
  }
  serve_t *s = calloc(1, sizeof(*s));
  const char *q = r->url.data + r->path_len;
  size_t qlen = r->url.len - r->path_len;
  if (s == NULL || (s->query = malloc(qlen + 1)) == NULL) {
    free(s);
    px_resp_abort(c);
    return;
  }
  memcpy(s->query, q, qlen);
  s->query[qlen] = 0;
  s->qlen = qlen;
  s->conn = c;
  s->ops = ops;
  s->cfg = px_config_ref(cfg);
  s->w = w;
  s->fwd = owner_upstream(cfg, k); /* the key may be gone by the answer */
  s->req = r;
  s->items = items;
  s->del = del;
  memcpy(s->id, idb, l + 1);
  px_conn_set_handler(c, &serve_handler, s);
  if (!cfg->responses.store || !px_rs_available()) { /* the gateway keeps none */
    if (not_ours(s)) return;
    serve_take(s);
    serve_not_found(s);
    serve_free(s);
    return;
  }
  px_rs_where_t wh = where(w->loop, cfg);
  s->op = del ? px_rs_delete(&wh, owner_of(k), s->id, on_deleted, s)
              : px_rs_get(&wh, owner_of(k), s->id, on_got, s);
  if (s->op == NULL) {
    serve_take(s);
    serve_unavailable(c, ops);
    serve_free(s);
  }
}
