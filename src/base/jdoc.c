/* jdoc.c - jansson documents read and written by the one scanner's rules
 * (include/proxai/jdoc.h). Anything not taken here goes to jansson, so the
 * results are always jansson's. */
#include "proxai/jdoc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/buf.h"
#include "proxai/json.h"

/* ------------------------------------------------------------------------ */
/* Loading                                                                   */

typedef struct ld {
  const unsigned char *p;
  size_t n, i;
  px_buf_t tmp; /* unescaped strings */
} ld_t;

static json_t *ld_value(ld_t *l, int depth);

/* The string whose opening quote is at l->i: its value (unescaped), l->i
 * past the closing quote. */
static int ld_string(ld_t *l, px_str_t *out) {
  size_t e;
  int esc;
  if (px_json_string(l->p, l->n, l->i + 1, &e, &esc) < 0) return -1;
  const char *s = (const char *)l->p + l->i + 1;
  size_t n = e - l->i - 1;
  l->i = e + 1;
  return px_json_unescape(s, n, esc, &l->tmp, out) < 0 ? -1 : 0;
}

static json_t *ld_number(ld_t *l) {
  size_t s = l->i, e = s;
  if (px_json_number((const char *)l->p, l->n, &e) < 0) return NULL;
  l->i = e;
  const unsigned char *p = l->p;
  int real = 0;
  for (size_t k = s; k < e; k++)
    if (p[k] == '.' || p[k] == 'e' || p[k] == 'E') real = 1;
  if (!real) { /* in range: px_json_number checked it */
    int neg = p[s] == '-';
    uint64_t u = 0;
    for (size_t k = s + (size_t)neg; k < e; k++) u = u * 10 + (uint64_t)(p[k] - '0');
    return json_integer(neg ? (json_int_t)(0 - u) : (json_int_t)u);
  }
  char small[64], *t = e - s < sizeof(small) ? small : malloc(e - s + 1);
  if (t == NULL) return NULL;
  memcpy(t, p + s, e - s);
  t[e - s] = 0;
  json_t *v = json_real(strtod(t, NULL));
  if (t != small) free(t);
  return v;
}

static int ld_lit(ld_t *l, const char *lit, size_t n) {
  if (l->n - l->i < n || memcmp(l->p + l->i, lit, n) != 0) return -1;
  l->i += n;
  return 0;
}

static json_t *ld_container(ld_t *l, int depth) {
  int obj = l->p[l->i] == '{';
  unsigned char close = obj ? '}' : ']';
  if (depth >= PX_JSON_MAX_DEPTH) return NULL;
  json_t *c = obj ? json_object() : json_array();
  if (c == NULL) return NULL;
  l->i = px_json_ws(l->p, l->n, l->i + 1);
  if (l->i < l->n && l->p[l->i] == close) {
    l->i++;
    return c;
  }
  for (;;) {
    json_t *v;
    if (obj) {
      px_str_t k;
      if (l->i >= l->n || l->p[l->i] != '"' || ld_string(l, &k) < 0) goto fail;
      /* the key's bytes live in tmp until the value is read: copy them */
      char small[128], *key = k.len < sizeof(small) ? small : malloc(k.len + 1);
      if (key == NULL) goto fail;
      memcpy(key, k.ptr, k.len);
      key[k.len] = 0;
      l->i = px_json_ws(l->p, l->n, l->i);
      if (l->i >= l->n || l->p[l->i] != ':') {
        if (key != small) free(key);
        goto fail;
      }
      l->i = px_json_ws(l->p, l->n, l->i + 1);
      v = ld_value(l, depth + 1);
      /* a repeated key: the last one wins in the first one's place, as
       * json_loadb (the same call) */
      int rc = v == NULL ? -1 : json_object_setn_new_nocheck(c, key, k.len, v);
      if (key != small) free(key);
      if (rc < 0) goto fail;
    } else {
      v = ld_value(l, depth + 1);
      if (v == NULL || json_array_append_new(c, v) < 0) goto fail;
    }
    l->i = px_json_ws(l->p, l->n, l->i);
    if (l->i >= l->n) goto fail;
    if (l->p[l->i] == close) {
      l->i++;
      return c;
    }
    if (l->p[l->i] != ',') goto fail;
    l->i = px_json_ws(l->p, l->n, l->i + 1);
  }
fail:
  json_decref(c);
  return NULL;
}

static json_t *ld_value(ld_t *l, int depth) {
  if (l->i >= l->n) return NULL;
  switch (l->p[l->i]) {
    case '{':
    case '[':
      return ld_container(l, depth);
    case '"': {
      px_str_t s;
      if (ld_string(l, &s) < 0) return NULL;
      return json_stringn_nocheck(s.ptr, s.len); /* UTF-8 checked by the scan */
    }
    case 't':
      return ld_lit(l, "true", 4) < 0 ? NULL : json_true();
    case 'f':
      return ld_lit(l, "false", 5) < 0 ? NULL : json_false();
    case 'n':
      return ld_lit(l, "null", 4) < 0 ? NULL : json_null();
    default:
      if (l->p[l->i] != '-' && (l->p[l->i] < '0' || l->p[l->i] > '9')) return NULL;
      return ld_number(l);
  }
}

json_t *px_jdoc_load(const char *p, size_t n, size_t flags, json_error_t *err) {
  if ((flags & ~(size_t)JSON_DECODE_ANY) == 0 && p != NULL) {
    ld_t l = {(const unsigned char *)p, n, 0, {0}};
    px_buf_init(&l.tmp, n + 1);
    l.i = px_json_ws(l.p, n, 0);
    json_t *v = NULL;
    if (l.i < n && ((flags & JSON_DECODE_ANY) || l.p[l.i] == '{' || l.p[l.i] == '['))
      v = ld_value(&l, 0);
    px_buf_free(&l.tmp);
    if (v != NULL && px_json_ws(l.p, n, l.i) == n) return v;
    json_decref(v);
  }
  return json_loadb(p, n, flags, err); /* jansson's verdict and its error text */
}

json_t *px_jdoc_loads(const char *s, size_t flags, json_error_t *err) {
  if (s == NULL) return json_loads(s, flags, err);
  return px_jdoc_load(s, strlen(s), flags, err);
}

/* ------------------------------------------------------------------------ */
/* Dumping (json_dumps with JSON_COMPACT: no spaces, keys in their order)    */

#define DUMP_MAX_DEPTH 2048

/* a string as jansson writes it (buf.c's one string writer) */
static int dump_string(px_buf_t *b, const char *s, size_t n) {
  return px_buf_json_str_as(b, s, n, PX_ESC_JANSSON) < 0 ? -1 : 0;
}

static int dump_value(px_buf_t *b, const json_t *v, int depth) {
  if (depth > DUMP_MAX_DEPTH) return -1;
  switch (json_typeof(v)) {
    case JSON_OBJECT: {
      if (px_buf_append(b, "{", 1) < 0) return -1;
      int first = 1;
      /* the iteration order is the dump order (insertion) */
      for (void *it = json_object_iter((json_t *)v); it != NULL;
           it = json_object_iter_next((json_t *)v, it)) {
        if (!first && px_buf_append(b, ",", 1) < 0) return -1;
        first = 0;
        if (dump_string(b, json_object_iter_key(it), json_object_iter_key_len(it)) < 0 ||
            px_buf_append(b, ":", 1) < 0 ||
            dump_value(b, json_object_iter_value(it), depth + 1) < 0)
          return -1;
      }
      return px_buf_append(b, "}", 1);
    }
    case JSON_ARRAY: {
      if (px_buf_append(b, "[", 1) < 0) return -1;
      for (size_t k = 0, n = json_array_size(v); k < n; k++)
        if ((k > 0 && px_buf_append(b, ",", 1) < 0) ||
            dump_value(b, json_array_get(v, k), depth + 1) < 0)
          return -1;
      return px_buf_append(b, "]", 1);
    }
    case JSON_STRING:
      return dump_string(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
      return px_buf_i64(b, (long long)json_integer_value(v));
    case JSON_TRUE:
      return px_buf_append(b, "true", 4);
    case JSON_FALSE:
      return px_buf_append(b, "false", 5);
    case JSON_NULL:
      return px_buf_append(b, "null", 4);
    case JSON_REAL: {
      /* jansson's own formatting (precision, ".0", exponent) */
      char *r = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
      int rc = r == NULL ? -1 : px_buf_append(b, r, strlen(r));
      free(r);
      return rc;
    }
  }
  return -1;
}

int px_jdoc_dump_buf(const json_t *v, px_buf_t *out) {
  size_t mark = out->len;
  if (json_is_object(v) || json_is_array(v)) {
    int rc = dump_value(out, v, 0);
    if (rc == 0) return 0;
    out->len = mark;
    if (rc != -1) return rc; /* the buffer's own error */
  }
  /* what the writer does not take: jansson's verdict, written by it */
  char *s = json_dumps(v, JSON_COMPACT);
  if (s == NULL) return PX_EINVAL;
  int rc = px_buf_append(out, s, strlen(s));
  free(s);
  if (rc < 0) out->len = mark;
  return rc;
}

char *px_jdoc_dump(const json_t *v, size_t flags) {
  size_t any = flags & JSON_ENCODE_ANY;
  if (v != NULL && (flags & ~(size_t)JSON_ENCODE_ANY) == JSON_COMPACT &&
      (any || json_is_object(v) || json_is_array(v))) {
    px_buf_t b;
    px_buf_init(&b, SIZE_MAX / 2);
    if (dump_value(&b, v, 0) == 0 && px_buf_append(&b, "", 1) == 0)
      return px_buf_steal(&b, NULL);
    px_buf_free(&b);
  }
  return json_dumps(v, flags); /* jansson's verdict */
}
