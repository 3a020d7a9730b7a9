/**
 * passthru.h - same-protocol pass-through: bytes are forwarded untouched,
 * except the `model` value when the route rewrites it (SPEC section 5), and
 * the stream is watched for its terminal event.
 */
#ifndef PROXAI_PASSTHRU_H
#define PROXAI_PASSTHRU_H

#include "proxai/buf.h"
#include "proxai/json.h"
#include "proxai/proto.h"
#include "proxai/sse.h"
#include "proxai/usage.h"

/** The watch descriptor's event names whose lengths a watcher keeps. */
enum {
  PX_N_TERMINAL, /* three of them */
  PX_N_ERROR = 3,
  PX_N_START,
  PX_N_DELTA,
  PX_N_DATA,
  PX_N_COUNT
};

/** One px_passthru_feed call's framing (passthru.c). */
typedef struct px_pt_feed px_pt_feed_t;

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
  px_pt_feed_t *feed; /**< the feed under way (its SSE parser's hooks) */
  const px_wire_watch_t *w;           /**< the protocol's watch descriptor */
  unsigned char klen[4];              /**< lengths of the keys data chunks are tested
                                           for (0: not tested; passthru.c) */
  int keys;                           /**< any of them tested */
  unsigned char name_len[PX_N_COUNT]; /**< lengths of the event names (PX_N_*) */
  px_buf_t utail;                     /**< the bytes the last usage read depended on */
  int cr_end;         /**< the last event ended on CR (1 passed on, 2 dropped):
                           a following LF belongs to it */
  int terminal;       /**< terminal event seen */
  int upstream_error; /**< the upstream sent its own error event */
  int failed;         /**< <0: an event over the cap (PX_ETOOBIG) or a buffer
                           error; the stream is broken, feed refuses more */
  px_usage_t usage;   /**< usage seen so far, for logs and tpm */
  px_answer_t *answer;        /**< NULL, or the answer's id, model and finish
                                   reason kept here (px_passthru_answer) */
  const char *fin_null;       /**< a data-only stream's "finish name":null */
  unsigned char fin_null_len; /**< its length; 0: not a data-only stream */
  unsigned char fin_bit; /**< the finish name's bit among the keys tested; 0: not one */
} px_passthru_t;

void px_passthru_init(px_passthru_t *pt, px_proto_t proto, const char *model);
/** Keeps the answer's id, model and finish reason in a (NULL: none) as the
 *  events pass (a traced request), read where the watch already looks. */
void px_passthru_answer(px_passthru_t *pt, px_answer_t *a);
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

#endif
