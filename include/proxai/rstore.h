/**
 * rstore.h - stored responses in the state backend (SPEC section 14).
 *
 * A stored turn is one record under its response id: its owner (the key's
 * name), the previous response id, its own input items and the response
 * object the client received. A chain is read in one round trip to the
 * backend (the Redis script walks the previous ids server-side), bounded
 * by a byte and a turn limit; a turn holds only its own items, so a chain
 * of n turns costs its size once, never n times. Records expire ttl after
 * creation; past max_size the oldest go first.
 *
 * A call that cannot start (no backend, backend unreachable, no memory)
 * returns NULL and never calls its callback; one that started ends in
 * exactly one callback, always later (from the loop), unless cancelled.
 */
#ifndef PROXAI_RSTORE_H
#define PROXAI_RSTORE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proxai/proto.h"

typedef enum px_rs_status {
  PX_RS_OK,
  PX_RS_NOT_FOUND,   /**< unknown, expired, deleted, or another owner's */
  PX_RS_TOO_BIG,     /**< the chain is over the byte or turn limit */
  PX_RS_UNAVAILABLE, /**< the backend is unreachable or has no store */
} px_rs_status_t;

typedef struct px_rs_op px_rs_op_t;

/** Where and how long: from the configuration ([state] prefix, [responses]). */
typedef struct px_rs_where {
  uv_loop_t *loop; /**< the worker's: callbacks come from it */
  const char *prefix;
  uint64_t ttl_ms;
  uint64_t max_size;
  uint64_t timeout_ms; /**< Redis: each call's bound ([responses] timeout) */
} px_rs_where_t;

/** A chain (or one turn): turns oldest first, views valid during the call;
 *  missing: the id not found (the named one, or an ancestor gone). */
typedef void (*px_rs_chain_fn)(void *arg, px_rs_status_t st,
                               const px_stored_turn_t *turns, size_t n,
                               const char *missing);
typedef void (*px_rs_done_fn)(void *arg, px_rs_status_t st);

/** Whether a backend can hold stored responses in this worker. */
int px_rs_available(void);
/** The chain ending at id (owner's), at most max_bytes of items and
 *  max_turns turns (PX_RS_TOO_BIG past either). */
px_rs_op_t *px_rs_chain(const px_rs_where_t *w, const char *owner, const char *id,
                        size_t max_bytes, size_t max_turns, px_rs_chain_fn cb, void *arg);
/** One turn (n = 1) and nothing before it. */
px_rs_op_t *px_rs_get(const px_rs_where_t *w, const char *owner, const char *id,
                      px_rs_chain_fn cb, void *arg);
/** Keep a turn under a new id; input and response stay valid until the
 *  callback or px_rs_cancel (the op copies what it may still send). */
px_rs_op_t *px_rs_put(const px_rs_where_t *w, const char *id, const char *owner,
                      const char *prev, px_str_t input, px_str_t response,
                      px_rs_done_fn cb, void *arg);
/** Remove the owner's turn (PX_RS_NOT_FOUND when there is none). */
px_rs_op_t *px_rs_delete(const px_rs_where_t *w, const char *owner, const char *id,
                         px_rs_done_fn cb, void *arg);
/** During op's chain callback: turn t (its views) is no longer needed, its
 *  memory goes now rather than after the callback (a long chain copied
 *  turn by turn is never in memory twice). */
void px_rs_release(px_rs_op_t *op, size_t t);
/** cb (PX_RS_OK) from the loop, after what the caller's callback holds is
 *  released (a chain's reply). */
px_rs_op_t *px_rs_defer(const px_rs_where_t *w, px_rs_done_fn cb, void *arg);
/** Its callback will not be called (the op ends by itself). A write
 *  still completes (sent again in full if Redis forgot the script), a
 *  read is dropped. */
void px_rs_cancel(px_rs_op_t *op);

#endif
