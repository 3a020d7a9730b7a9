/**
 * fastir.h - the translation model of request bodies (streaming or not)
 * and of non-streaming answers: a compact C IR (arena-allocated), a walker
 * over bodies the scanner has validated, checked reads for the others, and
 * the hub entry points (src/proto/translate_fast.c).
 *
 * Each protocol's codec (src/proto/<p>.c, px_fast_ops_t) reads a body into
 * the C IR, and the other protocol's writes its body straight into a
 * px_buf_t, without a jansson document. Strings are kept as raw spans of
 * the source body, still escaped (both sides are JSON), and copied out as
 * they are; numbers, schemas and other passive values are copied as raw
 * JSON spans.
 *
 * The IR mirrors the document IR of proto.h part by part (text, tool calls
 * and results, reasoning with its opaque tokens, images, files, refusals,
 * custom tools; the reasoning setting, JSON output, prompt_cache_key,
 * verbosity): a decoder fills it as the reference's jansson decoder
 * (test/reference) fills the document, an encoder writes from it what the
 * reference's encoder writes. Everything the agents send takes it
 * (test/unit/test_fast_agents.c). A decoder or encoder DECLINES (returns
 * PX_FAST_DECLINE) on what it cannot tell exactly as written: escaped keys,
 * values it must split at a place that are not in the plain spelling
 * (px_fs_plain), repeated members, names a lossy list cannot hold (values
 * that decide are read by their value: px_fs_is). The hub then applies the one reader's rule
 * (px_translate_request_body, px_translate_response_body): the body in its
 * plain spelling (px_json_respell) is asked again, and what is still
 * declined is refused in words (px_fast_odd_member); nothing else reads it.
 * fuzz/fuzz_translate_fast.c and the codec fuzzers (fuzz/codec_halves.h)
 * hold the codecs to the reference: a body taken is JSON-equal to the
 * reference's with equal lossy lists, a refusal is in its words.
 */
#ifndef PROXAI_FASTIR_H
#define PROXAI_FASTIR_H

#include <stddef.h>
#include <stdint.h>

#include "proxai/buf.h"
#include "proxai/json.h"
#include "proxai/proto.h"

/** A fast decoder or encoder does not take this body (not an error). */
#define PX_FAST_DECLINE 1
/** A fast codec refuses the body as the reference codec does (px_fast_ops_t):
 *  the error is the answer, no other path is tried. */
#define PX_FAST_REFUSE 3

/* ------------------------------------------------------------------------ */
/* Arena                                                                     */

typedef struct px_arena_blk px_arena_blk_t;
typedef struct px_arena {
  char *cur, *end;
  px_arena_blk_t *blocks;
  size_t used;  /**< bytes of the blocks taken from the heap */
  size_t limit; /**< at most this many (the request's budget, px_tr_ctx_t
                     ir_budget); 0: unbounded (px_arena_init) */
  int over;     /**< an allocation went past limit */
  char first[2048];
} px_arena_t;

void px_arena_init(px_arena_t *a);
/** n bytes, 8-aligned, zeroed; NULL when out of memory or past the arena's
 *  limit (then over is set). */
void *px_arena_alloc(px_arena_t *a, size_t n);
void px_arena_free(px_arena_t *a);

/* ------------------------------------------------------------------------ */
/* The C IR                                                                  */

/** The content of a JSON string, still escaped (esc: it has backslashes);
 *  p == NULL: absent. */
typedef struct px_fstr {
  const char *p;
  size_t n;
  int esc;
} px_fstr_t;

/** Part kinds, one per IR PART kind of proto.h ("text", "tool_call",
 *  "tool_result", "reasoning", "image", "file", "refusal"). */
typedef enum {
  PX_FP_TEXT,
  PX_FP_TOOL_CALL,
  PX_FP_TOOL_RESULT,
  PX_FP_REASONING,
  PX_FP_IMAGE,
  PX_FP_FILE,
  PX_FP_REFUSAL,
} px_fpart_type_t;

/** Opaque reasoning token fields over every protocol (px_rtok_at(k) names
 *  field k: the protocols' rtoks in table order). */
#define PX_FRTOKS 6

/*
 * A part holds what the IR PART of the same kind holds (proto.h), field by
 * field; a decoder fills a part exactly as the jansson decoder fills the IR
 * part, and an encoder writes from it exactly what the jansson encoder
 * writes from that IR part. Strings are still-escaped spans (of the body,
 * or of the arena when a decoder had to build one, e.g. joined texts).
 */
typedef struct px_fpart {
  struct px_fpart *next;
  px_fpart_type_t type;
  px_fstr_t text;         /**< TEXT, REFUSAL, REASONING: text (REASONING:
                               "" when none); TOOL_CALL custom: its input */
  px_str_t cache_control; /**< TEXT: raw JSON value, ptr NULL if absent */
  int developer;          /**< system TEXT: role developer (Chat) */
  px_fstr_t id, name;     /**< TOOL_CALL id and name; TOOL_RESULT: id;
                               REASONING: its item id (IR "id") */
  px_fstr_t args;         /**< TOOL_CALL: arguments, a JSON string's content
                               (JSON text, escaped); p NULL: see input */
  px_str_t input;         /**< TOOL_CALL: the arguments as JSON text (a valid
                               object); set with args, or alone */
  int custom;             /**< TOOL_CALL: a custom (freeform) tool's call
                               (IR "custom": true; its input in text) */
  struct px_fpart *content; /**< TOOL_RESULT: its TEXT (and IMAGE) parts */
  int is_error;           /**< TOOL_RESULT: is_error true */
  /** REASONING: the opaque tokens by IR field, tok[k] the field
   *  px_rtok_at(k) ("encrypted_content", "signature", "redacted_data",
   *  "thought_signature"); p NULL: absent. */
  px_fstr_t tok[PX_FRTOKS];
  /** IMAGE / FILE: url, or media_type with base64 data, or file_id (FILE);
   *  filename (FILE); p NULL: absent. */
  px_fstr_t url, media_type, data, file_id, filename;
  /** TEXT (answers): the IR "annotations" array as raw JSON, in the IR's
   *  shape (url_citation objects {type, url, title?, start_index,
   *  end_index}, or another protocol's own as the reference keeps them);
   *  ptr NULL: absent. Added with issue 21's answers (PX_FU_ANNOTATIONS). */
  px_str_t annotations;
} px_fpart_t;

typedef struct px_fmsg {
  struct px_fmsg *next;
  int assistant; /**< 0: user */
  px_fpart_t *parts, *last;
  /** A user message holding a system turn met mid-conversation (IR
   *  "system_note": its TEXT parts, cache_control kept): the OpenAI
   *  encoders write a system message in place, the others a user turn.
   *  Added with issue 21 (PX_FU_SYSTEM_NOTE). */
  int system_note;
} px_fmsg_t;

typedef struct px_ftool {
  struct px_ftool *next;
  px_fstr_t name, desc;
  px_str_t params;        /**< raw JSON object (always set by the decoders;
                               unused for a custom tool) */
  px_str_t cache_control; /**< raw JSON value, ptr NULL if absent */
  int strict;       /**< -1 absent, 0 false, 1 true */
  int custom;       /**< an IR custom (freeform) tool: name, desc, format */
  px_str_t format;  /**< custom: the IR "format" object as raw JSON, in the
                         IR's shape ({"type":"text"} or {"type":"grammar",
                         "syntax":..,"definition":..}); ptr NULL: absent */
} px_ftool_t;

typedef enum { PX_FTC_UNSET, PX_FTC_AUTO, PX_FTC_NONE, PX_FTC_REQUIRED, PX_FTC_TOOL } px_ftc_t;

/** A request in the common shape (the IR REQUEST of proto.h, restricted). */
typedef struct px_freq {
  px_fpart_t *system, *system_last; /**< TEXT parts */
  px_fmsg_t *msgs, *msgs_last;
  px_ftool_t *tools, *tools_last;
  px_ftc_t tool_choice;
  px_fstr_t tc_name;
  int parallel;                  /**< -1 unset, 0 false, 1 true */
  px_str_t max_tokens;           /**< raw integer token, ptr NULL: unset */
  int64_t max_tokens_v;
  px_str_t temperature, top_p, top_k; /**< raw number tokens */
  px_str_t stop;                 /**< raw non-empty JSON array */
  px_fstr_t stop1;               /**< a single stop string */
  px_fstr_t user;
  px_str_t metadata;             /**< raw JSON object (Chat) */
  int metadata_empty;
  int stream_false;              /**< `stream` was given false */
  int stream_true;               /**< the request streams (the body's `stream`
                                      true; Gemini: the path's method) */
  int rf_text;                   /**< response_format {"type":"text"} */
  int rf_json;                   /**< response_format {"type":"json_object"} */
  /** response_format {"type":"json_schema", name, schema, strict?,
   *  description?} (IR shape): rf_schema.ptr set (raw object) */
  px_str_t rf_schema;
  px_fstr_t rf_name, rf_desc;
  int rf_strict; /**< -1 absent, 0 false, 1 true */
  /** IR "reasoning": has_reasoning 1 when the IR holds the object (even
   *  empty members); effort / summary p NULL when absent; budget raw
   *  integer token (ptr NULL: absent) and its value; enabled -1 absent. */
  int has_reasoning;
  px_fstr_t effort, summary;
  px_str_t budget;
  int64_t budget_v;
  int reasoning_enabled;
  px_fstr_t prompt_cache_key; /**< IR prompt_cache_key (p NULL: absent) */
  px_fstr_t verbosity;        /**< IR verbosity (p NULL: absent) */
} px_freq_t;

/** A response in the common shape (text and tool calls). */
typedef struct px_fresp {
  px_fstr_t id, model;
  int64_t created;
  int has_created;
  px_fpart_t *content, *last; /**< TEXT and TOOL_CALL parts; REASONING
                                   parts for an encoder that lists them
                                   (px_fast_ops_t.resp_encodes) */
  px_stop_t stop;
  px_fstr_t finish; /**< the finish word as the upstream wrote it (traces:
                         the answer's finish reason); p NULL: none */
  px_fstr_t stop_sequence;
  int has_usage;
  int64_t in, out, cache_read, cache_creation, reasoning; /**< -1: absent */
  /** The usage as the gateway counts it (px_usage_t input and output, as
   *  px_usage_scan reads the body), set by a decoder that can tell it
   *  exactly (usage_known); -1: not in the body. Else the hub scans. */
  int usage_known;
  int64_t usage_in, usage_out;
  /** IR refusal_explanation (Anthropic stop_details.explanation); p NULL:
   *  absent. Added with issue 21's answers (PX_FU_REFUSAL_EXPL). */
  px_fstr_t refusal_explanation;
} px_fresp_t;

/** Parts of the fast IR an encoder must know to take a request (the hub
 *  reads them off the decoded IR: px_freq_uses). */
#define PX_FU_REASONING (1u << 0)     /**< REASONING parts */
#define PX_FU_REASONING_CFG (1u << 1) /**< has_reasoning */
#define PX_FU_CUSTOM (1u << 2)        /**< custom tools or custom calls */
#define PX_FU_MEDIA (1u << 3)         /**< IMAGE / FILE parts (anywhere) */
#define PX_FU_REFUSAL (1u << 4)       /**< REFUSAL parts */
#define PX_FU_RF_JSON (1u << 5)       /**< rf_json / rf_schema */
#define PX_FU_CACHE_KEY (1u << 6)     /**< prompt_cache_key (after the fit) */
#define PX_FU_VERBOSITY (1u << 7)     /**< verbosity (after the fit) */
/** The first fast IR's bits; the bits after it are listed one by one. */
#define PX_FU_ALL 0xffu
#define PX_FU_SYSTEM_NOTE (1u << 8)   /**< system_note messages (issue 21) */
#define PX_FU_ANNOTATIONS (1u << 9)   /**< answers: TEXT annotations (issue 21) */
#define PX_FU_REFUSAL_EXPL (1u << 10) /**< answers: refusal_explanation (issue 21) */
/** The PX_FU_* a decoded request uses. */
unsigned px_freq_uses(const px_freq_t *ir);
/** The PX_FU_* a decoded answer's content uses. */
unsigned px_fresp_uses(const px_fresp_t *ir);

/** What a protocol's fast codec offers (px_proto_ops_t.fast; NULL members
 *  decline). Each returns 0, PX_FAST_DECLINE, <0 (also a decline), or
 *  PX_FAST_REFUSE with *err set (px_tr_fail; err may be NULL) exactly as
 *  the reference codec refuses the same body: kind, param and message are
 *  the client's answer, and no other codec is tried. */
typedef struct px_fast_ops {
  int (*decode_request)(const px_tr_ctx_t *ctx, const char *body, size_t len,
                        px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err);
  int (*encode_request)(const px_tr_ctx_t *ctx, const px_freq_t *ir, px_buf_t *out,
                        px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err);
  int (*decode_response)(const px_tr_ctx_t *ctx, const char *body, size_t len,
                         px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err);
  int (*encode_response)(const px_tr_ctx_t *ctx, const px_fresp_t *ir, px_buf_t *out,
                         px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err);
  /** What encode_request writes of the IR beyond the first fast IR's
   *  shape (PX_FU_*): the hub declines a decoded request using more. */
  unsigned encodes;
  /** decode_response checks the whole body itself by jansson's rules (the
   *  px_fc_* reads), in the same pass: the hub scans nothing before it.
   *  0: the hub validates the body first (px_json_request). */
  int response_checked;
  /** What encode_response writes of an answer beyond text and tool calls
   *  (PX_FU_REASONING: REASONING parts in px_fresp_t.content, which a
   *  decode_response may put there): the hub declines an answer using
   *  more (px_fresp_uses). Added with issue 21's reasoning answers. */
  unsigned resp_encodes;
  /** A count_tokens request (PX_TR_COUNT_TOKENS): the encoded body at
   *  b->data + start made the protocol's token count body for model, in
   *  place (px_proto_ops_t.count_request's rule, without a document); NULL:
   *  the body is sent as it is. 0 or <0. */
  int (*count_request)(px_buf_t *b, size_t start, const char *model);
} px_fast_ops_t;

/** The protocols' codecs (src/proto/<p>.c). */
extern const px_fast_ops_t px_chat_fast;
extern const px_fast_ops_t px_anthropic_fast;
extern const px_fast_ops_t px_responses_fast;
extern const px_fast_ops_t px_gemini_fast;

/* ------------------------------------------------------------------------ */
/* The walker over a body px_json_request accepted (never invalid JSON)      */

typedef enum { PX_FV_STR, PX_FV_NUM, PX_FV_OBJ, PX_FV_ARR, PX_FV_TRUE, PX_FV_FALSE,
               PX_FV_NULL } px_fv_kind_t;

typedef struct px_fw {
  const char *p;
  size_t n, i;
} px_fw_t;

/** The request walk's table of container ends (json.h's px_json_jumps_t)
 *  of the body being decoded, while a hub decodes it (else table NULL):
 *  any walker over that body, or over a part of it, skips a container in
 *  it by its entry, the rest by reading. at: the entry the last jump used
 *  (a decoder goes forward). */
typedef struct px_fw_jumps {
  const px_json_jumps_t *table;
  size_t at;
} px_fw_jumps_t;
extern px_fw_jumps_t px_fw_jumps;

/** A value: STR: s = the content (escaped); other kinds: raw = the token or
 *  the whole container. */
typedef struct px_fv {
  px_fv_kind_t kind;
  px_fstr_t s;
  px_str_t raw;
} px_fv_t;

/** Open the object / array at the cursor; <0 if it is not one. */
int px_fw_open(px_fw_t *w, char c);
/** Next member of an open object: 1 with its key read and the cursor on its
 *  value; 0 at the end (closing brace consumed); <0 on malformed input. */
int px_fw_member(px_fw_t *w, px_fstr_t *key);
/** Next element of an open array: 1 with the cursor on it; 0 at the end. */
int px_fw_elem(px_fw_t *w);
/** Read (or skip) the value at the cursor. */
int px_fw_value(px_fw_t *w, px_fv_t *v);
/** The kind of the value at the cursor without reading it. */
px_fv_kind_t px_fw_peek(px_fw_t *w);

/** A member name with its length, for the checked reads' tables:
 *  PX_FK("name"). */
typedef struct px_fkey {
  const char *s;
  size_t n;
} px_fkey_t;
#define PX_FK(lit) {lit, sizeof(lit) - 1}
/** Index of key k in keys[0..n), -1 when absent or escaped (the length
 *  and the first byte compared first: most names differ there). */
static inline int px_fk_of(px_fstr_t k, const px_fkey_t *keys, int n) {
  if (k.esc) return -1;
  for (int i = 0; i < n; i++)
    if (keys[i].n == k.n && keys[i].s[0] == k.p[0] && memcmp(keys[i].s, k.p, k.n) == 0)
      return i;
  return -1;
}

/* Checked reads, for a body nothing has validated yet (an upstream
 * answer): each checks what it reads, and what it skips, by jansson's
 * rules (json.h), so that a decoder built on them needs no scan before.
 * *first: 1 right after px_fw_open, kept by the calls. */
/** Read the value at the cursor, checking it (containers whole). 0 or -1. */
int px_fc_value(px_fw_t *w, px_fv_t *v);
/** px_fw_member with the object's grammar checked: 1, 0 at its end, -1. */
int px_fc_member(px_fw_t *w, px_fstr_t *key, int *first);
/** px_fw_elem with the array's grammar checked: 1, 0 at its end, -1. */
int px_fc_elem(px_fw_t *w, int *first);
/** px_fw_fields, checking every member read or skipped. */
int px_fc_fields(px_fw_t *w, const px_fkey_t *keys, int n, px_fv_t *f, unsigned *seen);
/** Only whitespace left after the value read: 0, else -1. */
int px_fc_end(px_fw_t *w);
/** The members an object read by px_fc_tree reads: keys[k] into slot
 *  base + k; sub non-NULL and sub[k] non-NULL: that member, when an object,
 *  is read with its own table where it stands. */
typedef struct px_ftab {
  const px_fkey_t *keys;
  int n, base;
  const struct px_ftab *const *sub;
} px_ftab_t;
/** The object at the cursor checked whole (px_fc_fields' rules, escaped or
 *  repeated keys declined in every object read), its members in t (and
 *  theirs in their tables) into f[slot], bit slot set in *seen (at most 32
 *  slots; a member read with a table: kind PX_FV_OBJ, raw its span), in one
 *  walk. 0 or PX_FAST_DECLINE. */
int px_fc_tree(px_fw_t *w, const px_ftab_t *t, px_fv_t *f, unsigned *seen);
/** Spans of JSON text a caller checked before (a stream's earlier events,
 *  kept by the caller): px_fc_tree_memo skips a value equal to one. */
typedef struct px_fmemo {
  const px_str_t *span;
  int n;
} px_fmemo_t;
/** px_fc_tree where an object or array value that is not read with a
 *  table and equals one of memo's spans byte for byte (so it was checked
 *  before) is compared, not walked again (its slot, if any: kind and raw
 *  span). */
int px_fc_tree_memo(px_fw_t *w, const px_ftab_t *t, px_fv_t *f, unsigned *seen,
                    const px_fmemo_t *memo);

/** px_fs_isn of content with escapes: its value, unescaped on the fly (no
 *  copy), equals the n bytes of lit. */
int px_fs_isn_esc(px_fstr_t s, const char *lit, size_t n);
/** Whether the value of string content s (its escapes read as jansson
 *  reads them: "us\u0065r" is user) equals the n bytes of lit: how a codec
 *  compares a deciding value (a role, a type, an enum) as the reference's
 *  strcmp does. Content with no escape is compared as it stands (the plain
 *  path: one length test and a memcmp). */
static inline __attribute__((always_inline)) int px_fs_isn(px_fstr_t s, const char *lit,
                                                             size_t n) {
  if (s.esc) return px_fs_isn_esc(s, lit, n); /* the rare one: out of line */
  return s.p != NULL && s.n == n && memcmp(s.p, lit, n) == 0;
}
/** px_fs_isn with a NUL-terminated lit. */
static inline __attribute__((always_inline)) int px_fs_is(px_fstr_t s, const char *lit) {
  return px_fs_isn(s, lit, strlen(lit));
}
/** Whether the value of string content s (escapes read) begins with the
 *  n bytes of lit. */
int px_fs_starts(px_fstr_t s, const char *lit, size_t n);
/** px_fs_len of content with escapes. */
size_t px_fs_len_esc(px_fstr_t s);
/** The length of the value of string content s (escapes read). */
static inline size_t px_fs_len(px_fstr_t s) {
  return s.esc ? px_fs_len_esc(s) : s.n;
}
/** The content of s after the first n bytes of its value (n ends at a
 *  character of the value: a prefix px_fs_starts found). */
px_fstr_t px_fs_after(px_fstr_t s, size_t n);
/** Whether the value of string content s (escapes read) ends with the n
 *  bytes of lit. */
int px_fs_ends(px_fstr_t s, const char *lit, size_t n);
/** Index of the value of string content s (escapes read) in
 *  names[0..n), -1 when none: a lookup of an enum value. */
int px_fs_of(px_fstr_t s, const char *const *names, int n);
/** A data URL "data:<media type>;base64,<data>" split as the reference's
 *  px_data_url_split splits its value (the first ";base64,"; a media type
 *  of 1 to mtsz - 1 bytes): 0 with *mt and *data (spans of url, keeping
 *  their escapes), -1 when it is none, PX_FAST_DECLINE when its value is
 *  one but not in the plain spelling (px_fs_plain: "\u003b" may be a ';';
 *  the respelled body's is). */
int px_fs_data_url(px_fstr_t url, size_t mtsz, px_fstr_t *mt, px_fstr_t *data);
/** Whether two string contents have the same value (escapes read), as the
 *  reference's strcmp of both (NULL p: an absent string equals no string). */
int px_fs_same(px_fstr_t a, px_fstr_t b);
/** Whether the first tool of the request named name (by value) is a
 *  custom one (the reference's px_ir_is_custom_tool). */
int px_ftool_custom(const px_freq_t *ir, px_fstr_t name);
/** px_fs_is with a string literal: its length known where it is written. */
#define PX_FS_IS(s, lit) px_fs_isn((s), "" lit, sizeof(lit) - 1)
/** The value of string content s (escapes read) NUL-terminated into buf
 *  (for a lookup by C string: a finish reason, a stop word; for a
 *  message): its length, or size when it does not fit (buf then holds the
 *  value cut to size - 1 bytes). */
size_t px_fs_value(px_fstr_t s, char *buf, size_t size);
/** The value of s for a refusal's message ("%s"): unescaped into a buffer
 *  of the thread's, valid until the next call (cut at the message's size,
 *  where the message is cut anyway); no buffer on the decoders' stacks. */
const char *px_fs_msg(px_fstr_t s);
/** px_fs_plain of content with escapes. */
int px_fs_plain_esc(px_fstr_t s);
/** Whether the content s is in its plain spelling (what px_json_respell
 *  writes: the only escapes are of a quote, a backslash or a control
 *  character), so that every other character (the ',' ';' ':' '/' a codec
 *  splits a value at) stands where it is written. A codec that must split
 *  a value declines one that is not (the hub's respelling makes it so). */
static inline int px_fs_plain(px_fstr_t s) {
  return !s.esc || px_fs_plain_esc(s);
}
/** A raw integer token with no sign, fraction or exponent -> *v (>= 0). */
int px_fw_uint(px_str_t raw, int64_t *v);
/** Whether a raw JSON array / object is empty. */
int px_fw_empty(px_str_t raw);
/** Whether the string content is only JSON whitespace characters (raw). */
int px_fs_blank(px_fstr_t s);
/** Whether the string's value (unescaped) is only whitespace: 1, 0, or -1
 *  when it cannot be read. */
int px_fs_blank_value(px_fstr_t s);

/** Index of key k in names[0..n), -1 when absent or escaped. */
int px_fw_key_of(px_fstr_t k, const char *const *names, int n);
/** The object at the cursor: its members named in names[0..n) into
 *  f[index], bit index set in *seen; other members skipped. Declines on an
 *  escaped key (it might name one of them), a repeated one, or malformed
 *  input. 0 or PX_FAST_DECLINE. */
int px_fw_fields(px_fw_t *w, const char *const *names, int n, px_fv_t *f, unsigned *seen);
/** px_fw_fields over the value v (declines unless an object). */
int px_fv_fields(const px_fv_t *v, const char *const *names, int n, px_fv_t *f,
                 unsigned *seen);
/** px_fw_fields / px_fv_fields with a px_fkey_t table (faster: the names'
 *  lengths are known). */
int px_fw_kfields(px_fw_t *w, const px_fkey_t *keys, int n, px_fv_t *f, unsigned *seen);
int px_fv_kfields(const px_fv_t *v, const px_fkey_t *keys, int n, px_fv_t *f,
                  unsigned *seen);
/** Mark key index k seen in *seen; 1 if it was already (jansson keeps the
 *  last of repeated members, the walker would read both). */
static inline int px_fw_seen_twice(unsigned *seen, int k) {
  if (*seen & (1u << k)) return 1;
  *seen |= 1u << k;
  return 0;
}
/** Whether a raw number token is an integer as jansson reads it (no
 *  fraction, no exponent). */
int px_fw_is_int(px_str_t raw);
/** An integer member as px_jint reads it: *out = dflt when v is not an
 *  integer, else its value (negative ones too: an upstream's usage of -1
 *  is the reference's to clamp, not a decline). */
int px_fw_jint(const px_fv_t *v, int64_t dflt, int64_t *out);
/** {"<key>": n} of a usage details object v: *out = the integer, -1
 *  when v is no object or has no integer there. 0 or decline. */
int px_fw_detail(const px_fv_t *v, const char *key, int64_t *out);
/** An OpenAI usage object (Chat, Responses) at the cursor into ir, read
 *  with checked reads (px_fc_*), its details objects where they stand:
 *  keys names the input and output counts and their details objects
 *  (cached_tokens, reasoning_tokens), in that order. 0 or decline. */
int px_fc_openai_usage(px_fw_t *w, const px_fkey_t keys[4], px_fresp_t *ir);
/** A response's creation time (Chat created, Responses created_at; v NULL:
 *  absent): an integer sets ir->created; other values are ignored, as
 *  px_jint would (any int64, as px_fw_jint). */
int px_fast_created(const px_fv_t *v, px_fresp_t *ir);
/** OpenAI's (Chat, Responses) string tool_choice: auto, none, required. */
int px_fast_openai_tc(px_fstr_t s, px_freq_t *ir);
/** Whether the TOOL_CALL ids of a part list are non-empty, unescaped and
 *  unique (the jansson codecs mint the others: the fast encoders decline). */
int px_fast_ids_plain(const px_fpart_t *parts);

/* ------------------------------------------------------------------------ */
/* Checked views: the stream codecs' reading of an event (src/proto/fast.c). */
/* A value is checked whole once (px_jv_parse: px_fc_value's rules, an      */
/* object or an array as json_loadb with flags 0 takes them), then read     */
/* where it lies, with no document: a member is the last of its name (names */
/* compared unescaped), as jansson's document holds it. A view whose        */
/* raw.ptr is NULL is absent (json_object_get's NULL).                      */

/** Whether view v is present and of kind k. */
static inline int px_jv_is(const px_fv_t *v, px_fv_kind_t k) {
  return v->raw.ptr != NULL && v->kind == k;
}
/** The text p[0..n) as one checked object or array: 0, or -1 (v absent). */
int px_jv_parse(const char *p, size_t n, px_fv_t *v);
/** Member `key` of object o (the last of a repeated one): 1, or 0 with out
 *  absent (o absent or not an object, or no such member). */
int px_jv_get(const px_fv_t *o, const char *key, px_fv_t *out);
/** Members keys[0..n) of object o (n <= 32) read in one walk, each the
 *  last of its name, into out[k] (absent when not there, or o is not an
 *  object); the bits of those found. */
unsigned px_jv_fields(const px_fv_t *o, const px_fkey_t *keys, int n, px_fv_t *out);
/** An iterator over a checked object's members or an array's elements. */
typedef struct px_jv_it {
  px_fw_t w;
} px_jv_it_t;
/** Start it on c (an object or an array; anything else: nothing to give). */
void px_jv_iter(px_jv_it_t *it, const px_fv_t *c);
/** The next member of the object as jansson iterates its document: each
 *  name once, at its first place, with its last value. 1, or 0 at the end. */
int px_jv_member(px_jv_it_t *it, px_fstr_t *key, px_fv_t *val);
/** The next element of the array: 1, or 0 at the end. */
int px_jv_elem(px_jv_it_t *it, px_fv_t *v);
/** json_array_size: elements of array a, 0 when not an array. */
size_t px_jv_size(const px_fv_t *a);
/** A string's value (content as written, escaped when f.esc) unescaped and
 *  NUL-terminated in the arena (*len its length, when len is not NULL);
 *  NULL out of memory. */
const char *px_fs_cstr(px_arena_t *a, px_fstr_t f, size_t *len);
/** json_string_value: the string's value unescaped and NUL-terminated in
 *  the arena (*len its length, when len is not NULL); NULL when v is not a
 *  string (or out of memory). */
const char *px_jv_str(px_arena_t *a, const px_fv_t *v, size_t *len);
/** json_is_integer + json_integer_value: 1 with *out, else 0. */
int px_jv_int(const px_fv_t *v, int64_t *out);
/** The string member `key` of o (px_jv_str: NUL-terminated in the arena),
 *  PX_STR_NULL when it is not one. */
px_str_t px_jv_sget(px_arena_t *a, const px_fv_t *o, const char *key);
/** The integer member `key` of o, else dflt. */
int64_t px_jv_iget(const px_fv_t *o, const char *key, int64_t dflt);
/** px_fb_jdump writes fewer than this many bytes per byte of the value
 *  it reads (a real grows most: "1e-7" -> "9.9999999999999995e-8"): the
 *  room a value re-written from one event may take. */
#define PX_JV_GROWTH 8
/** The value v written as json_dumps(JSON_COMPACT) writes jansson's
 *  document of it (strings re-escaped as jansson does, reals as jansson
 *  formats them, an object's repeated names once, at their first place, with
 *  the last value). 0 or b's error. */
int px_fb_jdump(px_buf_t *b, const px_fv_t *v);

/* writers */
int px_fb_i64(px_buf_t *b, int64_t v);
/** Request bodies in parts (px_tr_ctx_t.spans): while the hub's encoder
 *  writes into b, a raw copy of at least PX_FB_SPAN_MIN bytes that lie in
 *  the client's body [lo, hi) is noted in s as a span at b's length, not
 *  copied (a string copied raw because both sides escape it alike). The hub
 *  sets it around one encode (px_translate_request_fast) and clears b. A
 *  request encoder therefore only appends to b: it never reads back or
 *  takes back what it wrote (the fuzzers and fast_agents hold the body in
 *  parts to the body written whole). */
#define PX_FB_SPAN_MIN 256
typedef struct px_fb_spanning {
  const px_buf_t *b;
  const char *lo, *hi;
  px_spans_t *s;
} px_fb_spanning_t;
extern px_fb_spanning_t px_fb_spanning;
/** The span of p (or its copy, p not in the body or no memory for the
 *  span): px_fb_put's long case while spanning. */
int px_fb_span(px_buf_t *b, const void *p, size_t n);
/** px_buf_append with the usual case (room reserved) inline. */
static inline int px_fb_put(px_buf_t *b, const void *p, size_t n) {
  if (n >= PX_FB_SPAN_MIN && b == px_fb_spanning.b) return px_fb_span(b, p, n);
  if (n - 1 < b->size - b->len) { /* n == 0 wraps: the call, a no-op */
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
  }
  return px_buf_append(b, p, n);
}
static inline int px_fb_lit(px_buf_t *b, const char *s) {
  return px_fb_put(b, s, strlen(s)); /* inlined: the length of a literal folds */
}
int px_fb_str(px_buf_t *b, px_fstr_t s); /* quoted */
/** The object at b->data + start (an encoder's output: valid, compact or
 *  not) without its top-level members named in drop[0..n), rewritten in
 *  place (no copy of the body). 0, or <0 on a body that is not one object
 *  (b then holds no usable object). */
int px_fb_drop_members(px_buf_t *b, size_t start, const px_fkey_t *drop, int n);
int px_fb_raw(px_buf_t *b, px_str_t r);
int px_fb_key(px_buf_t *b, int *first, const char *key); /* ,"key": */
/** key_lit (`,"name":`) and the raw value, when r is set (r.ptr). */
int px_fb_opt_raw(px_buf_t *b, const char *key_lit, px_str_t r);
/** key_lit and the quoted string, when s is set (s.p). */
int px_fb_opt_str(px_buf_t *b, const char *key_lit, px_fstr_t s);
/** The texts of the TEXT parts of a list, one after the other (inside a
 *  string the caller opens and closes). */
int px_fb_texts(px_buf_t *b, const px_fpart_t *parts);
/** OpenAI's (Chat, Responses) "auto" / "none" / "required" tool_choice
 *  member (tc one of them) and parallel_tool_calls (when >= 0). */
int px_fb_openai_tc(px_buf_t *b, px_ftc_t tc, int parallel);

/** Allocate a part (zeroed, linked by the caller). */
px_fpart_t *px_fpart_new(px_arena_t *a, px_fpart_type_t t);
/** A TEXT part of text s; NULL when out of memory. */
px_fpart_t *px_fpart_text(px_arena_t *a, px_fstr_t s);
/** Append part p to the list *head .. *tail. */
static inline void px_fpart_push(px_fpart_t **head, px_fpart_t **tail, px_fpart_t *p) {
  if (*tail) (*tail)->next = p;
  else *head = p;
  *tail = p;
}
/** A new message appended to ir->msgs; NULL when out of memory. */
px_fmsg_t *px_fmsg_push(px_freq_t *ir, px_arena_t *a, int assistant);
/** A new tool appended to ir->tools: name, desc (when a string), params
 *  (when an object, else dflt), strict (true/false, else -1); the members
 *  not given are NULL. NULL when out of memory. */
px_ftool_t *px_ftool_push(px_freq_t *ir, px_arena_t *a, px_fstr_t name,
                          const px_fv_t *desc, const px_fv_t *params,
                          const px_fv_t *strict, px_str_t dflt);
/** OpenAI's (Chat, Responses) parameters of a function tool without them. */
#define PX_FAST_OPENAI_PARAMS ((px_str_t){"{\"type\":\"object\",\"properties\":{}}", 33})

/** px_fast_args_object: the arguments are no JSON object (another JSON
 *  value, or no JSON), as the reference reads them. */
#define PX_FAST_ARGS_NONE 4
/** Tool-call arguments as escaped string content -> the unescaped JSON
 *  text checked to be one object as the reference reads it (jansson's
 *  rules) into part->input, to be spliced as written (a member twice
 *  included, as in any object the codecs carry). 0; PX_FAST_ARGS_NONE: no
 *  object;
 *  PX_FAST_DECLINE: out of memory, or nested deeper than the one reader
 *  takes (PX_JSON_MAX_DEPTH; jansson reads it). */
int px_fast_args_object(px_arena_t *a, px_fpart_t *part);
/** A raw JSON value -> its compact dump as json_dumps writes it
 *  (px_fb_jdump: no document) as escaped string content (what the jansson
 *  codecs put in IR arguments). 0 or decline. */
int px_fast_dump_value(px_arena_t *a, px_str_t raw, px_fstr_t *out);

/* ---- opaque reasoning tokens (protoutil.h px_rtok_*, on fast parts) ---- */

/** The index of IR token field `field` in px_fpart_t.tok (-1: none). */
int px_frtok_index(const char *field);
/** A token a `client` client replayed (its own token field's string
 *  content, escaped) -> set in reasoning part p's tok[] by its tag, as
 *  px_rtok_in does (an empty token sets nothing). 0, or PX_FAST_DECLINE
 *  when the token has escapes where a tag would be. */
int px_frtok_in(px_proto_t client, px_fpart_t *p, px_fstr_t tok);
/** The token a `client` client carries for reasoning part p, as
 *  px_rtok_out picks it: 1 with *tag (the tag to write before it, maybe
 *  "") and *tok set; 0 when p has none the client can carry. */
int px_frtok_out(px_proto_t client, const px_fpart_t *p, const char **tag,
                 px_fstr_t *tok);
/** px_frtok_out written as one quoted JSON string; 0 when written, 1 when
 *  p has none for the client (nothing written), <0 on memory. */
int px_fb_rtok(px_buf_t *b, px_proto_t client, const px_fpart_t *p);
/** A member the reference drops, named in lossy by its own key (lossy
 *  NULL: only whether it can be); declines
 *  a name a lossy list cannot hold as one element (escapes, a comma, "...",
 *  empty or 256 bytes and more). */
int px_fast_lossy_key(px_lossy_t *lossy, px_fstr_t k);
/** The one place where a decoded request is fitted to the upstream's
 *  capabilities: IR fields the upstream's caps cannot hold (prompt_cache_key,
 *  verbosity) are cleared and named in lossy by the client's names (the hub,
 *  between decode and encode; src/proto/common.c: one table). */
void px_fit_fast_request(const px_tr_ctx_t *ctx, px_freq_t *ir, px_lossy_t *lossy);
/** Whether the IR asks for reasoning (px_lossy_predict's rule): an IR
 *  reasoning object, not enabled false, effort not "none". */
int px_freq_reasoning_on(const px_freq_t *ir);

/** What the one reader's rule refuses in a checked body (one walk, on a
 *  body respelled by px_json_respell: names compared byte for byte are
 *  compared unescaped): PX_ODD_REPEATED with path ("messages[2].role", cut
 *  at cap) the first member an object holds twice; else
 *  PX_ODD_ESCAPED_NAME with the path of the first member name that keeps
 *  escapes in its plain spelling (a quote, a backslash or a control
 *  character: no name a codec reads); else PX_ODD_UNNAMED with the path of
 *  the first name a lossy list cannot hold (px_fast_lossy_key: empty, a
 *  comma, "...", 256 bytes and more); 0 none; -1 malformed. */
#define PX_ODD_REPEATED 1
#define PX_ODD_ESCAPED_NAME 2
#define PX_ODD_UNNAMED 3
int px_fast_odd_member(const char *p, size_t n, char *path, size_t cap);

/* ------------------------------------------------------------------------ */
/* Hub (src/proto/translate_fast.c)                                                */

/** A request in the fast IR as the hub makes it: zeroed, the tri-state
 *  members (parallel, reasoning_enabled, rf_strict) unset (-1). */
void px_freq_init(px_freq_t *ir);
/** The hub's steps for one request: px_freq_init, in's decoder (context
 *  dc), the caps fit, the declines for what op's encoder does not write,
 *  the stream's lossy prediction and op's encoder (context ec) into out.
 *  The hub passes one context twice; the tests and fuzzers chain halves.
 *  0, or the failing step's code (PX_FAST_REFUSE with *err set). */
int px_fast_request_steps(const px_tr_ctx_t *dc, const px_tr_ctx_t *ec, const px_fast_ops_t *in,
                          const px_fast_ops_t *op, const char *body, size_t len, px_freq_t *ir,
                          px_arena_t *a, px_buf_t *out, px_lossy_t *l, px_tr_err_t *err);
/** The fast path of px_translate_request_body: 0 with *out (malloc'd, NUL-
 *  terminated) and lossy merged; PX_FAST_REFUSE with *err set (err may be
 *  NULL) when a codec refuses the body as the reference would;
 *  PX_FAST_DECLINE when the body is not of the common shape (nothing
 *  changed). */
int px_translate_request_fast(const px_tr_ctx_t *ctx, const char *body, size_t len,
                              int flags, char **out, size_t *out_len, px_lossy_t *lossy,
                              px_tr_err_t *err);
/** The fast path of a non-streaming upstream body -> client body: 0 with
 *  out filled and lossy merged and, when usage is not NULL, the body's
 *  usage merged into *usage as px_usage_scan would read it (the
 *  decoder read it exactly: no second walk); PX_FAST_USAGE when taken the
 *  same way but the usage was not read (the caller scans the body);
 *  PX_FAST_REFUSE with *err set (err may be NULL) when a codec refuses the
 *  answer as the reference would (out reset); PX_FAST_DECLINE otherwise
 *  (out reset, usage untouched). The caller then parses the body and calls
 *  px_translate_response. */
#define PX_FAST_USAGE 2
int px_translate_response_fast(const px_tr_ctx_t *ctx, const char *body, size_t len,
                               px_buf_t *out, px_lossy_t *lossy, px_usage_t *usage,
                               px_tr_err_t *err);
/** The gateway's translation of a non-streaming upstream answer: the fast
 *  path; what it declines as written is read in its plain spelling
 *  (px_json_respell) and what it still declines is refused: 0 or
 *  PX_FAST_USAGE as px_translate_response_fast, else PX_FAST_REFUSE with
 *  *err set (a codec's refusal, or PX_ERR_BAD_GATEWAY naming the answer's
 *  problem: invalid JSON, a member twice, a name no codec reads). */
int px_translate_response_body(const px_tr_ctx_t *ctx, const char *body, size_t len,
                               px_buf_t *out, px_lossy_t *lossy, px_usage_t *usage,
                               px_tr_err_t *err);
/** A usage counter (v: the member, NULL when absent) for
 *  px_fresp_t.usage_in / usage_out as px_usage_scan counts it: a
 *  non-negative integer as jansson reads it, else -1. */
void px_fast_usage_count(const px_fv_t *v, int64_t *out);
/** Tests only: how many requests / responses the fast path took. */
void px_translate_fast_counts(unsigned long *requests, unsigned long *responses);

#endif
