/* ratelimit.c - per key token buckets for rpm and tpm.
 *
 * Levels are kept in integer units of 1/60000 token so that refilling
 * `limit` tokens per minute adds exactly `limit` units per millisecond: no
 * floating point drift, exact results under a synthetic clock.
 *
 * rpm: capacity rpm, one token per request, refused when less than one.
 * tpm: capacity tpm, charged after the fact with the tokens a request used;
 * it may go negative (debt), and requests are refused until it is back to
 * zero or above.
 */
#include "proxai/ratelimit.h"

#include <stdlib.h>
#include <string.h>

#define UNITS_PER_TOKEN 60000 /* ms per minute */
/* Debt floor: about 10^13 tokens, far past any real request, keeps the
 * arithmetic away from overflow. */
#define DEBT_FLOOR (-(INT64_MAX / 4))
/* Limits above this (10^12 per minute) are treated as this. */
#define LIMIT_MAX 1000000000000ULL

typedef struct bucket {
  int64_t level;  /* units */
  uint64_t limit; /* per minute; 0 = not initialised */
  uint64_t last;  /* ms of the last refill */
} bucket_t;

typedef struct rl_entry {
  struct rl_entry *next;
  bucket_t rpm, tpm;
  char name[];
} rl_entry_t;

static rl_entry_t **g_tab;
static size_t g_tab_size, g_count;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

static int grow(void) {
  size_t ns = g_tab_size ? g_tab_size * 2 : 32;
  rl_entry_t **t = calloc(ns, sizeof(*t));
  if (!t) return -1;
  for (size_t i = 0; i < g_tab_size; i++) {
    rl_entry_t *e = g_tab[i];
    while (e) {
      rl_entry_t *next = e->next;
      size_t j = hash_str(e->name) & (ns - 1);
      e->next = t[j];
      t[j] = e;
      e = next;
    }
  }
  free(g_tab);
  g_tab = t;
  g_tab_size = ns;
  return 0;
}

static rl_entry_t *lookup(const char *key) {
  if (!key) key = "";
  if (g_tab_size) {
    for (rl_entry_t *e = g_tab[hash_str(key) & (g_tab_size - 1)]; e; e = e->next)
      if (strcmp(e->name, key) == 0) return e;
  }
  if (g_count >= g_tab_size && grow() < 0) return NULL;
  size_t n = strlen(key);
  rl_entry_t *e = calloc(1, sizeof(*e) + n + 1);
  if (!e) return NULL;
  memcpy(e->name, key, n + 1);
  size_t j = hash_str(key) & (g_tab_size - 1);
  e->next = g_tab[j];
  g_tab[j] = e;
  g_count++;
  return e;
}

/* Bring the bucket up to now under the current limit. A bucket seen for the
 * first time starts full; a lowered limit (reload) clips the level. */
static void refill(bucket_t *b, uint64_t limit, uint64_t now) {
  if (limit > LIMIT_MAX) limit = LIMIT_MAX;
  int64_t cap = (int64_t)limit * UNITS_PER_TOKEN;
  if (b->limit == 0) {
    b->level = cap;
    b->last = now;
    b->limit = limit;
    return;
  }
  b->limit = limit;
  if (now > b->last) {
    uint64_t dt = now - b->last;
    int64_t room = cap - b->level;
    if (room <= 0)
      b->level = cap;
    else if (dt >= (uint64_t)room / limit + 1)
      b->level = cap;
    else
      b->level += (int64_t)(dt * limit);
    b->last = now;
  }
  if (b->level > cap) b->level = cap;
}

/* Whole seconds (rounded up, >= 1) until the level reaches target units. */
static unsigned wait_secs(const bucket_t *b, int64_t target) {
  uint64_t need = (uint64_t)(target - b->level);
  uint64_t per_s = b->limit * 1000; /* units per second */
  uint64_t s = (need + per_s - 1) / per_s;
  if (s < 1) s = 1;
  return s > 0xffffffffu ? 0xffffffffu : (unsigned)s;
}

unsigned px_rl_admit(const char *key, uint64_t rpm, uint64_t tpm, uint64_t now_ms) {
  if (rpm == 0 && tpm == 0) return 0;
  rl_entry_t *e = lookup(key);
  if (!e) return 0; /* out of memory: fail open rather than refuse everyone */
  if (tpm) {
    refill(&e->tpm, tpm, now_ms);
    if (e->tpm.level < 0) return wait_secs(&e->tpm, 0);
  }
  if (rpm) {
    refill(&e->rpm, rpm, now_ms);
    if (e->rpm.level < UNITS_PER_TOKEN) return wait_secs(&e->rpm, UNITS_PER_TOKEN);
    e->rpm.level -= UNITS_PER_TOKEN;
  }
  return 0;
}

void px_rl_charge(const char *key, uint64_t tpm, uint64_t tokens, uint64_t now_ms) {
  if (tpm == 0 || tokens == 0) return;
  rl_entry_t *e = lookup(key);
  if (!e) return;
  refill(&e->tpm, tpm, now_ms);
  int64_t room = e->tpm.level - DEBT_FLOOR;
  if (tokens >= (uint64_t)room / UNITS_PER_TOKEN)
    e->tpm.level = DEBT_FLOOR;
  else
    e->tpm.level -= (int64_t)tokens * UNITS_PER_TOKEN;
}

void px_rl_reset(void) {
  for (size_t i = 0; i < g_tab_size; i++) {
    rl_entry_t *e = g_tab[i];
    while (e) {
      rl_entry_t *next = e->next;
      free(e);
      e = next;
    }
  }
  free(g_tab);
  g_tab = NULL;
  g_tab_size = g_count = 0;
}
