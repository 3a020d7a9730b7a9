/* respond.h - the response modes (not installed). */
#ifndef PROXAI_RESPOND_H
#define PROXAI_RESPOND_H

#include "exchange.h"

/** The mode for a usable upstream head (not retried). */
const px_mode_t *px_mode_choose(px_exch_t *x, int status, const char *encoding);

#endif
