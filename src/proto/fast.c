/* fast.c - what the fast codecs share (include/proxai/fastir.h): the arena,
 * the walker over validated bodies, the writers, and the two places where
 * tool-call arguments change form (a JSON string <-> a JSON object). */
#include <jansson.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/protoutil.h"

/* ------------------------------------------------------------------------ */
/* Arena                                                                     */

struct px_arena_blk {
  px_arena_blk_t *next;
  size_t size;
  char data[];
};

void px_arena_init(px_arena_t *a) {
  a->cur = a->first;
  a->end = a->first + sizeof(a->first);
  a->blocks = NULL;
  a->used = a->limit = 0;
  a->over = 0;
}

void *px_arena_alloc(px_arena_t *a, size_t n) {
  n = (n + 7) & ~(size_t)7;
  size_t pad = (size_t)(-(uintptr_t)a->cur & 7);
  if ((size_t)(a->end - a->cur) < n + pad) {
    size_t sz = n > 8192 ? n : 8192;
    if (a->limit != 0 && (sz > a->limit || a->used > a->limit - sz)) {
      a->over = 1;
      return NULL;
    }
    px_arena_blk_t *b = malloc(sizeof(*b) + sz + 8);
    if (b == NULL) return NULL;
    b->next = a->blocks;
    b->size = sz;
    a->used += sz;
    a->blocks = b;
    a->cur = b->data;
    a->end = b->data + sz + 8;
    pad = (size_t)(-(uintptr_t)a->cur & 7);
  }
  char *p = a->cur + pad;
  a->cur = p + n;
  memset(p, 0, n);
  return p;
}

void px_arena_free(px_arena_t *a) {
  px_arena_blk_t *b = a->blocks;
  while (b != NULL) {
    px_arena_blk_t *nx = b->next;
    free(b);
    b = nx;
  }
  px_arena_init(a);
}

px_fpart_t *px_fpart_new(px_arena_t *a, px_fpart_type_t t) {
  px_fpart_t *p = px_arena_alloc(a, sizeof(*p));
  if (p != NULL) p->type = t;
  return p;
}

px_fpart_t *px_fpart_text(px_arena_t *a, px_fstr_t s) {
  px_fpart_t *p = px_fpart_new(a, PX_FP_TEXT);
  if (p != NULL) p->text = s;
  return p;
}

px_fmsg_t *px_fmsg_push(px_freq_t *ir, px_arena_t *a, int assistant) {
  px_fmsg_t *m = px_arena_alloc(a, sizeof(*m));
  if (m == NULL) return NULL;
  m->assistant = assistant;
  if (ir->msgs_last) ir->msgs_last->next = m;
  else ir->msgs = m;
  ir->msgs_last = m;
  return m;
}

px_ftool_t *px_ftool_push(px_freq_t *ir, px_arena_t *a, px_fstr_t name,
                          const px_fv_t *desc, const px_fv_t *params,
                          const px_fv_t *strict, px_str_t dflt) {
  px_ftool_t *t = px_arena_alloc(a, sizeof(*t));
  if (t == NULL) return NULL;
  t->name = name;
  if (desc != NULL && desc->kind == PX_FV_STR) t->desc = desc->s;
  t->params = params != NULL && params->kind == PX_FV_OBJ ? params->raw : dflt;
  t->strict = -1;
  if (strict != NULL && strict->kind == PX_FV_TRUE) t->strict = 1;
  if (strict != NULL && strict->kind == PX_FV_FALSE) t->strict = 0;
  if (ir->tools_last) ir->tools_last->next = t;
  else ir->tools = t;
  ir->tools_last = t;
  return t;
}

/* ------------------------------------------------------------------------ */
/* Walker: the body has passed px_json_request (jansson's rules), so it only
 * finds boundaries; every step still stays inside the bytes.               */

/* the hot reads inline: most members are a short key and a short value */
#define FC_INLINE static inline __attribute__((always_inline))

FC_INLINE void ws(px_fw_t *w) {
  w->i = px_json_ws((const unsigned char *)w->p, w->n, w->i);
}

#if defined(__SSE2__)
/* The bytes a backslash escapes in a 64-byte block whose backslashes are bs
 * (bit k: byte k): those right after a run of odd length. *prev: the
 * block's first byte is escaped (the last block ended in an odd run), set
 * for the next block. A run's start bit added to the run carries through
 * it; where it comes out says whether the length was odd. */
static inline uint64_t escaped_bits(uint64_t bs, uint64_t *prev) {
  const uint64_t even = 0x5555555555555555ULL;
  bs &= ~*prev; /* an escaped backslash starts nothing */
  uint64_t follows = bs << 1 | *prev;
  uint64_t odd_starts = bs & ~even & ~follows;
  uint64_t seq_even;
  *prev = __builtin_add_overflow(odd_starts, bs, &seq_even);
  return (even ^ (seq_even << 1)) & follows;
}
#endif

#if defined(__SSE2__)
/* One 64-byte block of a string whose quote and backslash masks are q and
 * b: 1 with *end at the closing quote (not an escaped byte), else 0; *esc
 * set when a backslash comes before it. */
static inline int block_end(uint64_t q, uint64_t b, uint64_t *prev, size_t i, size_t *end,
                            int *esc) {
  uint64_t e = q & ~escaped_bits(b, prev);
  if (e != 0) {
    unsigned k = (unsigned)__builtin_ctzll(e);
    if (b & ((1ull << k) - 1)) *esc = 1;
    *end = i + k;
    return 1;
  }
  if (b != 0) *esc = 1;
  return 0;
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define FW_AVX2 __attribute__((target("avx2")))
/* the 64 bytes v0, v1: bit k set where byte k is c */
FW_AVX2 static inline uint64_t avx2_eq(__m256i v0, __m256i v1, __m256i c) {
  uint64_t lo = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v0, c));
  uint64_t hi = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v1, c));
  return lo | hi << 32;
}

/* block_end's loop on AVX2: two loads a block instead of four */
FW_AVX2 static int blocks_avx2(const unsigned char *u, size_t n, size_t i, int *esc,
                               uint64_t *prev, size_t *end) {
  const __m256i qt = _mm256_set1_epi8('"'), bs = _mm256_set1_epi8('\\');
  for (; i + 64 <= n; i += 64) {
    __m256i v0 = _mm256_loadu_si256((const __m256i *)(u + i));
    __m256i v1 = _mm256_loadu_si256((const __m256i *)(u + i + 32));
    if (block_end(avx2_eq(v0, v1, qt), avx2_eq(v0, v1, bs), prev, i, end, esc)) return 1;
  }
  *end = i;
  return 0;
}

static int fw_avx2 = -1; /* whether the CPU has AVX2; -1 until asked */
#endif

/* The closing quote of a string of a checked body from i (not an escaped
 * byte), n when there is none; *esc set when a backslash comes before it.
 * Sixty-four bytes at a time: the quote mask without the escaped bytes
 * (escaped_bits), so that text with an escape every few bytes (code, tool
 * output) costs the same as plain text. */
static size_t string_end(const unsigned char *u, size_t n, size_t i, int *esc) {
#if defined(__SSE2__)
  uint64_t prev = 0;
  size_t end;
#if defined(__x86_64__) && defined(__GNUC__)
  if (fw_avx2 < 0) fw_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
  if (fw_avx2 && i + 64 <= n) {
    if (blocks_avx2(u, n, i, esc, &prev, &end)) return end;
    i = end;
  }
#endif
  const __m128i qt = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
  for (; i + 64 <= n; i += 64) {
    uint64_t q = 0, b = 0;
    for (int k = 0; k < 4; k++) {
      __m128i v = _mm_loadu_si128((const __m128i *)(u + i + 16 * k));
      q |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, qt)) << (16 * k);
      b |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, bs)) << (16 * k);
    }
    if (block_end(q, b, &prev, i, &end, esc)) return end;
  }
  if (prev) i++; /* escaped by the last block's odd run */
#endif
  while (i < n) {
    if (u[i] == '"') return i;
    if (u[i] == '\\') {
      *esc = 1;
      i += 2;
    } else {
      i++;
    }
  }
  return n;
}

/* at the opening quote: content span, cursor past the closing quote. The
 * plain ASCII run inline (px_json_plain: most keys and short values end
 * there); past it the block-wise search (string_end). */
FC_INLINE int str(px_fw_t *w, px_fstr_t *s) {
  const unsigned char *u = (const unsigned char *)w->p;
  size_t i = px_json_plain(u, w->n, w->i + 1);
  int esc = 0;
  if (i < w->n && u[i] == '"') goto done;
  i = string_end(u, w->n, i, &esc);
  if (i >= w->n) return -1;
done:
  s->p = w->p + w->i + 1;
  s->n = (size_t)(w->p + i - s->p);
  s->esc = esc;
  w->i = i + 1;
  return 0;
}

int px_fw_open(px_fw_t *w, char c) {
  ws(w);
  if (w->i >= w->n || w->p[w->i] != c) return -1;
  w->i++;
  return 0;
}

/* to the next member / element of an open container: 1 there, 0 past its
 * closing byte, -1 at the end of the input */
FC_INLINE int step(px_fw_t *w, char close) {
  ws(w);
  if (w->i >= w->n) return -1;
  if (w->p[w->i] == close) {
    w->i++;
    return 0;
  }
  if (w->p[w->i] == ',') {
    w->i++;
    ws(w);
  }
  return 1;
}

FC_INLINE int fw_member(px_fw_t *w, px_fstr_t *key) {
  int r = step(w, '}');
  if (r <= 0) return r;
  if (w->i >= w->n || w->p[w->i] != '"' || str(w, key) < 0) return -1;
  ws(w);
  if (w->i >= w->n || w->p[w->i] != ':') return -1;
  w->i++;
  ws(w);
  return w->i < w->n ? 1 : -1;
}

int px_fw_member(px_fw_t *w, px_fstr_t *key) { return fw_member(w, key); }

int px_fw_elem(px_fw_t *w) {
  int r = step(w, ']');
  if (r <= 0) return r;
  return w->i < w->n ? 1 : -1;
}

FC_INLINE px_fv_kind_t fw_peek(px_fw_t *w) {
  ws(w);
  switch (w->i < w->n ? w->p[w->i] : 0) {
    case '"': return PX_FV_STR;
    case '{': return PX_FV_OBJ;
    case '[': return PX_FV_ARR;
    case 't': return PX_FV_TRUE;
    case 'f': return PX_FV_FALSE;
    case 'n': return PX_FV_NULL;
    default: return PX_FV_NUM;
  }
}

px_fv_kind_t px_fw_peek(px_fw_t *w) { return fw_peek(w); }

px_fw_jumps_t px_fw_jumps;

/* The end of the container opening at q by the request walk's table, or 0:
 * q not in its body, or no entry (a small container). The entries are in
 * opening order: from the last one used forward, else (a walker back in
 * what a jump passed) by halves. */
static size_t jump_end(const char *q) {
  const px_json_jumps_t *t = px_fw_jumps.table;
  if (q < t->base || (size_t)(q - t->base) >= t->len) return 0;
  uint32_t o = (uint32_t)(q - t->base);
  const uint32_t(*v)[2] = (const uint32_t(*)[2])t->v;
  size_t k = px_fw_jumps.at, n = t->n;
  if (k < n && v[k][0] <= o) {
    while (k < n && v[k][0] < o) k++;
  } else {
    size_t lo = 0, hi = k < n ? k : n; /* the first entry at or after o */
    while (lo < hi) {
      size_t m = lo + (hi - lo) / 2;
      if (v[m][0] < o)
        lo = m + 1;
      else
        hi = m;
    }
    k = lo;
  }
  px_fw_jumps.at = k;
  return k < n && v[k][0] == o ? v[k][1] : 0;
}

/* skip_container by the table: 1 when it knew the container (skipped), 0
 * when not, -1 when its end is past the walker's text. (Out of line: the
 * usual skip keeps its few registers.) */
static __attribute__((noinline)) int skip_by_jump(px_fw_t *w) {
  const char *q = w->p + w->i;
  size_t e = jump_end(q);
  if (e == 0) return 0;
  size_t end = w->i + (e - (size_t)(q - px_fw_jumps.table->base)); /* e - o: its length */
  if (end > w->n) return -1;
  w->i = end;
  return 1;
}

/* The container at the cursor skipped: strings (their escapes), brackets.
 * With SSE2 sixteen bytes at a time, every quote, backslash and bracket of
 * a block handled from its masks (a validated body: nothing else counts);
 * the rest of a string longer than its block by string_end; a container the
 * request walk recorded (px_fw_jumps), by its entry. */
static int skip_container(px_fw_t *w) {
  const unsigned char *p = (const unsigned char *)w->p;
  size_t n = w->n, i = w->i;
  if (px_fw_jumps.table) {
    int j = skip_by_jump(w);
    if (j != 0) return j > 0 ? 0 : -1;
  }
  int depth = 0, in_str = 0;
#if defined(__SSE2__)
  const __m128i q = _mm_set1_epi8('"'), b = _mm_set1_epi8('\\'), o1 = _mm_set1_epi8('{'),
                o2 = _mm_set1_epi8('['), c1 = _mm_set1_epi8('}'), c2 = _mm_set1_epi8(']');
  while (i + 16 <= n) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
    __m128i hit = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, b)),
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, o1), _mm_cmpeq_epi8(v, o2)),
                     _mm_or_si128(_mm_cmpeq_epi8(v, c1), _mm_cmpeq_epi8(v, c2))));
    unsigned m = (unsigned)_mm_movemask_epi8(hit);
    size_t base = i;
    i += 16;
    while (m != 0) {
      unsigned k = (unsigned)__builtin_ctz(m);
      unsigned c = p[base + k];
      m &= m - 1;
      if (in_str) {
        if (c == '"') {
          in_str = 0;
        } else if (c == '\\') { /* the next byte is escaped */
          if (k == 15) {
            i = base + 17;
            break;
          }
          m &= ~(1u << (k + 1));
        }
      } else if (c == '"') {
        in_str = 1;
      } else if (c == '{' || c == '[') {
        depth++;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        w->i = base + k + 1;
        return 0;
      }
    }
    /* a string that goes on past the block (a text, a tool output): its
     * end found 64 bytes at a time */
    if (in_str) {
      int esc = 0;
      i = string_end(p, n, i, &esc);
      if (i >= n) return -1;
      i++;
      in_str = 0;
    }
  }
#endif
  while (i < n) {
    unsigned c = p[i++];
    if (in_str) {
      if (c == '"')
        in_str = 0;
      else if (c == '\\')
        i++;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      w->i = i;
      return 0;
    }
  }
  return -1;
}

FC_INLINE int fw_value(px_fw_t *w, px_fv_t *v) {
  v->kind = fw_peek(w);
  size_t s = w->i;
  v->s.p = NULL;
  switch (v->kind) {
    case PX_FV_STR:
      if (str(w, &v->s) < 0) return -1;
      break;
    case PX_FV_OBJ:
    case PX_FV_ARR:
      if (skip_container(w) < 0) return -1;
      break;
    case PX_FV_TRUE:
    case PX_FV_NULL:
      w->i += 4;
      break;
    case PX_FV_FALSE:
      w->i += 5;
      break;
    case PX_FV_NUM:
      while (w->i < w->n) {
        char c = w->p[w->i];
        if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' ||
              c == 'E'))
          break;
        w->i++;
      }
      if (w->i == s) return -1;
      break;
  }
  if (w->i > w->n) return -1;
  v->raw.ptr = w->p + s;
  v->raw.len = w->i - s;
  return 0;
}

int px_fw_value(px_fw_t *w, px_fv_t *v) { return fw_value(w, v); }

/* ------------------------------------------------------------------------ */
/* Checked reads: a body nothing has validated yet, read by jansson's rules
 * in the same pass (json.h's string and number rules, exact literals, the
 * grammar; nesting at most PX_JSON_MAX_DEPTH below the value read).       */


FC_INLINE int fc_str(px_fw_t *w, px_fstr_t *s) {
  size_t e;
  int esc;
  if (px_json_string((const unsigned char *)w->p, w->n, w->i + 1, &e, &esc) < 0) return -1;
  s->p = w->p + w->i + 1;
  s->n = e - (w->i + 1);
  s->esc = esc;
  w->i = e + 1;
  return 0;
}

/* a literal or number at the cursor (not blank) */
FC_INLINE int fc_atom(px_fw_t *w) {
  const char *lit;
  size_t l;
  switch (w->p[w->i]) {
    case 't': lit = "true", l = 4; break;
    case 'f': lit = "false", l = 5; break;
    case 'n': lit = "null", l = 4; break;
    default:
      if (w->p[w->i] != '-' && (w->p[w->i] < '0' || w->p[w->i] > '9')) return -1;
      return px_json_number(w->p, w->n, &w->i);
  }
  if (w->n - w->i < l || memcmp(w->p + w->i, lit, l) != 0) return -1;
  w->i += l;
  return 0;
}

/* the container at the cursor, checked and skipped, nested at most max
 * (<= PX_JSON_MAX_DEPTH) deep */
static int fc_container(px_fw_t *w, int max) {
  unsigned char obj[PX_JSON_MAX_DEPTH]; /* per level: an object */
  int d = 0;
  px_fstr_t s;
open:
  if (d >= max) return -1;
  obj[d++] = w->p[w->i] == '{';
  w->i++;
  ws(w);
  if (w->i < w->n && w->p[w->i] == (obj[d - 1] ? '}' : ']')) {
    w->i++;
    goto closed;
  }
  if (!obj[d - 1]) goto value;
key:
  if (w->i >= w->n || w->p[w->i] != '"' || fc_str(w, &s) < 0) return -1;
  ws(w);
  if (w->i >= w->n || w->p[w->i] != ':') return -1;
  w->i++;
  ws(w);
value:
  if (w->i >= w->n) return -1;
  if (w->p[w->i] == '{' || w->p[w->i] == '[') goto open;
  if ((w->p[w->i] == '"' ? fc_str(w, &s) : fc_atom(w)) < 0) return -1;
after:
  ws(w);
  if (w->i >= w->n) return -1;
  if (w->p[w->i] == ',') {
    w->i++;
    ws(w);
    if (obj[d - 1]) goto key;
    goto value;
  }
  if (w->p[w->i] != (obj[d - 1] ? '}' : ']')) return -1;
  w->i++;
closed:
  if (--d == 0) return 0;
  goto after;
}

FC_INLINE int fc_value_max(px_fw_t *w, px_fv_t *v, int max) {
  ws(w);
  if (w->i >= w->n) return -1;
  size_t s = w->i;
  int rc;
  v->s.p = NULL;
  switch (w->p[s]) {
    case '"':
      v->kind = PX_FV_STR;
      rc = fc_str(w, &v->s);
      break;
    case '{':
    case '[':
      v->kind = w->p[s] == '{' ? PX_FV_OBJ : PX_FV_ARR;
      rc = fc_container(w, max);
      break;
    default:
      v->kind = w->p[s] == 't'   ? PX_FV_TRUE
                : w->p[s] == 'f' ? PX_FV_FALSE
                : w->p[s] == 'n' ? PX_FV_NULL
                                 : PX_FV_NUM;
      rc = fc_atom(w);
  }
  v->raw.ptr = w->p + s;
  v->raw.len = w->i - s;
  return rc;
}

FC_INLINE int fc_value(px_fw_t *w, px_fv_t *v) {
  return fc_value_max(w, v, PX_JSON_MAX_DEPTH);
}

int px_fc_value(px_fw_t *w, px_fv_t *v) { return fc_value(w, v); }

/* to the next member / element: *first set right after the opening byte */
FC_INLINE int fc_step(px_fw_t *w, char close, int *first) {
  ws(w);
  if (w->i >= w->n) return -1;
  if (w->p[w->i] == close) {
    w->i++;
    return 0;
  }
  if (*first) {
    *first = 0;
  } else {
    if (w->p[w->i] != ',') return -1;
    w->i++;
    ws(w);
    if (w->i >= w->n) return -1;
  }
  return 1;
}

FC_INLINE int fc_member(px_fw_t *w, px_fstr_t *key, int *first) {
  int r = fc_step(w, '}', first);
  if (r <= 0) return r;
  if (w->p[w->i] != '"' || fc_str(w, key) < 0) return -1;
  ws(w);
  if (w->i >= w->n || w->p[w->i] != ':') return -1;
  w->i++;
  ws(w);
  return w->i < w->n ? 1 : -1;
}

int px_fc_member(px_fw_t *w, px_fstr_t *key, int *first) { return fc_member(w, key, first); }

int px_fc_elem(px_fw_t *w, int *first) { return fc_step(w, ']', first); }

int px_fc_fields(px_fw_t *w, const px_fkey_t *keys, int n, px_fv_t *f, unsigned *seen) {
  px_fstr_t k;
  int r, first = 1;
  if (px_fw_open(w, '{') < 0) return PX_FAST_DECLINE;
  while ((r = fc_member(w, &k, &first)) == 1) {
    px_fv_t v;
    if (k.esc || fc_value(w, &v) < 0) return PX_FAST_DECLINE;
    int ki = px_fk_of(k, keys, n);
    if (ki < 0) continue;
    if (px_fw_seen_twice(seen, ki)) return PX_FAST_DECLINE;
    f[ki] = v;
  }
  return r < 0 ? PX_FAST_DECLINE : 0;
}

int px_fc_end(px_fw_t *w) {
  ws(w);
  return w->i == w->n ? 0 : -1;
}

int px_fw_uint(px_str_t raw, int64_t *v) {
  if (raw.len == 0 || raw.len > 18) return -1;
  int64_t x = 0;
  for (size_t i = 0; i < raw.len; i++) {
    char c = raw.ptr[i];
    if (c < '0' || c > '9') return -1;
    x = x * 10 + (c - '0');
  }
  *v = x;
  return 0;
}

int px_fw_empty(px_str_t raw) {
  for (size_t i = 1; i < raw.len; i++) {
    char c = raw.ptr[i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c == ']' || c == '}';
  }
  return 0;
}

/* A reader of a string's value byte by byte, its escapes unescaped on the
 * fly (the content passed the reader: valid escapes, surrogate escapes in
 * pairs; a truncated escape ends it) */
typedef struct fs_rd {
  const char *p, *e;
  unsigned char u[4];
  size_t n, i;
} fs_rd_t;

static uint32_t fs_hex4(const char *p) {
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    char c = p[k];
    v = v << 4 | (uint32_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return v;
}

/* the bytes the content at r->p spells next into r->u: their count, 0 at
 * the end */
static size_t fs_next(fs_rd_t *r) {
  const char *p = r->p, *e = r->e;
  if (p >= e) return 0;
  if (*p != '\\' || e - p < 2) {
    r->u[0] = (unsigned char)*p;
    r->p = p + 1;
    return 1;
  }
  r->p = p + 2;
  switch (p[1]) {
    case 'b':
      r->u[0] = '\b';
      return 1;
    case 'f':
      r->u[0] = '\f';
      return 1;
    case 'n':
      r->u[0] = '\n';
      return 1;
    case 'r':
      r->u[0] = '\r';
      return 1;
    case 't':
      r->u[0] = '\t';
      return 1;
    case 'u':
      break;
    default:
      r->u[0] = (unsigned char)p[1];
      return 1; /* " \\ / */
  }
  if (e - p < 6) return 0;
  uint32_t c = fs_hex4(p + 2);
  r->p = p + 6;
  if (c >= 0xD800 && c < 0xDC00 && e - p >= 12 && p[6] == '\\' && p[7] == 'u') {
    uint32_t lo = fs_hex4(p + 8);
    if (lo >= 0xDC00 && lo < 0xE000) {
      c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
      r->p = p + 12;
    }
  }
  if (c < 0x80) {
    r->u[0] = (unsigned char)c;
    return 1;
  }
  if (c < 0x800) {
    r->u[0] = (unsigned char)(0xC0 | c >> 6);
    r->u[1] = (unsigned char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    r->u[0] = (unsigned char)(0xE0 | c >> 12);
    r->u[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    r->u[2] = (unsigned char)(0x80 | (c & 0x3F));
    return 3;
  }
  r->u[0] = (unsigned char)(0xF0 | c >> 18);
  r->u[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
  r->u[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
  r->u[3] = (unsigned char)(0x80 | (c & 0x3F));
  return 4;
}

/* the next byte of the value, -1 at its end */
static int fs_byte(fs_rd_t *r) {
  if (r->i == r->n) {
    r->n = fs_next(r);
    r->i = 0;
    if (r->n == 0) return -1;
  }
  return r->u[r->i++];
}

/* the length of the value of content with escapes */
static size_t fs_len(px_fstr_t s) {
  fs_rd_t r = {s.p, s.p + s.n, {0}, 0, 0};
  size_t n = 0;
  while (fs_byte(&r) >= 0) n++;
  return n;
}

size_t px_fs_len_esc(px_fstr_t s) {
  return fs_len(s);
}

px_fstr_t px_fs_after(px_fstr_t s, size_t n) {
  if (!s.esc) return n <= s.n ? (px_fstr_t){s.p + n, s.n - n, 0} : (px_fstr_t){s.p + s.n, 0, 0};
  fs_rd_t r = {s.p, s.p + s.n, {0}, 0, 0};
  for (size_t k = 0; k < n && fs_byte(&r) >= 0; k++) {
  }
  return (px_fstr_t){r.p, (size_t)(r.e - r.p), 1};
}

int px_fs_isn_esc(px_fstr_t s, const char *lit, size_t n) {
  if (s.p == NULL || s.n < n || s.n > 6 * n) return 0; /* an escape spells 1 byte in 6 at most */
  fs_rd_t r = {s.p, s.p + s.n, {0}, 0, 0};
  for (size_t k = 0; k < n; k++)
    if (fs_byte(&r) != (unsigned char)lit[k]) return 0;
  return fs_byte(&r) < 0;
}

int px_fs_starts(px_fstr_t s, const char *lit, size_t n) {
  if (s.p == NULL) return 0;
  if (!s.esc) return s.n >= n && memcmp(s.p, lit, n) == 0;
  fs_rd_t r = {s.p, s.p + s.n, {0}, 0, 0};
  for (size_t k = 0; k < n; k++)
    if (fs_byte(&r) != (unsigned char)lit[k]) return 0;
  return 1;
}

int px_fs_ends(px_fstr_t s, const char *lit, size_t n) {
  if (s.p == NULL) return 0;
  if (!s.esc) return s.n >= n && memcmp(s.p + s.n - n, lit, n) == 0;
  size_t len = fs_len(s);
  if (len < n) return 0;
  fs_rd_t r = {s.p, s.p + s.n, {0}, 0, 0};
  for (size_t k = 0; k < len - n; k++) fs_byte(&r);
  for (size_t k = 0; k < n; k++)
    if (fs_byte(&r) != (unsigned char)lit[k]) return 0;
  return 1;
}

int px_fs_of(px_fstr_t s, const char *const *names, int n) {
  if (!s.esc) return px_fw_key_of(s, names, n);
  for (int i = 0; i < n; i++)
    if (px_fs_is(s, names[i])) return i;
  return -1;
}

int px_fs_data_url(px_fstr_t url, size_t mtsz, px_fstr_t *mt, px_fstr_t *data) {
  static const char sep[] = ";base64,";
  if (!px_fs_starts(url, "data:", 5)) return -1;
  if (url.esc && !px_fs_plain(url)) return PX_FAST_DECLINE;
  const char *m = url.p + 5, *end = url.p + url.n;
  const char *semi = memmem(m, (size_t)(end - m), sep, 8);
  if (semi == NULL) return -1;
  px_fstr_t t = {m, (size_t)(semi - m), url.esc && memchr(m, '\\', (size_t)(semi - m))};
  size_t n = t.esc ? fs_len(t) : t.n; /* its value's length */
  if (n == 0 || n >= mtsz) return -1;
  *mt = t;
  *data = (px_fstr_t){semi + 8, (size_t)(end - semi - 8), url.esc};
  return 0;
}

int px_fs_same(px_fstr_t a, px_fstr_t b) {
  if (a.p == NULL || b.p == NULL) return a.p == b.p;
  if (!a.esc && !b.esc) return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
  fs_rd_t x = {a.p, a.p + a.n, {0}, 0, 0}, y = {b.p, b.p + b.n, {0}, 0, 0};
  for (;;) {
    int c = fs_byte(&x);
    if (c != fs_byte(&y)) return 0;
    if (c < 0) return 1;
  }
}

int px_ftool_custom(const px_freq_t *ir, px_fstr_t name) {
  for (const px_ftool_t *t = ir->tools; t; t = t->next)
    if (px_fs_same(t->name, name)) return t->custom;
  return 0;
}

size_t px_fs_value(px_fstr_t s, char *buf, size_t size) {
  if (!s.esc) { /* the plain path: a copy */
    size_t k = s.n < size ? s.n : size - 1;
    if (k) memcpy(buf, s.p, k);
    buf[k] = 0;
    return s.n < size ? k : size;
  }
  fs_rd_t r = {s.p, s.p + s.n, {0}, 0, 0};
  size_t k = 0;
  for (int c; (c = fs_byte(&r)) >= 0; buf[k++] = (char)c)
    if (k + 1 >= size) {
      buf[k] = 0;
      return size;
    }
  buf[k] = 0;
  return k;
}

const char *px_fs_msg(px_fstr_t s) {
  static _Thread_local char buf[256]; /* px_tr_err_t's message */
  px_fs_value(s, buf, sizeof(buf));
  return buf;
}

int px_fs_plain_esc(px_fstr_t s) {
  for (const char *p = s.p, *e = s.p + s.n; (p = memchr(p, '\\', (size_t)(e - p)));) {
    fs_rd_t r = {p, e, {0}, 0, 0};
    size_t n = fs_next(&r);
    unsigned char c = r.u[0];
    if (n != 1 || !(c < 0x20 || c == '"' || c == '\\')) return 0;
    p = r.p;
  }
  return 1;
}

int px_fs_blank(px_fstr_t s) {
  /* escaped whitespace (\n, \t, \r, \u0020 ...) is blank too: decided on
   * the unescaped value by the callers that care; here a raw check */
  for (size_t i = 0; i < s.n; i++) {
    char c = s.p[i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return 0;
  }
  return 1;
}

int px_fs_blank_value(px_fstr_t s) {
  size_t i = 0;
  while (i < s.n && (s.p[i] == ' ' || s.p[i] == '\t' || s.p[i] == '\n' || s.p[i] == '\r'))
    i++;
  if (i == s.n) return 1;
  if (s.p[i] != '\\') return 0; /* the common case: JSON text starts here */
  px_buf_t b;
  px_str_t v;
  px_buf_init(&b, s.n + 1);
  int blank = -1;
  if (px_json_unescape(s.p, s.n, 1, &b, &v) == 0) {
    blank = 1;
    for (size_t k = 0; k < v.len; k++)
      if (v.ptr[k] != ' ' && v.ptr[k] != '\t' && v.ptr[k] != '\n' && v.ptr[k] != '\r')
        blank = 0;
  }
  px_buf_free(&b);
  return blank;
}

/* ------------------------------------------------------------------------ */
/* Writers                                                                   */

px_fb_spanning_t px_fb_spanning;

int px_fb_span(px_buf_t *b, const void *p, size_t n) {
  const px_fb_spanning_t *sp = &px_fb_spanning;
  px_spans_t *s = sp->s;
  const char *c = p;
  if (c >= sp->lo && c < sp->hi && n <= (size_t)(sp->hi - c)) {
    if (s->n == s->cap) {
      size_t cap = s->cap ? s->cap * 2 : 32;
      px_body_span_t *v = realloc(s->v, cap * sizeof(*v));
      if (v == NULL) goto copy;
      s->v = v;
      s->cap = cap;
    }
    s->v[s->n++] = (px_body_span_t){b->len, c, n};
    s->bytes += n;
    return 0;
  }
copy:
  return px_buf_append(b, p, n);
}

int px_fb_str(px_buf_t *b, px_fstr_t s) {
  if (s.n >= PX_FB_SPAN_MIN && b == px_fb_spanning.b) {
    int rc = px_fb_put(b, "\"", 1);
    if (rc == 0) rc = px_fb_span(b, s.p, s.n);
    if (rc == 0) rc = px_fb_put(b, "\"", 1);
    return rc;
  }
  if (s.n + 2 <= b->size - b->len) { /* the hub reserved room: no call */
    char *o = b->data + b->len;
    o[0] = '"';
    if (s.n) memcpy(o + 1, s.p, s.n);
    o[s.n + 1] = '"';
    b->len += s.n + 2;
    return 0;
  }
  int rc = px_buf_append(b, "\"", 1);
  if (rc == 0 && s.n) rc = px_buf_append(b, s.p, s.n);
  if (rc == 0) rc = px_buf_append(b, "\"", 1);
  return rc;
}

int px_fb_raw(px_buf_t *b, px_str_t r) { return px_fb_put(b, r.ptr, r.len); }

int px_fb_key(px_buf_t *b, int *first, const char *key) {
  int rc = 0;
  if (!*first) rc = px_buf_append(b, ",", 1);
  *first = 0;
  if (rc == 0) rc = px_buf_append(b, "\"", 1);
  if (rc == 0) rc = px_buf_puts(b, key);
  if (rc == 0) rc = px_buf_append(b, "\":", 2);
  return rc;
}

int px_fb_opt_raw(px_buf_t *b, const char *key_lit, px_str_t r) {
  if (r.ptr == NULL) return 0;
  int rc = px_fb_lit(b, key_lit);
  return rc == 0 ? px_fb_raw(b, r) : rc;
}

int px_fb_opt_str(px_buf_t *b, const char *key_lit, px_fstr_t s) {
  if (s.p == NULL) return 0;
  int rc = px_fb_lit(b, key_lit);
  return rc == 0 ? px_fb_str(b, s) : rc;
}

int px_fb_texts(px_buf_t *b, const px_fpart_t *parts) {
  int rc = 0;
  for (const px_fpart_t *p = parts; p && rc == 0; p = p->next)
    if (p->type == PX_FP_TEXT && p->text.n) rc = px_fb_put(b, p->text.p, p->text.n);
  return rc;
}

int px_fb_openai_tc(px_buf_t *b, px_ftc_t tc, int parallel) {
  int rc = 0;
  if (tc == PX_FTC_AUTO || tc == PX_FTC_NONE || tc == PX_FTC_REQUIRED)
    rc = px_fb_lit(b, tc == PX_FTC_AUTO   ? ",\"tool_choice\":\"auto\""
                      : tc == PX_FTC_NONE ? ",\"tool_choice\":\"none\""
                                          : ",\"tool_choice\":\"required\"");
  if (rc == 0 && parallel >= 0)
    rc = px_fb_lit(b, parallel ? ",\"parallel_tool_calls\":true"
                               : ",\"parallel_tool_calls\":false");
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Tool-call arguments                                                       */

int px_fast_args_object(px_arena_t *a, px_fpart_t *part) {
  px_buf_t b;
  px_str_t v;
  px_buf_init(&b, part->args.n + 1);
  if (px_json_unescape(part->args.p, part->args.n, part->args.esc, &b, &v) < 0) {
    px_buf_free(&b);
    return PX_FAST_DECLINE;
  }
  char *copy = px_arena_alloc(a, v.len + 1);
  if (copy != NULL) memcpy(copy, v.ptr, v.len);
  px_buf_free(&b);
  if (copy == NULL) return PX_FAST_DECLINE;
  size_t n = v.len;
  /* the scanner accepts exactly what jansson reads, objects only; the
   * members it refuses twice in a request body (model, stream) are the
   * tool's here: the text checked whole and taken as written */
  px_json_req_t r;
  if (px_json_request(copy, n, &r) < 0) {
    if (r.err == PX_JREQ_DEPTH) return PX_FAST_DECLINE;
    if (r.err != PX_JREQ_DUPLICATE) return PX_FAST_ARGS_NONE;
    px_fw_t w = {copy, n, 0};
    px_fv_t o;
    if (px_fc_value(&w, &o) < 0 || px_fc_end(&w) < 0)
      return PX_FAST_DECLINE; /* invalid, or too deep: not told apart here */
  }
  part->input.ptr = copy;
  part->input.len = n;
  return 0;
}

int px_fast_dump_value(px_arena_t *a, px_str_t raw, px_fstr_t *out) {
  /* checked by the one reader and written as json_dumps(JSON_COMPACT)
   * writes it (px_fb_jdump): no document */
  px_fw_t w = {raw.ptr, raw.len, 0};
  px_fv_t v;
  if (raw.ptr == NULL || px_fc_value(&w, &v) < 0 || px_fc_end(&w) < 0)
    return PX_FAST_DECLINE;
  px_buf_t d, b;
  px_buf_init(&d, SIZE_MAX);
  px_buf_init(&b, SIZE_MAX);
  int rc = px_fb_jdump(&d, &v);
  if (rc == 0) rc = px_buf_json_escape(&b, d.data, d.len);
  px_buf_free(&d);
  char *copy = rc == 0 ? px_arena_alloc(a, b.len + 1) : NULL;
  if (copy != NULL && b.len) memcpy(copy, b.data, b.len);
  out->p = copy;
  out->n = b.len;
  out->esc = 1;
  px_buf_free(&b);
  return copy != NULL ? 0 : PX_FAST_DECLINE;
}

/* ------------------------------------------------------------------------ */
/* Small readers shared by the codecs                                        */

int px_fw_key_of(px_fstr_t k, const char *const *names, int n) {
  if (k.esc || k.n == 0) return -1;
  /* no call per name: most differ at their first byte; a key has no NUL
   * (JSON strings cannot hold one raw), so a shorter name stops the loop */
  for (int i = 0; i < n; i++) {
    const char *nm = names[i];
    if (nm[0] != k.p[0]) continue;
    size_t j = 1;
    while (j < k.n && nm[j] == k.p[j]) j++;
    if (j == k.n && nm[j] == 0) return i;
  }
  return -1;
}

/* px_fw_fields over either kind of name table: one loop, the matcher
 * inlined (keys: px_fkey_t, else C strings) */
FC_INLINE int fw_fields(px_fw_t *w, const char *const *names, const px_fkey_t *keys, int n,
                        px_fv_t *f, unsigned *seen) {
  px_fstr_t k;
  int r;
  if (px_fw_open(w, '{') < 0) return PX_FAST_DECLINE;
  while ((r = fw_member(w, &k)) == 1) {
    px_fv_t v;
    if (fw_value(w, &v) < 0 || k.esc) return PX_FAST_DECLINE;
    int ki = keys ? px_fk_of(k, keys, n) : px_fw_key_of(k, names, n);
    if (ki < 0) continue;
    if (px_fw_seen_twice(seen, ki)) return PX_FAST_DECLINE;
    f[ki] = v;
  }
  return r < 0 ? PX_FAST_DECLINE : 0;
}

int px_fw_fields(px_fw_t *w, const char *const *names, int n, px_fv_t *f,
                 unsigned *seen) {
  return fw_fields(w, names, NULL, n, f, seen);
}

int px_fv_fields(const px_fv_t *v, const char *const *names, int n, px_fv_t *f,
                 unsigned *seen) {
  px_fw_t w = {v->raw.ptr, v->raw.len, 0};
  return fw_fields(&w, names, NULL, n, f, seen);
}

int px_fw_kfields(px_fw_t *w, const px_fkey_t *keys, int n, px_fv_t *f, unsigned *seen) {
  return fw_fields(w, NULL, keys, n, f, seen);
}

int px_fv_kfields(const px_fv_t *v, const px_fkey_t *keys, int n, px_fv_t *f,
                  unsigned *seen) {
  px_fw_t w = {v->raw.ptr, v->raw.len, 0};
  return fw_fields(&w, NULL, keys, n, f, seen);
}

int px_fc_openai_usage(px_fw_t *w, const px_fkey_t keys[4], px_fresp_t *ir) {
  static const px_fkey_t dkeys[2] = {PX_FK("cached_tokens"), PX_FK("reasoning_tokens")};
  px_fv_t f[4], none = {PX_FV_NULL, {0}, {NULL, 0}};
  int64_t det[2] = {-1, -1}; /* as px_fw_detail reads them */
  px_fstr_t k;
  unsigned seen = 0;
  int r, first = 1;
  if (px_fw_open(w, '{') < 0) return PX_FAST_DECLINE;
  while ((r = fc_member(w, &k, &first)) == 1) {
    int ki = px_fk_of(k, keys, 4);
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return PX_FAST_DECLINE;
    if (ki >= 2 && w->p[w->i] == '{') { /* a details object, read where it stands */
      px_fv_t x;
      unsigned ds = 0;
      if (px_fc_fields(w, &dkeys[ki - 2], 1, &x, &ds) != 0 ||
          (ds && px_fw_jint(&x, -1, &det[ki - 2]) != 0))
        return PX_FAST_DECLINE;
      continue;
    }
    px_fv_t v;
    if (fc_value(w, &v) < 0) return PX_FAST_DECLINE;
    if (ki >= 0) f[ki] = v;
  }
  if (r < 0) return PX_FAST_DECLINE;
  ir->has_usage = 1;
  px_fast_usage_count((seen & 1) ? &f[0] : NULL, &ir->usage_in);
  px_fast_usage_count((seen & 2) ? &f[1] : NULL, &ir->usage_out);
  ir->usage_known = 1;
  if (px_fw_jint((seen & 1) ? &f[0] : &none, 0, &ir->in) != 0 ||
      px_fw_jint((seen & 2) ? &f[1] : &none, 0, &ir->out) != 0)
    return PX_FAST_DECLINE;
  ir->cache_read = det[0];
  ir->reasoning = det[1];
  ir->cache_creation = -1;
  return 0;
}

int px_fw_detail(const px_fv_t *v, const char *key, int64_t *out) {
  px_fv_t x;
  unsigned seen = 0;
  *out = -1;
  if (v->kind != PX_FV_OBJ) return 0;
  if (px_fv_fields(v, &key, 1, &x, &seen) != 0) return PX_FAST_DECLINE;
  return seen ? px_fw_jint(&x, -1, out) : 0;
}

void px_fast_usage_count(const px_fv_t *v, int64_t *out) {
  /* as px_usage_scan counts: a non-negative integer as jansson reads it */
  if (v == NULL || !px_jv_int(v, out) || *out < 0) *out = -1;
}

int px_fast_created(const px_fv_t *v, px_fresp_t *ir) {
  if (v == NULL || v->kind != PX_FV_NUM || !px_fw_is_int(v->raw)) return 0;
  if (px_fw_jint(v, 0, &ir->created) != 0) return PX_FAST_DECLINE;
  ir->has_created = 1;
  return 0;
}

int px_fast_openai_tc(px_fstr_t s, px_freq_t *ir) {
  if (px_fs_is(s, "auto")) ir->tool_choice = PX_FTC_AUTO;
  else if (px_fs_is(s, "none")) ir->tool_choice = PX_FTC_NONE;
  else if (px_fs_is(s, "required")) ir->tool_choice = PX_FTC_REQUIRED;
  else return PX_FAST_DECLINE;
  return 0;
}

int px_fw_is_int(px_str_t raw) {
  for (size_t i = 0; i < raw.len; i++)
    if (raw.ptr[i] == '.' || raw.ptr[i] == 'e' || raw.ptr[i] == 'E') return 0;
  return 1;
}

int px_fw_jint(const px_fv_t *v, int64_t dflt, int64_t *out) {
  *out = dflt;
  if (v->kind != PX_FV_NUM || !px_fw_is_int(v->raw)) return 0;
  if (px_fw_uint(v->raw, out) == 0) return 0; /* the common one */
  /* a negative or long one, as px_jint reads it (json_integer_value: the
   * checked read held it to int64) */
  return px_jv_int(v, out) ? 0 : PX_FAST_DECLINE;
}

int px_fast_ids_plain(const px_fpart_t *parts) {
  for (const px_fpart_t *p = parts; p; p = p->next) {
    if (p->type != PX_FP_TOOL_CALL) continue;
    if (p->id.n == 0 || p->id.esc) return 0;
    for (const px_fpart_t *q = parts; q != p; q = q->next)
      if (q->type == PX_FP_TOOL_CALL && q->id.n == p->id.n &&
          memcmp(q->id.p, p->id.p, p->id.n) == 0)
        return 0;
  }
  return 1;
}

int px_fb_i64(px_buf_t *b, int64_t v) {
  char out[24], *e = out + sizeof(out), *q = e; /* written from the end: one loop */
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    *--q = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) *--q = '-';
  return px_fb_put(b, q, (size_t)(e - q));
}

/* ---- opaque reasoning tokens on fast parts (protoutil.h px_rtok_*) ---- */

int px_frtok_index(const char *field) {
  const char *f;
  for (size_t k = 0; k < PX_FRTOKS && (f = px_rtok_at(k)) != NULL; k++)
    if (strcmp(f, field) == 0) return (int)k;
  return -1;
}

int px_frtok_in(px_proto_t client, px_fpart_t *p, px_fstr_t tok) {
  const char *own = px_rtok_field(client), *field = own, *f;
  if (tok.p == NULL || tok.n == 0 || own == NULL) return 0;
  /* the field whose tag (of client's spelling) begins the token's value
   * (px_fs_starts: an escape may spell it) */
  for (size_t k = 0; (f = px_rtok_at(k)) != NULL; k++) {
    const char *tag = px_rtok_tag(client, f);
    size_t tn = tag != NULL ? strlen(tag) : 0;
    if (tn > 0 && px_fs_starts(tok, tag, tn)) {
      field = f;
      tok = px_fs_after(tok, tn);
      break;
    }
  }
  if (tok.n == 0) return 0;
  int k = px_frtok_index(field);
  if (k < 0) return PX_FAST_DECLINE;
  p->tok[k] = tok;
  return 0;
}

int px_frtok_out(px_proto_t client, const px_fpart_t *p, const char **tag,
                 px_fstr_t *tok) {
  const char *own = px_rtok_field(client);
  if (own == NULL) return 0;
  const char *f = own;
  for (size_t k = 0; f != NULL; f = px_rtok_at(k++)) {
    int i = px_frtok_index(f);
    const char *t = px_rtok_tag(client, f);
    if (i >= 0 && p->tok[i].p != NULL && p->tok[i].n > 0 && t != NULL) {
      *tag = t;
      *tok = p->tok[i];
      return 1;
    }
  }
  return 0;
}

int px_fb_rtok(px_buf_t *b, px_proto_t client, const px_fpart_t *p) {
  const char *tag;
  px_fstr_t tok;
  if (!px_frtok_out(client, p, &tag, &tok)) return 1;
  if (px_fb_lit(b, "\"") < 0 || px_fb_lit(b, tag) < 0 || px_fb_put(b, tok.p, tok.n) < 0 ||
      px_fb_lit(b, "\"") < 0)
    return PX_ENOMEM;
  return 0;
}

int px_freq_reasoning_on(const px_freq_t *ir) {
  return ir->has_reasoning && ir->reasoning_enabled != 0 && !px_fs_is(ir->effort, "none");
}

static unsigned part_uses(const px_fpart_t *p) {
  unsigned u = 0;
  for (; p != NULL; p = p->next) {
    switch (p->type) {
      case PX_FP_REASONING:
        u |= PX_FU_REASONING;
        break;
      case PX_FP_IMAGE:
      case PX_FP_FILE:
        u |= PX_FU_MEDIA;
        break;
      case PX_FP_REFUSAL:
        u |= PX_FU_REFUSAL;
        break;
      case PX_FP_TOOL_CALL:
        u |= p->custom ? PX_FU_CUSTOM : 0;
        break;
      case PX_FP_TOOL_RESULT:
        u |= part_uses(p->content);
        break;
      case PX_FP_TEXT:
        u |= p->annotations.ptr != NULL ? PX_FU_ANNOTATIONS : 0;
        break;
    }
  }
  return u;
}

unsigned px_freq_uses(const px_freq_t *ir) {
  unsigned u = part_uses(ir->system);
  for (const px_fmsg_t *m = ir->msgs; m != NULL; m = m->next)
    u |= part_uses(m->parts) | (m->system_note ? PX_FU_SYSTEM_NOTE : 0);
  for (const px_ftool_t *t = ir->tools; t != NULL; t = t->next)
    u |= t->custom ? PX_FU_CUSTOM : 0;
  if (ir->has_reasoning) u |= PX_FU_REASONING_CFG;
  if (ir->rf_json || ir->rf_schema.ptr != NULL) u |= PX_FU_RF_JSON;
  if (ir->prompt_cache_key.p != NULL) u |= PX_FU_CACHE_KEY;
  if (ir->verbosity.p != NULL) u |= PX_FU_VERBOSITY;
  return u;
}

unsigned px_fresp_uses(const px_fresp_t *ir) {
  /* an answer that stops as a refusal is one, even without its wording */
  return part_uses(ir->content) | (ir->stop == PX_STOP_REFUSAL ? PX_FU_REFUSAL : 0) |
         (ir->refusal_explanation.p != NULL ? PX_FU_REFUSAL_EXPL : 0);
}

int px_fast_lossy_key(px_lossy_t *lossy, px_fstr_t k) {
  /* a name with escapes, a comma or "..." is not one element of a lossy list
   * as the reference writes it (the hub's merge splits or skips it:
   * px_lossy_each): the reference names it */
  if (k.p == NULL || k.esc || k.n == 0 || k.n >= 256 || memchr(k.p, ',', k.n) != NULL ||
      (k.n == 3 && memcmp(k.p, "...", 3) == 0))
    return PX_FAST_DECLINE;
  if (lossy == NULL) return 0; /* only asked whether it can be named */
  char name[256];
  memcpy(name, k.p, k.n);
  name[k.n] = 0;
  px_lossy_add(lossy, name);
  return 0;
}

int px_fb_drop_members(px_buf_t *b, size_t start, const px_fkey_t *drop, int n) {
  /* in place: what is kept moves left, never past what is still to read */
  char *o = b->data + start;
  px_fw_t w = {o, b->len - start, 0};
  px_fstr_t key;
  px_fv_t v;
  size_t out = 1;
  int r, kept = 0;
  if (px_fw_open(&w, '{') < 0) return -1;
  while ((r = px_fw_member(&w, &key)) != 0) {
    const char *ks = key.p - 1; /* its opening quote */
    if (r < 0 || px_fw_value(&w, &v) < 0) return -1; /* only b's tail moved: not yet */
    if (px_fk_of(key, drop, n) >= 0) continue;
    size_t l = (size_t)(w.p + w.i - ks);
    if (kept++) o[out++] = ',';
    memmove(o + out, ks, l);
    out += l;
  }
  o[out++] = '}';
  b->len = start + out;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Nested checked reads (issue 21: the Responses stream decoder's lifecycle
 * events, read in one walk). px_fc_fields with a table per object read: the
 * members read where they stand, the rest checked and skipped, the calls
 * inline; a plain integer (px_fj_int_end's: at most 15 digits, which
 * jansson reads as an integer too) without px_json_number. The values
 * skipped nest at most TREE_MAX deep: with the tables' levels (and a span
 * of memo met a level deeper than where it was checked) the whole text
 * stays within PX_JSON_MAX_DEPTH, as jansson's loader counts it.         */

#define TREE_MAX (PX_JSON_MAX_DEPTH - 8)

FC_INLINE int fc_value_int(px_fw_t *w, px_fv_t *v) {
  const unsigned char *u = (const unsigned char *)w->p;
  size_t i = w->i, e;
  if (i < w->n && ((u[i] >= '0' && u[i] <= '9') || u[i] == '-') &&
      (e = px_fj_int_end(u, w->n, i)) != 0) {
    v->kind = PX_FV_NUM;
    v->s.p = NULL;
    v->raw.ptr = w->p + i;
    v->raw.len = e - i;
    w->i = e;
    return 0;
  }
  return fc_value_max(w, v, TREE_MAX);
}

/* A container value equal, byte for byte, to one of memo's spans (text
 * checked before): its length, else 0. */
FC_INLINE size_t seen_span(const px_fw_t *w, const px_fmemo_t *memo) {
  for (int k = 0; memo != NULL && k < memo->n; k++) {
    px_str_t m = memo->span[k];
    if (m.len > 0 && m.len <= w->n - w->i && m.ptr[0] == w->p[w->i] &&
        memcmp(m.ptr, w->p + w->i, m.len) == 0)
      return m.len;
  }
  return 0;
}

static int fc_tree(px_fw_t *w, const px_ftab_t *t, px_fv_t *f, unsigned *seen,
                   const px_fmemo_t *memo) {
  px_fstr_t k;
  int r, first = 1;
  /* the lengths of the table's names: most members' names are none of
   * them, told by their length alone */
  uint64_t lens = 0;
  for (int i = 0; i < t->n; i++) lens |= 1ull << (t->keys[i].n & 63);
  ws(w);
  if (w->i >= w->n || w->p[w->i] != '{') return PX_FAST_DECLINE;
  w->i++;
  while ((r = fc_member(w, &k, &first)) == 1) {
    px_fv_t v, *dst = &v;
    if (k.esc) return PX_FAST_DECLINE;
    int ki = (lens >> (k.n & 63) & 1) ? px_fk_of(k, t->keys, t->n) : -1;
    if (ki >= 0) {
      int s = t->base + ki;
      if (px_fw_seen_twice(seen, s)) return PX_FAST_DECLINE;
      dst = &f[s];
      if (t->sub != NULL && t->sub[ki] != NULL && w->p[w->i] == '{') {
        size_t st = w->i;
        if (fc_tree(w, t->sub[ki], f, seen, memo) != 0) return PX_FAST_DECLINE;
        dst->kind = PX_FV_OBJ;
        dst->s.p = NULL;
        dst->raw.ptr = w->p + st;
        dst->raw.len = w->i - st;
        continue;
      }
    }
    size_t l;
    if ((w->p[w->i] == '{' || w->p[w->i] == '[') && (l = seen_span(w, memo)) != 0) {
      dst->kind = w->p[w->i] == '{' ? PX_FV_OBJ : PX_FV_ARR;
      dst->s.p = NULL;
      dst->raw.ptr = w->p + w->i;
      dst->raw.len = l;
      w->i += l;
      continue;
    }
    if (fc_value_int(w, dst) < 0) return PX_FAST_DECLINE;
  }
  return r < 0 ? PX_FAST_DECLINE : 0;
}

int px_fc_tree(px_fw_t *w, const px_ftab_t *t, px_fv_t *f, unsigned *seen) {
  return fc_tree(w, t, f, seen, NULL);
}

int px_fc_tree_memo(px_fw_t *w, const px_ftab_t *t, px_fv_t *f, unsigned *seen,
                    const px_fmemo_t *memo) {
  return fc_tree(w, t, f, seen, memo);
}

/* ------------------------------------------------------------------------ */
/* What the one reader's rule refuses in a body a fast codec declined        */

typedef struct odd {
  int found;  /* PX_ODD_REPEATED, else the first PX_ODD_ESCAPED_NAME seen */
  char *path; /* the caller's buffer */
  size_t cap;
} odd_t;

static int key_cmp(const void *a, const void *b) {
  const px_fstr_t *x = a, *y = b;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  return memcmp(x->p, y->p, x->n);
}

/* base.name into the caller's buffer, cut at its size */
static void odd_path(odd_t *o, const char *base, size_t blen, const char *name,
                     size_t n) {
  snprintf(o->path, o->cap, "%.*s%s%.*s", (int)blen, base, blen && n ? "." : "",
           (int)(n > 96 ? 96 : n), name);
}

static int odd_value(px_fw_t *w, odd_t *o, const char *path, size_t plen, int depth) {
  px_fv_kind_t kind = px_fw_peek(w);
  if (depth > PX_JSON_MAX_DEPTH) return -1;
  char sub[192];
  if (kind == PX_FV_ARR) {
    if (px_fw_open(w, '[') < 0) return -1;
    int r;
    for (long i = 0; (r = px_fw_elem(w)) == 1; i++) {
      int k = snprintf(sub, sizeof(sub), "%.*s[%ld]", (int)plen, path, i);
      if (odd_value(w, o, sub, k < (int)sizeof(sub) ? (size_t)k : sizeof(sub) - 1,
                    depth + 1) < 0)
        return -1;
      if (o->found == PX_ODD_REPEATED) return 0;
    }
    return r;
  }
  if (kind != PX_FV_OBJ) {
    px_fv_t v;
    return px_fw_value(w, &v);
  }
  if (px_fw_open(w, '{') < 0) return -1;
  px_fstr_t *keys = NULL;
  size_t nk = 0, ck = 0;
  int r;
  px_fstr_t k;
  while ((r = px_fw_member(w, &k)) == 1) {
    if (nk == ck) {
      size_t nc = ck ? ck * 2 : 16;
      px_fstr_t *g = realloc(keys, nc * sizeof(*g));
      if (g == NULL) {
        r = -1;
        break;
      }
      keys = g;
      ck = nc;
    }
    keys[nk++] = k;
    int kl = snprintf(sub, sizeof(sub), "%.*s%s%.*s", (int)plen, path, plen ? "." : "",
                      (int)(k.n > 96 ? 96 : k.n), k.p);
    size_t sl = kl < (int)sizeof(sub) ? (size_t)kl : sizeof(sub) - 1;
    /* the first of a kind, the kinds in their order */
    int kind = k.esc                             ? PX_ODD_ESCAPED_NAME
               : px_fast_lossy_key(NULL, k) != 0 ? PX_ODD_UNNAMED
                                                 : 0;
    if (kind && (!o->found || o->found > kind)) {
      o->found = kind;
      odd_path(o, sub, sl, "", 0);
    }
    if (odd_value(w, o, sub, sl, depth + 1) < 0) {
      r = -1;
      break;
    }
    if (o->found == PX_ODD_REPEATED) break;
  }
  if (r == 0 && nk > 1) {
    qsort(keys, nk, sizeof(*keys), key_cmp);
    for (size_t i = 1; i < nk; i++)
      if (key_cmp(&keys[i - 1], &keys[i]) == 0) {
        o->found = PX_ODD_REPEATED;
        odd_path(o, path, plen, keys[i].p, keys[i].n);
        break;
      }
  }
  free(keys);
  return r < 0 ? -1 : 0;
}

int px_fast_odd_member(const char *p, size_t n, char *path, size_t cap) {
  odd_t o = {0, path, cap};
  path[0] = 0;
  px_fw_t w = {p, n, 0};
  if (odd_value(&w, &o, "", 0, 0) < 0) return -1;
  return o.found;
}
/* Checked views (the stream codecs' events): a value checked whole once,   */
/* then read where it lies, as jansson would read its document             */

int px_jv_parse(const char *p, size_t n, px_fv_t *v) {
  px_fw_t w = {p, n, 0};
  ws(&w);
  /* json_loadb's flags 0: an object or an array, nothing after it */
  if (p == NULL || w.i >= n || (p[w.i] != '{' && p[w.i] != '[') || fc_value(&w, v) < 0 ||
      px_fc_end(&w) < 0) {
    v->raw.ptr = NULL;
    return -1;
  }
  return 0;
}

/* the last member of o from w's place on whose name is `key` */
static int last_of(px_fw_t *w, const char *key, size_t kn, px_fv_t *out) {
  px_fstr_t k;
  px_fv_t v;
  int found = 0;
  while (fw_member(w, &k) == 1) {
    if (fw_value(w, &v) < 0) break;
    if (px_fs_isn(k, key, kn)) {
      *out = v;
      found = 1;
    }
  }
  return found;
}

int px_jv_get(const px_fv_t *o, const char *key, px_fv_t *out) {
  if (!px_jv_is(o, PX_FV_OBJ)) {
    out->raw.ptr = NULL;
    return 0;
  }
  px_fw_t w = {o->raw.ptr, o->raw.len, 1};
  if (last_of(&w, key, strlen(key), out)) return 1;
  out->raw.ptr = NULL;
  return 0;
}

unsigned px_jv_fields(const px_fv_t *o, const px_fkey_t *keys, int n, px_fv_t *out) {
  unsigned found = 0;
  for (int k = 0; k < n; k++) out[k].raw.ptr = NULL;
  if (!px_jv_is(o, PX_FV_OBJ)) return 0;
  px_fw_t w = {o->raw.ptr, o->raw.len, 1};
  px_fstr_t k;
  px_fv_t skip;
  while (fw_member(&w, &k) == 1) {
    int ki = -1;
    for (int i = 0; ki < 0 && i < n; i++)
      if (px_fs_isn(k, keys[i].s, keys[i].n)) ki = i;
    if (fw_value(&w, ki >= 0 ? &out[ki] : &skip) < 0) break;
    if (ki >= 0) found |= 1u << ki;
  }
  return found;
}

int px_jv_member(px_jv_it_t *it, px_fstr_t *key, px_fv_t *val) {
  px_fstr_t k, e;
  px_fv_t v;
  while (fw_member(&it->w, &k) == 1) {
    size_t at = it->w.i;
    if (fw_value(&it->w, &v) < 0) return 0;
    /* a name met before: its place and value were given then */
    px_fw_t b = {it->w.p, it->w.n, 1};
    int before = 0;
    px_fv_t skip;
    while (!before && fw_member(&b, &e) == 1 && b.i < at) {
      before = px_fs_same(e, k);
      if (fw_value(&b, &skip) < 0) return 0;
    }
    if (before) continue;
    *key = k;
    *val = v;
    /* the value of its last occurrence */
    px_fw_t r = it->w;
    px_fstr_t rk;
    px_fv_t rv;
    while (fw_member(&r, &rk) == 1) {
      if (fw_value(&r, &rv) < 0) return 0;
      if (px_fs_same(rk, k)) *val = rv;
    }
    return 1;
  }
  return 0;
}

void px_jv_iter(px_jv_it_t *it, const px_fv_t *c) {
  int ok = px_jv_is(c, PX_FV_OBJ) || px_jv_is(c, PX_FV_ARR);
  it->w = (px_fw_t){ok ? c->raw.ptr : "", ok ? c->raw.len : 0, ok ? 1 : 0};
}

int px_jv_elem(px_jv_it_t *it, px_fv_t *v) {
  if (it->w.n == 0 || px_fw_elem(&it->w) != 1) return 0;
  return fw_value(&it->w, v) == 0;
}

size_t px_jv_size(const px_fv_t *a) {
  px_jv_it_t it;
  px_fv_t v;
  size_t n = 0;
  if (!px_jv_is(a, PX_FV_ARR)) return 0;
  px_jv_iter(&it, a);
  while (px_jv_elem(&it, &v)) n++;
  return n;
}

const char *px_fs_cstr(px_arena_t *a, px_fstr_t f, size_t *len) {
  char *s = px_arena_alloc(a, f.n + 1);
  if (s == NULL) return NULL;
  px_buf_t b = {s, 0, f.n + 1, f.n + 1};
  px_str_t out;
  if (px_json_unescape(f.p, f.n, f.esc, &b, &out) < 0) return NULL;
  if (out.ptr != s) memcpy(s, out.ptr, out.len);
  s[out.len] = 0;
  if (len) *len = out.len;
  return s;
}

const char *px_jv_str(px_arena_t *a, const px_fv_t *v, size_t *len) {
  return px_jv_is(v, PX_FV_STR) ? px_fs_cstr(a, v->s, len) : NULL;
}

px_str_t px_jv_sget(px_arena_t *a, const px_fv_t *o, const char *key) {
  px_fv_t v;
  size_t n = 0;
  px_jv_get(o, key, &v);
  const char *s = px_jv_str(a, &v, &n);
  return s ? (px_str_t){s, n} : PX_STR_NULL;
}

int64_t px_jv_iget(const px_fv_t *o, const char *key, int64_t dflt) {
  px_fv_t v;
  px_jv_get(o, key, &v);
  px_jv_int(&v, &dflt);
  return dflt;
}

int px_jv_int(const px_fv_t *v, int64_t *out) {
  if (!px_jv_is(v, PX_FV_NUM) || !px_fw_is_int(v->raw)) return 0;
  /* in range: the checked read held it to int64 */
  const char *p = v->raw.ptr;
  size_t i = p[0] == '-';
  uint64_t u = 0;
  for (; i < v->raw.len; i++) u = u * 10 + (uint64_t)(p[i] - '0');
  *out = p[0] == '-' ? (int64_t)(0 - u) : (int64_t)u;
  return 1;
}

/* a real as jansson writes it (dump.c's jsonp_dtostr: %.17g, ".0" when it
 * reads as an integer, no '+' or leading zeros in the exponent) */
static int fb_real(px_buf_t *b, px_str_t raw) {
  char t[64], o[64];
  if (raw.len >= sizeof(t)) {
    char *h = malloc(raw.len + 1);
    if (h == NULL) return PX_ENOMEM;
    memcpy(h, raw.ptr, raw.len);
    h[raw.len] = 0;
    snprintf(o, sizeof(o), "%.17g", strtod(h, NULL));
    free(h);
  } else {
    memcpy(t, raw.ptr, raw.len);
    t[raw.len] = 0;
    snprintf(o, sizeof(o), "%.17g", strtod(t, NULL));
  }
  size_t n = strlen(o);
  if (strchr(o, '.') == NULL && strchr(o, 'e') == NULL) {
    memcpy(o + n, ".0", 3);
    n += 2;
  }
  char *e = strchr(o, 'e');
  if (e != NULL) {
    char *s = e + 1, *f = e + 2;
    if (*s == '-') s++;
    while (*f == '0') f++;
    if (f != s) {
      memmove(s, f, (size_t)(o + n + 1 - f));
      n -= (size_t)(f - s);
    }
  }
  return px_fb_put(b, o, n);
}

static int fb_jstr(px_buf_t *b, px_fstr_t s) {
  px_buf_t tmp;
  px_str_t v;
  px_buf_init(&tmp, s.n + 1);
  int rc = px_json_unescape(s.p, s.n, s.esc, &tmp, &v);
  if (rc == 0) rc = px_buf_json_str_as(b, v.ptr, v.len, PX_ESC_JANSSON);
  px_buf_free(&tmp);
  return rc < 0 ? rc : 0;
}

int px_fb_jdump(px_buf_t *b, const px_fv_t *v) {
  switch (v->kind) {
    case PX_FV_STR:
      return fb_jstr(b, v->s);
    case PX_FV_NUM: {
      int64_t i;
      if (px_jv_int(v, &i)) return px_fb_i64(b, i);
      return fb_real(b, v->raw);
    }
    case PX_FV_TRUE:
      return px_fb_lit(b, "true");
    case PX_FV_FALSE:
      return px_fb_lit(b, "false");
    case PX_FV_NULL:
      return px_fb_lit(b, "null");
    case PX_FV_ARR: {
      px_jv_it_t it;
      px_fv_t x;
      int rc = px_fb_lit(b, "["), first = 1;
      px_jv_iter(&it, v);
      while (rc == 0 && px_jv_elem(&it, &x)) {
        if (!first) rc = px_fb_lit(b, ",");
        first = 0;
        if (rc == 0) rc = px_fb_jdump(b, &x);
      }
      return rc == 0 ? px_fb_lit(b, "]") : rc;
    }
    case PX_FV_OBJ: {
      px_jv_it_t it;
      px_fstr_t k;
      px_fv_t x;
      int rc = px_fb_lit(b, "{"), first = 1;
      px_jv_iter(&it, v);
      while (rc == 0 && px_jv_member(&it, &k, &x)) {
        if (!first) rc = px_fb_lit(b, ",");
        first = 0;
        if (rc == 0) rc = fb_jstr(b, k);
        if (rc == 0) rc = px_fb_lit(b, ":");
        if (rc == 0) rc = px_fb_jdump(b, &x);
      }
      return rc == 0 ? px_fb_lit(b, "}") : rc;
    }
  }
  return PX_EINVAL;
}
