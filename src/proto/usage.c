/* usage.c - the token usage of an answer, read from its raw JSON by the
 * member names of the protocol's watch descriptor: in a whole body and in
 * one stream event (the pass-through watcher's), the usage object and its
 * counts found by the answer's structure back from its end (where every
 * protocol puts usage) by the one reader's rules (names compared
 * unescaped, the last of a repeated one, a count as jansson reads it);
 * and, for traces, the answer's id, model and finish reason.
 */
#include "proxai/usage.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "proxai/json.h"

#define END PX_JSON_NPOS

static size_t skip_ws(const char *p, size_t i, size_t n) {
  return px_json_ws((const unsigned char *)p, n, i);
}

/* The count at p[i] (a member's value): a non-negative integer as jansson
 * reads it (its number token by jansson's grammar and range, no fraction
 * or exponent; "-0" is 0), else -1 (a real, a string, null, a negative
 * number, a token jansson refuses). */
static int64_t count_at(const char *p, size_t n, size_t i) {
  const unsigned char *u = (const unsigned char *)p;
  size_t e = px_fj_int_end(u, n, i); /* the usual: a short plain integer */
  if (e != 0 && (e == n || (p[e] != '+' && p[e] != '-')))
    return p[i] == '-' ? (px_fj_int_value(u, i, e) == 0 ? 0 : -1)
                       : px_fj_int_value(u, i, e);
  e = i;
  if (i >= n || px_json_number(p, n, &e) < 0) return -1;
  int neg = p[i] == '-';
  int64_t v = 0;
  for (size_t k = i + (size_t)neg; k < e; k++) {
    if (p[k] < '0' || p[k] > '9') return -1; /* '.', 'e', 'E': a real */
    v = v * 10 + (p[k] - '0');               /* in range: px_json_number */
  }
  return neg && v != 0 ? -1 : v;
}

/* The marks of p[lo..i) walked down from i: quotes, and the bytes that may
 * be brackets (next_mark's test), 32 bytes tested at once (SSE2, else
 * one at a time into the same masks) and taken from the masks, highest
 * first, with no reload per mark. */
typedef struct rmarks {
  const unsigned char *p;
  size_t lo, base; /* the bytes below base are still to test */
  unsigned q, b;   /* the quotes and bracket-likes of p[base..base + 32) not taken */
} rmarks_t;

/* The next 32 bytes below (fewer at lo): 0 when there are none. */
static inline int rmarks_load(rmarks_t *r) {
  if (r->base <= r->lo) return 0;
  size_t k = r->base - r->lo < 32 ? r->base - r->lo : 32;
  r->base -= k;
  const unsigned char *p = r->p + r->base;
#if defined(__SSE2__)
  if (k == 32) {
    const __m128i mask = _mm_set1_epi8((char)~0x26), br = _mm_set1_epi8(0x59),
                  qt = _mm_set1_epi8('"');
    __m128i v0 = _mm_loadu_si128((const __m128i *)p),
            v1 = _mm_loadu_si128((const __m128i *)(p + 16));
    r->q = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v0, qt)) |
           (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v1, qt)) << 16;
    r->b = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(v0, mask), br)) |
           (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(v1, mask), br)) << 16;
    return 1;
  }
#endif
  r->q = r->b = 0;
  for (unsigned i = 0; i < k; i++) {
    r->q |= (unsigned)(p[i] == '"') << i;
    r->b |= (unsigned)((p[i] & ~0x26) == 0x59) << i;
  }
  return 1;
}

/* The next mark below the last one taken, else END. */
static inline size_t rmark(rmarks_t *r) {
  while ((r->q | r->b) == 0)
    if (!rmarks_load(r)) return END;
  unsigned bit = 31 - (unsigned)__builtin_clz(r->q | r->b), keep = ~(1u << bit);
  r->q &= keep;
  r->b &= keep;
  return r->base + bit;
}

/* The next quote below the last mark taken, else END; the marks between
 * (inside a string) are dropped. */
static inline size_t rquote(rmarks_t *r) {
  while (r->q == 0)
    if (!rmarks_load(r)) return END;
  unsigned bit = 31 - (unsigned)__builtin_clz(r->q), keep = (1u << bit) - 1;
  r->q &= keep;
  r->b &= keep;
  return r->base + bit;
}

/* The top-level member `name` of the object text[lo..n) found walking back
 * from its closing brace (every protocol puts usage last), structure only:
 * strings are skipped, not checked; names are compared unescaped
 * (px_json_name_is). On the way back the members of the current
 * second-level object named in pk (NULL: none) are noted (pat[k] for pk's
 * name k: their values' first bytes; the last of a repeated name, met
 * first). 1 when found: *vs, *ve its value's span when that is an object
 * (pat holds its members), else *vs = END; *at where its name starts. 0
 * when the walk reached the opening brace at lo without meeting it (one
 * object, no such member); -1 when the text does not read back as one
 * object (not ending in '}', unbalanced, a stray quote), or with cut (the
 * text is the tail of a larger one, its front cut away) when the walk ran
 * out of bytes. Reading from the end costs the bytes after the member,
 * not the whole text; when a name repeats at the top the last one is met
 * first, as jansson keeps it. */
static int member_from_end(const char *text, size_t lo, size_t n, const char *name,
                           int cut, const px_json_pick_t *pk, size_t *pat, size_t *vs,
                           size_t *ve, size_t *at) {
  const unsigned char *p = (const unsigned char *)text;
  size_t nl = strlen(name), first = skip_ws(text, lo, n), j = n, names = pk ? pk->n : 0;
  while (j > first &&
         (p[j - 1] == ' ' || p[j - 1] == '\t' || p[j - 1] == '\n' || p[j - 1] == '\r'))
    j--;
  if (j <= first || p[j - 1] != '}' || (!cut && p[first] != '{')) return -1;
  size_t depth = 0, open = END, close = END;
  rmarks_t r = {p, first, j, 0, 0};
  for (;;) {
    j = rmark(&r);
    if (j == END) return -1;
    unsigned char c = p[j];
    if (c == '"') { /* the string's opening quote: the next quote no odd run
                     * of backslashes escapes */
      size_t k, b;
      do {
        if ((k = rquote(&r)) == END) return -1;
        for (b = k; b > lo && p[b - 1] == '\\';) b--;
      } while ((k - b) & 1);
      if (depth > 2 || (depth == 2 && names == 0)) continue; /* no name the walk reads */
      size_t e = skip_ws(text, j + 1, n);
      if (e >= n || p[e] != ':') continue; /* a value, not a name */
      if (depth == 2) {                    /* a member of a second-level object */
        for (size_t m = 0; m < names; m++)
          if (pat[m] == END &&
              px_json_name_is(text + k + 1, j - k - 1, pk->name[m], pk->nlen[m])) {
            pat[m] = skip_ws(text, e + 1, n);
            break;
          }
      } else if (px_json_name_is(text + k + 1, j - k - 1, name, nl)) {
        size_t v = skip_ws(text, e + 1, n);
        *vs = v == open ? open : END; /* an object, else nothing to read */
        *ve = close + 1;
        if (at) *at = k;
        return 1;
      }
    } else if (c == '}' || c == ']') {
      if (++depth == 2) { /* a top-level member's value ends here: a new one */
        close = j;
        for (size_t m = 0; m < names; m++) pat[m] = END;
      }
    } else if (c == '{' || c == '[') {
      if (depth == 0) return -1;
      if (depth == 2) open = c == '{' ? j : END;
      if (--depth == 0) return j == first ? 0 : -1;
    }
  }
}

/* The usage object's counters, by the watch descriptor's names (the input
 * count, the output count, the output's extra (reasoning), the input's
 * extras: cache reads, then cache writes, proto.h), to be noted by
 * member_from_end: the last protocol's pick kept (the names' lengths). */
enum { U_IN, U_OUT, U_OUT_X, U_IN_X };
static const px_json_pick_t *usage_pick(const px_wire_watch_t *w) {
  static const px_wire_watch_t *lw;
  static px_json_pick_t pk;
  if (lw != w) {
    pk.n = 0;
    px_json_pick_add(&pk, w->usage_in);
    px_json_pick_add(&pk, w->usage_out);
    px_json_pick_add(&pk, w->usage_out_extra ? w->usage_out_extra : "");
    if (!w->usage_out_extra) pk.nlen[U_OUT_X] = (size_t)-1; /* never matches */
    for (size_t k = 0; k < 2 && w->usage_in_extra[k]; k++)
      px_json_pick_add(&pk, w->usage_in_extra[k]);
    lw = w;
  }
  return &pk;
}

/* The usage object under the top-level member outer (NULL: at the top) of
 * the object p[0..n), found back from its end and its counters read into u
 * (count_at). The return as member_from_end's (the outer object's walk's
 * when that does not find it), *at where the outermost name starts. */
static int usage_from_end(const px_wire_watch_t *w, const char *p, size_t n,
                          const char *outer, int cut, px_usage_t *u, size_t *at) {
  size_t lo = 0, vs, ve;
  if (outer) { /* the object that holds usage: found the same way */
    int rc = member_from_end(p, 0, n, outer, cut, NULL, NULL, &vs, &ve, at);
    if (rc != 1 || vs == END) return rc;
    lo = vs;
    n = ve;
    cut = 0;
  }
  const px_json_pick_t *pk = usage_pick(w);
  size_t pat[PX_JSON_PICK_MAX];
  int rc =
      member_from_end(p, lo, n, w->usage_obj, cut, pk, pat, &vs, &ve, outer ? NULL : at);
  if (rc != 1 || vs == END) return rc;
  int64_t c[PX_JSON_PICK_MAX] = {-1, -1, -1, -1, -1, -1};
  for (size_t k = 0; k < pk->n; k++) c[k] = pat[k] == END ? -1 : count_at(p, n, pat[k]);
  if (c[U_IN] >= 0) {
    u->input_tokens = c[U_IN];
    for (size_t k = U_IN_X; k < pk->n; k++) {
      if (c[k] > 0) u->input_tokens += c[k];
      if (c[k] >= 0)
        *(k > U_IN_X ? &u->cache_creation_tokens : &u->cache_read_tokens) = c[k];
    }
  }
  if (c[U_OUT] >= 0) u->output_tokens = c[U_OUT] + (c[U_OUT_X] > 0 ? c[U_OUT_X] : 0);
  return rc;
}

int px_usage_scan_at(px_proto_t proto, const char *p, size_t n, px_usage_t *u,
                     size_t *at) {
  if (at) *at = END;
  return usage_from_end(&px_proto_get(proto)->watch, p, n, NULL, 0, u, at) >= 0;
}

int px_usage_scan(px_proto_t proto, const char *p, size_t n, px_usage_t *u) {
  return px_usage_scan_at(proto, p, n, u, NULL);
}

void px_usage_tail(px_proto_t proto, const char *p, size_t n, px_usage_t *u) {
  usage_from_end(&px_proto_get(proto)->watch, p, n, NULL, 1, u, NULL);
}

void px_usage_read(const px_wire_watch_t *w, const char *p, size_t n, const char *outer,
                   px_usage_t *u) {
  usage_from_end(w, p, n, outer, 0, u, NULL);
}

/* The string token p[s..s+l) (quotes included) copied into dst without
 * its quotes, cut to fit (its escapes as written, never half of one); 0
 * when it is not a string. Inlined: a few bytes, three times an answer. */
static inline __attribute__((always_inline)) int copy_str(const char *p, size_t s,
                                                          size_t l, char *dst, size_t cap,
                                                          unsigned char *len) {
  if (s == END || l < 2 || p[s] != '"') return 0;
  l -= 2;
  if (l >= cap) { /* cut: never half an escape (as set_str) */
    l = cap - 1;
    while (l > 0 && p[s + l] == '\\') l--;
  }
  px_mem_cpy(dst, p + s + 1, l);
  dst[l] = 0;
  *len = (unsigned char)l;
  return 1;
}

/* The value of the last member named `name` in p[0..n), at any depth,
 * found walking back from the end: a quoted name no backslash escapes,
 * followed by ':' (inside a string its quotes would be escaped). For a
 * finish reason that sits in the list before the usage, or after the
 * content (finish_last), the bytes after it are read, not the answer's
 * content; the walk ends at the member named `list` (NULL: none), whose
 * elements it has passed (a stream chunk with usage alone). *s = END when
 * there is none. */
static void last_member(const char *p, size_t n, const char *name, const char *list, size_t *s,
                        size_t *l) {
  size_t nl = strlen(name), ll = list ? strlen(list) : 0, j = n;
  *s = END;
  while (j > nl + 1) {
    const char *q = memrchr(p, '"', j);
    if (q == NULL) return;
    j = (size_t)(q - p); /* the closing quote of a name? */
    if (ll && j >= ll + 1 && p[j - ll - 1] == '"' && memcmp(p + j - ll, list, ll) == 0) {
      size_t c = skip_ws(p, j + 1, n); /* the list's name: its elements are behind */
      if (c < n && p[c] == ':') return;
    }
    if (j < nl + 1 || p[j - nl - 1] != '"' || memcmp(p + j - nl, name, nl) != 0 ||
        (j >= nl + 2 && p[j - nl - 2] == '\\'))
      continue;
    size_t c = skip_ws(p, j + 1, n);
    if (c >= n || p[c] != ':') continue;
    size_t v = skip_ws(p, c + 1, n), e = v;
    if (v >= n || p[v] != '"') return; /* null: no finish reason (yet) */
    for (e = v + 1; e < n && p[e] != '"'; e++)
      if (p[e] == '\\') e++;
    if (e < n) *s = v, *l = e + 1 - v;
    return;
  }
}

/* The end of the string token at p[i] ('"'): the index after its closing
 * quote (one that no odd run of backslashes escapes); END when cut. */
static inline size_t quote_at(const char *p, size_t j, size_t n) {
#if defined(__SSE2__)
  const __m128i qt = _mm_set1_epi8('"'); /* names and ids are short: inline */
  for (; j + 16 <= n; j += 16) {
    unsigned m = (unsigned)_mm_movemask_epi8(
        _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + j)), qt));
    if (m) return j + (size_t)__builtin_ctz(m);
  }
#endif
  const char *q = memchr(p + j, '"', n - j);
  return q ? (size_t)(q - p) : END;
}

static inline size_t str_end(const char *p, size_t i, size_t n) {
  for (size_t j = i + 1;;) {
    size_t k = quote_at(p, j, n), b = k;
    if (k == END) return END;
    while (b > i + 1 && p[b - 1] == '\\') b--;
    if (((k - b) & 1) == 0) return k + 1;
    j = k + 1;
  }
}

/* The last quote before p[j] that no odd run of backslashes escapes, else
 * END. */
static size_t quote_before(const char *p, size_t j) {
  for (;;) {
    const char *q = memrchr(p, '"', j);
    if (q == NULL) return END;
    size_t k = (size_t)(q - p), b = k;
    while (b > 0 && p[b - 1] == '\\') b--;
    if (((k - b) & 1) == 0) return k;
    j = b;
  }
}

/* Whether p[0..n) holds a \u escape: its backslashes found by memchr (a
 * vector search; memmem's for two bytes is a byte loop) */
static int has_u_escape(const char *p, size_t n) {
  for (const char *e = p + n, *q = memchr(p, '\\', n); q && q + 1 < e;
       q = memchr(q + 2, '\\', q + 2 < e ? (size_t)(e - q - 2) : 0))
    if (q[1] == 'u') return 1;
  return 0;
}

/* last_member by the one reader's rule for names, for an answer that may
 * spell them with escapes ("\u" in it): the strings walked back from the
 * end, each named compared unescaped (px_json_name_is). */
static void last_member_esc(const char *p, size_t n, const char *name, const char *list,
                            size_t *s, size_t *l) {
  size_t nl = strlen(name), ll = list ? strlen(list) : 0, j = n, k;
  *s = END;
  for (; (j = quote_before(p, j)) != END && (k = quote_before(p, j)) != END; j = k) {
    size_t c = skip_ws(p, j + 1, n); /* the string p[k..j]: a name when ':' follows */
    if (c >= n || p[c] != ':') continue;
    if (ll && px_json_name_is(p + k + 1, j - k - 1, list, ll)) return; /* the list's */
    if (!px_json_name_is(p + k + 1, j - k - 1, name, nl)) continue;
    size_t v = skip_ws(p, c + 1, n), e;
    if (v < n && p[v] == '"' && (e = str_end(p, v, n)) != END) *s = v, *l = e - v;
    return; /* null: no finish reason (yet) */
  }
}

/* the bytes that end a number or a literal */
static const unsigned char scalar_end[256] = {
    [','] = 1, ['}'] = 1, [']'] = 1, [' '] = 1, ['\n'] = 1, ['\r'] = 1, ['\t'] = 1};

/* px_json_pick (until_found) over the leading members of the object at
 * p[o] while their values are strings or scalars: the id and the model
 * lead the answers of every protocol but Gemini's, so the walk is a few
 * memchr. 1 when every name of pk is found or the object ended; 0 when it
 * met a container that is not empty (or anything else) first: pk holds
 * what it found, the caller walks for the rest with px_json_pick. A name
 * whose value is a container that is not empty gets its start only (len
 * 0), and the walk ends there. */
/* the end of the number or literal at p[i]: the first byte of scalar_end
 * from there (sixteen at a time where the bytes are there) */
static inline size_t scalar_to_end(const char *p, size_t i, size_t n) {
#if defined(__SSE2__)
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
    __m128i e =
        _mm_or_si128(_mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(',')),
                                               _mm_cmpeq_epi8(v, _mm_set1_epi8('}'))),
                                  _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(']')),
                                               _mm_cmpeq_epi8(v, _mm_set1_epi8(' ')))),
                     _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')),
                                               _mm_cmpeq_epi8(v, _mm_set1_epi8('\r'))),
                                  _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))));
    unsigned m = (unsigned)_mm_movemask_epi8(e);
    if (m) return i + (size_t)__builtin_ctz(m);
  }
#endif
  while (i < n && !scalar_end[(unsigned char)p[i]]) i++;
  return i;
}

/* The closing quote of the string opening at p[i] when no backslash comes
 * before it; END when cut or escaped (the caller walks it as str_end does) */
static inline size_t plain_end(const char *p, size_t i, size_t n) {
  size_t j = i + 1;
#if defined(__SSE2__)
  for (; j + 16 <= n; j += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + j));
    unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(
        _mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
    if (m) {
      size_t k = j + (size_t)__builtin_ctz(m);
      return p[k] == '"' ? k : END;
    }
  }
#endif
  for (; j < n; j++)
    if (p[j] == '"' || p[j] == '\\') return p[j] == '"' ? j : END;
  return END;
}

/* the member name p[i + 1 .. i + 1 + kl) among pk's names not found yet
 * (lens: their lengths); PX_JSON_PICK_MAX when none */
static inline size_t pick_hit(const char *p, size_t i, size_t kl,
                              const px_json_pick_t *pk, uint64_t lens) {
  if (kl >= 64 ? !(lens & 1) : !(lens >> kl & 1)) return PX_JSON_PICK_MAX;
  for (size_t k = 0; k < pk->n; k++)
    if (pk->nlen[k] == kl && pk->at[k] == END && p[i + 1] == pk->name[k][0] &&
        memcmp(p + i + 1, pk->name[k], kl) == 0)
      return k;
  return PX_JSON_PICK_MAX;
}

/* pick_hit for a name spelled with escapes: compared unescaped */
static size_t pick_hit_esc(const char *p, size_t i, size_t kl, const px_json_pick_t *pk) {
  for (size_t k = 0; k < pk->n; k++)
    if (pk->at[k] == END && px_json_name_is(p + i + 1, kl, pk->name[k], pk->nlen[k]))
      return k;
  return PX_JSON_PICK_MAX;
}

/* lead_pick over compact JSON (no space, no escape among the leading
 * members): one check per byte class, each string's end in one load as a
 * rule. -1 when it meets anything else before deciding (pk as it was: the
 * caller walks with lead_pick), else lead_pick's answer. */
static int lead_compact(const char *p, size_t n, size_t o, px_json_pick_t *pk,
                        uint64_t lens) {
  size_t found = 0, i = o + 1, hits[PX_JSON_PICK_MAX];
  for (;;) {
    size_t kq, ve = END, hit;
    if (i >= n || p[i] != '"' || (kq = plain_end(p, i, n)) == END || kq + 2 >= n ||
        p[kq + 1] != ':')
      break;
    hit = pick_hit(p, i, kq - i - 1, pk, lens);
    size_t vs = kq + 2;
    char c = p[vs];
    if (c == '"') {
      size_t vq = plain_end(p, vs, n);
      if (vq != END) ve = vq + 1;
    } else if (c == '{' || c == '[') {
      char d = vs + 1 < n ? p[vs + 1] : 0;
      if (d == (c == '{' ? '}' : ']')) {
        ve = vs + 2; /* empty: stepped over */
      } else if (d != ' ' && d != '\n' && d != '\r' && d != '\t') {
        if (hit == PX_JSON_PICK_MAX) return 0; /* a container: the walk ends */
        pk->at[hit] = vs;
        pk->len[hit] = 0;
        return ++found == pk->n;
      }
    } else {
      ve = scalar_to_end(p, vs, n);
    }
    if (ve >= n || (p[ve] != ',' && p[ve] != '}')) break;
    if (hit < PX_JSON_PICK_MAX) {
      pk->at[hit] = vs;
      pk->len[hit] = ve - vs;
      hits[found] = hit;
      if (++found == pk->n) return 1;
    }
    if (p[ve] == '}') return 1;
    i = ve + 1;
  }
  for (size_t k = 0; k < found; k++) pk->at[hits[k]] = END, pk->len[hits[k]] = 0;
  return -1;
}

static int lead_pick(const char *p, size_t n, size_t o, px_json_pick_t *pk) {
  size_t found = 0, i = o + 1;
  if (o >= n || p[o] != '{') return 0;
  /* the names' lengths: a member of another length is passed at once */
  uint64_t lens = 0;
  for (size_t k = 0; k < pk->n; k++) lens |= pk->nlen[k] < 64 ? 1ull << pk->nlen[k] : 1;
  int r = lead_compact(p, n, o, pk, lens);
  if (r >= 0) return r;
  for (;;) {
    i = skip_ws(p, i, n);
    if (i >= n || p[i] != '"') return 0;
    size_t ke = str_end(p, i, n);
    if (ke == END) return 0;
    size_t hit = pick_hit(p, i, ke - i - 2, pk, lens);
    if (hit == PX_JSON_PICK_MAX && memchr(p + i + 1, '\\', ke - i - 2) != NULL)
      hit = pick_hit_esc(p, i, ke - i - 2, pk);
    i = skip_ws(p, ke, n);
    if (i >= n || p[i] != ':') return 0;
    size_t vs = skip_ws(p, i + 1, n), ve = vs;
    if (vs >= n) return 0;
    if (p[vs] == '{' || p[vs] == '[') { /* an empty one is stepped over ("content":[]) */
      ve = skip_ws(p, vs + 1, n);
      if (ve >= n || p[ve] != (p[vs] == '{' ? '}' : ']')) {
        if (hit == PX_JSON_PICK_MAX) return 0;
        pk->at[hit] = vs; /* a container named: its start only (len 0) */
        pk->len[hit] = 0;
        return ++found == pk->n;
      }
      ve++;
    } else if (p[vs] == '"') {
      if ((ve = str_end(p, vs, n)) == END) return 0;
    } else {
      ve = scalar_to_end(p, ve, n);
    }
    if (hit < PX_JSON_PICK_MAX) {
      pk->at[hit] = vs;
      pk->len[hit] = ve - vs;
      if (++found == pk->n) return 1;
    }
    i = skip_ws(p, ve, n);
    if (i < n && p[i] == '}') return 1;
    if (i >= n || p[i] != ',') return 0;
    i++;
  }
}

#if defined(__SSE2__)
/* last_member for compact JSON: walks back sixteen bytes at a time to the
 * places where a quote is followed by ':' (the end of a member's name) and
 * compares only those. 1 when it decided (*s as last_member sets it); 0
 * when it met neither the name nor the list (a name spaced from its colon,
 * or none): the caller walks with last_member. */
static int last_member_fast(const char *p, size_t n, const char *name, const char *list,
                            size_t *s, size_t *l) {
  /* the names are the protocols' descriptors' literals: their lengths kept */
  static const char *last_name, *last_list;
  static size_t nl, ll;
  if (name != last_name) nl = strlen(name), last_name = name;
  if (list != last_list) ll = list ? strlen(list) : 0, last_list = list;
  size_t j = n > 0 ? n - 1 : 0;
  const __m128i qt = _mm_set1_epi8('"'), co = _mm_set1_epi8(':');
  /* the last bytes of the names: most places fail on them */
  const char nz = name[nl - 1], lz = ll ? list[ll - 1] : 0;
  /* ... their last two, tested with the places sixteen at a time (names
   * of one byte: every place) */
  const int two = nl >= 2 && (ll == 0 || ll >= 2);
  const __m128i n1 = _mm_set1_epi8(nz), n2 = _mm_set1_epi8(two ? name[nl - 2] : 0),
                l1 = _mm_set1_epi8(ll ? lz : nz),
                l2 = _mm_set1_epi8(two ? (ll ? list[ll - 2] : name[nl - 2]) : 0);
  *s = END;
  while (j > 0) { /* places q in [b, j): p[q] a quote, p[q + 1] a colon */
    size_t b = j >= 18 ? j - 16 : 0;
    unsigned m = 0;
    if (b > 0) { /* p[b - 2 .. j] are there */
      __m128i a = _mm_loadu_si128((const __m128i *)(p + b)),
              c = _mm_loadu_si128((const __m128i *)(p + b + 1));
      __m128i place = _mm_and_si128(_mm_cmpeq_epi8(a, qt), _mm_cmpeq_epi8(c, co));
      if (two) {
        __m128i z1 = _mm_loadu_si128((const __m128i *)(p + b - 1)),
                z2 = _mm_loadu_si128((const __m128i *)(p + b - 2));
        place = _mm_and_si128(
            place, _mm_or_si128(_mm_and_si128(_mm_cmpeq_epi8(z1, n1), _mm_cmpeq_epi8(z2, n2)),
                                _mm_and_si128(_mm_cmpeq_epi8(z1, l1), _mm_cmpeq_epi8(z2, l2))));
      }
      m = (unsigned)_mm_movemask_epi8(place);
    } else {
      for (size_t q = b; q < j; q++)
        if (p[q] == '"' && p[q + 1] == ':') m |= 1u << (q - b);
    }
    while (m) { /* the last first */
      unsigned bit = 31u - (unsigned)__builtin_clz(m);
      m &= ~(1u << bit);
      size_t q = b + bit;
      if (q < 2) continue;
      if (ll && p[q - 1] == lz && q >= ll + 1 && p[q - ll - 1] == '"' &&
          memcmp(p + q - ll, list, ll) == 0)
        return 1; /* the list's name: its elements are behind */
      if (p[q - 1] != nz || q < nl + 1 || p[q - nl - 1] != '"' ||
          memcmp(p + q - nl, name, nl) != 0 || (q >= nl + 2 && p[q - nl - 2] == '\\'))
        continue;
      size_t v = skip_ws(p, q + 2, n), e;
      if (v < n && p[v] == '"' && (e = str_end(p, v, n)) != END) *s = v, *l = e - v;
      return 1; /* null: no finish reason (yet) */
    }
    j = b;
  }
  return 0;
}
#endif

/* The string token p[s..s+l) with no backslash in it (lead_find's,
 * finish_at_end's) into dst, cut to fit: copy_str without its checks */
static inline void copy_plain(const char *p, size_t s, size_t l, char *dst, size_t cap,
                              unsigned char *len) {
  l = l - 2 < cap ? l - 2 : cap - 1;
  px_mem_cpy(dst, p + s + 1, l);
  dst[l] = 0;
  *len = (unsigned char)l;
}

/* finish_at_end's name: the protocols' literals, its length kept, and
 * (SSE2) "name": as the last bytes of sixteen when it fits (every
 * protocol's does) to compare the bytes before the value at once; set out
 * of line (no call on the way of the usual read) */
static struct {
  const char *name;
  size_t nl;
#if defined(__SSE2__)
  __m128i pat;
  unsigned want;
#endif
} fin;

static __attribute__((noinline)) void fin_name(const char *name) {
  fin.nl = strlen(name), fin.name = name;
#if defined(__SSE2__)
  char b[16] = {0};
  fin.want = 0;
  if (fin.nl <= 13) {
    b[13 - fin.nl] = '"';
    memcpy(b + 14 - fin.nl, name, fin.nl);
    b[14] = '"';
    b[15] = ':';
    fin.want = 0xffffu << (13 - fin.nl) & 0xffffu;
  }
  fin.pat = _mm_loadu_si128((const __m128i *)b);
#endif
}

/* The finish reason when its member is the last one before p[e] in
 * compact JSON (a finish chunk's "name":"stop"}]}, a body's
 * "name":"stop"}],"usage"): "name" then ':', a string value without a
 * backslash or null, then closing brackets (and one comma) up to e. 1: it
 * is (*s as last_member_fast sets it: the last "name": there is this one,
 * no other name ends in the bytes after it), 0: another shape (the caller
 * walks back as before). The name: fin's (fin_name). */
static inline int finish_at_end(const char *p, size_t e, size_t *s, size_t *l) {
  size_t nl = fin.nl;
  size_t j = e, v;
  if (j > 0 && p[j - 1] == ',') j--;
  while (j > 0 && (p[j - 1] == '}' || p[j - 1] == ']')) j--;
  if (j >= 4 && memcmp(p + j - 4, "null", 4) == 0) {
    v = j - 4;
    *s = END;
  } else if (j >= 2 && p[j - 1] == '"') {
    /* back to the opening quote (finish words are short): the last quote
     * or backslash before the closing one, sixteen bytes at a time */
    size_t k = j - 1, q = END;
#if defined(__SSE2__)
    for (; k >= 16 && j - k < 64; k -= 16) {
      __m128i c = _mm_loadu_si128((const __m128i *)(p + k - 16));
      unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(
          _mm_cmpeq_epi8(c, _mm_set1_epi8('"')), _mm_cmpeq_epi8(c, _mm_set1_epi8('\\'))));
      if (m) {
        q = k - 16 + (size_t)(31 - __builtin_clz(m));
        break;
      }
    }
    if (q == END)
#endif
      for (; k > 0 && j - k < 64; k--)
        if (p[k - 1] == '"' || p[k - 1] == '\\') {
          q = k - 1;
          break;
        }
    if (q == END || p[q] != '"') return 0;
    v = q;
    *s = v, *l = j - v;
  } else {
    return 0;
  }
  if (v >= nl + 4 && p[v - nl - 4] == '\\') return 0; /* the name's quote escaped */
#if defined(__SSE2__)
  if (fin.want && v >= 16)
    return ((unsigned)_mm_movemask_epi8(
                _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + v - 16)), fin.pat)) &
            fin.want) == fin.want;
#endif
  return v >= nl + 3 && p[v - 1] == ':' && p[v - 2] == '"' && p[v - nl - 3] == '"' &&
         px_mem_eq(p + v - nl - 2, fin.name, nl);
}

/* What finish_usual found (answer_finish goes on from there) */
enum { FIN_DONE, FIN_UNREAD, FIN_OTHER, FIN_AT_END };

/* The usual finish reason of answer_finish, read without a call: a
 * string just before the usage (e: where it starts) or the end, whose
 * bytes hold no quote or backslash (finish_at_end), copied as they are,
 * cut to fit. FIN_DONE when it is one (or the protocol has none), else
 * what answer_finish is told: FIN_AT_END (null there), FIN_OTHER (another
 * shape), FIN_UNREAD (not looked at: the name not kept yet, or a finish
 * reason that is not the last). */
static inline __attribute__((always_inline)) int finish_usual(const px_wire_watch_t *w,
                                                              const char *p, size_t e,
                                                              px_answer_t *a) {
  size_t s, l;
  if (!w->finish_key) return FIN_DONE;
  if (w->finish_key != fin.name || !(w->finish_list || w->finish_last)) return FIN_UNREAD;
  if (!finish_at_end(p, e, &s, &l)) return FIN_OTHER;
  if (s == END) return FIN_AT_END;
  copy_plain(p, s, l, a->finish, sizeof(a->finish), &a->finish_len);
  return FIN_DONE;
}

/* The finish reason of answer_read: the last member of its name (Chat and
 * Gemini: before their list's name, back from the end; Anthropic: after
 * the content), else the one under outer. Out of line, after finish_usual
 * (usual: what it found). */
static __attribute__((noinline)) void answer_finish(const px_wire_watch_t *w,
                                                    const char *p, size_t n,
                                                    const char *outer, size_t tail,
                                                    px_answer_t *a, int usual) {
  size_t s = END, l;
  if (!w->finish_key) return;
  if (w->finish_list || w->finish_last) { /* only the usage and the like follow */
    /* before the usage member first: what follows it was walked already */
    if (usual == FIN_UNREAD) {
      if (w->finish_key != fin.name) fin_name(w->finish_key);
      usual = finish_at_end(p, tail != END ? tail : n, &s, &l) ? FIN_AT_END : FIN_OTHER;
    }
    if (usual == FIN_AT_END) {
      /* the member just before the end (usage): decided in a few bytes */
    } else
#if defined(__SSE2__)
        if (!(tail != END &&
              last_member_fast(p, tail, w->finish_key, w->finish_list, &s, &l)) &&
            !last_member_fast(p, n, w->finish_key, w->finish_list, &s, &l))
#endif
      last_member(p, n, w->finish_key, w->finish_list, &s, &l);
    /* none by the names as written: spelled with escapes? (rare: only then
     * are the answer's strings walked) */
    if (s == END && has_u_escape(p, n))
      last_member_esc(p, n, w->finish_key, w->finish_list, &s, &l);
  } else {
    const char *path[2] = {outer, w->finish_key};
    size_t d = outer ? 2 : 1;
    if (px_json_find(p, n, outer ? path : path + 1, d, &s, &l) != PX_JSON_FOUND) return;
  }
  copy_str(p, s, l, a->finish, sizeof(a->finish), &a->finish_len);
}

/* The id and the model both, when they lead the object at p[o] in compact
 * JSON (no space or escape before them, no container but empty ones): the
 * string values of the first members named nm[0] and nm[1] (lengths nl)
 * into at and len (quotes included), 1. 0 when the walk meets anything
 * else first (the caller walks as lead_pick does; nothing was set). */
static int lead_ids(const char *p, size_t n, size_t o, const char *const *nm,
                    const size_t *nl, size_t *at, size_t *len) {
  unsigned left = 3;
  at[0] = at[1] = END;
  for (size_t i = o + 1;;) {
    size_t kq, ve;
    if (i >= n || p[i] != '"' || (kq = plain_end(p, i, n)) == END || kq + 2 >= n ||
        p[kq + 1] != ':')
      return 0;
    size_t kl = kq - i - 1, vs = kq + 2, k = 2;
    for (size_t j = 0; j < 2; j++)
      if ((left >> j & 1) && kl == nl[j] && memcmp(p + i + 1, nm[j], kl) == 0) k = j;
    char c = p[vs];
    if (c == '"') {
      size_t vq = plain_end(p, vs, n);
      if (vq == END) return 0;
      ve = vq + 1;
    } else if ((c == '{' || c == '[') && vs + 1 < n && p[vs + 1] == (c == '{' ? '}' : ']')) {
      ve = vs + 2; /* empty: stepped over */
    } else if (c != '{' && c != '[') {
      ve = scalar_to_end(p, vs, n);
    } else {
      return 0;
    }
    if (ve >= n || (p[ve] != ',' && p[ve] != '}')) return 0;
    if (k < 2) {
      at[k] = vs;
      len[k] = ve - vs;
      if ((left &= ~(1u << k)) == 0) return 1;
    }
    if (p[ve] == '}') return 0;
    i = ve + 1;
  }
}

/* The names lead_find and lead_ids look for (the id's, the model's) of the
 * last protocol read, their lengths and (SSE2) their members' first bytes
 * "name":" as a pattern to compare sixteen bytes with (want: the bits of
 * its bytes; 0 when it is longer): set out of line when the protocol
 * changes */
static struct {
  const px_wire_watch_t *w;
  const char *nm[2];
  size_t nl[2];
#if defined(__SSE2__)
  __m128i pat[2];
  unsigned want[2];
#endif
} lead;

static __attribute__((noinline)) void lead_names(const px_wire_watch_t *w) {
  lead.nm[0] = w->answer_id ? w->answer_id : "id";
  lead.nm[1] = w->body_model ? w->body_model : "model";
  for (size_t k = 0; k < 2; k++) {
    lead.nl[k] = strlen(lead.nm[k]);
#if defined(__SSE2__)
    char b[16] = {0};
    lead.want[k] = 0;
    if (lead.nl[k] <= 12) {
      b[0] = '"';
      memcpy(b + 1, lead.nm[k], lead.nl[k]);
      memcpy(b + 1 + lead.nl[k], "\":\"", 3);
      lead.want[k] = (1u << (lead.nl[k] + 4)) - 1;
    }
    lead.pat[k] = _mm_loadu_si128((const __m128i *)b);
#endif
  }
  lead.w = w;
}

#if defined(__SSE2__)
/* Whether p[i] opens "name":" for lead's name k (the member's name, then a
 * string value) */
static inline int lead_name_at(const char *p, size_t n, size_t i, size_t k) {
  if (lead.want[k] && i + 16 <= n)
    return ((unsigned)_mm_movemask_epi8(
                _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i)), lead.pat[k])) &
            lead.want[k]) == lead.want[k];
  size_t e = i + lead.nl[k] + 1; /* the name's closing quote */
  return e + 2 < n && p[i] == '"' && p[e] == '"' && p[e + 1] == ':' && p[e + 2] == '"' &&
         px_mem_eq(p + i + 1, lead.nm[k], lead.nl[k]);
}

/* lead_scan's places in p[0..16): the quotes followed by f (f0's first
 * byte, or f1's too with both), and the brackets */
static inline unsigned lead_mask(const char *p, __m128i f0, __m128i f1, int both) {
  __m128i v = _mm_loadu_si128((const __m128i *)p),
          f = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + 1)), f0);
  if (both)
    f = _mm_or_si128(f, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + 1)), f1));
  return (unsigned)_mm_movemask_epi8(
      _mm_or_si128(_mm_and_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), f),
                   _mm_cmpeq_epi8(_mm_or_si128(v, _mm_set1_epi8(0x20)),
                                  _mm_set1_epi8('{')))); /* '[' | 0x20 is '{' too */
}

/* lead_find's search from p[b] for lead's names in left (1: the first, 2:
 * the second, 3: both; a constant: one compare a block when one is left):
 * an unescaped quote, a name, then ":" and a quote opens a member of that
 * name holding a string (inside a string the quotes would be escaped),
 * and before the first '{' or '[' (in a string or not) that member is one
 * of the object's leading ones. The places where a quote is followed by a
 * name's first byte, and the brackets, in one mask of 32 bytes (16 at the
 * end; none in the last 16), taken in order up to the first bracket. */
static inline __attribute__((always_inline)) int lead_scan(const char *p, size_t n,
                                                           size_t b, unsigned left,
                                                           size_t *at, size_t *len) {
  const __m128i f0 = _mm_set1_epi8(lead.nm[left & 1 ? 0 : 1][0]),
                f1 = _mm_set1_epi8(lead.nm[left & 2 ? 1 : 0][0]);
  const int both = left == 3; /* the places of both names, to the end */
  for (;; b += 32) {
    unsigned m;
    if (b + 33 <= n)
      m = lead_mask(p + b, f0, f1, both) | lead_mask(p + b + 16, f0, f1, both) << 16;
    else if (b + 17 <= n)
      m = lead_mask(p + b, f0, f1, both);
    else
      return 0;
    for (; m; m &= m - 1) {
      size_t i = b + (size_t)__builtin_ctz(m);
      if (p[i] != '"') return 0;      /* a bracket: the leading members end */
      if (p[i - 1] == '\\') continue; /* escaped: inside a string */
      for (size_t k = 0; k < 2; k++) {
        if (!(left >> k & 1) || !lead_name_at(p, n, i, k)) continue;
        size_t vs = i + lead.nl[k] + 3, q = plain_end(p, vs, n);
        if (q == END) return 0; /* escaped or cut: walked */
        at[k] = vs;
        len[k] = q + 1 - vs;
        if ((left &= ~(1u << k)) == 0) return 1;
        break;
      }
    }
  }
}

/* lead_ids by the names' bytes rather than a walk of the members
 * (lead_scan). 1 with both plain string values set as lead_ids sets them;
 * 0 when a container, the text's last bytes or an escaped value come
 * first (lead_ids walks). */
static inline __attribute__((always_inline)) int lead_find(const char *p, size_t n,
                                                           size_t o, size_t *at,
                                                           size_t *len) {
  at[0] = at[1] = END;
  /* the first member named nm[0] (the id: most answers begin with it) is
   * the first match there would be: taken at once, the other name looked
   * for after it (a bracket in the id's string opens nothing) */
  if (lead_name_at(p, n, o + 1, 0)) {
    size_t vs = o + lead.nl[0] + 4, q = plain_end(p, vs, n);
    if (q == END) return 0; /* escaped or cut: walked */
    at[0] = vs;
    len[0] = q + 1 - vs;
    return lead_scan(p, n, q + 1, 2, at, len);
  }
  return lead_scan(p, n, o + 1, 3, at, len);
}
#endif

/* answer_read's id and model by the walks (the object under outer, an
 * answer that does not lead with them, the one still missing), out of
 * line */
static __attribute__((noinline)) void ids_walk(const px_wire_watch_t *w, const char *p,
                                               size_t n, const char *outer,
                                               px_answer_t *a) {
  const char *path[2];
  size_t d = 0, s, l;
  if (outer) path[d++] = outer;
  const char *names[2] = {w->answer_id ? w->answer_id : "id",
                          w->body_model ? w->body_model : "model"};
  char *dst[2] = {a->id, a->model};
  unsigned char *dlen[2] = {&a->id_len, &a->model_len};
  _Static_assert(sizeof(a->id) == sizeof(a->model), "one size for both");
  /* the object that holds them: the answer, or an event's inner object
   * (found once, then walked as the answer is) */
  size_t o = 0, e = n;
  while (o < n && (p[o] == ' ' || p[o] == '\t' || p[o] == '\n' || p[o] == '\r')) o++;
  if (outer) { /* its start: the walk stops at its closing brace */
    px_json_pick_t in = {.n = 0, .until_found = 1};
    px_json_pick_add(&in, outer);
    if (!lead_pick(p, n, o, &in) && in.at[0] == END &&
        px_json_find(p, n, path, 1, &s, &l) == PX_JSON_FOUND)
      in.at[0] = s;
    if (in.at[0] != END && p[in.at[0]] == '{')
      o = in.at[0];
    else
      e = 0; /* no such object: nothing to walk */
  }
  px_json_pick_t pk = {.n = 0, .until_found = 1};
  char *to[2];
  unsigned char *tlen[2];
  for (size_t k = 0; k < 2; k++)
    if (!dst[k][0]) {
      to[pk.n] = dst[k];
      tlen[pk.n] = dlen[k];
      px_json_pick_add(&pk, names[k]);
    }
  if (o < e && !lead_pick(p, e, o, &pk)) { /* the names still missing, walked */
    px_json_pick_t rest = {.n = 0, .until_found = 1};
    size_t of[2];
    for (size_t k = 0; k < pk.n; k++)
      if (pk.at[k] == END) {
        of[rest.n] = k;
        px_json_pick_add(&rest, pk.name[k]);
      }
    px_json_pick(p, e, o, &rest);
    for (size_t k = 0; k < rest.n; k++)
      pk.at[of[k]] = rest.at[k], pk.len[of[k]] = rest.len[k];
  }
  for (size_t k = 0; k < pk.n; k++)
    copy_str(p, pk.at[k], pk.len[k], to[k], sizeof(a->id), tlen[k]);
}

/* answer_read but for the usual answer (answer_usual) */
static __attribute__((noinline)) void answer_rest(const px_wire_watch_t *w, const char *p,
                                                  size_t n, const char *outer,
                                                  size_t tail, px_answer_t *a,
                                                  int finish) {
  /* the id and the model lead the answer in every protocol but Gemini's:
   * both found at once (lead_find, else a walk of the leading members) */
  if (!outer && !a->id[0] && !a->model[0]) { /* both leading a compact answer */
    size_t at[2], len[2], o = px_json_ws((const unsigned char *)p, n, 0);
    if (w != lead.w) lead_names(w);
    if (o < n && p[o] == '{') {
#if defined(__SSE2__)
      if (lead_find(p, n, o, at, len)) { /* two strings */
        copy_plain(p, at[0], len[0], a->id, sizeof(a->id), &a->id_len);
        copy_plain(p, at[1], len[1], a->model, sizeof(a->model), &a->model_len);
      } else
#endif
          if (lead_ids(p, n, o, lead.nm, lead.nl, at, len)) {
        copy_str(p, at[0], len[0], a->id, sizeof(a->id), &a->id_len);
        copy_str(p, at[1], len[1], a->model, sizeof(a->model), &a->model_len);
      }
    }
  }
  if (!a->id[0] || !a->model[0]) ids_walk(w, p, n, outer, a);
  int usual;
  if (finish && (usual = finish_usual(w, p, tail != END ? tail : n, a)) != FIN_DONE)
    answer_finish(w, p, n, outer, tail, a, usual);
}

/* The usual id and model at the top, read without a call: a compact
 * answer led by them (lead_find), neither empty, the protocol's names
 * kept. 0 when anything else comes: answer_rest reads them (the id and
 * model set here are the ones it would set). */
static inline int ids_usual(const px_wire_watch_t *w, const char *p, size_t n,
                            px_answer_t *a) {
#if defined(__SSE2__)
  size_t at[2], len[2];
  if (w != lead.w || n == 0 || p[0] != '{' || a->id[0] || a->model[0] ||
      !lead_find(p, n, 0, at, len))
    return 0;
  copy_plain(p, at[0], len[0], a->id, sizeof(a->id), &a->id_len);
  copy_plain(p, at[1], len[1], a->model, sizeof(a->model), &a->model_len);
  return a->id[0] && a->model[0];
#else
  return 0;
#endif
}

/* The id, model and (finish) finish reason of the answer p[0..n) (outer:
 * of its member of that name), a whole body's usage starting at tail
 * (END: not known): the usual ones read here (ids_usual, finish_usual),
 * else by answer_rest and answer_finish */
static __attribute__((noinline)) void answer_read(const px_wire_watch_t *w, const char *p,
                                                  size_t n, const char *outer,
                                                  size_t tail, px_answer_t *a,
                                                  int finish) {
  int usual;
  if (outer || !ids_usual(w, p, n, a))
    answer_rest(w, p, n, outer, tail, a, finish);
  else if (finish && (usual = finish_usual(w, p, tail != END ? tail : n, a)) != FIN_DONE)
    answer_finish(w, p, n, NULL, tail, a, usual);
}

void px_answer_read(const px_wire_watch_t *w, const char *p, size_t n, const char *outer,
                    px_answer_t *a) {
  answer_read(w, p, n, outer, END, a, 1);
}

void px_answer_ids(const px_wire_watch_t *w, const char *p, size_t n, px_answer_t *a) {
  answer_read(w, p, n, NULL, END, a, 0);
}

void px_answer_finish(const px_wire_watch_t *w, const char *p, size_t n, px_answer_t *a) {
  int usual = finish_usual(w, p, n, a);
  if (usual != FIN_DONE) answer_finish(w, p, n, NULL, END, a, usual);
}

/* a string's content into dst as copy_str cuts it */
static void set_str(px_str_t v, char *dst, size_t cap, unsigned char *len) {
  size_t l = v.len < cap ? v.len : cap - 1;
  while (l > 0 && v.ptr[l - 1] == '\\' && l < v.len) l--; /* never half an escape */
  memcpy(dst, v.ptr, l);
  dst[l] = 0;
  *len = (unsigned char)l;
}

void px_answer_set(px_answer_t *a, px_str_t id, px_str_t model, px_str_t finish) {
  if (id.len) set_str(id, a->id, sizeof(a->id), &a->id_len);
  if (model.len) set_str(model, a->model, sizeof(a->model), &a->model_len);
  if (finish.len) set_str(finish, a->finish, sizeof(a->finish), &a->finish_len);
}

void px_answer_wrote(px_answer_t *a, const px_buf_t *b, size_t id_at, size_t id_end,
                     size_t model_at, size_t model_end, const char *finish) {
  if (a == NULL) return;
  a->noted = 1;
  px_str_t m = PX_STR_NULL;
  if (model_end >= model_at + 2 && b->data[model_at] == '"')
    m = (px_str_t){b->data + model_at + 1, model_end - model_at - 2};
  px_answer_set(a, (px_str_t){b->data + id_at, id_end - id_at}, m, px_str(finish));
}

void px_answer_body(const px_wire_watch_t *w, const char *p, size_t n, size_t tail,
                    px_answer_t *a) {
  if (a->id[0] && a->model[0] && a->finish[0]) return; /* a decoder's (px_answer_set) */
  answer_read(w, p, n, NULL, tail, a, 1);
}

void px_answer_event(const px_wire_watch_t *w, px_str_t event, const char *p, size_t n,
                     px_answer_t *a) {
  if (n == 0 || p[0] != '{') return; /* [DONE] and the like */
  for (size_t k = 0; k < 3 && w->terminal_events[k]; k++)
    if (px_str_eq(event, w->terminal_events[k])) {
      px_answer_read(w, p, n, w->terminal_outer, a);
      return;
    }
  if (w->start_event && px_str_eq(event, w->start_event))
    px_answer_read(w, p, n, w->start_outer, a);
  else if (w->delta_event && px_str_eq(event, w->delta_event))
    px_answer_read(w, p, n, w->delta_outer, a);
  else if (!w->start_event && !w->terminal_events[0])
    px_answer_read(w, p, n, NULL, a); /* every data chunk says it all */
}
