/* shm.c - the host's shared memory: named regions, registered by their
 * users (shm.h), each its own mapping. It knows no user.
 *
 * MAP_SHARED | MAP_ANONYMOUS pages survive fork() shared, need no name in
 * the file system (nothing to clean up after a crash), and are zero-filled
 * on first touch, so an untouched table costs no memory.
 */
#include "proxai/shm.h"

#include <errno.h>
#include <sys/mman.h>

static px_shm_region_t *g_regions; /* registered, newest first */
static int g_inited;
static unsigned g_nworkers = 1, g_worker;

static int registered(const px_shm_region_t *r) {
  for (const px_shm_region_t *q = g_regions; q; q = q->next)
    if (q == r) return 1;
  return 0;
}

void px_shm_register(px_shm_region_t *r) {
  if (registered(r)) return;
  r->next = g_regions;
  g_regions = r;
}

/* The region's own mapping: zeroed pages, then its setup. */
static int map_region(px_shm_region_t *r) {
  if (r->base) return 0;
  size_t n = r->size ? r->size(g_nworkers) : 0;
  void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -errno;
  if (r->setup) r->setup(p, g_nworkers);
  r->base = p;
  return 0;
}

int px_shm_init(unsigned nworkers) {
  if (!g_inited) g_nworkers = nworkers ? nworkers : 1;
  g_inited = 1;
  for (px_shm_region_t *r = g_regions; r; r = r->next) {
    int rc = map_region(r);
    if (rc < 0) return rc;
  }
  return 0;
}

void *px_shm_map(px_shm_region_t *r) {
  px_shm_register(r);
  if (!g_inited) g_inited = 1; /* a process that never called px_shm_init: one worker */
  return map_region(r) < 0 ? NULL : r->base;
}

void px_shm_set_worker(unsigned index) {
  g_worker = index < g_nworkers ? index : 0;
}
unsigned px_shm_worker(void) {
  return g_worker;
}
unsigned px_shm_nworkers(void) {
  return g_nworkers;
}

void px_shm_mutex_init(pthread_mutex_t *m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

void px_shm_lock(pthread_mutex_t *m) {
  /* EOWNERDEAD: the holder died inside its critical section. Every critical
   * section here leaves the data valid at each store (a counter, a level, a
   * slot published last), so marking the mutex consistent is enough. */
  if (pthread_mutex_lock(m) == EOWNERDEAD) pthread_mutex_consistent(m);
}

void px_shm_unlock(pthread_mutex_t *m) {
  pthread_mutex_unlock(m);
}
