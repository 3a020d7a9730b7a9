/**
 * usage.h - token usage read from an answer's raw JSON, by the member names
 * of the protocol's watch descriptor (px_wire_watch_t): the usage object
 * and its counts found by the answer's structure, by the one reader's
 * rules for names and numbers.
 */
#ifndef PROXAI_USAGE_H
#define PROXAI_USAGE_H

#include <stddef.h>

#include "proxai/proto.h"

/** Usage of a non-streaming response body of protocol p: 1 when p[0..n)
 *  reads back as one JSON object (its usage, if any, read into u), else 0
 *  (u untouched). Every protocol puts usage last, so the body is read back
 *  from its end to the top-level usage member, structure only, by the one
 *  reader's rules for names (compared unescaped; the last of a repeated
 *  one, as jansson keeps it) and counts (a non-negative integer as jansson
 *  reads the number token): the bytes after usage are walked, not the
 *  whole answer, and the part before usage is not checked. */
int px_usage_scan(px_proto_t p, const char *body, size_t len, px_usage_t *u);

/** px_usage_scan, and *at: where the top-level usage member's name starts
 *  when the walk back from the end met it, else PX_JSON_NPOS (a trace's
 *  answer reading starts there: px_answer_body). */
int px_usage_scan_at(px_proto_t p, const char *body, size_t len, px_usage_t *u,
                     size_t *at);

/** px_usage_scan on the last bytes of a body whose front was cut away (a
 *  pass-through answer too large to hold: its tail). */
void px_usage_tail(px_proto_t p, const char *tail, size_t len, px_usage_t *u);

/** Usage in one stream event of the protocol of w: its usage object under
 *  member outer (NULL: at the top), each found back from the end as
 *  px_usage_scan finds it and read the same way. Counts found are set in
 *  u. */
void px_usage_read(const px_wire_watch_t *w, const char *p, size_t n, const char *outer,
                   px_usage_t *u);

/** What an answer says of itself, for traces (SPEC 15): its id, its model
 *  and its finish reason (of its last choice: the one there usually is),
 *  as the protocol spells them;
 *  "" when not seen. Values are cut to fit. */
typedef struct px_answer {
  char id[96];
  char model[96];
  char finish[32];
  unsigned char id_len, model_len, finish_len; /**< their lengths */
  unsigned char noted; /**< 1: an encoder notes what it writes
                            (px_answer_wrote): nothing to read back */
} px_answer_t;

/** The id, model and finish reason in a body or one stream event of the
 *  protocol of w, under member outer (NULL: at the top), by the watch
 *  descriptor's names; the id and model are kept once seen, a finish
 *  reason that is a string replaces the last. */
void px_answer_read(const px_wire_watch_t *w, const char *p, size_t n, const char *outer,
                    px_answer_t *a);

/** px_answer_read at the top (outer NULL) without the finish reason: the
 *  id and the model alone. */
void px_answer_ids(const px_wire_watch_t *w, const char *p, size_t n, px_answer_t *a);
/** ... and the finish reason alone. */
void px_answer_finish(const px_wire_watch_t *w, const char *p, size_t n, px_answer_t *a);

/** Sets a's id, model and finish reason (JSON string contents; len 0: not
 *  set), cut to fit as px_answer_read cuts them. */
void px_answer_set(px_answer_t *a, px_str_t id, px_str_t model, px_str_t finish);

/** Sets a (NULL: nothing) to a client answer as its encoder wrote it in
 *  b, and a->noted: the id's string content at [id_at, id_end) (empty:
 *  none), the model's JSON value at [model_at, model_end) (a string: its
 *  content; else none), the finish word (NULL: none). */
void px_answer_wrote(px_answer_t *a, const px_buf_t *b, size_t id_at, size_t id_end,
                     size_t model_at, size_t model_end, const char *finish);

/** px_answer_read on a whole body (outer NULL) whose usage member starts
 *  at tail (px_usage_scan_at; PX_JSON_NPOS: not known): a finish reason
 *  before usage is looked for back from there first. Nothing is read when
 *  a's id, model and finish reason are all set (by its decoder). */
void px_answer_body(const px_wire_watch_t *w, const char *p, size_t n, size_t tail,
                    px_answer_t *a);

/** px_answer_read on one stream event of the protocol of w (named event,
 *  data p[0..n)): where its start, delta and terminal events, or every
 *  data chunk, keep them. */
void px_answer_event(const px_wire_watch_t *w, px_str_t event, const char *p, size_t n,
                     px_answer_t *a);

#endif
