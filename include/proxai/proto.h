/**
 * proto.h - the protocol plug-in table, the protocol-neutral intermediate
 * representation (IR) and the shared stream event model.
 *
 * Translators do no I/O. Cross-protocol translation goes through a hub:
 *
 *   client request  --in->fast->decode_request-->   IR request (fastir.h)  --out->fast->encode_request-->  upstream request
 *   upstream body   --out->fast->decode_response-->  IR response (fastir.h) --in->fast->encode_response--> client body
 *   upstream SSE    --out->stream decoder--> px_ev_t ...  --in->stream encoder--> client SSE
 *
 * (translate_fast.c for bodies, with the one reader's rule for what a codec
 * declines as written; translate.c for errors and streams.) Same-protocol
 * pairs bypass all of this (pass-through, src/core/passthru.c).
 *
 * Adding a protocol = its two files, src/proto/<p>.c (its px_fast_ops_t
 * codec of requests and answers, its errors and its px_proto_ops_t entry)
 * and src/proto/<p>_stream.c, one XX() line below, and its tests: fixture
 * dirs and a reference codec in test/reference/<p>.c (px_ref_<p>, the
 * differential tests' oracle; test/reference/ref.h).
 */
#ifndef PROXAI_PROTO_H
#define PROXAI_PROTO_H

#include <jansson.h>
#include <stdint.h>

#include "proxai/buf.h"
#include "proxai/json.h"

/* XX(enum suffix, config name, inbound path, upstream path, symbol prefix) */
#define PX_PROTO_MAP(XX)                                                       \
  XX(CHAT, "openai_chat_completions", "/chat/completions", "/chat/completions", chat) \
  XX(RESPONSES, "openai_responses", "/responses", "/responses", responses)     \
  XX(ANTHROPIC, "anthropic_messages", "/messages", "/v1/messages", anthropic) \
  XX(GEMINI, "gemini_generate_content", "/models/", "/v1beta/models/", gemini)

typedef enum px_proto {
#define XX(e, name, inpath, uppath, sym) PX_PROTO_##e,
  PX_PROTO_MAP(XX)
#undef XX
  PX_PROTO_COUNT
} px_proto_t;

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */

/** Protocol-neutral error kinds (SPEC section 6). */
#define PX_ERRKIND_MAP(XX)                                                   \
  /* kind,        status, openai type,             anthropic type */        \
  XX(INVALID,     400, "invalid_request_error", "invalid_request_error")     \
  XX(AUTH,        401, "authentication_error",  "authentication_error")      \
  XX(PERMISSION,  403, "permission_error",      "permission_error")          \
  XX(NOT_FOUND,   404, "not_found_error",       "not_found_error")           \
  XX(TOO_LARGE,   413, "invalid_request_error", "request_too_large")         \
  XX(RATE_LIMIT,  429, "rate_limit_error",      "rate_limit_error")          \
  XX(API,         500, "api_error",             "api_error")                 \
  XX(BAD_GATEWAY, 502, "api_error",             "api_error")                 \
  XX(TIMEOUT,     504, "timeout_error",         "api_error")                 \
  XX(OVERLOADED,  503, "api_error",             "overloaded_error")          \
  XX(UNAVAILABLE, 503, "api_error",             "api_error")                 \
  XX(NOT_IMPL,    501, "invalid_request_error", "invalid_request_error")     \
  XX(METHOD,      405, "invalid_request_error", "invalid_request_error")     \
  XX(QUOTA,       429, "insufficient_quota",    "rate_limit_error")

typedef enum px_errkind {
#define XX(k, st, ot, at) PX_ERR_##k,
  PX_ERRKIND_MAP(XX)
#undef XX
  PX_ERR_COUNT
} px_errkind_t;

/** Default HTTP status of an error kind. */
int px_errkind_status(px_errkind_t k);
/** OpenAI "type" string of an error kind. */
const char *px_errkind_openai(px_errkind_t k);
/** Anthropic "error.type" string of an error kind. */
const char *px_errkind_anthropic(px_errkind_t k);
/** Map an error type string of either family back to a kind (unknown ->
 *  guess from status). */
px_errkind_t px_errkind_from_type(const char *type, int status);

/** A translation failure: the request cannot be represented. */
typedef struct px_tr_err {
  px_errkind_t kind;  /**< usually PX_ERR_INVALID */
  char param[96];     /**< offending field path, e.g. "messages[2].role" */
  char message[256];  /**< human readable, names the field */
} px_tr_err_t;

/** The largest output-token cap a request may name (18 digits): a larger one
 *  is refused by every codec. */
#define PX_TOKENS_MAX 999999999999999999LL

/** Set err (printf-style message) and return PX_EINVAL. */
int px_tr_fail(px_tr_err_t *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** An upstream error body decoded to neutral form (message may be NULL). */
typedef struct px_upstream_err {
  px_errkind_t kind;
  char type[64];      /**< the upstream's own type string, "" if none */
  char message[1024]; /**< kept verbatim (truncated at the buffer size) */
} px_upstream_err_t;

/* ------------------------------------------------------------------------ */
/* Lossy field list (x-proxai-lossy)                                        */

/** Set of field paths dropped on purpose; comma-joined into the header. */
typedef struct px_lossy {
  char buf[1024];
  size_t len;
} px_lossy_t;

/** Marks a lossy field name that is not written in a px_lossy_add call (the
 *  docs test, test/docs/check_lossy_docs.mjs, collects both). */
#define PX_LOSSY(path) (path)

/** Add a field path (deduplicated; silently stops when the buffer is full,
 *  ending the list with "..."). A NULL path adds nothing. */
void px_lossy_add(px_lossy_t *l, const char *path);
static inline void px_lossy_init(px_lossy_t *l) { l->len = 0; l->buf[0] = 0; }
/** Add every path of src to dst. */
void px_lossy_merge(px_lossy_t *dst, const px_lossy_t *src);
/** Calls fn for each field path of l (the "..." overflow mark skipped). */
void px_lossy_each(const px_lossy_t *l, void (*fn)(void *arg, const char *path), void *arg);

/* ------------------------------------------------------------------------ */
/* Translation context                                                       */

/** A long string of the client's body in a translated request body: its
 *  n bytes at p (in the client's body) go at offset `at` of the
 *  translator's own bytes. */
typedef struct px_body_span {
  size_t at;
  const char *p;
  size_t n;
} px_body_span_t;
/** The spans of one translated body, in the order of `at` (v grows as
 *  needed; px_spans_free). bytes: their total length. */
typedef struct px_spans {
  px_body_span_t *v;
  size_t n, cap, bytes;
} px_spans_t;
void px_spans_free(px_spans_t *s);
/** The body as parts (the translator's bytes text[0..len) with the spans
 *  inserted, empty pieces left out) into *parts (malloc'd, *nparts); 0 or
 *  PX_ENOMEM. */
int px_spans_parts(const char *text, size_t len, const px_spans_t *s, px_str_t **parts,
                   size_t *nparts);

/** What translators may know about the request besides its body. */
typedef struct px_tr_ctx {
  px_proto_t in;             /**< client protocol */
  px_proto_t out;            /**< upstream protocol */
  const char *client_model;  /**< model the client asked for (responses echo it) */
  const char *upstream_model;/**< model sent upstream */
  int64_t default_max_tokens;/**< route max_tokens, 0 = unset (4096 used) */
  int client_include_usage;  /**< Chat client asked stream_options.include_usage */
  int stream;                /**< the request streams */
  int64_t created;           /**< unix time for `created` / `created_at` */
  size_t max_accum;          /**< cap for stream accumulation (Responses .done) */
  const struct px_json_req *scan; /**< the caller's px_json_request of the body
                                       (px_translate_request_body), NULL: it
                                       scans the body itself */
  px_lossy_t *dropped;       /**< streams: what was actually dropped (set by
                                  the hub; NULL elsewhere) */
  void (*flush)(void *arg);  /**< streams, optional: a stream encoder that
                                  writes much in one event (the Responses
                                  closing events) calls it between the
                                  events it writes, once the out buffer holds
                                  PX_FLUSH_AT bytes; it hands the out
                                  buffer's bytes to the client and empties
                                  it. NULL: out grows until the call returns */
  void *flush_arg;           /**< the flush callback's argument */
  const char *resp_id;       /**< the gateway keeps this response (SPEC 14):
                                  the id the client gets; NULL: the id
                                  made from the upstream's */
  const char *prev_id;       /**< the previous response id as sent, echoed in
                                  the response (with resp_id) */
  const long long *mem_limit; /**< tests: the reference's memory
                                   budget whatever the body size (to stop at
                                   every stage); NULL: the rule */
  struct px_answer *answer;  /**< traces: the upstream answer's id, model
                                  and finish word as a fast response decoder
                                  read them (px_answer_set); NULL: not
                                  wanted */
  struct px_answer *client;  /**< traces: the client answer's, as a fast
                                  response encoder wrote them
                                  (px_answer_wrote); NULL: not wanted */
  px_spans_t *spans;         /**< requests: the fast encoders note the client
                                  body's long strings here instead of
                                  copying them (px_fb_put); the caller sends
                                  the body in parts (px_spans_parts) and
                                  keeps the client's body alive meanwhile.
                                  NULL: one contiguous body */
  size_t ir_budget;          /**< requests: bytes the decoded request (the
                                  IR arena) may take, [server]
                                  translate_memory times the body plus
                                  translate_memory_base; past it the request
                                  is refused (PX_ERR_TOO_LARGE). 0: unbounded */
} px_tr_ctx_t;

/** The default memory budget of a translated request's decoded form
 *  (px_tr_ctx_t.ir_budget; [server] translate_memory and
 *  translate_memory_base): PX_TR_IR_FACTOR times the body plus PX_TR_IR_BASE. */
#define PX_TR_IR_FACTOR 4
#define PX_TR_IR_BASE (1u << 20)

/** Bytes of out after which a stream encoder calls ctx->flush. */
#define PX_FLUSH_AT (64u << 10)

/* ------------------------------------------------------------------------ */
/* The document IR: the reference codecs' (test/reference), jansson documents
 * with a fixed canonical shape; the codecs' IR (fastir.h) holds the same
 * parts, field by field                                                      */

/*
 * IR REQUEST (json object). Absent keys mean "not specified".
 *
 * {
 *   "model": "name",
 *   "system": [                              // system + developer, in order
 *     {"type":"text","text":"...","role":"system"|"developer",
 *      "cache_control":{...}?}
 *   ],
 *   "messages": [                            // user/assistant turns, in order
 *     {"role":"user"|"assistant", "content":[ PART, ... ]}
 *   ],
 *   "tools": [ {"name":"..","description":"..","parameters":{schema},
 *               "strict":bool?, "cache_control":{...}?}
 *            | {"type":"custom","name":"..","description":".."?,   // freeform
 *               "format":{"type":"text"} |                          // (OpenAI
 *                        {"type":"grammar","syntax":"lark"|"regex",  // custom tool)
 *                         "definition":".."}?} ],
 *            (custom tools, custom tool_call parts and custom stream blocks
 *             are put in the IR only when the other side has
 *             PX_CAP_CUSTOM_TOOLS; a codec without it never sees them)
 *   "tool_choice": {"type":"auto"|"none"|"required"} | {"type":"tool","name":".."},
 *   "parallel_tool_calls": bool,
 *   "max_tokens": int, "temperature": num, "top_p": num, "top_k": int,
 *   "stop": ["..", ...],
 *   "response_format": {"type":"text"} | {"type":"json_object"} |
 *                      {"type":"json_schema","name":"..","schema":{..},"strict":bool?,
 *                       "description":".."?},
 *   "reasoning": {"effort":"none"|"minimal"|"low"|"medium"|"high"|"xhigh"?,
 *                 "budget_tokens": int?, "summary": ".."?, "enabled": bool?},
 *   "user": "..",                            // Chat user / Anthropic metadata.user_id / Responses user|safety_identifier
 *   "metadata": {..},                        // Chat/Responses metadata (string map)
 *   "stream": bool,
 *   "include_usage": bool,                   // client asked stream usage (Chat)
 *   "previous_response_id": "..",            // only Responses can hold it
 *   "prompt_cache_key": "..",                // Chat / Responses prompt_cache_key
 *   "verbosity": "low"|"medium"|"high"       // Chat verbosity / Responses text.verbosity
 * }
 * (decoders put prompt_cache_key and verbosity in the IR whenever the client
 * sent them; the reference's px_ir_fit_request drops them, named by the client's
 * px_lossy_names_t, when the upstream lacks PX_CAP_PROMPT_CACHE_KEY /
 * PX_CAP_VERBOSITY.)
 *
 * PART (in messages[].content):
 *   {"type":"text","text":"..","cache_control":{..}?}
 *   {"type":"image","url":"https://.."}                      // remote image
 *   {"type":"image","media_type":"image/png","data":"<base64>"}
 *   {"type":"file","media_type":"application/pdf","data":"<base64>","filename":".."?}
 *   {"type":"file","url":"https://.."} | {"type":"file","file_id":".."}
 *   {"type":"refusal","text":".."}                          // assistant only
 *   {"type":"reasoning","text":"..","signature":".."?,        // assistant only
 *    "encrypted_content":".."?, "id":".."?, "redacted_data":".."?}
 *   {"type":"tool_call","id":"call_1","name":"..","arguments":"<JSON text>"}  // assistant only
 *   {"type":"tool_call","id":"call_1","name":"..","custom":true,"input":"<free text>"}
 *                                                            // a custom tool's call
 *   {"type":"tool_result","tool_call_id":"call_1",            // user only
 *    "content":[ text/image PARTs ], "is_error":bool?}
 *
 * IR RESPONSE (json object):
 * {
 *   "id": "upstream id",
 *   "model": "upstream model",
 *   "created": int?,
 *   "content": [                              // output in order
 *     {"type":"text","text":"..","annotations":[..]?},
 *     {"type":"refusal","text":".."},
 *     {"type":"reasoning","text":"..","signature":".."?,"encrypted_content":".."?,
 *      "id":".."?,"redacted_data":".."?},
 *     {"type":"tool_call","id":"call_1","name":"..","arguments":"<JSON text>"},
 *     {"type":"tool_call","id":"call_1","name":"..","custom":true,"input":".."}
 *   ],
 *   "stop_reason": "end_turn"|"max_tokens"|"stop_sequence"|"tool_use"|
 *                  "pause_turn"|"refusal"|"content_filter",
 *   "stop_sequence": ".."?,
 *   "refusal_explanation": ".."?,             // Anthropic stop_details.explanation
 *   "usage": {"input_tokens":n,"output_tokens":n,"cache_read_tokens":n?,
 *             "cache_creation_tokens":n?,"reasoning_tokens":n?}
 * }
 *
 * Usage convention (IR and px_usage_t): input_tokens is the TOTAL prompt
 * size, cache reads and cache writes included (OpenAI prompt_tokens /
 * input_tokens semantics); cache_read_tokens and cache_creation_tokens are
 * parts of it. Anthropic decode: input = input_tokens + cache_read_input_tokens
 * + cache_creation_input_tokens; Anthropic encode subtracts them again.
 * output_tokens includes reasoning_tokens (OpenAI semantics).
 *
 * Refusal rule (SPEC 5): a Chat message.refusal decodes to a "refusal" part
 * with stop_reason end_turn; an Anthropic stop_reason "refusal" decodes its
 * text blocks to "refusal" parts with stop_reason "refusal".
 */

/* ------------------------------------------------------------------------ */
/* Stop reasons: one mapping, used by streaming and non-streaming code.       */

typedef enum px_stop {
  PX_STOP_NONE = 0,
  PX_STOP_END_TURN,
  PX_STOP_MAX_TOKENS,
  PX_STOP_STOP_SEQUENCE,
  PX_STOP_TOOL_USE,
  PX_STOP_PAUSE_TURN,
  PX_STOP_REFUSAL,
  PX_STOP_CONTENT_FILTER,
} px_stop_t;

/** A refusal of either kind: a model's (refusal) or a filter's (content_filter). */
static inline int px_stop_refused(px_stop_t s) {
  return s == PX_STOP_REFUSAL || s == PX_STOP_CONTENT_FILTER;
}
/** IR / Anthropic spelling of a stop reason ("end_turn", ...); NULL for NONE. */
const char *px_stop_name(px_stop_t s);
/** Parse an IR / Anthropic spelling; unknown -> PX_STOP_END_TURN. */
px_stop_t px_stop_parse(const char *s);
/** Chat finish_reason of a stop reason. */
const char *px_stop_to_chat(px_stop_t s);
/** Stop reason of a Chat finish_reason. */
px_stop_t px_stop_from_chat(const char *fr);
/** Anthropic stop_reason spelling (content_filter -> "refusal"). */
const char *px_stop_to_anthropic(px_stop_t s);
/** Responses status ("completed" | "incomplete" | "failed") and, for
 *  incomplete, the incomplete_details.reason (else NULL). */
const char *px_stop_to_responses(px_stop_t s, int has_refusal_part,
                                 const char **incomplete_reason);
/** Stop reason of a Responses status + incomplete reason + output shape. */
px_stop_t px_stop_from_responses(const char *status, const char *incomplete_reason,
                                 int has_tool_call);

/* ------------------------------------------------------------------------ */
/* Stream event model                                                        */

typedef enum px_ev_type {
  PX_EV_MESSAGE_START, /**< id, model, usage (input side) */
  PX_EV_BLOCK_START,   /**< index, block; id/name for tool calls */
  PX_EV_DELTA,         /**< index, delta kind, text */
  PX_EV_BLOCK_STOP,    /**< index */
  PX_EV_MESSAGE_DELTA, /**< stop reason, stop_sequence, usage */
  PX_EV_MESSAGE_STOP,  /**< the terminal event: stream complete */
  PX_EV_ERROR,         /**< upstream error event / truncation: errkind + text */
} px_ev_type_t;

typedef enum px_block {
  PX_BLOCK_TEXT,
  PX_BLOCK_REFUSAL,
  PX_BLOCK_THINKING,
  PX_BLOCK_REDACTED_THINKING,
  PX_BLOCK_TOOL_CALL,
} px_block_t;

typedef enum px_delta {
  PX_DELTA_TEXT,
  PX_DELTA_REFUSAL,
  PX_DELTA_THINKING,
  PX_DELTA_SIGNATURE,   /**< thinking signature / encrypted_content */
  PX_DELTA_TOOL_ARGS,   /**< partial JSON of tool arguments */
  PX_DELTA_ANNOTATION,  /**< TEXT blocks: one IR annotation as compact JSON
                             ({"type":"url_citation","url","title"?,
                             "start_index","end_index"}, indexes in characters
                             of the block's text; other Responses annotation
                             types as they are) */
} px_delta_t;

typedef struct px_usage {
  int64_t input_tokens;       /**< -1 = unknown */
  int64_t output_tokens;      /**< -1 = unknown */
  int64_t cache_read_tokens;  /**< -1 = unknown */
  int64_t cache_creation_tokens;
  int64_t reasoning_tokens;
} px_usage_t;

/** One event. Strings are views valid only during the sink call. */
typedef struct px_ev {
  px_ev_type_t type;
  int index;            /**< block index, 0-based, increasing in start order */
  px_block_t block;     /**< BLOCK_START */
  px_delta_t delta;     /**< DELTA */
  px_str_t text;        /**< DELTA text; ERROR message; BLOCK_START initial
                             text (redacted data) */
  px_str_t id;          /**< MESSAGE_START message id; BLOCK_START tool call id
                             or reasoning item id */
  px_str_t name;        /**< BLOCK_START tool name */
  px_str_t model;       /**< MESSAGE_START upstream model */
  px_stop_t stop;       /**< MESSAGE_DELTA */
  px_str_t finish;      /**< MESSAGE_DELTA: the upstream's own finish word
                             (traces: the answer's finish reason); len 0:
                             none */
  px_str_t stop_sequence;
  px_str_t refusal_explanation; /**< MESSAGE_DELTA (Anthropic stop_details) */
  px_usage_t usage;     /**< MESSAGE_START (input), MESSAGE_DELTA (final) */
  px_errkind_t errkind; /**< ERROR */
  int custom;           /**< BLOCK_START of a TOOL_CALL: a custom (freeform)
                             tool call; its TOOL_ARGS deltas are raw input
                             text, not JSON (OpenAI protocols only) */
} px_ev_t;

/** Receives decoded events; returns 0 or a negative error to stop. */
typedef int (*px_ev_sink_fn)(void *arg, const px_ev_t *ev);

/** Zero a px_ev_t with usage fields set to -1 (unknown). */
void px_ev_init(px_ev_t *ev, px_ev_type_t type);

/* SSE event as parsed by sse.h (views valid during the call). */
struct px_sse_event;

/** Per-protocol stream decoder (upstream SSE -> events). Opaque. */
typedef struct px_sdec px_sdec_t;
/** Per-protocol stream encoder (events -> client SSE bytes). Opaque. */
typedef struct px_senc px_senc_t;

/* ------------------------------------------------------------------------ */
/* The wire: what the core asks a protocol instead of naming it              */

/** What an inbound request asks for. */
typedef enum px_endpoint {
  PX_EP_GENERATE,     /**< the protocol's generation endpoint */
  PX_EP_COUNT_TOKENS, /**< its token counting endpoint */
  PX_EP_MODELS,       /**< its model list (GET) */
} px_endpoint_t;

/** An inbound path matched to a protocol (px_proto_match). */
typedef struct px_inbound {
  px_proto_t proto;
  px_endpoint_t ep;
  px_str_t model; /**< the model named by the path (model-in-path protocols); a
                       view into the path, still percent-encoded; empty else */
  int stream;     /**< 1/0: the path decides streaming; -1: the body's `stream` */
} px_inbound_t;

/** Where the pass-through watchers find things in this protocol's JSON
 *  bodies and SSE events (src/core/passthru.c reads it; no code per protocol). */
typedef struct px_wire_watch {
  const char *usage_obj;          /**< member holding usage ("usage") */
  const char *usage_in;           /**< input token member in it */
  const char *usage_out;          /**< output token member in it */
  const char *usage_in_extra[2];  /**< members added to input: the cache reads,
                                       then the cache writes (priced apart) */
  const char *usage_out_extra;    /**< member added to output (thoughts) */
  const char *start_event;        /**< event carrying input usage ... */
  const char *start_outer;        /**< ... inside this object */
  const char *delta_event;        /**< event whose usage gives output only */
  const char *terminal_events[3]; /**< events that end the stream (usage inside
                                       terminal_outer); NULL-padded */
  const char *terminal_outer;
  const char *terminal_data;      /**< a data payload that ends the stream */
  const char *finish_keys[2];     /**< no terminal event: the stream is complete
                                       when a data payload holding one of these
                                       keys has arrived and the upstream ends
                                       cleanly (a finish, or a blocked prompt's
                                       reason); NULL-padded */
  const char *error_event;        /**< event name of an upstream error */
  int error_data;                 /**< a payload starting {"error" is an error */
  const char *model_path[2];      /**< where the model sits in an event */
  int model_depth;
  const char *body_model;         /**< the model's member in a response body;
                                       NULL: "model" */
  const char *answer_id;          /**< the answer's id member; NULL: "id" */
  const char *finish_list;        /**< the array whose elements hold the finish
                                       reason ("choices"): read back from the
                                       end; NULL: a member of the answer */
  const char *finish_key;         /**< the finish reason's member */
  int finish_last;                /**< 1: it follows the answer's content (only
                                       usage and the like after it): read back
                                       from the end, as a list's */
  const char *delta_outer;        /**< delta_event: the object holding it */
} px_wire_watch_t;

/* ------------------------------------------------------------------------ */
/* Capabilities: what a protocol's wire can hold of the shared model          */
/*
 * A codec never asks which protocol is on the other side, only what that
 * side can hold (px_tr_out_can / px_tr_in_can in protoutil.h), and names
 * what it drops by the other side's own field names (px_lossy_names_t).
 */

/** Freeform (custom) tools, tool choices naming them and their calls. */
#define PX_CAP_CUSTOM_TOOLS (1u << 0)
/** A prompt cache routing key (prompt_cache_key). */
#define PX_CAP_PROMPT_CACHE_KEY (1u << 1)
/** An output verbosity knob (low / medium / high). */
#define PX_CAP_VERBOSITY (1u << 2)
/** Uploaded files referenced by id (an OpenAI file_id). */
#define PX_CAP_FILE_ID (1u << 3)
/** Tool-call arguments of any JSON value (not only an object). */
#define PX_CAP_ANY_TOOL_ARGS (1u << 4)
/** Opaque reasoning tokens carried across turns (signatures, encrypted
 *  content: protoutil.h px_rtok_*). */
#define PX_CAP_REASONING_TOKENS (1u << 5)
/** A client can name a response stored upstream (previous_response_id), so
 *  the upstream may keep state for it. */
#define PX_CAP_STORED_RESPONSES (1u << 6)

/** A protocol's own names (x-proxai-lossy paths, one error param) for
 *  content another protocol may not hold. Request names are used when the
 *  protocol is the client's (the client sent the content), response names
 *  when it is the upstream's (the upstream produced it). NULL: the protocol
 *  never carries such content (nothing is named). */
typedef struct px_lossy_names {
  /* request side */
  const char *refusal;            /**< an assistant refusal in the history */
  const char *reasoning_text;     /**< replayed reasoning the target drops */
  const char *reasoning_token;    /**< a replayed opaque reasoning token */
  const char *reasoning_redacted; /**< replayed redacted reasoning data */
  const char *reasoning_config;   /**< the reasoning / thinking setting */
  const char *stop;               /**< stop sequences */
  const char *tool_result_image;  /**< an image inside a tool result */
  const char *tool_result_file;   /**< a file inside a tool result */
  const char *prompt_cache_key;   /**< PX_CAP_PROMPT_CACHE_KEY's field */
  const char *verbosity;          /**< PX_CAP_VERBOSITY's field */
  const char *tool_args_param;    /**< error param of a tool call's arguments */
  /* response side */
  const char *annotations;        /**< annotations / citations of text */
  const char *opaque_reasoning;   /**< an opaque reasoning token */
  const char *redacted_reasoning; /**< a redacted reasoning block */
  const char *refusal_explanation; /**< a refusal's explanation beside its wording */
} px_lossy_names_t;

/* ------------------------------------------------------------------------ */
/* Stored responses (SPEC section 14)                                         */

/** The limits of a stored response id the gateway accepts. */
#define PX_STORED_ID_MAX 128

/** One stored turn: the request's own input items and the response object
 *  the client received (JSON texts). */
typedef struct px_stored_turn {
  px_str_t input;
  px_str_t response;
} px_stored_turn_t;

/** What a protocol whose clients name responses kept on the server
 *  (PX_CAP_STORED_RESPONSES) gives the core, so that the gateway keeps them
 *  for an upstream that cannot. Text in, text out; no I/O. */
typedef struct px_store_ops {
  /** A resource path of stored responses ({id} or {id}/input_items, with or
   *  without /v1): 1 with the id (still as sent) and *items set. */
  int (*match)(const char *path, size_t len, px_str_t *id, int *items);
  /** The top-level members of a request the three below read (NULL-padded):
   *  the admission's scan hands their spans over (px_json_request_watch,
   *  px_json_req_t.mem_at/mem_len in this order), so reading them walks no
   *  body again. */
  const char *members[PX_JREQ_MEMBERS];
  /** The request's previous response id (unescaped into prev, "" when
   *  absent or null) and its store flag (1 unless `store` is false), from
   *  the spans jr found in body. <0 when the id is not a string of at most
   *  PX_STORED_ID_MAX id characters. */
  int (*fields)(const char *body, const px_json_req_t *jr, char *prev, size_t cap,
                int *store);
  /** The request's own input items as a JSON array text, each with an id
   *  (the client's, else made from the response id resp_id). */
  int (*input_items)(const char *body, const px_json_req_t *jr, const char *resp_id,
                     px_buf_t *out);
  /** The body sent on for a request continuing n stored turns (oldest
   *  first): the turns' input items and response outputs, then its own
   *  input, its previous response id null. PX_ETOOBIG past out's cap.
   *  used(arg, t), when not NULL, is called once turn t is copied: what
   *  holds it may go (a long chain is not held twice). */
  int (*expand)(const char *body, size_t len, const px_json_req_t *jr,
                const px_stored_turn_t *turns, size_t n, px_buf_t *out,
                void (*used)(void *arg, size_t t), void *arg);
  /** The last event of an encoded client stream (out, len): 1 when it is
   *  the terminal event of a response to keep, with its offset and its
   *  response object's span; 0 when it is not. */
  int (*final_event)(const char *out, size_t len, size_t *at, px_str_t *response);
  /** A page of input items (SPEC 14: after, limit, order) of a stored
   *  turn's input; <0 with a message in err when a parameter is invalid. */
  int (*list_items)(px_str_t items, const char *query, size_t qlen, px_buf_t *out,
                    char *err, size_t errcap);
  /** The answer to a deletion. */
  int (*deleted)(px_buf_t *out, const char *id);
} px_store_ops_t;

/* ------------------------------------------------------------------------ */
/* The protocol table                                                         */

struct px_fast_ops;

/** Opaque reasoning token fields one protocol carries at most. */
#define PX_RTOKS 2

typedef struct px_proto_ops {
  px_proto_t id;
  const char *name;          /**< config name */
  /** OpenTelemetry GenAI conventions (SPEC 15): gen_ai.provider.name of an
   *  upstream speaking this protocol, gen_ai.operation.name of a client's
   *  request. */
  const char *otel_provider;
  const char *otel_operation;
  const char *inbound_path;  /**< without /v1 */
  const char *upstream_path; /**< appended to base_url */

  /** Upstream error body (any bytes, maybe not JSON) -> neutral error.
   *  Returns 0 when the body was this protocol's error shape, <0 if not. */
  int (*decode_error)(int status, const char *body, size_t len,
                      px_upstream_err_t *out);
  /** Append this protocol's error JSON body to out. */
  int (*encode_error)(px_buf_t *out, px_errkind_t kind, const char *type,
                      const char *message, const char *param,
                      const char *request_id);
  /** Append this protocol's mid-stream error event (SSE bytes) to out. */
  int (*encode_stream_error)(px_buf_t *out, px_errkind_t kind,
                             const char *message);

  /* Streaming (issue 4). NULL until implemented. */
  px_sdec_t *(*sdec_new)(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg);
  /** Feed one upstream SSE event; the decoder calls sink 0..n times. */
  int (*sdec_feed)(px_sdec_t *d, const struct px_sse_event *sse);
  /** Upstream body ended: emits ERROR if no terminal event was seen. */
  int (*sdec_finish)(px_sdec_t *d);
  void (*sdec_free)(px_sdec_t *d);

  px_senc_t *(*senc_new)(const px_tr_ctx_t *ctx, px_buf_t *out);
  /** Encode one event, appending SSE bytes to the out buffer. */
  int (*senc_event)(px_senc_t *e, const px_ev_t *ev);
  void (*senc_free)(px_senc_t *e);

  /* ---- the wire ---- */
  /** Match an inbound path (query ignored). NULL: `inbound_path` with or
   *  without /v1 is the generation endpoint, `count_path` (inbound form) the
   *  count endpoint. Returns 1 and fills *in when the path is this protocol's. */
  int (*match)(const char *path, size_t len, px_inbound_t *in);
  /** Inbound count_tokens path (without /v1), NULL if none. */
  const char *count_inbound_path;
  /** Append the upstream path (after base_url) for a model, stream flag and
   *  endpoint. NULL: upstream_path / count_upstream_path. <0 when the
   *  endpoint does not exist upstream. */
  int (*upstream_url)(px_buf_t *out, const char *model, int stream, px_endpoint_t ep);
  /** Upstream count_tokens path, NULL if the protocol has none. */
  const char *count_upstream_path;
  /** The token count of an upstream count answer; <0 if not understood. */
  int64_t (*count_decode)(json_t *body);
  /** Append this protocol's count answer for n tokens. */
  int (*count_encode)(px_buf_t *out, int64_t n);
  /** Append this protocol's model list of ids (owners may be NULL). */
  int (*encode_models)(px_buf_t *out, const char *const *ids, const char *const *owners,
                       size_t n);
  /** A request header whose presence on GET /v1/models asks for this
   *  protocol's list shape (Anthropic: anthropic-version). */
  const char *models_marker_header;
  /** Upstream auth header prefix, the key appended ("x-api-key: "). */
  const char *auth_header;
  /** A required upstream header: the client's value, else the upstream's
   *  configured version (`anthropic_version`); NULL if none. */
  const char *version_header;
  /** Client headers forwarded to an upstream of this protocol (NULL-ended). */
  const char *const *forward_headers;
  /** Headers that choose billing / tenancy upstream: dropped when the
   *  upstream configures its own headers (SPEC section 10). NULL-ended. */
  const char *const *tenancy_headers;
  /** A client key header besides Authorization / x-api-key, and a query
   *  parameter carrying it (never logged or forwarded); NULL if none. */
  const char *client_key_header;
  const char *client_key_query;
  /** The error `type` string of a kind in this protocol's family. */
  const char *(*error_type)(px_errkind_t kind);
  /** The request members capping the answer's tokens, each a path of up to
   *  two keys, the one that wins first (NULL-padded): the rate limiter
   *  reserves by the first present. */
  const char *max_tokens_keys[2][2];
  /** The model is named by the path, never by the body. */
  int model_in_path;
  /** The error body names its HTTP status (Gemini's `code`), so an upstream
   *  status outside the family's vocabulary (Anthropic's 529) reaches the
   *  client as its kind's status (503), body and head alike. */
  int error_status_of_kind;
  /** Streams carry usage only when asked by `stream_options.include_usage`
   *  (the gateway always asks, and strips it for a client that did not). */
  int stream_usage_opt_in;
  /** The embedded default (SPEC section 2): the upstream made when env_key
   *  is set, its name, base_url (env_base overrides default_base) and the
   *  glob of model names routed to it (NULL: it takes the rest). */
  const char *env_key, *env_base, *default_base, *default_name, *default_glob;
  px_wire_watch_t watch;
  /** The opaque reasoning tokens this protocol's wire carries, by IR field
   *  ("signature", "redacted_data", ...), each with the tag its token wears
   *  inside another family's own token field ("pxa1:sig:"; protoutil.h
   *  px_rtok_*). The first is the protocol's own carrier; NULL-padded. */
  struct {
    const char *field, *tag;
  } rtoks[PX_RTOKS];
  /** Its models may answer with opaque reasoning tokens the request did not
   *  ask for (Gemini 2.5 and later think by default and sign their parts):
   *  a stream's x-proxai-lossy names them for a client that cannot hold
   *  them whatever the reasoning setting (px_lossy_predict). */
  int rtoks_unasked;
  /** What this protocol's wire can hold (PX_CAP_*). */
  unsigned caps;
  /** Its names for what another protocol cannot hold. */
  px_lossy_names_t names;
  /** The fast codec of non-streaming bodies (include/proxai/fastir.h);
   *  NULL: always the jansson codecs above. */
  const struct px_fast_ops *fast;
  /** Stored responses kept by the gateway for this protocol's clients;
   *  NULL: its clients cannot name a stored response. */
  const px_store_ops_t *store;
} px_proto_ops_t;

/** The table entry of a protocol. */
const px_proto_ops_t *px_proto_get(px_proto_t p);
/** Protocol by config name; -1 if unknown. */
int px_proto_by_name(const char *name);
/** Protocol of an inbound path (with or without /v1, query ignored); -1. */
int px_proto_by_path(const char *path, size_t len);
/** Match an inbound path against every protocol's wire (px_inbound_t); 0 if
 *  none claims it. */
int px_proto_match(const char *path, size_t len, px_inbound_t *in);
/** The protocol of errors for paths no protocol claims (404, 405 ...). */
const px_proto_ops_t *px_proto_default(void);
/** The upstream path of ops for model / stream / endpoint (see upstream_url);
 *  <0 when that endpoint does not exist upstream. */
int px_proto_upstream_url(const px_proto_ops_t *ops, px_buf_t *out, const char *model,
                          int stream, px_endpoint_t ep);

#define XX(e, name, inpath, uppath, sym) extern const px_proto_ops_t px_proto_##sym;
PX_PROTO_MAP(XX)
#undef XX

/* ------------------------------------------------------------------------ */
/* The hub (src/proto/translate.c)                                                 */

/** The response fields a stream of this request may drop, predicted from
 *  whether the request asks for reasoning (x-proxai-lossy leaves before the
 *  stream; the names are those the non-streaming encoders use for the same
 *  content). Called by px_translate_request and the fast path when
 *  ctx->stream. */
void px_lossy_predict(const px_tr_ctx_t *ctx, int reasoning, px_lossy_t *lossy);
/** The lossy name of opaque reasoning (a token, or a redacted block) a
 *  client without PX_CAP_REASONING_TOKENS cannot hold: the upstream's name. */
const char *px_lossy_opaque_reasoning(const px_tr_ctx_t *ctx, int redacted);
/** Annotations (citations) a client cannot hold, by the upstream's name. */
const char *px_lossy_annotations(const px_tr_ctx_t *ctx);

/** px_translate_request_body flag: the body of a count_tokens call, shaped
 *  by the upstream protocol's count body (px_fast_ops_t.count_request). */
#define PX_TR_COUNT_TOKENS 1
/** Memory a jansson document of a body may use: PX_TR_MEM_FACTOR times the
 *  body's size plus PX_TR_MEM_BASE (an answer's, an error body's, an SSE
 *  event's: px_translate_answer_fits; the reference's, test/reference). */
#define PX_TR_MEM_FACTOR 16
#define PX_TR_MEM_BASE (4u << 20)
/** The raw client request body (accepted by px_json_request) -> the raw
 *  upstream body (*out, malloc'd, NUL-terminated, *out_len bytes), by the
 *  codecs (translate_fast.c): what they decline as it is written is read
 *  in its plain spelling (px_json_respell), and what they still decline is
 *  refused (400, naming a repeated member, a name no codec reads, or the
 *  pair). ctx->client_model must be set. With ctx->spans, the body is *out
 *  with those spans inserted (none for a token count, or a body taken in
 *  its plain spelling). */
int px_translate_request_body(const px_tr_ctx_t *ctx, const char *body, size_t len,
                              int flags, char **out, size_t *out_len, px_lossy_t *lossy,
                              px_tr_err_t *err);
/** The same bound for what an upstream answers (SPEC 10): whether the
 *  document of JSON text p[0..n) (a whole answer, an error body, one SSE
 *  event's data) fits the budget of its size, from one scan before any
 *  parse. 0: it does not (or it is not one JSON object): not parsed. */
int px_translate_answer_fits(const char *p, size_t n);
/** Answers and SSE events up to this size fit without that scan: their
 *  document is small whatever its shape (invalid JSON is then the parser's
 *  to refuse). */
#define PX_TR_EVENT_SCAN (16u << 10)
/** Translate an upstream error response (status + raw body, any bytes) into
 *  the client protocol's error body, appended to out. The body is decoded
 *  with the upstream protocol's decode_error, then the other protocols'; the
 *  message is kept and the type mapped (a generic type under a specific
 *  status takes the status's kind: 401 + invalid_request_error is an auth
 *  error). A body no decoder understands (HTML, plain text, empty) becomes a
 *  502 bad gateway naming the upstream status. *client_status gets the
 *  status to send (upstream status kept for real error bodies, e.g. 529
 *  stays 529). request_id may be NULL. */
int px_translate_error(const px_tr_ctx_t *ctx, int status, const char *body,
                       size_t len, const char *request_id, px_buf_t *out,
                       int *client_status);

/*
 * Stream rules enforced by the hub (px_stream_tr_*), so decoders and
 * encoders need not re-check them:
 *  - An ERROR event from the decoder, a transfer failure, an over-long SSE
 *    event, an illegal event order, a decoder/encoder failure, or an
 *    upstream end without MESSAGE_STOP ends the client stream in error
 *    exactly once, and nothing is encoded after it (never a fabricated
 *    normal stop): the hub first passes a PX_EV_ERROR (errkind, text) to the
 *    client encoder's senc_event, so a stateful encoder can end its stream
 *    properly (e.g. response.failed carrying the output so far); if the
 *    encoder returns <0 or appends nothing, its bytes are dropped and the
 *    hub appends the protocol's encode_stream_error instead.
 *  - Order: MESSAGE_START first and once; BLOCK_START index == number of
 *    blocks started so far; DELTA / BLOCK_STOP only on an open block, and
 *    a DELTA only of its block's kind (TEXT: text; REFUSAL: refusal;
 *    THINKING: thinking or signature; REDACTED_THINKING: signature;
 *    TOOL_CALL: tool args); a TOOL_CALL block needs a name; no
 *    BLOCK_START after the first MESSAGE_DELTA; blocks still open at the
 *    first MESSAGE_DELTA are closed by hub-made BLOCK_STOP events;
 *    MESSAGE_DELTA may repeat (e.g. a late usage-only delta, stop NONE);
 *    MESSAGE_STOP requires a MESSAGE_DELTA with a stop reason before it.
 *    Events after MESSAGE_STOP are ignored.
 */

/** A running stream translation: upstream SSE bytes in, client SSE out. */
typedef struct px_stream_tr px_stream_tr_t;
/** out: buffer the encoder appends client bytes to (owned by caller). */
px_stream_tr_t *px_stream_tr_new(const px_tr_ctx_t *ctx, px_buf_t *out);
/** Feed raw upstream body bytes (split anywhere). <0 = stream is broken; an
 *  error event has then been written to out. */
int px_stream_tr_feed(px_stream_tr_t *t, const char *p, size_t n);
/** Upstream ended (ok=1: transfer succeeded; 0: it failed/timed out). Writes
 *  the client's error event if no terminal event was seen. Returns 0 if the
 *  stream completed normally. */
int px_stream_tr_finish(px_stream_tr_t *t, int ok, px_errkind_t kind,
                        const char *message);
/** Whether a terminal event has been written. */
int px_stream_tr_done(const px_stream_tr_t *t);
/** Final usage seen (for logs/metrics/tpm). */
const px_usage_t *px_stream_tr_usage(const px_stream_tr_t *t);
/** Fields the stream actually dropped so far (access log `lossy`); the
 *  x-proxai-lossy header of a stream is predicted from the request by
 *  px_translate_request (px_lossy_predict, one rule set with these). */
const px_lossy_t *px_stream_tr_dropped(const px_stream_tr_t *t);
/** Keep the upstream answer's id, model and finish reason (usage.h) in up
 *  as its events pass, and the client's in client as the encoder writes
 *  its start and end events (a traced request); either may be NULL. */
struct px_answer;
void px_stream_tr_answer(px_stream_tr_t *t, struct px_answer *up,
                         struct px_answer *client);
void px_stream_tr_free(px_stream_tr_t *t);

#endif
