/* json.c - the one JSON scanner (include/proxai/json.h): UTF-8 and JSON
 * string syntax, the validating request scanner (SPEC section 10), and the
 * validating fast scanner of the stream decoders' fast paths. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/json.h"

/* ------------------------------------------------------------------------ */
/* UTF-8 and JSON string syntax                                             */

size_t px_utf8_chars(const char *s, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
  return c;
}

size_t px_utf8_offset(const char *s, size_t n, int64_t ci) {
  size_t at = 0;
  for (int64_t k = 0; k < ci && at < n; k++) {
    size_t l = px_utf8_seq((const unsigned char *)s + at, n - at);
    at += l ? l : 1;
  }
  return at;
}

size_t px_utf8_put(char *o, unsigned long cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

long px_hex4(const unsigned char *p) {
  long v = 0;
  for (int k = 0; k < 4; k++) {
    unsigned c = p[k];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
      v |= (c | 0x20) - 'a' + 10;
    else
      return -1;
  }
  return v;
}

size_t px_json_ws_run(const unsigned char *p, size_t n, size_t i) {
  while (i < n && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t')) i++;
  return i;
}

/* The length of the escape at p[j] (a backslash) as jansson reads it: 2,
 * 6 or 12 (a surrogate pair), 0 when invalid (a bad escape or hex, \u0000,
 * a lone surrogate, truncated). */
static const unsigned char simple_escape[256] = {
    ['"'] = 1, ['\\'] = 1, ['/'] = 1, ['b'] = 1,
    ['f'] = 1, ['n'] = 1,  ['r'] = 1, ['t'] = 1};
static size_t escape_u(const unsigned char *p, size_t n, size_t j) {
  if (j + 6 > n || p[j + 1] != 'u') return 0;
  long v = px_hex4(p + j + 2);
  if (v <= 0) return 0;                     /* bad hex, or \u0000 (jansson refuses NUL) */
  if (v >= 0xDC00 && v <= 0xDFFF) return 0; /* lone low surrogate */
  if (v < 0xD800 || v > 0xDBFF) return 6;
  if (j + 12 > n || p[j + 6] != '\\' || p[j + 7] != 'u') return 0;
  long lo = px_hex4(p + j + 8);
  return lo >= 0xDC00 && lo <= 0xDFFF ? 12 : 0;
}
static inline size_t escape_len(const unsigned char *p, size_t n, size_t j) {
  if (j + 1 >= n) return 0;
  return simple_escape[p[j + 1]] ? 2 : escape_u(p, n, j);
}

/* px_json_string_at's loop for what is left of a string once no whole
 * block is (and for targets without SSE2): the plain runs eight or sixteen
 * bytes at a time, each special byte in a scalar step. */
static int string_tail(const unsigned char *p, size_t n, size_t i, size_t *end,
                       int *esc) {
  for (;;) {
    i = px_json_plain(p, n, i);
    if (i >= n) return -1;
    unsigned c = p[i];
    if (c == '"') break;
    if (c < 0x20) return -1;
    if (c >= 0x80) {
      size_t l = px_utf8_seq(p + i, n - i);
      if (l == 0) return -1;
      i += l;
      continue;
    }
    /* backslash */
    *esc = 1;
    size_t l = escape_len(p, n, i);
    if (l == 0) return -1;
    i += l;
  }
  *end = i;
  return 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The block-wise check (x86-64). The content is read in blocks of 64 bytes.
 * Vector compares give one bit a byte in each mask of blk_t; blk_step does
 * the rest on the masks, a scalar step only for the rare bytes (\b, \u,
 * non-ASCII) and for the block the string ends in.
 * The escaped bytes are the ones right after a run of backslashes of odd
 * length, found for the whole block at once and carried from block to block
 * (blk_escaped). A block starts where the one before it ended, or past an
 * escape or a UTF-8 sequence running over its end (the escape carry is then
 * 0: the byte before is not a backslash). */
typedef struct blk {
  uint64_t q;  /* '"' */
  uint64_t b;  /* '\\' */
  uint64_t ok; /* what may follow an escaping backslash but '"', \b and \u: \ / f n r t */
  uint64_t c;  /* below 0x20 or 0x80 and above */
} blk_t;

/* A check of the UTF-8 and the controls of the whole block at p[base]:
 * *bad gets the bytes where a sequence (or a control byte) is wrong, *cut
 * the start of a sequence the block's end cuts (0: none). */
typedef void blk_utf8_fn(const unsigned char *p, size_t base, uint64_t *bad, size_t *cut);

#define ODD_BITS 0xAAAAAAAAAAAAAAAAull

/* The escaped bytes of the block whose backslashes are b: *carry is 1 when
 * its first byte is escaped (an odd run ended the block before), and
 * becomes 1 when the next block's first byte is. After simdjson's escape
 * scanner: shifting the backslashes that start an escape up by one and
 * subtracting them, with the odd bits set, leaves the odd bits of an
 * odd-aligned run and the even bits of an even-aligned run; with the odd
 * bits flipped back that is one bit on each escaping backslash and on each
 * escaped byte. */
static inline uint64_t blk_escaped(uint64_t b, uint64_t *carry) {
  uint64_t in = *carry, starts = b & ~in; /* an escaped backslash escapes nothing */
  uint64_t codes = (((starts << 1) | ODD_BITS) - starts) ^ ODD_BITS;
  *carry = (codes & b) >> 63;
  return codes ^ (b | in);
}

/* px_utf8_seq for a byte of a string that is not plain ASCII: 0 for a
 * control byte; two and three byte sequences (most non-ASCII text) from one
 * little-endian 32-bit word where four bytes are left: 110xxxxx 10xxxxxx (C0 and C1
 * never), 1110xxxx 10xxxxxx 10xxxxxx but E0 80..9F (overlong) and
 * ED A0..BF (surrogates) */
static inline size_t utf8_seq_at(const unsigned char *s, size_t n) {
  if (n >= 4) {
    uint32_t w;
    memcpy(&w, s, 4);
    if ((w & 0xC0E0) == 0x80C0) return (w & 0x1E) != 0 ? 2 : 0;
    if ((w & 0xC0C0F0) == 0x8080E0) {
      uint32_t x = w & 0x200F; /* the lead's low four bits, 0x20 of the second */
      return x == 0 || x == 0x200D ? 0 : 3;
    }
  }
  return s[0] < 0x80 ? 0 : px_utf8_seq(s, n);
}

/* The control and non-ASCII bytes of the block at base (bits of c): a
 * control byte refused, a UTF-8 sequence starting at each non-ASCII byte
 * checked (utf8_seq_at); *next moves past one running over the block.
 * 0, or -1. */
static inline __attribute__((always_inline)) int blk_utf8_run(const unsigned char *p,
                                                              size_t n, size_t base,
                                                              uint64_t c, size_t *next,
                                                              int wide) {
  while (c != 0) {
    unsigned j = (unsigned)__builtin_ctzll(c);
    size_t l = utf8_seq_at(p + base + j, wide ? 4 : n - base - j);
    if (l == 0) return -1;
    size_t stop = j + l;
    if (stop >= 64) {
      if (base + stop > *next) *next = base + stop;
      return 0;
    }
    c &= ~0ull << stop;
  }
  return 0;
}
static inline __attribute__((always_inline)) int blk_utf8(const unsigned char *p,
                                                          size_t n, size_t base,
                                                          uint64_t c, size_t *next) {
  /* four bytes readable at every byte of the block (mostly): no bound to
   * test at each sequence */
  if (n - base >= 64 + 3) return blk_utf8_run(p, n, base, c, next, 1);
  return blk_utf8_run(p, n, base, c, next, 0);
}

/* The escapes of the block at base that the masks do not clear (bits of
 * odd: the letters after escaping backslashes; bit 0 may be one whose
 * backslash ended the block before): \b, \u (its hex, \u0000 and
 * surrogate pairs as escape_u reads them), or an invalid escape. *next
 * moves past one running over the block. 0, or -1. */
static int blk_escapes(const unsigned char *p, size_t n, size_t base, uint64_t odd,
                       size_t *next) {
  while (odd != 0) {
    unsigned j = (unsigned)__builtin_ctzll(odd);
    size_t at = base + j;
    if (p[at] == 'b') {
      odd &= odd - 1;
      continue;
    }
    size_t l = p[at] == 'u' ? escape_u(p, n, at - 1) : 0;
    if (l == 0) return -1;
    size_t stop = (size_t)j + l - 1; /* a pair's second \u is taken with it */
    if (stop >= 64) {
      if (base + stop > *next) *next = base + stop;
      return 0;
    }
    odd &= ~0ull << stop;
  }
  return 0;
}

/* Where the block loop is: the block at p[at..at+64), whether its first
 * byte is escaped (an odd run of backslashes ended the block before), and
 * the backslashes of the string so far. */
typedef struct blk_st {
  size_t at;
  uint64_t carry, bs;
} blk_st_t;

/* A block that is not the usual one (blk_step): with an escape the masks do not
 * clear, with many non-ASCII bytes, or with the string's end; escaped are
 * its escaped bytes, st->carry the next block's. 1 when the string ends in
 * it (*end), 0 when it goes on (st->at: where the next block starts), -1
 * when jansson would refuse it. */
static inline __attribute__((always_inline)) int blk_rare(const unsigned char *p,
                                                          size_t n, const blk_t *m,
                                                          uint64_t escaped, blk_st_t *st,
                                                          size_t *end, blk_utf8_fn *all) {
  size_t base = st->at, nb = base + 64;
  uint64_t closing = m->q & ~escaped;
  uint64_t in = (closing & (0 - closing)) - 1; /* the bytes before the end (all: none) */
  st->bs |= m->b & in;
  uint64_t odd = escaped & ~(m->ok | m->q) & in;
  if (odd != 0 && blk_escapes(p, n, base, odd, &nb) < 0) return -1;
  if ((m->c & in) != 0) {
    if (all != NULL && __builtin_popcountll(m->c & in) > 16) {
      /* many non-ASCII bytes (text in most scripts but Latin): at once */
      uint64_t bad;
      size_t cut;
      all(p, base, &bad, &cut);
      /* a sequence the closing quote cuts shows at the quote */
      if ((bad & (in | (closing & (0 - closing)))) != 0) return -1;
      if (cut != 0 && cut < nb) nb = cut;
    } else if (blk_utf8(p, n, base, m->c & in, &nb) < 0) {
      return -1;
    }
  }
  if (closing != 0) {
    *end = base + (size_t)__builtin_ctzll(closing);
    return 1;
  }
  /* past a \u escape: a pair's second backslash may have ended the block */
  if (nb > base + 64) st->carry = 0;
  st->at = nb;
  return 0;
}

/* The block at st->at that blk_step does not take (its masks q, b, ok, c
 * and escaped bytes as blk_step found them): see blk_rare. */
typedef int blk_rare_fn(const unsigned char *p, size_t n, uint64_t q, uint64_t b,
                        uint64_t ok, uint64_t c, uint64_t escaped, blk_st_t *st,
                        size_t *end);

/* One block of the loop from its masks m: the usual block (every escape a
 * one-letter one: " \\ / f n r t, at most 16 non-ASCII bytes) and the
 * block the string ends in after such bytes here, the rest by rare. 1 when
 * the string ends in it (*end), 0 when it goes on (*at: where the next
 * block starts), -1 when jansson would refuse it. */
static inline __attribute__((always_inline)) int blk_step(const unsigned char *p,
                                                          size_t n, const blk_t *m,
                                                          size_t *at, uint64_t *carry,
                                                          uint64_t *bs, size_t *end,
                                                          blk_rare_fn *rare) {
  uint64_t escaped = blk_escaped(m->b, carry);
  /* no unescaped quote, no escaped byte but a quote or a letter: as ok and
   * q have no byte in common, that is q ^ (escaped & ~ok) == 0 */
  if ((m->q ^ (escaped & ~m->ok)) == 0) {
    if (m->c == 0) {
      *bs |= m->b;
      *at += 64;
      return 0;
    }
    if (__builtin_popcountll(m->c) <= 16) {
      size_t nb = *at + 64;
      /* (a sequence running over the block ends it in a non-ASCII byte, so
       * the escape carry is 0 already) */
      if (blk_utf8(p, n, *at, m->c, &nb) < 0) return -1;
      *bs |= m->b;
      *at = nb;
      return 0;
    }
  }
  /* the string's end, after one-letter escapes and ASCII only */
  uint64_t closing = m->q & ~escaped, in = (closing & (0 - closing)) - 1;
  if (__builtin_expect(closing != 0, 0) &&
      (((escaped & ~(m->ok | m->q)) | m->c) & in) == 0) {
    *bs |= m->b & in;
    *end = *at + (size_t)__builtin_ctzll(closing);
    return 1;
  }
  blk_st_t st = {*at, *carry, *bs};
  int rc = rare(p, n, m->q, m->b, m->ok, m->c, escaped, &st, end);
  *at = st.at, *carry = st.carry, *bs = st.bs;
  return rc;
}

/* The bytes that may follow an escaping backslash, by their low four bits
 * (a lookup of string_avx2; '"' has the quote mask, 'b' and 'u' are
 * blk_escapes' business); 0x80 matches no byte the lookup indexes. */
#define LETTERS                                                                         \
  0x80, 0x80, 'r', 0x80, 't', 0x80, 'f', 0x80, 0x80, 0x80, 0x80, 0x80, '\\', 0x80, 'n', \
      '/'
/* The quote and the backslash, the same way (string_avx2's other lookup) */
#define QUOTE_BS                                                                     \
  0x80, 0x80, '"', 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, '\\', 0x80, \
      0x80, 0x80

/* every CPU with AVX2 has BMI1, BMI2 and POPCNT (andn, blsi, tzcnt, shlx) */
#define AVX2 __attribute__((target("avx2,bmi,bmi2,popcnt")))
#include <immintrin.h>

AVX2 static inline uint64_t avx2_bits(__m256i lo, __m256i hi) {
  uint64_t l = (uint32_t)_mm256_movemask_epi8(lo), h = (uint32_t)_mm256_movemask_epi8(hi);
  return l | h << 32;
}

/* The constants of the block loop, read from memory where used (a writable
 * global: were they const, GCC would build each in three steps): the
 * lookups of the quote and backslash (QUOTE_BS) and of the letters
 * (LETTERS), 0x20 each. Never written. */
enum { K_QB, K_SP, K_LET };
__attribute__((visibility("hidden"))) union {
  unsigned char b[3][32];
  __m256i v[3];
} px_json_avx2_k = {{{QUOTE_BS, QUOTE_BS}, {[0 ... 31] = 0x20}, {LETTERS, LETTERS}}};
/* The UTF-8 and the controls of a block, all at once (after Keiser and
 * Lemire, "Validating UTF-8 in less than one instruction per byte"): each
 * byte with the one before it falls in one of the classes below, by three
 * lookups (the high and low half of the byte before, the high half of this
 * one) whose AND is non-zero only for a wrong pair; a continuation byte
 * after a continuation byte is wrong unless a lead two or three bytes
 * before asks for it. The block starts fresh (the bytes before it count as
 * ASCII). */
enum {
  U8_SHORT = 0x01,     /* a lead not followed by a continuation byte */
  U8_LONG = 0x02,      /* a continuation byte after ASCII */
  U8_OVER3 = 0x04,     /* E0 80..9F */
  U8_SURR = 0x08,      /* ED A0..BF */
  U8_OVER2 = 0x10,     /* C0 or C1 (never valid) before a continuation byte */
  U8_LARGE = 0x20,     /* F4 90..BF; F5 and above 90..BF */
  U8_OVER4 = 0x40,     /* F0 80..8F; F5 and above 80..8F */
  U8_TWO_CONTS = 0x80, /* a continuation byte after a continuation byte */
};
#define U8_PREV_HIGH                                                                    \
  U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_LONG, U8_TWO_CONTS, \
      U8_TWO_CONTS, U8_TWO_CONTS, U8_TWO_CONTS, U8_SHORT | U8_OVER2, U8_SHORT,          \
      U8_SHORT | U8_OVER3 | U8_SURR, U8_SHORT | U8_OVER4 | U8_LARGE
#define U8_ANY (U8_SHORT | U8_LONG | U8_TWO_CONTS)
#define U8_F5 (U8_ANY | U8_LARGE | U8_OVER4)
#define U8_PREV_LOW                                                              \
  U8_ANY | U8_OVER2 | U8_OVER3 | U8_OVER4, U8_ANY | U8_OVER2, U8_ANY, U8_ANY,    \
      U8_ANY | U8_LARGE, U8_F5, U8_F5, U8_F5, U8_F5, U8_F5, U8_F5, U8_F5, U8_F5, \
      U8_F5 | U8_SURR, U8_F5, U8_F5
#define U8_CONT (U8_LONG | U8_TWO_CONTS | U8_OVER2)
#define U8_HIGH                                                                       \
  U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT, U8_SHORT,     \
      U8_CONT | U8_OVER3 | U8_OVER4, U8_CONT | U8_OVER3 | U8_LARGE,                   \
      U8_CONT | U8_SURR | U8_LARGE, U8_CONT | U8_SURR | U8_LARGE, U8_SHORT, U8_SHORT, \
      U8_SHORT, U8_SHORT

/* The constants of U8_HALF and of the cut test (read from memory
 * where used, as px_json_avx2_k; never written) */
__attribute__((visibility("hidden"))) union {
  unsigned char b[8][32];
  __m256i v[8];
} px_json_avx2_u8 = {{{U8_PREV_HIGH, U8_PREV_HIGH},
                      {U8_PREV_LOW, U8_PREV_LOW},
                      {U8_HIGH, U8_HIGH},
                      {[0 ... 31] = 0x0f},
                      {[0 ... 31] = 0xe0 - 0x80},
                      {[0 ... 31] = 0xf0 - 0x80},
                      {[0 ... 31] = 0x80},
                      /* a lead in the last three bytes whose sequence the
                       * block's end cuts: 0x80 or more less these */
                      {[0 ... 28] = 0xff, [29] = 0x70, [30] = 0x60, [31] = 0x40}}};

/* The check of one half V of a block into A (0: fine; a sequence the
 * block's end cuts is not wrong), in assembly (GCC's code for it kept the
 * tables in memory and spilled: 60 steps a block where these are 47). B:
 * the 32 bytes before V (zero at the block's start), P, T: scratch (B
 * too); %[u1], %[u2], %[u3]: the tables, at %[u8] the other constants
 * (px_json_avx2_u8: 0x0f at 96, 0x60 at 128, 0x70 at 160, 0x80 at 192).
 * cls: the AND of the three lookups; due: a third or fourth byte of a
 * sequence, where the continuation is. */
#define U8_HALF(V, A, B, P, T)     \
  "vpalignr $15, " B ", " V ", " P \
  "\n\t"                           \
  "vpsrlw $4, " P ", " T           \
  "\n\t"                           \
  "vpand 96(%[u8]), " T ", " T     \
  "\n\t"                           \
  "vpshufb " T ", %[u1], " A       \
  "\n\t"                           \
  "vpand 96(%[u8]), " P ", " T     \
  "\n\t"                           \
  "vpshufb " T ", %[u2], " T       \
  "\n\t"                           \
  "vpand " T ", " A ", " A         \
  "\n\t"                           \
  "vpsrlw $4, " V ", " T           \
  "\n\t"                           \
  "vpand 96(%[u8]), " T ", " T     \
  "\n\t"                           \
  "vpshufb " T ", %[u3], " T       \
  "\n\t"                           \
  "vpand " T ", " A ", " A         \
  "\n\t"                           \
  "vpalignr $14, " B ", " V ", " P \
  "\n\t"                           \
  "vpsubusb 128(%[u8]), " P ", " P \
  "\n\t"                           \
  "vpalignr $13, " B ", " V ", " B \
  "\n\t"                           \
  "vpsubusb 160(%[u8]), " B ", " B \
  "\n\t"                           \
  "vpor " B ", " P ", " P          \
  "\n\t"                           \
  "vpand 192(%[u8]), " P ", " P    \
  "\n\t"                           \
  "vpxor " P ", " A ", " A "\n\t"
#define U8_IN                                                     \
  [u1] "x"(px_json_avx2_u8.v[0]), [u2] "x"(px_json_avx2_u8.v[1]), \
      [u3] "x"(px_json_avx2_u8.v[2]), [u8] "r"(px_json_avx2_u8.v), "m"(px_json_avx2_u8)

/* blk_utf8_fn with AVX2 */
AVX2 __attribute__((noinline)) static void avx2_utf8(const unsigned char *p, size_t base,
                                                     uint64_t *bad, size_t *cut) {
  const __m256i zero = _mm256_setzero_si256();
  __m256i v0 = _mm256_loadu_si256((const __m256i *)(p + base));
  __m256i v1 = _mm256_loadu_si256((const __m256i *)(p + base + 32));
  __m256i e0, e1, b, q, t;
  /* the control bytes: sp - v > 0 */
#define U8_TEXT \
  "vperm2i128 $0x08, %[v0], %[v0], %[b]\n\t" U8_HALF("%[v0]", "%[e0]", "%[b]", "%[q]", \
                                                     "%[t]")                          \
  "vpsubusb %[v0], %[sp], %[t]\n\t"                                                 \
  "vpor %[t], %[e0], %[e0]\n\t"                                                     \
  "vperm2i128 $0x21, %[v1], %[v0], %[b]\n\t" U8_HALF("%[v1]", "%[e1]", "%[b]", "%[q]", \
                                                     "%[t]")                          \
  "vpsubusb %[v1], %[sp], %[t]\n\t"                                                 \
  "vpor %[t], %[e1], %[e1]"
  __asm__(U8_TEXT
          : [e0] "=&x"(e0), [e1] "=&x"(e1), [b] "=&x"(b), [q] "=&x"(q), [t] "=&x"(t)
          : [v0] "x"(v0), [v1] "x"(v1), [sp] "x"(px_json_avx2_k.v[K_SP]), U8_IN);
#undef U8_TEXT
  *bad = ~avx2_bits(_mm256_cmpeq_epi8(e0, zero), _mm256_cmpeq_epi8(e1, zero));
  const unsigned char *e = p + base + 64;
  *cut = e[-1] >= 0xc0   ? base + 63
         : e[-2] >= 0xe0 ? base + 62
         : e[-3] >= 0xf0 ? base + 61
                         : 0;
}

/* blk_rare_fn with AVX2 */
AVX2 __attribute__((noinline)) static int blk_rare_avx2(const unsigned char *p, size_t n,
                                                        uint64_t q, uint64_t b,
                                                        uint64_t ok, uint64_t c,
                                                        uint64_t escaped, blk_st_t *st,
                                                        size_t *end) {
  const blk_t m = {q, b, ok, c};
  return blk_rare(p, n, &m, escaped, st, end, avx2_utf8);
}

/* blk_step out of string_avx2's loop (which takes the usual blocks itself)
 * with the masks of the block at `at` and the loop's state, given and
 * returned by value (kept in registers on the loop's usual path) */
typedef struct blk_out {
  size_t at;
  uint64_t carry, bs;
  int rc;
} blk_out_t;
AVX2 __attribute__((noinline)) static blk_out_t blk_slow_avx2(
    const unsigned char *p, size_t n, uint64_t q, uint64_t b, uint64_t ok, uint64_t c,
    size_t at, uint64_t carry, uint64_t bs, size_t *end) {
  const blk_t m = {q, b, ok, c};
  blk_out_t o;
  o.rc = blk_step(p, n, &m, &at, &carry, &bs, end, blk_rare_avx2);
  o.at = at, o.carry = carry, o.bs = bs;
  return o;
}

/* px_json_string_at with AVX2; *esc only when esc is not NULL (the tree
 * walk has no use for it: one step a block less) */
AVX2 static inline __attribute__((always_inline)) int string_avx2_at(
    const unsigned char *p, size_t n, size_t i, size_t *end, int *esc) {
  const __m256i *k = px_json_avx2_k.v;
  uint64_t carry = 0, any_bs = 0;
  int rc = 0;
  /* (a pointer, the end of the last whole block: fewer steps a block) */
  const unsigned char *at = p + i, *last = p + n - 64;
  /* (the block at last + off: the step a block and the loop's test in one) */
  ptrdiff_t off = at - last;
  for (;;) {
    uint64_t qb, ok, codes, t, cz, j;
    __m256i v0, v1, t0, t1, kb, kp, kt;
    /* The usual blocks until one that is not, or the last whole block:
     * blk_step's usual block in fewer steps. Two lookups give the quotes
     * and backslashes (qb) and the letters (ok; the backslashes are the
     * letters among qb); the codes are blk_escaped's, with the carry in
     * bit 0 of the shifted starts (carry + 2 starts; no borrow: bit 0 of
     * starts is 0 then);
     * as the backslashes are letters, the escaped bytes that are not
     * letters are the codes that are not, and these must be the quotes:
     * (codes ^ qb) & ~ok is 0 when every escape is a one-letter one and
     * the string goes on. The control and non-ASCII bytes (signed, both
     * below 0x20) of both halves at once: the lesser byte of the two is
     * one when either is. With some, the UTF-8 and the controls of the
     * block at once (U8_HALF; a control byte: 0x20 - v > 0; a half of
     * ASCII only is not looked at, nor is the second half after ASCII
     * only when the first ends in ASCII: no sequence crosses), and the next
     * block starts at a sequence the block's end cuts (one ending in
     * non-ASCII: its lead's bit in the cut test's mask; tzcnt of 0 is 32;
     * the escape carry is 0 then: the last byte is not a backslash). The string's end
     * (its quote the lowest of the codes that are not letters, no control or non-ASCII
     * byte before it) too: cz 0, the quote at j. Out: at, the block not
     * taken (or past last), its bytes v0, v1, its masks qb ^ codes, ok,
     * codes, and the carry into it. (In assembly: GCC's code for it copied masks
     * and spilled, 6 steps a usual block more, 10 a non-ASCII one.) */
#define USUAL_BLOCKS(BS, BSEND) \
  "test %[off], %[off]\n\t"                                                             \
  "jg 3f\n"                                                                         \
  "2:\n\t"                                                                          \
  "vmovdqu (%[last],%[off]), %[v0]\n\t"                                               \
  "vmovdqu 32(%[last],%[off]), %[v1]\n\t"                                             \
  "vpshufb %[v0], %[kqb], %[t0]\n\t"                                                \
  "vpshufb %[v1], %[kqb], %[t1]\n\t"                                                \
  "vpcmpeqb %[t0], %[v0], %[t0]\n\t"                                                \
  "vpcmpeqb %[t1], %[v1], %[t1]\n\t"                                                \
  "vpmovmskb %[t0], %k[qb]\n\t"                                                     \
  "vpmovmskb %[t1], %k[t]\n\t"                                                      \
  "shl $32, %[t]\n\t"                                                               \
  "or %[t], %[qb]\n\t"                                                              \
  "vpshufb %[v0], %[klet], %[t0]\n\t"                                               \
  "vpshufb %[v1], %[klet], %[t1]\n\t"                                               \
  "vpcmpeqb %[t0], %[v0], %[t0]\n\t"                                                \
  "vpcmpeqb %[t1], %[v1], %[t1]\n\t"                                                \
  "vpmovmskb %[t0], %k[ok]\n\t"                                                     \
  "vpmovmskb %[t1], %k[t]\n\t"                                                      \
  "shl $32, %[t]\n\t"                                                               \
  "or %[t], %[ok]\n\t"                                                              \
  "vpminsb %[v1], %[v0], %[t0]\n\t"                                                 \
  "vpcmpgtb %[t0], %[ksp], %[t0]\n\t"                                               \
  "vpmovmskb %[t0], %k[cz]\n\t"                                                     \
  "andn %[ok], %[carry], %[t]\n\t"                                                  \
  "and %[qb], %[t]\n\t"                                                             \
  "lea (%[carry],%[t],2), %[codes]\n\t"                                             \
  "or %[kodd], %[codes]\n\t"                                                        \
  "sub %[t], %[codes]\n\t"                                                          \
  "xor %[kodd], %[codes]\n\t"                                                       \
  "xor %[codes], %[qb]\n\t"                                                         \
  "andn %[qb], %[ok], %[t]\n\t"                                                     \
  "or %[t], %[cz]\n\t"                                                              \
  "jnz 4f\n\t"                                                                      \
  "andn %[codes], %[qb], %[carry]\n\t"                                              \
  "and %[ok], %[carry]\n\t" BS                                                      \
  "shr $63, %[carry]\n\t"                                                           \
  "add $64, %[off]\n\t"                                                               \
  "jle 2b\n\t"                                                                      \
  "jmp 3f\n"                                                                        \
  "4:\n\t"                                                                          \
  "test %[t], %[t]\n\t"                                                             \
  "jnz 6f\n\t"                                                                      \
  "vpmovmskb %[v0], %k[t]\n\t"                                                      \
  "vpmovmskb %[v1], %k[j]\n\t"                                                      \
  "test %k[t], %k[t]\n\t"                                                           \
  "jz 7f\n\t"                                                                       \
  "vperm2i128 $0x08, %[v0], %[v0], %[kb]\n\t" U8_HALF("%[v0]", "%[t0]", "%[kb]",    \
                                                      "%[kp]", "%[kt]")             \
  "test %k[j], %k[j]\n\t"                                                           \
  "jnz 8f\n\t"                                                                      \
  "test %k[t], %k[t]\n\t"                                                                \
  "jns 9f\n"                                                                        \
  "8:\n\t"                                                                          \
  "vperm2i128 $0x21, %[v1], %[v0], %[kb]\n\t" U8_HALF("%[v1]", "%[t1]", "%[kb]",    \
                                                      "%[kp]", "%[kt]")             \
  "vpor %[t1], %[t0], %[t0]\n\t"                                                    \
  "jmp 9f\n"                                                                        \
  "7:\n\t"                                                                          \
  "vperm2i128 $0x21, %[v1], %[v0], %[kb]\n\t" U8_HALF("%[v1]", "%[t0]", "%[kb]",    \
                                                      "%[kp]", "%[kt]")             \
  "9:\n\t"                                                                          \
  "vpminub %[v1], %[v0], %[t1]\n\t"                                                 \
  "vpsubusb %[t1], %[ksp], %[t1]\n\t"                                               \
  "vpor %[t1], %[t0], %[t0]\n\t"                                                    \
  "vptest %[t0], %[t0]\n\t"                                                         \
  "jnz 3f\n\t"                                                                      \
  "andn %[codes], %[qb], %[carry]\n\t"                                              \
  "and %[ok], %[carry]\n\t" BS                                                      \
  "shr $63, %[carry]\n\t"                                                           \
  "test %k[j], %k[j]\n\t"                                                           \
  "js 5f\n\t"                                                                       \
  "add $64, %[off]\n\t"                                                             \
  "jle 2b\n\t"                                                                      \
  "jmp 3f\n"                                                                        \
  "5:\n\t"                                                                          \
  "vpsubusb 224(%[u8]), %[v1], %[t0]\n\t"                                           \
  "vpmovmskb %[t0], %k[t]\n\t"                                                      \
  "tzcnt %k[t], %k[t]\n\t"                                                          \
  "add $32, %[t]\n\t"                                                               \
  "add %[t], %[off]\n\t"                                                            \
  "jle 2b\n\t"                                                                      \
  "jmp 3f\n"                                                                        \
  "6:\n\t"                                                                          \
  "tzcnt %[t], %[j]\n\t"                                                            \
  "bt %[j], %[codes]\n\t"                                                           \
  "jc 3f\n\t"                                                                       \
  "vpcmpgtb %[v0], %[ksp], %[t0]\n\t"                                               \
  "vpcmpgtb %[v1], %[ksp], %[t1]\n\t"                                               \
  "vpmovmskb %[t0], %k[t]\n\t"                                                      \
  "vpmovmskb %[t1], %k[cz]\n\t"                                                     \
  "shl $32, %[cz]\n\t"                                                              \
  "or %[t], %[cz]\n\t"                                                              \
  "bzhi %[j], %[cz], %[cz]\n\t"                                                     \
  "jnz 3f\n\t" BSEND                                                                \
  "3:"
#define USUAL_OUT                                                                       \
  [off] "+r"(off), [carry] "+r"(carry), [bs] "+r"(any_bs), [qb] "=&r"(qb),              \
      [ok] "=&r"(ok), [codes] "=&r"(codes), [t] "=&r"(t), [cz] "=&r"(cz), [j] "=&r"(j), \
      [v0] "=&x"(v0), [v1] "=&x"(v1), [t0] "=&x"(t0), [t1] "=&x"(t1), [kb] "=&x"(kb),   \
      [kp] "=&x"(kp), [kt] "=&x"(kt)
#define USUAL_IN                                                                  \
  [last] "r"(last), [kqb] "x"(k[K_QB]), [klet] "x"(k[K_LET]), [ksp] "x"(k[K_SP]), \
      [kodd] "r"(ODD_BITS), U8_IN
    /* (the usual path with *esc: the backslashes, carry's AND before the
     * shift, gathered) */
    if (esc != NULL)
      __asm__(USUAL_BLOCKS("or %[carry], %[bs]\n\t",
                           "mov %[qb], %[t]\n\t"
                           "xor %[codes], %[t]\n\t"
                           "and %[ok], %[t]\n\t"
                           "bzhi %[j], %[t], %[t]\n\t"
                           "or %[t], %[bs]\n\t")
              : USUAL_OUT:USUAL_IN
              : "cc", "memory");
    else
      __asm__(USUAL_BLOCKS("", "") : USUAL_OUT:USUAL_IN : "cc", "memory");
#undef USUAL_BLOCKS
#undef USUAL_OUT
#undef USUAL_IN
    (void)t, (void)t0, (void)t1, (void)kb, (void)kp, (void)kt;
    at = last + off;
    if (off > 0) break;
    if (cz == 0) { /* the string's end, after one-letter escapes only */
      *end = (size_t)(at - p) + j;
      rc = 1;
      break;
    }
    uint64_t odd = qb & ~ok;
    qb ^= codes;
    blk_t m;
    m.b = qb & ok, m.ok = ok;
    __m256i c0 = _mm256_cmpgt_epi8(k[K_SP], v0), c1 = _mm256_cmpgt_epi8(k[K_SP], v1);
    m.q = qb & ~m.ok;
    if (odd != 0) {
      /* the string's end after one-letter escapes (and a few non-ASCII
       * bytes, as blk_rare takes them) */
      uint64_t escaped = (codes ^ m.b) | carry, closing = m.q & ~escaped;
      uint64_t in = (closing & (0 - closing)) - 1;
      uint64_t cm = avx2_bits(c0, c1) & in;
      if (closing != 0 && (escaped & ~(m.ok | m.q) & in) == 0 &&
          __builtin_popcountll(cm) <= 16) {
        size_t nb = (size_t)(at - p) + 64;
        if (cm != 0 && blk_utf8(p, n, (size_t)(at - p), cm, &nb) < 0) return -1;
        if (esc != NULL) any_bs |= m.b & in;
        *end = (size_t)(at - p) + (size_t)__builtin_ctzll(closing);
        rc = 1;
        break;
      }
    }
    m.c = avx2_bits(c0, c1);
    blk_out_t o =
        blk_slow_avx2(p, n, m.q, m.b, m.ok, m.c, (size_t)(at - p), carry, any_bs, end);
    at = p + o.at, carry = o.carry, any_bs = o.bs;
    off = at - last;
    if ((rc = o.rc) != 0) break;
  }
  i = (size_t)(at - p);
  int unused;
  if (esc == NULL) esc = &unused;
  if (any_bs != 0) *esc = 1;
  if (rc != 0) return rc < 0 ? -1 : 0;
  /* an escape the last block's backslash starts is the tail's */
  return string_tail(p, n, i - carry, end, esc);
}
AVX2 static int string_avx2(const unsigned char *p, size_t n, size_t i, size_t *end,
                            int *esc) {
  return string_avx2_at(p, n, i, end, esc);
}

static uint64_t sse2_bits(__m128i a, __m128i b, __m128i c, __m128i d) {
  return (uint64_t)(uint16_t)_mm_movemask_epi8(a) |
         (uint64_t)(uint16_t)_mm_movemask_epi8(b) << 16 |
         (uint64_t)(uint16_t)_mm_movemask_epi8(c) << 32 |
         (uint64_t)(uint16_t)_mm_movemask_epi8(d) << 48;
}

/* The masks of the block at b with SSE2 (no byte lookup: the letters
 * compared one by one) */
static inline __attribute__((always_inline)) blk_t sse2_masks(const unsigned char *b) {
  const __m128i qt = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'),
                sp = _mm_set1_epi8(0x20);
  static const char ok[] = "\\/fnrt";
  __m128i v[4], q[4], bk[4], o[4], c[4];
  for (int k = 0; k < 4; k++) {
    v[k] = _mm_loadu_si128((const __m128i *)(b + 16 * k));
    q[k] = _mm_cmpeq_epi8(v[k], qt);
    bk[k] = _mm_cmpeq_epi8(v[k], bs);
    c[k] = _mm_cmplt_epi8(v[k], sp);
    o[k] = _mm_cmpeq_epi8(v[k], _mm_set1_epi8(ok[0]));
    for (int l = 1; ok[l] != 0; l++)
      o[k] = _mm_or_si128(o[k], _mm_cmpeq_epi8(v[k], _mm_set1_epi8(ok[l])));
  }
  return (blk_t){sse2_bits(q[0], q[1], q[2], q[3]), sse2_bits(bk[0], bk[1], bk[2], bk[3]),
                 sse2_bits(o[0], o[1], o[2], o[3]), sse2_bits(c[0], c[1], c[2], c[3])};
}

/* blk_rare_fn with SSE2 */
__attribute__((noinline)) static int blk_rare_sse2(const unsigned char *p, size_t n,
                                                   uint64_t q, uint64_t b, uint64_t ok,
                                                   uint64_t c, uint64_t escaped,
                                                   blk_st_t *st, size_t *end) {
  const blk_t m = {q, b, ok, c};
  return blk_rare(p, n, &m, escaped, st, end, NULL);
}

/* string_avx2 sixteen bytes at a time */
static int string_sse2(const unsigned char *p, size_t n, size_t i, size_t *end,
                       int *esc) {
  uint64_t carry = 0, any_bs = 0;
  int rc = 0;
  while (i + 64 <= n) {
    blk_t m = sse2_masks(p + i);
    if ((rc = blk_step(p, n, &m, &i, &carry, &any_bs, end, blk_rare_sse2)) != 0) break;
  }
  if (any_bs != 0) *esc = 1;
  if (rc != 0) return rc < 0 ? -1 : 0;
  return string_tail(p, n, i - carry, end, esc);
}
#endif

/* The string check's path: 2 AVX2, 1 SSE2, 0 scalar; -1 until asked. */
static int simd_level = -1;

static int simd_best(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
      __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt"))
    return 2;
  return 1;
#else
  return 0;
#endif
}

int px_json_simd(int level) {
  int was = simd_level < 0 ? simd_best() : simd_level, best = simd_best();
  simd_level = level < 0 || level > best ? best : level;
  return was;
}

/* px_json_string (json.h) past its plain ASCII start: whole blocks of 64
 * bytes with AVX2 when the CPU has it (asked once), else SSE2, the rest
 * (and everything on other targets) by string_tail. */
int px_json_string_at(const unsigned char *p, size_t n, size_t i, size_t *end, int *esc) {
  *esc = 0;
  if (simd_level < 0) simd_level = simd_best();
#if defined(__x86_64__) && defined(__GNUC__)
  if (i + 64 <= n && simd_level > 0)
    return simd_level == 2 ? string_avx2(p, n, i, end, esc)
                           : string_sse2(p, n, i, end, esc);
#endif
  return string_tail(p, n, i, end, esc);
}

int px_json_unescape(const char *s, size_t n, int esc, px_buf_t *b, px_str_t *out) {
  const unsigned char *p = (const unsigned char *)s;
  if (!esc) {
    *out = (px_str_t){s, n};
    return 0;
  }
  b->len = 0;
  /* unescaping never makes a string longer */
  int rc = px_buf_reserve(b, n);
  if (rc < 0) return rc;
  char *o = b->data;
  size_t i = 0;
  while (i < n) {
    if (p[i] != '\\') { /* the run to the next escape in one copy */
      const char *bs = memchr(s + i, '\\', n - i);
      size_t k = bs != NULL ? (size_t)(bs - s) : n;
      memcpy(o + b->len, s + i, k - i);
      b->len += k - i;
      i = k;
      continue;
    }
    unsigned c = p[i + 1];
    switch (c) {
    case 'b': o[b->len++] = '\b'; break;
    case 'f': o[b->len++] = '\f'; break;
    case 'n': o[b->len++] = '\n'; break;
    case 'r': o[b->len++] = '\r'; break;
    case 't': o[b->len++] = '\t'; break;
    case 'u': {
      unsigned long cp = (unsigned long)px_hex4(p + i + 2);
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        unsigned long lo = (unsigned long)px_hex4(p + i + 8);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        i += 6;
      }
      b->len += px_utf8_put(o + b->len, cp);
      i += 6;
      continue;
    }
    default: o[b->len++] = (char)c; break; /* " \ / */
    }
    i += 2;
  }
  *out = (px_str_t){b->data, b->len};
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The fast scanner                                                          */


/* The string at j->i (its opening quote): [*s, *e) its raw content, *esc
 * whether it has escapes; j->i moves past the closing quote. */
static int fj_string(px_fj_t *j, size_t *s, size_t *e, int *esc) {
  *s = j->i + 1;
  if (px_json_string(j->p, j->n, *s, e, esc) < 0) return -1;
  j->i = *e + 1;
  return 0;
}

/* A number at j->i: only a plain integer of at most 15 digits (jansson
 * reads it as the same integer). *v gets its value. */
static int fj_int(px_fj_t *j, int64_t *v) {
  const unsigned char *p = j->p;
  size_t i = j->i, n = j->n;
  int neg = 0;
  if (i < n && p[i] == '-') {
    neg = 1;
    i++;
  }
  size_t d0 = i;
  int64_t x = 0;
  /* digits past the 15th are only counted (the number is refused below),
   * so the accumulator cannot overflow */
  while (i < n && p[i] >= '0' && p[i] <= '9') {
    if (i - d0 < 16) x = x * 10 + (p[i] - '0');
    i++;
  }
  size_t nd = i - d0;
  if (nd == 0 || nd > 15 || (nd > 1 && p[d0] == '0')) return -1;
  if (i < n && (p[i] == '.' || p[i] == 'e' || p[i] == 'E')) return -1;
  *v = neg ? -x : x;
  j->i = i;
  return 0;
}

static int fj_lit(px_fj_t *j, const char *lit, size_t l) {
  if (j->n - j->i < l || memcmp(j->p + j->i, lit, l) != 0) return -1;
  j->i += l;
  return 0;
}

/* Validate and skip any value at j->i. */
static int fj_skip(px_fj_t *j, int depth) {
  size_t s, e;
  int esc;
  int64_t v;
  if (j->i >= j->n) return -1;
  switch (j->p[j->i]) {
  case '"': return fj_string(j, &s, &e, &esc);
  case 't': return fj_lit(j, "true", 4);
  case 'f': return fj_lit(j, "false", 5);
  case 'n': return fj_lit(j, "null", 4);
  case '{':
  case '[': {
    int obj = j->p[j->i] == '{';
    unsigned char close = obj ? '}' : ']';
    if (depth >= PX_FJ_MAX_DEPTH) return -1;
    j->i++;
    px_fj_ws(j);
    if (j->i < j->n && j->p[j->i] == close) {
      j->i++;
      return 0;
    }
    for (;;) {
      if (obj) {
        if (j->i >= j->n || j->p[j->i] != '"' || fj_string(j, &s, &e, &esc) < 0) return -1;
        px_fj_ws(j);
        if (j->i >= j->n || j->p[j->i] != ':') return -1;
        j->i++;
        px_fj_ws(j);
      }
      if (fj_skip(j, depth + 1) < 0) return -1;
      px_fj_ws(j);
      if (j->i >= j->n) return -1;
      if (j->p[j->i] == close) {
        j->i++;
        return 0;
      }
      if (j->p[j->i] != ',') return -1;
      j->i++;
      px_fj_ws(j);
    }
  }
  default: return fj_int(j, &v);
  }
}

int px_fj_skip(px_fj_t *j, int depth) { return fj_skip(j, depth); }

static int fj_key_is(px_fj_t *j, size_t s, size_t e, const char *k) {
  /* no strlen: most keys differ at their first byte */
  const unsigned char *p = j->p + s;
  size_t l = e - s, i = 0;
  while (i < l && k[i] == (char)p[i]) i++;
  return i == l && k[l] == 0;
}

int px_fj_object(px_fj_t *j, px_fj_want_t *w, int depth) {
  size_t s, e;
  int esc;
  if (j->i >= j->n || j->p[j->i] != '{') return -1;
  j->i++;
  px_fj_ws(j);
  if (j->i < j->n && j->p[j->i] == '}') {
    j->i++;
    return 0;
  }
  for (;;) {
    if (j->i >= j->n || j->p[j->i] != '"' || fj_string(j, &s, &e, &esc) < 0) return -1;
    if (esc) return -1; /* an escaped key might spell a key we read */
    px_fj_ws(j);
    if (j->i >= j->n || j->p[j->i] != ':') return -1;
    j->i++;
    px_fj_ws(j);
    int k = 0;
    while (k < w->nkeys && !fj_key_is(j, s, e, w->keys[k])) k++;
    if (k == w->nkeys) {
      if (fj_skip(j, depth + 1) < 0) return -1;
    } else if (k == w->int_key) {
      if (w->iv_set || fj_int(j, &w->iv) < 0) return -1;
      w->iv_set = 1;
    } else if (k == w->int_key2) {
      if (w->iv2_set || fj_int(j, &w->iv2) < 0) return -1;
      w->iv2_set = 1;
    } else if (k == w->obj_key) {
      if (w->obj_set || j->i >= j->n || j->p[j->i] != '{') return -1;
      w->obj_set = 1;
      w->obj_at = j->i;
      if ((w->sub ? px_fj_object(j, w->sub, depth + 1) : fj_skip(j, depth + 1)) < 0)
        return -1;
    } else {
      px_fj_str_t *st = &w->strs[k];
      if (st->set || j->i >= j->n || j->p[j->i] != '"') return -1;
      if (fj_string(j, &st->s, &st->e, &st->esc) < 0) return -1;
      st->set = 1;
    }
    px_fj_ws(j);
    if (j->i >= j->n) return -1;
    if (j->p[j->i] == '}') {
      j->i++;
      return 0;
    }
    if (j->p[j->i] != ',') return -1;
    j->i++;
    px_fj_ws(j);
  }
}

int px_fj_value(const px_fj_t *j, const px_fj_str_t *st, px_buf_t *scratch, px_str_t *out) {
  return px_json_unescape((const char *)j->p + st->s, st->e - st->s, st->esc, scratch, out);
}

/* ------------------------------------------------------------------------ */
/* The request scanner                                                      */

/* A number at p[*i] by JSON's grammar, as jansson reads it: an integer must
 * fit json_int_t (int64), a real must not overflow to infinity (strtod,
 * ERANGE; underflow is accepted). *i moves past it. */
static int scan_number(const unsigned char *p, size_t n, size_t *i) {
  size_t s = *i, k = s;
  if (k < n && p[k] == '-') k++;
  size_t d0 = k;
  if (k < n && p[k] == '0') {
    k++;
  } else {
    while (k < n && p[k] >= '0' && p[k] <= '9') k++;
  }
  if (k == d0) return -1;
  size_t nint = k - d0;
  int real = 0, exp = 0;
  if (k < n && p[k] == '.') {
    real = 1;
    size_t f = ++k;
    while (k < n && p[k] >= '0' && p[k] <= '9') k++;
    if (k == f) return -1;
  }
  if (k < n && (p[k] == 'e' || p[k] == 'E')) {
    real = exp = 1;
    k++;
    if (k < n && (p[k] == '+' || p[k] == '-')) k++;
    size_t e = k;
    while (k < n && p[k] >= '0' && p[k] <= '9') k++;
    if (k == e) return -1;
  }
  /* jansson's lexer reads the longest run of number characters; one
   * directly after the token makes it invalid (e.g. "01", "1.5.2") */
  if (k < n && ((p[k] >= '0' && p[k] <= '9') || p[k] == '.' || p[k] == 'e' || p[k] == 'E' ||
                p[k] == '+' || p[k] == '-'))
    return -1;
  *i = k;
  if (!real) {
    if (nint < 19) return 0;
    if (nint > 19) return -1;
    const char *lim = p[s] == '-' ? "9223372036854775808" : "9223372036854775807";
    return memcmp(p + d0, lim, 19) <= 0 ? 0 : -1;
  }
  /* a plain real with few integer digits and no exponent cannot overflow */
  if (nint <= 300 && !exp) return 0;
  char small[64], *t = k - s < sizeof(small) ? small : malloc(k - s + 1);
  if (t == NULL) return -1;
  memcpy(t, p + s, k - s);
  t[k - s] = 0;
  errno = 0;
  double v = strtod(t, NULL);
  int bad = errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL);
  if (t != small) free(t);
  return bad ? -1 : 0;
}

/* The members the request scanner watches: a name and the member it sits in
 * (W_TOP: the top-level object), and whether it may appear only once (a
 * repeat refuses the body) or is only read (the last one, as jansson). The
 * first eight are fixed; the caller's output-token caps
 * (px_json_request_caps, once) follow, at most PX_JREQ_CAPS paths of one or
 * two names. */
enum {
  W_NONE = -1,
  W_TOP = -1,
  TOP_MODEL,
  TOP_STREAM,
  TOP_SO,
  SO_USAGE,
  TOP_META,
  TOP_SAFETY,
  TOP_USER,
  META_USER,
  W_FIXED
};
#define W_MAX (W_FIXED + 2 * PX_JREQ_CAPS + PX_JREQ_MEMBERS)
typedef struct watch {
  const char *name[W_MAX];
  size_t len[W_MAX];
  int parent[W_MAX]; /* W_TOP or the index of the member holding it */
  int cap[W_MAX];    /* the cap path it ends, or -1 */
  int mem[W_MAX];    /* the caller's top-level member it is (its whole span), or -1 */
  int once[W_MAX];   /* a repeat refuses the body */
  int n;
  uint64_t names; /* watch_bit of every name: most names watched nowhere miss it */
} watch_t;

/* A name's bit in watch_t.names (from its length and end bytes) */
static inline uint64_t watch_bit(const char *k, size_t l) {
  return l == 0 ? 1
                : 1ull << (((unsigned char)k[0] * 7u + (unsigned char)k[l - 1] + l) & 63);
}

static int watch_add(watch_t *w, const char *name, int parent, int once) {
  size_t len = strlen(name);
  for (int k = 0; k < w->n; k++)
    if (w->len[k] == len && w->parent[k] == parent &&
        memcmp(w->name[k], name, len) == 0) {
      w->once[k] |= once;
      return k;
    }
  w->name[w->n] = name;
  w->len[w->n] = len;
  w->parent[w->n] = parent;
  w->cap[w->n] = -1;
  w->mem[w->n] = -1;
  w->once[w->n] = once;
  w->names |= watch_bit(name, len);
  return w->n++;
}

static void watch_init(watch_t *w, const char *const (*caps)[2],
                       const char *const *members) {
  w->n = 0;
  w->names = 0;
  watch_add(w, "model", W_TOP, 1);
  watch_add(w, "stream", W_TOP, 1);
  watch_add(w, "stream_options", W_TOP, 1);
  watch_add(w, "include_usage", TOP_SO, 1);
  /* the end user (SPEC 13): only read */
  watch_add(w, "metadata", W_TOP, 0);
  watch_add(w, "safety_identifier", W_TOP, 0);
  watch_add(w, "user", W_TOP, 0);
  watch_add(w, "user_id", TOP_META, 0);
  for (int c = 0; caps != NULL && c < PX_JREQ_CAPS && caps[c][0] != NULL; c++) {
    int k = watch_add(w, caps[c][0], W_TOP, 1);
    if (caps[c][1] != NULL) k = watch_add(w, caps[c][1], k, 1);
    w->cap[k] = c;
  }
  for (int m = 0; members != NULL && m < PX_JREQ_MEMBERS && members[m] != NULL; m++)
    w->mem[watch_add(w, members[m], W_TOP, 1)] = m;
}

/* The watch table of caps and members, built once: the gateway asks with a
 * few tables (a protocol's ops) every time, their names literals, so the
 * same name pointers are the same table. A few tables are kept per thread,
 * the oldest replaced. */
#define WATCH_KEYS (2 * PX_JREQ_CAPS + PX_JREQ_MEMBERS)
#define WATCH_CACHED 8
typedef struct watch_slot {
  const char *key[WATCH_KEYS];
  watch_t w;
} watch_slot_t;

/* (inline: the request walk is built twice, and this is its usual start) */
static inline __attribute__((always_inline)) const watch_t *watch_get(
    const char *const (*caps)[2], const char *const *members) {
  static _Thread_local watch_slot_t slot[WATCH_CACHED];
  static _Thread_local unsigned used, next;
  const char *key[WATCH_KEYS] = {NULL};
  for (int c = 0; caps != NULL && c < PX_JREQ_CAPS && caps[c][0] != NULL; c++)
    key[2 * c] = caps[c][0], key[2 * c + 1] = caps[c][1];
  for (int m = 0; members != NULL && m < PX_JREQ_MEMBERS && members[m] != NULL; m++)
    key[2 * PX_JREQ_CAPS + m] = members[m];
  for (unsigned k = 0; k < used; k++)
    if (memcmp(slot[k].key, key, sizeof(key)) == 0) return &slot[k].w;
  watch_slot_t *s = &slot[next];
  next = (next + 1) % WATCH_CACHED;
  if (used < WATCH_CACHED) used++;
  memcpy(s->key, key, sizeof(key));
  watch_init(&s->w, caps, members);
  return &s->w;
}

/* Which watched member the key p[s..e) names (escapes decoded) inside the
 * member `parent`. An escaped spelling longer than 6 bytes a character
 * cannot name one of them. */
static int watched_key(const watch_t *w, const unsigned char *p, size_t s, size_t e,
                       int esc, int parent) {
  char tmp[96];
  const char *k = (const char *)p + s;
  size_t l = e - s;
  if (esc) {
    if (l > sizeof(tmp)) return W_NONE;
    px_buf_t b = {.data = tmp, .len = 0, .size = sizeof(tmp), .cap = sizeof(tmp)};
    px_str_t v;
    if (px_json_unescape(k, l, 1, &b, &v) < 0) return W_NONE;
    k = v.ptr;
    l = v.len;
  }
  if ((w->names & watch_bit(k, l)) == 0) return W_NONE;
  for (int x = 0; x < w->n; x++)
    if (w->parent[x] == parent && w->len[x] == l && memcmp(w->name[x], k, l) == 0)
      return x;
  return W_NONE;
}

/* What jansson 2.14 allocates to hold each part of a document, rounded up
 * with malloc's overhead (a json_object_t and its first 8 hash buckets, a
 * json_array_t and its first 8 slots, a json_string_t and its copy, a pair
 * with its share of bucket growth): px_json_req_t.cost is a bound, not a
 * guess, so that a parse can be refused before it starts. */
enum {
  COST_OBJECT = 288,
  COST_ARRAY = 144,
  COST_MEMBER = 144,  /* + the name's length */
  COST_ELEMENT = 24,
  COST_STRING = 80,   /* + the length */
  COST_NUMBER = 32,
};

#define TEXT_(x) #x
#define TEXT(x) TEXT_(x)
#define DEPTH_TEXT TEXT(PX_JSON_MAX_DEPTH)

/* px_json_string for the request walk: the first 16 bytes in one step
 * (most names and many values end in them), then px_json_string. */
static inline int walk_string(const unsigned char *p, size_t n, size_t i, size_t *end,
                              int *esc) {
#if defined(__SSE2__)
  if (i + 16 <= n) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
    __m128i hit = _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                               _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                            _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
    unsigned m = (unsigned)_mm_movemask_epi8(hit);
    if (m != 0) {
      size_t k = i + (size_t)__builtin_ctz(m);
      if (p[k] != '"') return px_json_string_at(p, n, k, end, esc);
      *end = k;
      *esc = 0;
      return 0;
    }
    i += 16;
  }
#endif
  return px_json_string(p, n, i, end, esc);
}

#if defined(__SSE2__)
/* The vector constants of tree_hits and tree_probe_avx2 (32 bytes), read
 * from memory where they are compared: no register keeps a vector across
 * the walk's calls, and were they const (or static), GCC would build each
 * anew with two instructions every string. Never written. */
typedef union {
  unsigned char b[32];
  __m128i v;
} tree_vec_t;
#define TREE_VEC(c)           \
  {                           \
    .b = { [0 ... 31] = (c) } \
  }
__attribute__((visibility("hidden"))) tree_vec_t px_json_tree_ctl = TREE_VEC(0x1f),
                                                 px_json_tree_qt = TREE_VEC('"'),
                                                 px_json_tree_bs = TREE_VEC('\\');
/* Where the 16 bytes at b have a quote, a backslash, a control or a
 * non-ASCII byte (one bit a byte). */
static inline __attribute__((always_inline)) unsigned tree_hits(const unsigned char *b) {
  __m128i v = _mm_loadu_si128((const __m128i *)b);
  /* signed: the bytes above 0x1f are the plain ASCII but the quote and the
   * backslash */
  __m128i plain = _mm_andnot_si128(_mm_or_si128(_mm_cmpeq_epi8(v, px_json_tree_qt.v),
                                                _mm_cmpeq_epi8(v, px_json_tree_bs.v)),
                                   _mm_cmpgt_epi8(v, px_json_tree_ctl.v));
  return (unsigned)_mm_movemask_epi8(plain) ^ 0xffffu;
}
/* The same of the 32 bytes at b (the tree walk's probe after a name) */
typedef uint64_t tree_probe_fn(const unsigned char *b);
static inline __attribute__((always_inline)) uint64_t tree_probe(const unsigned char *b) {
  return tree_hits(b) | (uint64_t)tree_hits(b + 16) << 16;
}
#endif

/* The string whose content starts at p[i] for the tree walk: its plain
 * ASCII start 32 bytes a step (probe: most names and many values end in
 * the first), the rest by the string check `rest`. The index of the
 * closing quote, or 0 (no string: its content starts at 1 at least). */
typedef int string_fn(const unsigned char *p, size_t n, size_t i, size_t *end, int *esc);
static inline __attribute__((always_inline)) size_t tree_string(const unsigned char *p,
                                                                size_t n, size_t i,
                                                                string_fn *rest,
                                                                tree_probe_fn *probe) {
  size_t end;
  int esc;
#if defined(__SSE2__)
  uint64_t m;
  if (i + 32 <= n) {
    if ((m = probe(p + i)) != 0) goto hit;
    for (i += 32; i + 32 <= n; i += 32)
      if ((m = probe(p + i)) != 0) goto hit;
  }
#endif
  i = px_json_plain(p, n, i);
  if (i < n && p[i] == '"') return i;
  return rest(p, n, i, &end, &esc) < 0 ? 0 : end;
#if defined(__SSE2__)
hit:
  i += (size_t)__builtin_ctzll(m);
  if (p[i] == '"') return i;
  return rest(p, n, i, &end, &esc) < 0 ? 0 : end;
#endif
}

static inline uint32_t word4(const void *s) {
  uint32_t w;
  memcpy(&w, s, 4);
  return w;
}
/* The literal true, false or null at p[i] (its first letter checked): its
 * length, or 0. */
static inline size_t tree_literal(const unsigned char *p, size_t n, size_t i) {
  if (n - i < 4) return 0;
  uint32_t w = word4(p + i);
  if (w == word4("true") || w == word4("null")) return 4;
  return w == word4("fals") && n - i > 4 && p[i + 4] == 'e' ? 5 : 0;
}

/* A container in which nothing is watched (most of a body: the messages,
 * tools, contents), at p[i] ('{' or '['), opening at depth + 1: the request
 * walk's rules and cost (px_json_request_watch) in a loop of its own with
 * nothing to look up. The index past its end, with *cost grown; 0 for
 * anything the request walk is to report (it walks the container itself
 * then, for the same answer as ever). */
static inline __attribute__((always_inline)) size_t tree_walk(
    const unsigned char *p, size_t n, size_t i, size_t depth, size_t *cost,
    string_fn *rest, tree_probe_fn *probe, px_json_jumps_t *jt) {
  unsigned char closer[PX_JSON_MAX_DEPTH + 1]; /* per level: '}' or ']' */
  unsigned char *cl = closer,
                *last = closer + (PX_JSON_MAX_DEPTH - depth); /* *cl: this level's */
  /* jt: per level, the container's opening offset and its entry in jt
   * (every container has one while open; a small one's goes at its close,
   * the last entry then: what it holds is smaller still) */
  uint32_t opened[PX_JSON_MAX_DEPTH + 1], slot[PX_JSON_MAX_DEPTH + 1];
  size_t c = 0, e, l, end;
  int esc;
  (void)end, (void)esc; /* (without SSE2: unused) */
open:
  if (cl >= last) return 0;
  *++cl = (unsigned char)(p[i] + 2); /* '}' or ']' */
  if (jt) {
    size_t k = jt->n++;
    opened[cl - closer] = (uint32_t)i, slot[cl - closer] = (uint32_t)k;
    if (k < jt->cap) jt->v[k][0] = (uint32_t)i;
  }
  c += *cl == '}' ? COST_OBJECT : COST_ARRAY;
  i = px_json_ws(p, n, i + 1);
  if (i < n && p[i] == *cl) {
    i++;
    goto close;
  }
  if (*cl == '}') goto key;
  c += COST_ELEMENT;
value:
  if (i >= n) return 0;
  if (p[i] == '"') {
    if ((e = tree_string(p, n, i + 1, rest, probe)) == 0) return 0;
    c += COST_STRING + (e - i);
    i = e + 1;
  } else if (p[i] == '{' || p[i] == '[') {
    goto open;
  } else if (p[i] == 't' || p[i] == 'f' || p[i] == 'n') {
    if ((l = tree_literal(p, n, i)) == 0) return 0;
    i += l;
  } else {
    if ((p[i] != '-' && (p[i] < '0' || p[i] > '9')) || scan_number(p, n, &i) < 0)
      return 0;
    c += COST_NUMBER;
  }
after:
  /* the usual in an object: the next member's name right after a comma */
  if (i + 1 < n && p[i] == ',' && p[i + 1] == '"' && *cl == '}') {
    i++;
    goto key;
  }
  if (i >= n) return 0;
  if (p[i] <= ' ') {
    i = px_json_ws_run(p, n, i);
    if (i >= n) return 0;
  }
  if (p[i] == ',') {
    i = px_json_ws(p, n, i + 1);
    if (*cl == '}') goto key;
    c += COST_ELEMENT;
    goto value;
  }
  if (p[i] != *cl) return 0;
  i++;
close:
  if (jt) {
    size_t k = slot[cl - closer];
    if (i - opened[cl - closer] < PX_JSON_JUMP_MIN)
      jt->n--;
    else if (k < jt->cap)
      jt->v[k][1] = (uint32_t)i;
  }
  if (--cl == closer) {
    *cost += c;
    return i;
  }
  goto after;
key:
  if (i >= n || p[i] != '"') return 0;
#if defined(__SSE2__)
  /* the usual member, its name plain: the name, the colon and the start of
   * the value (a string's end too, when near) from one probe of the 32
   * bytes after the quote */
  if (i + 33 <= n) {
    uint64_t m = probe(p + i + 1);
    /* (bit 31 bounds k where nothing is found; k < 30 keeps the colon and
     * the value's quote in the probe) */
    size_t k = (size_t)__builtin_ctzll(m | 1u << 31);
    e = i + 1 + k;
    if (k < 30 && p[e] == '"') {
      if (p[e + 1] != ':' || p[e + 2] != '"') {
        c += COST_MEMBER + (e - i);
        goto colon;
      }
      /* "name":"value: the value's quote is bit k + 2; the member's cost
       * and the value's at once, (e - name) + (end - (e + 2)) */
      size_t name = i;
      i = e + 2;
      m >>= k + 3;
      if (m != 0) {
        e = i + 1 + (size_t)__builtin_ctzll(m);
        if (p[e] != '"' && (e = rest(p, n, e, &end, &esc) < 0 ? 0 : end) == 0) return 0;
      } else if ((e = tree_string(p, n, i + 1 + (31 - (k + 2)), rest, probe)) == 0) {
        return 0;
      }
      c += COST_MEMBER + COST_STRING + (e - name) - 2;
      i = e + 1;
      goto after;
    }
  }
#endif
  if ((e = tree_string(p, n, i + 1, rest, probe)) == 0) return 0;
  c += COST_MEMBER + (e - i);
colon:
  /* the usual: the colon right after the name, the value right after it */
  if (e + 2 < n && p[e + 1] == ':' && p[e + 2] > ' ') {
    i = e + 2;
    goto value;
  }
  i = px_json_ws(p, n, e + 1);
  if (i >= n || p[i] != ':') return 0;
  i = px_json_ws(p, n, i + 1);
  goto value;
}

#if defined(__SSE2__)
#define TREE_PROBE tree_probe
#else
#define TREE_PROBE NULL
#endif
typedef size_t tree_walk_fn(const unsigned char *p, size_t n, size_t i, size_t depth,
                            size_t *cost, px_json_jumps_t *jt);
static size_t tree_walk_any(const unsigned char *p, size_t n, size_t i, size_t depth,
                            size_t *cost, px_json_jumps_t *jt) {
  (void)jt;
  return tree_walk(p, n, i, depth, cost, px_json_string_at, TREE_PROBE, NULL);
}
static size_t tree_walk_any_jumps(const unsigned char *p, size_t n, size_t i,
                                  size_t depth, size_t *cost, px_json_jumps_t *jt) {
  return tree_walk(p, n, i, depth, cost, px_json_string_at, TREE_PROBE, jt);
}
#if defined(__x86_64__) && defined(__GNUC__)
/* The tree walk with AVX2: its probes of 32 bytes in one step, and its
 * strings' blocks straight on (without *esc: the walk has no use for it) */
AVX2 static int tree_rest_avx2(const unsigned char *p, size_t n, size_t i, size_t *end,
                               int *esc) {
  *esc = 0;
  return i + 64 <= n ? string_avx2_at(p, n, i, end, NULL)
                     : string_tail(p, n, i, end, esc);
}
AVX2 static inline __attribute__((always_inline)) uint64_t tree_probe_avx2(
    const unsigned char *b) {
  /* (in assembly: GCC loads the constants into registers first, three
   * steps every probe) */
  __m256i v = _mm256_loadu_si256((const __m256i *)b), x, y;
  unsigned m;
  __asm__(
      "vpcmpeqb %[qt], %[v], %[x]\n\t"
      "vpcmpeqb %[bs], %[v], %[y]\n\t"
      "vpor %[y], %[x], %[x]\n\t"
      "vpcmpgtb %[ctl], %[v], %[y]\n\t"
      "vpandn %[y], %[x], %[x]\n\t"
      "vpmovmskb %[x], %[m]"
      : [x] "=&x"(x), [y] "=&x"(y), [m] "=r"(m)
      : [v] "x"(v), [qt] "m"(px_json_tree_qt), [bs] "m"(px_json_tree_bs),
        [ctl] "m"(px_json_tree_ctl));
  return (uint32_t)~m;
}
AVX2 static size_t tree_walk_avx2(const unsigned char *p, size_t n, size_t i,
                                  size_t depth, size_t *cost, px_json_jumps_t *jt) {
  (void)jt;
  return tree_walk(p, n, i, depth, cost, tree_rest_avx2, tree_probe_avx2, NULL);
}
AVX2 static size_t tree_walk_avx2_jumps(const unsigned char *p, size_t n, size_t i,
                                        size_t depth, size_t *cost, px_json_jumps_t *jt) {
  return tree_walk(p, n, i, depth, cost, tree_rest_avx2, tree_probe_avx2, jt);
}
#endif

static int req_fail(px_json_req_t *r, px_jreq_err_t err, size_t at, const char *reason) {
  r->err = err;
  r->err_at = at;
  r->reason = reason;
  return -1;
}

int px_json_request(const char *text, size_t n, px_json_req_t *r) {
  return px_json_request_caps(text, n, NULL, r);
}

int px_json_request_caps(const char *text, size_t n, const char *const (*caps)[2],
                         px_json_req_t *r) {
  return px_json_request_watch(text, n, caps, NULL, r);
}

/* The request walk (px_json_request_watch), recording containers' ends in
 * jt when not NULL (px_json_request_jumps): one walk, built twice, so that
 * the walk without a table pays nothing for it. */
static inline __attribute__((always_inline)) int request_walk(
    const char *text, size_t n, const char *const (*caps)[2], const char *const *members,
    px_json_jumps_t *jt, px_json_req_t *r) {
  const unsigned char *p = (const unsigned char *)text;
  unsigned char is_obj[PX_JSON_MAX_DEPTH + 1]; /* per depth: object (1) or array */
  is_obj[0] = 0;
  const watch_t *w = watch_get(caps, members);
  if (simd_level < 0) simd_level = simd_best();
  if (jt && n > UINT32_MAX) jt = NULL;
  if (jt) jt->base = text, jt->len = n, jt->n = 0;
  px_json_jumps_t *jw = NULL; /* recording from the model on, if it wants */
  if (jt && jt->want) jw = jt, jt = NULL;
#if defined(__x86_64__) && defined(__GNUC__)
  tree_walk_fn *tree = simd_level == 2 ? tree_walk_avx2 : tree_walk_any,
               *tree_jumps = simd_level == 2 ? tree_walk_avx2_jumps : tree_walk_any_jumps;
#else
  tree_walk_fn *tree = tree_walk_any, *tree_jumps = tree_walk_any_jumps;
#endif
  if (jt) tree = tree_jumps;
  int seen[W_MAX] = {0};
  size_t at[W_MAX] = {0}, len[W_MAX] = {0}; /* value token of each member */
  /* the watched member whose object is open at depth 2 (its members are
   * watched too: stream_options, metadata, a cap's parent), or W_NONE */
  int sub = W_NONE;
  int whole = W_NONE; /* the caller's member whose container is open at depth 2 */
  size_t depth = 0;
  int obj = 0;          /* the container at depth is an object (is_obj[depth]) */
  int pending = W_NONE; /* the value about to be read is this member */
  size_t cost = 0;
  memset(r, 0, sizeof(*r));
  size_t i = px_json_ws(p, n, 0);
  if (i >= n) return req_fail(r, PX_JREQ_SYNTAX, i, "the body is empty");
  if (p[i] != '{' && p[i] != '[') return req_fail(r, PX_JREQ_SYNTAX, i, "'{' expected");
  int top_obj = p[i] == '{';

value:
  if (i >= n) return req_fail(r, PX_JREQ_SYNTAX, i, "unexpected end of the body");
  {
    int rec = pending;
    size_t s = i;
    pending = W_NONE;
    switch (p[i]) {
    case '{':
    case '[':
      /* below the top, a container nothing in which is watched (all but
       * the watched top-level members' objects) by the tree walk */
      if (depth > 0 && (rec == W_NONE || w->parent[rec] != W_TOP || p[i] == '[')) {
        size_t jn = jt ? jt->n : 0;
        size_t e = tree(p, n, i, depth, &cost, jt);
        if (e == 0 && jt) jt->n = jn; /* (walked again below: by the walk's own rules) */
        if (e != 0) {
          if (rec != W_NONE) at[rec] = s, len[rec] = w->mem[rec] >= 0 ? e - s : 1;
          i = e;
          goto after;
        }
      }
      if (depth >= PX_JSON_MAX_DEPTH)
        return req_fail(r, PX_JREQ_DEPTH, i,
                        "nested too deeply (more than " DEPTH_TEXT " levels)");
      is_obj[++depth] = (unsigned char)(obj = p[i] == '{');
      cost += obj ? COST_OBJECT : COST_ARRAY;
      if (rec != W_NONE && w->parent[rec] == W_TOP && p[i] == '{') sub = rec;
      /* the type is all we need, or a caller's member's whole span (at close) */
      if (rec != W_NONE) at[rec] = s, len[rec] = 1;
      if (rec != W_NONE && w->mem[rec] >= 0) whole = rec;
      i = px_json_ws(p, n, i + 1);
      if (i < n && p[i] == (obj ? '}' : ']')) {
        i++;
        goto close;
      }
      if (obj) goto key;
      cost += COST_ELEMENT; /* the first element of an array */
      goto value;
    case '"': {
      size_t e;
      int esc;
      if (walk_string(p, n, i + 1, &e, &esc) < 0)
        return req_fail(r, PX_JREQ_SYNTAX, i,
                        "invalid string (a raw control character, invalid UTF-8, a bad "
                        "escape or no closing quote)");
      if (rec == TOP_MODEL) r->model_esc = esc;
      if (rec == TOP_MODEL && jw) {
        if (jw->want(jw, text + i, e + 1 - i)) jt = jw, tree = tree_jumps;
        jw = NULL;
      }
      cost += COST_STRING + (e - i);
      i = e + 1;
      break;
    }
    case 't':
    case 'f':
    case 'n': {
      const char *lit = p[i] == 't' ? "true" : p[i] == 'f' ? "false" : "null";
      size_t l = strlen(lit);
      if (n - i < l || memcmp(p + i, lit, l) != 0)
        return req_fail(r, PX_JREQ_SYNTAX, i, "invalid literal");
      i += l;
      break;
    }
    default:
      if (p[i] != '-' && (p[i] < '0' || p[i] > '9'))
        return req_fail(r, PX_JREQ_SYNTAX, i, "a value expected");
      if (scan_number(p, n, &i) < 0)
        return req_fail(r, PX_JREQ_SYNTAX, s, "invalid number or number out of range");
      cost += COST_NUMBER;
      break;
    }
    if (rec != W_NONE) at[rec] = s, len[rec] = i - s;
    goto after;
  }

key:
  /* at the opening quote of a member name in the object at depth */
  if (i >= n || p[i] != '"')
    return req_fail(r, PX_JREQ_SYNTAX, i, "a member name expected");
  {
    size_t e;
    int esc;
    if (walk_string(p, n, i + 1, &e, &esc) < 0)
      return req_fail(r, PX_JREQ_SYNTAX, i,
                      "invalid member name (a raw control character, invalid UTF-8, a "
                      "bad escape or no closing quote)");
    if (depth == 1) /* (the top is an object then) */
      pending = watched_key(w, p, i + 1, e, esc, W_TOP);
    else if (depth == 2 && sub != W_NONE)
      pending = watched_key(w, p, i + 1, e, esc, sub);
    if (pending != W_NONE && w->once[pending] && seen[pending]++) {
      r->key = w->name[pending];
      return req_fail(r, PX_JREQ_DUPLICATE, i, "duplicate member");
    }
    cost += COST_MEMBER + (e - i);
    i = e + 1;
    if (i >= n || p[i] != ':') { /* the usual: the colon right after the name */
      i = px_json_ws(p, n, i);
      if (i >= n || p[i] != ':') return req_fail(r, PX_JREQ_SYNTAX, i, "':' expected");
    }
    i = px_json_ws(p, n, i + 1);
    goto value;
  }

after:
  /* a value ended at i, inside the container at depth (at least 1: the top
   * value is a container, ended at close) */
  if (i >= n || p[i] <= ' ') { /* the usual: no blank after a value */
    i = px_json_ws(p, n, i);
    if (i >= n) return req_fail(r, PX_JREQ_SYNTAX, i, "unexpected end of the body");
  }
  if (p[i] == ',') {
    i = px_json_ws(p, n, i + 1);
    if (obj) goto key;
    cost += COST_ELEMENT;
    goto value;
  }
  if (p[i] != (obj ? '}' : ']'))
    return req_fail(r, PX_JREQ_SYNTAX, i,
                    obj ? "',' or '}' expected" : "',' or ']' expected");
  i++;
close:
  if (depth == 2) {
    sub = W_NONE;
    if (whole != W_NONE) len[whole] = i - at[whole], whole = W_NONE;
  }
  if (--depth > 0) {
    obj = is_obj[depth];
    goto after;
  }
  /* the top value ended */
  i = px_json_ws(p, n, i);
  if (i != n) return req_fail(r, PX_JREQ_SYNTAX, i, "data after the JSON value");
  if (!top_obj) return req_fail(r, PX_JREQ_NOT_OBJECT, 0, "not a JSON object");
  r->model_at = at[TOP_MODEL], r->model_len = len[TOP_MODEL];
  r->stream_at = at[TOP_STREAM], r->stream_len = len[TOP_STREAM];
  r->stream = len[TOP_STREAM] == 4 && memcmp(p + at[TOP_STREAM], "true", 4) == 0;
  r->include_usage = len[SO_USAGE] == 4 && memcmp(p + at[SO_USAGE], "true", 4) == 0;
  r->so_at = at[TOP_SO], r->so_len = len[TOP_SO];
  for (int k = W_FIXED; k < w->n; k++) {
    if (w->cap[k] >= 0) r->cap_at[w->cap[k]] = at[k], r->cap_len[w->cap[k]] = len[k];
    if (w->mem[k] >= 0) r->mem_at[w->mem[k]] = at[k], r->mem_len[w->mem[k]] = len[k];
  }
  static const int users[] = {META_USER, TOP_SAFETY, TOP_USER}; /* first wins */
  for (size_t k = 0; k < sizeof(users) / sizeof(users[0]); k++) {
    int u = users[k];
    if (len[u] >= 2 && p[at[u]] == '"') {
      r->user_at = at[u], r->user_len = len[u];
      break;
    }
  }
  r->cost = cost;
  if (jt) {
    if (jt->n > jt->cap) jt->n = jt->cap;
    r->jumps = jt;
  }
  return 0;
}

int px_json_request_watch(const char *text, size_t n, const char *const (*caps)[2],
                          const char *const *members, px_json_req_t *r) {
  return request_walk(text, n, caps, members, NULL, r);
}

int px_json_request_jumps(const char *text, size_t n, const char *const (*caps)[2],
                          const char *const *members, px_json_jumps_t *jt,
                          px_json_req_t *r) {
  return request_walk(text, n, caps, members, jt, r);
}

char *px_json_req_model(const char *p, const px_json_req_t *r) {
  if (r->model_len < 2 || p[r->model_at] != '"') return NULL;
  px_buf_t b;
  px_buf_init(&b, r->model_len + 1);
  px_str_t v;
  if (px_json_unescape(p + r->model_at + 1, r->model_len - 2, 1, &b, &v) < 0 ||
      px_buf_append(&b, "", 1) < 0) {
    px_buf_free(&b);
    return NULL;
  }
  return px_buf_steal(&b, NULL);
}

int px_json_splice_str(px_buf_t *out, const char *p, size_t n, size_t at, size_t len,
                       const char *value) {
  int rc = px_buf_append(out, p, at);
  if (rc == 0) rc = px_buf_json_str(out, value, strlen(value));
  if (rc == 0) rc = px_buf_append(out, p + at + len, n - at - len);
  return rc;
}

int px_json_number(const char *p, size_t n, size_t *i) {
  return scan_number((const unsigned char *)p, n, i);
}

/* ---------------------------------------------------------------------- */
/* the path finder: members located in raw JSON text without parsing it,
 * by the one reader's rule for names: compared unescaped, the last of a
 * repeated one (strings are skipped, not checked). */

#define END PX_JSON_NPOS
#define MORE PX_JSON_CUT

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
    [0] = 1,   [','] = 1,  ['}'] = 1,  [']'] = 1,
    [' '] = 1, ['\t'] = 1, ['\r'] = 1, ['\n'] = 1,
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
      if (k == 2)
        depth++;
      else if (--depth == 0)
        return i + 1;
      i++;
    }
    return MORE;
  }
  size_t s = i;
  while (i < n && !scalar_end[(unsigned char)p[i]]) i++;
  if (i == n) return MORE;
  return i > s ? i : END;
}

int px_json_name_esc(const char *s, size_t n, const char *lit, size_t ln) {
  /* the bytes before the first backslash are lit's (else another name,
   * e.g. a longer one lit begins); an escape spells one byte in 6 at most;
   * the name is checked (its closing quote at s[n]) before it is decoded */
  const char *bs = memchr(s, '\\', ln);
  if (bs == NULL || memcmp(s, lit, (size_t)(bs - s)) != 0) return 0;
  size_t end;
  int esc;
  if (n > 6 * ln ||
      px_json_string_at((const unsigned char *)s, n + 1, 0, &end, &esc) < 0 || end != n)
    return 0;
  char tmp[256];
  px_buf_t b = {.data = tmp, .len = 0, .size = sizeof(tmp), .cap = sizeof(tmp)};
  if (n > sizeof(tmp)) px_buf_init(&b, n); /* a long one: on the heap */
  px_str_t v;
  int is = px_json_unescape(s, n, 1, &b, &v) == 0 && v.len == ln &&
           memcmp(v.ptr, lit, ln) == 0;
  if (b.data != tmp) px_buf_free(&b);
  return is;
}

/* Whether p[i..n) may hold another member named like a name whose first
 * byte is c: a quote followed by c or a backslash (an escaped spelling) at
 * one of the places i .. n - 2 (a quote at n - 1 opens no name), a block
 * at a time, the last block overlapping the one before. 0: the member
 * found is the last of its name. */
#if defined(__x86_64__) && defined(__GNUC__)
AVX2 static int name_may_follow_avx2(const char *p, size_t i, size_t n, char c) {
  const __m256i qt = _mm256_set1_epi8('"'), f = _mm256_set1_epi8(c),
                bs = _mm256_set1_epi8('\\');
  for (size_t last = n - 33;; i = i + 32 > last ? last : i + 32) {
    __m256i q = _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(p + i)), qt),
            v = _mm256_loadu_si256((const __m256i *)(p + i + 1));
    if (!_mm256_testz_si256(
            q, _mm256_or_si256(_mm256_cmpeq_epi8(v, f), _mm256_cmpeq_epi8(v, bs))))
      return 1;
    if (i == last) return 0;
  }
}
#endif

static int name_may_follow(const char *p, size_t i, size_t n, char c) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (n >= 33 && i + 33 <= n && simd_level == 2) return name_may_follow_avx2(p, i, n, c);
#endif
  for (; i + 1 < n; i++)
    if (p[i] == '"' && (p[i + 1] == c || p[i + 1] == '\\')) return 1;
  return 0;
}

int px_json_find(const char *p, size_t n, const char *const *path, size_t depth,
                 size_t *start, size_t *len) {
  if (simd_level < 0) simd_level = simd_best();
  size_t i = skip_ws(p, 0, n);
  for (size_t level = 0;; level++) {
    if (i >= n) return PX_JSON_MORE;
    if (p[i] != '{') return level == 0 ? PX_JSON_BAD : PX_JSON_ABSENT;
    i = skip_ws(p, i + 1, n);
    if (i >= n) return PX_JSON_MORE;
    const char *want = path[level];
    size_t wl = strlen(want), hit = END, hl = 0;
    /* every member of the object: the last of that name is the one (as
     * jansson keeps it), so the walk goes on to the closing brace unless
     * no other can follow */
    while (p[i] != '}') {
      if (p[i] != '"') return PX_JSON_BAD;
      size_t ke = skip_string(p, i, n);
      if (ke == MORE) return PX_JSON_MORE;
      int match = px_json_name_is(p + i + 1, ke - i - 2, want, wl);
      i = skip_ws(p, ke, n);
      if (i >= n) return PX_JSON_MORE;
      if (p[i] != ':') return PX_JSON_BAD;
      i = skip_ws(p, i + 1, n);
      size_t ve = skip_value(p, i, n);
      if (ve == MORE) return PX_JSON_MORE;
      if (ve == END) return PX_JSON_BAD;
      if (match) {
        hit = i, hl = ve - i;
        if (!name_may_follow(p, ve, n, want[0])) break; /* the last: the usual case */
      }
      i = skip_ws(p, ve, n);
      if (i >= n) return PX_JSON_MORE;
      if (p[i] == ',') {
        i = skip_ws(p, i + 1, n);
        if (i >= n) return PX_JSON_MORE;
        if (p[i] == '}') return PX_JSON_BAD;
      } else if (p[i] != '}') {
        return PX_JSON_BAD;
      }
    }
    if (hit == END) return PX_JSON_ABSENT;
    if (level + 1 == depth) {
      *start = hit;
      *len = hl;
      return PX_JSON_FOUND;
    }
    i = hit; /* descend into the last one */
  }
}

/* skip_string with the usual string (plain ASCII to its quote) inline */
static inline size_t string_end(const char *p, size_t i, size_t n) {
  size_t k = px_json_plain((const unsigned char *)p, n, i + 1);
  return k < n && p[k] == '"' ? k + 1 : skip_string(p, i, n);
}

size_t px_json_pick(const char *p, size_t n, size_t i, px_json_pick_t *pk) {
  size_t found = 0;
  if (i >= n) return MORE;
  if (p[i] != '{') return END;
  i = skip_ws(p, i + 1, n);
  if (i >= n) return MORE;
  if (p[i] == '}') return i + 1;
  for (;;) {
    if (p[i] != '"') return END;
    size_t ke = string_end(p, i, n);
    if (ke == MORE) return MORE;
    size_t kl = ke - i - 2, hit = PX_JSON_PICK_MAX;
    for (size_t k = 0; k < pk->n; k++)
      if (pk->at[k] == END && px_json_name_is(p + i + 1, kl, pk->name[k], pk->nlen[k])) {
        hit = k;
        break;
      }
    i = skip_ws(p, ke, n);
    if (i >= n) return MORE;
    if (p[i] != ':') return END;
    i = skip_ws(p, i + 1, n);
    size_t ve = i < n && p[i] == '"' ? string_end(p, i, n) : skip_value(p, i, n);
    if (ve == MORE || ve == END) return ve;
    if (hit < PX_JSON_PICK_MAX) {
      pk->at[hit] = i;
      pk->len[hit] = ve - i;
      if (pk->until_found && ++found == pk->n) return ve;
    }
    i = skip_ws(p, ve, n);
    if (i >= n) return MORE;
    if (p[i] == '}') return i + 1;
    if (p[i] != ',') return END;
    i = skip_ws(p, i + 1, n);
    if (i >= n) return MORE;
  }
}

int px_json_replace_str(px_buf_t *out, const char *p, size_t n, const char *const *path,
                        size_t depth, const char *value) {
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

int px_json_respell(const char *p, size_t n, px_buf_t *out) {
  const unsigned char *u = (const unsigned char *)p;
  px_buf_t scratch;
  px_buf_init(&scratch, n + 1);
  int changed = 0, rc = px_buf_reserve(out, n);
  size_t i = 0;
  while (rc == 0 && i < n) {
    /* outside strings a quote is the only byte that opens one */
    const char *q = memchr(p + i, '"', n - i);
    size_t at = q != NULL ? (size_t)(q - p) : n;
    rc = px_buf_append(out, p + i, at - i);
    if (rc < 0 || at == n) break;
    size_t end;
    int esc;
    if (px_json_string_at(u, n, at + 1, &end, &esc) < 0) {
      rc = PX_EINVAL;
      break;
    }
    px_str_t v;
    if (!esc) {
      rc = px_buf_append(out, p + at, end + 1 - at);
    } else if ((rc = px_json_unescape(p + at + 1, end - at - 1, 1, &scratch, &v)) == 0) {
      size_t from = out->len;
      rc = px_buf_json_str(out, v.ptr, v.len);
      if (rc == 0 && (out->len - from != end + 1 - at ||
                      memcmp(out->data + from, p + at, end + 1 - at) != 0))
        changed = 1;
    }
    i = end + 1;
  }
  px_buf_free(&scratch);
  return rc < 0 ? rc : changed;
}
