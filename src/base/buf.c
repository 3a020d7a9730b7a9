/* buf.c - growable capped buffer. */
#include "proxai/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void px_buf_init(px_buf_t *b, size_t cap) {
  b->data = NULL;
  b->len = b->size = 0;
  b->cap = cap;
}

void px_buf_free(px_buf_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->size = 0;
}

int px_buf_reserve(px_buf_t *b, size_t n) {
  if (n > b->cap || b->len > b->cap - n) return PX_ETOOBIG;
  size_t need = b->len + n;
  if (need <= b->size) return 0;
  size_t sz = b->size ? b->size : 256;
  while (sz < need) sz = sz > SIZE_MAX / 2 ? need : sz * 2;
  if (sz > b->cap) sz = b->cap;
  char *p = realloc(b->data, sz);
  if (p == NULL) return PX_ENOMEM;
  b->data = p;
  b->size = sz;
  return 0;
}

int px_buf_append_grow(px_buf_t *b, const void *p, size_t n) {
  int rc = px_buf_reserve(b, n);
  if (rc < 0) return rc;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

int px_buf_printf(px_buf_t *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0) return PX_EINVAL;
  if ((size_t)n < sizeof(tmp)) return px_buf_append(b, tmp, (size_t)n);
  int rc = px_buf_reserve(b, (size_t)n + 1);
  if (rc < 0) return rc;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

int px_buf_i64(px_buf_t *b, long long v) {
  char tmp[24];
  char *e = tmp + sizeof(tmp), *w = e;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do {
    *--w = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0) *--w = '-';
  return px_buf_append(b, w, (size_t)(e - w));
}

/* Non-zero when one of the 8 bytes of v is '"', '\\' or below 0x20 (the
 * bytes JSON escapes) or above 0x7f (a UTF-8 sequence to check); the
 * lowest flag is exact. */
static inline uint64_t escapable8(uint64_t v) {
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  uint64_t q = v ^ (ones * '"'), k = v ^ (ones * '\\');
  return (((q - ones) & ~q) | ((k - ones) & ~k) | ((v - ones * 0x20) & ~v) | v) & high;
}

/* The one writer of JSON string bodies: every JSON the gateway writes is
 * valid UTF-8 (SPEC 10), so a byte that does not start a valid UTF-8
 * sequence (an invalid one, or one cut short by a truncation) is written
 * as U+FFFD; as jansson (PX_ESC_JANSSON): \u00XX in capitals, and invalid
 * UTF-8 refused (-1). */
int px_buf_json_escape_as(px_buf_t *b, const char *s, size_t n, int how) {
  const char *hex = how == PX_ESC_JANSSON ? "0123456789ABCDEF" : "0123456789abcdef";
  /* worst case 6 bytes per input byte */
  size_t start = 0;
  for (size_t i = 0; i < n; i++) {
    /* runs without anything to escape: 16 bytes at a time (SSE2; signed
     * bytes: a control and a non-ASCII byte are both below 0x20), then 8 */
#if defined(__SSE2__)
    const __m128i lo = _mm_set1_epi8(0x20), qt = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
    for (; i + 16 <= n; i += 16) {
      __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
      unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(
          _mm_cmplt_epi8(v, lo), _mm_or_si128(_mm_cmpeq_epi8(v, qt), _mm_cmpeq_epi8(v, bs))));
      if (m) {
        i += (size_t)__builtin_ctz(m); /* the 8-byte step below stops there */
        break;
      }
    }
#endif
    while (i + 8 <= n) {
      uint64_t v;
      memcpy(&v, s + i, 8);
      uint64_t m = escapable8(v);
      if (m) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        i += (size_t)__builtin_ctzll(m) >> 3; /* the lowest flag is exact */
#endif
        break;
      }
      i += 8;
    }
    /* the rest of a short run a byte at a time, without the switch */
    while (i < n && (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x80 && s[i] != '"' &&
           s[i] != '\\')
      i++;
    if (i >= n) break;
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[6];
    size_t elen = 2;
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    default:
      if (c < 0x20) {
        u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0';
        u[4] = hex[c >> 4]; u[5] = hex[c & 15];
        esc = u;
        elen = 6;
      } else if (c >= 0x80) {
        size_t l = px_utf8_seq((const unsigned char *)s + i, n - i);
        if (l > 0) {
          i += l - 1;
          continue;
        }
        if (how == PX_ESC_JANSSON) return -1;
        esc = "\xef\xbf\xbd";
        elen = 3;
      }
    }
    if (esc == NULL) continue;
    int rc = px_buf_append(b, s + start, i - start);
    if (rc == 0) rc = px_buf_append(b, esc, elen);
    if (rc < 0) return rc;
    start = i + 1;
  }
  return px_buf_append(b, s + start, n - start);
}

int px_buf_json_escape(px_buf_t *b, const char *s, size_t n) {
  return px_buf_json_escape_as(b, s, n, 0);
}

int px_buf_json_str(px_buf_t *b, const char *s, size_t n) {
  return px_buf_json_str_as(b, s, n, 0);
}

int px_buf_json_str_as(px_buf_t *b, const char *s, size_t n, int how) {
  int rc = px_buf_append(b, "\"", 1);
  if (rc == 0) rc = px_buf_json_escape_as(b, s, n, how);
  if (rc == 0) rc = px_buf_append(b, "\"", 1);
  return rc;
}

void px_buf_consume(px_buf_t *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
}

char *px_buf_steal(px_buf_t *b, size_t *len) {
  char *p = b->data;
  if (len) *len = b->len;
  b->data = NULL;
  b->len = b->size = 0;
  return p;
}

void px_te_scan(px_te_t *te, const char *v, size_t n) {
  const char *p = v, *e = v + n;
  for (;;) {
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    const char *s = p;
    while (p < e && *p != ',') p++;
    const char *t = p;
    while (t > s && (t[-1] == ' ' || t[-1] == '\t')) t--;
    size_t len = (size_t)(t - s);
    int tok = len > 0;
    /* a token (RFC 9110 5.6.2); "gzip;q=1" and the like are not understood */
    for (size_t i = 0; tok && i < len; i++) {
      unsigned char ch = (unsigned char)s[i];
      tok = ch > 0x20 && ch < 0x7f && !strchr("\"(),/:;<=>?@[\\]{}", ch);
    }
    if (!tok)
      te->bad++;
    else if (len == 7 && strncasecmp(s, "chunked", 7) == 0)
      te->chunked++;
    else {
      te->other++;
      if (te->chunked) te->after++;
    }
    if (p >= e) break;
    p++; /* the comma: an element follows, empty or not */
  }
}
