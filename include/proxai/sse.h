/**
 * sse.h - incremental Server-Sent Events parser (no I/O).
 *
 * Bytes may be split anywhere (mid-line, mid-UTF-8, between CR and LF).
 * LF, CRLF and CR line ends; multi-line data (joined with "\n"); comment
 * lines; `event:`, `id:` and `retry:` fields. An event longer than the cap
 * is an error for that stream (PX_ETOOBIG), never unbounded growth.
 */
#ifndef PROXAI_SSE_H
#define PROXAI_SSE_H

#include <string.h>

#include "proxai/buf.h"

/** Largest single SSE event we accept from an upstream. */
#define PX_MAX_SSE_EVENT (4u << 20)

/** One parsed event; views are valid only during the callback. */
typedef struct px_sse_event {
  px_str_t event;  /**< `event:` field, empty when absent */
  px_str_t data;   /**< data lines joined with "\n" */
  px_str_t id;     /**< `id:` field, empty when absent */
} px_sse_event_t;

/** Called once per dispatched event; non-zero return stops parsing and is
 *  returned by px_sse_feed. */
typedef int (*px_sse_cb)(void *arg, const px_sse_event_t *ev);

/** Called at every blank line, after the event it ends was dispatched (or
 *  discarded: an event without data, comments only), with the offset in
 *  the fed chunk just past the line's end (a CRLF's LF included when it is
 *  in the chunk; a CR ending the chunk may have its LF in the next one,
 *  which the parser then skips). Lets a caller that forwards the stream's
 *  bytes frame them by events in the same pass. Non-zero return stops
 *  parsing and is returned by px_sse_feed. */
typedef int (*px_sse_end_cb)(void *arg, size_t end);

typedef struct px_sse {
  px_buf_t line;    /**< partial line carried between feeds */
  px_buf_t data;    /**< data of the event being built */
  px_buf_t event;
  px_buf_t id;
  int has_data;
  int saw_cr;       /**< last byte fed was CR (a following LF is skipped) */
  px_sse_cb cb;
  px_sse_end_cb on_end; /**< NULL, or the blank line hook (arg is cb's) */
  void *arg;
  int err;          /**< sticky PX_ETOOBIG after an over-long event */
} px_sse_t;

void px_sse_init(px_sse_t *p, size_t cap, px_sse_cb cb, void *arg);
/** Feed bytes; returns 0, PX_ETOOBIG, or the callback's non-zero value. */
int px_sse_feed(px_sse_t *p, const char *data, size_t len);
/** Release buffers. */
void px_sse_done(px_sse_t *p);

/** Append one SSE event ("event: E\n" when E non-NULL, "data: D\n\n") to
 *  out. data must not contain newlines (JSON never does). */
int px_sse_write(px_buf_t *out, const char *event, const char *data, size_t len);

#endif
