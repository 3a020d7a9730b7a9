/**
 * protoutil.h - helpers shared by the protocol translators (src/proto/)
 * and the hub (src/proto/translate.c); implemented in src/proto/util.c. Internal:
 * nothing outside the translators should need it (the fast-path
 * differential fuzz targets do, for the px_*_sdec_fast switches).
 *
 * Also the cross-file prototypes of the translators (each protocol's stream
 * half and the Responses id/object helpers), declared once here.
 *
 * No I/O, no allocation except where said. The JSON scanner
 * (UTF-8, string syntax, the fast scanner px_fj_*) is in proxai/json.h.
 */
#ifndef PROXAI_PROTOUTIL_H
#define PROXAI_PROTOUTIL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "proxai/buf.h"
#include "proxai/json.h"
#include "proxai/proto.h"

struct px_sse_event;

/* ------------------------------------------------------------------------ */
/* jansson getters                                                          */

/** The string member k of o, or NULL (absent, not a string, o not an object). */
static inline const char *px_jstr(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/** The integer member k of o, or dflt. */
static inline int64_t px_jint(const json_t *o, const char *k, int64_t dflt) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

/* ------------------------------------------------------------------------ */
/* Mapping tables and small encoders                                        */

/** Thinking budget_tokens -> reasoning effort: the inverse of the budget
 *  table low 1024 / medium 8192 / high 24576 (docs). */
const char *px_effort_of_budget(json_int_t budget);

/** The prefix to put before id so that it carries prefix: "" when id
 *  already starts with it, else prefix. A NULL or empty *id becomes
 *  "proxai". */
const char *px_id_prefix(const char *prefix, const char **id);
/** The same minted id written into a JSON string body (escaped, no quotes). */
int px_buf_mint_id(px_buf_t *b, const char *prefix, px_str_t id);

/** The tool-call ids of one message as sent to a client: every call gets a
 *  non-empty id unique in the message (Chat and Anthropic clients key tool
 *  results by it). An upstream id is kept unless it is empty or repeats an
 *  earlier call's; then "call_proxai_<nth>" (nth: the call's position) is
 *  minted, stable for the whole stream. */
typedef struct px_idset {
  char **ids;
  int n, cap;
} px_idset_t;
/** The id to send for the nth call (NUL-terminated, owned by the set until
 *  px_idset_free); NULL on allocation failure. */
const char *px_idset_unique(px_idset_t *s, px_str_t id, int nth);
void px_idset_free(px_idset_t *s);

/** OpenAI error object {"error":{"message","type","param","code":null}}
 *  (Chat and Responses share it). type is written as given (not NULL);
 *  a NULL or empty param is null. */
int px_openai_error_body(px_buf_t *out, const char *type, const char *message,
                         const char *param);

/** The OpenAI protocols' forwarded and tenancy client headers (NULL-ended). */
extern const char *const px_openai_forward_headers[];
extern const char *const px_openai_tenancy_headers[];
/** The OpenAI model list {"object":"list","data":[...]}. */
int px_openai_models(px_buf_t *out, const char *const *ids, const char *const *owners,
                     size_t n);
/** A count answer: prefix (the object up to the number), n, "}". */
int px_count_body(px_buf_t *out, const char *prefix, int64_t n);
/** `input_tokens` of a count answer (Anthropic, Responses); -1 if absent. */
int64_t px_count_input_tokens(json_t *body);
/** A stream dropped a field: recorded for the access log (ctx->dropped). */
void px_dropped(const px_tr_ctx_t *ctx, const char *path);

/** Whether the upstream (out) / client (in) protocol of ctx can hold a
 *  PX_CAP_* capability: what a codec asks instead of which protocol it is. */
int px_tr_out_can(const px_tr_ctx_t *ctx, unsigned cap);
int px_tr_in_can(const px_tr_ctx_t *ctx, unsigned cap);
/** The client's names (what it sent) / the upstream's (what it produced)
 *  for content the other side cannot hold (px_lossy_names_t). */
const px_lossy_names_t *px_in_names(const px_tr_ctx_t *ctx);
const px_lossy_names_t *px_out_names(const px_tr_ctx_t *ctx);

/** 0 when the upstream can resolve an OpenAI file id (PX_CAP_FILE_ID);
 *  otherwise a 400 at param, the client's field. */
int px_file_id_check(const px_tr_ctx_t *ctx, const char *param, px_tr_err_t *err);

/** Usage fields of s that are known (>= 0) overwrite those of d. */
void px_usage_merge(px_usage_t *d, const px_usage_t *s);

/* ------------------------------------------------------------------------ */
/* Opaque reasoning tokens across protocol families (SPEC 5)                 */
/*
 * An IR reasoning part holds its family's opaque token in one field:
 * "signature" / "redacted_data" (Anthropic), "encrypted_content" (OpenAI
 * Responses), "thought_signature" (Gemini). A client of another family
 * carries it in its own token field (Anthropic thinking.signature, Responses
 * reasoning.encrypted_content, Gemini thoughtSignature) behind the family
 * tag, so that the replayed token finds its field again:
 *   "pxa1:sig:" Anthropic signature     "pxa1:red:" Anthropic redacted data
 *   "pxo1:enc:" Responses encrypted_content   "pxg1:sig:" Gemini signature
 * A client's own family travels untagged; Chat clients cannot carry any.
 */

/** The k-th token field over every protocol's rtoks, in table order; NULL
 *  past the last. */
const char *px_rtok_at(size_t k);
/** The IR field of protocol p's own token ("signature", "encrypted_content",
 *  "thought_signature"); NULL for Chat. */
const char *px_rtok_field(px_proto_t p);
/** What goes before the value of IR field `field` in a `client` token: ""
 *  for the client's own field, the family tag for another family's, NULL
 *  when the client cannot carry it (Chat; Anthropic's redacted data toward
 *  an Anthropic client, which has a block of its own). */
const char *px_rtok_tag(px_proto_t client, const char *field);
/** The tag of a stream SIGNATURE delta from an `upstream` upstream, toward
 *  a `client` client (the delta is the upstream family's token); "" for a
 *  Chat upstream, NULL when the client cannot carry it. */
const char *px_rtok_stream_tag(px_proto_t client, px_proto_t upstream);

/* ------------------------------------------------------------------------ */
/* Cross-file prototypes of the translators                                 */

px_sdec_t *px_chat_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg);
int px_chat_sdec_feed(px_sdec_t *d, const struct px_sse_event *sse);
int px_chat_sdec_finish(px_sdec_t *d);
void px_chat_sdec_free(px_sdec_t *d);
px_senc_t *px_chat_senc_new(const px_tr_ctx_t *ctx, px_buf_t *out);
int px_chat_senc_event(px_senc_t *e, const px_ev_t *ev);
void px_chat_senc_free(px_senc_t *e);

px_sdec_t *px_anthropic_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg);
int px_anthropic_sdec_feed(px_sdec_t *d, const struct px_sse_event *sse);
int px_anthropic_sdec_finish(px_sdec_t *d);
void px_anthropic_sdec_free(px_sdec_t *d);
px_senc_t *px_anthropic_senc_new(const px_tr_ctx_t *ctx, px_buf_t *out);
int px_anthropic_senc_event(px_senc_t *e, const px_ev_t *ev);
void px_anthropic_senc_free(px_senc_t *e);

px_sdec_t *px_responses_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg);
int px_responses_sdec_feed(px_sdec_t *d, const struct px_sse_event *sse);
int px_responses_sdec_finish(px_sdec_t *d);
void px_responses_sdec_free(px_sdec_t *d);
px_senc_t *px_responses_senc_new(const px_tr_ctx_t *ctx, px_buf_t *out);
int px_responses_senc_event(px_senc_t *e, const px_ev_t *ev);
void px_responses_senc_free(px_senc_t *e);

px_sdec_t *px_gemini_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg);
int px_gemini_sdec_feed(px_sdec_t *d, const struct px_sse_event *sse);
int px_gemini_sdec_finish(px_sdec_t *d);
void px_gemini_sdec_free(px_sdec_t *d);
px_senc_t *px_gemini_senc_new(const px_tr_ctx_t *ctx, px_buf_t *out);
int px_gemini_senc_event(px_senc_t *e, const px_ev_t *ev);
void px_gemini_senc_free(px_senc_t *e);

/* Gemini mapping helpers (gemini.c), shared with gemini_stream.c */
/** Stop reason of a finishReason (STOP with calls -> tool_use; SAFETY,
 *  RECITATION and the other blocks, and a blocked prompt's blockReason ->
 *  content_filter: the API filtered the output, a refusal toward Anthropic
 *  and Gemini, content_filter toward Chat and Responses); NULL -> NONE. */
px_stop_t px_gemini_stop(const char *finish_reason, int has_tool_call);
/** finishReason of a stop reason; NULL for NONE. */
const char *px_gemini_finish(px_stop_t s);
/** usageMetadata's four counts -> usage (output includes thoughts; cached
 *  is part of input; -1: absent or not an integer). */
void px_gemini_usage_of(px_usage_t *u, int64_t prompt, int64_t candidates,
                        int64_t thoughts, int64_t cached);
/** The id minted for the n-th (0-based) functionCall of a response. */
void px_gemini_call_id(const char *resp_id, int n, char *out, size_t size);
/** {"error":{"code","message","status"}} of an error kind. */
int px_gemini_error_body(px_buf_t *out, px_errkind_t kind, const char *message, size_t len);

/** For the differential tests (fuzz/fuzz_*_fast.c), not part of the protocol
 *  table: turn a decoder's fast path on (1) or off (0), or leave it (<0);
 *  returns how many events the fast path has handled so far. */
long px_anthropic_sdec_fast(px_sdec_t *d, int on);
long px_responses_sdec_fast(px_sdec_t *d, int on);
long px_chat_sdec_fast(px_sdec_t *d, int on);
long px_gemini_sdec_fast(px_sdec_t *d, int on);

/* Responses ids and objects (responses.c), shared with responses_stream.c */
void px_responses_resp_id(const char *id, char *out, size_t n);
/** The Responses side of stored responses (responses_store.c). */
extern const px_store_ops_t px_responses_store;
void px_responses_msg_id(const char *id, int nth, char *out, size_t n);
void px_responses_fc_id(const char *resp_id, const char *call_id, int oi, char *out,
                        size_t n);
void px_responses_ctc_id(const char *resp_id, const char *call_id, int oi, char *out,
                         size_t n);
void px_responses_rs_id(const char *resp_id, const char *rid, int oi, char *out,
                        size_t n);
int px_responses_usage_write(px_buf_t *b, const px_usage_t *u);
int px_responses_object_head(px_buf_t *b, const px_tr_ctx_t *ctx, const char *resp_id,
                             int64_t created, const char *status,
                             const char *incomplete_reason);
int px_responses_object_tail(px_buf_t *b, const px_tr_ctx_t *ctx);
/** Stateless mid-stream error (responses_stream.c): a response.failed event
 *  carrying a failed response object. */
int px_responses_stream_error(px_buf_t *out, px_errkind_t kind, const char *message);

/** The lossy name of a Responses output item the IR cannot hold (hosted
 *  tool calls ...); streams and bodies share it. */
void px_responses_lossy_item(px_lossy_t *l, const char *type);

#endif
