/* test_trace.c - W3C trace context, sampling and the OTLP/JSON batch
 * (SPEC section 15): which traceparents continue a trace, the ratio kept by
 * `sample`, the upstream traceparent, span JSON that parses whatever bytes a
 * name holds, and the bounded batch. The wire format itself is checked
 * against the official definitions by test/integration/trace.mjs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "check.h"
#include "proxai/trace.h"

#define CHECK_STR(a, b)                                                                 \
  do {                                                                                  \
    const char *a_ = (a), *b_ = (b);                                                    \
    if (a_ == NULL || strcmp(a_, b_) != 0) {                                            \
      fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__, #a, \
              a_ ? a_ : "(null)", b_);                                                  \
      failures++;                                                                       \
    }                                                                                   \
  } while (0)

static px_trace_conf_t conf(double sample) {
  static char ep[] = "http://127.0.0.1:4318/v1/traces";
  px_trace_conf_t c = {ep, sample, NULL, 0};
  return c;
}

/* the spans of an ExportTraceServiceRequest */
static json_t *spans_of(json_t *doc) {
  json_t *rs = json_array_get(json_object_get(doc, "resourceSpans"), 0);
  return json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0), "spans");
}

static int continues(const char *tp) {
  px_trace_conf_t c = conf(1);
  px_trace_ctx_t t;
  px_trace_begin(&t, &c, px_str(tp), px_str("a=b"));
  return t.has_parent;
}

static void test_traceparent(void) {
  const char *tid = "4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b";
  CHECK(continues("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-01"));
  CHECK(continues("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-00"));
  /* a later version: its first four fields, more may follow after a dash */
  CHECK(continues("01-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-01-what"));
  CHECK(!continues("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-01-what"));
  CHECK(!continues("ff-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-01"));
  CHECK(!continues("00-4A4A4A4A4A4A4A4A5B5B5B5B5B5B5B5B-6c6c6c6c7d7d7d7d-01"));
  CHECK(!continues("00-00000000000000000000000000000000-6c6c6c6c7d7d7d7d-01"));
  CHECK(!continues("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-0000000000000000-01"));
  CHECK(!continues("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-0g"));
  CHECK(!continues("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7-01"));
  CHECK(!continues(""));

  px_trace_conf_t c = conf(1);
  { /* a context begun over another one (or over any bytes: it is not
       cleared first) holds nothing of it */
    px_trace_ctx_t r;
    memset(&r, 0xa5, sizeof(r));
    px_trace_begin(&r, &c, px_str(""), px_str("a=b"));
    CHECK(r.on && r.sampled && !r.has_parent && r.tracestate.len == 0);
    px_trace_begin(&r, &c,
                   px_str("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-01"),
                   px_str("a=b"));
    CHECK(r.has_parent && r.tracestate.len == 3);
    px_trace_begin(&r, &c,
                   px_str("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-0g"),
                   px_str("a=b"));
    CHECK(r.on && !r.has_parent && r.tracestate.len == 0);
    CHECK(memcmp(r.trace_hex, tid, 32) != 0); /* a new trace */
  }
  px_trace_ctx_t t;
  px_trace_begin(&t, &c,
                 px_str("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-00"),
                 px_str("congo=lorem1ipsum"));
  CHECK(t.on && t.sampled); /* the ratio decides, not the client's flag */
  char hex[33];
  px_trace_id_hex(&t, hex);
  CHECK_STR(hex, tid);
  CHECK(t.tracestate.len == 17);
  char tp[PX_TRACEPARENT_LEN + 1];
  px_trace_attempt(&t, tp);
  tp[PX_TRACEPARENT_LEN] = 0;
  CHECK(strncmp(tp, "00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-", 36) == 0);
  CHECK(strcmp(tp + 52, "-01") == 0);
  CHECK(strncmp(tp + 36, "6c6c6c6c7d7d7d7d", 16) != 0); /* the attempt's own id */
  char first[17];
  memcpy(first, tp + 36, 16);
  px_trace_attempt(&t, tp);
  CHECK(memcmp(first, tp + 36, 16) != 0); /* a new id per attempt */

  px_trace_conf_t off = {NULL, 1, NULL, 0};
  px_trace_begin(&t, &off,
                 px_str("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-01"),
                 px_str(""));
  CHECK(!t.on && !t.sampled);
}

static void test_sampling(void) {
  for (int k = 0; k < 3; k++) {
    double ratio = k == 0 ? 0 : k == 1 ? 0.25 : 1;
    px_trace_conf_t c = conf(ratio);
    int kept = 0, n = 20000;
    for (int i = 0; i < n; i++) {
      px_trace_ctx_t t;
      px_trace_begin(&t, &c, px_str(""), px_str(""));
      CHECK(t.on && !t.has_parent);
      kept += t.sampled;
      char tp[PX_TRACEPARENT_LEN];
      px_trace_attempt(&t, tp);
      CHECK(memcmp(tp + 52, t.sampled ? "-01" : "-00", 3) == 0);
      /* the ids as lower-case hex of the trace id sampled on: another gateway
       * continues the trace and samples alike */
      px_trace_ctx_t u;
      px_trace_begin(&u, &c, (px_str_t){tp, PX_TRACEPARENT_LEN}, px_str(""));
      CHECK(u.has_parent && memcmp(u.trace_id, t.trace_id, 16) == 0 &&
            u.sampled == t.sampled);
    }
    if (ratio == 0) CHECK(kept == 0);
    if (ratio == 1) CHECK(kept == n);
    if (ratio == 0.25) CHECK(kept > n / 4 - 600 && kept < n / 4 + 600);
  }
  /* new ids: all distinct, every bit set in about half of them */
  {
    px_trace_conf_t c1 = conf(1);
    enum { N = 2000 };
    static char ids[3 * N][33];
    unsigned ones[128] = {0};
    for (int i = 0; i < N; i++) {
      px_trace_ctx_t t;
      px_trace_begin(&t, &c1, px_str(""), px_str(""));
      px_trace_attempt(&t, NULL);
      memcpy(ids[3 * i], t.trace_hex, 32);
      memcpy(ids[3 * i + 1], t.span_hex, 16);
      memcpy(ids[3 * i + 2], t.att_hex, 16);
      for (int b = 0; b < 128; b++) ones[b] += t.trace_id[b / 8] >> (b % 8) & 1;
    }
    qsort(ids, 3 * N, sizeof(ids[0]), (int (*)(const void *, const void *))strcmp);
    int dup = 0;
    for (int i = 1; i < 3 * N; i++) dup += strcmp(ids[i - 1], ids[i]) == 0;
    CHECK(dup == 0);
    for (int b = 0; b < 128; b++) CHECK(ones[b] > N / 2 - 150 && ones[b] < N / 2 + 150);
  }
  /* the same trace id is kept or not alike on every gateway */
  px_trace_conf_t c = conf(0.5);
  for (int i = 0; i < 200; i++) {
    char tp[64];
    snprintf(tp, sizeof(tp), "00-%016x%016x-6c6c6c6c7d7d7d7d-01", i * 7919 + 1,
             i * 104729 + 3);
    px_trace_ctx_t a, b;
    px_trace_begin(&a, &c, px_str(tp), px_str(""));
    px_trace_begin(&b, &c, px_str(tp), px_str(""));
    CHECK(a.has_parent && a.sampled == b.sampled);
  }
}

static void test_batch(void) {
  px_trace_reset();
  px_trace_clock();
  px_trace_conf_t c = conf(1);
  px_trace_ctx_t t;
  px_trace_begin(&t, &c,
                 px_str("00-4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b-6c6c6c6c7d7d7d7d-01"),
                 px_str("k=\"v\""));
  px_trace_attempt(&t, NULL);
  /* a model name from a URL path can hold any byte */
  const char *odd = "m\"\\\x01\xff\xc3\xa9\xe2\x82";
  px_span_t s = {
      .kind = PX_SPAN_SERVER,
      .id = t.span_hex,
      .parent = t.parent_hex,
      .start = 1000,
      .end = 2000,
      .first_token = 1500,
      .operation = "chat",
      .name_model = odd,
      .request_model = odd,
      .max_tokens = 100000000,
      .input_tokens = 0,
      .output_tokens = -1,
      .status = 200,
      .route = "r*",
      .lossy = "top_k, stop,metadata",
      .cost_nano = 1250000,
  };
  px_trace_emit(&t, &s);
  px_span_t cl = {.kind = PX_SPAN_CLIENT,
                  .id = t.att_hex,
                  .parent = t.span_hex,
                  .start = 1100,
                  .end = 1900,
                  .operation = "chat",
                  .name_model = "up",
                  .provider = "openai",
                  .max_tokens = -1,
                  .input_tokens = -1,
                  .output_tokens = -1,
                  .server_url = "https://user:pw@[::1]:8443/v1",
                  .status = 503,
                  .error_type = "server_error",
                  .cost_nano = -1,
                  .attempt = 2};
  px_trace_emit(&t, &cl);
  CHECK(px_trace_pending() == 2);
  px_buf_t body;
  px_buf_init(&body, 0);
  CHECK(px_trace_take(&body) == 2);
  CHECK(px_trace_pending() == 0);
  json_error_t je;
  json_t *doc = json_loadb(body.data, body.len, 0, &je);
  CHECK(doc != NULL);
  if (doc == NULL) fprintf(stderr, "%s\n%.*s\n", je.text, (int)body.len, body.data);
  json_t *spans = spans_of(doc);
  CHECK(json_array_size(spans) == 2);
  json_t *sv = json_array_get(spans, 0), *cv = json_array_get(spans, 1);
  CHECK_STR(json_string_value(json_object_get(sv, "name")),
            "chat m\"\\\x01\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd");
  CHECK_STR(json_string_value(json_object_get(sv, "traceState")), "k=\"v\"");
  /* wall-clock nanoseconds: the span's offsets kept exactly */
  const char *t0 = json_string_value(json_object_get(sv, "startTimeUnixNano"));
  const char *t1 = json_string_value(json_object_get(sv, "endTimeUnixNano"));
  CHECK(t0 && t1 && strlen(t0) == 19);
  if (t0 && t1) {
    unsigned long long a = strtoull(t0, NULL, 10), b = strtoull(t1, NULL, 10);
    CHECK(b - a == 1000);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long now =
        (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
    unsigned long long at = now - uv_hrtime() + 1000;
    CHECK(a > at - 1000000000ull && a < at + 1000000000ull);
  }
  CHECK_STR(json_string_value(json_object_get(sv, "parentSpanId")), "6c6c6c6c7d7d7d7d");
  CHECK(json_object_get(sv, "status") == NULL);
  CHECK(json_integer_value(json_object_get(cv, "kind")) == 3);
  CHECK(json_integer_value(json_object_get(json_object_get(cv, "status"), "code")) == 2);
  CHECK(json_object_get(json_object_get(cv, "status"), "message") == NULL);
  char want[17];
  memcpy(want, t.span_hex, 16);
  want[16] = 0;
  CHECK_STR(json_string_value(json_object_get(cv, "parentSpanId")), want);
  /* attributes by key */
  const char *lossy[3] = {0};
  int saw_host = 0, saw_cost = 0, saw_in = 0, saw_out = 0;
  for (int k = 0; k < 2; k++) {
    json_t *attrs = json_object_get(k ? cv : sv, "attributes"), *a;
    size_t i;
    json_array_foreach(attrs, i, a) {
      const char *key = json_string_value(json_object_get(a, "key"));
      json_t *v = json_object_get(a, "value");
      if (strcmp(key, "server.address") == 0) {
        CHECK_STR(json_string_value(json_object_get(v, "stringValue")), "::1");
        saw_host = 1;
      } else if (strcmp(key, "proxai.cost_usd") == 0) {
        CHECK(json_real_value(json_object_get(v, "doubleValue")) == 0.00125);
        saw_cost = 1;
      } else if (strcmp(key, "gen_ai.usage.input_tokens") == 0) {
        CHECK_STR(json_string_value(json_object_get(v, "intValue")), "0");
        saw_in = 1;
      } else if (strcmp(key, "gen_ai.usage.output_tokens") == 0) {
        saw_out = 1;
      } else if (strcmp(key, "gen_ai.request.max_tokens") == 0) {
        CHECK_STR(json_string_value(json_object_get(v, "intValue")), "100000000");
      } else if (strcmp(key, "http.response.status_code") == 0) {
        CHECK_STR(json_string_value(json_object_get(v, "intValue")), k ? "503" : "200");
      } else if (strcmp(key, "proxai.attempt") == 0) {
        CHECK_STR(json_string_value(json_object_get(v, "intValue")), "2");
      } else if (strcmp(key, "proxai.lossy") == 0) {
        json_t *vals = json_object_get(json_object_get(v, "arrayValue"), "values");
        CHECK(json_array_size(vals) == 3);
        for (size_t j = 0; j < 3 && j < json_array_size(vals); j++)
          lossy[j] =
              json_string_value(json_object_get(json_array_get(vals, j), "stringValue"));
      }
    }
  }
  CHECK(saw_host && saw_cost && saw_in && !saw_out);
  CHECK(lossy[0] && lossy[1] && lossy[2]);
  if (lossy[2]) {
    CHECK_STR(lossy[0], "top_k");
    CHECK_STR(lossy[1], "stop");
    CHECK_STR(lossy[2], "metadata");
  }
  json_decref(doc);

  /* unsampled: nothing written */
  px_trace_conf_t none = conf(0);
  px_trace_begin(&t, &none, px_str(""), px_str(""));
  px_trace_emit(&t, &s);
  CHECK(px_trace_pending() == 0);
  CHECK(px_trace_take(&body) == 0);

  /* bounded: past the cap a span is dropped, the batch stays whole */
  px_trace_begin(&t, &c, px_str(""), px_str(""));
  s.id = t.span_hex;
  s.parent = NULL; /* a new trace: a root span */
  size_t n = 0;
  for (int i = 0; i < 20000; i++) px_trace_emit(&t, &s);
  n = px_trace_pending();
  CHECK(n > 1000 && n < 20000);
  CHECK(px_trace_take(&body) == n);
  doc = json_loadb(body.data, body.len, 0, &je);
  CHECK(doc != NULL);
  json_decref(doc);
  px_buf_free(&body);
  px_trace_reset();
}

/* Names of every length to 20 with one byte to escape (or not) at every
 * place: each span name comes back exactly, whichever way it was copied
 * (a word at a time, overlapping, or byte by byte). */
static void test_names(void) {
  px_trace_reset();
  px_trace_conf_t c = conf(1);
  px_trace_ctx_t t;
  px_trace_begin(&t, &c, px_str(""), px_str(""));
  const char odd[] = {'"', '\\', '\n', 'x'};
  size_t spans = 0;
  for (size_t len = 1; len <= 20; len++)
    for (size_t at = 0; at < len; at++)
      for (size_t k = 0; k < sizeof(odd); k++) {
        char name[24];
        for (size_t i = 0; i < len; i++) name[i] = (char)('a' + i);
        name[at] = odd[k];
        name[len] = 0;
        px_span_t s = {.kind = PX_SPAN_SERVER,
                       .id = t.span_hex,
                       .start = 1,
                       .end = 2,
                       .operation = "chat",
                       .name_model = name,
                       .max_tokens = -1,
                       .input_tokens = -1,
                       .output_tokens = -1,
                       .cost_nano = -1};
        px_trace_emit(&t, &s);
        spans++;
      }
  px_buf_t body;
  px_buf_init(&body, 0);
  CHECK(px_trace_take(&body) == spans);
  json_t *doc = json_loadb(body.data, body.len, 0, NULL);
  CHECK(doc != NULL);
  json_t *sp = spans_of(doc);
  size_t i = 0;
  for (size_t len = 1; len <= 20; len++)
    for (size_t at = 0; at < len; at++)
      for (size_t k = 0; k < sizeof(odd); k++, i++) {
        char want[32] = "chat ";
        for (size_t j = 0; j < len; j++) want[5 + j] = (char)('a' + j);
        want[5 + at] = odd[k];
        want[5 + len] = 0;
        CHECK_STR(json_string_value(json_object_get(json_array_get(sp, i), "name")),
                  want);
      }
  json_decref(doc);
  px_buf_free(&body);
  px_trace_reset();
}

/* the batch taken (n spans) and parsed; NULL (a failure counted) when not */
static json_t *take_doc(size_t n) {
  px_buf_t body;
  px_buf_init(&body, 0);
  CHECK(px_trace_take(&body) == n);
  json_t *doc = json_loadb(body.data, body.len, 0, NULL);
  CHECK(doc != NULL);
  px_buf_free(&body);
  return doc;
}

/* the value of attribute key of span i in a taken batch, or NULL */
static const char *attr_of(json_t *spans, size_t i, const char *key) {
  json_t *attrs = json_object_get(json_array_get(spans, i), "attributes"), *a;
  size_t k;
  json_array_foreach(attrs, k, a) {
    if (strcmp(json_string_value(json_object_get(a, "key")), key) == 0)
      return json_string_value(json_object_get(json_object_get(a, "value"), "stringValue"));
  }
  return NULL;
}

/* The attributes fixed per upstream or per key and route are encoded once
 * and kept while a reference holds their configuration: each span still
 * carries its own (another upstream, another configuration, none), and the
 * reference is let go by px_trace_reset. */
static void test_fixed_attrs(void) {
  px_trace_conf_t c = conf(1);
  px_trace_ctx_t t;
  px_trace_begin(&t, &c, px_str(""), px_str(""));
  px_trace_attempt(&t, NULL);
  px_config_t a, b;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  a.refs = b.refs = 1;
  char up1[] = "up-one", up2[] = "up-two", url1[] = "http://one.example:8080/v1",
       url2[] = "https://two.example/v1";
  struct {
    const px_config_t *cfg;
    const char *up, *url, *host;
  } spans[] = {{&a, up1, url1, "one.example"}, {&a, up1, url1, "one.example"},
               {&a, up2, url2, "two.example"}, {&b, up1, url1, "one.example"},
               {NULL, up2, url1, "one.example"}, {&a, up1, url1, "one.example"}};
  size_t n = sizeof(spans) / sizeof(spans[0]);
  for (size_t i = 0; i < n; i++) {
    px_span_t s = {.kind = PX_SPAN_CLIENT,
                   .id = t.att_hex,
                   .parent = t.span_hex,
                   .start = 1,
                   .end = 2,
                   .operation = i == 1 ? "generate_content" : "chat",
                   .name_model = "m",
                   .provider = "openai",
                   .max_tokens = -1,
                   .input_tokens = -1,
                   .output_tokens = -1,
                   .server_url = spans[i].url,
                   .upstream = spans[i].up,
                   .cost_nano = -1,
                   .cfg = spans[i].cfg};
    px_trace_emit(&t, &s);
  }
  /* one reference while kept: the last span's configuration */
  CHECK(a.refs == 2 && b.refs == 1);
  json_t *doc = take_doc(n), *js = spans_of(doc);
  for (size_t i = 0; doc && i < n; i++) {
    CHECK_STR(attr_of(js, i, "proxai.upstream"), spans[i].up);
    CHECK_STR(attr_of(js, i, "server.address"), spans[i].host);
    CHECK_STR(attr_of(js, i, "gen_ai.provider.name"), "openai");
    CHECK_STR(attr_of(js, i, "gen_ai.operation.name"), i == 1 ? "generate_content" : "chat");
  }
  json_decref(doc);
  px_trace_reset();
  CHECK(a.refs == 1 && b.refs == 1);
}

/* A span's times: every nanosecond digit where it belongs (the end minus
 * the start, across digit and second boundaries). */
static void test_times(void) {
  px_trace_conf_t c = conf(1);
  px_trace_ctx_t t;
  px_trace_begin(&t, &c, px_str(""), px_str(""));
  const uint64_t base = 5000000000ull, d[] = {0,         1,         9,          10,
                                              99,        123456789, 999999999,  1000000000,
                                              987654321, 100000001, 4294967295u};
  size_t n = sizeof(d) / sizeof(d[0]);
  for (size_t i = 0; i < n; i++) {
    px_span_t s = {.kind = PX_SPAN_SERVER,
                   .id = t.span_hex,
                   .start = base + 7 * i,
                   .end = base + 7 * i + d[i],
                   .operation = "chat",
                   .max_tokens = -1,
                   .input_tokens = -1,
                   .output_tokens = -1,
                   .cost_nano = -1};
    px_trace_emit(&t, &s);
  }
  json_t *doc = take_doc(n), *js = spans_of(doc);
  for (size_t i = 0; doc && i < n; i++) {
    json_t *sp = json_array_get(js, i);
    const char *a = json_string_value(json_object_get(sp, "startTimeUnixNano"));
    const char *b = json_string_value(json_object_get(sp, "endTimeUnixNano"));
    CHECK(a && b && strlen(a) == 19 && strspn(a, "0123456789") == 19 &&
          strspn(b, "0123456789") == strlen(b));
    if (a && b) CHECK(strtoull(b, NULL, 10) - strtoull(a, NULL, 10) == d[i]);
    if (i && a) { /* 7 ns after the last span's start */
      const char *p = json_string_value(
          json_object_get(json_array_get(js, i - 1), "startTimeUnixNano"));
      CHECK(p && strtoull(a, NULL, 10) - strtoull(p, NULL, 10) == 7);
    }
  }
  json_decref(doc);
  px_trace_reset();
  /* times back and forth across seconds (the kept one and others), the
   * first ones near 0: each as far from the first as it is */
  uint64_t at[300], x = 1, off = 0;
  { /* the wall clock's offset: second boundaries where they fall */
    px_span_t s = {.kind = PX_SPAN_SERVER,
                   .id = t.span_hex,
                   .start = 5000000000ull,
                   .end = 5000000000ull,
                   .operation = "chat",
                   .max_tokens = -1,
                   .input_tokens = -1,
                   .output_tokens = -1,
                   .cost_nano = -1};
    px_trace_emit(&t, &s);
    doc = take_doc(1);
    const char *v = json_string_value(
        json_object_get(json_array_get(spans_of(doc), 0), "startTimeUnixNano"));
    CHECK(v != NULL);
    if (v) off = strtoull(v, NULL, 10) - 5000000000ull;
    json_decref(doc);
  }
  static const int64_t edge[] = {0,          1,          -1,         999999999,
                                 1000000000, 1000000001, -1000000000};
  uint64_t sec0 =
      (off + 9000000000ull) / 1000000000 * 1000000000 - off; /* hr at a second */
  for (size_t i = 0; i < 4; i++) at[i] = i;                  /* near 0 */
  for (size_t i = 4; i < 60; i++)
    at[i] = sec0 + (uint64_t)(i / 7) * 1000000000u + (uint64_t)edge[i % 7];
  for (size_t i = 60; i < 300; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t step = (x >> 33) % 3000000000u;
    at[i] = (x >> 20) & 1 && at[i - 1] > step ? at[i - 1] - step : at[i - 1] + step;
    if (i % 50 == 0) at[i] += 3600000000000ull; /* an hour on */
  }
  for (size_t i = 0; i < 300; i += 2) {
    px_span_t s = {.kind = PX_SPAN_SERVER,
                   .id = t.span_hex,
                   .start = at[i],
                   .end = at[i + 1],
                   .operation = "chat",
                   .max_tokens = -1,
                   .input_tokens = -1,
                   .output_tokens = -1,
                   .cost_nano = -1};
    px_trace_emit(&t, &s);
  }
  doc = take_doc(150);
  js = spans_of(doc);
  const char *t0 =
      doc ? json_string_value(json_object_get(json_array_get(js, 0), "startTimeUnixNano"))
          : NULL;
  CHECK(t0 != NULL);
  for (size_t i = 0; doc && t0 && i < 300; i++) {
    const char *v = json_string_value(json_object_get(
        json_array_get(js, i / 2), i % 2 ? "endTimeUnixNano" : "startTimeUnixNano"));
    char want[32];
    CHECK(v && strspn(v, "0123456789") == strlen(v) && (v[0] != '0' || v[1] == 0));
    if (v)
      snprintf(want, sizeof(want), "%llu",
               (unsigned long long)(strtoull(t0, NULL, 10) - at[0] + at[i]));
    if (v) CHECK_STR(v, want);
  }
  json_decref(doc);
  px_trace_reset();
}

/* the intValue (a decimal string) of a span's attribute, -1 when absent */
static long long int_of(json_t *spans, size_t i, const char *key) {
  json_t *attrs = json_object_get(json_array_get(spans, i), "attributes"), *a;
  size_t k;
  json_array_foreach(attrs, k, a) {
    if (strcmp(json_string_value(json_object_get(a, "key")), key) == 0) {
      const char *v =
          json_string_value(json_object_get(json_object_get(a, "value"), "intValue"));
      return v ? strtoll(v, NULL, 10) : -2;
    }
  }
  return -1;
}

/* the finish reason (the only element of the string array), or NULL */
static const char *finish_of(json_t *spans, size_t i) {
  json_t *attrs = json_object_get(json_array_get(spans, i), "attributes"), *a;
  size_t k;
  json_array_foreach(attrs, k, a) {
    if (strcmp(json_string_value(json_object_get(a, "key")),
               "gen_ai.response.finish_reasons") == 0)
      return json_string_value(json_object_get(
          json_array_get(
              json_object_get(json_object_get(json_object_get(a, "value"), "arrayValue"),
                              "values"),
              0),
          "stringValue"));
  }
  return NULL;
}

/* A request's SERVER span after its CLIENT span (pass-through: the same
 * answer strings and numbers, the SERVER span's id and counts copied from
 * the CLIENT span's): each carries its own values (a value differing, an id
 * of the same bytes but escaped in one of them, none, another request's
 * span, a span between, the batch taken). */
static void test_answer_run(void) {
  px_trace_conf_t c = conf(1);
  char model[] = "gpt-\"x\"\n", id[] = "chatcmpl-1", fin[] = "stop", fin2[] = "stop";
  enum {
    SAME,
    OTHER_FIN,
    OTHER_OUT,
    OTHER_IN,
    ESCAPED,
    NO_ID,
    OTHER_STATUS,
    OTHER_REQUEST,
    BETWEEN,
    TAKEN,
    NCASES
  };
  for (int k = 0; k < NCASES; k++) {
    px_trace_ctx_t t, u;
    strcpy(id, "chatcmpl-1");
    px_trace_begin(&t, &c, px_str(""), px_str(""));
    px_trace_begin(&u, &c, px_str(""), px_str(""));
    px_trace_attempt(&t, NULL);
    px_span_t cl = {.kind = PX_SPAN_CLIENT,
                    .id = t.att_hex,
                    .parent = t.span_hex,
                    .start = 1,
                    .end = 2,
                    .operation = "chat",
                    .name_model = "m",
                    .request_model = "m",
                    .provider = "openai",
                    .response_model = {model, strlen(model)},
                    .response_id = {id, strlen(id)},
                    .finish_reason = {fin, strlen(fin)},
                    .max_tokens = -1,
                    .input_tokens = 25,
                    .output_tokens = 14,
                    .status = 200,
                    .cost_nano = -1,
                    .attempt = 1};
    px_span_t sv = cl;
    sv.kind = PX_SPAN_SERVER;
    sv.id = (k == OTHER_REQUEST ? &u : &t)->span_hex;
    sv.parent = NULL;
    sv.max_tokens = 16;
    sv.attempt = 0;
    if (k == OTHER_FIN)
      sv.finish_reason = (px_str_t){fin2, strlen(fin2)}; /* same bytes */
    if (k == OTHER_FIN) strcpy(fin2, "stoq");
    if (k == OTHER_OUT) sv.output_tokens = 15;
    if (k == OTHER_IN) sv.input_tokens = 26;
    if (k == ESCAPED) { /* x" is written x\", as x\ would be at first */
      cl.response_id = PX_STR("x\"");
      sv.response_id = PX_STR("x\\");
    }
    if (k == NO_ID) sv.response_id = PX_STR("");
    if (k == OTHER_STATUS) sv.status = 502;
    px_trace_emit(&t, &cl);
    size_t n = 2;
    json_t *first = NULL;
    /* the same strings' bytes changed (an address used again): the
     * SERVER span must show what they hold now */
    int changed = k == OTHER_REQUEST || k == BETWEEN || k == TAKEN;
    if (changed) strcpy(id, "chatcmpl-2");
    if (k == BETWEEN) { /* another request's span */
      px_span_t other = sv;
      other.id = u.span_hex;
      px_trace_emit(&u, &other);
      n = 3;
    }
    if (k == TAKEN) {
      first = take_doc(1);
      n = 1;
    }
    px_trace_emit(k == OTHER_REQUEST ? &u : &t, &sv);
    json_t *doc = take_doc(n), *js = spans_of(doc);
    size_t s = n - 1; /* the SERVER span */
    CHECK_STR(attr_of(js, s, "gen_ai.response.model"), model);
    if (k == NO_ID)
      CHECK(attr_of(js, s, "gen_ai.response.id") == NULL);
    else
      CHECK_STR(attr_of(js, s, "gen_ai.response.id"), k == ESCAPED ? "x\\"
                                                      : changed    ? "chatcmpl-2"
                                                                   : "chatcmpl-1");
    CHECK_STR(finish_of(js, s), k == OTHER_FIN ? "stoq" : "stop");
    CHECK(int_of(js, s, "gen_ai.usage.input_tokens") == (k == OTHER_IN ? 26 : 25));
    CHECK(int_of(js, s, "gen_ai.usage.output_tokens") == (k == OTHER_OUT ? 15 : 14));
    CHECK(int_of(js, s, "http.response.status_code") == (k == OTHER_STATUS ? 502 : 200));
    CHECK(int_of(js, s, "gen_ai.request.max_tokens") == 16);
    CHECK(int_of(js, s, "proxai.attempt") == -1);
    json_t *cls = first ? spans_of(first) : js;
    CHECK_STR(attr_of(cls, 0, "gen_ai.response.model"), model);
    CHECK_STR(finish_of(cls, 0), "stop");
    CHECK_STR(attr_of(cls, 0, "gen_ai.response.id"), k == ESCAPED ? "x\"" : "chatcmpl-1");
    CHECK(int_of(cls, 0, "gen_ai.usage.output_tokens") == 14);
    CHECK(int_of(cls, 0, "proxai.attempt") == 1);
    CHECK(int_of(cls, 0, "gen_ai.request.max_tokens") == -1);
    json_decref(doc);
    json_decref(first);
  }
  px_trace_reset();
}

/* The CLIENT span's answer run is copied only from the batch it was written
 * into: a batch taken, the next one may be memory that held an earlier
 * batch (the caller's buffer, given back), with another run of the same
 * id at the same place. */
static void test_answer_run_taken(void) {
  px_trace_conf_t c = conf(1);
  px_buf_t body;
  px_buf_init(&body, 0);
  px_trace_ctx_t t;
  px_trace_begin(&t, &c, px_str(""), px_str(""));
  px_trace_attempt(&t, NULL);
  px_span_t cl = {.kind = PX_SPAN_CLIENT,
                  .id = t.att_hex,
                  .parent = t.span_hex,
                  .start = 1,
                  .end = 2,
                  .operation = "chat",
                  .name_model = "m",
                  .request_model = "m",
                  .response_id = PX_STR("chatcmpl-1"),
                  .max_tokens = -1,
                  .input_tokens = 25,
                  .output_tokens = 99,
                  .cost_nano = -1,
                  .attempt = 1};
  px_trace_emit(&t, &cl); /* 25 and 99 in the first batch */
  CHECK(px_trace_take(&body) == 1);
  cl.output_tokens = 14; /* the same place in the second */
  px_trace_emit(&t, &cl);
  CHECK(px_trace_take(&body) == 1); /* the first batch's memory: the next */
  px_span_t sv = cl;
  sv.kind = PX_SPAN_SERVER;
  sv.id = t.span_hex;
  sv.parent = NULL;
  sv.attempt = 0;
  px_trace_emit(&t, &sv);
  json_t *doc = take_doc(1), *js = spans_of(doc);
  CHECK_STR(attr_of(js, 0, "gen_ai.response.id"), "chatcmpl-1");
  CHECK(int_of(js, 0, "gen_ai.usage.input_tokens") == 25);
  CHECK(int_of(js, 0, "gen_ai.usage.output_tokens") == 14);
  json_decref(doc);
  /* a SERVER span written in full lets the run go: the next one that
   * would have matched it is written in full too */
  px_trace_emit(&t, &cl);
  sv.response_id = PX_STR("chatcmpl-2");
  px_trace_emit(&t, &sv);
  sv.response_id = PX_STR("chatcmpl-1");
  px_trace_emit(&t, &sv);
  doc = take_doc(3), js = spans_of(doc);
  CHECK_STR(attr_of(js, 1, "gen_ai.response.id"), "chatcmpl-2");
  CHECK_STR(attr_of(js, 2, "gen_ai.response.id"), "chatcmpl-1");
  CHECK(int_of(js, 2, "gen_ai.usage.output_tokens") == 14);
  json_decref(doc);
  px_buf_free(&body);
  px_trace_reset();
}

/* A span's head (ids, name, kind, the configuration's attributes, the
 * models, max_tokens, the finish reason, the status, the attempt) is kept
 * per kind and copied into the next span whose values are the same, its ids
 * written in place: each span still carries its own values when any one of
 * them differs from the last span's (the strings' bytes changed at the same
 * addresses too), and its own ids always. */
static void test_kept_head(void) {
  px_trace_conf_t c = conf(1);
  px_config_t a, b;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  a.refs = b.refs = 1;
  char model[] = "gpt-4o-mini", rmodel[] = "gpt-4o-mini-2024", fin[] = "stop",
       other[] = "gpt-4o-mini";
  char key1[] = "k1", key2[] = "k2";
  enum {
    SAME,
    MODEL_BYTE,
    MODEL_LEN,
    NO_MODEL,
    EMPTY_MODEL,
    RMODEL_BYTE,
    NO_RMODEL,
    FIN_BYTE,
    NO_FIN,
    STATUS,
    MAX_TOKENS,
    ATTEMPT,
    NO_PARENT,
    ERROR,
    REQUEST_MODEL,
    OTHER_OP,
    OTHER_K1,
    OTHER_K2,
    OTHER_K3,
    OTHER_CFG,
    NO_CFG,
    NCASES
  };
  for (int kind = PX_SPAN_SERVER; kind <= PX_SPAN_CLIENT; kind++) {
    for (int k = 0; k < NCASES; k++) {
      strcpy(model, "gpt-4o-mini");
      strcpy(rmodel, "gpt-4o-mini-2024");
      strcpy(fin, "stop");
      strcpy(key1, "k1");
      px_trace_ctx_t t[3];
      char ids[3][16];
      px_span_t sp[3];
      for (int i = 0; i < 3; i++) {
        px_trace_begin(&t[i], &c, px_str(""), px_str(""));
        px_trace_attempt(&t[i], NULL);
        memcpy(ids[i], kind == PX_SPAN_SERVER ? t[i].span_hex : t[i].att_hex, 16);
        sp[i] = (px_span_t){.kind = kind,
                            .id = ids[i],
                            .parent = kind == PX_SPAN_CLIENT ? t[i].span_hex : NULL,
                            .start = 1000 + (uint64_t)i,
                            .end = 2000 + (uint64_t)i,
                            .operation = "chat",
                            .name_model = model,
                            .request_model = model,
                            .provider = "openai",
                            .server_url = "http://up.example/v1",
                            .upstream = "up",
                            .key = key1,
                            .team = "t1",
                            .route = "*",
                            .response_model = {rmodel, strlen(rmodel)},
                            .response_id = {"chatcmpl-1", 10},
                            .finish_reason = {fin, strlen(fin)},
                            .max_tokens = 16,
                            .input_tokens = 25 + i,
                            .output_tokens = 14 + i,
                            .status = 200,
                            .cost_nano = -1,
                            .attempt = kind == PX_SPAN_CLIENT ? 1 : 0,
                            .cfg = &a};
      }
      /* span 1 differs from span 0 by case k; span 2 is span 0 again */
      px_trace_emit(&t[0], &sp[0]);
      px_span_t *v = &sp[1];
      const char *want_model = "gpt-4o-mini", *want_rmodel = "gpt-4o-mini-2024",
                 *want_fin = "stop";
      long long want_status = 200, want_max = 16, want_attempt = kind == PX_SPAN_CLIENT;
      switch (k) {
        case MODEL_BYTE: /* the same address, another byte */
          strcpy(model, "gpt-4o-mimi");
          want_model = "gpt-4o-mimi";
          break;
        case MODEL_LEN:
          strcpy(model, "gpt-4o-min");
          want_model = "gpt-4o-min";
          break;
        case NO_MODEL:
          v->name_model = v->request_model = NULL;
          want_model = NULL;
          break;
        case EMPTY_MODEL:
          v->name_model = v->request_model = "";
          want_model = "";
          break;
        case RMODEL_BYTE:
          rmodel[0] = 'G';
          want_rmodel = "Gpt-4o-mini-2024";
          break;
        case NO_RMODEL:
          v->response_model = (px_str_t){NULL, 0};
          want_rmodel = NULL;
          break;
        case FIN_BYTE:
          strcpy(fin, "stoq");
          want_fin = "stoq";
          break;
        case NO_FIN:
          v->finish_reason = (px_str_t){NULL, 0};
          want_fin = NULL;
          break;
        case STATUS:
          v->status = 201;
          want_status = 201;
          break;
        case MAX_TOKENS:
          v->max_tokens = 17;
          want_max = 17;
          break;
        case ATTEMPT:
          v->attempt = 2;
          want_attempt = 2;
          break;
        case NO_PARENT:
          v->parent = NULL;
          break;
        case ERROR:
          v->error_type = "server_error";
          break;
        case REQUEST_MODEL: /* the name's model and another request model */
          v->request_model = other;
          strcpy(other, "gpt-other");
          break;
        case OTHER_OP:
          v->operation = "generate_content";
          break;
        case OTHER_K1: /* the fixed strings: another one each */
          v->key = v->provider = key2;
          break;
        case OTHER_K2:
          v->team = "t2";
          v->server_url = "http://two.example/v1";
          break;
        case OTHER_K3:
          v->route = "r2";
          v->upstream = "up2";
          break;
        case OTHER_CFG:
          v->cfg = &b;
          break;
        case NO_CFG: /* a runtime key's name: its bytes may change in place */
          v->cfg = NULL;
          strcpy(key1, "k9");
          break;
      }
      px_trace_emit(&t[1], v);
      if (k == MODEL_BYTE || k == MODEL_LEN) strcpy(model, "gpt-4o-mini");
      if (k == RMODEL_BYTE) rmodel[0] = 'g';
      if (k == FIN_BYTE) strcpy(fin, "stop");
      if (k == NO_CFG) strcpy(key1, "k1");
      px_trace_emit(&t[2], &sp[2]);
      json_t *doc = take_doc(3), *js = spans_of(doc);
      for (size_t i = 0; doc && i < 3; i++) {
        json_t *o = json_array_get(js, i);
        int var = i == 1;
        char id[17], tid[33], name[64];
        memcpy(id, ids[i], 16);
        id[16] = 0;
        px_trace_id_hex(&t[i], tid);
        CHECK_STR(json_string_value(json_object_get(o, "spanId")), id);
        CHECK_STR(json_string_value(json_object_get(o, "traceId")), tid);
        if (kind == PX_SPAN_CLIENT && !(var && k == NO_PARENT)) {
          memcpy(id, t[i].span_hex, 16);
          CHECK_STR(json_string_value(json_object_get(o, "parentSpanId")), id);
        } else {
          CHECK(json_object_get(o, "parentSpanId") == NULL);
        }
        CHECK(json_integer_value(json_object_get(o, "kind")) == kind);
        const char *m = var ? want_model : "gpt-4o-mini";
        const char *op = var && k == OTHER_OP ? "generate_content" : "chat";
        if (m)
          snprintf(name, sizeof(name), "%s %s", op, m);
        else
          snprintf(name, sizeof(name), "%s", op);
        CHECK_STR(attr_of(js, i, "gen_ai.operation.name"), op);
        CHECK_STR(json_string_value(json_object_get(o, "name")), name);
        const char *rq = attr_of(js, i, "gen_ai.request.model");
        if (var && k == REQUEST_MODEL)
          CHECK_STR(rq, "gpt-other");
        else if (m)
          CHECK_STR(rq, m);
        else
          CHECK(rq == NULL);
        const char *rm = attr_of(js, i, "gen_ai.response.model");
        if (var && !want_rmodel)
          CHECK(rm == NULL);
        else
          CHECK_STR(rm, var ? want_rmodel : "gpt-4o-mini-2024");
        const char *f = finish_of(js, i);
        if (var && !want_fin)
          CHECK(f == NULL);
        else
          CHECK_STR(f, var ? want_fin : "stop");
        CHECK(int_of(js, i, "http.response.status_code") == (var ? want_status : 200));
        CHECK(int_of(js, i, "gen_ai.request.max_tokens") == (var ? want_max : 16));
        long long att = var ? want_attempt : kind == PX_SPAN_CLIENT;
        CHECK(int_of(js, i, "proxai.attempt") == (att ? att : -1));
        CHECK_STR(attr_of(js, i, "gen_ai.response.id"), "chatcmpl-1");
        CHECK(int_of(js, i, "gen_ai.usage.input_tokens") == 25 + (long long)i);
        CHECK(int_of(js, i, "gen_ai.usage.output_tokens") == 14 + (long long)i);
        const char *err = attr_of(js, i, "error.type");
        if (var && k == ERROR) {
          CHECK_STR(err, "server_error");
          CHECK(json_integer_value(
                    json_object_get(json_object_get(o, "status"), "code")) == 2);
        } else {
          CHECK(err == NULL && json_object_get(o, "status") == NULL);
        }
        if (kind == PX_SPAN_SERVER) {
          CHECK_STR(attr_of(js, i, "proxai.key"), !var            ? "k1"
                                                  : k == OTHER_K1 ? "k2"
                                                  : k == NO_CFG   ? "k9"
                                                                  : "k1");
          CHECK_STR(attr_of(js, i, "proxai.team"), var && k == OTHER_K2 ? "t2" : "t1");
          CHECK_STR(attr_of(js, i, "proxai.route"), var && k == OTHER_K3 ? "r2" : "*");
        } else {
          CHECK_STR(attr_of(js, i, "gen_ai.provider.name"),
                    var && k == OTHER_K1 ? "k2" : "openai");
          CHECK_STR(attr_of(js, i, "server.address"),
                    var && k == OTHER_K2 ? "two.example" : "up.example");
          CHECK_STR(attr_of(js, i, "proxai.upstream"),
                    var && k == OTHER_K3 ? "up2" : "up");
        }
        const char *t0 = json_string_value(json_object_get(o, "startTimeUnixNano"));
        const char *t1 = json_string_value(json_object_get(o, "endTimeUnixNano"));
        CHECK(t0 && t1 && strtoull(t1, NULL, 10) - strtoull(t0, NULL, 10) == 1000);
      }
      json_decref(doc);
    }
  }
  /* no model, then an empty one (and back): "chat", "chat " */
  const char *names[] = {NULL, "", NULL};
  for (int i = 0; i < 3; i++) {
    px_trace_ctx_t t;
    px_trace_begin(&t, &c, px_str(""), px_str(""));
    px_span_t s = {.kind = PX_SPAN_SERVER,
                   .id = t.span_hex,
                   .start = 1,
                   .end = 2,
                   .operation = "chat",
                   .name_model = names[i],
                   .request_model = names[i],
                   .key = "k",
                   .max_tokens = -1,
                   .input_tokens = -1,
                   .output_tokens = -1,
                   .cost_nano = -1,
                   .cfg = &a};
    px_trace_emit(&t, &s);
  }
  json_t *doc = take_doc(3), *js = spans_of(doc);
  for (size_t i = 0; doc && i < 3; i++)
    CHECK_STR(json_string_value(json_object_get(json_array_get(js, i), "name")),
              names[i] ? "chat " : "chat");
  json_decref(doc);
  /* another configuration: the heads kept under the last one go (its
   * strings' addresses may hold another's now) */
  char up[] = "up";
  for (int i = 0; i < 3; i++) {
    px_trace_ctx_t t;
    px_trace_begin(&t, &c, px_str(""), px_str(""));
    px_trace_attempt(&t, NULL);
    px_span_t s = {.kind = i == 1 ? PX_SPAN_SERVER : PX_SPAN_CLIENT,
                   .id = t.att_hex,
                   .parent = t.span_hex,
                   .start = 1,
                   .end = 2,
                   .operation = "chat",
                   .name_model = "m",
                   .request_model = "m",
                   .upstream = up,
                   .max_tokens = -1,
                   .input_tokens = -1,
                   .output_tokens = -1,
                   .cost_nano = -1,
                   .cfg = i ? &b : &a};
    if (i == 2) strcpy(up, "uq");
    px_trace_emit(&t, &s);
  }
  doc = take_doc(3);
  js = spans_of(doc);
  CHECK_STR(attr_of(js, 0, "proxai.upstream"), "up");
  CHECK_STR(attr_of(js, 2, "proxai.upstream"), "uq");
  json_decref(doc);
  px_trace_reset();
  CHECK(a.refs == 1 && b.refs == 1);
}

int main(void) {
  test_traceparent();
  test_sampling();
  test_batch();
  test_names();
  test_fixed_attrs();
  test_times();
  test_answer_run();
  test_answer_run_taken();
  test_kept_head();
  return check_report("test_trace");
}
