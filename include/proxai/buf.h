/**
 * buf.h - one growable, capped byte buffer and one {ptr,len} view.
 *
 * Every px_buf_t has a cap: growing past it fails with PX_ETOOBIG and leaves
 * the buffer as it was. The owner of a px_buf_t is whoever embeds it; call
 * px_buf_free() to release its storage.
 */
#ifndef PROXAI_BUF_H
#define PROXAI_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/** Negative error codes of our own (errno and UV_E* are negative too). */
enum {
  PX_ETOOBIG = -20001,  /**< a capped buffer would exceed its cap */
  PX_EPROTO = -20002,   /**< peer broke its protocol */
  PX_EINVAL = -20003,   /**< invalid input */
  PX_ENOMEM = -20004,   /**< allocation failed */
};

/** A view on bytes owned elsewhere. */
typedef struct px_str {
  const char *ptr;
  size_t len;
} px_str_t;

/** A header: name and value views. */
typedef struct px_hdr {
  px_str_t name;
  px_str_t value;
} px_hdr_t;

#define PX_STR(lit) ((px_str_t){(lit), sizeof(lit) - 1})
#define PX_STR_NULL ((px_str_t){NULL, 0})

static inline px_str_t px_str(const char *s) {
  return (px_str_t){s, s ? strlen(s) : 0};
}
/**
 * The one header-value rule (SPEC section 10, RFC 9110 5.5): a value may be
 * written into a response header, an upstream header or a URL only when it
 * is VCHAR, obs-text, SP and HTAB: no control character (below 0x20 but
 * HTAB, and DEL). Every place that writes a header checks with this.
 */
static inline int px_header_value_ok(const char *v, size_t n) {
  size_t i = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  /* eight bytes at a time: a word with no byte below 0x20 and no DEL (a
   * flagged word, HTAB included, is looked at byte by byte below) */
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  for (; i + 8 <= n; i += 8) {
    uint64_t w, d;
    memcpy(&w, v + i, 8);
    d = w ^ (ones * 0x7f);
    if ((((w - ones * 0x20) & ~w) | ((d - ones) & ~d)) & high) break;
  }
#endif
  for (; i < n; i++) {
    unsigned char ch = (unsigned char)v[i];
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return 0;
  }
  return 1;
}

/** One UTF-8 sequence at s[0..n), n >= 1: its length (1 for ASCII), or 0 if
 *  invalid (stray continuation byte, overlong, surrogate, above U+10FFFF,
 *  truncated). */
static inline size_t px_utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
      return 0;
    if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
    return 4;
  }
  return 0;
}

/** The length of s[0..n) cut to at most max bytes, never inside a UTF-8
 *  character (for "%.*s" and the like). */
static inline int px_utf8_cut(const char *s, size_t n, size_t max) {
  if (n > max)
    for (n = max; n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80;) n--;
  return (int)n;
}

/** What a Transfer-Encoding field value lists (px_te_scan). */
typedef struct px_te {
  unsigned chunked; /**< "chunked" seen so many times */
  unsigned after;   /**< codings listed after a "chunked" */
  unsigned other;   /**< codings other than chunked */
  unsigned bad;     /**< empty or blank elements, bad characters, parameters */
} px_te_t;

/**
 * Adds one Transfer-Encoding field line to *te (RFC 9112 section 6.1; a
 * list may span several lines). The gateway understands exactly one
 * coding list: "chunked", once, alone.
 */
void px_te_scan(px_te_t *te, const char *v, size_t n);

/** a[0..n) == b[0..n) for short runs (a name, a model): compared inline,
 *  a word at a time (the last one overlapping), no call; nothing is read
 *  past either's n bytes. */
static inline int px_mem_eq(const char *a, const char *b, size_t n) {
  if (n >= 8) {
    uint64_t x, y, diff = 0;
    for (size_t i = 0; i + 8 < n; i += 8) {
      memcpy(&x, a + i, 8);
      memcpy(&y, b + i, 8);
      diff |= x ^ y;
    }
    memcpy(&x, a + n - 8, 8);
    memcpy(&y, b + n - 8, 8);
    return (diff | (x ^ y)) == 0;
  }
  if (n >= 4) {
    uint32_t x, y, z, u;
    memcpy(&x, a, 4);
    memcpy(&y, b, 4);
    memcpy(&z, a + n - 4, 4);
    memcpy(&u, b + n - 4, 4);
    return ((x ^ y) | (z ^ u)) == 0;
  }
  return n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]);
}

/** Copies n bytes from s to d (not overlapping), a short run inline in two
 *  overlapping words, one of a few words sixteen bytes at a time (the last
 *  sixteen overlapping), a longer one by memcpy: a short string's copy
 *  makes no call (its caller keeps no registers for one). */
static inline void px_mem_cpy(char *d, const char *s, size_t n) {
  if (n > 16) {
#if defined(__SSE2__)
    if (n <= 128) {
      for (size_t i = 0; i + 16 < n; i += 16)
        _mm_storeu_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
      _mm_storeu_si128((__m128i *)(d + n - 16),
                       _mm_loadu_si128((const __m128i *)(s + n - 16)));
      return;
    }
#endif
    memcpy(d, s, n);
  } else if (n >= 8) {
    uint64_t x, y;
    memcpy(&x, s, 8);
    memcpy(&y, s + n - 8, 8);
    memcpy(d, &x, 8);
    memcpy(d + n - 8, &y, 8);
  } else if (n >= 4) {
    uint32_t x, y;
    memcpy(&x, s, 4);
    memcpy(&y, s + n - 4, 4);
    memcpy(d, &x, 4);
    memcpy(d + n - 4, &y, 4);
  } else if (n) {
    d[0] = s[0];
    d[n / 2] = s[n / 2];
    d[n - 1] = s[n - 1];
  }
}

static inline int px_str_eq(px_str_t a, const char *lit) {
  size_t n = strlen(lit);
  return a.len == n && memcmp(a.ptr, lit, n) == 0;
}

/** Growable byte buffer with a hard cap. */
typedef struct px_buf {
  char *data;
  size_t len;
  size_t size;  /**< allocated */
  size_t cap;   /**< never grows past this */
} px_buf_t;

/** Initialise an empty buffer that may grow up to cap bytes. */
void px_buf_init(px_buf_t *b, size_t cap);
/** Release storage; the buffer is empty and reusable afterwards. */
void px_buf_free(px_buf_t *b);
/** Make room for n more bytes; 0 or PX_ETOOBIG / PX_ENOMEM. */
int px_buf_reserve(px_buf_t *b, size_t n);
/** px_buf_append when the bytes do not fit in the storage there is. */
int px_buf_append_grow(px_buf_t *b, const void *p, size_t n);
/** Append bytes; 0 or PX_ETOOBIG / PX_ENOMEM (buffer unchanged on failure).
 *  Inline: most appends fit in the room there is, and a call per append
 *  showed in the per-request profile. */
static inline int px_buf_append(px_buf_t *b, const void *p, size_t n) {
  if (n > b->size - b->len) return px_buf_append_grow(b, p, n);
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}
static inline int px_buf_puts(px_buf_t *b, const char *s) {
  return px_buf_append(b, s, strlen(s));
}
/** printf-style append. */
int px_buf_printf(px_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** Append v in decimal (no printf). */
int px_buf_i64(px_buf_t *b, long long v);
/** Append s as the body of a JSON string (escaped, without quotes). */
int px_buf_json_escape(px_buf_t *b, const char *s, size_t n);
/** px_buf_json_escape as jansson's json_dumps writes strings: \u00XX in
 *  capitals, and -1 on invalid UTF-8 (jansson refuses the document). */
#define PX_ESC_JANSSON 1
int px_buf_json_escape_as(px_buf_t *b, const char *s, size_t n, int how);
/** Append s as a quoted JSON string. */
int px_buf_json_str(px_buf_t *b, const char *s, size_t n);
/** px_buf_json_str with px_buf_json_escape_as's how (PX_ESC_JANSSON). */
int px_buf_json_str_as(px_buf_t *b, const char *s, size_t n, int how);
/** Drop the first n bytes. */
void px_buf_consume(px_buf_t *b, size_t n);
/** Detach the storage (caller frees with free()); buffer becomes empty. */
char *px_buf_steal(px_buf_t *b, size_t *len);
static inline void px_buf_reset(px_buf_t *b) { b->len = 0; }

#endif
