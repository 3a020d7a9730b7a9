/* shm.c - the host's shared mapping: metrics part, then rate-limit part.
 *
 * MAP_SHARED | MAP_ANONYMOUS pages survive fork() shared, need no name in
 * the file system (nothing to clean up after a crash), and are zero-filled
 * on first touch, so an untouched table costs no memory.
 */
#include "proxai/shm.h"

#include <errno.h>
#include <sys/mman.h>

static char *g_base;
static size_t g_metrics_off, g_rl_off;
static unsigned g_nworkers = 1, g_worker;

static size_t align_up(size_t n) {
  return (n + 4095) & ~(size_t)4095;
}

int px_shm_init(unsigned nworkers) {
  if (g_base) return 0;
  if (nworkers == 0) nworkers = 1;
  size_t msz = align_up(px_metrics_shm_size(nworkers));
  size_t rsz = align_up(px_rl_shm_size(nworkers));
  void *p =
      mmap(NULL, msz + rsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -errno;
  g_base = p;
  g_nworkers = nworkers;
  g_metrics_off = 0;
  g_rl_off = msz;
  px_metrics_shm_setup(g_base + g_metrics_off, nworkers);
  px_rl_shm_setup(g_base + g_rl_off);
  return 0;
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

void *px_shm_metrics(void) {
  if (!g_base && px_shm_init(1) < 0) return NULL;
  return g_base + g_metrics_off;
}

void *px_shm_ratelimit(void) {
  if (!g_base && px_shm_init(1) < 0) return NULL;
  return g_base + g_rl_off;
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
