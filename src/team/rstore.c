/* rstore.c - stored responses in the state backend (rstore.h).
 *
 * One host ([state] dir): the persistent store's RESPONSES database
 * (store.h, LMDB), one record per turn: the owner, previous id and input
 * lengths, then owner, previous id, input items and response object; it
 * expires ttl after creation and the store trims the oldest past max_size.
 * Its reads and writes are local and immediate; their callbacks are still
 * delivered from the loop (a 0 ms timer), as Redis's are.
 *
 * Redis ([state] backend = redis): one hash per turn, PREFIX resp:ID with
 * fields o (owner), p (previous id), i (input items), r (response object),
 * expiring ttl after creation; PREFIX resp:idx (a sorted set of ids by
 * creation time), PREFIX resp:sz (their sizes) and PREFIX resp:bytes (their
 * sum) keep max_size, the oldest evicted first. Each operation is one
 * server-side script, so one round trip: the chain script walks the
 * previous ids in Redis and answers with every turn, or the id it missed.
 * The scripts name keys they compute, so they need one Redis, not a
 * cluster.
 */
#include "proxai/rstore.h"

#include <hiredis/hiredis.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "proxai/state_redis.h"
#include "proxai/store.h"

/* ARGV: prefix, owner, id, max bytes, max turns, "1" to stop quietly at
 * max turns. {1, i, r, i, r ...} newest first; {0, missing id}; {2, bytes}
 * over a limit. */
static const char chain_script[] =
    "local pfx, owner, id = ARGV[1], ARGV[2], ARGV[3]\n"
    "local maxb, maxn = tonumber(ARGV[4]), tonumber(ARGV[5])\n"
    "local out, total, n = {1}, 0, 0\n"
    "while id ~= nil and id ~= '' do\n"
    "  if n == maxn then\n"
    "    if ARGV[6] == '1' then break end\n"
    "    return {2, total}\n"
    "  end\n"
    "  local v = redis.call('HMGET', pfx .. 'resp:' .. id, 'o', 'p', 'i', 'r')\n"
    "  if not v[1] or v[1] ~= owner or not v[3] or not v[4] then return {0, id} end\n"
    "  n = n + 1\n"
    "  total = total + #v[3] + #v[4]\n"
    "  if total > maxb then return {2, total} end\n"
    "  out[#out + 1] = v[3]\n"
    "  out[#out + 1] = v[4]\n"
    "  id = v[2]\n"
    "end\n"
    "return out\n";

/* ARGV: prefix, id, owner, prev, input, response, ttl ms, max size.
 * 1 kept; 0 the id exists; 2 larger than max size alone. */
static const char put_script[] =
    "local pfx, id = ARGV[1], ARGV[2]\n"
    "local k = pfx .. 'resp:' .. id\n"
    "if redis.call('EXISTS', k) == 1 then return 0 end\n"
    "local ttl, max = tonumber(ARGV[7]), tonumber(ARGV[8])\n"
    "local size = #ARGV[3] + #ARGV[4] + #ARGV[5] + #ARGV[6] + #id + 64\n"
    "if size > max then return 2 end\n"
    "redis.call('HSET', k, 'o', ARGV[3], 'p', ARGV[4], 'i', ARGV[5], 'r', ARGV[6])\n"
    "redis.call('PEXPIRE', k, ttl)\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local idx, sz, tot = pfx .. 'resp:idx', pfx .. 'resp:sz', pfx .. 'resp:bytes'\n"
    "local total = tonumber(redis.call('GET', tot) or '0')\n"
    "local function forget(m)\n"
    "  total = total - tonumber(redis.call('HGET', sz, m) or '0')\n"
    "  redis.call('HDEL', sz, m)\n"
    "  redis.call('ZREM', idx, m)\n"
    "end\n"
    /* expired ones leave the sum (their keys are gone already) */
    "for _, m in ipairs(redis.call('ZRANGEBYSCORE', idx, '-inf', now - ttl, 'LIMIT', 0, "
    "256)) do\n"
    "  forget(m)\n"
    "end\n"
    "redis.call('ZADD', idx, now, id)\n"
    "redis.call('HSET', sz, id, size)\n"
    "total = total + size\n"
    "while total > max do\n"
    "  local old = redis.call('ZRANGE', idx, 0, 0)\n"
    "  if #old == 0 or old[1] == id then break end\n"
    "  redis.call('DEL', pfx .. 'resp:' .. old[1])\n"
    "  forget(old[1])\n"
    "end\n"
    "if total < 0 then total = 0 end\n"
    "redis.call('SET', tot, total)\n"
    "return 1\n";

/* ARGV: prefix, owner, id. 1 removed; 0 none of the owner's. */
static const char del_script[] =
    "local pfx, owner, id = ARGV[1], ARGV[2], ARGV[3]\n"
    "local k = pfx .. 'resp:' .. id\n"
    "if redis.call('HGET', k, 'o') ~= owner then return 0 end\n"
    "redis.call('DEL', k)\n"
    "local sz = pfx .. 'resp:sz'\n"
    "local s = tonumber(redis.call('HGET', sz, id) or '0')\n"
    "redis.call('HDEL', sz, id)\n"
    "redis.call('ZREM', pfx .. 'resp:idx', id)\n"
    "if s > 0 then redis.call('DECRBY', pfx .. 'resp:bytes', s) end\n"
    "return 1\n";

#define RS_ARGS 8

struct px_rs_op {
  px_rs_chain_fn chain;
  px_rs_done_fn done;
  void *arg;
  int cancelled;
  /* local: the result, delivered from the loop */
  px_rs_status_t st;
  px_buf_t *bufs;
  px_stored_turn_t *turns;
  size_t n;
  char missing[PX_STORED_ID_MAX + 1];
  px_rs_op_t *next;
  /* Redis: the chain's reply during the callback (px_rs_release) */
  redisReply *reply;
  /* Redis: the script call, kept for a resend after NOSCRIPT */
  const char *script;
  px_redis_reply_fn cb;
  int argc, resent;
  uint64_t timeout_ms;
  const char *argv[RS_ARGS];
  size_t lens[RS_ARGS];
  char *copies; /* the small arguments, copied at once */
  char *big;    /* the large ones, copied when cancelled (own_args) */
};

/* Small arguments are copied into the op at once (for a resend); larger
 * ones stay views of the caller's memory until the callback or
 * px_rs_cancel, which copies them (own_args). */
#define ARG_COPY_MAX 4096

static px_rs_op_t *op_new(px_rs_chain_fn chain, px_rs_done_fn done, void *arg) {
  px_rs_op_t *op = calloc(1, sizeof(*op));
  if (op == NULL) return NULL;
  op->chain = chain;
  op->done = done;
  op->arg = arg;
  return op;
}

static void op_free(px_rs_op_t *op) {
  free(op->copies);
  free(op->big);
  for (size_t i = 0; i < op->n; i++) px_buf_free(&op->bufs[i]);
  free(op->bufs);
  free(op->turns);
  free(op);
}

/* An op that cannot start: NULL, its callback never called. */
static px_rs_op_t *fail_now(px_rs_op_t *op) {
  if (op) op_free(op);
  return NULL;
}

int px_rs_available(void) {
  return px_store_on() || px_redis_running();
}

void px_rs_release(px_rs_op_t *op, size_t t) {
  if (op == NULL || t >= op->n) return;
  if (op->reply == NULL) { /* the local store's copy */
    px_buf_free(&op->bufs[t]);
    return;
  }
  /* Redis: turn t's two strings of the reply (newest first there); the
   * reply's own free skips them */
  for (size_t e = 1 + 2 * (op->n - 1 - t); e <= 2 + 2 * (op->n - 1 - t); e++) {
    redisReply *r = op->reply->element[e];
    if (r->type != REDIS_REPLY_STRING) continue;
    free(r->str);
    r->str = NULL;
    r->len = 0;
  }
}

/* The caller's memory may go once its op is cancelled: a Redis call still
 * unanswered takes copies of the arguments it holds as views, so that a
 * NOSCRIPT answer can still be sent again in full (a put whose client left
 * is kept all the same). Without memory it is not resent. */
static void own_args(px_rs_op_t *op) {
  size_t need = 0;
  for (int i = 0; i < op->argc; i++)
    if (op->lens[i] > ARG_COPY_MAX) need += op->lens[i];
  if (need == 0) return;
  char *c = malloc(need);
  if (c == NULL) {
    op->resent = 1; /* nothing to send again from */
    return;
  }
  op->big = c; /* the small ones are in op->copies already */
  for (int i = 0; i < op->argc; i++) {
    if (op->lens[i] <= ARG_COPY_MAX) continue;
    memcpy(c, op->argv[i], op->lens[i]);
    op->argv[i] = c;
    c += op->lens[i];
  }
}

void px_rs_cancel(px_rs_op_t *op) {
  if (op == NULL || op->cancelled) return;
  op->cancelled = 1;
  if (op->argc > 0 && !op->resent) own_args(op);
}

/* ---- local results, delivered from the loop ------------------------------ */

static struct {
  uv_timer_t timer;
  uv_loop_t *loop;
  px_rs_op_t *head, *tail;
} later;

static void on_later(uv_timer_t *t) {
  (void)t;
  px_rs_op_t *op = later.head;
  later.head = later.tail = NULL;
  while (op != NULL) {
    px_rs_op_t *next = op->next;
    if (!op->cancelled && op->chain)
      op->chain(op->arg, op->st, op->turns, op->st == PX_RS_OK ? op->n : 0,
                op->st == PX_RS_NOT_FOUND ? op->missing : NULL);
    else if (!op->cancelled)
      op->done(op->arg, op->st);
    op_free(op);
    op = next;
  }
}

static px_rs_op_t *deliver(const px_rs_where_t *w, px_rs_op_t *op) {
  if (later.loop != w->loop) { /* first use in this worker */
    uv_timer_init(w->loop, &later.timer);
    uv_unref((uv_handle_t *)&later.timer); /* never keeps a draining worker alive */
    later.loop = w->loop;
  }
  if (later.tail)
    later.tail->next = op;
  else
    later.head = op;
  later.tail = op;
  uv_timer_start(&later.timer, on_later, 0, 0);
  return op;
}

static uint64_t now_s(void) {
  return (uint64_t)time(NULL);
}

/* A local record: u32 owner, previous id and input lengths, then the four. */
#define REC_HEAD 12

typedef struct rec {
  px_str_t owner, prev, input, response;
} rec_t;

static int rec_parse(const px_buf_t *b, rec_t *r) {
  uint32_t l[3];
  if (b->len < REC_HEAD) return -1;
  memcpy(l, b->data, REC_HEAD);
  size_t off = REC_HEAD;
  if ((uint64_t)l[0] + l[1] + l[2] > b->len - off) return -1;
  r->owner = (px_str_t){b->data + off, l[0]};
  r->prev = (px_str_t){b->data + off + l[0], l[1]};
  r->input = (px_str_t){b->data + off + l[0] + l[1], l[2]};
  off += (size_t)l[0] + l[1] + l[2];
  r->response = (px_str_t){b->data + off, b->len - off};
  return 0;
}

static int same(px_str_t a, const char *b) {
  return a.len == strlen(b) && memcmp(a.ptr, b, a.len) == 0;
}

/* The chain read from the local store into op (its status set). */
static void local_chain(px_rs_op_t *op, const char *owner, const char *id,
                        size_t max_bytes, size_t max_turns, int stop) {
  char cur[PX_STORED_ID_MAX + 1];
  snprintf(cur, sizeof(cur), "%s", id);
  size_t cap = 0, total = 0;
  uint64_t now = now_s();
  op->st = PX_RS_OK;
  while (cur[0] != 0) {
    if (op->n == max_turns) {
      if (stop) break;
      op->st = PX_RS_TOO_BIG;
      return;
    }
    if (op->n == cap) {
      size_t nc = cap ? cap * 2 : 8;
      px_buf_t *nb = realloc(op->bufs, nc * sizeof(*nb));
      if (nb == NULL) goto unavailable;
      op->bufs = nb;
      px_stored_turn_t *nt = realloc(op->turns, nc * sizeof(*nt));
      if (nt == NULL) goto unavailable;
      op->turns = nt;
      cap = nc;
    }
    px_buf_t *b = &op->bufs[op->n];
    px_buf_init(b, max_bytes + (64u << 10));
    op->n++;
    rec_t r;
    int rc = px_store_get(PX_STORE_RESPONSES, cur, strlen(cur), b, now);
    if (rc == PX_ETOOBIG) { /* a record over the byte limit by itself */
      op->st = PX_RS_TOO_BIG;
      return;
    }
    if (rc < 0) goto unavailable;
    if (rc == 0 || rec_parse(b, &r) < 0 || !same(r.owner, owner)) {
      op->st = PX_RS_NOT_FOUND;
      snprintf(op->missing, sizeof(op->missing), "%s", cur);
      return;
    }
    total += r.input.len + r.response.len;
    if (total > max_bytes) {
      op->st = PX_RS_TOO_BIG;
      return;
    }
    op->turns[op->n - 1] = (px_stored_turn_t){r.input, r.response};
    size_t pl = r.prev.len < PX_STORED_ID_MAX ? r.prev.len : PX_STORED_ID_MAX;
    memcpy(cur, r.prev.ptr, pl);
    cur[pl] = 0;
  }
  /* newest first as read: oldest first for the caller (turn i in bufs[i]) */
  for (size_t i = 0, j = op->n ? op->n - 1 : 0; i < j; i++, j--) {
    px_stored_turn_t t = op->turns[i];
    op->turns[i] = op->turns[j];
    op->turns[j] = t;
    px_buf_t b = op->bufs[i];
    op->bufs[i] = op->bufs[j];
    op->bufs[j] = b;
  }
  return;
unavailable:
  op->st = PX_RS_UNAVAILABLE;
}

static px_rs_status_t local_put(const px_rs_where_t *w, const char *id, const char *owner,
                                const char *prev, px_str_t input, px_str_t response) {
  uint32_t l[3] = {(uint32_t)strlen(owner), (uint32_t)strlen(prev), (uint32_t)input.len};
  size_t n = REC_HEAD + l[0] + l[1] + l[2] + response.len;
  if (n + strlen(id) > w->max_size || input.len > UINT32_MAX) return PX_RS_TOO_BIG;
  char *v = malloc(n);
  if (v == NULL) return PX_RS_UNAVAILABLE;
  memcpy(v, l, REC_HEAD);
  size_t off = REC_HEAD;
  memcpy(v + off, owner, l[0]), off += l[0];
  memcpy(v + off, prev, l[1]), off += l[1];
  memcpy(v + off, input.ptr, l[2]), off += l[2];
  memcpy(v + off, response.ptr, response.len);
  uint64_t now = now_s();
  uint64_t exp = now + (w->ttl_ms + 999) / 1000;
  int rc = px_store_put(PX_STORE_RESPONSES, id, strlen(id), v, n, exp, PX_STORE_NEW);
  free(v);
  if (rc == PX_STORE_EEXIST) return PX_RS_NOT_FOUND;
  if (rc < 0) return PX_RS_UNAVAILABLE;
  /* the oldest go first, once over the cap (a read unless it is) */
  if (px_store_bytes(PX_STORE_RESPONSES) > w->max_size)
    px_store_trim(PX_STORE_RESPONSES, w->max_size, now, NULL);
  return PX_RS_OK;
}

static px_rs_status_t local_delete(const char *owner, const char *id) {
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  rec_t r;
  int rc = px_store_get(PX_STORE_RESPONSES, id, strlen(id), &b, now_s());
  px_rs_status_t st = PX_RS_NOT_FOUND;
  if (rc < 0)
    st = PX_RS_UNAVAILABLE;
  else if (rc == 1 && rec_parse(&b, &r) == 0 && same(r.owner, owner))
    st = px_store_del(PX_STORE_RESPONSES, id, strlen(id)) < 0 ? PX_RS_UNAVAILABLE
                                                              : PX_RS_OK;
  px_buf_free(&b);
  return st;
}

px_rs_op_t *px_rs_defer(const px_rs_where_t *w, px_rs_done_fn cb, void *arg) {
  px_rs_op_t *op = op_new(NULL, cb, arg);
  if (op == NULL) return NULL;
  op->st = PX_RS_OK;
  return deliver(w, op);
}

/* ---- Redis ---------------------------------------------------------------- */

static const char *script_sha(const char *script) {
  static struct {
    const char *script;
    char sha[41];
  } known[3];
  for (size_t i = 0; i < 3; i++) {
    if (known[i].script == script) return known[i].sha;
    if (known[i].script == NULL) {
      unsigned char md[SHA_DIGEST_LENGTH];
      SHA1((const unsigned char *)script, strlen(script), md);
      for (int k = 0; k < SHA_DIGEST_LENGTH; k++)
        sprintf(known[i].sha + 2 * k, "%02x", md[k]);
      known[i].script = script;
      return known[i].sha;
    }
  }
  return NULL;
}

static int send_script(px_rs_op_t *op) {
  const char *argv[3 + RS_ARGS];
  size_t argvlen[3 + RS_ARGS];
  const char *sha = op->resent ? NULL : script_sha(op->script);
  argv[0] = sha ? "EVALSHA" : "EVAL";
  argv[1] = sha ? sha : op->script;
  argv[2] = "0";
  for (int i = 0; i < 3; i++) argvlen[i] = strlen(argv[i]);
  for (int i = 0; i < op->argc; i++) {
    argv[3 + i] = op->argv[i];
    argvlen[3 + i] = op->lens[i];
  }
  return px_redis_command(3 + op->argc, argv, argvlen, op->timeout_ms, op->cb, op);
}

/* The script by its SHA1 (EVALSHA), in full (EVAL) when Redis does not
 * know it (NOSCRIPT: restarted, flushed). */
static int eval(const px_rs_where_t *w, const char *script, const char *const *args,
                const size_t *lens, int n, px_redis_reply_fn cb, px_rs_op_t *op) {
  op->timeout_ms = w->timeout_ms;
  size_t copy = 0;
  for (int i = 0; i < n; i++) {
    op->lens[i] = lens ? lens[i] : strlen(args[i]);
    if (op->lens[i] <= ARG_COPY_MAX) copy += op->lens[i] + 1;
  }
  op->copies = malloc(copy ? copy : 1);
  if (op->copies == NULL) return -1;
  char *c = op->copies;
  for (int i = 0; i < n; i++) {
    op->argv[i] = args[i];
    if (op->lens[i] > ARG_COPY_MAX) continue;
    memcpy(c, args[i], op->lens[i]);
    c[op->lens[i]] = 0;
    op->argv[i] = c;
    c += op->lens[i] + 1;
  }
  op->argc = n;
  op->script = script;
  op->cb = cb;
  return send_script(op);
}

/* A reply of NOSCRIPT: sent again in full (1; the reply comes back to the
 * same callback), else 0. A write is, even once cancelled (its client left:
 * the turn is kept all the same); a read nobody waits for is not. */
static int resent(px_rs_op_t *op, const redisReply *r) {
  if (op->resent || (op->cancelled && op->chain) || r == NULL ||
      r->type != REDIS_REPLY_ERROR || strncmp(r->str, "NOSCRIPT", 8) != 0)
    return 0;
  op->resent = 1;
  return send_script(op) == 0;
}

static px_str_t rstr(const redisReply *r) {
  return r && r->type == REDIS_REPLY_STRING ? (px_str_t){r->str, r->len}
                                            : (px_str_t){"", 0};
}

static void on_chain(void *arg, redisReply *r) {
  px_rs_op_t *op = arg;
  if (resent(op, r)) return;
  if (op->cancelled) {
    op_free(op);
    return;
  }
  if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
      r->element[0]->type != REDIS_REPLY_INTEGER) {
    op->chain(op->arg, PX_RS_UNAVAILABLE, NULL, 0, NULL);
  } else if (r->element[0]->integer == 0) {
    char missing[PX_STORED_ID_MAX + 1];
    px_str_t m = r->elements > 1 ? rstr(r->element[1]) : (px_str_t){"", 0};
    size_t l = m.len < PX_STORED_ID_MAX ? m.len : PX_STORED_ID_MAX;
    memcpy(missing, m.ptr, l);
    missing[l] = 0;
    op->chain(op->arg, PX_RS_NOT_FOUND, NULL, 0, missing);
  } else if (r->element[0]->integer == 2) {
    op->chain(op->arg, PX_RS_TOO_BIG, NULL, 0, NULL);
  } else {
    size_t n = (r->elements - 1) / 2;
    px_stored_turn_t *t = calloc(n ? n : 1, sizeof(*t));
    if (t == NULL) {
      op->chain(op->arg, PX_RS_UNAVAILABLE, NULL, 0, NULL);
    } else {
      for (size_t k = 0; k < n; k++) { /* newest first in the reply */
        t[n - 1 - k].input = rstr(r->element[1 + 2 * k]);
        t[n - 1 - k].response = rstr(r->element[2 + 2 * k]);
      }
      op->reply = r;
      op->n = n;
      op->chain(op->arg, PX_RS_OK, t, n, NULL);
      op->reply = NULL;
      op->n = 0;
      free(t);
    }
  }
  op_free(op);
}

px_rs_op_t *px_rs_chain(const px_rs_where_t *w, const char *owner, const char *id,
                        size_t max_bytes, size_t max_turns, px_rs_chain_fn cb,
                        void *arg) {
  px_rs_op_t *op = op_new(cb, NULL, arg);
  if (op == NULL) return fail_now(op);
  if (px_store_on()) {
    local_chain(op, owner, id, max_bytes, max_turns, 0);
    return deliver(w, op);
  }
  char mb[24], mn[24];
  snprintf(mb, sizeof(mb), "%zu", max_bytes);
  snprintf(mn, sizeof(mn), "%zu", max_turns);
  const char *args[] = {w->prefix, owner, id, mb, mn, "0"};
  if (eval(w, chain_script, args, NULL, 6, on_chain, op) < 0) return fail_now(op);
  return op;
}

px_rs_op_t *px_rs_get(const px_rs_where_t *w, const char *owner, const char *id,
                      px_rs_chain_fn cb, void *arg) {
  /* the first turn of the chain script is the turn itself */
  px_rs_op_t *op = op_new(cb, NULL, arg);
  if (op == NULL) return fail_now(op);
  if (px_store_on()) {
    local_chain(op, owner, id, SIZE_MAX - (64u << 10), 1, 1);
    return deliver(w, op);
  }
  const char *args[] = {w->prefix, owner, id, "18446744073709551615", "1", "1"};
  if (eval(w, chain_script, args, NULL, 6, on_chain, op) < 0) return fail_now(op);
  return op;
}

static void on_done(void *arg, redisReply *r) {
  px_rs_op_t *op = arg;
  if (resent(op, r)) return;
  if (!op->cancelled) {
    px_rs_status_t st = PX_RS_UNAVAILABLE;
    if (r && r->type == REDIS_REPLY_INTEGER)
      st = r->integer == 1 ? PX_RS_OK : r->integer == 2 ? PX_RS_TOO_BIG : PX_RS_NOT_FOUND;
    op->done(op->arg, st);
  }
  op_free(op);
}

px_rs_op_t *px_rs_put(const px_rs_where_t *w, const char *id, const char *owner,
                      const char *prev, px_str_t input, px_str_t response,
                      px_rs_done_fn cb, void *arg) {
  px_rs_op_t *op = op_new(NULL, cb, arg);
  if (op == NULL) return fail_now(op);
  if (px_store_on()) {
    op->st = local_put(w, id, owner, prev, input, response);
    return deliver(w, op);
  }
  char ttl[24], max[24];
  snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)w->ttl_ms);
  snprintf(max, sizeof(max), "%llu", (unsigned long long)w->max_size);
  const char *args[] = {w->prefix, id, owner, prev, input.ptr, response.ptr, ttl, max};
  size_t lens[] = {strlen(w->prefix), strlen(id),   strlen(owner), strlen(prev),
                   input.len,         response.len, strlen(ttl),   strlen(max)};
  if (eval(w, put_script, args, lens, 8, on_done, op) < 0) return fail_now(op);
  return op;
}

px_rs_op_t *px_rs_delete(const px_rs_where_t *w, const char *owner, const char *id,
                         px_rs_done_fn cb, void *arg) {
  px_rs_op_t *op = op_new(NULL, cb, arg);
  if (op == NULL) return fail_now(op);
  if (px_store_on()) {
    op->st = local_delete(owner, id);
    return deliver(w, op);
  }
  const char *args[] = {w->prefix, owner, id};
  if (eval(w, del_script, args, NULL, 3, on_done, op) < 0) return fail_now(op);
  return op;
}
