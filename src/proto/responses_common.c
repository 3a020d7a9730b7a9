/* responses_common.c - what both halves of the OpenAI Responses codec
 * build (responses.c for whole bodies, responses_stream.c for events): item
 * ids, the Response object, its usage and annotations, the lossy names of
 * output items no other protocol carries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/proto.h"
#include "proxai/protoutil.h"

/* ---------------------------------------------------------------------- */
/* ids                                                                     */

/** "resp_" + id unless id already starts with "resp_". */
void px_responses_resp_id(const char *id, char *out, size_t n) {
  const char *pfx = px_id_prefix("resp_", &id);
  snprintf(out, n, "%s%s", pfx, id);
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
  if (nth == 0)
    snprintf(out, n, "%s%s", pfx, b);
  else
    snprintf(out, n, "%s%s_%d", pfx, b, nth);
}

/* Tool call item id: prefix + call id unless it has it already (or prefix +
 * base + output index when the call has no id). */
static void call_item_id(const char *prefix, const char *resp_id, const char *call_id,
                         int oi, char *out, size_t n) {
  if (call_id != NULL && *call_id != 0)
    snprintf(out, n, "%s%s", px_id_prefix(prefix, &call_id), call_id);
  else
    snprintf(out, n, "%s%s_%d", prefix, id_base(resp_id), oi);
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
    snprintf(out, n, "%s", rid);
  else
    snprintf(out, n, "rs_%s_%d", id_base(resp_id), oi);
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

/** Usage object of the Responses shape. */
json_t *px_responses_usage(const px_usage_t *u) {
  int64_t in = u->input_tokens < 0 ? 0 : u->input_tokens;
  int64_t out = u->output_tokens < 0 ? 0 : u->output_tokens;
  int64_t cr = u->cache_read_tokens < 0 ? 0 : u->cache_read_tokens;
  int64_t rt = u->reasoning_tokens < 0 ? 0 : u->reasoning_tokens;
  return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)in,
                   "input_tokens_details", "cached_tokens", (json_int_t)cr,
                   "output_tokens", (json_int_t)out, "output_tokens_details",
                   "reasoning_tokens", (json_int_t)rt, "total_tokens",
                   (json_int_t)(in + out));
}

/** The Response object skeleton shared by bodies and stream events. */
json_t *px_responses_object(const px_tr_ctx_t *ctx, const char *resp_id, int64_t created,
                            const char *status, const char *incomplete_reason) {
  json_t *o = json_pack(
      "{s:s, s:s, s:I, s:s, s:n, s:n, s:n, s:n, s:s, s:[], s:b, s:n, s:n, s:s, "
      "s:[], s:n}",
      "id", resp_id, "object", "response", "created_at", (json_int_t)created, "status",
      status, "error", "incomplete_details", "instructions", "max_output_tokens", "model",
      ctx->client_model ? ctx->client_model : "", "output", "parallel_tool_calls", 1,
      "previous_response_id", "temperature", "tool_choice", "auto", "tools", "top_p");
  if (o == NULL) return NULL;
  if (ctx->prev_id != NULL && ctx->prev_id[0])
    json_object_set_new(o, "previous_response_id", json_string(ctx->prev_id));
  if (ctx->resp_id != NULL) json_object_set_new(o, "store", json_true());
  json_object_set_new(o, "metadata", json_object());
  if (incomplete_reason != NULL)
    json_object_set_new(o, "incomplete_details",
                        json_pack("{s:s}", "reason", incomplete_reason));
  return o;
}
