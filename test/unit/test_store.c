/* test_store.c - the persistent store (store.h, LMDB): records, expiry,
 * counters added by several processes at once (each opening its own
 * environment after fork, as workers do), prefixes, the capped database's
 * oldest-first trim, and what survives closing and reopening. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "proxai/store.h"

static char dir[256];

static int count_fn(void *arg, px_str_t k, px_str_t v) {
  (void)k;
  (void)v;
  (*(int *)arg)++;
  return 0;
}

static void test_records(void) {
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  CHECK(px_store_get(PX_STORE_KEYS, "a", 1, &b, 100) == 0);
  CHECK(px_store_put(PX_STORE_KEYS, "a", 1, "one", 3, 0, 0) == 0);
  CHECK(px_store_get(PX_STORE_KEYS, "a", 1, &b, 100) == 1 && b.len == 3 &&
        memcmp(b.data, "one", 3) == 0);
  /* a name taken: NEW refuses, nothing changes */
  CHECK(px_store_put(PX_STORE_KEYS, "a", 1, "two", 3, 0, PX_STORE_NEW) ==
        PX_STORE_EEXIST);
  CHECK(px_store_get(PX_STORE_KEYS, "a", 1, &b, 100) == 1 &&
        memcmp(b.data, "one", 3) == 0);
  /* sub-databases are apart */
  CHECK(px_store_get(PX_STORE_TEAMS, "a", 1, &b, 100) == 0);
  /* expiry: absent from then on, and NEW may take the name again */
  CHECK(px_store_put(PX_STORE_KEYS, "e", 1, "x", 1, 50, 0) == 0);
  CHECK(px_store_get(PX_STORE_KEYS, "e", 1, &b, 49) == 1);
  CHECK(px_store_get(PX_STORE_KEYS, "e", 1, &b, 50) == 0);
  CHECK(px_store_del(PX_STORE_KEYS, "a", 1) == 1);
  CHECK(px_store_del(PX_STORE_KEYS, "a", 1) == 0);
  CHECK(px_store_get(PX_STORE_KEYS, "a", 1, &b, 100) == 0);
  /* keys: empty or too long are refused */
  CHECK(px_store_put(PX_STORE_KEYS, "", 0, "x", 1, 0, 0) == PX_EINVAL);
  char big[PX_STORE_KEY_MAX + 1];
  memset(big, 'k', sizeof(big));
  CHECK(px_store_put(PX_STORE_KEYS, big, sizeof(big), "x", 1, 0, 0) == PX_EINVAL);
  /* prefix walk, in key order */
  CHECK(px_store_put(PX_STORE_TEAMS, "p:1", 3, "", 0, 0, 0) == 0);
  CHECK(px_store_put(PX_STORE_TEAMS, "p:2", 3, "", 0, 0, 0) == 0);
  CHECK(px_store_put(PX_STORE_TEAMS, "q:1", 3, "", 0, 0, 0) == 0);
  int n = 0;
  CHECK(px_store_each(PX_STORE_TEAMS, "p:", 2, 0, count_fn, &n) == 0 && n == 2);
  n = 0;
  CHECK(px_store_each(PX_STORE_TEAMS, NULL, 0, 0, count_fn, &n) == 0 && n == 3);
  px_buf_free(&b);
}

/* 4 processes x 500 adds of 3 on one counter: never one lost */
static void test_counter_processes(void) {
  px_store_close(); /* LMDB: no environment across fork */
  for (int p = 0; p < 4; p++) {
    pid_t pid = fork();
    if (pid == 0) {
      char err[256];
      if (px_store_open(dir, 0, err, sizeof(err)) < 0) _exit(2);
      for (int i = 0; i < 500; i++)
        if (px_store_add(PX_STORE_SPEND, "k:a|2026-11", 11, 3, NULL) < 0) _exit(3);
      px_store_close();
      _exit(0);
    }
  }
  for (int p = 0; p < 4; p++) {
    int st = 0;
    CHECK(wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  char err[256];
  CHECK(px_store_open(dir, 0, err, sizeof(err)) == 0);
  int64_t v = -1;
  CHECK(px_store_counter(PX_STORE_SPEND, "k:a|2026-11", 11, &v) == 0 && v == 6000);
  int64_t r = 0;
  CHECK(px_store_add(PX_STORE_SPEND, "k:a|2026-11", 11, -1000, &r) == 0 && r == 5000);
  CHECK(px_store_counter(PX_STORE_SPEND, "k:none", 6, &v) == 0 && v == 0);
}

static void test_trim(void) {
  char k[16], val[100];
  memset(val, 'v', sizeof(val));
  for (int i = 0; i < 10; i++) {
    snprintf(k, sizeof(k), "r%02d", i); /* 3 + 100 bytes each */
    CHECK(px_store_put(PX_STORE_RESPONSES, k, 3, val, sizeof(val), i == 5 ? 10 : 0, 0) ==
          0);
  }
  CHECK(px_store_bytes(PX_STORE_RESPONSES) == 1030);
  /* rewriting a record replaces its size and makes it the newest */
  CHECK(px_store_put(PX_STORE_RESPONSES, "r00", 3, val, 50, 0, 0) == 0);
  CHECK(px_store_bytes(PX_STORE_RESPONSES) == 980);
  size_t del = 0;
  /* under the cap: nothing to do (the expired r05 lies behind live ones) */
  CHECK(px_store_trim(PX_STORE_RESPONSES, 2000, 20, &del) == 0 && del == 0);
  /* cap 600: the oldest go first (r01..r04, then r05 expired, ...) */
  CHECK(px_store_trim(PX_STORE_RESPONSES, 600, 20, &del) == 0);
  CHECK(px_store_bytes(PX_STORE_RESPONSES) <= 600);
  px_buf_t b;
  px_buf_init(&b, 4096);
  CHECK(px_store_get(PX_STORE_RESPONSES, "r01", 3, &b, 20) == 0);
  CHECK(px_store_get(PX_STORE_RESPONSES, "r09", 3, &b, 20) == 1 && b.len == 100);
  CHECK(px_store_get(PX_STORE_RESPONSES, "r00", 3, &b, 20) == 1 && b.len == 50);
  int n = 0;
  px_store_each(PX_STORE_RESPONSES, NULL, 0, 20, count_fn, &n);
  CHECK((uint64_t)n * 103 >= px_store_bytes(PX_STORE_RESPONSES) - 53);
  /* everything expired: all go, the total is back to zero */
  for (int i = 0; i < 3; i++) {
    snprintf(k, sizeof(k), "x%02d", i);
    CHECK(px_store_put(PX_STORE_RESPONSES, k, 3, val, 10, 30, 0) == 0);
  }
  CHECK(px_store_del(PX_STORE_RESPONSES, "r09", 3) == 1);
  CHECK(px_store_trim(PX_STORE_RESPONSES, 0, 40, &del) == 0);
  CHECK(px_store_bytes(PX_STORE_RESPONSES) == 0);
  n = 0;
  px_store_each(PX_STORE_RESPONSES, NULL, 0, 0, count_fn, &n);
  CHECK(n == 0);
  /* only capped databases trim; counters never live in one */
  CHECK(px_store_trim(PX_STORE_KEYS, 0, 0, NULL) == PX_EINVAL);
  CHECK(px_store_add(PX_STORE_RESPONSES, "c", 1, 1, NULL) == PX_EINVAL);
  px_buf_free(&b);
}

static void test_reopen(void) {
  CHECK(px_store_put(PX_STORE_KEYHASH, "h", 1, "name", 4, 0, 0) == 0);
  px_store_close();
  CHECK(!px_store_on());
  px_buf_t b;
  px_buf_init(&b, 64);
  CHECK(px_store_get(PX_STORE_KEYHASH, "h", 1, &b, 0) == PX_STORE_EOFF);
  char err[256];
  CHECK(px_store_open(dir, 0, err, sizeof(err)) == 0);
  CHECK(px_store_get(PX_STORE_KEYHASH, "h", 1, &b, 0) == 1 && b.len == 4);
  int64_t v = 0;
  CHECK(px_store_counter(PX_STORE_SPEND, "k:a|2026-11", 11, &v) == 0 && v == 5000);
  px_buf_free(&b);
  /* a directory that cannot be made: a clear message */
  px_store_close();
  CHECK(px_store_open("/proc/nope/x", 0, err, sizeof(err)) < 0 &&
        strstr(err, "/proc/nope/x"));
}

int main(void) {
  snprintf(dir, sizeof(dir), "%s/proxai-store-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(dir)) return 1;
  char sub[300];
  snprintf(sub, sizeof(sub), "%s/state", dir);
  memmove(dir, sub, strlen(sub) + 1);
  char err[256];
  CHECK(px_store_open(dir, 0, err, sizeof(err)) == 0); /* creates the directory */
  test_records();
  test_counter_processes();
  test_trim();
  test_reopen();
  char cmd[600];
  char *slash = strrchr(dir, '/');
  *slash = 0;
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
  return check_report("store");
}
