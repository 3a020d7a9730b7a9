/* passthru.c - same-protocol forwarding: a JSON member scanner that finds
 * `model` without parsing the document, the stream rewriter, and terminal
 * event detection.
 *
 * The scanner walks raw JSON text and never decodes strings: member names
 * are compared byte for byte (the names we look for need no escaping).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "proxai/json.h"
#include "proxai/passthru.h"
#include "proxai/scrub.h"

#define END ((size_t)-1)
#define MORE ((size_t)-2)

static size_t skip_ws(const char *p, size_t i, size_t n) {
  while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) i++;
  return i;
}

/* i at the opening quote; returns the index after the closing one. */
static size_t skip_string(const char *p, size_t i, size_t n) {
  const unsigned char *u = (const unsigned char *)p;
  for (i++;;) {
    i = px_json_plain(u, n, i);
    if (i >= n) return MORE;
    if (u[i] == '"') return i + 1;
    i += u[i] == '\\' ? 2 : 1; /* an escape takes the next byte with it */
  }
}

/* Bytes that matter inside a container: quotes and brackets. */
static const unsigned char structural[256] = {
    ['"'] = 1, ['{'] = 2, ['['] = 2, ['}'] = 3, [']'] = 3,
};
/* Bytes that end a scalar. */
static const unsigned char scalar_end[256] = {
    [0] = 1, [','] = 1, ['}'] = 1, [']'] = 1, [' '] = 1, ['\t'] = 1, ['\r'] = 1, ['\n'] = 1,
};

static size_t skip_value(const char *p, size_t i, size_t n) {
  if (i >= n) return MORE;
  char c = p[i];
  if (c == '"') return skip_string(p, i, n);
  if (c == '{' || c == '[') {
    int depth = 0;
    while (i < n) {
      unsigned char k = structural[(unsigned char)p[i]];
      if (k == 0) {
        i++;
        continue;
      }
      if (k == 1) {
        i = skip_string(p, i, n);
        if (i == MORE) return MORE;
        continue;
      }
      if (k == 2) depth++;
      else if (--depth == 0) return i + 1;
      i++;
    }
    return MORE;
  }
  size_t s = i;
  while (i < n && !scalar_end[(unsigned char)p[i]]) i++;
  if (i == n) return MORE;
  return i > s ? i : END;
}

int px_json_find(const char *p, size_t n, const char *const *path, size_t depth,
                 size_t *start, size_t *len) {
  size_t i = skip_ws(p, 0, n);
  size_t level = 0;
  for (;;) {
    if (i >= n) return PX_JSON_MORE;
    if (p[i] != '{') return level == 0 ? PX_JSON_BAD : PX_JSON_ABSENT;
    i = skip_ws(p, i + 1, n);
    if (i >= n) return PX_JSON_MORE;
    if (p[i] == '}') return PX_JSON_ABSENT;
    const char *want = path[level];
    size_t wl = strlen(want);
    for (;;) {
      if (i >= n) return PX_JSON_MORE;
      if (p[i] != '"') return PX_JSON_BAD;
      size_t ke = skip_string(p, i, n);
      if (ke == MORE) return PX_JSON_MORE;
      int match = ke - i - 2 == wl && memcmp(p + i + 1, want, wl) == 0;
      i = skip_ws(p, ke, n);
      if (i >= n) return PX_JSON_MORE;
      if (p[i] != ':') return PX_JSON_BAD;
      i = skip_ws(p, i + 1, n);
      if (match) {
        if (level + 1 == depth) {
          size_t ve = skip_value(p, i, n);
          if (ve == MORE) return PX_JSON_MORE;
          if (ve == END) return PX_JSON_BAD;
          *start = i;
          *len = ve - i;
          return PX_JSON_FOUND;
        }
        level++;
        break; /* descend into this value */
      }
      size_t ve = skip_value(p, i, n);
      if (ve == MORE) return PX_JSON_MORE;
      if (ve == END) return PX_JSON_BAD;
      i = skip_ws(p, ve, n);
      if (i >= n) return PX_JSON_MORE;
      if (p[i] == '}') return PX_JSON_ABSENT;
      if (p[i] != ',') return PX_JSON_BAD;
      i = skip_ws(p, i + 1, n);
    }
  }
}

/* Up to PICK_MAX member names looked for in one walk of an object. */
#define PICK_MAX 6
typedef struct pick {
  const char *name[PICK_MAX];
  size_t nlen[PICK_MAX];
  size_t n;
  size_t at[PICK_MAX], len[PICK_MAX]; /* value spans; at == END: absent */
} pick_t;

static void pick_add(pick_t *pk, const char *name) {
  pk->name[pk->n] = name;
  pk->nlen[pk->n] = strlen(name);
  pk->at[pk->n] = END;
  pk->len[pk->n++] = 0;
}

/* One walk over the object at p[i] ('{'): the value span of the first
 * member named like each of pk's names (compared byte for byte). Returns
 * the index after the closing brace, MORE (cut short) or END (not an
 * object, or broken). */
static size_t pick_members(const char *p, size_t n, size_t i, pick_t *pk) {
  if (i >= n) return MORE;
  if (p[i] != '{') return END;
  i = skip_ws(p, i + 1, n);
  if (i >= n) return MORE;
  if (p[i] == '}') return i + 1;
  for (;;) {
    if (p[i] != '"') return END;
    size_t ke = skip_string(p, i, n);
    if (ke == MORE) return MORE;
    size_t kl = ke - i - 2, hit = PICK_MAX;
    for (size_t k = 0; k < pk->n; k++)
      if (pk->at[k] == END && pk->nlen[k] == kl && memcmp(p + i + 1, pk->name[k], kl) == 0) {
        hit = k;
        break;
      }
    i = skip_ws(p, ke, n);
    if (i >= n) return MORE;
    if (p[i] != ':') return END;
    i = skip_ws(p, i + 1, n);
    size_t ve = skip_value(p, i, n);
    if (ve == MORE || ve == END) return ve;
    if (hit < PICK_MAX) {
      pk->at[hit] = i;
      pk->len[hit] = ve - i;
    }
    i = skip_ws(p, ve, n);
    if (i >= n) return MORE;
    if (p[i] == '}') return i + 1;
    if (p[i] != ',') return END;
    i = skip_ws(p, i + 1, n);
    if (i >= n) return MORE;
  }
}

int px_json_complete(const char *p, size_t n) {
  size_t i = skip_ws(p, 0, n);
  if (i >= n || p[i] != '{') return 0;
  i = skip_value(p, i, n);
  if (i == MORE || i == END) return 0;
  return skip_ws(p, i, n) == n;
}

int px_json_replace_str(px_buf_t *out, const char *p, size_t n,
                        const char *const *path, size_t depth, const char *value) {
  size_t s, l;
  int rc = px_json_find(p, n, path, depth, &s, &l);
  if (rc != PX_JSON_FOUND || p[s] != '"') {
    int e = px_buf_append(out, p, n);
    return e < 0 ? e : (rc == PX_JSON_FOUND ? PX_JSON_ABSENT : rc);
  }
  int e = px_buf_append(out, p, s);
  if (e == 0) e = px_buf_json_str(out, value, strlen(value));
  if (e == 0) e = px_buf_append(out, p + s + l, n - s - l);
  return e < 0 ? e : PX_JSON_FOUND;
}

/* ---------------------------------------------------------------------- */
/* usage                                                                     */

static int64_t find_int(const char *p, size_t n, const char *const *path, size_t depth) {
  size_t s, l;
  if (px_json_find(p, n, path, depth, &s, &l) != PX_JSON_FOUND) return -1;
  if (p[s] < '0' || p[s] > '9') return -1;
  return strtoll(p + s, NULL, 10);
}

/* Usage in a body or event of a protocol, its usage object under outer (or
 * at the top): the member names come from the protocol's watch descriptor.
 * The usage object is located once; its members are read inside it. */
static void usage_at(const px_wire_watch_t *w, const char *p, size_t n, const char *outer,
                     px_usage_t *u) {
  const char *in_name = w->usage_in, *out_name = w->usage_out;
  const char *path[2];
  size_t d = 0, s, l;
  if (outer) path[d++] = outer;
  path[d++] = w->usage_obj;
  int rc = px_json_find(p, n, path, d, &s, &l);
  if (rc == PX_JSON_MORE) { /* a prefix cut inside usage: read what is there */
    const char *pin[3] = {path[0], path[1], NULL}, *pout[3] = {path[0], path[1], NULL};
    pin[d] = in_name;
    pout[d] = out_name;
    int64_t v = find_int(p, n, pin, d + 1);
    if (v >= 0) u->input_tokens = v;
    v = find_int(p, n, pout, d + 1);
    if (v >= 0) u->output_tokens = v;
    return;
  }
  if (rc != PX_JSON_FOUND || p[s] != '{') return;
  p += s;
  n = l;
  int64_t v = find_int(p, n, &in_name, 1);
  if (v >= 0) {
    u->input_tokens = v;
    for (size_t k = 0; k < 2 && w->usage_in_extra[k]; k++) {
      int64_t c = find_int(p, n, &w->usage_in_extra[k], 1);
      if (c > 0) u->input_tokens += c;
    }
  }
  v = find_int(p, n, &out_name, 1);
  if (v >= 0) {
    int64_t c = w->usage_out_extra ? find_int(p, n, &w->usage_out_extra, 1) : -1;
    u->output_tokens = v + (c > 0 ? c : 0);
  }
}


/* A non-negative integer value at p[0..n), else -1. */
static int64_t int_at(const char *p, size_t n) {
  if (n == 0 || p[0] < '0' || p[0] > '9') return -1;
  int64_t v = 0;
  for (size_t i = 0; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
    if (v > (INT64_MAX - (p[i] - '0')) / 10) return INT64_MAX; /* as strtoll saturates */
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

/* The first index j >= i (or n) where p[j] may be a quote or a bracket,
 * sixteen (SSE2) or eight bytes at a time. Masking off bits 0x26 maps the
 * four brackets to 0x59 (so do 'Y', 'y', '_' and DEL: the caller checks the
 * byte). */
static size_t next_mark(const unsigned char *p, size_t i, size_t n) {
#if defined(__SSE2__)
  const __m128i mask = _mm_set1_epi8((char)~0x26), br = _mm_set1_epi8(0x59),
                qt = _mm_set1_epi8('"');
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
    __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(_mm_and_si128(v, mask), br),
                               _mm_cmpeq_epi8(v, qt));
    unsigned m = (unsigned)_mm_movemask_epi8(hit);
    if (m) return i + (size_t)__builtin_ctz(m);
  }
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  for (; i + 8 <= n; i += 8) {
    uint64_t v, b, q;
    memcpy(&v, p + i, 8);
    b = (v & ~(ones * 0x26)) ^ (ones * 0x59);
    q = v ^ (ones * '"');
    uint64_t t = ((b - ones) & ~b & high) | ((q - ones) & ~q & high);
    if (t) return i + (size_t)(__builtin_ctzll(t) >> 3);
  }
#endif
  while (i < n && p[i] != '"' && p[i] != '{' && p[i] != '}' && p[i] != '[' && p[i] != ']') i++;
  return i;
}

/* One walk of the object text p[0..n): 1 when it is one complete object
 * (brackets balanced outside strings, only whitespace after it), with
 * *vs, *vl the value of the first top-level member named `name` when that
 * value is an object (*vs = END otherwise); else 0. Structure only, as
 * px_json_complete: strings are skipped, not checked. */
static int top_object_member(const char *text, size_t n, const char *name, size_t *vs,
                             size_t *vl) {
  const unsigned char *p = (const unsigned char *)text;
  size_t nl = strlen(name), i = skip_ws(text, 0, n), depth = 0, open = END;
  int seen = 0; /* the first member of that name decides, as px_json_find */
  *vs = END;
  if (i >= n || p[i] != '{') return 0;
  for (;; i++) {
    i = next_mark(p, i, n);
    if (i >= n) return 0;
    unsigned char c = p[i];
    if (c == '"') {
      size_t s = i;
      for (i++;; i++) { /* to the closing quote; an escape takes the next byte */
        i = px_json_plain(p, n, i);
        if (i >= n) return 0;
        if (p[i] == '"') break;
        if (p[i] == '\\') i++;
      }
      if (depth == 1 && !seen && i - s - 1 == nl && memcmp(p + s + 1, name, nl) == 0) {
        size_t j = skip_ws(text, i + 1, n);
        if (j < n && p[j] == ':') { /* a member name, not a value */
          seen = 1;
          j = skip_ws(text, j + 1, n);
          if (j < n && p[j] == '{') open = j;
        }
      }
    } else if (c == '{' || c == '[') {
      if (i == open) *vs = i;
      depth++;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return 0;
      if (--depth == 0) return skip_ws(text, i + 1, n) == n;
      if (depth == 1 && *vs != END && *vl == 0) *vl = i + 1 - *vs;
    } /* else a byte that only looked like a bracket */
  }
}

#if defined(__SSE2__)
/* Bit k set when byte k of the 64 bytes at v equals c. */
static inline uint64_t eq64(const __m128i v[4], char c) {
  const __m128i cv = _mm_set1_epi8(c);
  uint64_t m = 0;
  for (int k = 0; k < 4; k++)
    m |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v[k], cv)) << (16 * k);
  return m;
}

/* Bit k = parity of the bits 0..k of x: inside a string, from its opening
 * quote (set) to its closing one (clear). */
static inline uint64_t prefix_xor(uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

/* Bit k set when byte k of the 64 bytes at v may be a bracket: masking off
 * bits 0x26 maps all four to 0x59 (so do 'Y', 'y', '_' and DEL: the caller
 * checks the byte). */
static inline uint64_t brackets64(const __m128i v[4]) {
  const __m128i mask = _mm_set1_epi8((char)~0x26), br = _mm_set1_epi8(0x59);
  uint64_t m = 0;
  for (int k = 0; k < 4; k++)
    m |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(v[k], mask), br))
         << (16 * k);
  return m;
}

/* top_object_member() over 64-byte blocks, as simdjson finds structure:
 * masks of quotes, backslashes and brackets; escaped quotes dropped; the
 * inside of strings from a prefix XOR of the quotes; then only brackets
 * and opening quotes outside strings are visited, never the bytes of a
 * string. */
static int top_object_member_blocks(const char *text, size_t n, const char *name,
                                    size_t *vs, size_t *vl) {
  const unsigned char *p = (const unsigned char *)text;
  size_t nl = strlen(name), i = skip_ws(text, 0, n);
  *vs = END;
  if (i >= n || p[i] != '{' || nl == 0) return 0;
  size_t depth = 0, open = END;
  int seen = 0; /* the first member of that name decides, as px_json_find */
  uint64_t esc_carry = 0, str_carry = 0;
  for (size_t b = 0; b < n; b += 64) {
    __m128i v[4];
    if (b + 64 <= n) {
      for (int k = 0; k < 4; k++) v[k] = _mm_loadu_si128((const __m128i *)(p + b + 16 * k));
    } else { /* the last piece, padded with spaces */
      unsigned char tail[64];
      memset(tail, ' ', sizeof(tail));
      memcpy(tail, p + b, n - b);
      for (int k = 0; k < 4; k++) v[k] = _mm_loadu_si128((const __m128i *)(tail + 16 * k));
    }
    uint64_t bs = eq64(v, '\\'), qt = eq64(v, '"'), bk = brackets64(v);
    uint64_t escaped = esc_carry; /* bytes taken by a backslash before them */
    esc_carry = 0;
    for (uint64_t m = bs; m; m &= m - 1) {
      unsigned j = (unsigned)__builtin_ctzll(m);
      if ((escaped >> j) & 1) continue; /* an escaped backslash escapes nothing */
      if (j == 63) esc_carry = 1;
      else escaped |= 1ull << (j + 1);
    }
    qt &= ~escaped;
    uint64_t instr = prefix_xor(qt) ^ str_carry; /* set from an opening quote on */
    str_carry = (uint64_t)((int64_t)instr >> 63);
    /* opening quotes whose next byte is the name's first (the last one's
     * next byte is in the next block: kept, checked below) */
    uint64_t oq = qt & instr & ((eq64(v, name[0]) >> 1) | (1ull << 63));
    for (uint64_t ev = bk & ~instr;; ev &= ev - 1) {
      unsigned k = ev ? (unsigned)__builtin_ctzll(ev) : 64;
      /* strings before this bracket: only the top object's member names
       * matter, so only at depth 1 are they looked at */
      uint64_t before = k == 64 ? oq : oq & ((1ull << k) - 1);
      oq &= ~before;
      for (; depth == 1 && !seen && before; before &= before - 1) {
        size_t at = b + (size_t)__builtin_ctzll(before);
        if (at + nl + 1 >= n || p[at + 1] != (unsigned char)name[0] ||
            p[at + nl + 1] != '"' || memcmp(p + at + 1, name, nl) != 0)
          continue;
        size_t j = skip_ws(text, at + nl + 2, n);
        if (j < n && p[j] == ':') { /* a name, not a value */
          seen = 1;
          j = skip_ws(text, j + 1, n);
          if (j < n && p[j] == '{') open = j;
        }
      }
      if (k == 64) break;
      size_t at = b + k;
      unsigned char c = p[at];
      if (c == '{' || c == '[') {
        if (at == open) *vs = at;
        depth++;
      } else if (c == '}' || c == ']') {
        if (depth == 0) return 0;
        if (--depth == 0) return skip_ws(text, at + 1, n) == n;
        if (depth == 1 && *vs != END && *vl == 0) *vl = at + 1 - *vs;
      } /* else a byte that only looked like a bracket */
    }
  }
  return 0;
}
#endif

/* The opening quote of the string whose closing quote is p[j], or END: the
 * nearest quote before it that no odd run of backslashes escapes. */
static size_t string_open(const char *p, size_t j) {
  while (j > 0) {
    const char *q = memrchr(p, '"', j);
    if (q == NULL) return END;
    j = (size_t)(q - p);
    size_t b = j;
    while (b > 0 && p[b - 1] == '\\') b--;
    if (((j - b) & 1) == 0) return j;
  }
  return END;
}

/* The last index j < i (j >= lo) where p[j] may be a quote or a bracket
 * (next_mark's test, backwards), else END. */
static size_t prev_mark(const unsigned char *p, size_t lo, size_t i) {
#if defined(__SSE2__)
  const __m128i mask = _mm_set1_epi8((char)~0x26), br = _mm_set1_epi8(0x59),
                qt = _mm_set1_epi8('"');
  for (; i >= lo + 16; i -= 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + i - 16));
    __m128i hit =
        _mm_or_si128(_mm_cmpeq_epi8(_mm_and_si128(v, mask), br), _mm_cmpeq_epi8(v, qt));
    unsigned m = (unsigned)_mm_movemask_epi8(hit);
    if (m) return i - 16 + (size_t)(31 - __builtin_clz(m));
  }
#endif
  while (i > lo) {
    unsigned char c = p[--i];
    if (c == '"' || c == '{' || c == '}' || c == '[' || c == ']') return i;
  }
  return END;
}

/* Every protocol puts usage last: the top-level member `name` found walking
 * back from the closing brace, structure only (strings skipped, as the
 * forward walk). On the way back, the members of the current second-level
 * object named in pk are noted (pk->at: their values' first bytes, the last
 * of a repeated name). 1 when found: its value is an object and pk holds
 * its members, or it is not (pk->n = 0: nothing to read); 0 when the walk
 * reached the opening brace without meeting it (one object, no usage); -1
 * when the text does not read back as one object (not ending in '}',
 * unbalanced, a stray quote): the caller walks forward instead. Reading
 * from the end costs the bytes after usage, not the whole answer; when a
 * name repeats at the top, the last one counts, as in jansson and the
 * clients' JSON parsers. */
static int top_member_from_end(const char *text, size_t n, const char *name, pick_t *pk) {
  const unsigned char *p = (const unsigned char *)text;
  size_t nl = strlen(name), first = skip_ws(text, 0, n), j = n;
  while (j > first &&
         (p[j - 1] == ' ' || p[j - 1] == '\t' || p[j - 1] == '\n' || p[j - 1] == '\r'))
    j--;
  if (j <= first || p[j - 1] != '}' || p[first] != '{') return -1;
  size_t depth = 0, open = END;
  for (;;) {
    j = prev_mark(p, first, j);
    if (j == END) return -1;
    unsigned char c = p[j];
    if (c == '"') {
      size_t k = string_open(text, j);
      if (k == END || k < first) return -1;
      size_t kl = j - k - 1, e = skip_ws(text, j + 1, n);
      if (depth == 2 && e < n && p[e] == ':') { /* a member of a second-level object */
        for (size_t m = 0; m < pk->n; m++)
          if (pk->at[m] == END && pk->nlen[m] == kl &&
              memcmp(p + k + 1, pk->name[m], kl) == 0) {
            pk->at[m] = skip_ws(text, e + 1, n);
            break;
          }
      } else if (depth == 1 && kl == nl && e < n && p[e] == ':' &&
                 memcmp(p + k + 1, name, nl) == 0) {    /* a top-level member name */
        if (skip_ws(text, e + 1, n) != open) pk->n = 0; /* not an object */
        return 1;
      }
      j = k;
    } else if (c == '}' || c == ']') {
      if (++depth == 2) /* a new second-level container: forget the last */
        for (size_t m = 0; m < pk->n; m++) pk->at[m] = END;
    } else if (c == '{' || c == '[') {
      if (depth == 0) return -1;
      if (depth == 2) open = c == '{' ? j : END;
      if (--depth == 0) return j == first ? 0 : -1;
    }
  }
}

int px_usage_scan(px_proto_t proto, const char *p, size_t n, px_usage_t *u) {
  const px_wire_watch_t *w = &px_proto_get(proto)->watch;
  /* the usage object's counters */
  enum { IN, OUT, OUT_X, IN_X };
  pick_t us = {.n = 0};
  pick_add(&us, w->usage_in);
  pick_add(&us, w->usage_out);
  pick_add(&us, w->usage_out_extra ? w->usage_out_extra : "");
  for (size_t k = 0; k < 2 && w->usage_in_extra[k]; k++) pick_add(&us, w->usage_in_extra[k]);
  if (!w->usage_out_extra) us.nlen[OUT_X] = (size_t)-1; /* never matches */
  size_t names = us.n;
  int rc = top_member_from_end(p, n, w->usage_obj, &us);
  if (rc == 0 || (rc == 1 && us.n == 0)) return 1;
  if (rc < 0) { /* forward: the whole body once, then the usage object */
    pick_t top = {.n = 1};
    top.len[0] = 0;
#if defined(__SSE2__)
    rc = top_object_member_blocks(p, n, w->usage_obj, &top.at[0], &top.len[0]);
#endif
    if (rc < 0) {
      top.len[0] = 0;
      rc = top_object_member(p, n, w->usage_obj, &top.at[0], &top.len[0]);
    }
    if (!rc) return 0;
    if (top.at[0] == END) return 1;
    us.n = names;
    for (size_t k = 0; k < us.n; k++) us.at[k] = END;
    pick_members(p, top.at[0] + top.len[0], top.at[0], &us);
  }
  for (size_t k = 0; k < us.n; k++) /* int_at reads to the first non-digit */
    if (us.at[k] != END) us.len[k] = n - us.at[k];
  int64_t v = us.at[IN] == END ? -1 : int_at(p + us.at[IN], us.len[IN]);
  if (v >= 0) {
    u->input_tokens = v;
    for (size_t k = IN_X; k < us.n; k++) {
      int64_t c = us.at[k] == END ? -1 : int_at(p + us.at[k], us.len[k]);
      if (c > 0) u->input_tokens += c;
    }
  }
  v = us.at[OUT] == END ? -1 : int_at(p + us.at[OUT], us.len[OUT]);
  if (v >= 0) {
    int64_t c = us.at[OUT_X] == END ? -1 : int_at(p + us.at[OUT_X], us.len[OUT_X]);
    u->output_tokens = v + (c > 0 ? c : 0);
  }
  return 1;
}

void px_usage_from_body(px_proto_t p, const char *body, size_t len, px_usage_t *u) {
  if (px_usage_scan(p, body, len, u)) return; /* the usual case: one walk */
  usage_at(&px_proto_get(p)->watch, body, len, NULL, u); /* a prefix */
}

/* ---------------------------------------------------------------------- */
/* stream watcher                                                            */

/* An error frame in data: a top-level "error" member that is not null. */
static int data_error(const char *d, size_t n) {
  static const char *const err[] = {"error"};
  size_t s, l;
  return n > 9 && d[0] == '{' && memmem(d, n, "\"error\"", 7) != NULL &&
         px_json_find(d, n, err, 1, &s, &l) == PX_JSON_FOUND && d[s] != 'n';
}

/* d[0..n) holds "key" (a quick test before a scan) */
static int has_key(const char *d, size_t n, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = d; (p = memchr(p, '"', (size_t)(d + n - p))) != NULL; p++)
    if ((size_t)(d + n - p) > kl + 1 && memcmp(p + 1, key, kl) == 0 && p[kl + 1] == '"')
      return 1;
  return 0;
}

/* One event, judged by the protocol's watch descriptor: terminal, error,
 * finish and usage. */
static int on_event(void *arg, const px_sse_event_t *ev) {
  px_passthru_t *pt = arg;
  const px_wire_watch_t *w = &px_proto_get(pt->proto)->watch;
  const char *d = ev->data.ptr;
  size_t n = ev->data.len;
  for (size_t k = 0; k < 3 && w->terminal_events[k]; k++)
    if (px_str_eq(ev->event, w->terminal_events[k])) {
      pt->terminal = 1;
      usage_at(w, d, n, w->terminal_outer, &pt->usage);
      return 0;
    }
  if (w->error_event && px_str_eq(ev->event, w->error_event)) {
    pt->upstream_error = 1;
  } else if (w->start_event && px_str_eq(ev->event, w->start_event)) {
    usage_at(w, d, n, w->start_outer, &pt->usage);
  } else if (w->delta_event && px_str_eq(ev->event, w->delta_event)) {
    px_usage_t u = pt->usage;
    usage_at(w, d, n, NULL, &u);
    pt->usage.output_tokens = u.output_tokens;
  } else if (w->terminal_data && px_str_eq(ev->data, w->terminal_data)) {
    pt->terminal = 1;
  } else if (w->error_data && data_error(d, n)) {
    pt->upstream_error = 1;
  } else if (!w->start_event && !w->terminal_events[0] && n > 0 &&
             has_key(d, n, w->usage_obj)) {
    usage_at(w, d, n, NULL, &pt->usage); /* usage rides on a data chunk */
  }
  if (w->finish_key && n > 0 && has_key(d, n, w->finish_key)) pt->terminal = 1;
  return 0;
}

void px_passthru_init(px_passthru_t *pt, px_proto_t proto, const char *model) {
  memset(pt, 0, sizeof(*pt));
  pt->proto = proto;
  pt->model = model;
  pt->usage.input_tokens = pt->usage.output_tokens = -1;
  px_sse_init(&pt->sse, PX_MAX_SSE_EVENT, on_event, pt);
  px_buf_init(&pt->raw, PX_MAX_SSE_EVENT);
}

/* The usage-only chunk a Chat upstream sends when asked for
 * stream_options.include_usage: usage is an object and choices is empty (or
 * absent). data is the event's data text. */
static int usage_only_chunk(const char *d, size_t n) {
  static const char *const usage[] = {"usage"};
  static const char *const choices[] = {"choices"};
  size_t s, l;
  if (px_json_find(d, n, usage, 1, &s, &l) != PX_JSON_FOUND || d[s] != '{') return 0;
  int rc = px_json_find(d, n, choices, 1, &s, &l);
  if (rc == PX_JSON_ABSENT) return 1;
  if (rc != PX_JSON_FOUND || d[s] != '[') return 0;
  for (size_t i = s + 1; i < s + l; i++)
    if (d[i] != ' ' && d[i] != '\t' && d[i] != '\r' && d[i] != '\n') return d[i] == ']';
  return 0;
}

/* One complete raw event: rewrite the model, or drop it (the usage chunk
 * the client did not ask for), and append it to out. 1: dropped. */
static int emit_event(px_passthru_t *pt, const char *p, size_t n, px_buf_t *out) {
  const px_wire_watch_t *w = &px_proto_get(pt->proto)->watch;
  const char *dl = NULL;
  for (size_t i = 0; i + 5 <= n; i++) {
    if ((i == 0 || p[i - 1] == '\n' || p[i - 1] == '\r') && memcmp(p + i, "data:", 5) == 0) {
      dl = p + i;
      break;
    }
  }
  if (dl == NULL) return px_buf_append(out, p, n);
  size_t ds = (size_t)(dl - p) + 5;
  if (ds < n && p[ds] == ' ') ds++;
  size_t de = ds;
  while (de < n && p[de] != '\n' && p[de] != '\r') de++;
  if (ds >= de || p[ds] != '{') return px_buf_append(out, p, n);
  if (pt->strip_usage && usage_only_chunk(p + ds, de - ds)) return 1; /* dropped */
  if (pt->model == NULL) return px_buf_append(out, p, n);
  int rc = px_buf_append(out, p, ds);
  if (rc < 0) return rc;
  rc = px_json_replace_str(out, p + ds, de - ds, w->model_path, (size_t)w->model_depth,
                           pt->model);
  /* data that is not a JSON object went out as it came (PX_JSON_BAD or
   * MORE): only a buffer error breaks the stream */
  if (rc < PX_JSON_MORE) return rc;
  return px_buf_append(out, p + de, n - de);
}

static int fail(px_passthru_t *pt, int rc) {
  pt->failed = rc;
  px_buf_free(&pt->raw);
  return rc;
}

/* Only complete events are passed on: the client's stream always stands at
 * an event boundary, so an error event can end it at any time. The bytes of
 * an unfinished event wait in pt->raw; an event over PX_MAX_SSE_EVENT
 * breaks the stream (none of its bytes are passed on). */
int px_passthru_feed(px_passthru_t *pt, const char *p, size_t n, px_buf_t *out) {
  if (pt->failed) return pt->failed;
  size_t out0 = out->len;
  int per_event = pt->model != NULL || pt->strip_usage;
  size_t start = 0;    /* first byte of p not passed on yet */
  size_t ev_start = 0; /* where the current event began in p (raw: before) */
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c == '\n' && pt->last_cr) {
      pt->last_cr = 0;
      /* the LF of an event's closing CRLF goes with that event: passed on
       * (or dropped) with it, never left over for the next one */
      if (pt->cr_end == 1 && per_event) rc = px_buf_append(out, "\n", 1);
      if (pt->cr_end) {
        ev_start = i + 1; /* watch-only: inside the region passed on below */
        if (per_event) start = i + 1;
      }
      pt->cr_end = 0;
      if (rc < 0) break;
      continue; /* second half of CRLF */
    }
    pt->cr_end = 0;
    pt->last_cr = c == '\r';
    if (c != '\n' && c != '\r') {
      pt->line_len++;
      continue;
    }
    if (pt->line_len > 0) {
      pt->line_len = 0;
      continue;
    }
    /* blank line: the event ends here */
    if (pt->raw.len + (i + 1 - ev_start) > PX_MAX_SSE_EVENT) {
      rc = PX_ETOOBIG;
      break;
    }
    ev_start = i + 1;
    pt->cr_end = c == '\r';
    if (!per_event) {
      if (pt->raw.len > 0) { /* its first bytes came in an earlier piece */
        rc = px_buf_append(out, pt->raw.data, pt->raw.len);
        px_buf_reset(&pt->raw);
        if (rc < 0) break;
      }
      continue; /* p[start..ev_start) goes out in one piece below */
    }
    if (pt->raw.len > 0) {
      rc = px_buf_append(&pt->raw, p + start, i + 1 - start);
      if (rc == 0) rc = emit_event(pt, pt->raw.data, pt->raw.len, out);
      px_buf_reset(&pt->raw);
    } else {
      rc = emit_event(pt, p + start, i + 1 - start, out);
    }
    if (rc < 0) break;
    if (rc == 1 && pt->cr_end) pt->cr_end = 2; /* dropped: its LF too */
    rc = 0;
    start = i + 1;
  }
  /* watch-only: the complete events of this piece (also before a failure) */
  if (!per_event && ev_start > start) {
    int e = px_buf_append(out, p + start, ev_start - start);
    if (rc == 0) rc = e;
    start = ev_start;
  }
  if (rc == 0 && start < n) rc = px_buf_append(&pt->raw, p + start, n - start);
  if (rc == 0) rc = px_sse_feed(&pt->sse, p, n);
  /* an upstream error event is passed on in the piece that completes it:
   * from that piece on, what is passed on holds no configured secret (SPEC
   * 10; the events of a stream without an error are never scanned) */
  if (pt->upstream_error && out->len > out0) px_scrub(out->data + out0, out->len - out0);
  return rc < 0 ? fail(pt, rc) : 0;
}

int px_passthru_finish(const px_passthru_t *pt) {
  /* an unfinished last event is dropped (SSE: it is never dispatched) */
  return !pt->failed && (pt->terminal || pt->upstream_error);
}

void px_passthru_done(px_passthru_t *pt) {
  px_sse_done(&pt->sse);
  px_buf_free(&pt->raw);
}
