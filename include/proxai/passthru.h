/**
 * passthru.h - same-protocol pass-through: bytes are forwarded untouched,
 * except the `model` value when the route rewrites it (SPEC section 5), and
 * the stream is watched for its terminal event.
 */
#ifndef PROXAI_PASSTHRU_H
#define PROXAI_PASSTHRU_H

#include "proxai/buf.h"
#include "proxai/proto.h"
#include "proxai/sse.h"

enum { PX_JSON_FOUND = 1, PX_JSON_ABSENT = 0, PX_JSON_BAD = -1, PX_JSON_MORE = -2 };

/**
 * Locate the value of member path[0], path[1], ... (objects only) in the JSON
 * text p of length n. On PX_JSON_FOUND sets *start and *len to the value token (a
 * string includes its quotes). PX_JSON_MORE: the text ended first (a prefix).
 */
int px_json_find(const char *p, size_t n, const char *const *path, size_t depth,
                 size_t *start, size_t *len);

/** Whether p is one balanced JSON object with nothing after it (strings
 *  closed, brackets matched). A cheap structural check, not a full parse. */
int px_json_complete(const char *p, size_t n);

/** Append p with the string value at path replaced by `value` (escaped) to
 *  out. Returns PX_JSON_FOUND when replaced, else appends p unchanged and
 *  returns the px_json_find result; <0 only for buffer errors. */
int px_json_replace_str(px_buf_t *out, const char *p, size_t n,
                        const char *const *path, size_t depth, const char *value);

/** Stream watcher/rewriter for a pass-through SSE body. */
typedef struct px_passthru {
  px_proto_t proto;
  const char *model;  /**< client model to write into events; NULL = no rewrite */
  px_sse_t sse;       /**< observes events for the terminal / error state */
  px_buf_t raw;       /**< rewrite mode: bytes of the event being collected */
  size_t line_len;    /**< bytes on the current raw line */
  int last_cr;
  int terminal;       /**< terminal event seen */
  int upstream_error; /**< the upstream sent its own error event */
  int blind;          /**< watch-only mode met an event over the cap: the
                           bytes flow on, the end is no longer judged */
  px_usage_t usage;   /**< final usage seen, for logs and tpm */
} px_passthru_t;

void px_passthru_init(px_passthru_t *pt, px_proto_t proto, const char *model);
/** Feed upstream bytes. Without rewrite nothing is appended (forward the
 *  input as is); with rewrite complete events are appended to out. */
int px_passthru_feed(px_passthru_t *pt, const char *p, size_t n, px_buf_t *out);
/** Upstream ended: flush what is left (rewrite mode). Returns 1 when the
 *  stream ended properly (terminal or upstream error event seen), else 0. */
int px_passthru_finish(px_passthru_t *pt, px_buf_t *out);
void px_passthru_done(px_passthru_t *pt);

/** Read usage from a non-streaming response body of protocol p. */
void px_usage_from_body(px_proto_t p, const char *body, size_t len, px_usage_t *u);

#endif
