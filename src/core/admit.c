/* admit.c - the front door of the request core: the gateway's own
 * endpoints (/healthz, /readyz, /metrics, model lists), then for a
 * generation request the admission phase, in this order: the one scan of
 * the body (model, stream), the client key, the key's models, the rate
 * limits (possibly waiting for the state backend), the route. An admitted
 * request goes on to the attempt (px_exch_attempt, proxy.c). It knows no
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

#include "proxai/metrics.h"
#include "proxy_int.h"

static void simple_json(px_conn_t *c, int status, const char *body) {
  px_resp_simple(c, status, "application/json", body, strlen(body), NULL, 0);
}

/* An error for a path in the shape of the protocol that owns it (else the
 * default protocol's). */
static void path_error(px_conn_t *c, const px_proto_ops_t *ops, px_errkind_t kind,
                       const char *msg) {
  if (ops == NULL) ops = px_proto_default();
  px_buf_t b;
  px_buf_init(&b, 4096);
  ops->encode_error(&b, kind, ops->error_type(kind), msg, NULL, NULL);
  px_resp_simple(c, px_errkind_status(kind), "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
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
static void serve_models(px_server_t *s, px_conn_t *c, const px_proto_ops_t *ops,
                         const px_key_conf_t *k) {
  px_config_t *cfg = s->config;
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
    int hi = -1, lo = -1;
    if (s.ptr[i] == '%' && i + 2 < s.len) hi = hexval(s.ptr[i + 1]), lo = hexval(s.ptr[i + 2]);
    if (hi >= 0 && lo >= 0) {
      o[k++] = (char)(hi * 16 + lo);
      i += 2;
    } else {
      o[k++] = s.ptr[i];
    }
  }
  int ok = px_header_value_ok(o, k);
  for (size_t i = 0, l; ok && i < k; i += l)
    ok = (l = px_utf8_seq((unsigned char *)o + i, k - i)) > 0;
  if (!ok) {
    free(o);
    return NULL;
  }
  o[k] = 0;
  return o;
}

/* GET endpoints that need a client key when keys exist (/v1/models, /metrics
 * on the client listener): 0 with *k set (NULL when the gateway is open), or
 * <0 after answering 401. */
static int get_key(px_server_t *s, px_conn_t *c, px_req_t *r, const px_proto_ops_t *ops,
                   const px_key_conf_t **k) {
  *k = NULL;
  if (s->config->nkeys == 0) return 0;
  size_t sl = 0;
  const char *sec = client_secret(r, ops, &sl);
  *k = sec ? px_config_key(s->config, sec, sl) : NULL;
  if (*k) return 0;
  path_error(c, ops, PX_ERR_AUTH,
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

/* Tokens to set aside on the key's tpm bucket at admission: the request's
 * own output cap, else the route's max_tokens, else PX_RL_DEFAULT_RESERVE.
 * Settled with the real usage when the request ends. */
#define PX_RL_DEFAULT_RESERVE 4096
static uint64_t reserve_estimate(px_exch_t *x) {
  const px_proto_ops_t *ops = px_exch_client_ops(x);
  const char *bd = x->req->body.data ? x->req->body.data : "";
  for (size_t i = 0; i < 2 && ops->max_tokens_keys[i][0] != NULL; i++) {
    const char *const *path = ops->max_tokens_keys[i];
    size_t vs, vl;
    if (px_json_find(bd, x->req->body.len, path, path[1] ? 2 : 1, &vs, &vl) ==
            PX_JSON_FOUND &&
        vl > 0 && bd[vs] >= '0' && bd[vs] <= '9')
      return strtoull(bd + vs, NULL, 10);
  }
  const px_route_conf_t *rt = px_config_route(x->cfg, x->model);
  if (rt && rt->max_tokens > 0) return (uint64_t)rt->max_tokens;
  return PX_RL_DEFAULT_RESERVE;
}

/* The rate limiter's verdict; <0 when the request was answered. */
static int admission(px_exch_t *x, px_rl_verdict_t v, unsigned wait) {
  if (v == PX_RL_ALLOW) {
    x->rl_admitted = 1;
    return 0;
  }
  if (v == PX_RL_UNAVAILABLE) {
    px_exch_error(x, PX_ERR_UNAVAILABLE, "rate limits cannot be checked: the shared state "
                                      "backend is unreachable", NULL);
    return -1;
  }
  char ra[16];
  snprintf(ra, sizeof(ra), "%u", wait ? wait : 1);
  px_hdr_t h = {px_str("retry-after"), px_str(ra)};
  px_exch_error_h(x, PX_ERR_RATE_LIMIT, 429, "rate limit exceeded for this key", NULL, &h, 1);
  return -1;
}

static void after_admission(px_exch_t *x) {
  px_config_t *cfg = x->cfg;
  if (x->srv->draining) {
    px_exch_error(x, PX_ERR_OVERLOADED, "the gateway is shutting down", NULL);
    return;
  }
  x->route = px_config_route(cfg, x->model);
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
  px_exch_attempt(x);
}

static void on_admitted(void *arg, px_rl_verdict_t v, unsigned wait) {
  px_exch_t *x = arg;
  x->rl_wait = NULL;
  if (admission(x, v, wait) == 0) after_admission(x);
}

/* The exchange of one generation request; NULL when out of memory. */
static px_exch_t *exch_new(px_server_t *s, px_conn_t *c, px_req_t *r,
                           const px_inbound_t *in) {
  px_exch_t *x = px_exch_alloc();
  if (x == NULL) return NULL;
  x->retry_reason[0] = x->bad_msg[0] = x->content_type[0] = x->label[0] = 0;
  px_lossy_init(&x->lossy);
  x->srv = s;
  x->conn = c;
  x->req = r;
  x->cfg = px_config_ref(s->config);
  x->in = in->proto;
  x->ep = in->ep;
  x->mode = &px_mode_none;
  x->t_start = r->start_ns;
  x->usage.input_tokens = x->usage.output_tokens = -1;
  x->passhdrs.cap = 64 * 1024;
  x->obuf.cap = PX_MAX_STREAM_OUT;
  px_conn_set_handler(c, &px_exch_conn_handler, x);
  return x;
}

/* The body's one scan and what the gateway acts on: model, stream,
 * include_usage. <0 when the request was answered. */
static int read_request(px_exch_t *x, const px_inbound_t *in) {
  /* One scan validates the body by the rules of SPEC section 10 (jansson's
   * syntax, nesting, no repeated model/stream) and finds what the gateway
   * acts on; a request that stays in its own protocol is never parsed. */
  const px_req_t *r = x->req;
  const char *bd = r->body.data ? r->body.data : "";
  if (px_json_request(bd, r->body.len, &x->jreq) < 0) {
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

/* The client key, the key's models, its rate limits. 0: go on to the
 * route; 1: the state backend answers later (on_admitted goes on); <0: the
 * request was answered. */
static int authorize(px_exch_t *x) {
  px_config_t *cfg = x->cfg;
  if (cfg->nkeys == 0) return 0;
  size_t sl = 0;
  const char *sec = client_secret(x->req, px_exch_client_ops(x), &sl);
  x->key = sec ? px_config_key(cfg, sec, sl) : NULL;
  if (x->key == NULL) {
    px_exch_error(x, PX_ERR_AUTH,
                  sec ? "invalid API key"
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
  if (x->key->rpm || x->key->tpm) {
    if (px_rl_reserves()) x->rl_reserved = reserve_estimate(x);
    unsigned wait = 0;
    px_rl_verdict_t v = px_rl_check(x->key, x->rl_reserved, px_exch_now(x), &wait,
                                    on_admitted, x, &x->rl_wait);
    if (v == PX_RL_PENDING) return 1;
    return admission(x, v, wait);
  }
  return 0;
}

static void gateway(px_server_t *s, px_conn_t *c, px_req_t *r, const px_inbound_t *in) {
  px_exch_t *x = exch_new(s, c, r, in);
  if (x == NULL) {
    px_resp_abort(c);
    return;
  }
  if (read_request(x, in) < 0) return;
  if (authorize(x) != 0) return;
  after_admission(x);
}

void px_proxy_request(px_server_t *s, px_conn_t *c, px_req_t *r) {
  const char *path = r->url.data;
  int get = r->method == HTTP_GET || r->method == HTTP_HEAD;
  if (path_is(r, "/healthz")) {
    if (!get) return path_error(c, NULL, PX_ERR_METHOD, "method not allowed");
    return simple_json(c, 200, "{\"status\":\"ok\"}");
  }
  if (path_is(r, "/readyz")) {
    if (!get) return path_error(c, NULL, PX_ERR_METHOD, "method not allowed");
    if (s->draining) return simple_json(c, 503, "{\"status\":\"draining\"}");
    return simple_json(c, 200, "{\"status\":\"ready\"}");
  }
  const px_key_conf_t *k;
  if (px_conn_is_admin(c)) { /* admin_listen: metrics and health only, no key */
    if (!path_is(r, "/metrics")) return path_error(c, NULL, PX_ERR_NOT_FOUND, "not found");
    if (!get) return path_error(c, NULL, PX_ERR_METHOD, "method not allowed");
    return serve_metrics(c);
  }
  if (path_is(r, "/metrics") && s->config->server.admin_listen == NULL) {
    if (!get) return path_error(c, NULL, PX_ERR_METHOD, "method not allowed");
    if (get_key(s, c, r, px_proto_default(), &k) < 0) return;
    return serve_metrics(c);
  }
  if (path_is(r, "/v1/models") || path_is(r, "/models")) {
    const px_proto_ops_t *ops = models_shape(r);
    if (!get) return path_error(c, ops, PX_ERR_METHOD, "method not allowed");
    if (get_key(s, c, r, ops, &k) < 0) return;
    return serve_models(s, c, ops, k);
  }
  px_inbound_t in;
  if (!px_proto_match(path, r->url.len, &in))
    return path_error(c, NULL, PX_ERR_NOT_FOUND, "not found");
  const px_proto_ops_t *ops = px_proto_get(in.proto);
  if (in.ep == PX_EP_MODELS) {
    if (!get) return path_error(c, ops, PX_ERR_METHOD, "method not allowed");
    if (get_key(s, c, r, ops, &k) < 0) return;
    return serve_models(s, c, ops, k);
  }
  if (r->method != HTTP_POST) return path_error(c, ops, PX_ERR_METHOD, "method not allowed");
  gateway(s, c, r, &in);
}
