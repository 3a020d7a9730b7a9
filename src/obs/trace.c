/* trace.c - W3C trace context, sampling and OTLP/JSON span encoding (SPEC
 * section 15). No I/O: the exporter (src/core/trace_export.c) takes the
 * batch this file fills.
 *
 *   px_trace_begin (client traceparent? continue : new trace; sample)
 *     -> px_trace_attempt (attempt span id, upstream traceparent) ...
 *     -> px_trace_emit (span -> JSON into the batch, or dropped)
 *     -> px_trace_take (the batch as one ExportTraceServiceRequest)
 *
 * OTLP/JSON as the OTLP specification defines it: ids in hex, enums as
 * numbers, 64-bit integers as decimal strings, lowerCamelCase names. Each
 * span is written straight into the batch (literal pieces are fixed-length
 * copies): a traced request costs a few thousand instructions, no
 * document is built.
 */
#include "proxai/trace.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <uv.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "proxai/json.h"
#include "proxai/metrics.h"

/* the encoders of a span's values: inlined where they are used (a span
 * writes a few dozen of them, each worth less than a call) */
#if defined(__GNUC__) || defined(__clang__)
#define ENC static inline __attribute__((always_inline))
#else
#define ENC static inline
#endif

#define BATCH_MAX (4u << 20) /* bytes waiting, in flight apart: beyond, spans drop */
#define BATCH_SPANS_MAX 8192 /* spans waiting */
#define READY_SPANS 512      /* a batch this large is sent at once */
#define READY_BYTES (1u << 20)
/* room a batch starts with: a batch that is sent as it becomes ready
 * (READY_SPANS spans, READY_BYTES) is written without the buffer growing
 * (each growth copies what it holds: a copy of a megabyte costs more than
 * the spans of a thousand requests); pages never written cost no memory */
#define BATCH_START (READY_BYTES + (256u << 10))

static px_buf_t batch;
static size_t nspans;
static int ready_signalled;
static void (*ready_cb)(void);
static uint64_t wall_offset; /* wall clock ns - uv_hrtime() */

/* ---------------------------------------------------------------------- */
/* ids                                                                      */

/* xoshiro256** seeded from the kernel in each process at its first id
 * (workers are forked before any request: each gets its own sequence). */
static uint64_t rs[4];
static int seeded;

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static inline uint64_t next64(void) {
  if (!seeded) {
    if (getrandom(rs, sizeof(rs), 0) != (ssize_t)sizeof(rs)) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      rs[0] = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
      rs[1] = uv_hrtime() ^ 0x9e3779b97f4a7c15ull;
      rs[2] = (uint64_t)uv_os_getpid() * 0xbf58476d1ce4e5b9ull;
      rs[3] = 0x94d049bb133111ebull;
    }
    seeded = 1;
  }
  uint64_t r = rotl(rs[1] * 5, 7) * 9, t = rs[1] << 17;
  rs[2] ^= rs[0];
  rs[3] ^= rs[1];
  rs[1] ^= rs[2];
  rs[0] ^= rs[3];
  rs[2] ^= t;
  rs[3] = rotl(rs[3], 45);
  return r;
}

static const char hexd[] = "0123456789abcdef";

#if defined(__SSE2__)
/* nibbles (0-15, one a byte) as lower-case hex digits */
static inline __m128i hex_digits(__m128i nib) {
  __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(nib, _mm_set1_epi8(9)),
                                 _mm_set1_epi8('a' - '0' - 10));
  return _mm_add_epi8(_mm_add_epi8(nib, _mm_set1_epi8('0')), letter);
}
#endif

/* the 2n hex digits of n bytes (8 or 16): the nibbles of all at once */
static void hex_id(char *out, const uint8_t *b, size_t n) {
#if defined(__SSE2__)
  const __m128i m = _mm_set1_epi8(0x0f);
  __m128i v = n > 8 ? _mm_loadu_si128((const __m128i *)b) : _mm_loadl_epi64((const __m128i *)b);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m), lo = _mm_and_si128(v, m);
  _mm_storeu_si128((__m128i *)out, hex_digits(_mm_unpacklo_epi8(hi, lo)));
  if (n > 8) _mm_storeu_si128((__m128i *)(out + 16), hex_digits(_mm_unpackhi_epi8(hi, lo)));
#else
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hexd[b[i] >> 4];
    out[2 * i + 1] = hexd[b[i] & 15];
  }
#endif
}

/* A random non-zero id of n bytes (8 or 16) into bin (NULL: not kept) and
 * its hex digits into hex. */
static void new_id(uint8_t *bin, char *hex, size_t n) {
  uint64_t r[2];
  do {
    r[0] = next64();
    r[1] = n > 8 ? next64() : 0;
  } while (r[0] == 0 && r[1] == 0);
  if (bin) memcpy(bin, r, n);
  hex_id(hex, (const uint8_t *)r, n);
}

static int unhex1(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1; /* W3C: lower case only */
}

/* n bytes from 2n lower-case hex digits; 0 unless valid and not all zero */
static int unhex(uint8_t *out, const char *s, size_t n) {
  uint8_t any = 0;
  for (size_t i = 0; i < n; i++) {
    int h = unhex1(s[2 * i]), l = unhex1(s[2 * i + 1]);
    if (h < 0 || l < 0) return 0;
    out[i] = (uint8_t)(h << 4 | l);
    any |= out[i];
  }
  return any != 0;
}

/* A traceparent (W3C Trace Context level 1): version-00 exactly, a later
 * version by its first four fields. 1 when valid: ids into t. */
static int parse_traceparent(px_trace_ctx_t *t, px_str_t v) {
  const char *s = v.ptr;
  if (v.len < PX_TRACEPARENT_LEN || s[2] != '-' || s[35] != '-' || s[52] != '-') return 0;
  int hi = unhex1(s[0]), lo = unhex1(s[1]);
  if (hi < 0 || lo < 0 || (hi << 4 | lo) == 0xff) return 0;
  if (hi == 0 && lo == 0 ? v.len != PX_TRACEPARENT_LEN
                         : v.len > PX_TRACEPARENT_LEN && s[PX_TRACEPARENT_LEN] != '-')
    return 0;
  if (unhex1(s[53]) < 0 || unhex1(s[54]) < 0) return 0;
  if (!unhex(t->trace_id, s + 3, 16) || !unhex(t->parent_id, s + 36, 8)) return 0;
  memcpy(t->trace_hex, s + 3, 32); /* lower case, as checked */
  memcpy(t->parent_hex, s + 36, 16);
  return 1;
}

/* Sampling on the trace id, as OpenTelemetry's TraceIdRatioBased: its last
 * eight bytes (big-endian, top bit dropped) below sample * 2^63. */
static int sample_keep(const uint8_t *tid, double sample) {
  if (sample >= 1.0) return 1;
  if (sample <= 0.0) return 0;
  uint64_t v = 0;
  for (int i = 8; i < 16; i++) v = v << 8 | tid[i];
  return (v >> 1) < (uint64_t)(sample * 9223372036854775808.0);
}

void px_trace_begin(px_trace_ctx_t *t, const px_trace_conf_t *conf, px_str_t traceparent,
                    px_str_t tracestate) {
  if (conf->endpoint == NULL) {
    memset(t, 0, sizeof(*t));
    return;
  }
  /* each member set here or before it is read (not the whole context
   * cleared first): ids are written whole, the client's only with
   * has_parent */
  t->on = 1;
  t->has_parent = 0;
  t->tracestate = (px_str_t){NULL, 0};
  if (traceparent.len && parse_traceparent(t, traceparent)) {
    t->has_parent = 1;
    if (tracestate.len && px_header_value_ok(tracestate.ptr, tracestate.len))
      t->tracestate = tracestate;
  } else {
    new_id(t->trace_id, t->trace_hex, 16);
  }
  t->sampled = (uint8_t)sample_keep(t->trace_id, conf->sample);
  if (!t->sampled) return; /* no span: the attempts' ids alone go upstream */
  new_id(NULL, t->span_hex, 8);
}

void px_trace_attempt(px_trace_ctx_t *t, char *out) {
  new_id(NULL, t->att_hex, 8);
  if (out == NULL) return;
  memcpy(out, "00-", 3);
  memcpy(out + 3, t->trace_hex, 32);
  out[35] = '-';
  memcpy(out + 36, t->att_hex, 16);
  memcpy(out + 52, t->sampled ? "-01" : "-00", 3);
}

void px_trace_id_hex(const px_trace_ctx_t *t, char *out) {
  memcpy(out, t->trace_hex, 32);
  out[32] = 0;
}

/* ---------------------------------------------------------------------- */
/* OTLP/JSON                                                                */

/* A span is written with a cursor into room reserved for its largest
 * possible size (span_bound): literal pieces are fixed-length copies, with
 * no capacity check per piece. */
#define LIT(w, s) (memcpy((w), (s), sizeof(s) - 1), (w) += sizeof(s) - 1)

/* Everything of a span but its strings, with room to spare: the literal
 * pieces of every attribute, ids, times and numbers. */
#define SPAN_FIXED 2560
/* Worst growth of a string: each byte escaped as \u00XX. */
#define ESC_MAX 6

/* bytes a JSON string cannot hold as they are, or that may start an
 * invalid UTF-8 sequence: 1 */
static const uint8_t care[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* The slow path of put_text: escapes, and valid UTF-8 whatever the bytes
 * (a model name from a URL path may hold any): each invalid byte becomes
 * U+FFFD, so one odd name never makes a collector refuse the batch. */
static char *put_text_slow(char *w, const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        *w++ = '\\';
        *w++ = (char)c;
      } else if (c < 0x20) {
        static const char esc[] = "btn?fr";
        if (c >= 8 && c <= 13 && c != 11) {
          *w++ = '\\';
          *w++ = esc[c - 8];
        } else {
          LIT(w, "\\u00");
          *w++ = hexd[c >> 4];
          *w++ = hexd[c & 15];
        }
      } else {
        *w++ = (char)c;
      }
      i++;
      continue;
    }
    size_t k = c >= 0xc2 && c <= 0xdf   ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    int ok = k > 0 && i + k <= n;
    for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)s[i + j] & 0xc0) == 0x80;
    if (ok && k == 3) { /* no overlong forms, no surrogates */
      unsigned char d = (unsigned char)s[i + 1];
      ok = !(c == 0xe0 && d < 0xa0) && !(c == 0xed && d >= 0xa0);
    }
    if (ok && k == 4) {
      unsigned char d = (unsigned char)s[i + 1];
      ok = !(c == 0xf0 && d < 0x90) && !(c == 0xf4 && d >= 0x90);
    }
    if (ok) {
      memcpy(w, s + i, k);
      w += k;
      i += k;
    } else {
      LIT(w, "\xef\xbf\xbd");
      i++;
    }
  }
  return w;
}

/* A JSON string's content (escaped): names are short and plain as a rule,
 * copied while checked a word at a time (px_json_special8: the bytes care[]
 * flags), written again by the slow path when not plain. */
ENC char *put_text(char *w, const char *s, size_t n) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint64_t x, bad = 0;
  if (n >= 8) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      memcpy(&x, s + i, 8);
      memcpy(w + i, &x, 8);
      bad |= px_json_special8(x);
    }
    if (i < n) { /* the last 8 bytes, overlapping */
      memcpy(&x, s + n - 8, 8);
      memcpy(w + n - 8, &x, 8);
      bad |= px_json_special8(x);
    }
    return bad ? put_text_slow(w, s, n) : w + n;
  }
  if (n >= 4) { /* the first and the last 4 bytes */
    uint32_t a, b;
    memcpy(&a, s, 4);
    memcpy(&b, s + n - 4, 4);
    memcpy(w, &a, 4);
    memcpy(w + n - 4, &b, 4);
    bad = px_json_special8(a | (uint64_t)b << 32);
    return bad ? put_text_slow(w, s, n) : w + n;
  }
#endif
  unsigned plain = 1;
  for (size_t i = 0; i < n; i++) {
    w[i] = s[i];
    plain &= !care[(unsigned char)s[i]];
  }
  return plain ? w + n : put_text_slow(w, s, n);
}

static const char digits2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* exactly 4 digits of v < 10000 */
static inline char *put4(char *w, uint32_t v) {
  uint32_t a = v / 100, b = v % 100;
  memcpy(w, digits2 + 2 * a, 2);
  memcpy(w + 2, digits2 + 2 * b, 2);
  return w + 4;
}

/* exactly 8 digits of v < 100000000 */
static inline char *put8(char *w, uint32_t v) {
  return put4(put4(w, v / 10000), v % 10000);
}

#if defined(__SSE2__)
/* exactly 8 digits of v < 10^8 at once: v = abcd * 10^4 + efgh, each half
 * in four 16-bit lanes divided by 10^3, 10^2, 10 and 1 (a reciprocal and a
 * shift each: a, ab, abc, abcd), each digit its lane less ten times the
 * lane before; checked against division for every v < 10^8 */
static inline char *put8_sse2(char *w, uint32_t v) {
  const __m128i x = _mm_cvtsi32_si128((int)v);
  const __m128i abcd =
      _mm_srli_epi64(_mm_mul_epu32(x, _mm_set1_epi32((int)0xd1b71759)), 45);
  const __m128i efgh = _mm_sub_epi32(x, _mm_mul_epu32(abcd, _mm_set1_epi32(10000)));
  __m128i q = _mm_slli_epi64(_mm_unpacklo_epi16(abcd, efgh), 2);
  q = _mm_unpacklo_epi16(q, q);
  q = _mm_unpacklo_epi32(q, q); /* abcd * 4 in four lanes, efgh * 4 in four */
  q = _mm_mulhi_epu16(q, _mm_setr_epi16(8389, 5243, 13108, (short)32768, 8389, 5243,
                                        13108, (short)32768));
  q = _mm_mulhi_epu16(q, _mm_setr_epi16(1 << 7, 1 << 11, 1 << 13, (short)(1 << 15),
                                        1 << 7, 1 << 11, 1 << 13, (short)(1 << 15)));
  const __m128i d =
      _mm_sub_epi16(q, _mm_slli_epi64(_mm_mullo_epi16(q, _mm_set1_epi16(10)), 16));
  _mm_storel_epi64((__m128i *)w,
                   _mm_add_epi8(_mm_packus_epi16(d, d), _mm_set1_epi8('0')));
  return w + 8;
}

/* exactly 9 digits of u < 10^9 (a time's nanoseconds): the first, then
 * eight at once */
static inline char *put9(char *w, uint32_t u) {
  uint32_t a = u / 100000000;
  *w = (char)('0' + a);
  return put8_sse2(w + 1, u - a * 100000000);
}
#else
/* exactly 9 digits of u < 10^9: u / 10^8 as a 32.32 fixed-point number
 * (jeaiii's constant and correction for nine digits), then two digits per
 * multiplication by 100; checked against printf for every u < 10^9 */
static inline char *put9(char *w, uint32_t u) {
  uint64_t t = (uint64_t)u * 2882303762ull; /* 2^58 / 10^8 + 1 */
  t = (t >> 26) + 4;
  *w = (char)('0' + (t >> 32));
#define PUT2(at)                                \
  t = (uint64_t)(uint32_t)t * 100;              \
  memcpy(w + (at), digits2 + 2 * (t >> 32), 2)
  PUT2(1);
  PUT2(3);
  PUT2(5);
  PUT2(7);
#undef PUT2
  return w + 9;
}
#endif

/* v < 10000, without leading zeros */
ENC char *put_upto4(char *w, uint32_t v) {
  if (v < 10) {
    *w = (char)('0' + v);
    return w + 1;
  }
  if (v < 100) {
    memcpy(w, digits2 + 2 * v, 2);
    return w + 2;
  }
  if (v < 1000) {
    *w = (char)('0' + v / 100);
    memcpy(w + 1, digits2 + 2 * (v % 100), 2);
    return w + 3;
  }
  return put4(w, v);
}

/* v < 100000000, without leading zeros */
ENC char *put_small(char *w, uint32_t v) {
  if (v < 10000) return put_upto4(w, v);
  return put4(put_upto4(w, v / 10000), v % 10000);
}

/* v >= 100000000 in 8-digit chunks of 32-bit arithmetic (a time's
 * seconds, a huge count): out of line */
static char *put_big(char *w, uint64_t v) {
  uint64_t hi = v / 100000000;
  uint32_t lo = (uint32_t)(v % 100000000);
  if (hi < 100000000)
    w = put_small(w, (uint32_t)hi);
  else
    w = put8(put_upto4(w, (uint32_t)(hi / 100000000)), (uint32_t)(hi % 100000000));
  return put8(w, lo);
}

/* decimal: the counts of a span are small */
ENC char *put_u64(char *w, uint64_t v) {
  return v < 100000000 ? put_small(w, (uint32_t)v) : put_big(w, v);
}

/* a wall-clock time in ns: seconds (10 digits until 2286, at most 11),
 * their digits kept from the last time with the second's first ns (spans
 * end within the same second, as a rule: no division then), and 9 digits */
ENC char *put_time(char *w, uint64_t hr) {
  static uint64_t sec_ns; /* the kept second, in ns */
  static char sec_text[24];
  static size_t sec_len; /* 0: none kept yet */
  uint64_t v = hr + wall_offset;
  if (v - sec_ns >= 1000000000 || sec_len == 0) { /* another second (or before it) */
    uint64_t sec = v / 1000000000;
    sec_len = (size_t)(put_u64(sec_text, sec) - sec_text);
    sec_ns = sec * 1000000000;
  }
  memcpy(w, sec_text, 16); /* a fixed-length copy: the room has it */
  return put9(w + sec_len, (uint32_t)(v - sec_ns));
}

/* ,{"key":"K","value":{"stringValue":"V"}} */
#define ATTR_STR(w, key, v, vl)                                    \
  do {                                                             \
    LIT(w, ",{\"key\":\"" key "\",\"value\":{\"stringValue\":\""); \
    w = put_text(w, (v), (vl));                                    \
    LIT(w, "\"}}");                                                \
  } while (0)
#define ATTR_INT(w, key, v)                                     \
  do {                                                          \
    LIT(w, ",{\"key\":\"" key "\",\"value\":{\"intValue\":\""); \
    w = put_u64(w, (uint64_t)(v));                              \
    LIT(w, "\"}}");                                             \
  } while (0)

/* server.address: the host of the upstream's base URL */
static px_str_t url_host_find(const char *url) {
  const char *h = strstr(url, "://");
  h = h ? h + 3 : url;
  const char *at = h;
  while (*at && *at != '/' && *at != '@') at++;
  if (*at == '@') h = at + 1; /* never userinfo */
  const char *e = h;
  if (*h == '[') {
    while (*e && *e != ']') e++;
    if (*e == ']') e++;
  } else {
    while (*e && *e != ':' && *e != '/' && *e != '?') e++;
  }
  if (*h == '[' && e - h >= 2 && e[-1] == ']') h++, e--; /* the address without [] */
  return (px_str_t){h, (size_t)(e - h)};
}

/* the last URL's host kept (its place in the URL): an upstream comes back
 * span after span */
static px_str_t url_host(const char *url) {
  static char last[256];
  static size_t at, len;
  if (strcmp(url, last) == 0) return (px_str_t){url + at, len};
  px_str_t h = url_host_find(url);
  if (strlen(url) < sizeof(last)) {
    strcpy(last, url);
    at = (size_t)(h.ptr - url);
    len = h.len;
  }
  return h;
}

/* proxai.lossy: the comma-separated list as a string array */
static char *attr_lossy(char *w, const char *l) {
  LIT(w, ",{\"key\":\"proxai.lossy\",\"value\":{\"arrayValue\":{\"values\":[");
  int first = 1;
  while (*l) {
    while (*l == ' ' || *l == ',') l++;
    const char *e = l;
    while (*e && *e != ',') e++;
    const char *t = e;
    while (t > l && t[-1] == ' ') t--;
    if (t > l) {
      if (!first) *w++ = ',';
      LIT(w, "{\"stringValue\":\"");
      w = put_text(w, l, (size_t)(t - l));
      LIT(w, "\"}");
      first = 0;
    }
    l = e;
  }
  LIT(w, "]}}}");
  return w;
}

static int put_prefix(px_buf_t *b) {
  static const char pre[] =
      "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
      "{\"key\":\"service.name\",\"value\":{\"stringValue\":\"proxai\"}},"
      "{\"key\":\"service.version\",\"value\":{\"stringValue\":\"" PROXAI_VERSION
      "\"}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"proxai\",\"version\":"
      "\"" PROXAI_VERSION "\"},\"spans\":[";
  return px_buf_append(b, pre, sizeof(pre) - 1);
}

/* A string of the span and its length (0 when absent) */
typedef struct sv {
  const char *p;
  size_t n;
} sv_t;

static sv_t sv(const char *s) {
  return (sv_t){s, s ? strlen(s) : 0};
}

static sv_t str_sv(px_str_t s) {
  return (sv_t){s.len ? s.ptr : NULL, s.len};
}

/* ---------------------------------------------------------------------- */
/* attributes fixed per upstream, or per key and route: encoded once       */

/* A span's attributes that come from the configuration (the operation, the
 * provider, server.address and proxai.upstream of a CLIENT span; the
 * operation, proxai.key, proxai.team and proxai.route of a SERVER span) are
 * the same span after span: their encoded text is kept, keyed by the
 * strings' addresses, while a reference on the configuration that owns them
 * (px_span_t.cfg) keeps those addresses from being reused. */
#define FRAG_MAX 1024
typedef struct frag {
  const char *k[4]; /* the strings it was encoded from */
  size_t len;       /* 0: empty */
  size_t op_len;    /* the operation's length (k[0]) */
  char text[FRAG_MAX];
} frag_t;
static frag_t frags[2]; /* SERVER, CLIENT */
static px_config_t *frag_cfg;

static void heads_drop(void);

static void frags_drop(void) {
  frags[0].len = frags[1].len = 0;
  heads_drop(); /* keyed by the fixed strings too */
  if (frag_cfg) px_config_unref(frag_cfg);
  frag_cfg = NULL;
}

/* the fixed attributes of s, the operation first (the others each with its
 * leading comma) */
static char *put_fixed(char *w, const px_span_t *s, const sv_t *f) {
  LIT(w, "{\"key\":\"gen_ai.operation.name\",\"value\":{\"stringValue\":\"");
  memcpy(w, f[0].p, f[0].n); /* the protocols' own literals, plain */
  w += f[0].n;
  LIT(w, "\"}}");
  if (s->kind == PX_SPAN_CLIENT) {
    if (f[1].p) ATTR_STR(w, "gen_ai.provider.name", f[1].p, f[1].n);
    if (f[2].p) ATTR_STR(w, "server.address", f[2].p, f[2].n);
    if (f[3].p) ATTR_STR(w, "proxai.upstream", f[3].p, f[3].n);
  } else {
    if (f[1].p) ATTR_STR(w, "proxai.key", f[1].p, f[1].n);
    if (f[2].p) ATTR_STR(w, "proxai.team", f[2].p, f[2].n);
    if (f[3].p) ATTR_STR(w, "proxai.route", f[3].p, f[3].n);
  }
  return w;
}

/* the fixed strings of s: the operation, then three by kind */
static void fixed_of(const px_span_t *s, const char **k) {
  k[0] = s->operation;
  if (s->kind == PX_SPAN_CLIENT) {
    k[1] = s->provider, k[2] = s->server_url, k[3] = s->upstream;
  } else {
    k[1] = s->key, k[2] = s->team, k[3] = s->route;
  }
}

/* The kept text of s's fixed attributes, or NULL (then *f holds the
 * strings to encode: server.address as the URL's host). */
static const frag_t *fixed_find(const px_span_t *s, const char **k, sv_t *f) {
  if (s->cfg != NULL && s->cfg == frag_cfg) {
    const frag_t *c = &frags[s->kind == PX_SPAN_CLIENT];
    if (c->len && c->k[0] == k[0] && c->k[1] == k[1] && c->k[2] == k[2] &&
        c->k[3] == k[3])
      return f[0] = (sv_t){k[0], c->op_len}, c;
  }
  for (int i = 0; i < 4; i++) f[i] = sv(k[i]);
  if (s->kind == PX_SPAN_CLIENT && k[2]) {
    px_str_t h = url_host(k[2]);
    f[2] = (sv_t){h.ptr, h.len};
  }
  return NULL;
}

/* Keeps the fixed attributes just written at w[0..len) for the next span. */
static void fixed_keep(const px_span_t *s, const char **k, const char *w, size_t len) {
  if (s->cfg == NULL || len == 0 || len > FRAG_MAX) return;
  if (s->cfg != frag_cfg) {
    frags_drop();
    frag_cfg = px_config_ref((px_config_t *)s->cfg);
  }
  frag_t *c = &frags[s->kind == PX_SPAN_CLIENT];
  memcpy(c->k, k, sizeof(c->k));
  memcpy(c->text, w, len);
  c->len = len;
  c->op_len = strlen(k[0]);
}

/* ---------------------------------------------------------------------- */
/* a span's head: kept as text, its ids written into it                    */

/* A span is written in two parts (the order of a span's members and of its
 * attributes carries no meaning in OTLP):
 *   head  {"traceId":"T","spanId":"S"[,"parentSpanId":"P"],"name":"op model",
 *         "kind":K,"attributes":[ the configuration's, the request model,
 *         max_tokens, the response model, the finish reason, the status,
 *         the attempt
 *   tail  the response id, the token counts, error.type, proxai.user,
 *         proxai.lossy, proxai.cost_usd ], the times, the tracestate, the
 *         first token's event, the status }
 * Spans of a kind follow one another with the same head but for its ids (one
 * route and upstream, one model, "stop", 200): the last head of each kind is
 * kept as text with what it was written from (the fixed strings by address,
 * their configuration referenced as for the fixed attributes; the models and
 * the finish reason by their bytes; the numbers), and a span whose values
 * are those copies it and writes its ids in place. The tail's values differ
 * request by request: always written. */
#define HEAD_MAX 2048
#define HEAD_KEYS 256  /* the model's, the response model's, the finish reason's bytes */
#define AT_TRACE_ID 12 /* {"traceId":" */
#define AT_SPAN_ID 56  /* ...<32>","spanId":" */
#define AT_PARENT 90   /* ...<16>","parentSpanId":" */
enum { V_NAME, V_REQ, V_RESP, V_RID, V_FIN, V_USER, V_ERR, V_N };
#define NO_NAME ((size_t)-1)

typedef struct head {
  size_t len;       /* 0: none kept */
  const char *k[4]; /* the fixed strings (frag_cfg holds them) */
  int parent, status;
  int64_t max_tokens;
  unsigned attempt;
  size_t n[3]; /* the lengths of the model (NO_NAME: none), the response's
                  model, the finish reason; their bytes in keys, in a row */
  char keys[HEAD_KEYS];
  char text[HEAD_MAX];
} head_t;
static head_t heads[2]; /* SERVER, CLIENT */

static void heads_drop(void) {
  heads[0].len = heads[1].len = 0;
}

/* the kept head of s's kind when s's is the same, else NULL */
static const head_t *head_find(const px_span_t *s, const char **fk, const sv_t *v) {
  const head_t *h = &heads[s->kind == PX_SPAN_CLIENT];
  /* a head is kept only under frag_cfg: the same configuration, the same
   * fixed strings' addresses are the same strings */
  if (h->len == 0 || s->cfg != frag_cfg || h->k[0] != fk[0] || h->k[1] != fk[1] ||
      h->k[2] != fk[2] || h->k[3] != fk[3] || h->parent != (s->parent != NULL) ||
      h->status != s->status || h->max_tokens != s->max_tokens ||
      h->attempt != s->attempt || s->request_model != s->name_model ||
      h->n[0] != (v[V_NAME].p ? v[V_NAME].n : NO_NAME) || h->n[1] != v[V_RESP].n ||
      h->n[2] != v[V_FIN].n)
    return NULL;
  const char *k = h->keys;
  size_t n0 = v[V_NAME].n;
  if (!px_mem_eq(k, v[V_NAME].p, n0) || !px_mem_eq(k + n0, v[V_RESP].p, h->n[1]) ||
      !px_mem_eq(k + n0 + h->n[1], v[V_FIN].p, h->n[2]))
    return NULL;
  return h;
}

/* Keeps the head just written at w[0..len) for the next span of its kind
 * (one whose request model is its name's, its configuration referenced by
 * the fixed attributes). */
static void head_keep(const px_span_t *s, const char **fk, const sv_t *v, const char *w,
                      size_t len) {
  head_t *h = &heads[s->kind == PX_SPAN_CLIENT];
  h->len = 0;
  size_t n0 = v[V_NAME].n;
  if (s->cfg == NULL || s->cfg != frag_cfg || s->request_model != s->name_model ||
      len > HEAD_MAX || n0 + v[V_RESP].n + v[V_FIN].n > HEAD_KEYS)
    return;
  memcpy(h->k, fk, sizeof(h->k));
  h->parent = s->parent != NULL;
  h->status = s->status;
  h->max_tokens = s->max_tokens;
  h->attempt = s->attempt;
  h->n[0] = v[V_NAME].p ? n0 : NO_NAME;
  h->n[1] = v[V_RESP].n;
  h->n[2] = v[V_FIN].n;
  if (n0) memcpy(h->keys, v[V_NAME].p, n0);
  if (h->n[1]) memcpy(h->keys + n0, v[V_RESP].p, h->n[1]);
  if (h->n[2]) memcpy(h->keys + n0 + h->n[1], v[V_FIN].p, h->n[2]);
  memcpy(h->text, w, len);
  h->len = len;
}

/* Writes the head of s at w (room for its bound reserved); returns its end. */
static char *put_head(char *w, const px_trace_ctx_t *t, const px_span_t *s, const sv_t *v,
                      const frag_t *fixed, const char **fk, const sv_t *f) {
  const sv_t op = f[0];
  _Static_assert(sizeof("{\"traceId\":\"") - 1 == AT_TRACE_ID &&
                     AT_TRACE_ID + 32 + sizeof("\",\"spanId\":\"") - 1 == AT_SPAN_ID &&
                     AT_SPAN_ID + 16 + sizeof("\",\"parentSpanId\":\"") - 1 == AT_PARENT,
                 "the ids' places in a head");
  LIT(w, "{\"traceId\":\"");
  memcpy(w, t->trace_hex, 32);
  w += 32;
  LIT(w, "\",\"spanId\":\"");
  memcpy(w, s->id, 16);
  w += 16;
  if (s->parent) {
    LIT(w, "\",\"parentSpanId\":\"");
    memcpy(w, s->parent, 16);
    w += 16;
  }
  LIT(w, "\",\"name\":\"");
  memcpy(w, op.p, op.n); /* the protocols' own literals, plain */
  w += op.n;
  const char *name = w + 1; /* the model's escaped text */
  if (v[V_NAME].p) {
    *w++ = ' ';
    w = put_text(w, v[V_NAME].p, v[V_NAME].n);
  }
  size_t name_len = v[V_NAME].p ? (size_t)(w - name) : 0;
  if (s->kind == PX_SPAN_SERVER)
    LIT(w, "\",\"kind\":2,\"attributes\":[");
  else
    LIT(w, "\",\"kind\":3,\"attributes\":[");
  if (fixed) {
    memcpy(w, fixed->text, fixed->len);
    w += fixed->len;
  } else {
    char *at = w;
    w = put_fixed(w, s, f);
    fixed_keep(s, fk, at, (size_t)(w - at));
  }
  if (v[V_REQ].p) {
    LIT(w, ",{\"key\":\"gen_ai.request.model\",\"value\":{\"stringValue\":\"");
    if (v[V_REQ].p == v[V_NAME].p) { /* the name's model: escaped there */
      memcpy(w, name, name_len);
      w += name_len;
    } else {
      w = put_text(w, v[V_REQ].p, v[V_REQ].n);
    }
    LIT(w, "\"}}");
  }
  if (s->max_tokens >= 0) ATTR_INT(w, "gen_ai.request.max_tokens", s->max_tokens);
  if (v[V_RESP].p) ATTR_STR(w, "gen_ai.response.model", v[V_RESP].p, v[V_RESP].n);
  if (v[V_FIN].p) {
    LIT(w,
        ",{\"key\":\"gen_ai.response.finish_reasons\",\"value\":{\"arrayValue\":{"
        "\"values\":[{\"stringValue\":\"");
    w = put_text(w, v[V_FIN].p, v[V_FIN].n);
    LIT(w, "\"}]}}}");
  }
  if (s->status > 0) ATTR_INT(w, "http.response.status_code", s->status);
  if (s->attempt) ATTR_INT(w, "proxai.attempt", s->attempt);
  return w;
}

/* The answer's run of a tail (the response id and the token counts) as a
 * CLIENT span last wrote it: a request's SERVER span that follows its last
 * attempt's says the same as a rule (a pass-through answer), and copies it.
 * Where it lies in the batch (while the batch is the one it was written
 * into: batch_epoch) and what it was written from: the counts, and the id
 * by its bytes, which the run holds as they are (written without an escape:
 * else none is kept). */
#define RID_AT \
  (sizeof(",{\"key\":\"gen_ai.response.id\",\"value\":{\"stringValue\":\"") - 1)
static struct {
  size_t at, len; /* len 0: none kept */
  uint64_t epoch;
  int64_t in, out;
  size_t idn; /* the id's length (0: none) */
} run;
static uint64_t batch_epoch; /* a batch taken or reset: another one */

/* the kept run, when s's would be the same */
ENC const char *run_find(const px_span_t *s, const sv_t *v) {
  if (run.len == 0 || run.epoch != batch_epoch || run.idn != v[V_RID].n ||
      run.in != s->input_tokens || run.out != s->output_tokens)
    return NULL;
  const char *r = batch.data + run.at;
  return run.idn == 0 || px_mem_eq(r + RID_AT, v[V_RID].p, run.idn) ? r : NULL;
}

/* Writes the tail of s at w; returns the span's end. */
ENC char *put_tail(char *w, const px_trace_ctx_t *t, const px_span_t *s, const sv_t *v) {
  const char *kept = s->kind == PX_SPAN_SERVER ? run_find(s, v) : NULL;
  if (kept) {
    memcpy(w, kept, run.len);
    w += run.len;
  } else {
    char *r = w;
    if (v[V_RID].p) ATTR_STR(w, "gen_ai.response.id", v[V_RID].p, v[V_RID].n);
    /* the id written as it is: its attribute is no longer than its bytes */
    int plain = (size_t)(w - r) == (v[V_RID].p ? RID_AT + v[V_RID].n + 3 : 0);
    if (s->input_tokens >= 0) ATTR_INT(w, "gen_ai.usage.input_tokens", s->input_tokens);
    if (s->output_tokens >= 0)
      ATTR_INT(w, "gen_ai.usage.output_tokens", s->output_tokens);
    run.len = 0;
    if (s->kind == PX_SPAN_CLIENT && plain) {
      run.at = (size_t)(r - batch.data);
      run.len = (size_t)(w - r);
      run.epoch = batch_epoch;
      run.in = s->input_tokens;
      run.out = s->output_tokens;
      run.idn = v[V_RID].n;
    }
  }
  if (v[V_ERR].p) ATTR_STR(w, "error.type", v[V_ERR].p, v[V_ERR].n);
  if (v[V_USER].p) ATTR_STR(w, "proxai.user", v[V_USER].p, v[V_USER].n);
  if (s->lossy && *s->lossy) w = attr_lossy(w, s->lossy);
  if (s->cost_nano >= 0) { /* the exact decimal, as the access log's cost_usd */
    char usd[32];
    const char *u = px_usd_str(s->cost_nano, usd, sizeof(usd));
    size_t ul = strlen(u);
    LIT(w, ",{\"key\":\"proxai.cost_usd\",\"value\":{\"doubleValue\":");
    memcpy(w, u, ul);
    w += ul;
    LIT(w, "}}");
  }
  LIT(w, "],\"startTimeUnixNano\":\"");
  w = put_time(w, s->start);
  LIT(w, "\",\"endTimeUnixNano\":\"");
  w = put_time(w, s->end);
  *w++ = '"';
  if (t->tracestate.len && t->tracestate.len <= PX_TRACESTATE_MAX) {
    LIT(w, ",\"traceState\":\"");
    w = put_text(w, t->tracestate.ptr, t->tracestate.len);
    *w++ = '"';
  }
  if (s->first_token) {
    LIT(w, ",\"events\":[{\"timeUnixNano\":\"");
    w = put_time(w, s->first_token);
    LIT(w, "\",\"name\":\"gen_ai.first_token\"}]");
  }
  /* status: ERROR with error.type, never a message (it could carry the
   * upstream's error text) */
  if (v[V_ERR].p) LIT(w, ",\"status\":{\"code\":2}");
  *w++ = '}';
  return w;
}

static inline int batch_ready(void) {
  return nspans >= READY_SPANS || batch.len >= READY_BYTES;
}

void px_trace_emit(const px_trace_ctx_t *t, const px_span_t *s) {
  if (!t->sampled) return;
  if (batch.cap == 0) {
    px_buf_init(&batch, BATCH_MAX);
    px_buf_reserve(&batch, BATCH_START); /* else it grows as it can */
  }
  const char *fk[4];
  fixed_of(s, fk);
  sv_t name = sv(s->name_model);
  const sv_t v[V_N] = {
      [V_NAME] = name,
      [V_REQ] = s->request_model == s->name_model ? name : sv(s->request_model),
      [V_RESP] = str_sv(s->response_model),
      [V_RID] = str_sv(s->response_id),
      [V_FIN] = str_sv(s->finish_reason),
      [V_USER] = sv(s->user),
      [V_ERR] = sv(s->error_type)};
  const head_t *h = head_find(s, fk, v);
  const frag_t *fixed = NULL;
  sv_t f[4];
  size_t lossy = s->lossy ? strlen(s->lossy) : 0;
  /* the tail's strings, escaped at worst */
  size_t strings = t->tracestate.len + 2 * lossy + v[V_RID].n + v[V_USER].n + v[V_ERR].n;
  size_t head = 0; /* the kept head's length */
  if (h) {
    head = h->len;
  } else {
    fixed = fixed_find(s, fk, f);
    strings +=
        v[V_NAME].n + v[V_REQ].n + v[V_RESP].n + v[V_FIN].n + (fixed ? fixed->len : 0);
    strings += 2 * f[0].n; /* the operation: in the name and an attribute */
    if (!fixed) strings += f[1].n + f[2].n + f[3].n;
  }
  size_t bound = SPAN_FIXED + head + ESC_MAX * strings + 32 * lossy;
  if (nspans >= BATCH_SPANS_MAX || (nspans == 0 && put_prefix(&batch) < 0) ||
      (batch.size - batch.len < bound && px_buf_reserve(&batch, bound) < 0)) {
    if (nspans == 0) batch.len = 0;
    px_trace_dropped(1, "queue_full");
    return;
  }
  char *w = batch.data + batch.len;
  if (nspans) *w++ = ',';
  if (h) { /* the kept head, this span's ids in place */
    memcpy(w, h->text, head);
    memcpy(w + AT_TRACE_ID, t->trace_hex, 32);
    memcpy(w + AT_SPAN_ID, s->id, 16);
    if (s->parent) memcpy(w + AT_PARENT, s->parent, 16);
    w += head;
  } else {
    char *at = w;
    w = put_head(w, t, s, v, fixed, fk, f);
    head_keep(s, fk, v, at, (size_t)(w - at));
  }
  w = put_tail(w, t, s, v);
  batch.len = (size_t)(w - batch.data);
  nspans++;
  if (!ready_signalled && ready_cb && batch_ready()) {
    ready_signalled = 1;
    ready_cb();
  }
}

size_t px_trace_pending(void) {
  return nspans;
}

int px_trace_ready(void) {
  return batch_ready();
}

size_t px_trace_take(px_buf_t *body) {
  px_buf_reset(body);
  if (nspans == 0) return 0;
  if (px_buf_append(&batch, "]}]}]}", 6) <
      0) { /* no room for the end: the batch is lost */
    px_trace_dropped(nspans, "queue_full");
    px_trace_reset();
    return 0;
  }
  px_buf_t tmp = *body;
  batch_epoch++; /* the kept run is in the batch taken */
  *body = batch;
  batch = tmp; /* the caller's old buffer becomes the next batch */
  batch.cap = BATCH_MAX;
  px_buf_reset(&batch);
  if (batch.size < BATCH_START) px_buf_reserve(&batch, BATCH_START);
  size_t n = nspans;
  nspans = 0;
  ready_signalled = 0;
  return n;
}

void px_trace_dropped(size_t n, const char *reason) {
  if (n) px_metrics_trace_spans(reason, n);
}

void px_trace_on_ready(void (*cb)(void)) {
  ready_cb = cb;
}

void px_trace_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  wall_offset = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - uv_hrtime();
}

void px_trace_reset(void) {
  frags_drop();
  batch_epoch++;
  px_buf_free(&batch);
  memset(&batch, 0, sizeof(batch));
  nspans = 0;
  ready_signalled = 0;
}
