/**
 * inflight.h - what each worker has in flight, kept in the host's shared
 * memory (SPEC section 7, Processes), so that the master can account for a
 * worker that died: how many requests it had started and not finished
 * (proxai_requests_lost_total, the master's log line), and the
 * reservations those requests held, which the master releases.
 *
 * Each worker writes only its own part, and only its own process reads it
 * while it lives: the master reads a part after reaping its worker and
 * clears it before starting the replacement, so no store needs ordering or
 * a lock. Per request this costs two stores (px_inflight_begin/_end); a
 * request that reserves something also takes a record (px_inflight_hold)
 * and gives it back when it settles (px_inflight_drop).
 */
#ifndef PROXAI_INFLIGHT_H
#define PROXAI_INFLIGHT_H

#include <stddef.h>
#include <stdint.h>

#include "proxai/shm.h"

/** Records per worker: requests holding a reservation at once. Beyond it a
 *  request's reservation is not tracked (it lapses by itself, as a dead
 *  instance's do). */
#define PX_INFLIGHT_RECS 4096
/** Key names up to this length - 1 bytes are tracked. */
#define PX_INFLIGHT_KEY 120

/**
 * One request's reservations in the state backend, as the master needs
 * them to release them. Fields are filled by the worker after
 * px_inflight_hold(); a reservation of 0 holds nothing. Budget reservations
 * (SPEC section 12) belong here too, released in px_rl_release_lost().
 */
typedef struct px_inflight_rec {
  uint32_t used; /**< 0: free */
  uint32_t pad;
  uint64_t tpm_reserved;      /**< tokens set aside on the key's tpm bucket */
  uint64_t tpm;               /**< the key's tpm limit at admission */
  uint64_t cost_key;          /**< nano-USD set aside on the key's budget */
  uint64_t cost_team;         /**< nano-USD set aside on its team's budget */
  char key[PX_INFLIGHT_KEY];  /**< the client key's name */
  char team[PX_INFLIGHT_KEY]; /**< its team's name ("" when none) */
} px_inflight_rec_t;

/** The table's shared-memory region (shm.h): the master registers it. */
extern px_shm_region_t px_inflight_region;

/** One request of this worker started / finished. */
void px_inflight_begin(void);
void px_inflight_end(void);

/** A free record of this worker, marked used, its name set to key; NULL
 *  when all are taken (or there is no mapping). */
px_inflight_rec_t *px_inflight_hold(const char *key);
/** Give a record back (NULL: nothing). */
void px_inflight_drop(px_inflight_rec_t *r);

/**
 * The master, after reaping worker `worker`: the number of requests it had
 * in flight; *recs (malloc'd, the caller frees; NULL when none) gets a copy
 * of its used records and *nrecs their count. The worker's part is cleared
 * for its replacement.
 */
unsigned px_inflight_reap(unsigned worker, px_inflight_rec_t **recs, size_t *nrecs);

#endif
