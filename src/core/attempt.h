/* attempt.h - the attempt of an admitted exchange (not installed). */
#ifndef PROXAI_ATTEMPT_H
#define PROXAI_ATTEMPT_H

#include "exchange.h"

/** Runs the exchange's attempts on its route until one answers the client
 *  (retries and fallbacks included); the exchange ends there. */
void px_exch_attempt(px_exch_t *x);

#endif
