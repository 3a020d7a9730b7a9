/* metrics.c - Prometheus text exposition (SPEC section 8), host totals.
 *
 * Every series lives in the host's shared mapping (shm.h), so whichever
 * worker answers a scrape reports the totals of all of them. Counters and
 * histogram buckets are atomic adds; creating a series takes the one
 * process-shared lock: the slot is written, then published in the index
 * (release), so lookups never lock. Series keep their creation order. The
 * table is bounded (PX_MAX_SERIES); label values longer than PX_MAX_LABEL-1
 * bytes are cut (they come from configuration names, statuses and error
 * types). Gauges are per worker slot and summed when rendered, so the master
 * can zero the slot of a worker that died.
 */
#include "proxai/metrics.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/config.h"
#include "proxai/shm.h"

#define PX_MAX_SERIES 4096
#define PX_MAX_LABEL 96
#define INDEX_SIZE (2 * PX_MAX_SERIES)
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
  uint64_t sum_us; /* sum in microseconds: integer, so atomic adds */
} hist_t;

enum {
  F_REQUESTS,
  F_HIST,
  F_ATTEMPTS,
  F_TOKENS,
  F_STATE,
  F_EJECTED,
  F_EJECTIONS,
  F_LOSSY,
  F_TRACE_SENT,
  F_TRACE_DROP,
  F_ROUTE,
  F_SPEND,
  F_OVER_BUDGET,
  F_COUNT
};

typedef struct series {
  uint32_t fam;
  uint64_t hash;
  char labels[NLABELS][PX_MAX_LABEL];
  uint64_t value; /* counters */
  hist_t hist[2]; /* F_HIST: duration, time to first token */
} series_t;

typedef struct mshm {
  pthread_mutex_t mu;
  uint32_t nseries;
  uint32_t index[INDEX_SIZE]; /* 0 = empty, else position + 1 */
  series_t s[PX_MAX_SERIES];
  uint64_t lost;      /* requests of workers that died (proxai_requests_lost_total) */
  uint64_t instances; /* proxai_state_instances; 0: no registry */
  int64_t gauge[]; /* nworkers x PX_G_COUNT */
} mshm_t;

static size_t region_size(unsigned nworkers) {
  return sizeof(mshm_t) + (size_t)nworkers * PX_G_COUNT * sizeof(int64_t);
}

static void region_setup(void *p, unsigned nworkers) {
  (void)nworkers;
  px_shm_mutex_init(&((mshm_t *)p)->mu);
}

px_shm_region_t px_metrics_region = {.name = "metrics", .size = region_size, .setup = region_setup};

static mshm_t *shm(void) {
  return px_shm_get(&px_metrics_region);
}

/* Label values as looked up: each cut at PX_MAX_LABEL - 1 bytes, without
 * copying (this runs several times per request). */
typedef struct labels {
  const char *v[NLABELS];
  size_t n[NLABELS];
} labels_t;

static uint64_t hash_labels(uint32_t fam, const labels_t *l) {
  uint64_t h = 1469598103934665603ULL ^ fam; /* FNV-1a */
  for (int i = 0; i < NLABELS; i++) {
    for (size_t k = 0; k < l->n[i]; k++) {
      h ^= (unsigned char)l->v[i][k];
      h *= 1099511628211ULL;
    }
    h ^= 0xff; /* separator: ("ab","c") != ("a","bc") */
    h *= 1099511628211ULL;
  }
  return h;
}

static int series_eq(const series_t *s, uint32_t fam, uint64_t h, const labels_t *l) {
  if (s->fam != fam || s->hash != h) return 0;
  for (int i = 0; i < NLABELS; i++)
    if (memcmp(s->labels[i], l->v[i], l->n[i]) != 0 || s->labels[i][l->n[i]] != 0)
      return 0;
  return 1;
}

/* Probe for the series; *slot gets the index slot where the probe stopped. */
static series_t *probe(mshm_t *m, uint32_t fam, uint64_t h, const labels_t *l,
                       size_t *slot) {
  size_t j = h & (INDEX_SIZE - 1);
  for (size_t n = 0; n < INDEX_SIZE; n++, j = (j + 1) & (INDEX_SIZE - 1)) {
    uint32_t v = __atomic_load_n(&m->index[j], __ATOMIC_ACQUIRE);
    if (v == 0) {
      *slot = j;
      return NULL;
    }
    if (series_eq(&m->s[v - 1], fam, h, l)) return &m->s[v - 1];
  }
  *slot = INDEX_SIZE;
  return NULL;
}

/* A worker-local memo in front of the shared index: label values on the
 * request path are configuration names, protocol names and static texts, so
 * the same pointers come back request after request. A hit is keyed by the
 * pointers and confirmed by the label texts (a reloaded configuration may
 * reuse an address), which costs a few byte compares instead of hashing and
 * probing. Series are never removed (only px_metrics_reset clears the
 * table, and the memo with it), so a confirmed entry stays valid. Two ways
 * per slot pair (slot and slot ^ 1): two series a request touches whose
 * pointers hash alike (the addresses of static texts move with any build)
 * both stay memoized. */
#define MEMO_SIZE 256
typedef struct memo {
  const char *p[NLABELS];
  series_t *s;
  uint32_t fam;
} memo_t;
static memo_t memo[MEMO_SIZE];

static size_t memo_slot(uint32_t fam, const char *const *in) {
  uint64_t h = fam;
  for (int i = 0; i < NLABELS; i++) h = (h ^ (uintptr_t)in[i]) * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 56) & (MEMO_SIZE - 1); /* the well-mixed top bits */
}

static int memo_hit(const memo_t *e, uint32_t fam, const char *const *in) {
  if (e->s == NULL || e->fam != fam || e->s->fam != fam) return 0;
  for (int i = 0; i < NLABELS; i++)
    if (e->p[i] != in[i] || strncmp(e->s->labels[i], in[i] ? in[i] : "", PX_MAX_LABEL - 1))
      return 0;
  return 1;
}

static series_t *lookup(uint32_t fam, const char *const *in);

/* The series with these labels, created at zero if new; NULL when the
 * table is full (or there is no mapping). */
static series_t *get_series(uint32_t fam, const char *const *in) {
  size_t k = memo_slot(fam, in);
  memo_t *e = &memo[k], *o = &memo[k ^ 1];
  if (memo_hit(e, fam, in)) return e->s;
  if (memo_hit(o, fam, in)) return o->s;
  series_t *s = lookup(fam, in);
  if (s && e->s != NULL && o->s == NULL) e = o; /* the pair's free way */
  if (s) {
    for (int i = 0; i < NLABELS; i++) e->p[i] = in[i];
    e->fam = fam;
    e->s = s;
  }
  return s;
}

static series_t *lookup(uint32_t fam, const char *const *in) {
  mshm_t *m = shm();
  if (!m) return NULL;
  labels_t l;
  for (int i = 0; i < NLABELS; i++) {
    l.v[i] = in[i] ? in[i] : "";
    l.n[i] = strnlen(l.v[i], PX_MAX_LABEL - 1);
  }
  uint64_t h = hash_labels(fam, &l);
  size_t slot;
  series_t *s = probe(m, fam, h, &l, &slot);
  if (s) return s;
  px_shm_lock(&m->mu);
  s = probe(m, fam, h, &l, &slot); /* another worker may have added it */
  if (!s && slot < INDEX_SIZE && m->nseries < PX_MAX_SERIES) {
    uint32_t pos = m->nseries;
    s = &m->s[pos];
    memset(s, 0, sizeof(*s));
    s->fam = fam;
    s->hash = h;
    for (int i = 0; i < NLABELS; i++) memcpy(s->labels[i], l.v[i], l.n[i]);
    __atomic_store_n(&m->nseries, pos + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&m->index[slot], pos + 1, __ATOMIC_RELEASE);
  }
  px_shm_unlock(&m->mu);
  return s;
}

static void add(uint64_t *v, uint64_t d) {
  __atomic_add_fetch(v, d, __ATOMIC_RELAXED);
}

static void hist_observe(hist_t *h, double v) {
  size_t i = 0;
  while (i < NBUCKETS && v > bucket_le[i]) i++;
  add(&h->counts[i], 1);
  add(&h->count, 1);
  add(&h->sum_us, (uint64_t)(v * 1e6 + 0.5));
}

/* The status label: one static text per status (a stable pointer for the
 * memo, and no printf per request). */
static const char *status_text(int status) {
  static char txt[1000][4], other[16];
  if (status < 100 || status > 999) { /* not an HTTP status: rare */
    snprintf(other, sizeof(other), "%d", status);
    return other;
  }
  char *t = txt[status];
  if (t[0] == 0) {
    t[2] = (char)('0' + status % 10);
    t[1] = (char)('0' + status / 10 % 10);
    t[0] = (char)('0' + status / 100);
  }
  return t;
}

void px_metrics_request(const char *inbound, const char *upstream, int status,
                        double duration_s, double ttft_s) {
  const char *l[NLABELS] = {inbound ? inbound : "none", upstream ? upstream : "none",
                            status_text(status)};
  series_t *s = get_series(F_REQUESTS, l);
  if (s) add(&s->value, 1);

  const char *hl[NLABELS] = {inbound ? inbound : "none", NULL, NULL};
  series_t *h = get_series(F_HIST, hl);
  if (!h) return;
  if (duration_s >= 0) hist_observe(&h->hist[0], duration_s);
  if (ttft_s >= 0) hist_observe(&h->hist[1], ttft_s);
}

void px_metrics_attempt(const char *upstream, const char *error_type) {
  const char *l[NLABELS] = {upstream ? upstream : "none", error_type ? error_type : "ok",
                            NULL};
  series_t *s = get_series(F_ATTEMPTS, l);
  if (s) add(&s->value, 1);
}

void px_metrics_tokens(const char *key, const char *upstream, int64_t in, int64_t out) {
  const char *l[NLABELS] = {key ? key : "none", upstream ? upstream : "none", "in"};
  if (in > 0) {
    series_t *s = get_series(F_TOKENS, l);
    if (s) add(&s->value, (uint64_t)in);
  }
  if (out > 0) {
    l[2] = "out";
    series_t *s = get_series(F_TOKENS, l);
    if (s) add(&s->value, (uint64_t)out);
  }
}

void px_metrics_spend(const char *key, const char *team, const char *upstream_model,
                      int64_t nano) {
  if (nano <= 0) return;
  const char *l[NLABELS] = {key ? key : "none", team ? team : "",
                            upstream_model ? upstream_model : "none"};
  series_t *s = get_series(F_SPEND, l);
  if (s) add(&s->value, (uint64_t)nano);
}

void px_metrics_lossy(const char *inbound, const char *upstream, const char *field) {
  const char *l[NLABELS] = {inbound ? inbound : "none", upstream ? upstream : "none",
                            field};
  series_t *s = get_series(F_LOSSY, l);
  if (s) add(&s->value, 1);
}

void px_metrics_over_budget(const char *inbound, const char *upstream) {
  const char *l[NLABELS] = {inbound ? inbound : "none", upstream ? upstream : "none",
                            NULL};
  series_t *s = get_series(F_OVER_BUDGET, l);
  if (s) add(&s->value, 1);
}

void px_metrics_state(const char *backend, const char *event) {
  const char *l[NLABELS] = {backend, event, NULL};
  series_t *s = get_series(F_STATE, l);
  if (s) add(&s->value, 1);
}

void px_metrics_route(const char *route, const char *upstream, int status) {
  const char *l[NLABELS] = {route ? route : "none", upstream ? upstream : "none",
                            status_text(status)};
  series_t *s = get_series(F_ROUTE, l);
  if (s) add(&s->value, 1);
}

void px_metrics_trace_spans(const char *reason, uint64_t n) {
  const char *l[NLABELS] = {reason, NULL, NULL};
  series_t *s = get_series(reason ? F_TRACE_DROP : F_TRACE_SENT, l);
  if (s) add(&s->value, n);
}

void px_metrics_gauge_add(px_gauge_t g, int64_t delta) {
  mshm_t *m = shm();
  if (!m || (unsigned)g >= PX_G_COUNT) return;
  __atomic_add_fetch(&m->gauge[px_shm_worker() * PX_G_COUNT + g], delta,
                     __ATOMIC_RELAXED);
}

void px_metrics_worker_reset(unsigned worker) {
  mshm_t *m = shm();
  if (!m || worker >= px_shm_nworkers()) return;
  for (int g = 0; g < PX_G_COUNT; g++)
    __atomic_store_n(&m->gauge[worker * PX_G_COUNT + g], 0, __ATOMIC_RELAXED);
}

void px_metrics_lost(uint64_t n) {
  mshm_t *m = shm();
  if (m) add(&m->lost, n);
}

void px_metrics_state_instances(unsigned n) {
  mshm_t *m = shm();
  if (m) __atomic_store_n(&m->instances, n, __ATOMIC_RELAXED);
}

void px_metrics_ejection(const char *upstream, int ejected) {
  const char *l[NLABELS] = {upstream ? upstream : "none", NULL, NULL};
  series_t *g = get_series(F_EJECTED, l);
  if (g) add(&g->value, ejected ? 1 : (uint64_t)-1); /* read as int64_t */
  if (ejected) {
    series_t *s = get_series(F_EJECTIONS, l);
    if (s) add(&s->value, 1);
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

static uint64_t load(const uint64_t *v) {
  return __atomic_load_n(v, __ATOMIC_RELAXED);
}

static uint32_t nseries(const mshm_t *m) {
  return __atomic_load_n(&m->nseries, __ATOMIC_ACQUIRE);
}


/* The series of one family; a signed family holds a gauge kept as counts up
 * and down (two's complement in the counter). */
static int render_family(px_buf_t *b, int fam, const char *name, const char *type,
                         const char *help, const char *const *lnames, int is_signed) {
  const mshm_t *m = shm();
  int rc = put_head(b, name, type, help);
  uint32_t n = m ? nseries(m) : 0;
  for (uint32_t i = 0; rc == 0 && i < n; i++) {
    const series_t *s = &m->s[i];
    if (s->fam != (uint32_t)fam) continue;
    rc = px_buf_puts(b, name);
    if (rc == 0 && lnames[0]) rc = px_buf_puts(b, "{");
    for (int k = 0; rc == 0 && k < NLABELS && lnames[k]; k++)
      rc = put_label(b, lnames[k], s->labels[k], k == 0);
    if (rc == 0 && lnames[0]) rc = px_buf_puts(b, "}");
    if (rc == 0)
      rc = is_signed ? px_buf_printf(b, " %" PRId64 "\n", (int64_t)load(&s->value))
                     : px_buf_printf(b, " %" PRIu64 "\n", load(&s->value));
  }
  return rc;
}

/* spend: nano-USD kept, USD shown (exact decimals, no float) */
static int render_spend(px_buf_t *b) {
  static const char *const ln[] = {"key", "team", "upstream_model"};
  const mshm_t *m = shm();
  int rc = put_head(b, "proxai_spend_usd_total", "counter",
                    "Money spent (USD, from upstream usage and [price]) by client key, "
                    "team and the model sent upstream.");
  uint32_t n = m ? nseries(m) : 0;
  for (uint32_t i = 0; rc == 0 && i < n; i++) {
    const series_t *s = &m->s[i];
    if (s->fam != F_SPEND) continue;
    char usd[32];
    rc = px_buf_puts(b, "proxai_spend_usd_total{");
    for (int k = 0; rc == 0 && k < NLABELS; k++)
      rc = put_label(b, ln[k], s->labels[k], k == 0);
    if (rc == 0)
      rc = px_buf_printf(b, "} %s\n",
                         px_usd_str((int64_t)load(&s->value), usd, sizeof(usd)));
  }
  return rc;
}

static int render_counter(px_buf_t *b, int fam, const char *name, const char *help,
                          const char *const *lnames) {
  return render_family(b, fam, name, "counter", help, lnames, 0);
}

static int render_hist(px_buf_t *b, int which, const char *name, const char *help) {
  const mshm_t *m = shm();
  int rc = put_head(b, name, "histogram", help);
  uint32_t n = m ? nseries(m) : 0;
  for (uint32_t i = 0; rc == 0 && i < n; i++) {
    const series_t *s = &m->s[i];
    if (s->fam != F_HIST) continue;
    const hist_t *h = &s->hist[which];
    /* one snapshot of the buckets; _count is their sum, so +Inf == _count
     * even while other workers keep adding */
    uint64_t cum = 0;
    for (size_t k = 0; rc == 0 && k <= NBUCKETS; k++) {
      cum += load(&h->counts[k]);
      rc = px_buf_printf(b, "%s_bucket{", name);
      if (rc == 0) rc = put_label(b, "inbound", s->labels[0], 1);
      if (rc == 0)
        rc = px_buf_printf(b, ",le=\"%s\"} %" PRIu64 "\n",
                           k < NBUCKETS ? bucket_txt[k] : "+Inf", cum);
    }
    if (rc == 0) rc = px_buf_printf(b, "%s_sum{", name);
    if (rc == 0) rc = put_label(b, "inbound", s->labels[0], 1);
    if (rc == 0) rc = put_double(b, (double)load(&h->sum_us) / 1e6);
    if (rc == 0) rc = px_buf_printf(b, "%s_count{", name);
    if (rc == 0) rc = put_label(b, "inbound", s->labels[0], 1);
    if (rc == 0) rc = px_buf_printf(b, "} %" PRIu64 "\n", cum);
  }
  return rc;
}

int px_metrics_render(px_buf_t *out) {
  static const char *const req_l[] = {"inbound", "upstream", "status"};
  static const char *const att_l[] = {"upstream", "result", NULL};
  static const char *const tok_l[] = {"key", "upstream", "direction"};
  static const char *const lossy_l[] = {"inbound", "upstream", "field"};
  static const char *const state_l[] = {"backend", "event", NULL};
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
  static const char *const route_l[] = {"route", "upstream", "status"};
  if (rc == 0)
    rc = render_counter(
        out, F_ROUTE, "proxai_route_requests_total",
        "Finished model requests by route (its pattern), upstream and status.", route_l);
  if (rc == 0)
    rc = put_head(
        out, "proxai_requests_lost_total", "counter",
        "Requests in flight in a worker process that died (no access-log line).");
  if (rc == 0)
    rc = px_buf_printf(out, "proxai_requests_lost_total %" PRIu64 "\n",
                       shm() ? load(&shm()->lost) : 0);
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
    rc = render_counter(
        out, F_STATE, "proxai_state_events_total",
        "Shared state backend events: error (an incident began, or a "
        "script failed), back (it ended), and the requests on_error decided "
        "(allowed, denied, local; refused: needed the backend).",
        state_l);
  if (rc == 0)
    rc = render_counter(out, F_EJECTIONS, "proxai_upstream_ejections_total",
                        "Times an upstream was taken out of rotation (passive health).",
                        up_l);
  if (rc == 0)
    rc = render_family(out, F_EJECTED, "proxai_upstream_ejected", "gauge",
                       "Upstreams out of rotation now (summed over the workers that ejected "
                       "them).",
                       up_l, 1);
  if (rc == 0)
    rc = render_counter(out, F_LOSSY, "proxai_lossy_fields_total",
                        "Translated requests that dropped a field, by field.", lossy_l);
  static const char *const budget_l[] = {"inbound", "upstream", NULL};
  if (rc == 0)
    rc = render_counter(out, F_OVER_BUDGET, "proxai_translate_over_budget_total",
                        "Requests refused (413) because their translation needed more "
                        "memory than [server] translate_memory allows.",
                        budget_l);
  static const char *const none_l[] = {NULL, NULL, NULL};
  static const char *const reason_l[] = {"reason", NULL, NULL};
  if (rc == 0)
    rc = render_counter(out, F_TRACE_SENT, "proxai_trace_spans_exported_total",
                        "Trace spans the collector accepted.", none_l);
  if (rc == 0)
    rc =
        render_counter(out, F_TRACE_DROP, "proxai_trace_spans_dropped_total",
                       "Trace spans lost: queue_full (the batch was full), export_failed "
                       "(collector unreachable or refused), export_timeout (no answer in "
                       "10 s).",
                       reason_l);
  if (rc == 0) rc = render_spend(out);
  const mshm_t *m = shm();
  uint64_t inst = m ? load(&m->instances) : 0;
  if (rc == 0 && inst > 0)
    rc = put_head(out, "proxai_state_instances", "gauge",
                  "Gateway instances the shared state backend counted in the last 30 s "
                  "(on_error = local divides limits by it).");
  if (rc == 0 && inst > 0)
    rc = px_buf_printf(out, "proxai_state_instances %" PRIu64 "\n", inst);
  for (int g = 0; rc == 0 && g < PX_G_COUNT; g++) {
    int64_t v = 0;
    for (unsigned w = 0; m && w < px_shm_nworkers(); w++)
      v += __atomic_load_n(&m->gauge[w * PX_G_COUNT + g], __ATOMIC_RELAXED);
    rc = put_head(out, gauges[g].name, "gauge", gauges[g].help);
    if (rc == 0) rc = px_buf_printf(out, "%s %" PRId64 "\n", gauges[g].name, v);
  }
  return rc;
}

void px_metrics_reset(void) {
  mshm_t *m = shm();
  if (!m) return;
  memset(memo, 0, sizeof(memo));
  px_shm_lock(&m->mu);
  memset(m->index, 0, sizeof(m->index));
  memset(m->s, 0, sizeof(series_t) * m->nseries);
  m->nseries = 0;
  m->lost = m->instances = 0;
  memset(m->gauge, 0, (size_t)px_shm_nworkers() * PX_G_COUNT * sizeof(int64_t));
  px_shm_unlock(&m->mu);
}
