/**
 * shm.h - the host's shared state (SPEC sections 7, 8): one anonymous
 * MAP_SHARED mapping that holds the rate-limit buckets and the metrics
 * counters of every worker process of this host.
 *
 * The master creates it with px_shm_init() before forking, so every worker
 * inherits the same pages. A process that never called px_shm_init() (a
 * single worker, unit tests) gets one on first use. Nothing in it is ever
 * freed or moved: its size is fixed at creation (bounded tables).
 *
 * Locks are process-shared robust mutexes: a worker killed while holding
 * one does not wedge the others (the next locker repairs the state).
 */
#ifndef PROXAI_SHM_H
#define PROXAI_SHM_H

#include <pthread.h>
#include <stddef.h>

/** Create the mapping for nworkers worker processes (slots for their
 *  per-process gauges). Call before fork(). Returns 0 or -errno. A second
 *  call is a no-op. */
int px_shm_init(unsigned nworkers);
/** Set which worker slot this process writes its gauges to (after fork). */
void px_shm_set_worker(unsigned index);
/** This process's worker slot. */
unsigned px_shm_worker(void);
/** Worker slots in the mapping (>= 1). */
unsigned px_shm_nworkers(void);

/** The two parts of the mapping; created on first use. NULL only when
 *  mmap failed (callers then count nothing / limit nothing). */
void *px_shm_metrics(void);
void *px_shm_ratelimit(void);

/** Initialise a process-shared robust mutex in the mapping. */
void px_shm_mutex_init(pthread_mutex_t *m);
/** Lock it; recovers it when its previous owner died holding it. */
void px_shm_lock(pthread_mutex_t *m);
void px_shm_unlock(pthread_mutex_t *m);

/** Sizes of the two parts (metrics.c, ratelimit.c) for nworkers. */
size_t px_metrics_shm_size(unsigned nworkers);
size_t px_rl_shm_size(unsigned nworkers);
/** Prepare a freshly zeroed part (called once, by px_shm_init). */
void px_metrics_shm_setup(void *p, unsigned nworkers);
void px_rl_shm_setup(void *p);

#endif
