/* util.c - helpers shared by the translators (include/proxai/protoutil.h):
 * the effort/budget table, data URLs, id minting, the OpenAI error object,
 * usage merging. The JSON scanner is in src/base/json.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/jdoc.h"
#include "proxai/protoutil.h"

/* ------------------------------------------------------------------------ */
/* Mapping tables and small encoders                                        */

const char *px_effort_of_budget(json_int_t b) {
  if (b < 4096) return "low";
  if (b < 16384) return "medium";
  return "high";
}

const char *px_id_prefix(const char *prefix, const char **id) {
  if (*id == NULL || **id == 0) *id = "proxai";
  return strncmp(*id, prefix, strlen(prefix)) == 0 ? "" : prefix;
}

/* An OpenAI file id reaches only an upstream that can resolve it
 * (PX_CAP_FILE_ID); elsewhere it is the client's error at param. */
int px_file_id_check(const px_tr_ctx_t *ctx, const char *param, px_tr_err_t *err) {
  if (px_tr_out_can(ctx, PX_CAP_FILE_ID)) return 0;
  return px_tr_fail(err, param,
                    "%s: uploaded OpenAI files cannot be sent to %s; send the file data",
                    param, px_proto_get(ctx->out)->name);
}

int px_buf_mint_id(px_buf_t *b, const char *prefix, px_str_t id) {
  size_t pl = strlen(prefix);
  int rc = 0;
  if (!(id.len >= pl && memcmp(id.ptr, prefix, pl) == 0)) rc = px_buf_puts(b, prefix);
  if (rc == 0)
    rc = id.len ? px_buf_json_escape(b, id.ptr, id.len) : px_buf_puts(b, "proxai");
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
  /* OpenAI's over-quota error carries its type as its code too */
  if (rc == 0)
    rc = px_buf_puts(out, strcmp(type, "insufficient_quota") == 0
                              ? ",\"code\":\"insufficient_quota\"}}"
                              : ",\"code\":null}}");
  return rc;
}

void px_usage_merge(px_usage_t *d, const px_usage_t *s) {
  if (s->input_tokens >= 0) d->input_tokens = s->input_tokens;
  if (s->output_tokens >= 0) d->output_tokens = s->output_tokens;
  if (s->cache_read_tokens >= 0) d->cache_read_tokens = s->cache_read_tokens;
  if (s->cache_creation_tokens >= 0) d->cache_creation_tokens = s->cache_creation_tokens;
  if (s->reasoning_tokens >= 0) d->reasoning_tokens = s->reasoning_tokens;
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

int px_count_body(px_buf_t *out, const char *prefix, int64_t n) {
  char num[24];
  snprintf(num, sizeof(num), "%lld", (long long)n);
  int rc = px_buf_puts(out, prefix);
  if (rc == 0) rc = px_buf_puts(out, num);
  if (rc == 0) rc = px_buf_puts(out, "}");
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

/* ------------------------------------------------------------------------ */
/* Opaque reasoning tokens across families                                   */

/* The tag of a token field and the protocol whose wire carries it (each
 * protocol's ops list its own token fields, rtoks); NULL if none does. */
static const char *rtok_home(const char *field, px_proto_t *home) {
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_proto_ops_t *ops = px_proto_get((px_proto_t)p);
    for (size_t i = 0; i < PX_RTOKS && ops->rtoks[i].field; i++)
      if (strcmp(field, ops->rtoks[i].field) == 0) {
        *home = (px_proto_t)p;
        return ops->rtoks[i].tag;
      }
  }
  return NULL;
}

const char *px_rtok_field(px_proto_t p) { return px_proto_get(p)->rtoks[0].field; }

const char *px_rtok_tag(px_proto_t client, const char *field) {
  const char *own = px_rtok_field(client);
  if (own == NULL || field == NULL) return NULL;
  if (strcmp(field, own) == 0) return "";
  px_proto_t home;
  const char *tag = rtok_home(field, &home);
  return tag != NULL && home != client ? tag : NULL; /* NULL: Anthropic's redacted block */
}

const char *px_rtok_stream_tag(px_proto_t client, px_proto_t upstream) {
  const char *f = px_rtok_field(upstream);
  if (px_rtok_field(client) == NULL) return NULL;
  return f != NULL ? px_rtok_tag(client, f) : "";
}

const char *px_rtok_at(size_t k) {
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_proto_ops_t *ops = px_proto_get((px_proto_t)p);
    for (size_t i = 0; i < PX_RTOKS && ops->rtoks[i].field; i++)
      if (k-- == 0) return ops->rtoks[i].field;
  }
  return NULL;
}
