/* admit.c - the front door of the request core: the gateway's own
 * endpoints (/healthz, /readyz, /metrics, model lists), then for a
 * generation request the admission phase, in this order: the one scan of
 * the body (model, stream), the client key, the key's models, the rate
 * limits (possibly waiting for the state backend), the route. An admitted
 * request goes on to the attempt (px_exch_attempt, attempt.c). It knows no
 * protocol: the path's protocol answers through its ops.
 *
 *   px_proxy_request -> endpoints | gateway -> read_request -> authorize
 *        -> (rate limit, maybe pending: on_admitted) -> route -> attempt
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "attempt.h"
#include "proxai/inflight.h"
#include "proxai/keys.h"
#include "proxai/metrics.h"
#include "proxai/money.h"
#include "proxai/state_redis.h"
#include "stored.h"

static void simple_json(px_conn_t *c, int status, const char *body) {
  px_resp_simple(c, status, "application/json", body, strlen(body), NULL, 0);
}

/* An error for a path in the shape of the protocol that owns it (else the
 * default protocol's). */
static void path_error(px_conn_t *c, const px_req_t *r, const px_proto_ops_t *ops,
                       px_errkind_t kind, const char *msg) {
  if (ops == NULL) ops = px_proto_default();
  px_buf_t b;
  px_buf_init(&b, 4096);
  ops->encode_error(&b, kind, ops->error_type(kind), msg, NULL, r->request_id);
  px_resp_simple(c, px_errkind_status(kind), "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
}

int px_proxy_early_error(px_buf_t *out, px_str_t path, int status, const char *msg,
                         const char *request_id) {
  px_errkind_t kind = status == 413   ? PX_ERR_TOO_LARGE
                      : status == 408 ? PX_ERR_TIMEOUT
                      : status >= 500 ? PX_ERR_API
                                      : PX_ERR_INVALID;
  px_inbound_t in;
  const px_proto_ops_t *ops =
      px_proto_match(path.ptr, path.len, &in) ? px_proto_get(in.proto) : px_proto_default();
  return ops->encode_error(out, kind, NULL, msg, NULL, request_id);
}

/* Whether id is already among the first n names listed. */
static int listed(const char *const *ids, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(ids[i], id) == 0) return 1;
  return 0;
}

/* The concrete model names key k (NULL: open gateway) may use: exact route
 * names and the `models =` names of glob routes, never a glob, each once;
 * in the list shape of ops (the protocol the request names). */
static void serve_models(px_worker_t *w, px_conn_t *c, const px_proto_ops_t *ops,
                         const px_key_conf_t *k) {
  px_config_t *cfg = w->config;
  size_t cap = 0;
  for (size_t i = 0; i < cfg->nroutes; i++) cap += 1 + cfg->routes[i].nmodels;
  const char **ids = calloc(cap ? cap : 1, sizeof(*ids));
  const char **owner = calloc(cap ? cap : 1, sizeof(*owner));
  size_t n = 0;
  for (size_t i = 0; ids && owner && i < cfg->nroutes; i++) {
    const px_route_conf_t *rt = &cfg->routes[i];
    const char *up = cfg->upstreams[rt->upstream].name;
    int glob = strpbrk(rt->pattern, "*?") != NULL;
    for (size_t j = 0; j < (glob ? rt->nmodels : 1); j++) {
      const char *id = glob ? rt->models[j] : rt->pattern;
      if ((k && !px_key_allows(k, id)) || listed(ids, n, id)) continue;
      owner[n] = up;
      ids[n++] = id;
    }
  }
  px_buf_t b;
  px_buf_init(&b, 1u << 20);
  ops->encode_models(&b, ids, owner, n);
  px_resp_simple(c, 200, "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
  free(ids);
  free(owner);
}

/* The protocol whose model list a GET /v1/models asks for: the one whose
 * marker header the request carries, else the default. */
static const px_proto_ops_t *models_shape(const px_req_t *r) {
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_proto_ops_t *ops = px_proto_get((px_proto_t)p);
    if (ops->models_marker_header && px_req_header(r, ops->models_marker_header)) return ops;
  }
  return px_proto_default();
}

static int path_is(const px_req_t *r, const char *p) {
  size_t n = strlen(p);
  return r->path_len == n && memcmp(r->url.data, p, n) == 0;
}

/* The client key: Authorization: Bearer, x-api-key, or the protocol's own
 * header or query parameter (Gemini's x-goog-api-key, ?key=). */
static const char *client_secret(const px_req_t *r, const px_proto_ops_t *ops, size_t *len) {
  const char *a = px_req_header(r, "authorization");
  if (a && strncasecmp(a, "Bearer ", 7) == 0) {
    a += 7;
    while (*a == ' ') a++;
    *len = strlen(a);
    return a;
  }
  a = px_req_header(r, "x-api-key");
  if (a == NULL && ops->client_key_header) a = px_req_header(r, ops->client_key_header);
  if (a) {
    *len = strlen(a);
    return a;
  }
  const char *q = r->url.data + r->path_len, *end = r->url.data + r->url.len;
  size_t kl = ops->client_key_query ? strlen(ops->client_key_query) : 0;
  if (kl == 0 || q >= end || *q != '?') return NULL;
  for (const char *p = q + 1; p < end;) {
    const char *amp = memchr(p, '&', (size_t)(end - p));
    const char *e = amp ? amp : end;
    if ((size_t)(e - p) > kl && memcmp(p, ops->client_key_query, kl) == 0 && p[kl] == '=') {
      *len = (size_t)(e - p - kl - 1);
      return p + kl + 1;
    }
    p = e + 1;
  }
  return NULL;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* A percent-decoded copy of a path segment; NULL when it decodes to a byte
 * no header value may hold (a control character) or to invalid UTF-8 (it
 * is written into JSON bodies and the access log): such a model is refused. */
static char *url_decode(px_str_t s) {
  char *o = malloc(s.len + 1);
  if (o == NULL) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < s.len; i++) {
    /* the bytes up to the next '%': as they are */
    const char *pc = memchr(s.ptr + i, '%', s.len - i);
    size_t run = pc ? (size_t)(pc - s.ptr) - i : s.len - i;
    memcpy(o + k, s.ptr + i, run);
    k += run;
    if ((i += run) == s.len) break;
    int hi = -1, lo = -1;
    if (i + 2 < s.len) hi = hexval(s.ptr[i + 1]), lo = hexval(s.ptr[i + 2]);
    if (hi >= 0 && lo >= 0) {
      o[k++] = (char)(hi * 16 + lo);
      i += 2;
    } else {
      o[k++] = s.ptr[i];
    }
  }
  int ok = px_header_value_ok(o, k);
  for (size_t i = 0, l; ok && i < k; i += l) {
    uint64_t w; /* eight ASCII bytes at once */
    if (i + 8 <= k && (memcpy(&w, o + i, 8), (w & 0x8080808080808080ull) == 0)) {
      l = 8;
      continue;
    }
    ok = (l = px_utf8_seq((unsigned char *)o + i, k - i)) > 0;
  }
  if (!ok) {
    free(o);
    return NULL;
  }
  o[k] = 0;
  return o;
}

/* The runtime key of a secret no static key holds, from the state
 * backend's local store (*owned, the caller frees it), else NULL. */
static const px_key_conf_t *find_runtime_key(px_config_t *cfg, const char *sec, size_t sl,
                                             px_key_conf_t **owned) {
  int64_t now = (int64_t)time(NULL);
  *owned = px_keys_find(cfg, sec, sl, now);
  if (*owned) px_rl_touch((*owned)->name, now);
  return *owned;
}

/* The key of a secret: a static one of the configuration, else a runtime
 * one (find_runtime_key), else NULL. */
static const px_key_conf_t *find_key(px_config_t *cfg, const char *sec, size_t sl,
                                     px_key_conf_t **owned) {
  *owned = NULL;
  if (!sec) return NULL;
  const px_key_conf_t *k = px_config_key(cfg, sec, sl);
  return k != NULL ? k : find_runtime_key(cfg, sec, sl, owned);
}

/* GET endpoints that need a client key when keys exist (/v1/models, /metrics
 * on the client listener, the usage): 0 with *k set (NULL when the gateway
 * is open), or <0 after answering 401. A runtime key is *owned (freed by
 * the caller). */
static int get_key(px_worker_t *w, px_conn_t *c, px_req_t *r, const px_proto_ops_t *ops,
                   const px_key_conf_t **k, px_key_conf_t **owned) {
  *k = NULL;
  *owned = NULL;
  if (!px_config_keyed(w->config)) return 0;
  size_t sl = 0;
  const char *sec = client_secret(r, ops, &sl);
  *k = find_key(w->config, sec, sl, owned);
  if (*k) return 0;
  path_error(c, r, ops, PX_ERR_AUTH,
             sec ? "invalid API key"
                 : "missing API key: send Authorization: Bearer KEY or x-api-key");
  return -1;
}

static void serve_metrics(px_conn_t *c) {
  px_buf_t b;
  px_buf_init(&b, 16u << 20);
  px_metrics_render(&b);
  px_resp_simple(c, 200, "text/plain; version=0.0.4", b.data, b.len, NULL, 0);
  px_buf_free(&b);
}

/* The request's own output cap (the client protocol's members as the body
 * scan found them, each present at most once: the upstream reads the same
 * value; the first present wins), else the route's max_tokens; 0 when
 * neither. */
static uint64_t output_cap(px_exch_t *x, const px_route_conf_t *rt) {
  int64_t m = px_exch_max_tokens(x);
  if (m >= 0) return (uint64_t)m;
  if (rt && rt->max_tokens > 0) return (uint64_t)rt->max_tokens;
  return 0;
}

/* Tokens set aside on the key's tpm bucket at admission when nothing caps
 * the output; settled with the real usage when the request ends. */
#define PX_RL_DEFAULT_RESERVE 4096

/* The upper bound of a budgeted request's cost (SPEC 12): input at most the
 * body's bytes, output at most its cap, each at the dearest price of every
 * model the route may send it to (deployments and fallbacks). <0 when the
 * request was answered (a model without a [price]). */
static int cost_bound(px_exch_t *x, const px_route_conf_t *rt, int64_t *out) {
  uint64_t cap = output_cap(x, rt);
  if (cap == 0) cap = PX_BUDGET_DEFAULT_OUTPUT;
  int64_t top = 0;
  for (size_t i = 0; i < rt->ndeployments + rt->nfallbacks; i++) {
    const px_target_t *t =
        i < rt->ndeployments ? &rt->deployments[i] : &rt->fallbacks[i - rt->ndeployments];
    const char *m = px_target_model(rt, t, x->model);
    const px_price_conf_t *p = px_config_price(x->cfg, m);
    if (p == NULL) {
      char msg[400];
      snprintf(
          msg, sizeof(msg),
          "no price is configured for model '%.200s' (sent upstream for '%.100s'): a "
          "key with a budget cannot use it",
          m, x->model);
      px_exch_error(x, PX_ERR_PERMISSION, msg, "model");
      return -1;
    }
    int64_t c = px_cost_bound(p, x->req->body.len, cap);
    if (c > top) top = c;
  }
  *out = top;
  return 0;
}

/* What the master releases if this worker dies before the settlement. */
static void hold(px_exch_t *x) {
  const px_admit_t *a = &x->adm;
  const px_key_conf_t *k = a->key;
  int64_t ck = a->budgeted && k->budget > 0 ? a->cost : 0;
  int64_t ct = a->budgeted && k->team && k->team->budget > 0 ? a->cost : 0;
  if (a->tokens == 0 && ck == 0 && ct == 0) return;
  px_inflight_rec_t *r = x->rl_rec = px_inflight_hold(k->name);
  if (r == NULL) return;
  r->tpm_reserved = a->tokens;
  r->tpm = k->tpm;
  r->cost_key = (uint64_t)ck;
  r->cost_team = (uint64_t)ct;
  size_t tl = ct ? strnlen(k->team->name, PX_INFLIGHT_KEY - 1) : 0;
  memcpy(r->team, ct ? k->team->name : "", tl);
  r->team[tl] = 0;
}

/* The state backend's verdict; <0 when the request was answered. */
static int admission(px_exch_t *x, px_rl_verdict_t v, const px_refusal_t *why) {
  if (v == PX_RL_ALLOW || v == PX_RL_OPEN || v == PX_RL_LOCAL) {
    x->rl_admitted = 1;
    x->adm.local = v == PX_RL_LOCAL;
    if (v == PX_RL_ALLOW) {
      hold(x);
    } else { /* decided by on_error (never for a budget): nothing held */
      x->adm.tokens = 0;
      x->adm.cost = 0;
    }
    return 0;
  }
  if (v == PX_RL_UNAVAILABLE) {
    if (x->adm.budgeted)
      px_exch_error(
          x, PX_ERR_OVERLOADED,
          "the budget cannot be checked: the shared state backend is unreachable", NULL);
    else
      px_exch_error(x, PX_ERR_OVERLOADED,
                    "rate limits cannot be checked: the shared state "
                    "backend is unreachable",
                    NULL);
    return -1;
  }
  char ra[16];
  px_hdr_t h = {px_str("retry-after"), {ra, 0}};
  if (v == PX_RL_BUDGET) {
    const px_key_conf_t *k = x->key;
    int team = why->team && k->team;
    int64_t budget = team ? k->team->budget : k->budget;
    px_window_t w = team ? k->team->window : k->window;
    char msg[512], left[32], total[32], bound[32], when[40];
    snprintf(msg, sizeof(msg),
             "budget exceeded for %s %.120s: %s USD remaining of %s USD %s, %s%s; this "
             "request may cost up to %s USD",
             team ? "team" : "key", team ? k->team->name : k->name,
             px_usd_str(why->remaining, left, sizeof(left)),
             px_usd_str(budget, total, sizeof(total)),
             w == PX_WINDOW_TOTAL ? "in total"
             : w == PX_WINDOW_DAY ? "per day"
                                  : "per month",
             why->resets_at ? "resets at " : "never resets",
             why->resets_at ? px_rfc3339(why->resets_at, when, sizeof(when)) : "",
             px_usd_str(x->adm.cost, bound, sizeof(bound)));
    h.value.len = (size_t)snprintf(ra, sizeof(ra), "%u", why->retry_after);
    px_exch_error_h(x, PX_ERR_QUOTA, 429, msg, NULL, &h, why->retry_after ? 1 : 0);
    return -1;
  }
  h.value.len =
      (size_t)snprintf(ra, sizeof(ra), "%u", why->retry_after ? why->retry_after : 1);
  px_exch_error_h(x, PX_ERR_RATE_LIMIT, 429, "rate limit exceeded for this key", NULL, &h, 1);
  return -1;
}

static void after_admission(px_exch_t *x) {
  px_config_t *cfg = x->cfg;
  if (x->w->draining) {
    px_exch_error(x, PX_ERR_OVERLOADED, "the gateway is shutting down", NULL);
    return;
  }
  if (x->route == NULL) /* once; the scan's lookup (jumps_wanted) of x->model */
    x->route = x->scan_route ? x->scan_route : px_config_route(cfg, x->model);
  if (x->route == NULL) {
    if (cfg->unconfigured_message) {
      px_exch_error(x, PX_ERR_UNAVAILABLE, cfg->unconfigured_message, NULL);
    } else {
      char msg[300];
      snprintf(msg, sizeof(msg), "no route for model '%.*s'",
               px_utf8_cut(x->model, strlen(x->model), 200), x->model);
      px_exch_error(x, PX_ERR_NOT_FOUND, msg, "model");
    }
    return;
  }
  /* the chain of previous_response_id first (it may go on later itself) */
  if (px_stored_admit(x, px_exch_attempt) != 0) return;
  px_exch_attempt(x);
}

static void on_admitted(void *arg, px_rl_verdict_t v, const px_refusal_t *why) {
  px_exch_t *x = px_exch_get((px_exch_ref_t)arg);
  if (x == NULL) return;
  x->rl_wait = NULL;
  if (admission(x, v, why) == 0) after_admission(x);
}

/* The end user (SPEC 13): the client's own member, found by the body's
 * scan, else the x-proxai-user header; cut at PX_MAX_USER bytes. For the
 * access log and traces only, never a metric label. */
#define PX_MAX_USER 256
static void end_user(px_exch_t *x) {
  const char *bd = x->req->body.data;
  size_t at = x->jreq.user_at, len = x->jreq.user_len;
  if (bd && len >= 2) {
    char tmp[PX_MAX_USER];
    px_buf_t b = {.data = tmp, .len = 0, .size = sizeof(tmp), .cap = sizeof(tmp)};
    px_str_t v;
    size_t n = len - 2 < 6 * PX_MAX_USER ? len - 2 : 6 * PX_MAX_USER;
    if (px_json_unescape(bd + at + 1, n, 1, &b, &v) == 0 && v.len > 0) {
      x->user = x->user_buf = strndup(v.ptr, v.len < PX_MAX_USER ? v.len : PX_MAX_USER);
      return;
    }
  }
  const char *h = px_req_header(x->req, "x-proxai-user");
  if (h && *h) x->user = x->user_buf = strndup(h, PX_MAX_USER);
}

/* The smallest body whose containers' ends its scan records (px_fw_jumps):
 * a smaller one has little to skip. */
#define JUMPS_BODY_MIN 2048

/* Whether the route of model m (n bytes, no escape in it: x->model to be)
 * sends some requests to another protocol than the client's: its body is
 * translated then, and its scan keeps the containers' ends for the decoder
 * (x->jumps, its table allocated here: an entry per PX_JSON_JUMP_MIN / 2
 * bytes at most). The route found is kept (x->scan_route), not looked up
 * again. */
static int jumps_wanted(px_exch_t *x, const char *m, size_t n) {
  char name[256];
  if (n == 0 || n >= sizeof(name) || memchr(m, '\\', n)) return 0;
  memcpy(name, m, n);
  name[n] = 0;
  const px_route_conf_t *rt = x->scan_route = px_config_route(x->cfg, name);
  int other = 0;
  for (size_t k = 0; rt && !other && k < rt->ndeployments + rt->nfallbacks; k++) {
    const px_target_t *t =
        k < rt->ndeployments ? &rt->deployments[k] : &rt->fallbacks[k - rt->ndeployments];
    other = x->cfg->upstreams[t->upstream].protocol != x->in;
  }
  if (!other) return 0;
  if (x->jumps.v == NULL) {
    x->jumps.cap = x->req->body.len / (PX_JSON_JUMP_MIN / 2);
    x->jumps.v = malloc(x->jumps.cap * sizeof(*x->jumps.v));
  }
  return x->jumps.v != NULL;
}

/* Whether some upstream speaks another protocol than the client's: none,
 * and no route translates (a gateway that passes through asks no more). */
static int any_other_protocol(const px_exch_t *x) {
  for (size_t k = 0; k < x->cfg->nupstreams; k++)
    if (x->cfg->upstreams[k].protocol != x->in) return 1;
  return 0;
}

static int want_jumps(px_json_jumps_t *j, const char *tok, size_t len) {
  return len >= 2 && jumps_wanted(j->arg, tok + 1, len - 2);
}

/* The body's one scan and what the gateway acts on: model, stream,
 * include_usage. <0 when the request was answered. */
static int read_request(px_exch_t *x, const px_inbound_t *in) {
  /* One scan validates the body by the rules of SPEC section 10 (jansson's
   * syntax, nesting, no repeated model/stream) and finds what the gateway
   * acts on; a request that stays in its own protocol is never parsed. */
  const px_req_t *r = x->req;
  const char *bd = r->body.data ? r->body.data : "";
  const px_proto_ops_t *ops = px_exch_client_ops(x);
  /* a larger body's containers' ends kept for a translation's decoder
   * (px_fw_jumps): decided by the model in the path, else by the body's
   * (the scan asks when it reads it) */
  px_json_jumps_t *jt = NULL;
  if (r->body.len >= JUMPS_BODY_MIN && any_other_protocol(x)) {
    jt = &x->jumps;
    jt->want = NULL, jt->arg = x;
    if (in->model.len > 0 && (memchr(in->model.ptr, '%', in->model.len) ||
                              !jumps_wanted(x, in->model.ptr, in->model.len)))
      jt = NULL; /* (a model with a %-escape: decoded later, not here) */
    else if (in->model.len == 0)
      jt->want = want_jumps;
  }
  const char *const *mem = ops->store ? ops->store->members : NULL;
  if ((jt ? px_json_request_jumps(bd, r->body.len, ops->max_tokens_keys, mem, jt, &x->jreq)
          : px_json_request_watch(bd, r->body.len, ops->max_tokens_keys, mem, &x->jreq)) <
      0) {
    const px_json_req_t *jr = &x->jreq;
    char msg[300];
    if (jr->err == PX_JREQ_DUPLICATE)
      snprintf(msg, sizeof(msg), "request body has '%s' more than once", jr->key);
    else if (jr->err == PX_JREQ_NOT_OBJECT)
      snprintf(msg, sizeof(msg), "request body must be a JSON object");
    else
      snprintf(msg, sizeof(msg), "request body is not valid JSON: %s (at byte %zu)",
               jr->reason, jr->err_at);
    px_exch_error(x, PX_ERR_INVALID, msg, jr->err == PX_JREQ_DUPLICATE ? jr->key : NULL);
    return -1;
  }
  if (in->model.len > 0) { /* the path names the model (and whether it streams) */
    x->model = x->model_buf = url_decode(in->model);
    if (x->model == NULL) { /* a control character or invalid UTF-8 */
      px_exch_error(
          x, PX_ERR_INVALID,
          "'model' in the path is not a valid model name: it decodes to a control "
          "character or to invalid UTF-8",
          "model");
      return -1;
    }
  } else {
    x->model = x->model_buf = px_json_req_model(bd, &x->jreq);
  }
  if (x->model == NULL || x->model[0] == 0) {
    px_exch_error(x, PX_ERR_INVALID, "'model' is required and must be a non-empty string",
                  "model");
    return -1;
  }
  if (x->jreq.stream_len > 0 && !x->jreq.stream &&
      !(x->jreq.stream_len == 5 && memcmp(bd + x->jreq.stream_at, "false", 5) == 0) &&
      !(x->jreq.stream_len == 4 && memcmp(bd + x->jreq.stream_at, "null", 4) == 0)) {
    px_exch_error(x, PX_ERR_INVALID, "'stream' must be a boolean", "stream");
    return -1;
  }
  x->stream = in->stream >= 0 ? in->stream > 0 : x->ep == PX_EP_GENERATE && x->jreq.stream;
  end_user(x);
  x->include_usage = x->jreq.include_usage;

  /* the model reaches the x-proxai-upstream header and the upstream
   * request: it must be a valid header value (SPEC 10) */
  if (!px_header_value_ok(x->model, strlen(x->model))) {
    x->model = NULL; /* never logged either */
    px_exch_error(x, PX_ERR_INVALID,
                  "'model' is not a valid model name: it contains a control character",
                  "model");
    return -1;
  }
  return 0;
}

/* The key's models and its admission (rate limits, budgets). 0: go on to
 * the route; 1: the state backend answers later (on_admitted goes on);
 * <0: the request was answered. */
static int authorize_key(px_exch_t *x, int presented) {
  px_config_t *cfg = x->cfg;
  if (x->key == NULL) {
    px_exch_error(x, PX_ERR_AUTH,
                  presented
                      ? "invalid API key"
                      : "missing API key: send Authorization: Bearer KEY or x-api-key",
                  NULL);
    return -1;
  }
  if (!px_key_allows(x->key, x->model)) {
    char msg[300];
    snprintf(msg, sizeof(msg), "this key may not use model '%.*s'",
             px_utf8_cut(x->model, strlen(x->model), 200), x->model);
    px_exch_error(x, PX_ERR_PERMISSION, msg, "model");
    return -1;
  }
  const px_key_conf_t *k = x->key;
  x->team = k->team ? k->team->name : NULL;
  int budgeted = k->budget > 0 || (k->team && k->team->budget > 0);
  px_admit_t *a = &x->adm;
  a->key = k; /* the spend is counted for every key */
  a->now_s = (int64_t)time(NULL);
  if (k->rpm == 0 && k->tpm == 0 && !budgeted) return 0;
  const px_route_conf_t *rt = x->route = px_config_route(cfg, x->model);
  if (budgeted && rt == NULL) return 0; /* no route: 404 from after_admission */
  a->budgeted = budgeted;
  if (k->tpm) {
    a->tokens = output_cap(x, rt);
    if (a->tokens == 0) a->tokens = PX_RL_DEFAULT_RESERVE;
    /* never more than the key's tpm: one left unsettled (its worker or its
     * instance died) is then refilled within a minute */
    if (a->tokens > k->tpm) a->tokens = k->tpm;
  }
  if (budgeted && cost_bound(x, rt, &a->cost) < 0) return -1;
  px_refusal_t why = {0};
  px_rl_verdict_t v =
      px_rl_check(a, px_exch_now(x), &why, on_admitted, px_exch_arg(x), &x->rl_wait);
  if (v == PX_RL_PENDING) return 1;
  return admission(x, v, &why);
}

/* A runtime key's records arrived from Redis. */
static void on_key_records(void *arg, int ok, px_str_t rec, px_str_t team) {
  px_exch_t *x = px_exch_get((px_exch_ref_t)arg);
  if (x == NULL) return;
  x->rl_wait = NULL;
  if (!ok) {
    px_exch_error(x, PX_ERR_OVERLOADED,
                  "the key cannot be checked: the shared state backend is unreachable",
                  NULL);
    return;
  }
  size_t sl = 0;
  const char *sec = client_secret(x->req, px_exch_client_ops(x), &sl);
  char hex[65];
  px_keys_hash(sec, sl, hex);
  int64_t now = (int64_t)time(NULL);
  x->key = x->rkey = px_keys_from_records(x->cfg, hex, rec, team, now);
  if (x->rkey) px_rl_touch(x->rkey->name, now);
  if (authorize_key(x, 1) == 0) after_admission(x);
}

/* The client key: a static one, else a runtime one (the local store at
 * once, Redis in one round trip), then authorize_key. Same returns. */
static int authorize(px_exch_t *x) {
  px_config_t *cfg = x->cfg;
  if (!px_config_keyed(cfg)) return 0;
  size_t sl = 0;
  const char *sec = client_secret(x->req, px_exch_client_ops(x), &sl);
  x->rkey = NULL;
  /* a static key is looked up once */
  x->key = sec != NULL ? px_config_key(cfg, sec, sl) : NULL;
  if (x->key != NULL || sec == NULL) return authorize_key(x, sec != NULL);
  if (sl && px_keys_on(cfg) && px_redis_running()) {
    char hex[65];
    px_keys_hash(sec, sl, hex);
    if (px_redis_key_lookup(hex, on_key_records, px_exch_arg(x), &x->rl_wait) == 1)
      return 1;
    px_exch_error(x, PX_ERR_OVERLOADED,
                  "the key cannot be checked: the shared state backend is unreachable",
                  NULL);
    return -1;
  }
  x->key = find_runtime_key(cfg, sec, sl, &x->rkey);
  return authorize_key(x, 1);
}

static void gateway(px_worker_t *w, px_conn_t *c, px_req_t *r, const px_inbound_t *in) {
  px_exch_t *x = px_exch_new(w, c, r, in->proto, in->ep);
  if (x == NULL) {
    px_resp_abort(c);
    return;
  }
  if (read_request(x, in) < 0) return;
  if (authorize(x) != 0) return;
  after_admission(x);
}

/* ---------------------------------------------------------------------- */
/* the admin API and the caller's usage                                     */

/* Constant-time equality of a presented token and the configured one. */
static int token_is(const char *got, size_t gl, const char *want) {
  size_t wl = strlen(want);
  volatile unsigned diff = gl != wl;
  for (size_t i = 0; i < gl; i++) diff |= (unsigned)(got[i] ^ want[i < wl ? i : 0]);
  return diff == 0;
}

/* /admin/... on admin_listen (SPEC 13): 404 without [admin] token, 401
 * without the token; errors in OpenAI's shape. */
static void serve_admin(px_worker_t *w, px_conn_t *c, px_req_t *r) {
  px_config_t *cfg = w->config;
  if (cfg->admin_token == NULL)
    return path_error(c, r, NULL, PX_ERR_NOT_FOUND,
                      "the admin API is off: set [admin] token to turn it on");
  const char *a = px_req_header(r, "authorization");
  if (!a || strncasecmp(a, "Bearer ", 7) != 0 ||
      !token_is(a + 7, strlen(a + 7), cfg->admin_token))
    return path_error(c, r, NULL, PX_ERR_AUTH,
                      "the admin API needs Authorization: Bearer with the [admin] token");
  px_buf_t b;
  px_buf_init(&b, 16u << 20);
  int st = px_keys_admin(cfg, r->method, r->url.data, r->path_len, r->body.data,
                         r->body.len, &b);
  px_resp_simple(c, st, "application/json", b.data, st == 204 ? 0 : b.len, NULL, 0);
  px_buf_free(&b);
}

/* GET /v1/proxai/usage: one budget as the usage shape (SPEC 4) */
static void usage_budget(px_buf_t *b, const char *name, const char *team, int64_t budget,
                         px_window_t w, const px_budget_state_t *st, int64_t now) {
  char t[40], u[32];
  px_win_t win;
  px_window_at(w, (time_t)now, &win);
  px_buf_puts(b, "{\"name\":");
  px_buf_json_str(b, name, strlen(name));
  if (team != (const char *)-1) {
    px_buf_puts(b, ",\"team\":");
    if (team)
      px_buf_json_str(b, team, strlen(team));
    else
      px_buf_puts(b, "null");
  }
  px_buf_puts(b, ",\"budget_usd\":");
  px_buf_puts(b, budget > 0 ? px_usd_str(budget, u, sizeof(u)) : "null");
  px_buf_puts(b, ",\"budget_window\":\"");
  px_buf_puts(b, px_window_name(w));
  px_buf_puts(b, "\",\"spend_usd\":");
  px_buf_puts(b, st ? px_usd_str(st->spend, u, sizeof(u)) : "null");
  px_buf_puts(b, ",\"reserved_usd\":");
  px_buf_puts(b, st ? px_usd_str(st->reserved, u, sizeof(u)) : "null");
  px_buf_puts(b, ",\"remaining_usd\":");
  px_buf_puts(b, st && budget > 0
                     ? px_usd_str(budget - st->spend - st->reserved, u, sizeof(u))
                     : "null");
  px_buf_puts(b, ",\"resets_at\":");
  if (win.resets_at) {
    px_buf_puts(b, "\"");
    px_buf_puts(b, px_rfc3339(win.resets_at, t, sizeof(t)));
    px_buf_puts(b, "\"}");
  } else {
    px_buf_puts(b, "null}");
  }
}

typedef struct usage_q {
  px_conn_t *c;
  const px_req_t *r; /* the connection's current request (lives as long) */
  px_config_t *cfg;
  const px_key_conf_t *k;
  px_key_conf_t *owned;
  px_rl_wait_t *wait;
  int64_t now;
} usage_q_t;

static void usage_free(usage_q_t *q) {
  px_keys_free(q->owned);
  px_config_unref(q->cfg);
  free(q);
}

static void usage_answer(usage_q_t *q, int ok, const px_budget_state_t st[2]) {
  px_conn_t *c = q->c;
  if (!ok) {
    px_conn_set_handler(c, NULL, NULL);
    path_error(c, q->r, NULL, PX_ERR_UNAVAILABLE,
               "the usage cannot be read: the shared state backend is unreachable");
    return usage_free(q);
  }
  const px_key_conf_t *k = q->k;
  px_buf_t b;
  px_buf_init(&b, 1u << 16);
  px_buf_puts(&b, "{\"key\":");
  usage_budget(&b, k->name, k->team ? k->team->name : NULL, k->budget, k->window, &st[0],
               q->now);
  px_buf_puts(&b, ",\"team\":");
  if (k->team)
    usage_budget(&b, k->team->name, (const char *)-1, k->team->budget, k->team->window,
                 &st[1], q->now);
  else
    px_buf_puts(&b, "null");
  px_buf_printf(&b, ",\"limits\":{\"rpm\":%llu,\"tpm\":%llu}}",
                (unsigned long long)k->rpm, (unsigned long long)k->tpm);
  px_conn_set_handler(c, NULL, NULL);
  px_resp_simple(c, 200, "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
  usage_free(q);
}

static void on_usage(void *arg, int ok, const px_budget_state_t st[2]) {
  usage_q_t *q = arg;
  q->wait = NULL;
  usage_answer(q, ok, st);
}

static void on_usage_close(void *arg) {
  usage_q_t *q = arg;
  if (q->wait) px_rl_cancel(q->wait);
  usage_free(q);
}

static const px_conn_handler_t usage_handler = {NULL, on_usage_close};

static void serve_usage(px_worker_t *w, px_conn_t *c, const px_req_t *r,
                        const px_key_conf_t *k, px_key_conf_t *owned) {
  usage_q_t *q = calloc(1, sizeof(*q));
  if (!q) {
    px_keys_free(owned);
    return px_resp_abort(c);
  }
  q->c = c;
  q->r = r;
  q->cfg = px_config_ref(w->config);
  q->k = k;
  q->owned = owned;
  q->now = (int64_t)time(NULL);
  px_budget_state_t st[2];
  int rc = px_rl_usage(k, q->now, st, on_usage, q, &q->wait);
  if (rc == 1) {
    px_conn_set_handler(c, &usage_handler, q);
    return;
  }
  usage_answer(q, rc == 0, st);
}

void px_proxy_request(px_worker_t *w, px_conn_t *c, px_req_t *r) {
  const char *path = r->url.data;
  int get = r->method == HTTP_GET || r->method == HTTP_HEAD;
  if (path_is(r, "/healthz")) {
    if (!get) return path_error(c, r, NULL, PX_ERR_METHOD, "method not allowed");
    return simple_json(c, 200, "{\"status\":\"ok\"}");
  }
  if (path_is(r, "/readyz")) {
    if (!get) return path_error(c, r, NULL, PX_ERR_METHOD, "method not allowed");
    if (w->draining) return simple_json(c, 503, "{\"status\":\"draining\"}");
    return simple_json(c, 200, "{\"status\":\"ready\"}");
  }
  const px_key_conf_t *k;
  px_key_conf_t *owned;
  if (px_conn_is_admin(c)) { /* admin_listen: metrics, health, the admin API */
    if (r->path_len >= 7 && memcmp(path, "/admin/", 7) == 0) return serve_admin(w, c, r);
    if (!path_is(r, "/metrics")) return path_error(c, r, NULL, PX_ERR_NOT_FOUND, "not found");
    if (!get) return path_error(c, r, NULL, PX_ERR_METHOD, "method not allowed");
    return serve_metrics(c);
  }
  if (path_is(r, "/metrics") && w->config->server.admin_listen == NULL) {
    if (!get) return path_error(c, r, NULL, PX_ERR_METHOD, "method not allowed");
    if (get_key(w, c, r, px_proto_default(), &k, &owned) < 0) return;
    px_keys_free(owned);
    return serve_metrics(c);
  }
  if (path_is(r, "/v1/models") || path_is(r, "/models")) {
    const px_proto_ops_t *ops = models_shape(r);
    if (!get) return path_error(c, r, ops, PX_ERR_METHOD, "method not allowed");
    if (get_key(w, c, r, ops, &k, &owned) < 0) return;
    serve_models(w, c, ops, k);
    px_keys_free(owned);
    return;
  }
  if (path_is(r, "/v1/proxai/usage") || path_is(r, "/proxai/usage")) {
    if (!get) return path_error(c, r, NULL, PX_ERR_METHOD, "method not allowed");
    if (!px_config_keyed(w->config))
      return path_error(c, r, NULL, PX_ERR_NOT_FOUND,
                        "no client keys are configured: there is no key to report on");
    if (get_key(w, c, r, px_proto_default(), &k, &owned) < 0) return;
    return serve_usage(w, c, r, k, owned);
  }
  /* stored responses by id (a POST there is another endpoint's, or none) */
  for (int p = 0; p < PX_PROTO_COUNT && r->method != HTTP_POST; p++) {
    const px_proto_ops_t *ops = px_proto_get((px_proto_t)p);
    px_str_t id;
    int items;
    if (ops->store == NULL || !ops->store->match(path, r->path_len, &id, &items))
      continue;
    if (get_key(w, c, r, ops, &k, &owned) < 0) return;
    px_stored_serve(w, c, r, ops, k, id, items);
    px_keys_free(owned);
    return;
  }
  px_inbound_t in;
  if (!px_proto_match(path, r->url.len, &in))
    return path_error(c, r, NULL, PX_ERR_NOT_FOUND, "not found");
  const px_proto_ops_t *ops = px_proto_get(in.proto);
  if (in.ep == PX_EP_MODELS) {
    if (!get) return path_error(c, r, ops, PX_ERR_METHOD, "method not allowed");
    if (get_key(w, c, r, ops, &k, &owned) < 0) return;
    serve_models(w, c, ops, k);
    px_keys_free(owned);
    return;
  }
  if (r->method != HTTP_POST)
    return path_error(c, r, ops, PX_ERR_METHOD, "method not allowed");
  gateway(w, c, r, &in);
}
