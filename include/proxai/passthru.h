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

/** Stream watcher/rewriter for a pass-through SSE body. Only complete
 *  events are passed on, so the client's stream always stands at an event
 *  boundary and an error event can end it at any point (SPEC section 5). */
typedef struct px_passthru {
  px_proto_t proto;
  const char *model;  /**< client model to write into events; NULL = no rewrite */
  int strip_usage;    /**< Chat: drop the usage-only chunk (the gateway asked
                           for include_usage, the client did not) */
  px_sse_t sse;       /**< observes events for the terminal / error state */
  px_buf_t raw;       /**< bytes of the unfinished event, not passed on yet */
  size_t line_len;    /**< bytes on the current raw line */
  int last_cr;
  int cr_end;         /**< the last event ended on CR (1 passed on, 2 dropped):
                           a following LF belongs to it */
  int terminal;       /**< terminal event seen */
  int upstream_error; /**< the upstream sent its own error event */
  int failed;         /**< <0: an event over the cap (PX_ETOOBIG) or a buffer
                           error; the stream is broken, feed refuses more */
  px_usage_t usage;   /**< usage seen so far, for logs and tpm */
} px_passthru_t;

void px_passthru_init(px_passthru_t *pt, px_proto_t proto, const char *model);
/** Feed upstream bytes; the bytes to send to the client (complete events,
 *  rewritten or dropped as configured) are appended to out. Returns 0, or <0
 *  when the stream is broken (an event over PX_MAX_SSE_EVENT): out then holds
 *  the complete events before the failure, and the caller ends the client's
 *  stream with its protocol's error event. */
int px_passthru_feed(px_passthru_t *pt, const char *p, size_t n, px_buf_t *out);
/** Upstream ended: 1 when the stream ended properly (terminal or upstream
 *  error event seen, nothing broken), else 0. An unfinished last event is
 *  dropped, never passed on. */
int px_passthru_finish(const px_passthru_t *pt);
void px_passthru_done(px_passthru_t *pt);

/** Usage of a non-streaming response body of protocol p: 1 when p[0..n)
 *  reads as one JSON object (its usage, if any, read into u), else 0 (u
 *  untouched). Every protocol puts usage last, so a body ending in '}' is
 *  read back from its end to the top-level usage member (the last one when
 *  the name repeats, as JSON parsers keep): the bytes after usage are
 *  walked, not the whole answer, and the part before usage is not checked.
 *  Other bodies get one forward walk (px_json_complete's answer). */
int px_usage_scan(px_proto_t p, const char *body, size_t len, px_usage_t *u);

/** Read usage from a non-streaming response body of protocol p. */
void px_usage_from_body(px_proto_t p, const char *body, size_t len, px_usage_t *u);

#endif
