/* util_ref.c - what only the reference's codecs (test/reference/<p>.c)
 * share: IR document helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/jdoc.h"
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
