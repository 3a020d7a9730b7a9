/* balance.c - deployment choice and passive health (SPEC sections 3, 7).
 *
 * Two small open-addressing tables, one of upstreams and one of routes,
 * keyed by name so that a reload keeps the state of what did not change.
 * Both are bounded (PX_BAL_MAX entries each): beyond that a name gets no
 * state (NULL), which only costs it balancing and ejection, never a request.
 *
 * least_busy is the power of two choices: two distinct candidates drawn at
 * random, the one with the lower cost wins, cost = (in flight + 1) x
 * (latency EWMA + 1). A candidate without a sample costs as if its latency
 * were 0, so new and returning deployments get probed. The EWMA halves its
 * weight every PX_BAL_DECAY_MS without samples, so a deployment that was
 * slow once is tried again later instead of being starved for good.
 */
#include "proxai/balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/log.h"
#include "proxai/metrics.h"

#define PX_BAL_MAX 4096         /* entries per table */
#define PX_BAL_ALPHA 0.3        /* weight of a new latency sample */
#define PX_BAL_DECAY_MS 10000.0 /* EWMA half-life without samples */
#define PX_BAL_FAIL_MS 1000     /* latency sample of a failure, at least */

struct px_bal_up {
  char *name;
  unsigned inflight;
  unsigned fails;      /* consecutive failures */
  unsigned ejections;  /* ejections since the last success */
  double ewma_ms;      /* < 0: no sample yet */
  uint64_t sampled_at; /* time of the last sample */
  uint64_t until;      /* ejected until; 0 = in rotation */
  uint64_t ejected_at;
};

typedef struct bal_route {
  char *pattern;
  uint64_t rr;  /* next round-robin position */
  int64_t *cur; /* smooth weighted round robin, per deployment */
  size_t ncur;
} bal_route_t;

typedef struct table {
  void **slot; /* px_bal_up_t * or bal_route_t * */
  size_t size, n;
} table_t;

static table_t g_ups, g_routes;
static uint64_t g_rand = 0x9e3779b97f4a7c15ull;

/* ---------------------------------------------------------------------- */
/* tables                                                                   */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

/* The slot of name in t (found or empty); name_of reads an entry's key. */
static void **table_slot(table_t *t, const char *name, const char *(*name_of)(void *)) {
  size_t mask = t->size - 1;
  for (size_t j = hash_str(name) & mask;; j = (j + 1) & mask)
    if (t->slot[j] == NULL || strcmp(name_of(t->slot[j]), name) == 0) return &t->slot[j];
}

static int table_grow(table_t *t, const char *(*name_of)(void *)) {
  table_t nt = {calloc(t->size ? t->size * 2 : 16, sizeof(void *)),
                t->size ? t->size * 2 : 16, t->n};
  if (nt.slot == NULL) return -1;
  for (size_t i = 0; i < t->size; i++)
    if (t->slot[i]) *table_slot(&nt, name_of(t->slot[i]), name_of) = t->slot[i];
  free(t->slot);
  *t = nt;
  return 0;
}

/* The entry of name, or NULL when absent and create is 0 / impossible. */
static void *table_get(table_t *t, const char *name, const char *(*name_of)(void *),
                       void *(*make)(const char *)) {
  if (t->size) {
    void **s = table_slot(t, name, name_of);
    if (*s) return *s;
  }
  if (t->n >= PX_BAL_MAX) return NULL;
  if ((t->n + 1) * 2 > t->size && table_grow(t, name_of) < 0) return NULL;
  void *e = make(name);
  if (e == NULL) return NULL;
  *table_slot(t, name, name_of) = e;
  t->n++;
  return e;
}

static const char *up_name(void *e) {
  return ((px_bal_up_t *)e)->name;
}
static const char *route_name(void *e) {
  return ((bal_route_t *)e)->pattern;
}

static void *up_make(const char *name) {
  px_bal_up_t *b = calloc(1, sizeof(*b));
  if (b == NULL || (b->name = strdup(name)) == NULL) {
    free(b);
    return NULL;
  }
  b->ewma_ms = -1;
  return b;
}

static void *route_make(const char *pattern) {
  bal_route_t *r = calloc(1, sizeof(*r));
  if (r == NULL || (r->pattern = strdup(pattern)) == NULL) {
    free(r);
    return NULL;
  }
  return r;
}

px_bal_up_t *px_balance_up(const px_upstream_conf_t *u) {
  return u ? table_get(&g_ups, u->name, up_name, up_make) : NULL;
}

/* ---------------------------------------------------------------------- */
/* health                                                                   */

/* Ends an ejection that is over. */
static void refresh(px_bal_up_t *b, uint64_t now) {
  if (b->until != 0 && now >= b->until) {
    b->until = 0;
    px_metrics_ejection(b->name, 0);
    px_log_debug("upstream %s is back in rotation", b->name);
  }
}

int px_balance_ejected(px_bal_up_t *b, uint64_t now) {
  if (b == NULL) return 0;
  refresh(b, now);
  return b->until != 0;
}

void px_balance_begin(px_bal_up_t *b) {
  if (b) b->inflight++;
}

void px_balance_end(px_bal_up_t *b) {
  if (b && b->inflight > 0) b->inflight--;
}

unsigned px_balance_inflight(const px_bal_up_t *b) {
  return b ? b->inflight : 0;
}

double px_balance_ewma_ms(const px_bal_up_t *b) {
  return b ? b->ewma_ms : -1;
}

static void sample(px_bal_up_t *b, double ms, uint64_t now) {
  b->ewma_ms = b->ewma_ms < 0 ? ms : b->ewma_ms + PX_BAL_ALPHA * (ms - b->ewma_ms);
  b->sampled_at = now;
}

uint64_t px_balance_result(px_bal_up_t *b, const px_upstream_conf_t *u, int ok,
                           uint64_t latency_ms, uint64_t now) {
  if (b == NULL || u == NULL) return 0;
  refresh(b, now);
  if (ok) {
    sample(b, (double)latency_ms, now);
    b->fails = 0;
    b->ejections = 0;
    if (b->until != 0) { /* proven healthy: back before its time */
      b->until = 0;
      px_metrics_ejection(b->name, 0);
    }
    return 0;
  }
  sample(b, (double)(latency_ms > PX_BAL_FAIL_MS ? latency_ms : PX_BAL_FAIL_MS), now);
  if (b->until != 0) return 0; /* already out: a late answer of an old attempt */
  b->fails++;
  if (u->eject_after == 0 || b->fails < u->eject_after) return 0;
  uint64_t cap = u->eject_for_ms > PX_EJECT_MAX_MS ? u->eject_for_ms : PX_EJECT_MAX_MS;
  uint64_t dur = u->eject_for_ms ? u->eject_for_ms : 1;
  for (unsigned i = 0; i < b->ejections && dur < cap; i++) dur *= 2;
  if (dur > cap) dur = cap;
  b->fails = 0;
  b->ejections++;
  b->ejected_at = now;
  b->until = now + dur;
  px_metrics_ejection(b->name, 1);
  return dur;
}

uint64_t px_balance_sweep(uint64_t now) {
  uint64_t next = 0;
  for (size_t i = 0; i < g_ups.size; i++) {
    px_bal_up_t *b = g_ups.slot[i];
    if (b == NULL) continue;
    refresh(b, now);
    if (b->until != 0 && (next == 0 || b->until - now < next)) next = b->until - now;
  }
  return next;
}

/* ---------------------------------------------------------------------- */
/* choice                                                                   */

static uint64_t next_rand(void) { /* xorshift64* */
  g_rand ^= g_rand >> 12;
  g_rand ^= g_rand << 25;
  g_rand ^= g_rand >> 27;
  return g_rand * 2685821657736338717ull;
}

void px_balance_seed(uint64_t seed) {
  g_rand = seed ? seed : 0x9e3779b97f4a7c15ull;
}

static double cost(const px_bal_up_t *b, uint64_t now) {
  if (b == NULL) return 1;
  double lat = 0;
  if (b->ewma_ms > 0) {
    double idle = now > b->sampled_at ? (double)(now - b->sampled_at) : 0;
    lat = b->ewma_ms * exp2(-idle / PX_BAL_DECAY_MS);
  }
  return ((double)b->inflight + 1) * (lat + 1);
}

static int popcount64(uint64_t v) {
  return __builtin_popcountll(v);
}

/* The k-th (0-based) member of set. */
static size_t nth_member(uint64_t set, unsigned k) {
  for (size_t i = 0; i < 64; i++)
    if ((set >> i) & 1) {
      if (k == 0) return i;
      k--;
    }
  return 0;
}

static size_t choose(const px_config_t *c, const px_route_conf_t *r, px_bal_up_t **ups,
                     uint64_t set, uint64_t now) {
  int n = popcount64(set);
  size_t nd = r->ndeployments;
  /* round robin moves on even when the choice is forced (a retry), so the
   * next request does not go where the retry just went */
  if (n == 1 && r->balance != PX_BALANCE_ROUND_ROBIN) return nth_member(set, 0);
  bal_route_t *st = table_get(&g_routes, r->pattern, route_name, route_make);
  switch (r->balance) {
    case PX_BALANCE_ROUND_ROBIN: {
      uint64_t pos = st ? st->rr : next_rand();
      for (size_t k = 0; k < nd; k++) {
        size_t i = (size_t)((pos + k) % nd);
        if ((set >> i) & 1) {
          if (st) st->rr = i + 1;
          return i;
        }
      }
      return nth_member(set, 0);
    }
    case PX_BALANCE_WEIGHTED: {
      if (st && st->ncur != nd) {
        int64_t *cur = calloc(nd, sizeof(*cur));
        if (cur != NULL) {
          free(st->cur);
          st->cur = cur;
          st->ncur = nd;
        }
      }
      if (st == NULL || st->ncur != nd) { /* no state: random by weight */
        uint64_t total = 0;
        for (size_t i = 0; i < nd; i++)
          if ((set >> i) & 1) total += c->upstreams[r->deployments[i].upstream].weight;
        uint64_t x = next_rand() % (total ? total : 1);
        for (size_t i = 0; i < nd; i++) {
          if (!((set >> i) & 1)) continue;
          uint64_t w = c->upstreams[r->deployments[i].upstream].weight;
          if (x < w) return i;
          x -= w;
        }
        return nth_member(set, 0);
      }
      /* nginx's smooth weighted round robin over the candidates */
      int64_t total = 0;
      size_t best = SIZE_MAX;
      for (size_t i = 0; i < nd; i++) {
        if (!((set >> i) & 1)) continue;
        int64_t w = c->upstreams[r->deployments[i].upstream].weight;
        st->cur[i] += w;
        total += w;
        if (best == SIZE_MAX || st->cur[i] > st->cur[best]) best = i;
      }
      st->cur[best] -= total;
      return best;
    }
    default: {
      size_t a = nth_member(set, (unsigned)(next_rand() % (uint64_t)n));
      size_t b =
          nth_member(set & ~(1ull << a), (unsigned)(next_rand() % (uint64_t)(n - 1)));
      double ca = cost(ups[a], now), cb = cost(ups[b], now);
      if (ca != cb) return ca < cb ? a : b;
      return a; /* a is already a random draw */
    }
  }
}

size_t px_balance_pick(const px_config_t *c, const px_route_conf_t *r, uint64_t tried,
                       uint64_t now) {
  size_t nd = r->ndeployments;
  if (nd <= 1) return 0;
  if (nd > PX_MAX_DEPLOYMENTS) nd = PX_MAX_DEPLOYMENTS;
  px_bal_up_t *ups[PX_MAX_DEPLOYMENTS];
  uint64_t healthy = 0, all = nd == 64 ? ~0ull : (1ull << nd) - 1;
  for (size_t i = 0; i < nd; i++) {
    ups[i] = px_balance_up(&c->upstreams[r->deployments[i].upstream]);
    if (!px_balance_ejected(ups[i], now)) healthy |= 1ull << i;
  }
  uint64_t fresh = healthy & ~tried;
  if (fresh) return choose(c, r, ups, fresh, now);
  if (healthy) return choose(c, r, ups, healthy, now);
  /* all ejected: the least recently ejected, untried ones first */
  uint64_t set = (all & ~tried) ? all & ~tried : all;
  size_t best = nth_member(set, 0);
  for (size_t i = 0; i < nd; i++)
    if (((set >> i) & 1) && ups[i] && ups[best] &&
        ups[i]->ejected_at < ups[best]->ejected_at)
      best = i;
  return best;
}

int px_balance_has_untried(const px_config_t *c, const px_route_conf_t *r, uint64_t tried,
                           uint64_t now) {
  size_t nd = r->ndeployments < PX_MAX_DEPLOYMENTS ? r->ndeployments : PX_MAX_DEPLOYMENTS;
  for (size_t i = 0; i < nd; i++) {
    if ((tried >> i) & 1) continue;
    px_bal_up_t *b = px_balance_up(&c->upstreams[r->deployments[i].upstream]);
    if (!px_balance_ejected(b, now)) return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */

void px_balance_reset(void) {
  for (size_t i = 0; i < g_ups.size; i++) {
    px_bal_up_t *b = g_ups.slot[i];
    if (b == NULL) continue;
    if (b->until != 0) px_metrics_ejection(b->name, 0);
    free(b->name);
    free(b);
  }
  for (size_t i = 0; i < g_routes.size; i++) {
    bal_route_t *r = g_routes.slot[i];
    if (r == NULL) continue;
    free(r->pattern);
    free(r->cur);
    free(r);
  }
  free(g_ups.slot);
  free(g_routes.slot);
  memset(&g_ups, 0, sizeof(g_ups));
  memset(&g_routes, 0, sizeof(g_routes));
}
