/* fuzz_jdoc.c - the document reader and writer (px_jdoc_load, px_jdoc_dump)
 * against jansson's: for every input,
 *   px_jdoc_load == json_loadb (flags 0 and JSON_DECODE_ANY): both refuse
 *     with the same error text, or both read documents json_equal and
 *     written the same;
 *   px_jdoc_dump == json_dumps (JSON_COMPACT, with and without
 *     JSON_ENCODE_ANY) byte for byte, and px_jdoc_dump_buf appends the
 *     same, of the document read and of the input
 *     taken as one string's bytes (control characters, NUL, invalid UTF-8:
 *     jansson refuses to write it, so must the writer);
 *   the stream codecs' checked views (fastir.h px_jv_*) read what jansson
 *     reads (nesting within PX_JSON_MAX_DEPTH, no NUL after a token: the
 *     one reader's rules): px_jv_parse takes what json_loadb (flags 0)
 *     takes, px_fb_jdump writes json_dumps' bytes, and px_jv_get (and
 *     px_jv_fields, in one walk) finds each of the object's members as
 *     json_object_get does. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"

#define CHECK(c)                                     \
  do {                                               \
    if (!(c)) {                                      \
      fprintf(stderr, "fuzz_jdoc: %s failed\n", #c); \
      abort();                                       \
    }                                                \
  } while (0)

static void same_dump(const json_t *j, size_t flags) {
  char *a = px_jdoc_dump(j, flags), *b = json_dumps(j, flags);
  CHECK((a == NULL) == (b == NULL));
  if (a != NULL) {
    if (strcmp(a, b) != 0) fprintf(stderr, "fuzz_jdoc: dumps differ:\n%s\n%s\n", a, b);
    CHECK(strcmp(a, b) == 0);
  }
  /* appended to a buffer: the same bytes after what it held */
  if (flags == JSON_COMPACT) {
    px_buf_t o;
    px_buf_init(&o, SIZE_MAX / 2);
    CHECK(px_buf_append(&o, "x", 1) == 0);
    int rc = px_jdoc_dump_buf(j, &o);
    CHECK((rc == 0) == (b != NULL));
    CHECK(rc == 0 ? o.len == strlen(b) + 1 && memcmp(o.data + 1, b, o.len - 1) == 0
                  : o.len == 1);
    px_buf_free(&o);
  }
  free(a);
  free(b);
}

static void same_load(const char *p, size_t n, size_t flags) {
  json_error_t e1, e2;
  json_t *a = px_jdoc_load(p, n, flags, &e1), *b = json_loadb(p, n, flags, &e2);
  CHECK((a == NULL) == (b == NULL));
  if (a == NULL) {
    CHECK(strcmp(e1.text, e2.text) == 0 && e1.position == e2.position);
    return;
  }
  CHECK(json_equal(a, b));
  char *da = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
  char *db = json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY);
  CHECK(da != NULL && db != NULL && strcmp(da, db) == 0); /* member order too */
  free(da);
  free(db);
  same_dump(a, JSON_COMPACT);
  same_dump(a, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(a);
  json_decref(b);
}

/* nesting of a text jansson read (the views' limit is the reader's) */
static int depth_of(const json_t *j) {
  int d = 0, k;
  const char *key;
  json_t *v;
  size_t i;
  if (json_is_object(j)) {
    json_object_foreach((json_t *)j, key, v) if ((k = depth_of(v)) > d) d = k;
    return d + 1;
  }
  if (json_is_array(j)) {
    json_array_foreach(j, i, v) if ((k = depth_of(v)) > d) d = k;
    return d + 1;
  }
  return 0;
}

static void same_view(const char *p, size_t n) {
  json_t *j = json_loadb(p, n, 0, NULL);
  px_fv_t v;
  int rc = px_jv_parse(p, n, &v);
  if (j == NULL || depth_of(j) > PX_JSON_MAX_DEPTH || memchr(p, 0, n) != NULL) {
    CHECK(j != NULL || rc < 0);
    json_decref(j);
    return;
  }
  CHECK(rc == 0);
  char *d = json_dumps(j, JSON_COMPACT);
  px_buf_t o;
  px_buf_init(&o, SIZE_MAX / 2);
  CHECK(px_fb_jdump(&o, &v) == 0);
  if (d == NULL || o.len != strlen(d) || memcmp(o.data, d, o.len) != 0)
    fprintf(stderr, "fuzz_jdoc: view dump differs:\n%s\n%.*s\n", d ? d : "(null)",
            (int)o.len, o.data);
  CHECK(d != NULL && o.len == strlen(d) && memcmp(o.data, d, o.len) == 0);
  const char *key;
  json_t *m;
  json_object_foreach(j, key, m) {
    px_fv_t f;
    CHECK(px_jv_get(&v, key, &f) == 1);
    char *md = json_dumps(m, JSON_COMPACT | JSON_ENCODE_ANY);
    px_buf_reset(&o);
    CHECK(md != NULL && px_fb_jdump(&o, &f) == 0 && o.len == strlen(md) &&
          memcmp(o.data, md, o.len) == 0);
    free(md);
  }
  /* px_jv_fields reads what px_jv_get reads, in one walk */
  px_fkey_t keys[32];
  px_fv_t got[32], one;
  int nk = 0;
  json_object_foreach(j, key, m) {
    if (nk == 32) break;
    keys[nk].s = key;
    keys[nk++].n = strlen(key);
  }
  unsigned found = px_jv_fields(&v, keys, nk, got);
  for (int k = 0; k < nk; k++) {
    CHECK(px_jv_get(&v, keys[k].s, &one) == 1 && (found >> k & 1) &&
          got[k].raw.ptr == one.raw.ptr && got[k].raw.len == one.raw.len);
  }
  px_fv_t none;
  CHECK(px_jv_get(&v, "\001absent", &none) == 0 && none.raw.ptr == NULL);
  px_buf_free(&o);
  free(d);
  json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data;
  same_view(p, size);
  same_load(p, size, 0);
  same_load(p, size, JSON_DECODE_ANY);
  json_t *s = json_stringn_nocheck(p, size); /* any bytes: the writer judges */
  json_t *a = json_pack("[o,{s:O}]", s, "k", s);
  same_dump(s, JSON_COMPACT | JSON_ENCODE_ANY);
  same_dump(a, JSON_COMPACT);
  json_decref(a);
  return 0;
}
