/* stored.h - stored responses in the request core (stored.c; not
 * installed): for a client protocol with store ops and an upstream that
 * cannot keep its responses (SPEC 14). */
#ifndef PROXAI_STORED_H
#define PROXAI_STORED_H

#include "exchange.h"

/** Admission: the chain of previous_response_id read and the body expanded;
 *  0 go on, 1 pending (it goes on with go(x) itself: the attempt), <0
 *  answered. */
int px_stored_admit(px_exch_t *x, void (*go)(px_exch_t *x));
/** This attempt's translation context: the minted id when the gateway keeps it. */
void px_stored_ctx(px_exch_t *x, px_tr_ctx_t *ctx);
/** A translated JSON answer: 1 when it is held until the turn is written
 *  (then answered and finalized there), 0 to answer it now. */
int px_stored_json(px_exch_t *x, const char *p, size_t n);
/** After a stream feed: a terminal event in x->obuf is held until the turn
 *  is written. */
void px_stored_stream(px_exch_t *x);
/** GET / DELETE of a stored response and GET of its input items. */
void px_stored_serve(px_worker_t *w, px_conn_t *c, px_req_t *r, const px_proto_ops_t *ops,
                     const px_key_conf_t *k, px_str_t id, int items);

#endif
