/* state_redis.c - rpm/tpm buckets in Redis ([state] backend = redis).
 *
 * One hiredis async connection per worker on the libuv loop (hiredis's own
 * libuv adapter). Each admission is one atomic server-side Lua script: a
 * token bucket on Redis TIME (so gateways with skewed clocks agree), the
 * rpm token taken and `reserve` tokens set aside on tpm in one step; the
 * end of the request settles the difference with the real usage. The
 * script is sent by its SHA1 (EVALSHA) and again in full (EVAL) when Redis
 * answers NOSCRIPT (a restarted or flushed Redis).
 *
 *   idle --connect--> connecting --PONG--> up
 *    ^  (RETRY_MS)        |                 |
 *    +-- fail / timeout --+-----------------+
 *
 * Every command, the connection's own included, is answered within
 * [state] timeout or the connection is dropped: Redis replies in order, so
 * the oldest unanswered command (the head of a list) is the only one a
 * timer watches. A failure makes the worker "down": one log line, one
 * count, and from then on admissions follow on_error at once (ratelimit.c's
 * px_rl_fallback) while a fresh connection is tried every RETRY_MS; the
 * first PONG on it ends the incident (one log line). Until the first
 * failure, admissions wait for the first connection (within the timeout).
 *
 * While up, the worker records its instance in a sorted set every
 * REGISTER_MS and learns how many instances recorded themselves in the last
 * INSTANCE_TTL_MS: on_error = local divides the limits by that number.
 *
 * A key found over its limit is remembered locally until its bucket can
 * have room again (rpm: the wait Redis computed; tpm: at most a second, as
 * other requests' settlements may return tokens earlier), which saves a
 * round trip per refused request.
 */
#include "proxai/state_redis.h"

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "proxai/inflight.h"
#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/shm.h"

/* A failed connection is tried again this soon: a refused connect costs
 * nothing, and a worker is back within this much of Redis answering. */
#define RETRY_MS 100
#define REGISTER_MS 10000
#define INSTANCE_TTL_MS 30000
#define CACHE_SLOTS 256
#define TPM_CACHE_MAX_MS 1000

/* ARGV: mode ("a" admit | "s" settle), rpm, tpm, tokens (reserve | delta).
 * Levels are in 1/60000 token: `limit` per minute refills `limit` units
 * per millisecond. Returns {0, 0} allowed, {1, wait_ms} rpm, {2, wait_ms}
 * tpm refused; settle returns 0. */
static const char script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local U = 60000\n"
    "local rpm, tpm, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local v = redis.call('HMGET', KEYS[1], 'rl', 'rt', 'tl', 'tt')\n"
    "local function refill(level, last, limit)\n"
    "  local cap = limit * U\n"
    "  if level == nil or last == nil then return cap, now end\n"
    "  if now > last then level = level + (now - last) * limit; last = now end\n"
    "  if level > cap then level = cap end\n"
    "  return level, last\n"
    "end\n"
    "local f = function(x) return string.format('%.0f', x) end\n"
    /* a bucket is kept until it would be full again (a deep tpm debt lasts
     * as long as it takes to repay), then it expires: absent = full */
    "local function full(level, limit)\n"
    "  if limit <= 0 then return 1000 end\n"
    "  return math.ceil((limit * U - level) / limit) + 1000\n"
    "end\n"
    "local tl, tt = refill(tonumber(v[3]), tonumber(v[4]), tpm)\n"
    "if ARGV[1] == 's' then\n"
    "  tl = tl - n * U\n"
    "  if tl > tpm * U then tl = tpm * U end\n"
    "  redis.call('HSET', KEYS[1], 'tl', f(tl), 'tt', f(tt))\n"
    "  redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), full(tl, tpm)))\n"
    "  return 0\n"
    "end\n"
    "local rl, rt = refill(tonumber(v[1]), tonumber(v[2]), rpm)\n"
    "if tpm > 0 and tl < 0 then return {2, math.ceil(-tl / tpm)} end\n"
    "if rpm > 0 and rl < U then return {1, math.ceil((U - rl) / rpm)} end\n"
    "if rpm > 0 then rl = rl - U end\n"
    "if tpm > 0 then tl = tl - n * U end\n"
    "redis.call('HSET', KEYS[1], 'rl', f(rl), 'rt', f(rt), 'tl', f(tl), 'tt', f(tt))\n"
    "redis.call('PEXPIRE', KEYS[1], math.max(full(rl, rpm), full(tl, tpm)))\n"
    "return {0, 0}\n";

/* The instance registry: KEYS[1] a sorted set of instances scored by the
 * Redis TIME (ms) they last recorded themselves at; ARGV: this instance,
 * the window. Returns how many recorded themselves within the window, this
 * one included. */
static const char registry_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local ttl = tonumber(ARGV[2])\n"
    "redis.call('ZADD', KEYS[1], now, ARGV[1])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)\n"
    "redis.call('PEXPIRE', KEYS[1], ttl * 2)\n"
    "return redis.call('ZCARD', KEYS[1])\n";

/* Every command sent, in the order sent (= the order Redis answers). */
typedef struct cmd {
  struct cmd *prev, *next;
  uint64_t sent_ms;
} cmd_t;

struct px_rl_wait {
  cmd_t c;            /* in the list of unanswered commands */
  px_rl_done_fn done; /* NULL once cancelled */
  void *arg;
  uint64_t hash;
  uint64_t rpm, tpm;
  unsigned flags;
  int resent; /* EVAL after NOSCRIPT */
  size_t name_off; /* the key's name in key[] (after the prefix) */
  char argv[4][24];
  char key[];
};

/* The connection's own commands: AUTH, SELECT, PING, the registry. */
typedef struct ctl {
  cmd_t c;
  const char *what;
} ctl_t;

typedef struct cache_slot {
  uint64_t hash;
  uint64_t until_ms;
} cache_slot_t;

typedef struct addr {
  char *host, *path, *user, *password;
  int port, db;
} addr_t;

static struct {
  uv_loop_t *loop;
  redisAsyncContext *ac;
  int up;         /* PONG seen on ac */
  int down;       /* incident: found unreachable, not back yet (logged) */
  int script_err; /* scripts failing on a reachable Redis (logged) */
  int running, stopping;
  uv_timer_t retry, watch, reg;
  uint64_t timeout_ms;
  addr_t a;
  char *prefix, *reg_key;
  const char *on_error;
  char sha[41];
  char instance[96];
  cmd_t *head, *tail; /* unanswered commands, oldest first */
  cache_slot_t cache[CACHE_SLOTS];
} g;

static void connect_now(void);

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h | 1; /* 0 = empty cache slot */
}

/* ---- incidents ------------------------------------------------------------ */

static void go_down(const char *why) {
  if (g.down || g.stopping) return;
  g.down = 1;
  px_metrics_state("redis", "error");
  px_rl_outage(1);
  px_log_error("redis state backend unreachable (%s): on_error = %s until it is back",
               why, g.on_error);
}

static void go_up(void) {
  g.up = 1;
  if (!g.down) return;
  g.down = 0;
  px_metrics_state("redis", "back");
  px_rl_outage(0);
  px_log_info("redis state backend is back: shared limits apply again");
}

/* ---- commands and their deadline ------------------------------------------ */

static void on_watch(uv_timer_t *t);

static void link_cmd(cmd_t *c) {
  c->sent_ms = uv_now(g.loop);
  c->next = NULL;
  c->prev = g.tail;
  if (g.tail)
    g.tail->next = c;
  else
    g.head = c;
  g.tail = c;
  if (!uv_is_active((uv_handle_t *)&g.watch))
    uv_timer_start(&g.watch, on_watch, g.timeout_ms, 0);
}

static void unlink_cmd(cmd_t *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    g.head = c->next;
  if (c->next)
    c->next->prev = c->prev;
  else
    g.tail = c->prev;
  c->prev = c->next = NULL;
}

static void on_retry(uv_timer_t *t) {
  (void)t;
  if (!g.stopping && !g.ac) connect_now();
}

/* The connection is given up: its unanswered commands get a NULL reply
 * (their admissions follow on_error), a new one is tried soon. */
static void drop(const char *why) {
  go_down(why);
  redisAsyncContext *ac = g.ac;
  g.ac = NULL;
  g.up = 0;
  if (ac) redisAsyncFree(ac); /* deferred by hiredis inside its own callback */
  if (!g.stopping) uv_timer_start(&g.retry, on_retry, RETRY_MS, 0);
}

/* The oldest unanswered command decides: every command is answered within
 * the timeout, or the connection is dropped. Re-armed only when it fires. */
static void on_watch(uv_timer_t *t) {
  (void)t;
  if (g.head == NULL) return;
  uint64_t now = uv_now(g.loop), due = g.head->sent_ms + g.timeout_ms;
  if (now >= due) {
    char why[64];
    snprintf(why, sizeof(why), "no reply within %llu ms",
             (unsigned long long)g.timeout_ms);
    drop(why);
    return;
  }
  uv_timer_start(&g.watch, on_watch, due - now, 0);
}

static int send_argv(redisCallbackFn *cb, cmd_t *c, int argc, const char **argv) {
  size_t len[10];
  for (int i = 0; i < argc; i++) len[i] = strlen(argv[i]);
  if (!g.ac || redisAsyncCommandArgv(g.ac, cb, c, argc, argv, len) != REDIS_OK) return -1;
  link_cmd(c);
  return 0;
}

static void on_ctl_reply(redisAsyncContext *ac, void *r, void *priv);

static void send_ctl(const char *what, int argc, const char **argv) {
  ctl_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return;
  c->what = what;
  if (send_argv(on_ctl_reply, &c->c, argc, argv) < 0) free(c);
}

static void register_instance(void) {
  char ttl[24];
  snprintf(ttl, sizeof(ttl), "%d", INSTANCE_TTL_MS);
  const char *argv[] = {"EVAL", registry_script, "1", g.reg_key, g.instance, ttl};
  send_ctl("registry", 6, argv);
}

static void on_register_timer(uv_timer_t *t) {
  (void)t;
  if (g.up) register_instance();
}

static void on_ctl_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  ctl_t *c = priv;
  redisReply *reply = r;
  unlink_cmd(&c->c);
  const char *what = c->what;
  free(c);
  if (reply == NULL || g.stopping) return; /* the connection went: handled there */
  if (strcmp(what, "registry") == 0) {
    if (reply->type == REDIS_REPLY_INTEGER)
      px_rl_set_instances(reply->integer > 1 ? (unsigned)reply->integer : 1);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    char why[200];
    snprintf(why, sizeof(why), "%s: %.150s", what, reply->str);
    drop(why);
    return;
  }
  if (strcmp(what, "PING") == 0) {
    go_up();
    register_instance(); /* a restarted Redis has forgotten every instance */
  }
}

/* ---- connection ----------------------------------------------------------- */

static void on_connect(const redisAsyncContext *ac, int status) {
  if (status == REDIS_OK || g.ac != ac) return;
  /* hiredis frees the context after this callback (its queued commands get
   * a NULL reply then) */
  g.ac = NULL;
  g.up = 0;
  go_down(ac->errstr[0] ? ac->errstr : "cannot connect");
  if (!g.stopping) uv_timer_start(&g.retry, on_retry, RETRY_MS, 0);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  (void)status;
  if (g.ac != ac) return; /* dropped by us */
  g.ac = NULL;
  g.up = 0;
  if (g.stopping) return;
  go_down(ac->errstr[0] ? ac->errstr : "connection closed");
  uv_timer_start(&g.retry, on_retry, RETRY_MS, 0);
}

/* hiredis 0.14's libuv adapter drops a poll error (status < 0) on the floor,
 * so a refused connection is never noticed; libuv has stopped the poll by
 * then. These replace its four event hooks with the same bookkeeping on its
 * own redisLibuvEvents, and on an error let hiredis read or write, which
 * finds the socket error and fails the connection properly. */
static void on_poll(uv_poll_t *h, int status, int events) {
  redisLibuvEvents *p = h->data;
  int ev = status < 0 ? p->events : events;
  if (p->context && (ev & UV_READABLE)) redisAsyncHandleRead(p->context);
  if (p->context && (ev & UV_WRITABLE)) redisAsyncHandleWrite(p->context);
}

static void set_events(void *privdata, int add, int del) {
  redisLibuvEvents *p = privdata;
  p->events = (p->events | add) & ~del;
  if (p->events)
    uv_poll_start(&p->handle, p->events, on_poll);
  else
    uv_poll_stop(&p->handle);
}

static void add_read(void *p) {
  set_events(p, UV_READABLE, 0);
}
static void del_read(void *p) {
  set_events(p, 0, UV_READABLE);
}
static void add_write(void *p) {
  set_events(p, UV_WRITABLE, 0);
}
static void del_write(void *p) {
  set_events(p, 0, UV_WRITABLE);
}

static void connect_now(void) {
  redisAsyncContext *ac =
      g.a.path ? redisAsyncConnectUnix(g.a.path) : redisAsyncConnect(g.a.host, g.a.port);
  if (ac == NULL || ac->err || redisLibuvAttach(ac, g.loop) != REDIS_OK) {
    go_down(ac && ac->err ? ac->errstr : "cannot start a connection");
    if (ac) redisAsyncFree(ac);
    uv_timer_start(&g.retry, on_retry, RETRY_MS, 0);
    return;
  }
  ac->ev.addRead = add_read;
  ac->ev.delRead = del_read;
  ac->ev.addWrite = add_write;
  ac->ev.delWrite = del_write;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  g.ac = ac;
  g.up = 0;
  /* queued: sent first once connected; the PONG says the connection is
   * good (hiredis 0.14 also watches the socket only once a command is
   * queued) */
  if (g.a.password) {
    const char *argv[] = {"AUTH", g.a.user ? g.a.user : g.a.password, g.a.password};
    send_ctl("AUTH", g.a.user ? 3 : 2, argv);
  }
  if (g.a.db) {
    char db[16];
    snprintf(db, sizeof(db), "%d", g.a.db);
    const char *argv[] = {"SELECT", db};
    send_ctl("SELECT", 2, argv);
  }
  const char *ping[] = {"PING"};
  send_ctl("PING", 1, ping);
}

/* redis://[[user]:password@]host[:port][/db] or unix:/path */
static int parse_url(const char *url, addr_t *a) {
  memset(a, 0, sizeof(*a));
  if (strncmp(url, "unix:", 5) == 0) {
    a->path = strdup(url + 5);
    return a->path ? 0 : -1;
  }
  const char *s = url + 8; /* "redis://" */
  const char *at = strrchr(s, '@');
  if (at) {
    const char *colon = memchr(s, ':', (size_t)(at - s));
    if (colon) {
      if (colon > s) a->user = strndup(s, (size_t)(colon - s));
      a->password = strndup(colon + 1, (size_t)(at - colon - 1));
    } else {
      a->password = strndup(s, (size_t)(at - s));
    }
    s = at + 1;
  }
  const char *slash = strchr(s, '/');
  size_t hl = slash ? (size_t)(slash - s) : strlen(s);
  const char *colon = memchr(s, ':', hl);
  a->port = 6379;
  if (colon) {
    a->port = atoi(colon + 1);
    hl = (size_t)(colon - s);
  }
  a->host = strndup(s, hl);
  if (slash && slash[1]) a->db = atoi(slash + 1);
  if (!a->host || !a->host[0] || a->port <= 0 || a->port > 65535) return -1;
  return 0;
}

static void addr_free(addr_t *a) {
  free(a->host);
  free(a->path);
  free(a->user);
  free(a->password);
  memset(a, 0, sizeof(*a));
}

static const char *const on_error_name[] = {"allow", "deny", "local"};

int px_redis_start(uv_loop_t *loop, const px_state_conf_t *sc) {
  if (g.running) return 0;
  memset(&g, 0, sizeof(g));
  g.loop = loop;
  g.on_error = on_error_name[sc->on_error];
  g.timeout_ms = sc->timeout_ms ? sc->timeout_ms : 1;
  const char *prefix = sc->prefix ? sc->prefix : "";
  g.prefix = strdup(prefix);
  g.reg_key = malloc(strlen(prefix) + sizeof("instances"));
  if (!g.prefix || !g.reg_key || parse_url(sc->redis, &g.a) < 0) {
    px_log_error("redis: cannot use address (check host, port and db)");
    free(g.prefix);
    free(g.reg_key);
    addr_free(&g.a);
    return -1;
  }
  sprintf(g.reg_key, "%sinstances", prefix);
  snprintf(g.instance, sizeof(g.instance), "%s", px_rl_instance());
  unsigned char md[SHA_DIGEST_LENGTH];
  SHA1((const unsigned char *)script, strlen(script), md);
  for (int i = 0; i < SHA_DIGEST_LENGTH; i++) sprintf(g.sha + 2 * i, "%02x", md[i]);
  uv_timer_init(loop, &g.retry);
  uv_timer_init(loop, &g.watch);
  uv_timer_init(loop, &g.reg);
  uv_unref((uv_handle_t *)&g.retry);
  uv_unref((uv_handle_t *)&g.watch);
  uv_unref((uv_handle_t *)&g.reg);
  uv_timer_start(&g.reg, on_register_timer, REGISTER_MS, REGISTER_MS);
  g.running = 1;
  connect_now();
  return 0;
}

static void on_timer_closed(uv_handle_t *h) {
  (void)h;
}

void px_redis_stop(void) {
  if (!g.running) return;
  g.stopping = 1;
  if (g.ac) {
    redisAsyncContext *ac = g.ac;
    g.ac = NULL;
    redisAsyncFree(ac); /* pending callbacks get a NULL reply */
  }
  uv_close((uv_handle_t *)&g.retry, on_timer_closed);
  uv_close((uv_handle_t *)&g.watch, on_timer_closed);
  uv_close((uv_handle_t *)&g.reg, on_timer_closed);
  addr_free(&g.a);
  free(g.prefix);
  free(g.reg_key);
  g.prefix = g.reg_key = NULL;
  g.running = g.up = 0;
}

int px_redis_running(void) {
  return g.running;
}

/* ---- admission ------------------------------------------------------------ */

/* prefix "rl:" name: the key of name's buckets; out has room for it */
static size_t bucket_key(char *out, const char *prefix, const char *name) {
  size_t pl = strlen(prefix), kl = strlen(name);
  memcpy(out, prefix, pl);
  memcpy(out + pl, "rl:", 3);
  memcpy(out + pl + 3, name, kl + 1);
  return pl + 3;
}

/* The script's ARGV: mode, rpm, tpm, tokens. */
static void script_args(char argv[4][24], const char *mode, uint64_t rpm, uint64_t tpm,
                        long long n) {
  snprintf(argv[0], 24, "%s", mode);
  snprintf(argv[1], 24, "%llu", (unsigned long long)rpm);
  snprintf(argv[2], 24, "%llu", (unsigned long long)tpm);
  snprintf(argv[3], 24, "%lld", n);
}

static int send_script(px_rl_wait_t *w, redisCallbackFn *cb) {
  const char *argv[8];
  int n = 0;
  argv[n++] = w->resent ? "EVAL" : "EVALSHA";
  argv[n++] = w->resent ? script : g.sha;
  argv[n++] = "1";
  argv[n++] = w->key;
  for (int i = 0; i < 4; i++) argv[n++] = w->argv[i];
  return send_argv(cb, &w->c, n, argv);
}

static px_rl_wait_t *wait_new(const char *key, const char *mode, uint64_t rpm,
                              uint64_t tpm, long long n) {
  px_rl_wait_t *w = calloc(1, sizeof(*w) + strlen(g.prefix) + 3 + strlen(key) + 1);
  if (!w) return NULL;
  w->name_off = bucket_key(w->key, g.prefix, key);
  w->hash = hash_str(key);
  w->rpm = rpm;
  w->tpm = tpm;
  script_args(w->argv, mode, rpm, tpm, n);
  return w;
}

static int noscript(const redisReply *r) {
  return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* A reply arrived. 1 when the script was unknown to the server and has been
 * sent again with cb (the reply will come back there); 0 to handle this
 * reply. */
static int reply_resent(px_rl_wait_t *w, const redisReply *reply, redisCallbackFn *cb) {
  unlink_cmd(&w->c);
  if (noscript(reply) && !w->resent) {
    w->resent = 1;
    if (send_script(w, cb) == 0) return 1;
  }
  return 0;
}

/* A script failed on a Redis that answers (out of memory, a bug): its
 * request follows on_error; logged once until a script succeeds again. */
static void script_failed(const char *msg) {
  px_metrics_state("redis", "error");
  if (g.script_err) return;
  g.script_err = 1;
  px_log_error(
      "redis state backend: script error (%.150s): on_error = %s for the requests "
      "it fails",
      msg, g.on_error);
}

static void on_admit_reply(redisAsyncContext *ac, void *r, void *priv) {
  redisReply *reply = r;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, reply, on_admit_reply)) return;
  px_rl_verdict_t v;
  unsigned ra = 0;
  if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_INTEGER &&
      reply->element[1]->type == REDIS_REPLY_INTEGER) {
    if (g.script_err) {
      g.script_err = 0;
      px_log_info("redis state backend: scripts succeed again");
    }
    long long code = reply->element[0]->integer, ms = reply->element[1]->integer;
    if (code == 0) {
      v = PX_RL_ALLOW;
    } else {
      v = PX_RL_LIMITED;
      if (ms < 1) ms = 1;
      ra = (unsigned)((ms + 999) / 1000);
      uint64_t keep =
          code == 2 && ms > TPM_CACHE_MAX_MS ? TPM_CACHE_MAX_MS : (uint64_t)ms;
      if (g.running) {
        cache_slot_t *c = &g.cache[w->hash & (CACHE_SLOTS - 1)];
        c->hash = w->hash;
        c->until_ms = uv_now(g.loop) + keep;
      }
    }
  } else if (g.stopping) {
    v = PX_RL_OPEN; /* worker going away: nobody is waiting */
  } else {
    if (reply == NULL)
      go_down(ac && ac->errstr[0] ? ac->errstr : "connection lost");
    else
      script_failed(reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    v = px_rl_fallback(w->key + w->name_off, w->rpm, w->tpm, w->flags,
                       g.running ? uv_now(g.loop) : 0, &ra);
  }
  if (w->done) w->done(w->arg, v, ra);
  free(w);
}

px_rl_verdict_t px_redis_admit(const char *key, uint64_t rpm, uint64_t tpm,
                               uint64_t reserve, unsigned flags, uint64_t now_ms,
                               unsigned *retry_after, px_rl_done_fn done, void *arg,
                               px_rl_wait_t **wait) {
  uint64_t h = hash_str(key);
  cache_slot_t *c = &g.cache[h & (CACHE_SLOTS - 1)];
  if (c->hash == h && c->until_ms > now_ms) {
    *retry_after = (unsigned)((c->until_ms - now_ms + 999) / 1000);
    return PX_RL_LIMITED;
  }
  /* found unreachable: on_error at once until a reconnect succeeds (while
   * the first connection is made, hiredis queues the command) */
  if (!g.ac || g.down) return px_rl_fallback(key, rpm, tpm, flags, now_ms, retry_after);
  px_rl_wait_t *w = wait_new(key, "a", rpm, tpm, (long long)reserve);
  if (!w) return px_rl_fallback(key, rpm, tpm, flags, now_ms, retry_after);
  w->done = done;
  w->arg = arg;
  w->flags = flags;
  if (send_script(w, on_admit_reply) < 0) {
    free(w);
    return px_rl_fallback(key, rpm, tpm, flags, now_ms, retry_after);
  }
  *wait = w;
  return PX_RL_PENDING;
}

void px_redis_cancel(px_rl_wait_t *w) {
  w->done = NULL;
}

static void on_settle_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, r, on_settle_reply)) return;
  free(w);
}

void px_redis_settle(const char *key, uint64_t tpm, int64_t delta) {
  if (!g.ac || g.down) return; /* lost: the bucket refills by itself */
  px_rl_wait_t *w = wait_new(key, "s", 0, tpm, (long long)delta);
  if (!w) return;
  /* tokens returned: the local over-limit mark may be stale */
  cache_slot_t *c = &g.cache[w->hash & (CACHE_SLOTS - 1)];
  if (delta < 0 && c->hash == w->hash) c->until_ms = 0;
  if (send_script(w, on_settle_reply) < 0) free(w);
}

/* ---- the master: a dead worker's reservations ----------------------------- */

static int sync_ok(redisContext *c, const char *what, char *why, size_t n) {
  redisReply *r = NULL;
  if (redisGetReply(c, (void **)&r) != REDIS_OK) {
    snprintf(why, n, "%s: %s", what, c->errstr);
    return 0;
  }
  int ok = r->type != REDIS_REPLY_ERROR;
  if (!ok) snprintf(why, n, "%s: %.150s", what, r->str);
  freeReplyObject(r);
  return ok;
}

void px_redis_release(const px_state_conf_t *sc, const px_inflight_rec_t *recs,
                      size_t n) {
  size_t need = 0, done = 0;
  for (size_t i = 0; i < n; i++) need += recs[i].tpm_reserved > 0 && recs[i].tpm > 0;
  if (need == 0) return;
  addr_t a;
  char why[256] = "out of memory";
  redisContext *c = NULL;
  const char *prefix = sc->prefix ? sc->prefix : "";
  char *key = malloc(strlen(prefix) + 3 + PX_INFLIGHT_KEY);
  if (parse_url(sc->redis, &a) < 0 || key == NULL) goto out;
  struct timeval tv = {(time_t)(sc->timeout_ms / 1000),
                       (suseconds_t)(sc->timeout_ms % 1000) * 1000};
  c = a.path ? redisConnectUnixWithTimeout(a.path, tv)
             : redisConnectWithTimeout(a.host, a.port, tv);
  if (c == NULL || c->err) {
    snprintf(why, sizeof(why), "%s", c ? c->errstr : "cannot connect");
    goto out;
  }
  redisSetTimeout(c, tv);
  /* pipelined: the setup, then one settlement per reservation */
  if (a.password) {
    if (a.user)
      redisAppendCommand(c, "AUTH %s %s", a.user, a.password);
    else
      redisAppendCommand(c, "AUTH %s", a.password);
  }
  if (a.db) redisAppendCommand(c, "SELECT %d", a.db);
  for (size_t i = 0; i < n; i++) {
    if (recs[i].tpm_reserved == 0 || recs[i].tpm == 0) continue;
    char argv[4][24];
    script_args(argv, "s", 0, recs[i].tpm, -(long long)recs[i].tpm_reserved);
    bucket_key(key, prefix, recs[i].key);
    const char *av[] = {"EVAL", script, "1", key, argv[0], argv[1], argv[2], argv[3]};
    size_t al[8];
    for (int k = 0; k < 8; k++) al[k] = strlen(av[k]);
    redisAppendCommandArgv(c, 8, av, al);
  }
  int ok = (!a.password || sync_ok(c, "AUTH", why, sizeof(why))) &&
           (!a.db || sync_ok(c, "SELECT", why, sizeof(why)));
  while (ok && done < need && sync_ok(c, "release", why, sizeof(why))) done++;
out:
  if (done < need)
    px_log_warn(
        "redis: %zu reservations of a dead worker not released (%s); they lapse "
        "within a minute",
        need - done, why);
  if (c) redisFree(c);
  addr_free(&a);
  free(key);
}
