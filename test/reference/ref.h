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

/** The IR text part {"type":"text","text":text} of a document's string
 *  (valid UTF-8 already: copied without jansson's check); NULL when text
 *  is NULL or out of memory. */
json_t *px_ir_text(const char *text);

#endif
