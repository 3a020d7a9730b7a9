/* common.c - the protocol table, error kinds, the one stop-reason mapping
 * (shared by streaming and non-streaming code), lossy lists. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"

static const struct {
  int status;
  const char *openai;
  const char *anthropic;
} errkinds[] = {
#define XX(k, st, ot, at) {st, ot, at},
    PX_ERRKIND_MAP(XX)
#undef XX
};

int px_errkind_status(px_errkind_t k) { return errkinds[k].status; }
const char *px_errkind_openai(px_errkind_t k) { return errkinds[k].openai; }
const char *px_errkind_anthropic(px_errkind_t k) { return errkinds[k].anthropic; }

/* The error kind of an upstream error (SPEC 6): its type when the type is
 * one of the two families' error types and says more than the status; else
 * the status decides (a type or code with no counterpart in the client's
 * protocol, e.g. OpenAI's insufficient_quota under 429, must not become an
 * unrelated type). Codes only help when there is no error status (an error
 * event inside a 200 stream). */
px_errkind_t px_errkind_from_type(const char *type, int status) {
  static const struct { const char *type; px_errkind_t kind; } names[] = {
      {"invalid_request_error", PX_ERR_INVALID},
      {"authentication_error", PX_ERR_AUTH},
      {"permission_error", PX_ERR_PERMISSION},
      {"not_found_error", PX_ERR_NOT_FOUND},
      {"request_too_large", PX_ERR_TOO_LARGE},
      {"rate_limit_error", PX_ERR_RATE_LIMIT},
      {"overloaded_error", PX_ERR_OVERLOADED},
      {"timeout_error", PX_ERR_TIMEOUT},
      {"api_error", PX_ERR_API},
      {"server_error", PX_ERR_API},
  };
  static const struct { const char *code; px_errkind_t kind; } codes[] = {
      {"insufficient_quota", PX_ERR_RATE_LIMIT},
      {"rate_limit_exceeded", PX_ERR_RATE_LIMIT},
      {"invalid_api_key", PX_ERR_AUTH},
      {"model_not_found", PX_ERR_NOT_FOUND},
  };
  px_errkind_t by_status;
  switch (status) {
  case 400: case 422: by_status = PX_ERR_INVALID; break;
  case 401: by_status = PX_ERR_AUTH; break;
  case 403: by_status = PX_ERR_PERMISSION; break;
  case 404: by_status = PX_ERR_NOT_FOUND; break;
  case 413: by_status = PX_ERR_TOO_LARGE; break;
  case 429: by_status = PX_ERR_RATE_LIMIT; break;
  case 503: case 529: by_status = PX_ERR_OVERLOADED; break;
  case 504: by_status = PX_ERR_TIMEOUT; break;
  default: by_status = status >= 400 && status < 500 ? PX_ERR_INVALID : PX_ERR_API;
  }
  int error_status = status >= 400 && status <= 599;
  if (type != NULL) {
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
      if (strcmp(type, names[i].type) != 0) continue;
      px_errkind_t k = names[i].kind;
      /* a generic type under a specific status: the status says more */
      if (error_status && (k == PX_ERR_INVALID || k == PX_ERR_API) &&
          by_status != PX_ERR_INVALID && by_status != PX_ERR_API)
        return by_status;
      return k;
    }
    if (!error_status)
      for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (strcmp(type, codes[i].code) == 0) return codes[i].kind;
  }
  return by_status;
}

int px_tr_fail(px_tr_err_t *err, const char *param, const char *fmt, ...) {
  if (err != NULL) {
    err->kind = PX_ERR_INVALID;
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
  }
  return PX_EINVAL;
}

void px_lossy_add(px_lossy_t *l, const char *path) {
  if (path == NULL) return;
  size_t n = strlen(path);
  /* dedupe: look for path as a whole comma-separated element */
  const char *p = l->buf;
  while (p < l->buf + l->len) {
    const char *e = memchr(p, ',', (size_t)(l->buf + l->len - p));
    size_t el = e ? (size_t)(e - p) : (size_t)(l->buf + l->len - p);
    if (el == n && memcmp(p, path, n) == 0) return;
    if (e == NULL) break;
    p = e + 1;
  }
  size_t need = n + (l->len ? 1 : 0);
  if (l->len + need + 4 >= sizeof(l->buf)) {
    if (l->len < 3 || memcmp(l->buf + l->len - 3, "...", 3) != 0) {
      if (l->len + 4 < sizeof(l->buf)) {
        memcpy(l->buf + l->len, l->len ? ",..." : "...", l->len ? 4 : 3);
        l->len += l->len ? 4 : 3;
        l->buf[l->len] = 0;
      }
    }
    return;
  }
  if (l->len) l->buf[l->len++] = ',';
  memcpy(l->buf + l->len, path, n);
  l->len += n;
  l->buf[l->len] = 0;
}

/* ---- stop reasons: the single source of truth ---- */

static const char *stop_names[] = {
    NULL, "end_turn", "max_tokens", "stop_sequence", "tool_use",
    "pause_turn", "refusal", "content_filter",
};

const char *px_stop_name(px_stop_t s) { return stop_names[s]; }

px_stop_t px_stop_parse(const char *s) {
  if (s == NULL) return PX_STOP_NONE;
  for (int i = 1; i < (int)(sizeof(stop_names) / sizeof(stop_names[0])); i++)
    if (strcmp(s, stop_names[i]) == 0) return (px_stop_t)i;
  return PX_STOP_END_TURN;
}

const char *px_stop_to_chat(px_stop_t s) {
  switch (s) {
  case PX_STOP_NONE: return NULL;
  case PX_STOP_MAX_TOKENS: return "length";
  case PX_STOP_TOOL_USE: return "tool_calls";
  case PX_STOP_CONTENT_FILTER: return "content_filter";
  default: return "stop"; /* end_turn, stop_sequence, pause_turn, refusal */
  }
}

px_stop_t px_stop_from_chat(const char *fr) {
  if (fr == NULL) return PX_STOP_NONE;
  if (strcmp(fr, "length") == 0) return PX_STOP_MAX_TOKENS;
  if (strcmp(fr, "tool_calls") == 0 || strcmp(fr, "function_call") == 0)
    return PX_STOP_TOOL_USE;
  if (strcmp(fr, "content_filter") == 0) return PX_STOP_CONTENT_FILTER;
  return PX_STOP_END_TURN;
}

const char *px_stop_to_anthropic(px_stop_t s) {
  if (s == PX_STOP_CONTENT_FILTER) return "refusal";
  return stop_names[s];
}

const char *px_stop_to_responses(px_stop_t s, int has_refusal_part,
                                 const char **incomplete_reason) {
  (void)has_refusal_part;
  *incomplete_reason = NULL;
  switch (s) {
  case PX_STOP_NONE: return "in_progress";
  case PX_STOP_MAX_TOKENS:
    *incomplete_reason = "max_output_tokens";
    return "incomplete";
  case PX_STOP_CONTENT_FILTER:
    *incomplete_reason = "content_filter";
    return "incomplete";
  case PX_STOP_REFUSAL: return "failed";
  default: return "completed";
  }
}

px_stop_t px_stop_from_responses(const char *status, const char *reason,
                                 int has_tool_call) {
  if (status == NULL) return PX_STOP_NONE;
  if (strcmp(status, "completed") == 0)
    return has_tool_call ? PX_STOP_TOOL_USE : PX_STOP_END_TURN;
  if (strcmp(status, "incomplete") == 0)
    return reason && strcmp(reason, "content_filter") == 0
               ? PX_STOP_CONTENT_FILTER
               : PX_STOP_MAX_TOKENS;
  if (strcmp(status, "failed") == 0) return PX_STOP_REFUSAL;
  return PX_STOP_NONE;
}

void px_ev_init(px_ev_t *ev, px_ev_type_t type) {
  memset(ev, 0, sizeof(*ev));
  ev->type = type;
  ev->usage.input_tokens = ev->usage.output_tokens = -1;
  ev->usage.cache_read_tokens = ev->usage.cache_creation_tokens = -1;
  ev->usage.reasoning_tokens = -1;
}

/* ---- the table ---- */

static const px_proto_ops_t *const protos[] = {
#define XX(e, name, inpath, uppath, sym) &px_proto_##sym,
    PX_PROTO_MAP(XX)
#undef XX
};

const px_proto_ops_t *px_proto_get(px_proto_t p) { return protos[p]; }

int px_proto_by_name(const char *name) {
#define XX(e, nm, inpath, uppath, sym) \
  if (strcmp(name, nm) == 0) return PX_PROTO_##e;
  PX_PROTO_MAP(XX)
#undef XX
  return -1;
}

int px_proto_by_path(const char *path, size_t len) {
  const char *q = memchr(path, '?', len);
  if (q != NULL) len = (size_t)(q - path);
  if (len >= 3 && memcmp(path, "/v1", 3) == 0 && (len == 3 || path[3] == '/')) {
    path += 3;
    len -= 3;
  }
#define XX(e, nm, inpath, uppath, sym) \
  if (len == sizeof(inpath) - 1 && memcmp(path, inpath, len) == 0) return PX_PROTO_##e;
  PX_PROTO_MAP(XX)
#undef XX
  return -1;
}

/* path without its query and a leading "/v1" segment */
static px_str_t bare_path(const char *path, size_t len) {
  const char *q = memchr(path, '?', len);
  if (q != NULL) len = (size_t)(q - path);
  if (len >= 3 && memcmp(path, "/v1", 3) == 0 && (len == 3 || path[3] == '/')) {
    path += 3;
    len -= 3;
  }
  return (px_str_t){path, len};
}

int px_proto_match(const char *path, size_t len, px_inbound_t *in) {
  px_str_t b = bare_path(path, len);
  const char *q = memchr(path, '?', len);
  size_t full = q ? (size_t)(q - path) : len;
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_proto_ops_t *ops = protos[p];
    memset(in, 0, sizeof(*in));
    in->proto = (px_proto_t)p;
    in->stream = -1;
    if (ops->match != NULL) {
      if (ops->match(path, full, in)) return 1;
      continue;
    }
    if (px_str_eq(b, ops->inbound_path)) return 1;
    if (ops->count_inbound_path && px_str_eq(b, ops->count_inbound_path)) {
      in->ep = PX_EP_COUNT_TOKENS;
      in->stream = 0;
      return 1;
    }
  }
  return 0;
}

const px_proto_ops_t *px_proto_default(void) { return protos[0]; }

int px_proto_upstream_url(const px_proto_ops_t *ops, px_buf_t *out, const char *model,
                          int stream, px_endpoint_t ep) {
  if (ops->upstream_url != NULL) return ops->upstream_url(out, model, stream, ep);
  const char *p = ep == PX_EP_GENERATE ? ops->upstream_path
                  : ep == PX_EP_COUNT_TOKENS ? ops->count_upstream_path
                                             : NULL;
  return p != NULL ? px_buf_puts(out, p) : PX_EINVAL;
}

/* The rule set of x-proxai-lossy for streams (SPEC 5): what the client's
 * protocol cannot hold of what this request may bring back. The names are
 * those of the non-streaming encoders (chat.c, anthropic.c), which name the
 * same content when it is actually present; what a stream actually drops
 * goes to px_stream_tr_dropped (the access log). */
void px_lossy_predict(const px_tr_ctx_t *ctx, int reasoning, px_lossy_t *lossy) {
  /* A client without a carrier for opaque reasoning cannot hold the
   * upstream's (Anthropic thinking signatures / redacted thinking, Responses
   * encrypted_content, asked for by the Responses encoder whenever reasoning
   * is on, Gemini thought signatures); the others carry them tagged
   * (protoutil.h). */
  if (!px_tr_in_can(ctx, PX_CAP_REASONING_TOKENS) && ctx->out != ctx->in &&
      (reasoning || px_proto_get(ctx->out)->rtoks_unasked)) {
    px_lossy_add(lossy, px_lossy_opaque_reasoning(ctx, 0));
    px_lossy_add(lossy, px_lossy_opaque_reasoning(ctx, 1));
  }
}

/* What the hub drops of a decoded request, in one place: IR fields whose
 * capability the upstream lacks, named as the client spelled them
 * (translate_fast.c; the reference's px_ir_fit_request goes through it). */
static const struct {
  unsigned cap;
  size_t name; /* offset in px_lossy_names_t */
  size_t fast; /* offset of the px_fstr_t in px_freq_t */
} fits[] = {
    {PX_CAP_PROMPT_CACHE_KEY, offsetof(px_lossy_names_t, prompt_cache_key),
     offsetof(px_freq_t, prompt_cache_key)},
    {PX_CAP_VERBOSITY, offsetof(px_lossy_names_t, verbosity),
     offsetof(px_freq_t, verbosity)},
};

static const char *fit_name(const px_tr_ctx_t *ctx, size_t i) {
  return *(const char *const *)((const char *)px_in_names(ctx) + fits[i].name);
}

void px_fit_fast_request(const px_tr_ctx_t *ctx, px_freq_t *ir, px_lossy_t *lossy) {
  for (size_t i = 0; i < sizeof(fits) / sizeof(fits[0]); i++) {
    px_fstr_t *f = (px_fstr_t *)((char *)ir + fits[i].fast);
    if (px_tr_out_can(ctx, fits[i].cap) || f->p == NULL) continue;
    f->p = NULL;
    px_lossy_add(lossy, fit_name(ctx, i));
  }
}

/* Opaque reasoning a client cannot hold, by the upstream's name for it
 * (bodies, streams and the stream prediction use this one rule). */
const char *px_lossy_opaque_reasoning(const px_tr_ctx_t *ctx, int redacted) {
  const px_lossy_names_t *n = px_out_names(ctx);
  return redacted && n->redacted_reasoning != NULL ? n->redacted_reasoning
                                                   : n->opaque_reasoning;
}

const char *px_lossy_annotations(const px_tr_ctx_t *ctx) {
  return px_out_names(ctx)->annotations;
}

void px_lossy_each(const px_lossy_t *l, void (*fn)(void *arg, const char *path), void *arg) {
  char path[sizeof(l->buf)];
  const char *p = l->buf;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > 0 && n < sizeof(path) && !(n == 3 && memcmp(p, "...", 3) == 0)) {
      memcpy(path, p, n);
      path[n] = 0;
      fn(arg, path);
    }
    p += n;
    if (*p == ',') p++;
  }
}

static void add_to(void *dst, const char *path) { px_lossy_add(dst, path); }

void px_lossy_merge(px_lossy_t *dst, const px_lossy_t *src) { px_lossy_each(src, add_to, dst); }

/* ---- what a codec asks of the two sides (protoutil.h) ---- */

void px_dropped(const px_tr_ctx_t *ctx, const char *path) {
  if (ctx->dropped != NULL) px_lossy_add(ctx->dropped, path);
}

int px_tr_out_can(const px_tr_ctx_t *ctx, unsigned cap) {
  return (px_proto_get(ctx->out)->caps & cap) != 0;
}

int px_tr_in_can(const px_tr_ctx_t *ctx, unsigned cap) {
  return (px_proto_get(ctx->in)->caps & cap) != 0;
}

const px_lossy_names_t *px_in_names(const px_tr_ctx_t *ctx) {
  return &px_proto_get(ctx->in)->names;
}

const px_lossy_names_t *px_out_names(const px_tr_ctx_t *ctx) {
  return &px_proto_get(ctx->out)->names;
}
