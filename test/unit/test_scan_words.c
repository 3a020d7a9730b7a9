/* test_scan_words.c - the word-at-a-time paths of the per-event code:
 * px_json_string (plain ASCII runs checked 8 bytes at a time, inline in
 * json.h), px_buf_json_escape (runs with nothing to escape copied 8 at a
 * time) and px_buf_i64 (the integer writer of the stream encoders). Every
 * special byte is placed at every offset of a word and at the ends, and the
 * results are compared with byte-at-a-time references. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "proxai/buf.h"
#include "proxai/json.h"

/* byte-at-a-time reference of px_json_string for strings without escapes
 * or non-ASCII: index of the closing quote, or -1 */
static long ref_plain_end(const unsigned char *p, size_t n, size_t i) {
  for (; i < n; i++) {
    if (p[i] == '"') return (long)i;
    if (p[i] < 0x20 || p[i] == '\\' || p[i] >= 0x80) return -2; /* not plain */
  }
  return -1;
}

static void test_string_offsets(void) {
  unsigned char buf[64];
  /* a bad byte (control, DEL is fine, 0x80+ invalid alone) or the quote at
   * every position of a 40-byte run */
  const unsigned char specials[] = {'"', 0x01, 0x1f, 0x80, 0xff, '\\'};
  for (size_t s = 0; s < sizeof(specials); s++) {
    for (size_t pos = 0; pos < 40; pos++) {
      for (size_t len = pos + 1; len <= 41; len += 7) {
        memset(buf, 'a', sizeof(buf));
        buf[pos] = specials[s];
        size_t end = 0;
        int esc = -1;
        int rc = px_json_string(buf, len, 0, &end, &esc);
        if (specials[s] == '"') {
          CHECK(rc == 0 && end == pos && esc == 0);
        } else if (specials[s] == '\\') {
          /* "\a" is not a valid escape */
          CHECK(rc == -1);
        } else {
          CHECK(rc == -1);
        }
      }
    }
  }
  /* plain runs of every length up to the quote, at every start */
  for (size_t start = 0; start < 9; start++) {
    for (size_t len = 0; len < 30; len++) {
      memset(buf, 'x', sizeof(buf));
      buf[start + len] = '"';
      size_t end = 0;
      int esc = -1;
      CHECK(px_json_string(buf, start + len + 1, start, &end, &esc) == 0);
      CHECK(end == start + len && esc == 0);
      CHECK(ref_plain_end(buf, start + len + 1, start) == (long)(start + len));
      /* unterminated: the quote cut off */
      CHECK(px_json_string(buf, start + len, start, &end, &esc) == -1);
    }
  }
  /* escapes and UTF-8 after a long plain run still go the full way */
  const char *ok = "0123456789abcdef\\n\\u00e9\xc3\xa9 tail\"";
  size_t end = 0;
  int esc = 0;
  CHECK(px_json_string((const unsigned char *)ok, strlen(ok), 0, &end, &esc) == 0);
  CHECK(end == strlen(ok) - 1 && esc == 1);
  const char *bad = "0123456789abcdef\xc3(\"";
  CHECK(px_json_string((const unsigned char *)bad, strlen(bad), 0, &end, &esc) == -1);
}

/* byte-at-a-time reference of the JSON escaper (what it writes is valid
 * UTF-8: a byte that starts no valid sequence is U+FFFD) */
static void ref_escape(px_buf_t *b, const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char t[8];
    unsigned c = s[i];
    if (c == '"') px_buf_puts(b, "\\\"");
    else if (c == '\\') px_buf_puts(b, "\\\\");
    else if (c == '\n') px_buf_puts(b, "\\n");
    else if (c == '\r') px_buf_puts(b, "\\r");
    else if (c == '\t') px_buf_puts(b, "\\t");
    else if (c == '\b') px_buf_puts(b, "\\b");
    else if (c == '\f') px_buf_puts(b, "\\f");
    else if (c < 0x20) {
      snprintf(t, sizeof(t), "\\u%04x", c);
      px_buf_puts(b, t);
    } else if (c >= 0x80) {
      size_t l = px_utf8_seq(s + i, n - i);
      if (l == 0)
        px_buf_puts(b, "\xef\xbf\xbd");
      else
        px_buf_append(b, &s[i], l), i += l - 1;
    } else {
      px_buf_append(b, &s[i], 1);
    }
  }
}

static void test_escape_offsets(void) {
  unsigned char in[48];
  px_buf_t a, r;
  px_buf_init(&a, 1 << 16);
  px_buf_init(&r, 1 << 16);
  for (unsigned c = 0; c < 256; c++) {
    for (size_t pos = 0; pos < 40; pos++) {
      for (size_t len = pos + 1; len <= 41; len += 5) {
        memset(in, 'q', sizeof(in));
        in[pos] = (unsigned char)c;
        if (pos + 9 < len) in[pos + 9] = '"'; /* a second special in the next word */
        a.len = r.len = 0;
        CHECK(px_buf_json_escape(&a, (const char *)in, len) == 0);
        ref_escape(&r, in, len);
        CHECK(a.len == r.len && memcmp(a.data, r.data, a.len) == 0);
      }
    }
  }
  px_buf_free(&a);
  px_buf_free(&r);
}

static void test_i64(void) {
  const long long v[] = {0, 1, -1, 9, 10, 99, 100, 1234567890123LL, LLONG_MAX, LLONG_MIN};
  px_buf_t b;
  px_buf_init(&b, 1024);
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    char want[32];
    snprintf(want, sizeof(want), "%lld", v[i]);
    b.len = 0;
    CHECK(px_buf_i64(&b, v[i]) == 0);
    CHECK(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
  }
  /* the cap holds */
  px_buf_t s;
  px_buf_init(&s, 3);
  CHECK(px_buf_i64(&s, 1234) == PX_ETOOBIG && s.len == 0);
  CHECK(px_buf_i64(&s, -12) == 0 && s.len == 3);
  px_buf_free(&s);
  px_buf_free(&b);
}

static void test_utf8_chars(void) {
  /* every byte value at every offset of a 20-byte run */
  unsigned char in[24];
  for (unsigned c = 0; c < 256; c++) {
    for (size_t pos = 0; pos < 20; pos++) {
      memset(in, 'a', sizeof(in));
      in[pos] = (unsigned char)c;
      in[(pos + 3) % 20] = 0xA9; /* a continuation byte elsewhere */
      size_t want = 0;
      for (size_t i = 0; i < 20; i++) want += (in[i] & 0xC0) != 0x80;
      CHECK(px_utf8_chars((const char *)in, 20) == want);
    }
  }
  CHECK(px_utf8_chars("h\xc3\xa9llo w\xc3\xb6rld \xf0\x9f\x98\x80!", 19) == 14);
}

int main(void) {
  test_utf8_chars();
  test_string_offsets();
  test_escape_offsets();
  test_i64();
  return check_report("scan_words");
}
