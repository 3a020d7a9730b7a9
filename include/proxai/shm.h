/**
 * shm.h - the host's shared state (SPEC sections 7, 8): named regions of
 * anonymous MAP_SHARED memory, one per user (the metrics counters, the
 * rate-limit buckets, ...), shared by every worker process of this host.
 *
 * A user defines its region (a name, its size, a setup function) and the
 * master registers it with px_shm_register() before px_shm_init(), which
 * maps every registered region before the workers are forked, so every
 * worker inherits the same pages. This file knows no user.
 *
 *   static size_t table_size(unsigned nworkers) { return sizeof(table_t); }
 *   static void table_setup(void *p, unsigned nworkers) { ... }
 *   px_shm_region_t px_table_region = {.name = "table", .size = table_size,
 *                                      .setup = table_setup};
 *   ...  px_shm_register(&px_table_region);   (main, before px_shm_init)
 *   ...  table_t *t = px_shm_get(&px_table_region);
 *
 * A region that was not mapped by px_shm_init() (a single process, unit
 * tests) is mapped at its first px_shm_get(); it is shared only with the
 * processes forked after that. Nothing is ever freed or moved: a region's
 * size is fixed when it is mapped (bounded tables), and its pages are
 * zero-filled on first touch, so an untouched table costs no memory.
 *
 * Locks are process-shared robust mutexes: a worker killed while holding
 * one does not wedge the others (the next locker repairs the state).
 */
#ifndef PROXAI_SHM_H
#define PROXAI_SHM_H

#include <pthread.h>
#include <stddef.h>

/** A named region. The user fills the first three fields (static storage). */
typedef struct px_shm_region {
  const char *name;
  /** its size in bytes for nworkers worker processes */
  size_t (*size)(unsigned nworkers);
  /** prepares the freshly zeroed region, once (NULL: nothing to do) */
  void (*setup)(void *p, unsigned nworkers);
  void *base;                 /* shm.c's: the memory, once mapped */
  struct px_shm_region *next; /* shm.c's: the registered list */
} px_shm_region_t;

/** Registers r for px_shm_init() (a second call is a no-op). */
void px_shm_register(px_shm_region_t *r);
/** Maps every registered region, for nworkers worker processes (each has
 *  its slot for per-process values). Call before fork(). Returns 0 or
 *  -errno. A second call only maps regions registered since. */
int px_shm_init(unsigned nworkers);
/** Maps r now (px_shm_get does when needed); NULL when mmap failed. */
void *px_shm_map(px_shm_region_t *r);
/** The region's memory; NULL only when mmap failed (callers then count
 *  nothing / limit nothing). */
static inline void *px_shm_get(px_shm_region_t *r) {
  return r->base ? r->base : px_shm_map(r);
}

/** Set which worker slot this process writes its gauges to (after fork). */
void px_shm_set_worker(unsigned index);
/** This process's worker slot. */
unsigned px_shm_worker(void);
/** Worker slots in the mapping (>= 1). */
unsigned px_shm_nworkers(void);

/** Initialise a process-shared robust mutex in the mapping. */
void px_shm_mutex_init(pthread_mutex_t *m);
/** Lock it; recovers it when its previous owner died holding it. */
void px_shm_lock(pthread_mutex_t *m);
void px_shm_unlock(pthread_mutex_t *m);

#endif
