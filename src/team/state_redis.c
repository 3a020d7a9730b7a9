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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "proxai/inflight.h"
#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/money.h"
#include "proxai/shm.h"
#include "proxai/store.h"

/* A failed connection is tried again this soon: a refused connect costs
 * nothing, and a worker is back within this much of Redis answering. */
#define RETRY_MS 100
#define REGISTER_MS 10000
#define INSTANCE_TTL_MS 30000
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
    "local mode, rpm, tpm, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), "
    "tonumber(ARGV[4])\n"
    "local owner, kb, tb = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])\n"
    "local f = function(x) return string.format('%.0f', x) end\n"
    "local function held(h)\n"
    "  local all = redis.call('HGETALL', h)\n"
    "  local exp, sum = {}, 0\n"
    "  for i = 1, #all, 2 do\n"
    "    if string.sub(all[i], 1, 2) == 'e:' then exp[string.sub(all[i], 3)] = "
    "tonumber(all[i + 1]) end\n"
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
    "  return {f(spent(KEYS[2])), f(held(KEYS[3])), f(spent(KEYS[4])), "
    "f(held(KEYS[5]))}\n"
    "end\n"
    "if mode == 'r' then\n"
    "  for i = 3, 5, 2 do\n"
    "    if redis.call('HEXISTS', KEYS[i], 'r:' .. owner) == 1 then hold(KEYS[i], 0) "
    "end\n"
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
    "    redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), full(tl, "
    "tpm)))\n"
    "  end\n"
    "  local c, cost = tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "  for i = 0, 1 do\n"
    "    if tonumber(ARGV[6 + i]) ~= 0 then\n"
    "      local sk, h, ttl = KEYS[2 + 2 * i], KEYS[3 + 2 * i], tonumber(ARGV[10 + i])\n"
    "      if cost > 0 then\n"
    "        redis.call('INCRBY', sk, ARGV[9])\n"
    "        if ttl > 0 then redis.call('PEXPIRE', sk, ttl) end\n"
    "      end\n"
    "      if c > 0 and tonumber(ARGV[6 + i]) > 0 and\n"
    "         redis.call('HINCRBY', h, 'r:' .. owner, '-' .. ARGV[8]) <= 0 then\n"
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
/* A runtime key by the hash of its secret (keys.h): KEYS[1] the hash's
 * entry, ARGV[1] the prefix. Returns {key record, team record or ""}, or
 * nil. One round trip, read only. */
static const char lookup_script[] =
    "local n = redis.call('GET', KEYS[1])\n"
    "if not n then return nil end\n"
    "local rec = redis.call('GET', ARGV[1] .. 'key:' .. n)\n"
    "if not rec then return nil end\n"
    "local ok, j = pcall(cjson.decode, rec)\n"
    "local t = ''\n"
    "if ok and type(j) == 'table' and type(j['team']) == 'string' then\n"
    "  t = redis.call('GET', ARGV[1] .. 'team:' .. j['team']) or ''\n"
    "end\n"
    "return {rec, t}\n";

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
  uint64_t sent_ms; /* or when the one before it was answered, if later */
  uint64_t wait_ms; /* its bound: 0 is [state] timeout */
} cmd_t;

#define NKEYS 5
#define NARGS 11

/* One script call: its keys and arguments, and who waits for the answer. */
struct px_rl_wait {
  cmd_t c;               /* in the list of unanswered commands */
  px_rl_done_fn done;    /* admit: NULL once cancelled */
  px_rl_usage_fn udone;  /* query */
  px_redis_key_fn kdone; /* lookup_script */
  void *arg;
  uint64_t hash;
  struct px_rl_wait *later; /* the next settlement kept for Redis's return */
  int resent;               /* EVAL after NOSCRIPT */
  int budgeted;
  int lookup;
  unsigned flags; /* for px_rl_fallback */
  uint64_t rpm, tpm;
  int64_t resets_at[2]; /* the key's and the team's window ends (unix s) */
  int64_t now_s;
  size_t name_off; /* the key's name in keys[0] (after "PREFIX rl:") */
  char keys[NKEYS][PX_STORE_KEY_MAX];
  char args[NARGS][48];
  char packed[NARGS * 48];
  const char *argv[3 + NKEYS + 1];
};

/* Budgets this worker holds reservations on: renewed every RENEW_MS. */
#define RENEW_MS 20000
typedef struct held {
  char *res; /* the reservations hash */
  long count;
} held_t;

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
  char sha[41], lookup_sha[41];
  char instance[96];
  char owner[160]; /* this worker's name on its budget reservations */
  held_t *held;
  size_t nheld;
  px_rl_wait_t *later_head, *later_tail; /* settlements kept while unreachable */
  size_t nlater;
  int later_lost; /* some did not fit (logged once an incident) */
  uv_timer_t renew;
  redisContext *sync; /* the admin API's own connection (blocking, short) */
  cmd_t *head, *tail; /* unanswered commands, oldest first */
  cache_slot_t cache[CACHE_SLOTS];
} g;

static void connect_now(void);
static void on_renew(uv_timer_t *t);
void px_redis_sync_drop(void);

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

static void send_later(void);
static void free_later(void);

static void go_up(void) {
  g.up = 1;
  send_later();
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
  c->wait_ms = 0;
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
  /* Redis answers in order: the next one's wait starts now at the latest */
  if (c == g.head && c->next && c->next->sent_ms < uv_now(g.loop))
    c->next->sent_ms = uv_now(g.loop);
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
  uint64_t wait = g.head->wait_ms ? g.head->wait_ms : g.timeout_ms;
  uint64_t now = uv_now(g.loop), due = g.head->sent_ms + wait;
  if (now >= due) {
    char why[64];
    snprintf(why, sizeof(why), "no reply within %llu ms", (unsigned long long)wait);
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
  SHA1((const unsigned char *)lookup_script, strlen(lookup_script), md);
  for (int i = 0; i < SHA_DIGEST_LENGTH; i++)
    sprintf(g.lookup_sha + 2 * i, "%02x", md[i]);
  /* this worker's name on its budget reservations: the master knows it too
   * (instance, slot, pid) and drops them when it reaps this worker */
  px_rl_owner(px_shm_worker(), (long)getpid(), g.owner, sizeof(g.owner));
  uv_timer_init(loop, &g.renew);
  uv_unref((uv_handle_t *)&g.renew);
  uv_timer_start(&g.renew, on_renew, RENEW_MS, RENEW_MS);
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
  uv_close((uv_handle_t *)&g.renew, on_timer_closed);
  px_redis_sync_drop();
  for (size_t i = 0; i < g.nheld; i++) free(g.held[i].res);
  free(g.held);
  g.held = NULL;
  g.nheld = 0;
  free_later();
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

static int send_script(px_rl_wait_t *w, redisCallbackFn *cb) {
  w->argv[0] = w->resent ? "EVAL" : "EVALSHA";
  w->argv[1] = w->resent   ? (w->lookup ? lookup_script : script)
               : w->lookup ? g.lookup_sha
                           : g.sha;
  return send_argv(cb, &w->c, w->lookup ? 5 : 3 + NKEYS + 1, w->argv);
}

/* argv from keys[] and args[] (after either changed) */
static void pack(px_rl_wait_t *w) {
  w->argv[2] = "5";
  for (int i = 0; i < NKEYS; i++) {
    w->argv[3 + i] = w->keys[i];
  }
  size_t n = 0;
  for (int i = 0; i < NARGS; i++) {
    size_t l = strlen(w->args[i]);
    if (i) w->packed[n++] = ' ';
    memcpy(w->packed + n, w->args[i], l);
    n += l;
  }
  w->packed[n] = 0;
  w->argv[3 + NKEYS] = w->packed;
}

/* s (cut to cap - 1 bytes) then t, NUL-terminated; the end. This and
 * put_int build every script call (snprintf costs a thousand instructions
 * a field, on the request path). */
static char *put(char *d, const char *end, const char *t) {
  while (*t && d < end - 1) *d++ = *t++;
  *d = 0;
  return d;
}

static void put_int(char *d, long long v) {
  char tmp[24];
  int n = 0;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do tmp[n++] = (char)('0' + u % 10);
  while ((u /= 10) != 0);
  if (v < 0) *d++ = '-';
  while (n) *d++ = tmp[--n];
  *d = 0;
}

/* A script call for key k, mode "a", "s", "q" or "r": the key's bucket, the
 * Redis names of its budget and its team's ("PREFIX bud:k:NAME:LABEL" the
 * spend of the window, "PREFIX bud:k:NAME:res" the reservations; a
 * placeholder where the call needs none) and the arguments. res: renew this
 * reservations hash (mode "r"). */
static px_rl_wait_t *wait_new(const px_key_conf_t *k, const char *mode, int64_t now_s,
                              long long tokens, int64_t cost, int64_t spent,
                              const char *res) {
  px_rl_wait_t *w = malloc(sizeof(*w));
  if (!w) return NULL;
  memset(w, 0, offsetof(px_rl_wait_t, keys));
  int64_t budget[2], ttl_ms[2] = {0, 0};
  char *d = put(w->keys[0], w->keys[0] + PX_STORE_KEY_MAX, g.prefix);
  d = put(d, w->keys[0] + PX_STORE_KEY_MAX, "rl:");
  w->name_off = (size_t)(d - w->keys[0]);
  put(d, w->keys[0] + PX_STORE_KEY_MAX, k->name);
  w->rpm = k->rpm;
  w->tpm = k->tpm;
  for (int i = 0; i < 2; i++) {
    const char *name = i == 0 ? k->name : k->team ? k->team->name : NULL;
    px_window_t kind = i == 0 ? k->window : k->team ? k->team->window : PX_WINDOW_MONTH;
    char *sk = w->keys[1 + 2 * i], *rk = w->keys[2 + 2 * i];
    /* the budget, or -1: none, the spend is counted all the same */
    budget[i] = i == 0 ? k->budget : k->team ? k->team->budget : 0;
    if (name && budget[i] <= 0) budget[i] = -1;
    /* the names only where the call reads or writes them */
    int need = mode[0] == 'q' || (mode[0] == 'a' && budget[i] > 0) ||
               (mode[0] == 's' && (cost > 0 || spent > 0));
    w->resets_at[i] = 0;
    if (!name || !need) {
      if (!name) budget[i] = 0;
      put(put(sk, sk + PX_STORE_KEY_MAX, g.prefix), sk + PX_STORE_KEY_MAX, "bud:-");
      put(put(rk, rk + PX_STORE_KEY_MAX, g.prefix), rk + PX_STORE_KEY_MAX, "bud:-:res");
      continue;
    }
    px_win_t win;
    px_window_at(kind, (time_t)now_s, &win);
    const char *kt = i ? "bud:t:" : "bud:k:";
    char *e =
        put(put(put(sk, sk + PX_STORE_KEY_MAX, g.prefix), sk + PX_STORE_KEY_MAX, kt),
            sk + PX_STORE_KEY_MAX, name);
    size_t base = (size_t)(e - sk);
    memcpy(rk, sk, base + 1);
    put(put(e, sk + PX_STORE_KEY_MAX, ":"), sk + PX_STORE_KEY_MAX, win.label);
    put(rk + base, rk + PX_STORE_KEY_MAX, ":res");
    /* a window's spend is kept 35 days past its end (last month's usage
     * stays readable); `total` for ever */
    if (win.resets_at) ttl_ms[i] = (win.resets_at - now_s + 35 * 86400) * 1000;
    w->resets_at[i] = win.resets_at;
  }
  w->now_s = now_s;
  if (res) put(w->keys[2], w->keys[2] + PX_STORE_KEY_MAX, res);
  long long v[NARGS] = {0,     (long long)k->rpm, (long long)k->tpm, tokens,
                        0,     budget[0],         budget[1],         cost,
                        spent, ttl_ms[0],         ttl_ms[1]};
  for (int i = 0; i < NARGS; i++) put_int(w->args[i], v[i]);
  put(w->args[0], w->args[0] + sizeof(w->args[0]), mode);
  put(w->args[4], w->args[4] + sizeof(w->args[4]), g.owner);
  pack(w);
  w->hash = hash_str(k->name);
  w->budgeted = budget[0] > 0 || budget[1] > 0;
  return w;
}

static void wait_free(px_rl_wait_t *w) {
  free(w);
}

/* A script succeeded: a script failure before it is over. */
static void script_ok(void) {
  if (!g.script_err) return;
  g.script_err = 0;
  px_log_info("redis state backend: scripts succeed again");
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
  redisReply *reply = r;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, reply, on_admit_reply)) return;
  px_rl_verdict_t v;
  px_refusal_t why = {0};
  if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_INTEGER) {
    script_ok();
    long long code = reply->element[0]->integer;
    const redisReply *e1 = reply->element[1];
    long long val = e1->type == REDIS_REPLY_INTEGER  ? e1->integer
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
      why.resets_at = w->resets_at[why.team];
      int64_t left = why.resets_at - w->now_s;
      why.retry_after = why.resets_at == 0 ? 0 : left < 1 ? 1 : (unsigned)left;
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
    v = PX_RL_OPEN; /* worker going away: nobody is waiting */
  } else {
    if (reply == NULL)
      go_down(ac && ac->errstr[0] ? ac->errstr : "connection lost");
    else
      script_failed(reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    v = px_rl_fallback(w->keys[0] + w->name_off, w->rpm, w->tpm, w->flags,
                       g.running ? uv_now(g.loop) : 0, &why.retry_after);
  }
  if (w->done) w->done(w->arg, v, &why);
  wait_free(w);
}

px_rl_verdict_t px_redis_admit(const px_admit_t *a, uint64_t now_ms, px_refusal_t *why,
                               px_rl_done_fn done, void *arg, px_rl_wait_t **wait) {
  const px_key_conf_t *k = a->key;
  unsigned flags = a->budgeted ? PX_RL_STRICT : 0;
  uint64_t h = hash_str(k->name);
  cache_slot_t *c = &g.cache[h & (CACHE_SLOTS - 1)];
  if (c->hash == h && c->until_ms > now_ms) {
    why->retry_after = (unsigned)((c->until_ms - now_ms + 999) / 1000);
    return PX_RL_LIMITED;
  }
  /* found unreachable: on_error at once until a reconnect succeeds (while
   * the first connection is made, hiredis queues the command) */
  px_rl_wait_t *w = NULL;
  if (g.ac && !g.down)
    w = wait_new(k, "a", a->now_s, k->tpm ? (long long)a->tokens : 0,
                 a->budgeted ? a->cost : 0, 0, NULL);
  if (w) {
    w->done = done;
    w->arg = arg;
    w->flags = flags;
    if (send_script(w, on_admit_reply) == 0) {
      *wait = w;
      return PX_RL_PENDING;
    }
    wait_free(w);
  }
  return px_rl_fallback(k->name, k->rpm, k->tpm, flags, now_ms, &why->retry_after);
}

void px_redis_cancel(px_rl_wait_t *w) {
  w->done = NULL;
  w->udone = NULL;
  w->kdone = NULL;
}

static void on_fire_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, r, on_fire_reply)) return;
  wait_free(w);
}

/* Settlements made while Redis is unreachable (requests admitted before
 * the outage that end during it) are kept, oldest first, and sent once a
 * PING is answered again: the spend is counted in its window and the
 * reservation released (else a busy worker, renewing its other
 * reservations on the same budget, would hold this one as long as it is
 * busy). Releasing one that lapsed meanwhile is a no-op (the script drops a
 * field at or below zero). Only what was never sent is kept: one lost with
 * its connection may have been applied. The tpm debt is not kept (the
 * bucket refilled during the outage). At most LATER_MAX, the requests in
 * flight when Redis went away: past that a spend is lost, logged. */
#define LATER_MAX 4096
static int keep_later(px_rl_wait_t *w) {
  if (g.stopping) return 0;
  if (g.nlater >= LATER_MAX) {
    if (!g.later_lost)
      px_log_error(
          "redis state backend unreachable: more than %d settlements waiting, "
          "later spend is not counted",
          LATER_MAX);
    g.later_lost = 1;
    return 0;
  }
  w->later = NULL;
  if (g.later_tail)
    g.later_tail->later = w;
  else
    g.later_head = w;
  g.later_tail = w;
  g.nlater++;
  return 1;
}

static void send_later(void) {
  px_rl_wait_t *w = g.later_head;
  g.later_head = g.later_tail = NULL;
  g.nlater = 0;
  g.later_lost = 0;
  while (w) {
    px_rl_wait_t *next = w->later;
    if (send_script(w, on_fire_reply) < 0) wait_free(w);
    w = next;
  }
}

static void free_later(void) {
  while (g.later_head) {
    px_rl_wait_t *next = g.later_head->later;
    wait_free(g.later_head);
    g.later_head = next;
  }
  g.later_tail = NULL;
  g.nlater = 0;
}

void px_redis_settle(const px_admit_t *a, uint64_t used, int64_t cost) {
  const px_key_conf_t *k = a->key;
  int64_t delta = k->tpm ? (int64_t)used - (int64_t)a->tokens : 0;
  if (delta == 0 && !a->budgeted && cost <= 0) return;
  int now_up = g.ac && !g.down;
  /* unreachable: the budget's part is kept for later (keep_later) */
  if (!now_up && !a->budgeted && cost <= 0) return;
  px_rl_wait_t *w = wait_new(k, "s", a->now_s, now_up ? (long long)delta : 0,
                             a->budgeted ? a->cost : 0, cost, NULL);
  if (!w) return;
  /* not held any more, settled or not: a reservation this worker no longer
   * renews lapses */
  if (w->budgeted) held_wait(w, -1);
  if (!now_up) {
    if (!keep_later(w)) wait_free(w);
    return;
  }
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
    if (i % 2 == 0)
      st[i / 2].spend = v;
    else
      st[i / 2].reserved = v;
  }
  if (ok) script_ok();
  if (w->udone) w->udone(w->arg, ok, st);
  wait_free(w);
}

int px_redis_usage(const px_key_conf_t *k, int64_t now_s, px_rl_usage_fn done, void *arg,
                   px_rl_wait_t **wait) {
  if (!g.ac || g.down) return -1;
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
  if (!g.ac || g.down) return;
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

void px_redis_release(const px_state_conf_t *sc, const px_inflight_rec_t *recs, size_t n,
                      const char *owner) {
  size_t need = 0, done = 0;
  for (size_t i = 0; i < n; i++)
    need += (recs[i].tpm_reserved > 0 && recs[i].tpm > 0) + (recs[i].cost_key > 0) +
            (recs[i].cost_team > 0);
  if (need == 0) return;
  addr_t a;
  char why[256] = "out of memory";
  redisContext *c = NULL;
  const char *prefix = sc->prefix ? sc->prefix : "";
  size_t kcap = strlen(prefix) + 16 + PX_INFLIGHT_KEY;
  char *key = malloc(kcap), *ph = malloc(kcap), *phr = malloc(kcap);
  char fr[200], fe[200];
  snprintf(fr, sizeof(fr), "r:%s", owner);
  snprintf(fe, sizeof(fe), "e:%s", owner);
  if (parse_url(sc->redis, &a) < 0 || !key || !ph || !phr) goto out;
  snprintf(ph, kcap, "%sbud:-", prefix);
  snprintf(phr, kcap, "%sbud:-:res", prefix);
  struct timeval tv = {(time_t)(sc->timeout_ms / 1000),
                       (suseconds_t)(sc->timeout_ms % 1000) * 1000};
  c = a.path ? redisConnectUnixWithTimeout(a.path, tv)
             : redisConnectWithTimeout(a.host, a.port, tv);
  if (c == NULL || c->err) {
    snprintf(why, sizeof(why), "%s", c ? c->errstr : "cannot connect");
    goto out;
  }
  redisSetTimeout(c, tv);
  /* pipelined: the setup, then one command per reservation: the tokens
   * given back to the bucket; the worker's budget reservations dropped */
  if (a.password) {
    if (a.user)
      redisAppendCommand(c, "AUTH %s %s", a.user, a.password);
    else
      redisAppendCommand(c, "AUTH %s", a.password);
  }
  if (a.db) redisAppendCommand(c, "SELECT %d", a.db);
  for (size_t i = 0; i < n; i++) {
    const px_inflight_rec_t *r = &recs[i];
    if (r->tpm_reserved > 0 && r->tpm > 0) {
      char args[160];
      snprintf(args, sizeof(args), "s 0 %llu -%llu - 0 0 0 0 0 0",
               (unsigned long long)r->tpm, (unsigned long long)r->tpm_reserved);
      snprintf(key, kcap, "%srl:%s", prefix, r->key);
      const char *av[] = {"EVAL", script, "5", key, ph, phr, ph, phr, args};
      size_t al[9];
      for (int k = 0; k < 9; k++) al[k] = strlen(av[k]);
      redisAppendCommandArgv(c, 9, av, al);
    }
    for (int t = 0; t < 2; t++) {
      if ((t ? r->cost_team : r->cost_key) == 0) continue;
      snprintf(key, kcap, "%sbud:%c:%s:res", prefix, t ? 't' : 'k', t ? r->team : r->key);
      redisAppendCommand(c, "HDEL %s %s %s", key, fr, fe);
    }
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
  free(ph);
  free(phr);
}

/* ---- runtime keys ---------------------------------------------------------- */

static void on_key_reply(redisAsyncContext *ac, void *r, void *priv) {
  redisReply *reply = r;
  px_rl_wait_t *w = priv;
  if (reply_resent(w, reply, on_key_reply)) return;
  int ok = 1;
  px_str_t rec = PX_STR_NULL, team = PX_STR_NULL;
  if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_STRING) {
    script_ok();
    rec = (px_str_t){reply->element[0]->str, reply->element[0]->len};
    if (reply->element[1]->type == REDIS_REPLY_STRING)
      team = (px_str_t){reply->element[1]->str, reply->element[1]->len};
  } else if (reply && reply->type == REDIS_REPLY_NIL) {
    script_ok();
  } else {
    ok = 0;
    if (reply == NULL)
      go_down(ac && ac->errstr[0] ? ac->errstr : "connection lost");
    else
      script_failed(reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
  }
  if (w->kdone) w->kdone(w->arg, ok, rec, team);
  wait_free(w);
}

int px_redis_key_lookup(const char *hex, px_redis_key_fn done, void *arg,
                        px_rl_wait_t **wait) {
  if (!g.ac || g.down) return -1;
  px_rl_wait_t *w = calloc(1, sizeof(*w));
  if (!w) return -1;
  w->lookup = 1;
  w->kdone = done;
  w->arg = arg;
  snprintf(w->keys[0], sizeof(w->keys[0]), "%skeyhash:%s", g.prefix, hex);
  snprintf(w->keys[1], sizeof(w->keys[1]), "%s", g.prefix);
  w->argv[2] = "1";
  w->argv[3] = w->keys[0];
  w->argv[4] = w->keys[1];
  if (send_script(w, on_key_reply) < 0) {
    wait_free(w);
    return -1;
  }
  *wait = w;
  return 1;
}

const char *px_redis_prefix(void) {
  return g.prefix ? g.prefix : "";
}

redisContext *px_redis_sync(void) {
  if (!g.running) return NULL;
  if (g.sync && !g.sync->err) return g.sync;
  px_redis_sync_drop();
  struct timeval tv = {1, 0};
  redisContext *c = g.a.path ? redisConnectUnixWithTimeout(g.a.path, tv)
                             : redisConnectWithTimeout(g.a.host, g.a.port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  redisReply *r = NULL;
  if (g.a.password)
    r = g.a.user ? redisCommand(c, "AUTH %s %s", g.a.user, g.a.password)
                 : redisCommand(c, "AUTH %s", g.a.password);
  int bad = g.a.password && (!r || r->type == REDIS_REPLY_ERROR);
  if (r) freeReplyObject(r);
  if (!bad && g.a.db) {
    r = redisCommand(c, "SELECT %d", g.a.db);
    bad = !r || r->type == REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
  }
  if (bad) {
    redisFree(c);
    return NULL;
  }
  g.sync = c;
  return c;
}

void px_redis_sync_drop(void) {
  if (g.sync) redisFree(g.sync);
  g.sync = NULL;
}

int px_redis_usage_sync(const px_key_conf_t *k, int64_t now_s, px_budget_state_t st[2]) {
  redisContext *c = px_redis_sync();
  if (c == NULL) return -1;
  px_rl_wait_t *w = wait_new(k, "q", now_s, 0, 0, 0, NULL);
  if (w == NULL) return -1;
  w->argv[0] = "EVAL";
  w->argv[1] = script;
  size_t len[3 + NKEYS + 1];
  for (int i = 0; i < 3 + NKEYS + 1; i++) len[i] = strlen(w->argv[i]);
  redisReply *r = redisCommandArgv(c, 3 + NKEYS + 1, w->argv, len);
  wait_free(w);
  if (r == NULL) {
    px_redis_sync_drop();
    return -1;
  }
  int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 4;
  for (size_t i = 0; ok && i < 4; i++) {
    if (r->element[i]->type != REDIS_REPLY_STRING)
      ok = 0;
    else if (i % 2 == 0)
      st[i / 2].spend = atoll(r->element[i]->str);
    else
      st[i / 2].reserved = atoll(r->element[i]->str);
  }
  freeReplyObject(r);
  return ok ? 0 : -1;
}

/* ---- commands of other modules (stored responses) ---------------------- */

typedef struct cmd_wait {
  cmd_t c; /* in the list of unanswered commands: the same deadline */
  px_redis_reply_fn cb;
  void *arg;
} cmd_wait_t;

static void on_command_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  cmd_wait_t *w = priv;
  unlink_cmd(&w->c);
  w->cb(w->arg, r); /* NULL: the connection went (handled there) */
  free(w);
}

int px_redis_command(int argc, const char **argv, const size_t *argvlen,
                     uint64_t timeout_ms, px_redis_reply_fn cb, void *arg) {
  if (!g.ac || g.down) return -1;
  cmd_wait_t *w = calloc(1, sizeof(*w));
  if (w == NULL) return -1;
  w->cb = cb;
  w->arg = arg;
  if (redisAsyncCommandArgv(g.ac, on_command_reply, w, argc, argv, argvlen) != REDIS_OK) {
    free(w);
    return -1;
  }
  link_cmd(&w->c);
  w->c.wait_ms = timeout_ms;
  return 0;
}
