/*
 * config_check.c - the warnings of --check (SPEC section 2): a configuration
 * that loads but has parts that can never be used.
 *
 *   - an upstream no route names, neither as its upstream nor as a fallback;
 *   - a route every model of which an earlier route already takes (routes
 *     match in file order: `[route *]` before `[route gpt-4o]`);
 *   - a key `models` glob that no route pattern can match;
 *   - `client = builtin` with `http2 = on` (HTTP/2 is libcurl's: the
 *     upstream uses libcurl anyway);
 *   - budgets (SPEC 12) with models no [price] prices (a budgeted key is
 *     refused those), or with no persistent store (spend lost at restart);
 *   - [admin] without admin_listen (the admin API is served there only).
 *
 * Patterns are globs with `*` and `?` and no escapes (px_glob_match). Two
 * questions are asked of pattern pairs, each answered by a table over
 * (position in a, position in b) filled from the ends:
 *
 *   covers(a, b):    every name b matches, a matches too (sound: a yes is
 *                    always right; a rare no may be a miss, never a false
 *                    warning);
 *   overlaps(a, b):  some name matches both.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/config.h"

/** Largest table (pattern lengths multiplied) worth filling; beyond it the
 *  question is left unanswered and nothing is reported. */
#define PX_CHECK_MAX_CELLS (1u << 20)

enum { Q_COVERS, Q_OVERLAPS };

/* 1 yes, 0 no, -1 not answered (patterns too long or out of memory). */
static int glob_relation(const char *a, const char *b, int q) {
  size_t na = strlen(a), nb = strlen(b);
  size_t w = nb + 1;
  if ((na + 1) > PX_CHECK_MAX_CELLS / w) return -1;
  bool *t = calloc((na + 1) * w, sizeof *t);
  if (t == NULL) return -1;
#define T(i, j) t[(i)*w + (j)]
  for (size_t i = na + 1; i-- > 0;) {
    for (size_t j = nb + 1; j-- > 0;) {
      bool v;
      if (i == na) {
        /* a is used up: b must produce nothing more (only stars left, and
         * for covers not even those: a star of b makes names a lacks) */
        v = j == nb || (q == Q_OVERLAPS && b[j] == '*' && T(i, j + 1));
      } else if (a[i] == '*') {
        /* a's star matches nothing, or takes what b[j] produces */
        v = T(i + 1, j) || (j < nb && T(i, j + 1));
      } else if (q == Q_OVERLAPS && j < nb && b[j] == '*') {
        v = T(i, j + 1) || T(i + 1, j);
      } else if (j == nb || b[j] == '*') {
        v = false;
      } else if (a[i] == '?') {
        v = T(i + 1, j + 1);
      } else {
        v = (b[j] == a[i] || (q == Q_OVERLAPS && b[j] == '?')) && T(i + 1, j + 1);
      }
      T(i, j) = v;
    }
  }
  int r = T(0, 0) ? 1 : 0;
#undef T
  free(t);
  return r;
}

static bool route_uses(const px_route_conf_t *r, size_t u) {
  for (size_t k = 0; k < r->ndeployments; k++)
    if (r->deployments[k].upstream == u) return true;
  for (size_t k = 0; k < r->nfallbacks; k++)
    if (r->fallbacks[k].upstream == u) return true;
  return false;
}

static size_t warn_unpriced(const px_config_t *c, FILE *out, const char *file,
                            const px_route_conf_t *r, const char *model) {
  if (px_config_price(c, model)) return 0;
  fprintf(out,
          "proxai: warning: %s: [route %s] sends model '%s', which no [price] matches: "
          "keys with a budget are refused it\n",
          file, r->pattern, model);
  return 1;
}

static size_t warn_money(const px_config_t *c, FILE *out, const char *file) {
  size_t n = 0;
  bool budgets = false;
  for (size_t i = 0; i < c->nkeys; i++)
    budgets = budgets || c->keys[i].budget > 0 ||
              (c->keys[i].team && c->keys[i].team->budget > 0);
  for (size_t i = 0; i < c->nteams; i++) budgets = budgets || c->teams[i].budget > 0;
  if (c->admin_token && c->server.admin_listen == NULL) {
    fprintf(
        out,
        "proxai: warning: %s: [admin] token is set but [server] admin_listen is not: the "
        "admin API is served on admin_listen only\n",
        file);
    n++;
  }
  if (!budgets) return n;
  if (c->state.backend == PX_STATE_LOCAL && c->state.dir == NULL) {
    fprintf(out,
            "proxai: warning: %s: budgets without a persistent store: spend is kept in "
            "memory and starts from 0 at every restart (set [state] dir, or backend = "
            "redis)\n",
            file);
    n++;
  }
  /* what each route may send upstream: its targets' models when they are
   * named, else the exact name or the `models =` names it is asked for */
  for (size_t i = 0; i < c->nroutes; i++) {
    const px_route_conf_t *r = &c->routes[i];
    bool glob = strpbrk(r->pattern, "*?") != NULL;
    for (size_t j = 0; j < r->ndeployments + r->nfallbacks; j++) {
      const px_target_t *t =
          j < r->ndeployments ? &r->deployments[j] : &r->fallbacks[j - r->ndeployments];
      const char *m = t->model ? t->model : r->model;
      if (m) {
        n += warn_unpriced(c, out, file, r, m);
      } else if (!glob) {
        n += warn_unpriced(c, out, file, r, r->pattern);
      } else {
        for (size_t k = 0; k < r->nmodels; k++)
          n += warn_unpriced(c, out, file, r, r->models[k]);
      }
    }
  }
  return n;
}

size_t px_config_warn(const px_config_t *c, FILE *out) {
  size_t n = 0;
  const char *file = c->path ? c->path : "(embedded default)";
  for (size_t u = 0; u < c->nupstreams; u++) {
    bool used = false;
    for (size_t i = 0; i < c->nroutes && !used; i++) used = route_uses(&c->routes[i], u);
    if (c->upstreams[u].client == 2 && c->upstreams[u].http2) {
      fprintf(out,
              "proxai: warning: %s: [upstream %s] client = builtin with http2 = on: the "
              "built-in client speaks HTTP/1.1 only, libcurl carries this upstream\n",
              file, c->upstreams[u].name);
      n++;
    }
    if (used) continue;
    fprintf(out,
            "proxai: warning: %s: [upstream %s] is used by no route (neither as upstream "
            "nor as fallback)\n",
            file, c->upstreams[u].name);
    n++;
  }
  for (size_t j = 0; j < c->nroutes; j++) {
    for (size_t i = 0; i < j; i++) {
      if (glob_relation(c->routes[i].pattern, c->routes[j].pattern, Q_COVERS) != 1)
        continue;
      fprintf(out,
              "proxai: warning: %s: [route %s] is never used: the earlier [route %s] "
              "matches every model it matches (routes match in file order)\n",
              file, c->routes[j].pattern, c->routes[i].pattern);
      n++;
      break;
    }
  }
  for (size_t k = 0; k < c->nkeys; k++) {
    const px_key_conf_t *key = &c->keys[k];
    for (size_t g = 0; g < key->nmodels; g++) {
      bool any = false;
      for (size_t i = 0; i < c->nroutes && !any; i++)
        any = glob_relation(key->models[g], c->routes[i].pattern, Q_OVERLAPS) != 0;
      if (any) continue;
      fprintf(out,
              "proxai: warning: %s: [key %s] models '%s' matches no route: requests for "
              "those models fail\n",
              file, key->name, key->models[g]);
      n++;
    }
  }
  n += warn_money(c, out, file);
  return n;
}
