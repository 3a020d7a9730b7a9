/* util.c - helpers shared by the translators (include/proxai/protoutil.h):
 * the effort/budget table, data URLs, id minting, the OpenAI error object,
 * usage merging. The JSON scanner is in src/json.c. */
#include <stdio.h>
#include <string.h>

#include "proxai/protoutil.h"

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
