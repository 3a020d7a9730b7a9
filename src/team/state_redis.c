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
#include <unistd.h>

#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/money.h"
#include "proxai/store.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
/* A command unanswered this long means Redis is stuck: drop the connection
 * (its callbacks then fail over to on_error) and reconnect. */
#define REPLY_TIMEOUT_MS 2000
#define CACHE_SLOTS 256
#define TPM_CACHE_MAX_MS 1000

/* KEYS: 1 the key's rpm/tpm bucket; 2, 3 the key's budget: spend counter of
 * the window, reservations; 4, 5 the team's. ARGV[1]: the arguments joined
 * by spaces (one argument: a command of at most 10 parts, which is what
 * Redis parses from a client before AUTH, so that a missing password is
 * reported as NOAUTH): 1 mode ("a" admit, "s"
 * settle, "q" query, "r" renew), 2 rpm, 3 tpm, 4 tokens (reserve | delta),
 * 5 owner (this worker), 6 key budget, 7 team budget (nano-USD, 0 = none),
 * 8 cost set aside, 9 cost spent (settle), 10 and 11 how long the key's and
 * the team's spend counters are kept (ms, 0 = for ever).
 *
 * Bucket levels are in 1/60000 token: `limit` per minute refills `limit`
 * units per millisecond. A reservation is a field r:OWNER of the hash, with
 * e:OWNER its lapse time: a worker renews its own every 20 s, and the
 * fields of one that stopped (a dead instance) are dropped 60 s after.
 * Admit returns {0, 0} allowed, {1, wait_ms} rpm or {2, wait_ms} tpm
 * refused, {3, left} the key's or {4, left} the team's budget refused. */
static const char script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local U = 60000\n"
    "local packed = ARGV[1]\n"
    "local ARGV = {}\n"
    "for x in string.gmatch(packed, '%S+') do ARGV[#ARGV + 1] = x end\n"
    "local mode, rpm, tpm, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local owner, kb, tb = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])\n"
    "local f = function(x) return string.format('%.0f', x) end\n"
    "local function held(h)\n"
    "  local all = redis.call('HGETALL', h)\n"
    "  local exp, sum = {}, 0\n"
    "  for i = 1, #all, 2 do\n"
    "    if string.sub(all[i], 1, 2) == 'e:' then exp[string.sub(all[i], 3)] = tonumber(all[i + 1]) end\n"
    "  end\n"
    "  for i = 1, #all, 2 do\n"
    "    if string.sub(all[i], 1, 2) == 'r:' then\n"
    "      local o = string.sub(all[i], 3)\n"
    "      if (exp[o] or 0) >= now then sum = sum + tonumber(all[i + 1])\n"
    "      else redis.call('HDEL', h, all[i], 'e:' .. o) end\n"
    "    end\n"
    "  end\n"
    "  return sum\n"
    "end\n"
    "local function spent(k) return tonumber(redis.call('GET', k) or '0') end\n"
    "local function hold(h, c)\n"
    "  redis.call('HINCRBY', h, 'r:' .. owner, f(c))\n"
    "  redis.call('HSET', h, 'e:' .. owner, f(now + 60000))\n"
    "  redis.call('PEXPIRE', h, 120000)\n"
    "end\n"
    "if mode == 'q' then\n"
    "  return {f(spent(KEYS[2])), f(held(KEYS[3])), f(spent(KEYS[4])), f(held(KEYS[5]))}\n"
    "end\n"
    "if mode == 'r' then\n"
    "  for i = 3, 5, 2 do\n"
    "    if redis.call('HEXISTS', KEYS[i], 'r:' .. owner) == 1 then hold(KEYS[i], 0) end\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local v = redis.call('HMGET', KEYS[1], 'rl', 'rt', 'tl', 'tt')\n"
    "local function refill(level, last, limit)\n"
    "  local cap = limit * U\n"
    "  if level == nil or last == nil then return cap, now end\n"
    "  if now > last then level = level + (now - last) * limit; last = now end\n"
    "  if level > cap then level = cap end\n"
    "  return level, last\n"
    "end\n"
    /* a bucket is kept until it would be full again (a deep tpm debt lasts
     * as long as it takes to repay), then it expires: absent = full */
    "local function full(level, limit)\n"
    "  if limit <= 0 then return 1000 end\n"
    "  return math.ceil((limit * U - level) / limit) + 1000\n"
    "end\n"
    "local tl, tt = refill(tonumber(v[3]), tonumber(v[4]), tpm)\n"
    "if mode == 's' then\n"
    "  if tpm > 0 and n ~= 0 then\n"
    "    tl = tl - n * U\n"
    "    if tl > tpm * U then tl = tpm * U end\n"
    "    redis.call('HSET', KEYS[1], 'tl', f(tl), 'tt', f(tt))\n"
    "    redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), full(tl, tpm)))\n"
    "  end\n"
    "  local c, cost = tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "  for i = 0, 1 do\n"
    "    if tonumber(ARGV[6 + i]) > 0 then\n"
    "      local sk, h, ttl = KEYS[2 + 2 * i], KEYS[3 + 2 * i], tonumber(ARGV[10 + i])\n"
    "      if cost > 0 then\n"
    "        redis.call('INCRBY', sk, ARGV[9])\n"
    "        if ttl > 0 then redis.call('PEXPIRE', sk, ttl) end\n"
    "      end\n"
    "      if c > 0 and redis.call('HINCRBY', h, 'r:' .. owner, '-' .. ARGV[8]) <= 0 then\n"
    "        redis.call('HDEL', h, 'r:' .. owner, 'e:' .. owner)\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local rl, rt = refill(tonumber(v[1]), tonumber(v[2]), rpm)\n"
    "if tpm > 0 and tl < 0 then return {2, math.ceil(-tl / tpm)} end\n"
    "if rpm > 0 and rl < U then return {1, math.ceil((U - rl) / rpm)} end\n"
    "local c = tonumber(ARGV[8])\n"
    "if kb > 0 then\n"
    "  local left = kb - spent(KEYS[2]) - held(KEYS[3])\n"
    "  if c > left then return {3, f(math.max(left, 0))} end\n"
    "end\n"
    "if tb > 0 then\n"
    "  local left = tb - spent(KEYS[4]) - held(KEYS[5])\n"
    "  if c > left then return {4, f(math.max(left, 0))} end\n"
    "end\n"
    "if rpm > 0 or tpm > 0 then\n"
    "  if rpm > 0 then rl = rl - U end\n"
    "  if tpm > 0 then tl = tl - n * U end\n"
    "  redis.call('HSET', KEYS[1], 'rl', f(rl), 'rt', f(rt), 'tl', f(tl), 'tt', f(tt))\n"
    "  redis.call('PEXPIRE', KEYS[1], math.max(full(rl, rpm), full(tl, tpm)))\n"
    "end\n"
    "if kb > 0 then hold(KEYS[3], c) end\n"
    "if tb > 0 then hold(KEYS[5], c) end\n"
    "return {0, 0}\n";

#define NKEYS 5
#define NARGS 11

/* One script call: its keys and arguments, and who waits for the answer. */
struct px_rl_wait {
  px_rl_done_fn done;  /* admit: NULL once cancelled */
  px_rl_usage_fn udone; /* query */
  void *arg;
  uint64_t hash;
  int resent; /* EVAL after NOSCRIPT */
  int budgeted;
  char keys[NKEYS][PX_STORE_KEY_MAX];
  char args[NARGS][48];
  char packed[NARGS * 48];
  const char *argv[3 + NKEYS + 1];
  size_t argvlen[3 + NKEYS + 1];
};

/* Budgets this worker holds reservations on: renewed every RENEW_MS. */
#define RENEW_MS 20000
typedef struct held {
  char *res; /* the reservations hash */
  long count;
} held_t;

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
  char owner[40]; /* this worker's name on its reservations */
  held_t *held;
  size_t nheld;
  uv_timer_t renew;
} g;

static void connect_now(void);
static void on_renew(uv_timer_t *t);
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
  uv_timer_init(loop, &g.renew);
  uv_unref((uv_handle_t *)&g.renew);
  uv_timer_start(&g.renew, on_renew, RENEW_MS, RENEW_MS);
  /* this worker's name on its budget reservations: random, so that a
   * restarted instance never renews a dead one's */
  unsigned char rnd[8] = {0};
  FILE *ur = fopen("/dev/urandom", "rb");
  if (ur) {
    if (fread(rnd, 1, sizeof(rnd), ur) != sizeof(rnd)) memset(rnd, 0, sizeof(rnd));
    fclose(ur);
  }
  int ol = 0;
  for (int i = 0; i < 8; i++) ol += sprintf(g.owner + ol, "%02x", rnd[i]);
  snprintf(g.owner + ol, sizeof(g.owner) - (size_t)ol, ":%ld", (long)getpid());
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
  uv_close((uv_handle_t *)&g.renew, on_timer_closed);
  for (size_t i = 0; i < g.nheld; i++) free(g.held[i].res);
  free(g.held);
  g.held = NULL;
  g.nheld = 0;
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

static void wait_free(px_rl_wait_t *w) {
  free(w);
}

static int send_script(px_rl_wait_t *w, redisCallbackFn *cb) {
  w->argv[0] = w->resent ? "EVAL" : "EVALSHA";
  w->argv[1] = w->resent ? script : g.sha;
  w->argvlen[0] = strlen(w->argv[0]);
  w->argvlen[1] = strlen(w->argv[1]);
  if (!g.ac || redisAsyncCommandArgv(g.ac, cb, w, 3 + NKEYS + 1, w->argv, w->argvlen) !=
                   REDIS_OK)
    return -1;
  if (g.inflight++ == 0) g.last_progress_ms = uv_now(g.loop);
  return 0;
}

/* argv from keys[] and args[] (after either changed) */
static void pack(px_rl_wait_t *w) {
  w->argv[2] = "5";
  w->argvlen[2] = 1;
  for (int i = 0; i < NKEYS; i++) {
    w->argv[3 + i] = w->keys[i];
    w->argvlen[3 + i] = strlen(w->keys[i]);
  }
  size_t n = 0;
  for (int i = 0; i < NARGS; i++)
    n += (size_t)snprintf(w->packed + n, sizeof(w->packed) - n, "%s%s", i ? " " : "",
                          w->args[i]);
  w->argv[3 + NKEYS] = w->packed;
  w->argvlen[3 + NKEYS] = n;
}

/* A script call for key k, mode "a", "s", "q" or "r": the key's bucket, the
 * Redis names of its budget and its team's ("PREFIX bud:k:NAME:LABEL" the
 * spend of the window, "PREFIX bud:k:NAME:res" the reservations;
 * placeholders when there is no budget) and the arguments. res: renew this
 * reservations hash (mode "r"). */
static px_rl_wait_t *wait_new(const px_key_conf_t *k, const char *mode, int64_t now_s,
                              long long tokens, int64_t cost, int64_t spent,
                              const char *res) {
  px_rl_wait_t *w = calloc(1, sizeof(*w));
  if (!w) return NULL;
  int64_t budget[2], ttl_ms[2] = {0, 0};
  snprintf(w->keys[0], sizeof(w->keys[0]), "%srl:%s", g.prefix, k->name);
  for (int i = 0; i < 2; i++) {
    const char *name = i == 0 ? k->name : k->team ? k->team->name : NULL;
    px_window_t kind = i == 0 ? k->window : k->team ? k->team->window : PX_WINDOW_MONTH;
    char *sk = w->keys[1 + 2 * i], *rk = w->keys[2 + 2 * i];
    budget[i] = i == 0 ? k->budget : k->team ? k->team->budget : 0;
    if (!name || budget[i] <= 0) {
      budget[i] = 0;
      snprintf(sk, PX_STORE_KEY_MAX, "%sbud:-", g.prefix);
      snprintf(rk, PX_STORE_KEY_MAX, "%sbud:-:res", g.prefix);
      continue;
    }
    px_win_t win;
    px_window_at(kind, (time_t)now_s, &win);
    snprintf(sk, PX_STORE_KEY_MAX, "%sbud:%c:%s:%s", g.prefix, i ? 't' : 'k', name,
             win.label);
    snprintf(rk, PX_STORE_KEY_MAX, "%sbud:%c:%s:res", g.prefix, i ? 't' : 'k', name);
    /* a window's spend is kept 35 days past its end (last month's usage
     * stays readable); `total` for ever */
    if (win.resets_at) ttl_ms[i] = (win.resets_at - now_s + 35 * 86400) * 1000;
  }
  if (res) snprintf(w->keys[2], sizeof(w->keys[2]), "%s", res);
  long long v[NARGS] = {0,         (long long)k->rpm, (long long)k->tpm, tokens, 0,
                        budget[0], budget[1],         cost,              spent,  ttl_ms[0],
                        ttl_ms[1]};
  for (int i = 0; i < NARGS; i++) snprintf(w->args[i], sizeof(w->args[i]), "%lld", v[i]);
  snprintf(w->args[0], sizeof(w->args[0]), "%s", mode);
  snprintf(w->args[4], sizeof(w->args[4]), "%s", g.owner);
  pack(w);
  w->hash = hash_str(k->name);
  w->budgeted = budget[0] > 0 || budget[1] > 0;
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

/* reservations this worker holds on the budget hashes of w: +1 / -1 */
static void held_add(const char *res, long d) {
  size_t i = 0;
  while (i < g.nheld && strcmp(g.held[i].res, res) != 0) i++;
  if (i == g.nheld) {
    if (d < 0) return;
    held_t *h = realloc(g.held, (g.nheld + 1) * sizeof(*h));
    if (!h) return;
    g.held = h;
    if ((h[i].res = strdup(res)) == NULL) return;
    h[i].count = 0;
    g.nheld++;
  }
  g.held[i].count += d;
}

static void held_wait(const px_rl_wait_t *w, long d) {
  if (atoll(w->args[5]) > 0) held_add(w->keys[2], d);
  if (atoll(w->args[6]) > 0) held_add(w->keys[4], d);
}

static void on_fire_reply(redisAsyncContext *ac, void *r, void *priv);

/* Turn an admit call into the settle that undoes it (a cancelled waiter
 * whose admission Redis made anyway): its tokens and reservations back. */
static void undo_admit(const px_rl_wait_t *w) {
  px_rl_wait_t *u = malloc(sizeof(*u));
  if (!u) return;
  *u = *w;
  u->resent = 0;
  snprintf(u->args[0], sizeof(u->args[0]), "s");
  snprintf(u->args[3], sizeof(u->args[3]), "%lld", -atoll(w->args[3]));
  snprintf(u->args[8], sizeof(u->args[8]), "0");
  pack(u);
  held_wait(w, -1);
  if (send_script(u, on_fire_reply) < 0) wait_free(u);
}

static void on_admit_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  redisReply *reply = r;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, reply, on_admit_reply)) return;
  px_rl_verdict_t v;
  px_refusal_t why = {0};
  if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_INTEGER) {
    recovered();
    long long code = reply->element[0]->integer;
    const redisReply *e1 = reply->element[1];
    long long val = e1->type == REDIS_REPLY_INTEGER ? e1->integer
                    : e1->type == REDIS_REPLY_STRING ? atoll(e1->str)
                                                     : 0;
    if (code == 0) {
      v = PX_RL_ALLOW;
      if (w->budgeted) held_wait(w, 1);
      if (!w->done && g.running && !g.stopping) undo_admit(w);
    } else if (code >= 3) {
      v = PX_RL_BUDGET;
      why.team = code == 4;
      why.remaining = val;
    } else {
      v = PX_RL_LIMITED;
      long long ms = val < 1 ? 1 : val;
      why.retry_after = (unsigned)((ms + 999) / 1000);
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
      char msg[160];
      snprintf(msg, sizeof(msg), "script error: %.120s", reply->str);
      incident(msg);
    } else {
      incident(reply ? "unexpected reply" : "connection lost");
    }
    /* budgets never fail open */
    v = w->budgeted ? PX_RL_UNAVAILABLE : failed_verdict();
  }
  if (w->done) w->done(w->arg, v, &why);
  wait_free(w);
}

px_rl_verdict_t px_redis_admit(const px_admit_t *a, uint64_t now_ms, px_refusal_t *why,
                               px_rl_done_fn done, void *arg, px_rl_wait_t **wait) {
  const px_key_conf_t *k = a->key;
  uint64_t h = hash_str(k->name);
  cache_slot_t *c = &g.cache[h & (CACHE_SLOTS - 1)];
  if (c->hash == h && c->until_ms > now_ms) {
    why->retry_after = (unsigned)((c->until_ms - now_ms + 999) / 1000);
    return PX_RL_LIMITED;
  }
  /* while connecting, hiredis queues the command until the connection is up */
  if (!g.ac) return a->budgeted ? PX_RL_UNAVAILABLE : failed_verdict();
  px_rl_wait_t *w = wait_new(k, "a", a->now_s, k->tpm ? (long long)a->tokens : 0,
                             a->budgeted ? a->cost : 0, 0, NULL);
  if (!w) return a->budgeted ? PX_RL_UNAVAILABLE : failed_verdict();
  w->done = done;
  w->arg = arg;
  if (send_script(w, on_admit_reply) < 0) {
    wait_free(w);
    incident("cannot send");
    return a->budgeted ? PX_RL_UNAVAILABLE : failed_verdict();
  }
  *wait = w;
  return PX_RL_PENDING;
}

void px_redis_cancel(px_rl_wait_t *w) {
  w->done = NULL;
  w->udone = NULL;
}

static void on_fire_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, r, on_fire_reply)) return;
  wait_free(w);
}

void px_redis_settle(const px_admit_t *a, uint64_t used, int64_t cost) {
  const px_key_conf_t *k = a->key;
  int64_t delta = k->tpm ? (int64_t)used - (int64_t)a->tokens : 0;
  if (delta == 0 && !a->budgeted) return;
  /* lost when not connected: the bucket refills, the reservations lapse */
  if (!g.ac) return;
  px_rl_wait_t *w = wait_new(k, "s", a->now_s, (long long)delta, a->budgeted ? a->cost : 0,
                             a->budgeted ? cost : 0, NULL);
  if (!w) return;
  if (w->budgeted) held_wait(w, -1);
  /* tokens returned: the local over-limit mark may be stale */
  cache_slot_t *c = &g.cache[w->hash & (CACHE_SLOTS - 1)];
  if (delta < 0 && c->hash == w->hash) c->until_ms = 0;
  if (send_script(w, on_fire_reply) < 0) wait_free(w);
}

static void on_usage_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  redisReply *reply = r;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, reply, on_usage_reply)) return;
  px_budget_state_t st[2] = {{0, 0}, {0, 0}};
  int ok = reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 4;
  for (size_t i = 0; ok && i < 4; i++) {
    const redisReply *e = reply->element[i];
    if (e->type != REDIS_REPLY_STRING) {
      ok = 0;
      break;
    }
    int64_t v = atoll(e->str);
    if (i % 2 == 0) st[i / 2].spend = v;
    else st[i / 2].reserved = v;
  }
  if (ok) recovered();
  if (w->udone) w->udone(w->arg, ok, st);
  wait_free(w);
}

int px_redis_usage(const px_key_conf_t *k, int64_t now_s, px_rl_usage_fn done, void *arg,
                   px_rl_wait_t **wait) {
  if (!g.ac) return -1;
  px_rl_wait_t *w = wait_new(k, "q", now_s, 0, 0, 0, NULL);
  if (!w) return -1;
  w->udone = done;
  w->arg = arg;
  if (send_script(w, on_usage_reply) < 0) {
    wait_free(w);
    return -1;
  }
  *wait = w;
  return 1;
}

/* every RENEW_MS: this worker's reservations stay alive while it runs */
static void on_renew(uv_timer_t *t) {
  (void)t;
  if (!g.ac) return;
  for (size_t i = 0; i < g.nheld;) {
    if (g.held[i].count <= 0) { /* nothing held there any more */
      free(g.held[i].res);
      g.held[i] = g.held[--g.nheld];
      continue;
    }
    /* the one hash to renew, in the place of the key's reservations */
    px_key_conf_t k = {.name = "-"};
    px_rl_wait_t *w = wait_new(&k, "r", 0, 0, 0, 0, g.held[i].res);
    if (w && send_script(w, on_fire_reply) < 0) wait_free(w);
    i++;
  }
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
