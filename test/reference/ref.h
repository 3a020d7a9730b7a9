/**
 * ref.h - the reference: the jansson codecs of every protocol
 * (test/reference/<p>.c) and their document pipeline (translate_ref.c).
 * Never linked into the gateway: the oracle the tests and the differential
 * fuzzers hold the gateway's codecs (src/proto/<p>.c, include/proxai/fastir.h)
 * to. A body is parsed into a jansson document, decoded into the document IR
 * (its shape in proto.h's comment "The IR"), encoded by the other side's
 * codec and written, within a memory budget (PX_TR_MEM_FACTOR).
 */
#ifndef PROXAI_TEST_REF_H
#define PROXAI_TEST_REF_H

#include <jansson.h>

#include "proxai/proto.h"

/** A protocol's jansson codec. */
typedef struct px_ref_ops {
  /** Client body -> IR request. On failure fill err and return <0. */
  int (*decode_request)(const px_tr_ctx_t *ctx, json_t *body, json_t **ir,
                        px_lossy_t *lossy, px_tr_err_t *err);
  /** IR request -> upstream body (model = ctx->upstream_model). */
  int (*encode_request)(const px_tr_ctx_t *ctx, json_t *ir, json_t **body,
                        px_lossy_t *lossy, px_tr_err_t *err);
  /** Upstream success body -> IR response. */
  int (*decode_response)(const px_tr_ctx_t *ctx, json_t *body, json_t **ir,
                         px_lossy_t *lossy, px_tr_err_t *err);
  /** IR response -> client body (model = ctx->client_model). */
  int (*encode_response)(const px_tr_ctx_t *ctx, json_t *ir, json_t **body,
                         px_lossy_t *lossy, px_tr_err_t *err);
  /** Shape a translated request body into this protocol's count request;
   *  NULL: the body as it is. */
  void (*count_request)(json_t *body, const char *model);
} px_ref_ops_t;

/** The reference codec of a protocol (NULL: unknown). */
const px_ref_ops_t *px_ref_get(px_proto_t p);

#define XX(e, name, inpath, uppath, sym) extern const px_ref_ops_t px_ref_##sym;
PX_PROTO_MAP(XX)
#undef XX

/** Translate a client request document to the upstream protocol's. */
int px_translate_request(const px_tr_ctx_t *ctx, json_t *client_body,
                         json_t **upstream_body, px_lossy_t *lossy, px_tr_err_t *err);
/** Translate an upstream success document to the client protocol's. */
int px_translate_response(const px_tr_ctx_t *ctx, json_t *upstream_body,
                          json_t **client_body, px_lossy_t *lossy, px_tr_err_t *err);
/** The raw client body (accepted by px_json_request) -> the raw upstream
 *  body (*out, malloc'd, NUL-terminated), parsed, translated and written
 *  within the memory budget of its size (PX_TR_MEM_FACTOR, PX_TR_MEM_BASE;
 *  ctx->mem_limit overrides it): a body whose document would not fit, or a
 *  stage that goes past it, gives PX_ERR_TOO_LARGE. flags: PX_TR_COUNT_TOKENS
 *  shapes the body with the upstream's count_request. */
int px_translate_request_ref(const px_tr_ctx_t *ctx, const char *body, size_t len,
                             int flags, char **out, size_t *out_len, px_lossy_t *lossy,
                             px_tr_err_t *err);

/* IR document helpers the reference codecs share (util_ref.c) */

/** "data:<mt>;base64,<data>" -> media type copied into mt (NUL-terminated,
 *  non-empty, shorter than mtsz) and *data pointing into url. 0 or -1. */
int px_data_url_split(const char *url, char *mt, size_t mtsz, const char **data);

/** A tool_call part's arguments as a JSON object for an upstream that takes
 *  only objects (blank: {}); NULL with err naming the client's field when
 *  they are anything else. */
json_t *px_tool_args_object(const px_tr_ctx_t *ctx, json_t *part, px_tr_err_t *err);

/** prefix + id unless id already starts with prefix, as a JSON string;
 *  NULL or empty id -> prefix + "proxai". NULL on allocation failure. */
json_t *px_mint_id(const char *prefix, const char *id);

/** Whether the IR tool list names a custom (freeform) tool `name`. */
int px_ir_is_custom_tool(json_t *tools, const char *name);

/** The filename of an IR file part sent inline to OpenAI (which rejects
 *  file_data without one): its own, else "document" + the media type's
 *  usual extension. */
const char *px_inline_filename(json_t *part);

/** Whether an IR request asks for reasoning: a reasoning object, not
 *  enabled false, effort not "none". */
int px_ir_reasoning_on(json_t *ir_request);
/** A decoded request fitted to the upstream's capabilities: IR fields the
 *  upstream's caps cannot hold (prompt_cache_key, verbosity) removed and
 *  named in lossy by the client's names, by the hub's one table
 *  (px_fit_fast_request). Called between decode_request and encode_request. */
void px_ir_fit_request(const px_tr_ctx_t *ctx, json_t *ir_request, px_lossy_t *lossy);

/** The token a `client` client carries for IR reasoning part p: a new JSON
 *  string, tagged; the client's own field first, then signature,
 *  redacted_data, encrypted_content, thought_signature. NULL when p has
 *  none the client can carry (or on allocation failure). */
json_t *px_rtok_out(px_proto_t client, json_t *p);
/** A token a `client` client replayed -> the IR field of its family, set on
 *  reasoning part p (tag removed; untagged = the client's own field). An
 *  empty token or tag body sets nothing. 0 or PX_ENOMEM. */
int px_rtok_in(px_proto_t client, json_t *p, const char *tok);

/** The Responses usage object (px_responses_usage_write's bytes, read back). */
json_t *px_responses_usage(const px_usage_t *u);
/** The Response object skeleton (px_responses_object_head and _tail's
 *  bytes, read back). */
json_t *px_responses_object(const px_tr_ctx_t *ctx, const char *resp_id, int64_t created,
                            const char *status, const char *incomplete_reason);
/** IR annotations -> Responses annotations (flat); others named in lossy. */
json_t *px_responses_annotations(json_t *ann, px_lossy_t *lossy);
/** IR annotations -> Chat message annotations (url_citation nested),
 *  character indexes shifted by shift; others named in lossy. */
json_t *px_chat_annotations(const px_tr_ctx_t *ctx, json_t *anns, json_int_t shift,
                            px_lossy_t *lossy);
/** One IR annotation -> an Anthropic text-block citation: a url_citation
 *  becomes web_search_result_location {url, title (null when absent),
 *  cited_text = the annotated span, encrypted_index ""} (the one citation
 *  kind with a URL; the index is Anthropic's own and unknown here).
 *  text[0..n) is the block's text from its character base on (0: all of
 *  it); the part of the span before it is not cited. NULL for other kinds. */
json_t *px_anthropic_citation(json_t *ann, const char *text, size_t n, int64_t base);
/** usageMetadata -> usage (px_gemini_usage_of of its four counts). */
void px_gemini_usage_in(json_t *usage_metadata, px_usage_t *u);
/** usage -> a new usageMetadata object. */
json_t *px_gemini_usage_out(const px_usage_t *u);

/** The IR text part {"type":"text","text":text} of a document's string
 *  (valid UTF-8 already: copied without jansson's check); NULL when text
 *  is NULL or out of memory. */
json_t *px_ir_text(const char *text);

#endif
