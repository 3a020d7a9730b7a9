/* util.c - helpers shared by the translators (include/proxai/protoutil.h):
 * UTF-8 and JSON string syntax, the validating fast JSON scanner of the
 * stream decoders' fast paths, the effort/budget table, data URLs, id
 * minting, the OpenAI error object, usage merging. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/protoutil.h"

/* ------------------------------------------------------------------------ */
/* UTF-8 and JSON string syntax                                             */

size_t px_utf8_seq(const unsigned char *s, size_t n) {
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

size_t px_utf8_chars(const char *s, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
  return c;
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

size_t px_json_ws(const unsigned char *p, size_t n, size_t i) {
  while (i < n && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t')) i++;
  return i;
}

int px_json_string(const unsigned char *p, size_t n, size_t i, size_t *end, int *esc) {
  *esc = 0;
  for (;;) {
    /* plain ASCII run */
    while (i < n && p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"' && p[i] != '\\') i++;
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
    if (i + 1 >= n) return -1;
    c = p[i + 1];
    if (c == 'u') {
      if (i + 6 > n) return -1;
      long v = px_hex4(p + i + 2);
      if (v <= 0) return -1; /* bad hex, or \u0000 (jansson refuses NUL) */
      if (v >= 0xDC00 && v <= 0xDFFF) return -1; /* lone low surrogate */
      if (v >= 0xD800 && v <= 0xDBFF) {
        if (i + 12 > n || p[i + 6] != '\\' || p[i + 7] != 'u') return -1;
        long lo = px_hex4(p + i + 8);
        if (lo < 0xDC00 || lo > 0xDFFF) return -1;
        i += 12;
      } else {
        i += 6;
      }
    } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
               c == 'r' || c == 't') {
      i += 2;
    } else {
      return -1;
    }
  }
  *end = i;
  return 0;
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
    if (p[i] != '\\') {
      o[b->len++] = (char)p[i++];
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

void px_fj_ws(px_fj_t *j) { j->i = px_json_ws(j->p, j->n, j->i); }

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

static int fj_key_is(px_fj_t *j, size_t s, size_t e, const char *k) {
  size_t l = strlen(k);
  return e - s == l && memcmp(j->p + s, k, l) == 0;
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
      if (fj_skip(j, depth + 1) < 0) return -1;
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
/* Mapping tables and small encoders                                        */

const char *px_effort_of_budget(json_int_t b) {
  if (b < 4096) return "low";
  if (b < 16384) return "medium";
  return "high";
}

int px_data_url_split(const char *url, char *mt, size_t mtsz, const char **data) {
  if (strncmp(url, "data:", 5) != 0) return -1;
  const char *semi = strstr(url + 5, ";base64,");
  if (semi == NULL) return -1;
  size_t n = (size_t)(semi - (url + 5));
  if (n == 0 || n >= mtsz) return -1;
  memcpy(mt, url + 5, n);
  mt[n] = 0;
  *data = semi + 8;
  return 0;
}

const char *px_id_prefix(const char *prefix, const char **id) {
  if (*id == NULL || **id == 0) *id = "proxai";
  return strncmp(*id, prefix, strlen(prefix)) == 0 ? "" : prefix;
}

json_t *px_mint_id(const char *prefix, const char *id) {
  const char *pfx = px_id_prefix(prefix, &id);
  return json_sprintf("%s%s", pfx, id);
}

int px_buf_mint_id(px_buf_t *b, const char *prefix, px_str_t id) {
  size_t pl = strlen(prefix);
  int rc = 0;
  if (!(id.len >= pl && memcmp(id.ptr, prefix, pl) == 0)) rc = px_buf_puts(b, prefix);
  if (rc == 0) rc = id.len ? px_buf_json_escape(b, id.ptr, id.len) : px_buf_puts(b, "proxai");
  return rc;
}

int px_openai_error_body(px_buf_t *out, const char *type, const char *message,
                         const char *param) {
  int rc = px_buf_puts(out, "{\"error\":{\"message\":");
  if (rc == 0)
    rc = px_buf_json_str(out, message ? message : "", message ? strlen(message) : 0);
  if (rc == 0) rc = px_buf_puts(out, ",\"type\":");
  if (rc == 0) rc = px_buf_json_str(out, type, strlen(type));
  if (rc == 0) rc = px_buf_puts(out, ",\"param\":");
  if (rc == 0)
    rc = param && *param ? px_buf_json_str(out, param, strlen(param))
                         : px_buf_puts(out, "null");
  if (rc == 0) rc = px_buf_puts(out, ",\"code\":null}}");
  return rc;
}

void px_usage_merge(px_usage_t *d, const px_usage_t *s) {
  if (s->input_tokens >= 0) d->input_tokens = s->input_tokens;
  if (s->output_tokens >= 0) d->output_tokens = s->output_tokens;
  if (s->cache_read_tokens >= 0) d->cache_read_tokens = s->cache_read_tokens;
  if (s->cache_creation_tokens >= 0) d->cache_creation_tokens = s->cache_creation_tokens;
  if (s->reasoning_tokens >= 0) d->reasoning_tokens = s->reasoning_tokens;
}

int px_ir_is_custom_tool(json_t *tools, const char *name) {
  size_t i;
  json_t *t;
  if (name == NULL) return 0;
  json_array_foreach(tools, i, t) {
    const char *n = px_jstr(t, "name"), *ty = px_jstr(t, "type");
    if (n != NULL && strcmp(n, name) == 0) return ty != NULL && strcmp(ty, "custom") == 0;
  }
  return 0;
}

/* ---- the wire pieces the OpenAI protocols share ---- */

const char *const px_openai_forward_headers[] = {"openai-organization", "openai-project",
                                                 "openai-beta", NULL};
const char *const px_openai_tenancy_headers[] = {"openai-organization", "openai-project",
                                                 NULL};

int px_openai_models(px_buf_t *out, const char *const *ids, const char *const *owners,
                     size_t n) {
  int rc = px_buf_puts(out, "{\"object\":\"list\",\"data\":[");
  for (size_t i = 0; i < n && rc == 0; i++) {
    const char *own = owners && owners[i] ? owners[i] : "proxai";
    rc = px_buf_puts(out, i ? ",{\"id\":" : "{\"id\":");
    if (rc == 0) rc = px_buf_json_str(out, ids[i], strlen(ids[i]));
    if (rc == 0) rc = px_buf_puts(out, ",\"object\":\"model\",\"created\":0,\"owned_by\":");
    if (rc == 0) rc = px_buf_json_str(out, own, strlen(own));
    if (rc == 0) rc = px_buf_puts(out, "}");
  }
  if (rc == 0) rc = px_buf_puts(out, "]}");
  return rc;
}

int64_t px_count_input_tokens(json_t *body) {
  return px_jint(body, "input_tokens", -1);
}

/* ------------------------------------------------------------------------ */
/* Tool-call ids toward clients                                              */

void px_idset_free(px_idset_t *s) {
  for (int i = 0; i < s->n; i++) free(s->ids[i]);
  free(s->ids);
  memset(s, 0, sizeof(*s));
}

static int idset_has(const px_idset_t *s, const char *id, size_t len) {
  for (int i = 0; i < s->n; i++)
    if (strlen(s->ids[i]) == len && memcmp(s->ids[i], id, len) == 0) return 1;
  return 0;
}

const char *px_idset_unique(px_idset_t *s, px_str_t id, int nth) {
  char minted[48];
  const char *use = NULL;
  size_t len = id.len;
  if (id.len > 0 && memchr(id.ptr, 0, id.len) == NULL && !idset_has(s, id.ptr, id.len)) {
    use = id.ptr;
  } else {
    /* empty, or the same id as an earlier call of this message: a stable
     * id of our own (deterministic from the call's position) */
    for (int k = 0;; k++) {
      if (k == 0)
        snprintf(minted, sizeof(minted), "call_proxai_%d", nth);
      else
        snprintf(minted, sizeof(minted), "call_proxai_%d_%d", nth, k);
      if (!idset_has(s, minted, strlen(minted))) break;
    }
    use = minted;
    len = strlen(minted);
  }
  if (s->n == s->cap) {
    int nc = s->cap ? s->cap * 2 : 8;
    char **n = realloc(s->ids, sizeof(*n) * (size_t)nc);
    if (n == NULL) return NULL;
    s->ids = n;
    s->cap = nc;
  }
  char *copy = malloc(len + 1);
  if (copy == NULL) return NULL;
  memcpy(copy, use, len);
  copy[len] = 0;
  s->ids[s->n++] = copy;
  return copy;
}

json_t *px_annotation_parse(px_str_t text) {
  if (text.ptr == NULL || text.len == 0) return NULL;
  json_t *a = json_loadb(text.ptr, text.len, 0, NULL);
  if (!json_is_object(a) || px_jstr(a, "type") == NULL) {
    json_decref(a);
    return NULL;
  }
  return a;
}

const char *px_inline_filename(json_t *part) {
  const char *f = px_jstr(part, "filename");
  if (f != NULL && *f != 0) return f;
  const char *mt = px_jstr(part, "media_type");
  if (mt != NULL && strcmp(mt, "text/plain") == 0) return "document.txt";
  return "document.pdf";
}
