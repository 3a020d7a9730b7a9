/* trace.c - W3C trace context, sampling and OTLP/JSON span encoding (SPEC
 * section 15). No I/O: the exporter (src/core/trace_export.c) takes the
 * batch this file fills.
 *
 *   px_trace_begin (client traceparent? continue : new trace; sample)
 *     -> px_trace_attempt (attempt span id, upstream traceparent) ...
 *     -> px_trace_emit (span -> JSON into the batch, or dropped)
 *     -> px_trace_take (the batch as one ExportTraceServiceRequest)
 *
 * OTLP/JSON as the OTLP specification defines it: ids in hex, enums as
 * numbers, 64-bit integers as decimal strings, lowerCamelCase names. Each
 * span is written straight into the batch (literal pieces are fixed-length
 * copies): a traced request costs a few thousand instructions, no
 * document is built.
 */
#include "proxai/trace.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <uv.h>

#include "proxai/metrics.h"

#define BATCH_MAX (4u << 20) /* bytes waiting, in flight apart: beyond, spans drop */
#define BATCH_SPANS_MAX 8192 /* spans waiting */
#define READY_SPANS 512      /* a batch this large is sent at once */
#define READY_BYTES (1u << 20)

static px_buf_t batch;
static size_t nspans;
static int ready_signalled;
static void (*ready_cb)(void);
static uint64_t wall_offset; /* wall clock ns - uv_hrtime() */

/* ---------------------------------------------------------------------- */
/* ids                                                                      */

/* xoshiro256** seeded from the kernel in each process at its first id
 * (workers are forked before any request: each gets its own sequence). */
static uint64_t rs[4];
static int seeded;

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static uint64_t next64(void) {
  if (!seeded) {
    if (getrandom(rs, sizeof(rs), 0) != (ssize_t)sizeof(rs)) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      rs[0] = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
      rs[1] = uv_hrtime() ^ 0x9e3779b97f4a7c15ull;
      rs[2] = (uint64_t)uv_os_getpid() * 0xbf58476d1ce4e5b9ull;
      rs[3] = 0x94d049bb133111ebull;
    }
    seeded = 1;
  }
  uint64_t r = rotl(rs[1] * 5, 7) * 9, t = rs[1] << 17;
  rs[2] ^= rs[0];
  rs[3] ^= rs[1];
  rs[1] ^= rs[2];
  rs[0] ^= rs[3];
  rs[2] ^= t;
  rs[3] = rotl(rs[3], 45);
  return r;
}

/* A random non-zero id of n bytes (8 or 16). */
static void new_id(uint8_t *id, size_t n) {
  for (;;) {
    uint64_t a = next64(), b = n > 8 ? next64() : 0;
    if (a == 0 && b == 0) continue;
    memcpy(id, &a, 8);
    if (n > 8) memcpy(id + 8, &b, 8);
    return;
  }
}

static const char hexd[] = "0123456789abcdef";

static void hex(char *out, const uint8_t *id, size_t n) {
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hexd[id[i] >> 4];
    out[2 * i + 1] = hexd[id[i] & 15];
  }
}

static int unhex1(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1; /* W3C: lower case only */
}

/* n bytes from 2n lower-case hex digits; 0 unless valid and not all zero */
static int unhex(uint8_t *out, const char *s, size_t n) {
  uint8_t any = 0;
  for (size_t i = 0; i < n; i++) {
    int h = unhex1(s[2 * i]), l = unhex1(s[2 * i + 1]);
    if (h < 0 || l < 0) return 0;
    out[i] = (uint8_t)(h << 4 | l);
    any |= out[i];
  }
  return any != 0;
}

/* A traceparent (W3C Trace Context level 1): version-00 exactly, a later
 * version by its first four fields. 1 when valid: ids into t. */
static int parse_traceparent(px_trace_ctx_t *t, px_str_t v) {
  const char *s = v.ptr;
  if (v.len < PX_TRACEPARENT_LEN || s[2] != '-' || s[35] != '-' || s[52] != '-') return 0;
  int hi = unhex1(s[0]), lo = unhex1(s[1]);
  if (hi < 0 || lo < 0 || (hi << 4 | lo) == 0xff) return 0;
  if (hi == 0 && lo == 0 ? v.len != PX_TRACEPARENT_LEN
                         : v.len > PX_TRACEPARENT_LEN && s[PX_TRACEPARENT_LEN] != '-')
    return 0;
  if (unhex1(s[53]) < 0 || unhex1(s[54]) < 0) return 0;
  return unhex(t->trace_id, s + 3, 16) && unhex(t->parent_id, s + 36, 8);
}

/* Sampling on the trace id, as OpenTelemetry's TraceIdRatioBased: its last
 * eight bytes (big-endian, top bit dropped) below sample * 2^63. */
static int sample_keep(const uint8_t *tid, double sample) {
  if (sample >= 1.0) return 1;
  if (sample <= 0.0) return 0;
  uint64_t v = 0;
  for (int i = 8; i < 16; i++) v = v << 8 | tid[i];
  return (v >> 1) < (uint64_t)(sample * 9223372036854775808.0);
}

void px_trace_begin(px_trace_ctx_t *t, const px_trace_conf_t *conf, px_str_t traceparent,
                    px_str_t tracestate) {
  memset(t, 0, sizeof(*t));
  if (conf->endpoint == NULL) return;
  t->on = 1;
  if (traceparent.len && parse_traceparent(t, traceparent)) {
    t->has_parent = 1;
    if (tracestate.len && px_header_value_ok(tracestate.ptr, tracestate.len))
      t->tracestate = tracestate;
  } else {
    new_id(t->trace_id, 16);
  }
  new_id(t->span_id, 8);
  t->sampled = (uint8_t)sample_keep(t->trace_id, conf->sample);
}

void px_trace_attempt(px_trace_ctx_t *t, char *out) {
  new_id(t->att_id, 8);
  if (out == NULL) return;
  memcpy(out, "00-", 3);
  hex(out + 3, t->trace_id, 16);
  out[35] = '-';
  hex(out + 36, t->att_id, 8);
  memcpy(out + 52, t->sampled ? "-01" : "-00", 3);
}

void px_trace_id_hex(const px_trace_ctx_t *t, char *out) {
  hex(out, t->trace_id, 16);
  out[32] = 0;
}

/* ---------------------------------------------------------------------- */
/* OTLP/JSON                                                                */

#define LIT(b, s) px_buf_append((b), (s), sizeof(s) - 1)

/* A JSON string's content: escaped, and valid UTF-8 whatever the bytes (a
 * model name from a URL path may not be): each invalid byte becomes U+FFFD
 * so one odd name never makes a collector refuse the batch. */
static int put_text(px_buf_t *b, const char *s, size_t n) {
  size_t i = 0;
  int rc = 0;
  while (rc == 0 && i < n) {
    size_t run = i;
    while (i < n && (unsigned char)s[i] < 0x80) i++;
    if (i > run) rc = px_buf_json_escape(b, s + run, i - run);
    if (rc < 0 || i >= n) break;
    unsigned char c = (unsigned char)s[i];
    size_t k = c >= 0xc2 && c <= 0xdf   ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    int ok = k > 0 && i + k <= n;
    for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)s[i + j] & 0xc0) == 0x80;
    if (ok && k == 3) { /* no overlong forms, no surrogates */
      unsigned char d = (unsigned char)s[i + 1];
      ok = !(c == 0xe0 && d < 0xa0) && !(c == 0xed && d >= 0xa0);
    }
    if (ok && k == 4) {
      unsigned char d = (unsigned char)s[i + 1];
      ok = !(c == 0xf0 && d < 0x90) && !(c == 0xf4 && d >= 0x90);
    }
    if (ok) {
      rc = px_buf_append(b, s + i, k);
      i += k;
    } else {
      rc = LIT(b, "\xef\xbf\xbd");
      i++;
    }
  }
  return rc;
}

static int put_u64(px_buf_t *b, uint64_t v) {
  char tmp[24];
  size_t i = sizeof(tmp);
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return px_buf_append(b, tmp + i, sizeof(tmp) - i);
}

static int put_id(px_buf_t *b, const uint8_t *id, size_t n) {
  char tmp[32];
  hex(tmp, id, n);
  return px_buf_append(b, tmp, 2 * n);
}

/* ,{"key":"K","value":{"stringValue":"V"}} (key_lit: `,{"key":"K","value":{`) */
#define ATTR_STR(b, key, v)                                               \
  ((v) ? (LIT(b, ",{\"key\":\"" key "\",\"value\":{\"stringValue\":\"") | \
          put_text(b, (v), strlen(v)) | LIT(b, "\"}}"))                   \
       : 0)
#define ATTR_INT(b, key, v)                                     \
  (LIT(b, ",{\"key\":\"" key "\",\"value\":{\"intValue\":\"") | \
   put_u64(b, (uint64_t)(v)) | LIT(b, "\"}}"))

static int put_double(px_buf_t *b, double v) {
  char tmp[40];
  int n = snprintf(tmp, sizeof(tmp), "%.17g", v);
  return px_buf_append(b, tmp, (size_t)n);
}

/* server.address: the host of the upstream's base URL */
static int attr_host(px_buf_t *b, const char *url) {
  const char *h = strstr(url, "://");
  h = h ? h + 3 : url;
  const char *at = h;
  while (*at && *at != '/' && *at != '@') at++;
  if (*at == '@') h = at + 1; /* never userinfo */
  const char *e = h;
  if (*h == '[') {
    while (*e && *e != ']') e++;
    if (*e == ']') e++;
  } else {
    while (*e && *e != ':' && *e != '/' && *e != '?') e++;
  }
  if (*h == '[' && e - h >= 2 && e[-1] == ']') h++, e--; /* the address without [] */
  return LIT(b, ",{\"key\":\"server.address\",\"value\":{\"stringValue\":\"") |
         put_text(b, h, (size_t)(e - h)) | LIT(b, "\"}}");
}

/* proxai.lossy: the comma-separated list as a string array */
static int attr_lossy(px_buf_t *b, const char *l) {
  int rc = LIT(b, ",{\"key\":\"proxai.lossy\",\"value\":{\"arrayValue\":{\"values\":[");
  int first = 1;
  while (*l) {
    while (*l == ' ' || *l == ',') l++;
    const char *e = l;
    while (*e && *e != ',') e++;
    const char *t = e;
    while (t > l && t[-1] == ' ') t--;
    if (t > l) {
      rc |= first ? LIT(b, "{\"stringValue\":\"") : LIT(b, ",{\"stringValue\":\"");
      rc |= put_text(b, l, (size_t)(t - l)) | LIT(b, "\"}");
      first = 0;
    }
    l = e;
  }
  return rc | LIT(b, "]}}}");
}

static int put_time(px_buf_t *b, uint64_t hr) {
  return put_u64(b, hr + wall_offset);
}

static int put_prefix(px_buf_t *b) {
  return LIT(b,
             "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
             "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"proxai\"}},"
             "{\"key\":\"service.version\",\"value\":{\"stringValue\":\"" PROXAI_VERSION
             "\"}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"proxai\",\"version\":"
             "\"" PROXAI_VERSION "\"},\"spans\":[");
}

static int put_span(px_buf_t *b, const px_trace_ctx_t *t, const px_span_t *s) {
  int rc = nspans ? LIT(b, ",{\"traceId\":\"") : LIT(b, "{\"traceId\":\"");
  rc |= put_id(b, t->trace_id, 16) | LIT(b, "\",\"spanId\":\"") | put_id(b, s->id, 8);
  if (s->parent) rc |= LIT(b, "\",\"parentSpanId\":\"") | put_id(b, s->parent, 8);
  if (t->tracestate.len && t->tracestate.len <= PX_TRACESTATE_MAX)
    rc |= LIT(b, "\",\"traceState\":\"") |
          put_text(b, t->tracestate.ptr, t->tracestate.len);
  rc |= LIT(b, "\",\"name\":\"") | put_text(b, s->operation, strlen(s->operation));
  if (s->name_model)
    rc |= LIT(b, " ") | put_text(b, s->name_model, strlen(s->name_model));
  rc |= s->kind == PX_SPAN_SERVER ? LIT(b, "\",\"kind\":2,\"startTimeUnixNano\":\"")
                                  : LIT(b, "\",\"kind\":3,\"startTimeUnixNano\":\"");
  rc |= put_time(b, s->start) | LIT(b, "\",\"endTimeUnixNano\":\"") | put_time(b, s->end);
  rc |= LIT(b,
            "\",\"attributes\":[{\"key\":\"gen_ai.operation.name\",\"value\":{"
            "\"stringValue\":\"") |
        put_text(b, s->operation, strlen(s->operation)) | LIT(b, "\"}}");
  rc |= ATTR_STR(b, "gen_ai.provider.name", s->provider);
  rc |= ATTR_STR(b, "gen_ai.request.model", s->request_model);
  rc |= ATTR_STR(b, "gen_ai.response.model", s->response_model);
  if (s->max_tokens >= 0) rc |= ATTR_INT(b, "gen_ai.request.max_tokens", s->max_tokens);
  if (s->input_tokens >= 0)
    rc |= ATTR_INT(b, "gen_ai.usage.input_tokens", s->input_tokens);
  if (s->output_tokens >= 0)
    rc |= ATTR_INT(b, "gen_ai.usage.output_tokens", s->output_tokens);
  if (s->server_url) rc |= attr_host(b, s->server_url);
  if (s->status > 0) rc |= ATTR_INT(b, "http.response.status_code", s->status);
  rc |= ATTR_STR(b, "error.type", s->error_type);
  rc |= ATTR_STR(b, "proxai.key", s->key);
  rc |= ATTR_STR(b, "proxai.team", s->team);
  rc |= ATTR_STR(b, "proxai.user", s->user);
  rc |= ATTR_STR(b, "proxai.route", s->route);
  rc |= ATTR_STR(b, "proxai.upstream", s->upstream);
  if (s->attempt) rc |= ATTR_INT(b, "proxai.attempt", s->attempt);
  if (s->lossy && *s->lossy) rc |= attr_lossy(b, s->lossy);
  if (s->cost_usd >= 0 && isfinite(s->cost_usd))
    rc |= LIT(b, ",{\"key\":\"proxai.cost_usd\",\"value\":{\"doubleValue\":") |
          put_double(b, s->cost_usd) | LIT(b, "}}");
  rc |= LIT(b, "]");
  if (s->first_token)
    rc |= LIT(b, ",\"events\":[{\"timeUnixNano\":\"") | put_time(b, s->first_token) |
          LIT(b, "\",\"name\":\"gen_ai.first_token\"}]");
  /* status: ERROR with error.type, never a message (it could carry the
   * upstream's error text) */
  rc |= s->error_type ? LIT(b, ",\"status\":{\"code\":2}}") : LIT(b, "}");
  return rc;
}

void px_trace_emit(const px_trace_ctx_t *t, const px_span_t *s) {
  if (!t->sampled) return;
  if (batch.cap == 0) px_buf_init(&batch, BATCH_MAX);
  size_t mark = batch.len;
  int rc = nspans < BATCH_SPANS_MAX ? 0 : -1;
  if (rc == 0 && nspans == 0) rc = put_prefix(&batch);
  if (rc == 0) rc = put_span(&batch, t, s);
  if (rc != 0) {
    batch.len = nspans ? mark : 0;
    px_trace_dropped(1, "queue_full");
    return;
  }
  nspans++;
  if (!ready_signalled && ready_cb && px_trace_ready()) {
    ready_signalled = 1;
    ready_cb();
  }
}

size_t px_trace_pending(void) {
  return nspans;
}

int px_trace_ready(void) {
  return nspans >= READY_SPANS || batch.len >= READY_BYTES;
}

size_t px_trace_take(px_buf_t *body) {
  px_buf_reset(body);
  if (nspans == 0) return 0;
  if (LIT(&batch, "]}]}]}") < 0) { /* no room for the end: the batch is lost */
    px_trace_dropped(nspans, "queue_full");
    px_trace_reset();
    return 0;
  }
  px_buf_t tmp = *body;
  *body = batch;
  batch = tmp; /* the caller's old buffer becomes the next batch */
  batch.cap = BATCH_MAX;
  px_buf_reset(&batch);
  size_t n = nspans;
  nspans = 0;
  ready_signalled = 0;
  return n;
}

void px_trace_dropped(size_t n, const char *reason) {
  if (n) px_metrics_trace_spans(reason, n);
}

void px_trace_on_ready(void (*cb)(void)) {
  ready_cb = cb;
}

void px_trace_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  wall_offset = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - uv_hrtime();
}

void px_trace_reset(void) {
  px_buf_free(&batch);
  memset(&batch, 0, sizeof(batch));
  nspans = 0;
  ready_signalled = 0;
}
