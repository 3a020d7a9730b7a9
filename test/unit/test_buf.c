/* test_buf.c - the capped buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/buf.h"

int main(void) {
  px_buf_t b;
  px_buf_init(&b, 10);
  CHECK(px_buf_append(&b, "12345", 5) == 0);
  CHECK(px_buf_append(&b, "67890", 5) == 0);
  CHECK(b.len == 10 && memcmp(b.data, "1234567890", 10) == 0);
  /* over the cap: refused, buffer unchanged */
  CHECK(px_buf_append(&b, "x", 1) == PX_ETOOBIG);
  CHECK(b.len == 10);
  px_buf_consume(&b, 4);
  CHECK(b.len == 6 && memcmp(b.data, "567890", 6) == 0);
  CHECK(px_buf_append(&b, "abcd", 4) == 0);
  px_buf_free(&b);

  px_buf_init(&b, 1 << 20);
  CHECK(px_buf_printf(&b, "%d-%s", 42, "x") == 0);
  CHECK(b.len == 4 && memcmp(b.data, "42-x", 4) == 0);
  /* printf longer than the internal stack buffer */
  char big[2000];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = 0;
  px_buf_reset(&b);
  CHECK(px_buf_printf(&b, "<%s>", big) == 0);
  CHECK(b.len == sizeof(big) + 1 && b.data[0] == '<' && b.data[b.len - 1] == '>');

  /* JSON escaping: quotes, backslash, controls, UTF-8 kept */
  px_buf_reset(&b);
  const char in[] = "a\"b\\c\n\t\x01\xc3\xa9";
  CHECK(px_buf_json_str(&b, in, sizeof(in) - 1) == 0);
  const char want[] = "\"a\\\"b\\\\c\\n\\t\\u0001\xc3\xa9\"";
  CHECK(b.len == sizeof(want) - 1 && memcmp(b.data, want, b.len) == 0);

  size_t n = 0;
  char *p = px_buf_steal(&b, &n);
  CHECK(p != NULL && n == sizeof(want) - 1 && b.data == NULL && b.len == 0);
  free(p);
  px_buf_free(&b);

  /* a cap of zero holds nothing */
  px_buf_init(&b, 0);
  CHECK(px_buf_append(&b, "a", 1) == PX_ETOOBIG);
  CHECK(px_buf_append(&b, "", 0) == 0);
  px_buf_free(&b);
  /* px_mem_eq / px_mem_cpy: every length to 40, each byte differing alone
   * (the inline words overlap: none may be skipped), exactly n bytes
   * written (heap copies: ASan sees a byte read or written past n) */
  for (size_t n = 0; n <= 40; n++) {
    char *a = malloc(n ? n : 1), *c = malloc(n ? n : 1), d[48];
    for (size_t i = 0; i < n; i++) a[i] = c[i] = (char)('a' + i % 26);
    CHECK(px_mem_eq(a, c, n));
    for (size_t i = 0; i < n; i++) {
      c[i] ^= 0x20;
      CHECK(!px_mem_eq(a, c, n) && !px_mem_eq(c, a, n));
      c[i] ^= 0x20;
    }
    memset(d, '#', sizeof(d));
    px_mem_cpy(d + 1, a, n);
    CHECK(d[0] == '#' && memcmp(d + 1, a, n) == 0 && d[n + 1] == '#');
    free(a);
    free(c);
  }
  return check_report("test_buf");
}
