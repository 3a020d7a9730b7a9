/* scrub.c - configured secrets overwritten in what the gateway relays from
 * an upstream's error and in its log lines (scrub.h). */
#include "proxai/scrub.h"

#include <stdlib.h>
#include <string.h>

#define PX_SCRUB_MIN 6 /* a shorter secret would match ordinary words */

typedef struct secret {
  char *s;
  size_t n;
} secret_t;

/* process-wide (see scrub.h): filled at configuration load, read per error */
static secret_t *g_secrets;
static size_t g_nsecrets, g_cap;

void px_scrub_add(const char *secret, size_t n) {
  if (secret == NULL || n < PX_SCRUB_MIN) return;
  for (size_t i = 0; i < g_nsecrets; i++)
    if (g_secrets[i].n == n && memcmp(g_secrets[i].s, secret, n) == 0) return;
  if (g_nsecrets == g_cap) {
    size_t nc = g_cap ? g_cap * 2 : 16;
    secret_t *t = realloc(g_secrets, nc * sizeof(*t));
    if (t == NULL) return;
    g_secrets = t;
    g_cap = nc;
  }
  char *c = malloc(n);
  if (c == NULL) return;
  memcpy(c, secret, n);
  g_secrets[g_nsecrets++] = (secret_t){c, n};
}

/* the bytes a key-like word is made of, masks included */
static int word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_' || c == '*' || c == '.';
}

/* a mask at w[i]: two or more '*', or three or more '.'; *len its length */
static int mask_at(const char *w, size_t n, size_t i, size_t *len) {
  char c = w[i];
  size_t k = i;
  if (c != '*' && c != '.') return 0;
  while (k < n && w[k] == c) k++;
  *len = k - i;
  return c == '*' ? *len >= 2 : *len >= 3;
}

static int starts(const secret_t *s, const char *p, size_t n) {
  return n <= s->n && memcmp(s->s, p, n) == 0;
}
static int ends(const secret_t *s, const char *p, size_t n) {
  return n <= s->n && memcmp(s->s + s->n - n, p, n) == 0;
}

/* How many bytes of word w[0..n) show a secret or its recognisable part:
 * 0, or the word without a full stop that ends it. */
static size_t word_secret(const char *w, size_t n) {
  while (n > 0 && w[n - 1] == '.' && (n < 2 || w[n - 2] != '.')) n--; /* a full stop */
  size_t head = n, tail = 0, ml;
  for (size_t i = 0; i < n; i++) {
    if (!mask_at(w, n, i, &ml)) continue;
    if (head == n) head = i;
    tail = i + ml;
    i += ml - 1;
  }
  int masked = head < n;
  if (!masked && n < 8) return 0;
  if (!masked) { /* a JSON number stays one (w is not NUL-terminated) */
    size_t d = 0;
    while (d < n && ((w[d] >= '0' && w[d] <= '9') || w[d] == '.' || w[d] == '-')) d++;
    if (d == n) return 0;
  }
  for (size_t k = 0; k < g_nsecrets; k++) {
    const secret_t *s = &g_secrets[k];
    if (masked) {
      if ((head >= 3 && starts(s, w, head)) ||
          (n - tail >= 4 && ends(s, w + tail, n - tail)))
        return n;
    } else if (n <= s->n && memmem(s->s, s->n, w, n) != NULL) {
      return n;
    }
  }
  return 0;
}

size_t px_scrub(char *p, size_t n) {
  size_t hits = 0;
  if (g_nsecrets == 0 || p == NULL) return 0;
  /* whole secrets, whatever bytes they are made of */
  for (size_t k = 0; k < g_nsecrets; k++) {
    const secret_t *s = &g_secrets[k];
    for (char *q = p; (q = memmem(q, (size_t)(p + n - q), s->s, s->n)) != NULL;
         q += s->n) {
      memset(q, '*', s->n);
      hits++;
    }
  }
  /* the parts a provider echoes, word by word */
  for (size_t i = 0; i < n;) {
    if (!word_byte((unsigned char)p[i])) {
      i++;
      continue;
    }
    size_t s = i;
    while (i < n && word_byte((unsigned char)p[i])) i++;
    size_t k = word_secret(p + s, i - s);
    if (k > 0) {
      memset(p + s, '*', k);
      hits++;
    }
  }
  return hits;
}
