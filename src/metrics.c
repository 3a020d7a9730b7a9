/* metrics.c - Prometheus text exposition (SPEC section 8).
 *
 * Each family keeps its series in insertion order in an array, found through
 * a small open-addressing index keyed by a hash of the label values. Label
 * values come from configuration names, statuses and error types, so the
 * sets are small; a family still stops growing at PX_MAX_SERIES so that a
 * bug elsewhere cannot grow memory without bound.
 */
#include "proxai/metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PX_MAX_SERIES 4096
#define NLABELS 3

/* Bucket bounds in seconds, for durations and times to first token. LLM
 * requests run from milliseconds (cached, errors) to a minute (long
 * completions). Written out as text so the le labels stay exact. */
static const double bucket_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                   1,     2.5,  5,     10,   30,  60};
static const char *const bucket_txt[] = {"0.005", "0.01", "0.025", "0.05", "0.1",
                                         "0.25",  "0.5",  "1",     "2.5",  "5",
                                         "10",    "30",   "60"};
#define NBUCKETS (sizeof(bucket_le) / sizeof(bucket_le[0]))

typedef struct hist {
  uint64_t counts[NBUCKETS + 1]; /* per bucket, not cumulative; last = +Inf */
  uint64_t count;
  double sum;
} hist_t;

typedef struct series {
  char *labels[NLABELS];
  uint64_t hash;
  uint64_t value;  /* counters */
  hist_t *hist[2]; /* histograms (request family only) */
} series_t;

typedef struct family {
  series_t *v;
  size_t n, size;
  uint32_t *index; /* 0 = empty, else position + 1 */
  size_t index_size;
} family_t;

enum { F_REQUESTS, F_HIST, F_ATTEMPTS, F_TOKENS, F_EJECTED, F_EJECTIONS, F_LOSSY, F_COUNT };

static family_t g_fam[F_COUNT];
static int64_t g_gauge[PX_G_COUNT];

static uint64_t hash_labels(const char *const *l) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (int i = 0; i < NLABELS; i++) {
    for (const char *p = l[i] ? l[i] : ""; *p; p++) {
      h ^= (unsigned char)*p;
      h *= 1099511628211ULL;
    }
    h ^= 0xff; /* separator: ("ab","c") != ("a","bc") */
    h *= 1099511628211ULL;
  }
  return h;
}

static int labels_eq(const series_t *s, const char *const *l) {
  for (int i = 0; i < NLABELS; i++) {
    const char *a = s->labels[i] ? s->labels[i] : "";
    const char *b = l[i] ? l[i] : "";
    if (strcmp(a, b) != 0) return 0;
  }
  return 1;
}

static int index_grow(family_t *f) {
  size_t ns = f->index_size ? f->index_size * 2 : 16;
  uint32_t *idx = calloc(ns, sizeof(*idx));
  if (!idx) return PX_ENOMEM;
  for (size_t i = 0; i < f->n; i++) {
    size_t j = f->v[i].hash & (ns - 1);
    while (idx[j]) j = (j + 1) & (ns - 1);
    idx[j] = (uint32_t)(i + 1);
  }
  free(f->index);
  f->index = idx;
  f->index_size = ns;
  return 0;
}

/* The series with these labels, created at zero if new; NULL when out of
 * memory or the family is full. */
static series_t *get_series(family_t *f, const char *const *l) {
  uint64_t h = hash_labels(l);
  size_t j = 0;
  if (f->index_size) {
    j = h & (f->index_size - 1);
    while (f->index[j]) {
      series_t *s = &f->v[f->index[j] - 1];
      if (s->hash == h && labels_eq(s, l)) return s;
      j = (j + 1) & (f->index_size - 1);
    }
  }
  if (f->n >= PX_MAX_SERIES) return NULL;
  if ((f->n + 1) * 2 > f->index_size) {
    if (index_grow(f) < 0) return NULL;
    j = h & (f->index_size - 1);
    while (f->index[j]) j = (j + 1) & (f->index_size - 1);
  }
  if (f->n == f->size) {
    size_t ns = f->size ? f->size * 2 : 8;
    series_t *v = realloc(f->v, ns * sizeof(*v));
    if (!v) return NULL;
    f->v = v;
    f->size = ns;
  }
  series_t *s = &f->v[f->n];
  memset(s, 0, sizeof(*s));
  for (int i = 0; i < NLABELS; i++) {
    if (!l[i]) continue;
    s->labels[i] = strdup(l[i]);
    if (!s->labels[i]) {
      for (int k = 0; k < i; k++) free(s->labels[k]);
      return NULL;
    }
  }
  s->hash = h;
  f->index[j] = (uint32_t)(f->n + 1);
  f->n++;
  return s;
}

static void hist_observe(hist_t *h, double v) {
  size_t i = 0;
  while (i < NBUCKETS && v > bucket_le[i]) i++;
  h->counts[i]++;
  h->count++;
  h->sum += v;
}

void px_metrics_request(const char *inbound, const char *upstream, int status,
                        double duration_s, double ttft_s) {
  char st[16];
  snprintf(st, sizeof(st), "%d", status);
  const char *l[NLABELS] = {inbound ? inbound : "none", upstream ? upstream : "none", st};
  series_t *s = get_series(&g_fam[F_REQUESTS], l);
  if (s) s->value++;

  const char *hl[NLABELS] = {inbound ? inbound : "none", NULL, NULL};
  series_t *h = get_series(&g_fam[F_HIST], hl);
  if (!h) return;
  for (int k = 0; k < 2; k++)
    if (!h->hist[k] && !(h->hist[k] = calloc(1, sizeof(hist_t)))) return;
  if (duration_s >= 0) hist_observe(h->hist[0], duration_s);
  if (ttft_s >= 0) hist_observe(h->hist[1], ttft_s);
}

void px_metrics_attempt(const char *upstream, const char *error_type) {
  const char *l[NLABELS] = {upstream ? upstream : "none", error_type ? error_type : "ok",
                            NULL};
  series_t *s = get_series(&g_fam[F_ATTEMPTS], l);
  if (s) s->value++;
}

void px_metrics_tokens(const char *key, const char *upstream, int64_t in, int64_t out) {
  const char *l[NLABELS] = {key ? key : "none", upstream ? upstream : "none", "in"};
  if (in > 0) {
    series_t *s = get_series(&g_fam[F_TOKENS], l);
    if (s) s->value += (uint64_t)in;
  }
  if (out > 0) {
    l[2] = "out";
    series_t *s = get_series(&g_fam[F_TOKENS], l);
    if (s) s->value += (uint64_t)out;
  }
}

void px_metrics_lossy(const char *inbound, const char *upstream, const char *field) {
  const char *l[NLABELS] = {inbound ? inbound : "none", upstream ? upstream : "none",
                            field};
  series_t *s = get_series(&g_fam[F_LOSSY], l);
  if (s) s->value++;
}

void px_metrics_gauge_add(px_gauge_t g, int64_t delta) {
  if ((unsigned)g < PX_G_COUNT) g_gauge[g] += delta;
}

void px_metrics_ejection(const char *upstream, int ejected) {
  const char *l[NLABELS] = {upstream ? upstream : "none", NULL, NULL};
  series_t *g = get_series(&g_fam[F_EJECTED], l);
  if (g) g->value += ejected ? 1 : (uint64_t)-1; /* read as int64_t */
  if (ejected) {
    series_t *s = get_series(&g_fam[F_EJECTIONS], l);
    if (s) s->value++;
  }
}

/* Label value escaping of the text exposition format: \\, \" and \n. */
static int put_label(px_buf_t *b, const char *name, const char *v, int first) {
  int rc = px_buf_printf(b, "%s%s=\"", first ? "" : ",", name);
  for (const char *p = v; rc == 0 && *p; p++) {
    const char *run = p;
    while (*p && *p != '\\' && *p != '"' && *p != '\n') p++;
    if (p > run) rc = px_buf_append(b, run, (size_t)(p - run));
    if (rc < 0 || !*p) break;
    rc = px_buf_append(b, *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : "\\n", 2);
  }
  if (rc == 0) rc = px_buf_append(b, "\"", 1);
  return rc;
}

/* "} value\n" with the shortest of %.15g / %.17g that reads back exactly. */
static int put_double(px_buf_t *b, double v) {
  char tmp[40];
  snprintf(tmp, sizeof(tmp), "%.15g", v);
  if (strtod(tmp, NULL) != v) snprintf(tmp, sizeof(tmp), "%.17g", v);
  return px_buf_printf(b, "} %s\n", tmp);
}

static int put_head(px_buf_t *b, const char *name, const char *type, const char *help) {
  return px_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int render_counter(px_buf_t *b, int fam, const char *name, const char *help,
                          const char *const *lnames) {
  const family_t *f = &g_fam[fam];
  int rc = put_head(b, name, "counter", help);
  for (size_t i = 0; rc == 0 && i < f->n; i++) {
    const series_t *s = &f->v[i];
    rc = px_buf_printf(b, "%s{", name);
    for (int k = 0; rc == 0 && k < NLABELS && lnames[k]; k++)
      rc = put_label(b, lnames[k], s->labels[k] ? s->labels[k] : "", k == 0);
    if (rc == 0) rc = px_buf_printf(b, "} %" PRIu64 "\n", s->value);
  }
  return rc;
}

static int render_hist(px_buf_t *b, int which, const char *name, const char *help) {
  const family_t *f = &g_fam[F_HIST];
  int rc = put_head(b, name, "histogram", help);
  for (size_t i = 0; rc == 0 && i < f->n; i++) {
    const series_t *s = &f->v[i];
    const hist_t *h = s->hist[which];
    if (!h) continue;
    uint64_t cum = 0;
    for (size_t k = 0; rc == 0 && k <= NBUCKETS; k++) {
      cum += h->counts[k];
      rc = px_buf_printf(b, "%s_bucket{", name);
      if (rc == 0) rc = put_label(b, "inbound", s->labels[0], 1);
      if (rc == 0)
        rc = px_buf_printf(b, ",le=\"%s\"} %" PRIu64 "\n",
                           k < NBUCKETS ? bucket_txt[k] : "+Inf", cum);
    }
    if (rc == 0) rc = px_buf_printf(b, "%s_sum{", name);
    if (rc == 0) rc = put_label(b, "inbound", s->labels[0], 1);
    if (rc == 0) rc = put_double(b, h->sum);
    if (rc == 0) rc = px_buf_printf(b, "%s_count{", name);
    if (rc == 0) rc = put_label(b, "inbound", s->labels[0], 1);
    if (rc == 0) rc = px_buf_printf(b, "} %" PRIu64 "\n", h->count);
  }
  return rc;
}

int px_metrics_render(px_buf_t *out) {
  static const char *const req_l[] = {"inbound", "upstream", "status"};
  static const char *const att_l[] = {"upstream", "result", NULL};
  static const char *const tok_l[] = {"key", "upstream", "direction"};
  static const char *const lossy_l[] = {"inbound", "upstream", "field"};
  static const struct {
    const char *name, *help;
  } gauges[PX_G_COUNT] = {
      {"proxai_open_connections", "Open client connections."},
      {"proxai_active_streams", "Streaming responses in flight."},
      {"proxai_paused_streams", "Upstream transfers paused by client backpressure."},
  };
  int rc = render_counter(out, F_REQUESTS, "proxai_requests_total",
                          "Finished requests by inbound protocol, upstream and status.",
                          req_l);
  if (rc == 0)
    rc = render_hist(out, 0, "proxai_request_duration_seconds",
                     "Request duration from first byte received to last byte sent.");
  if (rc == 0)
    rc = render_hist(out, 1, "proxai_time_to_first_token_seconds",
                     "Time from request to the first streamed token.");
  if (rc == 0)
    rc = render_counter(out, F_ATTEMPTS, "proxai_upstream_attempts_total",
                        "Upstream attempts by result (ok or the error type).", att_l);
  if (rc == 0)
    rc = render_counter(out, F_TOKENS, "proxai_tokens_total",
                        "Tokens by client key, upstream and direction.", tok_l);
  static const char *const up_l[] = {"upstream", NULL, NULL};
  if (rc == 0)
    rc = render_counter(out, F_EJECTIONS, "proxai_upstream_ejections_total",
                        "Times an upstream was taken out of rotation (passive health).",
                        up_l);
  if (rc == 0)
    rc = put_head(out, "proxai_upstream_ejected", "gauge",
                  "Upstreams out of rotation now (per worker that ejected them).");
  for (size_t i = 0; rc == 0 && i < g_fam[F_EJECTED].n; i++) {
    const series_t *s = &g_fam[F_EJECTED].v[i];
    rc = px_buf_printf(out, "proxai_upstream_ejected{");
    if (rc == 0) rc = put_label(out, "upstream", s->labels[0], 1);
    if (rc == 0) rc = px_buf_printf(out, "} %" PRId64 "\n", (int64_t)s->value);
  }
  if (rc == 0)
    rc = render_counter(out, F_LOSSY, "proxai_lossy_fields_total",
                        "Translated requests that dropped a field, by field.", lossy_l);
  for (int g = 0; rc == 0 && g < PX_G_COUNT; g++) {
    rc = put_head(out, gauges[g].name, "gauge", gauges[g].help);
    if (rc == 0) rc = px_buf_printf(out, "%s %" PRId64 "\n", gauges[g].name, g_gauge[g]);
  }
  return rc;
}

void px_metrics_reset(void) {
  for (int i = 0; i < F_COUNT; i++) {
    family_t *f = &g_fam[i];
    for (size_t k = 0; k < f->n; k++) {
      for (int j = 0; j < NLABELS; j++) free(f->v[k].labels[j]);
      free(f->v[k].hist[0]);
      free(f->v[k].hist[1]);
    }
    free(f->v);
    free(f->index);
    memset(f, 0, sizeof(*f));
  }
  memset(g_gauge, 0, sizeof(g_gauge));
}
