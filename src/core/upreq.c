/* upreq.c - the upstream request of an attempt: its body (the client's
 * bytes with the route's model spliced in, or the translation of the body),
 * its URL and its headers, all from the protocols' ops (the upstream
 * protocol's wire: URL, auth, version, forwarded and tenancy headers). It
 * knows no protocol. A retry on the same target reuses what was built.
 *
 *   px_upreq_build -> tr_ctx_init -> body: pass_body | translate_body
 *                  -> build_url -> build_upstream_headers
 */
#include "upreq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "proxai/fastir.h"
#include "proxai/metrics.h"
#include "stored.h"

static int value_ok(const char *v) { return px_header_value_ok(v, strlen(v)); }

/* The upstream header lines: one block (build_upstream_headers). */

/* name is one of list (NULL-ended, lower case), case-insensitively */
static int header_in(px_str_t name, const char *const *list) {
  if (name.len == 0) return 0;
  unsigned char c0 = (unsigned char)(name.ptr[0] | 0x20); /* most names differ here */
  for (; list && *list; list++)
    if ((unsigned char)(*list)[0] == c0 && name.len == strlen(*list) &&
        strncasecmp(name.ptr, *list, name.len) == 0)
      return 1;
  return 0;
}

/* With [trace], the gateway sends its own trace context (below) instead of
 * the client's; without, the client's goes on unchanged (SPEC 15). */
static int forward_header(const px_str_t name, const px_proto_ops_t *out, int traced) {
  static const char *const any[] = {"user-agent", "traceparent", "tracestate", NULL};
  static const char *const untraced[] = {"user-agent", NULL};
  return header_in(name, traced ? untraced : any) ||
         header_in(name, out->forward_headers);
}

/* One upstream header line as its parts: name, separator, value. */
typedef struct hdr_parts {
  px_str_t a, b, c;
} hdr_parts_t;

/* Most bytes of a joined line ("a" "b" "c", as the 4096-byte snprintf the
 * join replaced); a configured line is kept whole. */
#define HDR_LINE_MAX 4095

/* Whether the upstream's configured `header =` lines name this header
 * (case-insensitive): a configured header replaces whatever the gateway or
 * the client would send under that name (SPEC 10). */
static int configured(const px_upstream_conf_t *up, px_str_t name) {
  for (size_t i = 0; i < up->nheaders; i++) {
    const char *h = up->headers[i];
    const char *c = strchr(h, ':');
    size_t l = c ? (size_t)(c - h) : strlen(h);
    while (l > 0 && (h[l - 1] == ' ' || h[l - 1] == '\t')) l--;
    if (l == name.len && strncasecmp(h, name.ptr, l) == 0) return 1;
  }
  return 0;
}

/* the upstream chooses its own billing / tenancy when it configures any
 * of the protocol's tenancy headers */
static int own_tenancy(const px_upstream_conf_t *up, const px_proto_ops_t *ops) {
  for (const char *const *t = ops->tenancy_headers; t && *t; t++)
    if (configured(up, px_str(*t))) return 1;
  return 0;
}

/* The n lines as a NULL-terminated array of strings in one allocation
 * (pointers first, then the lines); the first `joined` are cut at
 * HDR_LINE_MAX. */
static char **join_lines(const hdr_parts_t *parts, size_t n, size_t joined) {
  size_t bytes = (n + 1) * sizeof(char *);
  for (size_t i = 0; i < n; i++) {
    size_t l = parts[i].a.len + parts[i].b.len + parts[i].c.len;
    bytes += (i < joined && l > HDR_LINE_MAX ? HDR_LINE_MAX : l) + 1;
  }
  char **h = malloc(bytes);
  if (h != NULL) {
    char *o = (char *)(h + n + 1);
    for (size_t i = 0; i < n; i++) {
      const px_str_t ps[3] = {parts[i].a, parts[i].b, parts[i].c};
      size_t k = 0, cap = i < joined ? HDR_LINE_MAX : (size_t)-1;
      for (size_t j = 0; j < 3; j++) {
        size_t l = ps[j].len < cap - k ? ps[j].len : cap - k;
        if (l) memcpy(o + k, ps[j].ptr, l);
        k += l;
      }
      o[k] = 0;
      h[i] = o;
      o += k + 1;
    }
    h[n] = NULL;
  }
  return h;
}

/* The traceparent line of a traced request, unless the upstream configures
 * its own: the exchange's (tr_line), sent by the lanes after the header
 * lines as it is (px_xfer_opts_t.trace_line: known good, of a known
 * length), its value written per attempt (px_trace_attempt, in place, hex
 * digits). Returns where the value goes, or NULL. */
static char *trace_line(px_exch_t *x) {
  static const char tp[] = "traceparent: ";
  _Static_assert(PX_XFER_TRACE_LINE_LEN == sizeof(tp) - 1 + PX_TRACEPARENT_LEN,
                 "the traceparent line's length");
  if (configured(x->up, PX_STR("traceparent"))) return NULL;
  memcpy(x->tr_line, tp, sizeof(tp) - 1);
  memset(x->tr_line + sizeof(tp) - 1, '0', PX_TRACEPARENT_LEN);
  x->tr_line[PX_XFER_TRACE_LINE_LEN] = 0;
  return x->tr_line + sizeof(tp) - 1;
}

/* The header lines, as NULL-terminated array of strings in one allocation
 * (pointers first, then the lines): no allocation and no printf per line.
 * Every line passes px_header_value_ok (the lanes do not check again:
 * px_xfer_opts_t.headers_checked). */
static char **build_upstream_headers(px_exch_t *x) {
  const px_upstream_conf_t *up = x->up;
  size_t max = 16 + x->req->nhdrs + up->nheaders;
  hdr_parts_t stack[48], *parts = max <= 48 ? stack : malloc(max * sizeof(*parts));
  if (parts == NULL) return NULL;
  /* the upstream bills to its own organization / project: the client's
   * choice of either is dropped when it configures one */
  const px_proto_ops_t *ops = px_proto_get(x->out);
  int own = own_tenancy(up, ops);
  size_t n = 0;
  /* every value passes the one header-value rule; a name the upstream
   * configures is left to its `header =` line */
#define ADD_CHECKED(name, sep, value)                                     \
  do {                                                                    \
    px_str_t nm_ = (name), v_ = (value);                                  \
    if (!configured(up, nm_)) parts[n++] = (hdr_parts_t){nm_, (sep), v_}; \
  } while (0)
#define ADD(name, sep, value)                                              \
  do {                                                                     \
    px_str_t v0_ = (value);                                                \
    if (px_header_value_ok(v0_.ptr, v0_.len)) ADD_CHECKED(name, sep, v0_); \
  } while (0)
  ADD(PX_STR("Content-Type"), PX_STR(": "), PX_STR("application/json"));
  ADD(PX_STR("Accept"), PX_STR(": "), x->stream ? PX_STR("text/event-stream") : PX_STR("application/json"));
  if (up->api_key) { /* "x-api-key: " = name, separator, key */
    const char *a = ops->auth_header, *colon = strchr(a, ':');
    ADD(((px_str_t){a, (size_t)(colon - a)}), px_str(colon), px_str(up->api_key));
  }
  if (ops->version_header) {
    const char *v = px_req_header(x->req, ops->version_header);
    ADD(px_str(ops->version_header), PX_STR(": "),
        px_str(v && *v && value_ok(v) ? v : up->anthropic_version));
  }
  ADD(PX_STR("x-request-id"), PX_STR(": "), px_str(x->req->request_id));
  for (size_t i = 0; i < x->req->nhdrs && n < max - up->nheaders - 1; i++) {
    const px_hdr_t *rh = &x->req->hdrs[i];
    if (!forward_header(rh->name, ops, x->tr.on)) continue;
    if (own && header_in(rh->name, ops->tenancy_headers)) continue;
    ADD(rh->name, PX_STR(": "), rh->value);
  }
  /* the trace context: the traceparent line is the exchange's own
   * (tr_line: trace_line), the client's tracestate goes on as is
   * (px_trace_begin checked it) */
  if (x->tr.on) { /* (tr_hdr NULL from px_exch_new on, else set here) */
    x->tr_hdr = trace_line(x);
    if (x->tr.tracestate.len)
      ADD_CHECKED(PX_STR("tracestate"), PX_STR(": "), x->tr.tracestate);
  }
#undef ADD
#undef ADD_CHECKED
  size_t joined = n; /* lines after this one are configured ones, kept whole */
  for (size_t i = 0; i < up->nheaders; i++)
    if (value_ok(up->headers[i]))
      parts[n++] = (hdr_parts_t){px_str(up->headers[i]), PX_STR(""), PX_STR("")};
  char **h = join_lines(parts, n, joined);
  if (parts != stack) free(parts);
  if (h == NULL) x->tr_hdr = NULL;
  return h;
}

/* A stream body that asks for usage (SPEC 5: the final usage must be real,
 * for tpm and metrics, whatever the client asked; the watcher strips the
 * extra chunk for a client that did not ask), for protocols whose streams
 * carry usage only on request. Without stream_options (as the body scan
 * read it: any spelling of the name) the member is put first, bytes
 * otherwise untouched; with one (include_usage not true), its value is
 * rewritten where it lies: an object's members but include_usage (any
 * spelling) copied, then "include_usage":true; another value replaced by
 * {"include_usage":true}. No document: the scan checked the body, the
 * walker reads it. NULL: nothing to change (or out of memory). */
static int is_include_usage(px_fstr_t k) {
  if (!k.esc) return PX_FS_IS(k, "include_usage");
  px_buf_t t;
  px_str_t v;
  px_buf_init(&t, k.n + 1);
  int is = px_json_unescape(k.p, k.n, 1, &t, &v) == 0 && v.len == 13 &&
           memcmp(v.ptr, "include_usage", 13) == 0;
  px_buf_free(&t);
  return is;
}

static char *usage_body(const char *bd, size_t n, size_t so_at, size_t so_len,
                        size_t *len) {
  if (so_len == 0) {
    static const char ins[] = "\"stream_options\":{\"include_usage\":true},";
    size_t i = 0;
    while (i < n && bd[i] != '{') i++;
    if (i == n) return NULL;
    char *b = malloc(n + sizeof(ins));
    if (b == NULL) return NULL;
    memcpy(b, bd, i + 1);
    memcpy(b + i + 1, ins, sizeof(ins) - 1);
    memcpy(b + i + sizeof(ins), bd + i + 1, n - i - 1);
    *len = n + sizeof(ins) - 1;
    b[*len] = 0;
    return b;
  }
  px_fw_t w = {bd, n, so_at};
  px_fv_t so;
  if (so_at >= n || px_fw_value(&w, &so) < 0) return NULL;
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  int rc = px_buf_append(&b, bd, so_at);
  if (rc == 0) rc = px_buf_puts(&b, "{");
  if (rc == 0 && so.kind == PX_FV_OBJ) {
    px_fw_t m = {so.raw.ptr, so.raw.len, 0};
    px_fstr_t k;
    px_fv_t v;
    int more = px_fw_open(&m, '{') < 0 ? -1 : 1;
    while (rc == 0 && (more = px_fw_member(&m, &k)) == 1) {
      if (px_fw_value(&m, &v) < 0) {
        more = -1;
        break;
      }
      if (is_include_usage(k)) continue;
      if (px_buf_puts(&b, "\"") || px_buf_append(&b, k.p, k.n) ||
          px_buf_puts(&b, "\":") || px_buf_append(&b, v.raw.ptr, v.raw.len) ||
          px_buf_puts(&b, ","))
        rc = PX_ENOMEM;
    }
    if (more < 0) rc = PX_EINVAL;
  }
  if (rc == 0) rc = px_buf_puts(&b, "\"include_usage\":true}");
  size_t end = (size_t)(so.raw.ptr - bd) + so.raw.len;
  if (rc == 0) rc = px_buf_append(&b, bd + end, n - end);
  if (rc == 0) rc = px_buf_append(&b, "", 1);
  if (rc != 0) {
    px_buf_free(&b);
    return NULL;
  }
  *len = b.len - 1;
  return px_buf_steal(&b, NULL);
}

/* Same-protocol upstream body: the client's bytes, with the route's model
 * (spliced where the scanner found it) and the usage request of a stream
 * that carries usage only on request, when either applies. */
static int pass_body(px_exch_t *x) {
  const char *bd = x->req->body.data ? x->req->body.data : "";
  size_t n = x->req->body.len;
  char *owned = NULL;
  size_t so_at = x->jreq.so_at; /* where the scan found stream_options */
  if (strcmp(x->up_model, x->model) != 0 && !px_exch_client_ops(x)->model_in_path) {
    px_buf_t b;
    px_buf_init(&b, n + strlen(x->up_model) * 6 + 64);
    if (px_json_splice_str(&b, bd, n, x->jreq.model_at, x->jreq.model_len, x->up_model) < 0) {
      px_buf_free(&b);
      px_exch_error(x, PX_ERR_API, "out of memory", NULL);
      return -1;
    }
    if (so_at > x->jreq.model_at) so_at = so_at + b.len - n; /* after the model */
    n = b.len;
    bd = owned = px_buf_steal(&b, NULL);
  }
  if (px_exch_client_ops(x)->stream_usage_opt_in && x->stream && x->ep == PX_EP_GENERATE &&
      !x->include_usage) {
    size_t l = 0;
    char *u = usage_body(bd, n, so_at, x->jreq.so_len, &l);
    if (u != NULL) {
      free(owned);
      bd = owned = u;
      n = l;
    }
  }
  x->up_body = bd;
  x->up_body_len = n;
  x->up_body_owned = owned;
  return 0;
}


/* The translation context of this attempt (client and upstream protocols,
 * models, the route's defaults). */
static void tr_ctx_init(px_exch_t *x) {
  px_tr_ctx_t *ctx = &x->ctx;
  memset(ctx, 0, sizeof(*ctx));
  ctx->in = x->in;
  ctx->out = x->out;
  ctx->client_model = x->model;
  ctx->upstream_model = x->up_model;
  ctx->default_max_tokens = x->route->max_tokens;
  ctx->client_include_usage = x->include_usage;
  ctx->stream = x->stream;
  ctx->created = (int64_t)time(NULL);
  ctx->max_accum = PX_MAX_STREAM_ACCUM;
  ctx->scan = &x->jreq; /* admit.c scanned the body once */
  px_stored_ctx(x, ctx);
}

/* The bytes a translation of a body of len bytes may decode it into
 * (px_tr_ctx_t.ir_budget): translate_memory times len plus
 * translate_memory_base; 0 (no bound) when translate_memory is 0. */
static size_t ir_budget(const px_server_conf_t *s, size_t len) {
  if (s->translate_memory == 0) return 0;
  uint64_t b = (uint64_t)len * s->translate_memory;
  if (s->translate_memory_base > UINT64_MAX - b) return SIZE_MAX;
  b += s->translate_memory_base;
  return b > SIZE_MAX ? SIZE_MAX : (size_t)b;
}

/* Another protocol's upstream body: the translation of the client's. Its
 * long strings stay in the client's body (alive until the exchange ends):
 * the body goes upstream in parts, the client's bytes not copied. */
static int translate_body(px_exch_t *x) {
  px_tr_err_t err;
  memset(&err, 0, sizeof(err));
  x->ctx.spans = &x->up_spans;
  x->ctx.ir_budget = ir_budget(&x->cfg->server, x->req->body.len);
  int rc = px_translate_request_body(&x->ctx, x->req->body.data ? x->req->body.data : "",
                                     x->req->body.len,
                                     x->ep == PX_EP_COUNT_TOKENS ? PX_TR_COUNT_TOKENS : 0,
                                     &x->up_body_owned, &x->up_body_len, &x->lossy, &err);
  x->ctx.spans = NULL;
  if (rc == 0 && x->up_spans.n &&
      px_spans_parts(x->up_body_owned, x->up_body_len, &x->up_spans, &x->up_parts,
                     &x->up_nparts) < 0) {
    err.kind = PX_ERR_API;
    snprintf(err.message, sizeof(err.message), "out of memory");
    rc = -1;
  }
  if (rc < 0) {
    if (err.kind == PX_ERR_TOO_LARGE)
      px_metrics_over_budget(px_proto_get(x->in)->name, x->up->name);
    px_exch_error(x, err.kind, err.message[0] ? err.message : "request cannot be translated",
                  err.param[0] ? err.param : NULL);
    return -1;
  }
  x->up_body = x->up_body_owned;
  if (x->up_parts) x->up_body_len += x->up_spans.bytes;
  return 0;
}

/* The upstream URL from the upstream protocol's wire (endpoint, model in
 * the path, stream variant). */
static int build_url(px_exch_t *x, const px_proto_ops_t *uops) {
  free(x->url);
  x->url = NULL;
  px_buf_t ub;
  px_buf_init(&ub, 64u << 10);
  if (px_buf_puts(&ub, x->up->base_url) < 0 ||
      px_proto_upstream_url(uops, &ub, x->up_model, x->stream, x->ep) < 0 ||
      px_buf_append(&ub, "", 1) < 0) {
    px_buf_free(&ub);
    char msg[160];
    snprintf(msg, sizeof(msg), "this endpoint is not available for an %s upstream", uops->name);
    px_exch_error(x, PX_ERR_NOT_IMPL, msg, NULL);
    return -1;
  }
  x->url = px_buf_steal(&ub, NULL);
  return 0;
}

int px_upreq_build(px_exch_t *x) {
  /* a retry on the same target sends the body, URL and headers it built */
  if (x->built_up == x->up && x->built_model == x->up_model && x->up_body != NULL &&
      x->url != NULL && x->up_hdrs != NULL)
    return 0;
  x->built_up = NULL;
  free(x->up_body_owned);
  free(x->up_parts);
  x->up_body_owned = NULL;
  x->up_parts = NULL;
  x->up_nparts = 0;
  tr_ctx_init(x);
  const px_proto_ops_t *uops = px_proto_get(x->out);
  if (x->ep == PX_EP_COUNT_TOKENS && x->in != x->out &&
      (uops->count_decode == NULL || px_exch_client_ops(x)->count_encode == NULL)) {
    char msg[160];
    snprintf(msg, sizeof(msg), "token counting is not available for an %s upstream",
             uops->name);
    px_exch_error(x, PX_ERR_NOT_IMPL, msg, NULL);
    return -1;
  }

  px_lossy_init(&x->lossy);
  if (x->in == x->out ? pass_body(x) < 0 : translate_body(x) < 0) return -1;
  if (build_url(x, uops) < 0) return -1;
  free(x->up_hdrs);
  x->up_hdrs = build_upstream_headers(x);
  x->built_up = x->up;
  x->built_model = x->up_model;
  return 0;
}
