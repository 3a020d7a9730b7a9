/* test_state.c - the host's shared state across processes (shm.c, metrics.c,
 * ratelimit.c) and the [state] / admin_listen / socket_mode / route models
 * configuration. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "proxai/config.h"
#include "proxai/inflight.h"
#include "proxai/metrics.h"
#include "proxai/ratelimit.h"
#include "proxai/shm.h"

/* Run fn in a child process (worker slot `slot`) and wait for it. */
static void in_child(unsigned slot, void (*fn)(void)) {
  pid_t p = fork();
  if (p == 0) {
    px_shm_set_worker(slot);
    fn();
    _exit(0);
  }
  int st = 0;
  CHECK(p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void child_counts(void) {
  px_metrics_request("openai_chat_completions", "oc", 200, 0.2, -1);
  px_metrics_request("openai_chat_completions", "oc", 429, 0.001, -1);
  px_metrics_gauge_add(PX_G_CONNECTIONS, 5);
  for (int i = 0; i < 2; i++)
    if (px_rl_admit("team", 5, 0, 1000) != 0) _exit(3);
}

static void child_dies_holding_lock(void) {
  pthread_mutex_t *m = px_shm_get(&px_metrics_region); /* its first member is its lock */
  pthread_mutex_lock(m);
  _exit(0); /* never unlocks */
}

static int has(const px_buf_t *b, const char *s) {
  return b->data && memmem(b->data, b->len, s, strlen(s)) != NULL;
}

static void test_across_fork(void) {
  px_shm_register(&px_metrics_region);
  px_shm_register(&px_rl_region);
  px_shm_register(&px_inflight_region);
  CHECK(px_shm_init(3) == 0);
  CHECK(px_shm_nworkers() == 3);
  px_metrics_reset();
  px_rl_reset();
  px_metrics_request("openai_chat_completions", "oc", 200, 0.1, -1);
  px_metrics_gauge_add(PX_G_CONNECTIONS, 1);
  in_child(1, child_counts);
  in_child(2, child_counts);
  /* the parent sees both children's counts: host totals */
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  CHECK(px_metrics_render(&b) == 0);
  CHECK(has(&b,
            "proxai_requests_total{inbound=\"openai_chat_completions\",upstream=\"oc\","
            "status=\"200\"} 3\n"));
  CHECK(has(&b, "status=\"429\"} 2\n"));
  CHECK(has(
      &b,
      "proxai_request_duration_seconds_count{inbound=\"openai_chat_completions\"} 5\n"));
  CHECK(has(&b, "proxai_open_connections 11\n"));
  /* a dead worker's gauges are zeroed by the master */
  px_metrics_worker_reset(2);
  px_buf_reset(&b);
  CHECK(px_metrics_render(&b) == 0);
  CHECK(has(&b, "proxai_open_connections 6\n"));
  /* one bucket for the host: the children took 2 each of rpm 5 at the same
   * instant; one is left */
  CHECK(px_rl_admit("team", 5, 0, 1000) == 0);
  CHECK(px_rl_admit("team", 5, 0, 1000) > 0);

  /* a worker killed while holding a lock does not wedge the others */
  in_child(1, child_dies_holding_lock);
  px_metrics_attempt("oc", NULL); /* creates a series: takes that lock */
  px_buf_reset(&b);
  CHECK(px_metrics_render(&b) == 0);
  CHECK(has(&b, "proxai_upstream_attempts_total{upstream=\"oc\",result=\"ok\"} 1\n"));
  px_buf_free(&b);
  px_metrics_reset();
  px_rl_reset();
}

static px_config_t *parse(const char *text, char *err, size_t n) {
  return px_config_parse(text, "t.conf", err, n);
}

/* A worker with three requests started, one finished, two reservations
 * taken and one given back, killed before the rest ended. */
static void child_dies_in_flight(void) {
  for (int i = 0; i < 3; i++) px_inflight_begin();
  px_inflight_end();
  px_inflight_rec_t *a = px_inflight_hold("key-a"), *b = px_inflight_hold("key-b");
  if (!a || !b || a == b) _exit(3);
  a->tpm_reserved = 100;
  b->tpm_reserved = 250;
  b->tpm = 1000;
  px_inflight_drop(a);
  _exit(0);
}

static void test_inflight(void) {
  CHECK(px_shm_init(3) == 0);
  px_metrics_reset();
  in_child(2, child_dies_in_flight);
  px_inflight_rec_t *recs;
  size_t n;
  CHECK(px_inflight_reap(2, &recs, &n) == 2);
  CHECK(n == 1 && recs && strcmp(recs[0].key, "key-b") == 0 &&
        recs[0].tpm_reserved == 250 && recs[0].tpm == 1000);
  free(recs);
  /* emptied for the replacement */
  CHECK(px_inflight_reap(2, &recs, &n) == 0);
  CHECK(n == 0 && recs == NULL);
  px_metrics_lost(2);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  CHECK(px_metrics_render(&b) == 0);
  CHECK(has(&b, "proxai_requests_lost_total 2\n"));
  px_buf_free(&b);
  px_metrics_reset();
}

static void start_on_error(const char *mode) {
  char text[512], err[256];
  snprintf(text, sizeof(text),
           "[state]\non_error = %s\n[upstream oc]\nprotocol = openai_chat_completions\n"
           "base_url = http://h/v1\n[route *]\nupstream = oc\n",
           mode);
  px_config_t *c = parse(text, err, sizeof(err));
  CHECK(c != NULL);
  if (c) CHECK(px_rl_start(NULL, c) == 0); /* backend local: no loop needed */
  px_config_unref(c);
}

/* What on_error decides while the shared backend is unreachable. */
static void test_fallback(void) {
  CHECK(px_shm_init(3) == 0);
  px_rl_reset();
  unsigned ra = 0;
  start_on_error("allow");
  CHECK(px_rl_fallback("k", 10, 0, 0, 0, &ra) == PX_RL_OPEN);
  CHECK(px_rl_fallback("k", 10, 0, PX_RL_STRICT, 0, &ra) == PX_RL_UNAVAILABLE);
  start_on_error("deny");
  CHECK(px_rl_fallback("k", 10, 0, 0, 0, &ra) == PX_RL_UNAVAILABLE);
  start_on_error("local");
  CHECK(px_rl_fallback("k", 10, 0, PX_RL_STRICT, 0, &ra) == PX_RL_UNAVAILABLE);
  /* three instances: ceil(10 / 3) = 4 of rpm 10 */
  px_rl_set_instances(3);
  px_shm_set_worker(0);
  px_rl_outage(1);
  for (int i = 0; i < 4; i++)
    CHECK(px_rl_fallback("k", 10, 0, 0, 1000, &ra) == PX_RL_LOCAL);
  CHECK(px_rl_fallback("k", 10, 0, 0, 1000, &ra) == PX_RL_LIMITED && ra >= 1);
  /* another worker of the host finding it down joins the same outage */
  px_shm_set_worker(1);
  px_rl_outage(1);
  CHECK(px_rl_fallback("k", 10, 0, 0, 1000, &ra) == PX_RL_LIMITED);
  px_rl_outage(0);
  px_shm_set_worker(0);
  px_rl_outage(0);
  /* the next outage starts with full buckets */
  px_rl_outage(1);
  for (int i = 0; i < 4; i++)
    CHECK(px_rl_fallback("k", 10, 0, 0, 1000, &ra) == PX_RL_LOCAL);
  CHECK(px_rl_fallback("k", 10, 0, 0, 1000, &ra) == PX_RL_LIMITED);
  /* a worker that died while down no longer holds the outage open */
  px_shm_set_worker(2);
  px_rl_outage(1);
  px_rl_worker_gone(2);
  px_shm_set_worker(0);
  px_rl_outage(0);
  px_rl_outage(1);
  CHECK(px_rl_fallback("k", 10, 0, 0, 1000, &ra) == PX_RL_LOCAL);
  px_rl_outage(0);
  /* tpm: a share of ceil(100 / 3) = 34, charged at the end in this host's
   * bucket; admitted while not in debt */
  px_key_conf_t k = {.name = "t", .tpm = 100};
  px_rl_outage(1);
  CHECK(px_rl_fallback("t", 0, 100, 0, 1000, &ra) == PX_RL_LOCAL);
  px_admit_t adm = {.key = &k, .local = 1};
  px_rl_settle(&adm, 34, 0, 1000);
  CHECK(px_rl_fallback("t", 0, 100, 0, 1000, &ra) == PX_RL_LOCAL);
  px_rl_settle(&adm, 1, 0, 1000);
  CHECK(px_rl_fallback("t", 0, 100, 0, 1000, &ra) == PX_RL_LIMITED);
  px_rl_outage(0);
  start_on_error("allow");
  px_rl_set_instances(0);
  px_rl_reset();
}

static void test_config(void) {
  static const char base[] =
      "[upstream oc]\nprotocol = openai_chat_completions\nbase_url = "
      "http://127.0.0.1:1/v1\n"
      "[route c-*]\nupstream = oc\nmodels = c-1, c-2\n";
  char err[512], text[2048];
  px_config_t *c = parse(base, err, sizeof(err));
  CHECK(c != NULL);
  if (c) {
    CHECK(c->state.backend == PX_STATE_LOCAL);
    CHECK(strcmp(c->state.prefix, "proxai:") == 0);
    CHECK(c->state.on_error == PX_ON_ERROR_ALLOW);
    CHECK(c->state.timeout_ms == 250);
    CHECK(c->server.socket_mode == 0660);
    CHECK(c->server.admin_listen == NULL);
    CHECK(c->routes[0].nmodels == 2 && strcmp(c->routes[0].models[1], "c-2") == 0);
    px_config_unref(c);
  }
  snprintf(text, sizeof(text),
           "[server]\nadmin_listen = 127.0.0.1:9901\nsocket_mode = 0600\n"
           "[state]\nbackend = redis\nredis = redis://127.0.0.1:6379/2\nprefix = gw1:\n"
           "on_error = deny\ntimeout = 80ms\n%s",
           base);
  c = parse(text, err, sizeof(err));
  CHECK(c != NULL);
  if (c) {
    CHECK(c->state.backend == PX_STATE_REDIS);
    CHECK(strcmp(c->state.redis, "redis://127.0.0.1:6379/2") == 0);
    CHECK(strcmp(c->state.prefix, "gw1:") == 0);
    CHECK(c->state.on_error == PX_ON_ERROR_DENY);
    CHECK(c->state.timeout_ms == 80);
    CHECK(c->server.socket_mode == 0600);
    CHECK(strcmp(c->server.admin_listen, "127.0.0.1:9901") == 0);
    px_config_unref(c);
  }
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"[state]\nbackend = memcached\n", "t.conf:2: backend must be local or redis"},
      {"[state]\nbackend = redis\n", "t.conf:1: [state] backend = redis needs 'redis ='"},
      {"[state]\nredis = http://x\n", "t.conf:2: redis must be"},
      {"[state]\non_error = maybe\n", "t.conf:2: on_error must be allow, deny or local"},
      {"[state]\ntimeout = 0ms\n", "t.conf:1: [state] timeout must be at least 1ms"},
      {"[state]\ntimeout = soon\n", "t.conf:2: invalid duration 'soon' for 'timeout'"},
      {"[state]\n[state]\n", "t.conf:2: duplicate section [state]"},
      {"[server]\nsocket_mode = 0999\n", "t.conf:2: 'socket_mode' must be an octal mode"},
      {"[server]\nadmin_listen = nowhere\n", "t.conf:2: invalid admin_listen address"},
      {"[route x-*]\nupstream = oc\nmodels = x-*\n",
       "t.conf:3: model 'x-*' in [route x-*] is not a concrete model name"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(text, sizeof(text), "%s%s", bad[i].text,
             "[upstream oc]\nprotocol = openai_chat_completions\nbase_url = http://h/v1\n"
             "[route *]\nupstream = oc\n");
    err[0] = 0;
    c = parse(text, err, sizeof(err));
    CHECK(c == NULL);
    if (strncmp(err, bad[i].want, strlen(bad[i].want)) != 0) {
      fprintf(stderr, "case %zu: got '%s', want '%s...'\n", i, err, bad[i].want);
      failures++;
    }
    px_config_unref(c);
  }
}

/* A user's own region: sized for the workers, set up once, shared with the
 * processes forked after px_shm_init; shm.c knows nothing of it. */
typedef struct {
  unsigned setups, nworkers;
  uint64_t slot[];
} user_table_t;

static size_t user_size(unsigned nworkers) {
  return sizeof(user_table_t) + nworkers * sizeof(uint64_t);
}
static void user_setup(void *p, unsigned nworkers) {
  user_table_t *t = p;
  t->setups++;
  t->nworkers = nworkers;
}
static px_shm_region_t user_region = {.name = "user", .size = user_size, .setup = user_setup};
static px_shm_region_t late_region = {.name = "late", .size = user_size, .setup = user_setup};

static void child_writes_slot(void) {
  user_table_t *t = px_shm_get(&user_region);
  __atomic_add_fetch(&t->slot[px_shm_worker()], 7, __ATOMIC_RELAXED);
}

static void test_regions(void) {
  px_shm_register(&user_region);
  px_shm_register(&user_region); /* twice: one region */
  CHECK(px_shm_init(3) == 0);
  user_table_t *t = px_shm_get(&user_region);
  CHECK(t != NULL && t == user_region.base);
  CHECK(t->setups == 1 && t->nworkers == 3);
  CHECK(px_shm_init(3) == 0); /* again: nothing mapped or set up twice */
  CHECK(px_shm_get(&user_region) == t && t->setups == 1);
  in_child(1, child_writes_slot);
  in_child(2, child_writes_slot);
  CHECK(t->slot[0] == 0 && t->slot[1] == 7 && t->slot[2] == 7);
  /* a region never registered is mapped at its first use, set up once */
  user_table_t *l = px_shm_get(&late_region);
  CHECK(l != NULL && l != t && l->setups == 1 && l->nworkers == 3);
  CHECK(px_shm_get(&late_region) == l && l->setups == 1);
}

int main(void) {
  test_regions();
  test_across_fork();
  test_inflight();
  test_fallback();
  test_config();
  return check_report("test_state");
}
