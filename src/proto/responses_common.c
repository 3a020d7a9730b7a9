/* responses_common.c - what both halves of the OpenAI Responses codec
 * build (responses.c for whole bodies, responses_stream.c for events): item
 * ids, the Response object's skeleton, its usage, the lossy names of output
 * items no other protocol carries. */
#include <stdlib.h>
#include <string.h>

#include "proxai/proto.h"
#include "proxai/protoutil.h"

/* ---------------------------------------------------------------------- */
/* ids                                                                     */

/* snprintf(out, n, "%s%s", a, b), then "_%d" of num when with_num, cut to
 * fit as snprintf cuts: without its format parsing, which showed in a
 * small stream's profile (ids are made for every one) */
static void id_cat(char *out, size_t n, const char *a, const char *b, int with_num,
                   int num) {
  if (n == 0) return;
  size_t k = 0;
  for (; *a && k + 1 < n; a++) out[k++] = *a;
  for (; *b && k + 1 < n; b++) out[k++] = *b;
  if (with_num) {
    char d[16];
    int nd = 0;
    unsigned v = num < 0 ? 0u - (unsigned)num : (unsigned)num;
    do d[nd++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    if (num < 0) d[nd++] = '-';
    if (k + 1 < n) out[k++] = '_';
    while (nd > 0 && k + 1 < n) out[k++] = d[--nd];
  }
  out[k] = 0;
}

/** "resp_" + id unless id already starts with "resp_". */
void px_responses_resp_id(const char *id, char *out, size_t n) {
  const char *pfx = px_id_prefix("resp_", &id);
  id_cat(out, n, pfx, id, 0, 0);
}

/** Base of item ids: the upstream id without a "resp_" prefix. */
static const char *id_base(const char *id) {
  if (id == NULL || *id == 0) return "proxai";
  if (strncmp(id, "resp_", 5) == 0 && id[5] != 0) return id + 5;
  return id;
}

/** Message item id: "msg_" + base (+ "_" + n for the n-th extra message). */
void px_responses_msg_id(const char *id, int nth, char *out, size_t n) {
  const char *b = id_base(id);
  const char *pfx = px_id_prefix("msg_", &b);
  id_cat(out, n, pfx, b, nth != 0, nth);
}

/* Tool call item id: prefix + call id unless it has it already (or prefix +
 * base + output index when the call has no id). */
static void call_item_id(const char *prefix, const char *resp_id, const char *call_id,
                         int oi, char *out, size_t n) {
  if (call_id != NULL && *call_id != 0)
    id_cat(out, n, px_id_prefix(prefix, &call_id), call_id, 0, 0);
  else
    id_cat(out, n, prefix, id_base(resp_id), 1, oi);
}

/** Function call item id: "fc_" + call id (or base + output index). */
void px_responses_fc_id(const char *resp_id, const char *call_id, int oi, char *out,
                        size_t n) {
  call_item_id("fc_", resp_id, call_id, oi, out, n);
}

/** Custom tool call item id: "ctc_" + call id (or base + output index). */
void px_responses_ctc_id(const char *resp_id, const char *call_id, int oi, char *out,
                         size_t n) {
  call_item_id("ctc_", resp_id, call_id, oi, out, n);
}

/** Reasoning item id: the upstream one if given, else "rs_" + base + index. */
void px_responses_rs_id(const char *resp_id, const char *rid, int oi, char *out,
                        size_t n) {
  if (rid != NULL && *rid != 0)
    id_cat(out, n, rid, "", 0, 0);
  else
    id_cat(out, n, "rs_", id_base(resp_id), 1, oi);
}

/* ---------------------------------------------------------------------- */
/* output items and the Response object                                    */

void px_responses_lossy_item(px_lossy_t *l, const char *type) {
  if (strcmp(type, "web_search_call") == 0)
    px_lossy_add(l, "output[].web_search_call");
  else if (strcmp(type, "file_search_call") == 0)
    px_lossy_add(l, "output[].file_search_call");
  else if (strcmp(type, "code_interpreter_call") == 0)
    px_lossy_add(l, "output[].code_interpreter_call");
  else if (strcmp(type, "image_generation_call") == 0)
    px_lossy_add(l, "output[].image_generation_call");
  else if (strcmp(type, "custom_tool_call") == 0)
    px_lossy_add(l, "output[].custom_tool_call");
  else
    px_lossy_add(l, "output[].other");
}

/* A string member value as jansson's dump writes it; <0 on invalid UTF-8. */
static int wstr(px_buf_t *b, const char *s) {
  if (s == NULL) return PX_ENOMEM; /* never a member's value here */
  return px_buf_json_str_as(b, s, strlen(s), PX_ESC_JANSSON) < 0 ? PX_ENOMEM : 0;
}

static int wint(px_buf_t *b, int64_t v) {
  return px_buf_i64(b, (long long)v);
}

/** Usage object of the Responses shape, written into b (the one writer of
 *  the shape: px_responses_usage reads it back for the jansson encoder). */
int px_responses_usage_write(px_buf_t *b, const px_usage_t *u) {
  int64_t in = u->input_tokens < 0 ? 0 : u->input_tokens;
  int64_t out = u->output_tokens < 0 ? 0 : u->output_tokens;
  int64_t cr = u->cache_read_tokens < 0 ? 0 : u->cache_read_tokens;
  int64_t rt = u->reasoning_tokens < 0 ? 0 : u->reasoning_tokens;
  if (px_buf_puts(b, "{\"input_tokens\":") || wint(b, in) ||
      px_buf_puts(b, ",\"input_tokens_details\":{\"cached_tokens\":") || wint(b, cr) ||
      px_buf_puts(b, "},\"output_tokens\":") || wint(b, out) ||
      px_buf_puts(b, ",\"output_tokens_details\":{\"reasoning_tokens\":") ||
      wint(b, rt) || px_buf_puts(b, "},\"total_tokens\":") || wint(b, in + out) ||
      px_buf_puts(b, "}"))
    return PX_ENOMEM;
  return 0;
}

/** The Response object skeleton shared by bodies and stream events, up to
 *  its output array: {"id":...,"model":..,"output":[ */
int px_responses_object_head(px_buf_t *b, const px_tr_ctx_t *ctx, const char *resp_id,
                             int64_t created, const char *status,
                             const char *incomplete_reason) {
  if (px_buf_puts(b, "{\"id\":") || wstr(b, resp_id) ||
      px_buf_puts(b, ",\"object\":\"response\",\"created_at\":") || wint(b, created) ||
      px_buf_puts(b, ",\"status\":") || wstr(b, status) ||
      px_buf_puts(b, ",\"error\":null,\"incomplete_details\":"))
    return PX_ENOMEM;
  if (incomplete_reason != NULL) {
    if (px_buf_puts(b, "{\"reason\":") || wstr(b, incomplete_reason) ||
        px_buf_puts(b, "}"))
      return PX_ENOMEM;
  } else if (px_buf_puts(b, "null")) {
    return PX_ENOMEM;
  }
  if (px_buf_puts(b, ",\"instructions\":null,\"max_output_tokens\":null,\"model\":") ||
      wstr(b, ctx->client_model ? ctx->client_model : "") ||
      px_buf_puts(b, ",\"output\":["))
    return PX_ENOMEM;
  return 0;
}

/** The rest of the skeleton after the output array's items:
 *  ],"parallel_tool_calls":...,"metadata":{} (the object left open). */
int px_responses_object_tail(px_buf_t *b, const px_tr_ctx_t *ctx) {
  if (px_buf_puts(b, "],\"parallel_tool_calls\":true,\"previous_response_id\":"))
    return PX_ENOMEM;
  if (ctx->prev_id != NULL && ctx->prev_id[0] ? wstr(b, ctx->prev_id)
                                              : px_buf_puts(b, "null"))
    return PX_ENOMEM;
  if (px_buf_puts(b,
                  ",\"temperature\":null,\"tool_choice\":\"auto\",\"tools\":[],"
                  "\"top_p\":null") ||
      (ctx->resp_id != NULL && px_buf_puts(b, ",\"store\":true")) ||
      px_buf_puts(b, ",\"metadata\":{}"))
    return PX_ENOMEM;
  return 0;
}
