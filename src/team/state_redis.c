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
 *   disconnected --connect--> connecting --ok--> connected
 *        ^   (backoff timer)        |                 |
 *        +------------- fail -------+---- error ------+
 *
 * While not connected an admission follows on_error at once: allow (served,
 * counted) or deny (503). The first failure of an incident is logged, and
 * its end. A key found over its limit is remembered locally until its
 * bucket can have room again (rpm: the wait Redis computed; tpm: at most a
 * second, as other requests' settlements may return tokens earlier), which
 * saves a round trip per refused request.
 */
#include "proxai/state_redis.h"

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/log.h"
#include "proxai/metrics.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
/* A command unanswered this long means Redis is stuck: drop the connection
 * (its callbacks then fail over to on_error) and reconnect. */
#define REPLY_TIMEOUT_MS 2000
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

struct px_rl_wait {
  px_rl_done_fn done; /* NULL once cancelled */
  void *arg;
  uint64_t hash;
  int resent; /* EVAL after NOSCRIPT */
  char argv[4][24];
  char key[];
};

typedef struct cache_slot {
  uint64_t hash;
  uint64_t until_ms;
} cache_slot_t;

static struct {
  uv_loop_t *loop;
  redisAsyncContext *ac;
  int connected, running, stopping;
  uv_timer_t timer; /* reconnect backoff, and the reply watchdog */
  uint64_t backoff_ms;
  char *host, *path, *user, *password, *prefix;
  int port, db, deny;
  char sha[41];
  int incident;    /* logged, not over yet */
  size_t inflight; /* commands sent, reply not yet seen */
  uint64_t last_progress_ms;
  cache_slot_t cache[CACHE_SLOTS];
} g;

static void connect_now(void);
static void schedule_reconnect(void);

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h | 1; /* 0 = empty cache slot */
}

static void incident(const char *why) {
  px_metrics_state("redis", "error");
  if (g.incident) return;
  g.incident = 1;
  px_log_error("redis state backend unreachable (%s): on_error = %s until it is back",
               why, g.deny ? "deny" : "allow");
}

static void recovered(void) {
  if (!g.incident) return;
  g.incident = 0;
  px_log_info("redis state backend is back: shared limits apply again");
}

/* on_error, counted per request */
static px_rl_verdict_t failed_verdict(void) {
  px_metrics_state("redis", g.deny ? "denied" : "allowed");
  return g.deny ? PX_RL_UNAVAILABLE : PX_RL_ALLOW;
}

/* ---- connection ---------------------------------------------------------- */

static void on_timer(uv_timer_t *t) {
  (void)t;
  if (g.stopping) return;
  if (!g.ac) {
    connect_now();
    return;
  }
  /* watchdog: a connected Redis that stopped answering */
  if (g.inflight > 0 && uv_now(g.loop) - g.last_progress_ms > REPLY_TIMEOUT_MS) {
    redisAsyncContext *ac = g.ac;
    g.ac = NULL;
    g.connected = 0;
    g.inflight = 0;
    incident("no reply");
    redisAsyncFree(ac); /* waiting admissions follow on_error */
    schedule_reconnect();
  }
}

static void schedule_reconnect(void) {
  if (g.stopping) return;
  uv_timer_start(&g.timer, on_timer, g.backoff_ms, 0);
  g.backoff_ms = g.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : g.backoff_ms * 2;
}

static void on_connect(const redisAsyncContext *ac, int status) {
  if (status != REDIS_OK) {
    /* hiredis frees the context after this callback */
    if (g.ac == ac) g.ac = NULL;
    g.connected = 0;
    g.inflight = 0;
    incident(ac->errstr[0] ? ac->errstr : "cannot connect");
    schedule_reconnect();
    return;
  }
  g.connected = 1;
  g.backoff_ms = BACKOFF_MIN_MS;
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  (void)status;
  if (g.ac == ac) g.ac = NULL;
  g.connected = 0;
  g.inflight = 0;
  if (g.stopping) return;
  incident(ac->errstr[0] ? ac->errstr : "connection closed");
  uv_timer_stop(&g.timer);
  schedule_reconnect();
}

static void on_setup_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  redisReply *reply = r;
  if (g.inflight) g.inflight--;
  if (reply && reply->type == REDIS_REPLY_ERROR)
    px_log_error("redis %s failed: %.200s", (const char *)priv, reply->str);
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
      g.path ? redisAsyncConnectUnix(g.path) : redisAsyncConnect(g.host, g.port);
  if (ac == NULL || ac->err) {
    incident(ac ? ac->errstr : "out of memory");
    if (ac) redisAsyncFree(ac);
    schedule_reconnect();
    return;
  }
  if (redisLibuvAttach(ac, g.loop) != REDIS_OK) {
    incident("cannot attach to the loop");
    redisAsyncFree(ac);
    schedule_reconnect();
    return;
  }
  ac->ev.addRead = add_read;
  ac->ev.delRead = del_read;
  ac->ev.addWrite = add_write;
  ac->ev.delWrite = del_write;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  g.ac = ac;
  /* queued: sent first once connected */
  if (g.password) {
    if (g.user)
      redisAsyncCommand(ac, on_setup_reply, "AUTH", "AUTH %s %s", g.user, g.password);
    else
      redisAsyncCommand(ac, on_setup_reply, "AUTH", "AUTH %s", g.password);
    g.inflight++;
  }
  if (g.db) {
    redisAsyncCommand(ac, on_setup_reply, "SELECT", "SELECT %d", g.db);
    g.inflight++;
  }
  /* hiredis 0.14 watches the socket only once a command is queued: without
   * one the connection would never complete */
  redisAsyncCommand(ac, on_setup_reply, "PING", "PING");
  g.inflight++;
  g.last_progress_ms = uv_now(g.loop);
  uv_timer_start(&g.timer, on_timer, REPLY_TIMEOUT_MS / 2, REPLY_TIMEOUT_MS / 2);
}

/* redis://[[user]:password@]host[:port][/db] or unix:/path */
static int parse_url(const char *url) {
  if (strncmp(url, "unix:", 5) == 0) {
    g.path = strdup(url + 5);
    return g.path ? 0 : -1;
  }
  const char *s = url + 8; /* "redis://" */
  const char *at = strrchr(s, '@');
  if (at) {
    const char *colon = memchr(s, ':', (size_t)(at - s));
    if (colon) {
      if (colon > s) g.user = strndup(s, (size_t)(colon - s));
      g.password = strndup(colon + 1, (size_t)(at - colon - 1));
    } else {
      g.password = strndup(s, (size_t)(at - s));
    }
    s = at + 1;
  }
  const char *slash = strchr(s, '/');
  size_t hl = slash ? (size_t)(slash - s) : strlen(s);
  const char *colon = memchr(s, ':', hl);
  g.port = 6379;
  if (colon) {
    g.port = atoi(colon + 1);
    hl = (size_t)(colon - s);
  }
  g.host = strndup(s, hl);
  if (slash && slash[1]) g.db = atoi(slash + 1);
  if (!g.host || !g.host[0] || g.port <= 0 || g.port > 65535) return -1;
  return 0;
}

int px_redis_start(uv_loop_t *loop, const px_state_conf_t *sc) {
  if (g.running) return 0;
  memset(&g, 0, sizeof(g));
  g.loop = loop;
  g.deny = sc->on_error_deny;
  g.prefix = strdup(sc->prefix ? sc->prefix : "");
  if (!g.prefix || parse_url(sc->redis) < 0) {
    px_log_error("redis: cannot use address (check host, port and db)");
    return -1;
  }
  unsigned char md[SHA_DIGEST_LENGTH];
  SHA1((const unsigned char *)script, strlen(script), md);
  for (int i = 0; i < SHA_DIGEST_LENGTH; i++) sprintf(g.sha + 2 * i, "%02x", md[i]);
  uv_timer_init(loop, &g.timer);
  uv_unref((uv_handle_t *)&g.timer);
  g.backoff_ms = BACKOFF_MIN_MS;
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
  uv_close((uv_handle_t *)&g.timer, on_timer_closed);
  free(g.host);
  free(g.path);
  free(g.user);
  free(g.password);
  free(g.prefix);
  g.host = g.path = g.user = g.password = g.prefix = NULL;
  g.running = g.connected = 0;
}

int px_redis_running(void) {
  return g.running;
}

/* ---- admission ------------------------------------------------------------ */

static int send_script(px_rl_wait_t *w, redisCallbackFn *cb) {
  const char *argv[10];
  size_t argvlen[10];
  int n = 0;
  argv[n++] = w->resent ? "EVAL" : "EVALSHA";
  argv[n++] = w->resent ? script : g.sha;
  argv[n++] = "1";
  argv[n++] = w->key;
  for (int i = 0; i < 4; i++) argv[n++] = w->argv[i];
  for (int i = 0; i < n; i++) argvlen[i] = strlen(argv[i]);
  if (!g.ac || redisAsyncCommandArgv(g.ac, cb, w, n, argv, argvlen) != REDIS_OK)
    return -1;
  if (g.inflight++ == 0) g.last_progress_ms = uv_now(g.loop);
  return 0;
}

static px_rl_wait_t *wait_new(const char *key, const char *mode, uint64_t rpm,
                              uint64_t tpm, long long n) {
  size_t pl = strlen(g.prefix), kl = strlen(key);
  px_rl_wait_t *w = calloc(1, sizeof(*w) + pl + 3 + kl + 1);
  if (!w) return NULL;
  memcpy(w->key, g.prefix, pl);
  memcpy(w->key + pl, "rl:", 3);
  memcpy(w->key + pl + 3, key, kl + 1);
  w->hash = hash_str(key);
  snprintf(w->argv[0], sizeof(w->argv[0]), "%s", mode);
  snprintf(w->argv[1], sizeof(w->argv[1]), "%llu", (unsigned long long)rpm);
  snprintf(w->argv[2], sizeof(w->argv[2]), "%llu", (unsigned long long)tpm);
  snprintf(w->argv[3], sizeof(w->argv[3]), "%lld", n);
  return w;
}

static int noscript(const redisReply *r) {
  return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* A reply arrived: the connection makes progress. 1 when the script was
 * unknown to the server and has been sent again with cb (the reply will come
 * back there); 0 to handle this reply. */
static int reply_resent(px_rl_wait_t *w, const redisReply *reply, redisCallbackFn *cb) {
  if (g.inflight) g.inflight--;
  if (g.running) g.last_progress_ms = uv_now(g.loop);
  if (noscript(reply) && !w->resent) {
    w->resent = 1;
    if (send_script(w, cb) == 0) return 1;
  }
  return 0;
}

static void on_admit_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  redisReply *reply = r;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, reply, on_admit_reply)) return;
  px_rl_verdict_t v;
  unsigned ra = 0;
  if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_INTEGER &&
      reply->element[1]->type == REDIS_REPLY_INTEGER) {
    recovered();
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
    v = PX_RL_ALLOW; /* worker going away: nobody is waiting */
  } else {
    if (reply && reply->type == REDIS_REPLY_ERROR) {
      char why[160];
      snprintf(why, sizeof(why), "script error: %.120s", reply->str);
      incident(why);
    } else {
      incident(reply ? "unexpected reply" : "connection lost");
    }
    v = failed_verdict();
  }
  if (w->done) w->done(w->arg, v, ra);
  free(w);
}

px_rl_verdict_t px_redis_admit(const char *key, uint64_t rpm, uint64_t tpm,
                               uint64_t reserve, uint64_t now_ms, unsigned *retry_after,
                               px_rl_done_fn done, void *arg, px_rl_wait_t **wait) {
  uint64_t h = hash_str(key);
  cache_slot_t *c = &g.cache[h & (CACHE_SLOTS - 1)];
  if (c->hash == h && c->until_ms > now_ms) {
    *retry_after = (unsigned)((c->until_ms - now_ms + 999) / 1000);
    return PX_RL_LIMITED;
  }
  /* while connecting, hiredis queues the command until the connection is up */
  if (!g.ac) return failed_verdict();
  px_rl_wait_t *w = wait_new(key, "a", rpm, tpm, (long long)reserve);
  if (!w) return failed_verdict();
  w->done = done;
  w->arg = arg;
  if (send_script(w, on_admit_reply) < 0) {
    free(w);
    incident("cannot send");
    return failed_verdict();
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
  if (!g.ac) return; /* lost: the bucket refills by itself */
  px_rl_wait_t *w = wait_new(key, "s", 0, tpm, (long long)delta);
  if (!w) return;
  /* tokens returned: the local over-limit mark may be stale */
  cache_slot_t *c = &g.cache[w->hash & (CACHE_SLOTS - 1)];
  if (delta < 0 && c->hash == w->hash) c->until_ms = 0;
  if (send_script(w, on_settle_reply) < 0) free(w);
}

/* ---- commands of other modules (stored responses) ---------------------- */

typedef struct cmd_wait {
  px_redis_reply_fn cb;
  void *arg;
} cmd_wait_t;

static void on_command_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  cmd_wait_t *w = priv;
  if (g.inflight) g.inflight--;
  if (g.running) g.last_progress_ms = uv_now(g.loop);
  redisReply *reply = r;
  if (reply != NULL && reply->type != REDIS_REPLY_ERROR) recovered();
  w->cb(w->arg, reply);
  free(w);
}

int px_redis_command(int argc, const char **argv, const size_t *argvlen,
                     px_redis_reply_fn cb, void *arg) {
  if (!g.ac) return -1;
  cmd_wait_t *w = malloc(sizeof(*w));
  if (w == NULL) return -1;
  w->cb = cb;
  w->arg = arg;
  if (redisAsyncCommandArgv(g.ac, on_command_reply, w, argc, argv, argvlen) != REDIS_OK) {
    free(w);
    return -1;
  }
  if (g.inflight++ == 0) g.last_progress_ms = uv_now(g.loop);
  return 0;
}
