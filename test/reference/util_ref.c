/* util_ref.c - what only the reference's codecs (test/reference/<p>.c)
 * share: IR document helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/json.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "ref.h"

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

/* A tool call's arguments for an upstream that takes only an object: blank
 * is a call without arguments, anything else that is not a JSON object is
 * the client's error, named by the client's own field. */
json_t *px_tool_args_object(const px_tr_ctx_t *ctx, json_t *part, px_tr_err_t *err) {
  const char *args = px_jstr(part, "arguments");
  if (args == NULL || args[strspn(args, " \t\r\n")] == 0) return json_object();
  json_t *v = px_jdoc_loads(args, JSON_DECODE_ANY, NULL);
  if (json_is_object(v)) return v;
  json_decref(v);
  const char *p = px_in_names(ctx)->tool_args_param;
  const char *id = px_jstr(part, "id");
  px_tr_fail(err, p, "%s: arguments of tool call '%s' are not a JSON object", p,
             id != NULL ? id : "");
  return NULL;
}

json_t *px_mint_id(const char *prefix, const char *id) {
  const char *pfx = px_id_prefix(prefix, &id);
  return json_sprintf("%s%s", pfx, id);
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

const char *px_inline_filename(json_t *part) {
  const char *f = px_jstr(part, "filename");
  if (f != NULL && *f != 0) return f;
  const char *mt = px_jstr(part, "media_type");
  if (mt != NULL && strcmp(mt, "text/plain") == 0) return "document.txt";
  return "document.pdf";
}

json_t *px_ir_text(const char *text) {
  if (text == NULL) return NULL;
  json_t *p = json_pack("{s:s}", "type", "text");
  if (p != NULL &&
      json_object_set_new_nocheck(p, "text", json_string_nocheck(text)) < 0) {
    json_decref(p);
    return NULL;
  }
  return p;
}

/* ------------------------------------------------------------------------ */
/* Moved from the gateway's codecs, used only here                           */

int px_ir_reasoning_on(json_t *ir) {
  json_t *r = json_object_get(ir, "reasoning");
  const char *effort = px_jstr(r, "effort");
  return json_is_object(r) && !json_is_false(json_object_get(r, "enabled")) &&
         !(effort != NULL && strcmp(effort, "none") == 0);
}

void px_ir_fit_request(const px_tr_ctx_t *ctx, json_t *ir, px_lossy_t *lossy) {
  /* the hub's one table, applied to the fields the document holds */
  px_freq_t f;
  px_freq_init(&f);
  json_t *pck = json_object_get(ir, "prompt_cache_key"),
         *verb = json_object_get(ir, "verbosity");
  if (pck != NULL) f.prompt_cache_key.p = "";
  if (verb != NULL) f.verbosity.p = "";
  px_fit_fast_request(ctx, &f, lossy);
  if (pck != NULL && f.prompt_cache_key.p == NULL)
    json_object_del(ir, "prompt_cache_key");
  if (verb != NULL && f.verbosity.p == NULL) json_object_del(ir, "verbosity");
}

json_t *px_rtok_out(px_proto_t client, json_t *p) {
  const char *own = px_rtok_field(client);
  if (own == NULL) return NULL;
  const char *f = own;
  for (size_t k = 0; f != NULL; f = px_rtok_at(k++)) {
    const char *v = px_jstr(p, f), *tag = px_rtok_tag(client, f);
    if (v != NULL && *v != 0 && tag != NULL) return json_sprintf("%s%s", tag, v);
  }
  return NULL;
}

int px_rtok_in(px_proto_t client, json_t *p, const char *tok) {
  const char *own = px_rtok_field(client), *field = own;
  if (tok == NULL || *tok == 0 || own == NULL) return 0;
  const char *f;
  for (size_t k = 0; (f = px_rtok_at(k)) != NULL; k++) {
    const char *tag = px_rtok_tag(client, f);
    size_t n = tag != NULL ? strlen(tag) : 0;
    if (n > 0 && strncmp(tok, tag, n) == 0) {
      field = f;
      tok += n;
      break;
    }
  }
  if (*tok == 0) return 0;
  return json_object_set_new(p, field, json_string(tok)) == 0 ? 0 : PX_ENOMEM;
}

/* Read back what a writer of this file wrote (NULL on failure). */
static json_t *wload(px_buf_t *b, int rc) {
  json_t *v = rc == 0 ? px_jdoc_load(b->data, b->len, 0, NULL) : NULL;
  px_buf_free(b);
  return v;
}

/** Usage object of the Responses shape (jansson). */
json_t *px_responses_usage(const px_usage_t *u) {
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  return wload(&b, px_responses_usage_write(&b, u));
}

/** The Response object skeleton as a jansson object (the non-streaming
 *  encoder's), read back from the writers above. */
json_t *px_responses_object(const px_tr_ctx_t *ctx, const char *resp_id, int64_t created,
                            const char *status, const char *incomplete_reason) {
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  int rc = px_responses_object_head(&b, ctx, resp_id, created, status, incomplete_reason);
  if (rc == 0) rc = px_responses_object_tail(&b, ctx);
  if (rc == 0 && px_buf_puts(&b, "}")) rc = PX_ENOMEM;
  return wload(&b, rc);
}

/** Annotations in the Responses shape (Chat nests url_citation). */
json_t *px_responses_annotations(json_t *ann, px_lossy_t *lossy) {
  json_t *out = json_array();
  size_t i;
  json_t *a;
  json_array_foreach(ann, i, a) {
    const char *t = px_jstr(a, "type");
    if (t == NULL) continue;
    json_t *nested = json_object_get(a, t);
    if (strcmp(t, "url_citation") == 0 && json_is_object(nested)) {
      json_t *o = json_deep_copy(nested);
      json_object_set_new(o, "type", json_string("url_citation"));
      json_array_append_new(out, o);
    } else if (strcmp(t, "url_citation") == 0 || strcmp(t, "file_citation") == 0 ||
               strcmp(t, "container_file_citation") == 0 || strcmp(t, "file_path") == 0) {
      json_array_append(out, a);
    } else {
      px_lossy_add(lossy, "output[].content[].annotations");
    }
  }
  return out;
}

/* Flat IR url_citation -> Chat {type, url_citation:{...}}; indexes shifted
 * by the characters of the text parts joined before this one. */
json_t *px_chat_annotations(const px_tr_ctx_t *ctx, json_t *anns, json_int_t shift,
                            px_lossy_t *lossy) {
  json_t *out = json_array();
  size_t i;
  json_t *a;
  json_array_foreach(anns, i, a) {
    const char *t = px_jstr(a, "type");
    if (t == NULL || strcmp(t, "url_citation") != 0 || px_jstr(a, "url") == NULL) {
      px_lossy_add(lossy, px_lossy_annotations(ctx));
      continue;
    }
    json_t *uc = json_object();
    const char *k;
    json_t *x;
    json_object_foreach(a, k, x) {
      if (strcmp(k, "type") == 0) continue;
      if ((strcmp(k, "start_index") == 0 || strcmp(k, "end_index") == 0) &&
          json_is_integer(x))
        json_object_set_new(uc, k, json_integer(json_integer_value(x) + shift));
      else
        json_object_set(uc, k, x);
    }
    json_array_append_new(
        out, json_pack("{s:s, s:o}", "type", "url_citation", "url_citation", uc));
  }
  return out;
}

json_t *px_anthropic_citation(json_t *ann, const char *text, size_t n, int64_t base) {
  const char *t = px_jstr(ann, "type"), *url = px_jstr(ann, "url");
  if (t == NULL || strcmp(t, "url_citation") != 0 || url == NULL || *url == 0)
    return NULL;
  json_int_t si = px_jint(ann, "start_index", 0), ei = px_jint(ann, "end_index", -1);
  si -= base; /* text starts at character base of the block */
  if (ei >= 0) ei = ei > base ? ei - base : 0;
  size_t a = si > 0 ? px_utf8_offset(text, n, si) : 0;
  size_t b = ei >= 0 ? px_utf8_offset(text, n, ei) : n;
  if (b < a) b = a;
  json_t *cited = json_stringn(text + a, b - a);
  if (cited == NULL) cited = json_string(""); /* a span cutting a sequence */
  json_t *title = json_object_get(ann, "title");
  return json_pack("{s:s,s:s,s:O,s:o,s:s}", "type", "web_search_result_location", "url",
                   url, "title", json_is_string(title) ? title : json_null(),
                   "cited_text", cited, "encrypted_index", "");
}

void px_gemini_usage_in(json_t *um, px_usage_t *u) {
  px_gemini_usage_of(
      u, px_jint(um, "promptTokenCount", -1), px_jint(um, "candidatesTokenCount", -1),
      px_jint(um, "thoughtsTokenCount", -1), px_jint(um, "cachedContentTokenCount", -1));
}

json_t *px_gemini_usage_out(const px_usage_t *u) {
  int64_t in = u->input_tokens > 0 ? u->input_tokens : 0;
  int64_t out = u->output_tokens > 0 ? u->output_tokens : 0;
  int64_t th = u->reasoning_tokens > 0 ? u->reasoning_tokens : 0;
  if (th > out) th = out;
  json_t *um = json_pack("{s:I, s:I, s:I}", "promptTokenCount", (json_int_t)in,
                         "candidatesTokenCount", (json_int_t)(out - th),
                         "totalTokenCount", (json_int_t)(in + out));
  if (th > 0) json_object_set_new(um, "thoughtsTokenCount", json_integer(th));
  if (u->cache_read_tokens > 0)
    json_object_set_new(um, "cachedContentTokenCount",
                        json_integer(u->cache_read_tokens));
  return um;
}
