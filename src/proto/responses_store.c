/* responses_store.c - the Responses side of stored responses (SPEC 14):
 * what the gateway needs to keep a Responses conversation for an upstream
 * that cannot (Anthropic, Chat, Gemini), as text in and text out.
 *
 *   request:  fields (previous_response_id, store) -> input_items (own input,
 *             ids minted) -> expand (stored turns + own input -> one body),
 *             all from the spans the admission's scan found (members)
 *   answer:   final_event (the response object of the terminal event)
 *   GET:      list_items (after, limit, order), deleted
 *
 * A stored turn is its own input items and the response object the client
 * got; a chain is expanded by splicing their item arrays into the client's
 * body, so the expanded body goes through the one translation pipeline as
 * if the client had sent the whole conversation (reasoning items keep their
 * encrypted_content, hence Anthropic and Gemini signatures, as they are).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/jdoc.h"
#include "proxai/json.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"

static int id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-';
}

/* "/v1/responses/{id}" or ".../{id}/input_items" (or without /v1) */
static int store_match(const char *path, size_t len, px_str_t *id, int *items) {
  const char *p = path, *e = path + len;
  if (len >= 3 && memcmp(p, "/v1", 3) == 0) p += 3;
  if ((size_t)(e - p) < 12 || memcmp(p, "/responses/", 11) != 0) return 0;
  p += 11;
  const char *s = memchr(p, '/', (size_t)(e - p));
  *items = 0;
  if (s != NULL) {
    if ((size_t)(e - s) != 12 || memcmp(s, "/input_items", 12) != 0) return 0;
    *items = 1;
  } else {
    s = e;
  }
  if (s == p) return 0;
  *id = (px_str_t){p, (size_t)(s - p)};
  return 1;
}

/* An id as the gateway accepts it: id characters, at most PX_STORED_ID_MAX. */
static int id_ok(const char *s, size_t n) {
  if (n == 0 || n > PX_STORED_ID_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (!id_char(s[i])) return 0;
  return 1;
}

/* The members the admission's scan hands over (px_responses_store.members). */
enum { M_PREV, M_STORE, M_INPUT };

static int store_fields(const char *body, const px_json_req_t *jr, char *prev, size_t cap,
                        int *store) {
  size_t vs = jr->mem_at[M_STORE], vl = jr->mem_len[M_STORE];
  prev[0] = 0;
  *store = !(vl == 5 && memcmp(body + vs, "false", 5) == 0);
  vs = jr->mem_at[M_PREV], vl = jr->mem_len[M_PREV];
  if (vl == 0 || (vl == 4 && memcmp(body + vs, "null", 4) == 0)) return 0;
  /* a string of id characters needs no unescaping: anything else is refused */
  if (vl < 2 || body[vs] != '"' || !id_ok(body + vs + 1, vl - 2) || vl - 2 >= cap)
    return PX_EINVAL;
  memcpy(prev, body + vs + 1, vl - 2);
  prev[vl - 2] = 0;
  return 0;
}

/* The id prefix of an input item of this type (OpenAI's spelling). */
static const char *item_prefix(const char *type) {
  if (type == NULL || strcmp(type, "message") == 0) return "msg_";
  if (strcmp(type, "function_call") == 0) return "fc_";
  if (strcmp(type, "function_call_output") == 0) return "fco_";
  if (strcmp(type, "custom_tool_call") == 0) return "ctc_";
  if (strcmp(type, "custom_tool_call_output") == 0) return "ctco_";
  if (strcmp(type, "reasoning") == 0) return "rs_";
  return "item_";
}

/* The minted id of input item i: prefix by type + the response id's base. */
static int put_item_id(px_buf_t *out, const char *type, size_t tl, const char *base,
                       size_t i) {
  char t[32];
  if (type == NULL) type = "message", tl = 7;
  snprintf(t, sizeof(t), "%.*s", (int)(tl < sizeof(t) - 1 ? tl : sizeof(t) - 1), type);
  return px_buf_printf(out, "\"id\":\"%s%s_%zu\"", item_prefix(t), base, i);
}

/* The common shapes without a document: a string input (one user message,
 * its string token copied), or a list of objects whose member names have
 * no escapes (each without an id gets one after its '{'). 1 when the input
 * is of neither shape (the document path takes it). */
static int input_items_text(const char *in, size_t n, const char *base, px_buf_t *out) {
  const unsigned char *p = (const unsigned char *)in;
  if (p[0] == '"')
    return px_buf_puts(out,
                       "[{\"type\":\"message\",\"role\":\"user\",\"content\":"
                       "[{\"type\":\"input_text\",\"text\":") < 0 ||
                   px_buf_append(out, in, n) < 0 || px_buf_puts(out, "}],") < 0 ||
                   put_item_id(out, "message", 7, base, 0) < 0 ||
                   px_buf_puts(out, "}]") < 0
               ? PX_ETOOBIG
               : 0;
  if (p[0] != '[') return 1;
  size_t i = px_json_ws(p, n, 1), k = 0;
  if (px_buf_append(out, "[", 1) < 0) return PX_ETOOBIG;
  if (i < n && p[i] == ']') return px_buf_append(out, "]", 1) < 0 ? PX_ETOOBIG : 0;
  for (;; k++) {
    if (i >= n || p[i] != '{') return 1;
    size_t start = i, kl, has_id = 0, tl = 0;
    const char *type = NULL;
    i = px_json_ws(p, n, i + 1);
    int more = i < n && p[i] != '}';
    if (!more) i++;
    while (more) {
      size_t ks = i + 1;
      if (px_fj_key(p, n, &i, &kl) < 0) return 1;
      size_t vs = i;
      if (px_fj_pass(p, n, &i, 2) < 0) return 1;
      if (kl == 2 && memcmp(p + ks, "id", 2) == 0) {
        if (i - vs <= 2 || p[vs] != '"')
          return 1; /* an empty or odd id: replaced there */
        has_id = 1;
      }
      if (kl == 4 && memcmp(p + ks, "type", 4) == 0 && p[vs] == '"')
        type = in + vs + 1, tl = i - vs - 2;
      int r = px_fj_next(p, n, &i, '}');
      if (r < 0) return 1;
      more = r == 1;
    }
    if (k > 0 && px_buf_append(out, ",", 1) < 0) return PX_ETOOBIG;
    if (has_id) {
      if (px_buf_append(out, in + start, i - start) < 0) return PX_ETOOBIG;
    } else {
      size_t body_at = px_json_ws(p, n, start + 1);
      int empty = p[body_at] == '}';
      if (px_buf_append(out, "{", 1) < 0 || put_item_id(out, type, tl, base, k) < 0 ||
          (type == NULL && px_buf_puts(out, ",\"type\":\"message\"") < 0) ||
          (!empty && px_buf_append(out, ",", 1) < 0) ||
          px_buf_append(out, in + body_at, i - body_at) < 0)
        return PX_ETOOBIG;
    }
    int r = px_fj_next(p, n, &i, ']');
    if (r < 0) return 1;
    if (r == 0) break;
  }
  return px_buf_append(out, "]", 1) < 0 ? PX_ETOOBIG : 0;
}

static int store_input_items(const char *body, const px_json_req_t *jr,
                             const char *resp_id, px_buf_t *out) {
  size_t vs = jr->mem_at[M_INPUT], vl = jr->mem_len[M_INPUT];
  if (vl == 0) return PX_EINVAL;
  const char *base = strncmp(resp_id, "resp_", 5) == 0 ? resp_id + 5 : resp_id;
  size_t mark = out->len;
  int fast = input_items_text(body + vs, vl, base, out);
  if (fast <= 0) return fast;
  out->len = mark; /* not the common shape: the document path */
  json_t *in = px_jdoc_load(body + vs, vl, JSON_DECODE_ANY, NULL);
  if (in == NULL) return PX_EINVAL;
  if (json_is_string(in)) { /* a string is one user message */
    json_t *m = json_pack("{s:s, s:s, s:[{s:s, s:O}]}", "type", "message", "role", "user",
                          "content", "type", "input_text", "text", in);
    json_decref(in);
    in = json_pack("[o]", m);
  }
  if (!json_is_array(in)) {
    json_decref(in);
    return PX_EINVAL;
  }
  size_t i;
  json_t *it;
  json_array_foreach(in, i, it) {
    if (!json_is_object(it)) continue;
    const char *id = px_jstr(it, "id");
    if (id != NULL && *id != 0) continue;
    char mid[PX_STORED_ID_MAX + 64];
    snprintf(mid, sizeof(mid), "%s%s_%zu", item_prefix(px_jstr(it, "type")), base, i);
    json_object_set_new(it, "id", json_string(mid));
    if (px_jstr(it, "type") == NULL)
      json_object_set_new(it, "type", json_string("message"));
  }
  char *s = px_jdoc_dump(in, JSON_COMPACT);
  json_decref(in);
  if (s == NULL) return PX_ENOMEM;
  int rc = px_buf_puts(out, s);
  free(s);
  return rc < 0 ? PX_ETOOBIG : 0;
}

static int ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The members of a JSON array text, without its brackets (may be empty). */
static px_str_t inner(px_str_t a) {
  const char *p = a.ptr, *e = a.ptr + a.len;
  while (p < e && ws(*p)) p++;
  while (e > p && ws(e[-1])) e--;
  if (e - p < 2 || *p != '[' || e[-1] != ']') return (px_str_t){"", 0};
  p++, e--;
  while (p < e && ws(*p)) p++;
  while (e > p && ws(e[-1])) e--;
  return (px_str_t){p, (size_t)(e - p)};
}

/* Append the members of an array text to the list being written. */
static int add_members(px_buf_t *out, px_str_t arr, int *first) {
  px_str_t m = inner(arr);
  if (m.len == 0) return 0;
  if (!*first && px_buf_append(out, ",", 1) < 0) return PX_ETOOBIG;
  *first = 0;
  return px_buf_append(out, m.ptr, m.len) < 0 ? PX_ETOOBIG : 0;
}

static int store_expand(const char *body, size_t len, const px_json_req_t *jr,
                        const px_stored_turn_t *turns, size_t n, px_buf_t *out,
                        void (*used)(void *arg, size_t t), void *arg) {
  static const char *const P_OUTPUT[] = {"output"};
  size_t is = jr->mem_at[M_INPUT], il = jr->mem_len[M_INPUT];
  size_t ps = jr->mem_at[M_PREV], pl = jr->mem_len[M_PREV];
  if (il == 0 || pl == 0) return PX_EINVAL;
  /* the two spans in body order, each replaced */
  int prev_first = ps < is;
  size_t a_at = prev_first ? ps : is, a_len = prev_first ? pl : il;
  size_t b_at = prev_first ? is : ps, b_len = prev_first ? il : pl;
  int rc = px_buf_append(out, body, a_at) < 0 ? PX_ETOOBIG : 0;
  for (int k = 0; k < 2 && rc == 0; k++) {
    int is_input = (k == 0) != prev_first;
    if (!is_input) {
      rc = px_buf_puts(out, "null") < 0 ? PX_ETOOBIG : 0;
    } else {
      int first = 1;
      rc = px_buf_append(out, "[", 1) < 0 ? PX_ETOOBIG : 0;
      for (size_t t = 0; t < n && rc == 0; t++) {
        size_t os, ol;
        rc = add_members(out, turns[t].input, &first);
        if (rc == 0 && px_json_find(turns[t].response.ptr, turns[t].response.len,
                                    P_OUTPUT, 1, &os, &ol) == PX_JSON_FOUND)
          rc = add_members(out, (px_str_t){turns[t].response.ptr + os, ol}, &first);
        if (used != NULL) used(arg, t);
      }
      if (rc == 0) {
        const char *v = body + is;
        if (*v == '"') { /* a string input is one user message */
          if ((!first && px_buf_append(out, ",", 1) < 0) ||
              px_buf_puts(out, "{\"type\":\"message\",\"role\":\"user\",\"content\":") <
                  0 ||
              px_buf_append(out, v, il) < 0 || px_buf_append(out, "}", 1) < 0)
            rc = PX_ETOOBIG;
        } else {
          rc = add_members(out, (px_str_t){v, il}, &first);
        }
      }
      if (rc == 0 && px_buf_append(out, "]", 1) < 0) rc = PX_ETOOBIG;
    }
    if (rc == 0 && k == 0)
      rc = px_buf_append(out, body + a_at + a_len, b_at - a_at - a_len) < 0 ? PX_ETOOBIG
                                                                            : 0;
  }
  if (rc == 0 && px_buf_append(out, body + b_at + b_len, len - b_at - b_len) < 0)
    rc = PX_ETOOBIG;
  return rc;
}

/* The last event of a client stream: "event: response.completed" (or
 * .incomplete) and its data's response object. */
static int store_final_event(const char *o, size_t len, size_t *at, px_str_t *response) {
  static const char *const P_RESP[] = {"response"};
  if (len < 4 || memcmp(o + len - 2, "\n\n", 2) != 0) return 0;
  size_t s = len - 2;
  while (s > 0 && !(s >= 2 && o[s - 1] == '\n' && o[s - 2] == '\n')) s--;
  const char *ev = o + s, *e = o + len;
  static const char c1[] = "event: response.completed\ndata: ";
  static const char c2[] = "event: response.incomplete\ndata: ";
  size_t hl = 0;
  if ((size_t)(e - ev) > sizeof(c1) && memcmp(ev, c1, sizeof(c1) - 1) == 0)
    hl = sizeof(c1) - 1;
  else if ((size_t)(e - ev) > sizeof(c2) && memcmp(ev, c2, sizeof(c2) - 1) == 0)
    hl = sizeof(c2) - 1;
  if (hl == 0) return 0;
  size_t vs, vl;
  const char *data = ev + hl;
  if (px_json_find(data, (size_t)(e - 2 - data), P_RESP, 1, &vs, &vl) != PX_JSON_FOUND)
    return 0;
  *at = s;
  *response = (px_str_t){data + vs, vl};
  return 1;
}

/* One query parameter's value (raw), or NULL. */
static const char *qparam(const char *q, size_t n, const char *name, size_t *vl) {
  size_t nl = strlen(name);
  for (const char *p = q, *e = q + n; p < e;) {
    const char *amp = memchr(p, '&', (size_t)(e - p));
    const char *end = amp ? amp : e;
    if ((size_t)(end - p) > nl && memcmp(p, name, nl) == 0 && p[nl] == '=') {
      *vl = (size_t)(end - p - nl - 1);
      return p + nl + 1;
    }
    p = end + 1;
  }
  return NULL;
}

static int store_list_items(px_str_t items, const char *query, size_t qlen, px_buf_t *out,
                            char *err, size_t errcap) {
  size_t vl = 0;
  const char *v;
  long limit = 20;
  int asc = 0;
  if (query && qlen && *query == '?') query++, qlen--;
  if ((v = qparam(query, qlen, "limit", &vl)) != NULL) {
    char nb[8] = {0};
    char *end;
    if (vl == 0 || vl >= sizeof(nb)) goto bad_limit;
    memcpy(nb, v, vl);
    limit = strtol(nb, &end, 10);
    if (*end != 0 || limit < 1 || limit > 100) goto bad_limit;
  }
  if ((v = qparam(query, qlen, "order", &vl)) != NULL) {
    if (vl == 3 && memcmp(v, "asc", 3) == 0)
      asc = 1;
    else if (!(vl == 4 && memcmp(v, "desc", 4) == 0)) {
      snprintf(err, errcap, "order must be asc or desc");
      return PX_EINVAL;
    }
  }
  const char *after = qparam(query, qlen, "after", &vl);
  size_t after_len = vl;
  json_t *arr = px_jdoc_load(items.ptr, items.len, 0, NULL);
  if (!json_is_array(arr)) {
    json_decref(arr);
    snprintf(err, errcap, "stored input items are unreadable");
    return PX_EPROTO;
  }
  size_t n = json_array_size(arr), start = 0;
  if (after != NULL) {
    size_t k;
    for (k = 0; k < n; k++) {
      const char *id = px_jstr(json_array_get(arr, asc ? k : n - 1 - k), "id");
      if (id && strlen(id) == after_len && memcmp(id, after, after_len) == 0) break;
    }
    if (k == n) {
      json_decref(arr);
      snprintf(err, errcap, "after: no input item '%.*s' in this response",
               (int)(after_len > 128 ? 128 : after_len), after);
      return PX_EINVAL;
    }
    start = k + 1;
  }
  json_t *data = json_array();
  for (size_t k = start; k < n && json_array_size(data) < (size_t)limit; k++)
    json_array_append(data, json_array_get(arr, asc ? k : n - 1 - k));
  size_t got = json_array_size(data);
  json_t *page = json_pack(
      "{s:s, s:o, s:O, s:O, s:b}", "object", "list", "data", data, "first_id",
      got ? json_object_get(json_array_get(data, 0), "id") : json_null(), "last_id",
      got ? json_object_get(json_array_get(data, got - 1), "id") : json_null(),
      "has_more", start + got < n);
  json_decref(arr);
  char *s = page ? px_jdoc_dump(page, JSON_COMPACT) : NULL;
  json_decref(page);
  if (s == NULL) return PX_ENOMEM;
  int rc = px_buf_puts(out, s);
  free(s);
  return rc;
bad_limit:
  snprintf(err, errcap, "limit must be an integer from 1 to 100");
  return PX_EINVAL;
}

static int store_deleted(px_buf_t *out, const char *id) {
  int rc = px_buf_puts(out, "{\"id\":");
  if (rc == 0) rc = px_buf_json_str(out, id, strlen(id));
  if (rc == 0) rc = px_buf_puts(out, ",\"object\":\"response\",\"deleted\":true}");
  return rc;
}

const px_store_ops_t px_responses_store = {
    .match = store_match,
    .members =
        {[M_PREV] = "previous_response_id", [M_STORE] = "store", [M_INPUT] = "input"},
    .fields = store_fields,
    .input_items = store_input_items,
    .expand = store_expand,
    .final_event = store_final_event,
    .list_items = store_list_items,
    .deleted = store_deleted,
};
