/* upreq.h - the upstream request of one attempt (not installed). */
#ifndef PROXAI_UPREQ_H
#define PROXAI_UPREQ_H

#include "exchange.h"

/** The upstream request of this attempt (body, URL, headers), reused by a
 *  retry on the same target; <0 when the request was answered (the
 *  exchange has ended). */
int px_upreq_build(px_exch_t *x);

#endif
