/* store_lmdb.c - the host's persistent store (store.h) on LMDB.
 *
 * One environment per process, opened after fork, in [state] dir. Named
 * sub-databases: the public ones of px_store_db_t, plus two of the store's
 * own: "age" (capped databases' age index: db byte, created ns big-endian,
 * key -> nothing) and "meta" (per capped database, its total bytes).
 *
 * A record is a 16-byte head (created ns, expires unix s; host byte order:
 * the file never leaves its host) followed by the value bytes.
 */
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "proxai/log.h"
#include "proxai/store.h"

#define HEAD 16
#define MAP_DEFAULT (1ull << 30)

static const struct {
  const char *name;
  int capped;
} dbs[PX_STORE_DB_COUNT] = {
    [PX_STORE_SPEND] = {"spend", 0},         [PX_STORE_KEYS] = {"keys", 0},
    [PX_STORE_KEYHASH] = {"keyhash", 0},     [PX_STORE_TEAMS] = {"teams", 0},
    [PX_STORE_RESPONSES] = {"responses", 1},
};

static struct {
  MDB_env *env;
  MDB_dbi dbi[PX_STORE_DB_COUNT];
  MDB_dbi age, meta;
  int logged; /* one log line per kind of failure is enough */
  uint64_t last_ns;
} g;

typedef struct head {
  uint64_t created_ns;
  uint64_t expires_s;
} head_t;

static int fail(int rc) {
  if (rc == MDB_MAP_FULL) return PX_STORE_EFULL;
  if (!g.logged) {
    g.logged = 1;
    px_log_error("state store: %s", mdb_strerror(rc));
  }
  return PX_STORE_EIO;
}

int px_store_on(void) {
  return g.env != NULL;
}

int px_store_open(const char *dir, uint64_t map_size, char *err, size_t errlen) {
  if (g.env) return 0;
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
    snprintf(err, errlen, "cannot create [state] dir %s: %s", dir, strerror(errno));
    return -errno;
  }
  MDB_env *env;
  int rc = mdb_env_create(&env);
  if (rc == 0) rc = mdb_env_set_maxdbs(env, PX_STORE_DB_COUNT + 2);
  if (rc == 0) rc = mdb_env_set_mapsize(env, map_size ? map_size : MAP_DEFAULT);
  /* NOTLS: reader slots belong to transactions, not threads; NOSYNC: see
   * store.h (px_store_sync once a second) */
  if (rc == 0) rc = mdb_env_open(env, dir, MDB_NOTLS | MDB_NOSYNC, 0600);
  if (rc != 0) {
    snprintf(err, errlen, "cannot open the state store in %s: %s", dir, mdb_strerror(rc));
    mdb_env_close(env);
    return PX_STORE_EIO;
  }
  int dead = 0;
  mdb_reader_check(env, &dead); /* slots of processes killed mid-read */
  MDB_txn *txn;
  rc = mdb_txn_begin(env, NULL, 0, &txn);
  for (int i = 0; rc == 0 && i < PX_STORE_DB_COUNT; i++)
    rc = mdb_dbi_open(txn, dbs[i].name, MDB_CREATE, &g.dbi[i]);
  if (rc == 0) rc = mdb_dbi_open(txn, "age", MDB_CREATE, &g.age);
  if (rc == 0) rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &g.meta);
  if (rc == 0)
    rc = mdb_txn_commit(txn);
  else
    mdb_txn_abort(txn);
  if (rc != 0) {
    snprintf(err, errlen, "cannot open the state store in %s: %s", dir, mdb_strerror(rc));
    mdb_env_close(env);
    return PX_STORE_EIO;
  }
  g.env = env;
  g.logged = 0;
  return 0;
}

void px_store_close(void) {
  if (!g.env) return;
  mdb_env_sync(g.env, 1);
  mdb_env_close(g.env);
  g.env = NULL;
}

void px_store_sync(void) {
  if (g.env) mdb_env_sync(g.env, 1);
}

/* A creation stamp: wall clock ns, strictly increasing in this process (the
 * age index needs distinct, ordered keys). */
static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  if (t <= g.last_ns) t = g.last_ns + 1;
  g.last_ns = t;
  return t;
}

static int live(const MDB_val *v, uint64_t now_s) {
  if (v->mv_size < HEAD) return 0;
  head_t h;
  memcpy(&h, v->mv_data, HEAD);
  return h.expires_s == 0 || h.expires_s > now_s;
}

static int key_ok(size_t klen) {
  return klen > 0 && klen <= PX_STORE_KEY_MAX;
}

int px_store_get(px_store_db_t db, const void *key, size_t klen, px_buf_t *out,
                 uint64_t now_s) {
  if (!g.env) return PX_STORE_EOFF;
  if (!key_ok(klen)) return PX_EINVAL;
  MDB_txn *txn;
  int rc = mdb_txn_begin(g.env, NULL, MDB_RDONLY, &txn);
  if (rc != 0) return fail(rc);
  MDB_val k = {klen, (void *)key}, v;
  rc = mdb_get(txn, g.dbi[db], &k, &v);
  int r;
  if (rc == MDB_NOTFOUND || (rc == 0 && !live(&v, now_s))) {
    r = 0;
  } else if (rc != 0) {
    r = fail(rc);
  } else {
    out->len = 0;
    r = px_buf_append_grow(out, (char *)v.mv_data + HEAD, v.mv_size - HEAD);
    r = r < 0 ? r : 1;
  }
  mdb_txn_abort(txn);
  return r;
}

/* capped databases: the age index entry of a record and the byte total */
static int age_key(char *buf, px_store_db_t db, uint64_t created_ns, const void *key,
                   size_t klen) {
  buf[0] = (char)db;
  for (int i = 0; i < 8; i++) buf[1 + i] = (char)(created_ns >> (56 - 8 * i));
  memcpy(buf + 9, key, klen);
  return (int)(9 + klen);
}

static uint64_t bytes_get(MDB_txn *txn, px_store_db_t db) {
  char mk[8] = {'b', 'y', 't', 'e', 's', ':', (char)db, 0};
  MDB_val k = {7, mk}, v;
  uint64_t n = 0;
  if (mdb_get(txn, g.meta, &k, &v) == 0 && v.mv_size == 8) memcpy(&n, v.mv_data, 8);
  return n;
}

static int bytes_add(MDB_txn *txn, px_store_db_t db, int64_t delta) {
  char mk[8] = {'b', 'y', 't', 'e', 's', ':', (char)db, 0};
  MDB_val k = {7, mk}, v;
  uint64_t n = bytes_get(txn, db);
  n = delta < 0 && (uint64_t)-delta > n ? 0 : n + (uint64_t)delta;
  v.mv_size = 8;
  v.mv_data = &n;
  return mdb_put(txn, g.meta, &k, &v, 0);
}

/* Delete the record at k (present, value v) inside txn, with its index. */
static int del_in(MDB_txn *txn, px_store_db_t db, MDB_val *k, MDB_val *v) {
  int rc = 0;
  if (dbs[db].capped && v->mv_size >= HEAD) {
    head_t h;
    memcpy(&h, v->mv_data, HEAD);
    char ak[9 + PX_STORE_KEY_MAX];
    MDB_val a = {(size_t)age_key(ak, db, h.created_ns, k->mv_data, k->mv_size), ak};
    rc = mdb_del(txn, g.age, &a, NULL);
    if (rc == MDB_NOTFOUND) rc = 0;
    if (rc == 0) rc = bytes_add(txn, db, -(int64_t)(k->mv_size + v->mv_size - HEAD));
  }
  if (rc == 0) rc = mdb_del(txn, g.dbi[db], k, NULL);
  return rc;
}

static int put_in(MDB_txn *txn, px_store_db_t db, const void *key, size_t klen,
                  const void *val, size_t vlen, uint64_t expires_s, unsigned flags) {
  MDB_val k = {klen, (void *)key}, old;
  int rc = mdb_get(txn, g.dbi[db], &k, &old);
  if (rc == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if ((flags & PX_STORE_NEW) && live(&old, (uint64_t)ts.tv_sec)) return PX_STORE_EEXIST;
    rc = del_in(txn, db, &k, &old);
    if (rc != 0) return rc;
  } else if (rc != MDB_NOTFOUND) {
    return rc;
  }
  head_t h = {now_ns(), expires_s};
  MDB_val v = {HEAD + vlen, NULL};
  rc = mdb_put(txn, g.dbi[db], &k, &v, MDB_RESERVE);
  if (rc != 0) return rc;
  memcpy(v.mv_data, &h, HEAD);
  if (vlen) memcpy((char *)v.mv_data + HEAD, val, vlen);
  if (dbs[db].capped) {
    char ak[9 + PX_STORE_KEY_MAX];
    MDB_val a = {(size_t)age_key(ak, db, h.created_ns, key, klen), ak}, e = {0, ""};
    rc = mdb_put(txn, g.age, &a, &e, 0);
    if (rc == 0) rc = bytes_add(txn, db, (int64_t)(klen + vlen));
  }
  return rc;
}

/* One write transaction around fn's mdb calls: committed when rc is 0. */
static int finish(MDB_txn *txn, int rc) {
  if (rc == 0) {
    rc = mdb_txn_commit(txn);
    return rc == 0 ? 0 : fail(rc);
  }
  mdb_txn_abort(txn);
  if (rc < 0) return rc; /* ours */
  return fail(rc);
}

int px_store_put(px_store_db_t db, const void *key, size_t klen, const void *val,
                 size_t vlen, uint64_t expires_s, unsigned flags) {
  if (!g.env) return PX_STORE_EOFF;
  if (!key_ok(klen)) return PX_EINVAL;
  MDB_txn *txn;
  int rc = mdb_txn_begin(g.env, NULL, 0, &txn);
  if (rc != 0) return fail(rc);
  return finish(txn, put_in(txn, db, key, klen, val, vlen, expires_s, flags));
}

int px_store_del(px_store_db_t db, const void *key, size_t klen) {
  if (!g.env) return PX_STORE_EOFF;
  if (!key_ok(klen)) return PX_EINVAL;
  MDB_txn *txn;
  int rc = mdb_txn_begin(g.env, NULL, 0, &txn);
  if (rc != 0) return fail(rc);
  MDB_val k = {klen, (void *)key}, v;
  rc = mdb_get(txn, g.dbi[db], &k, &v);
  if (rc == MDB_NOTFOUND) {
    mdb_txn_abort(txn);
    return 0;
  }
  if (rc == 0) rc = del_in(txn, db, &k, &v);
  rc = finish(txn, rc);
  return rc < 0 ? rc : 1;
}

int px_store_add(px_store_db_t db, const void *key, size_t klen, int64_t delta,
                 int64_t *result) {
  if (!g.env) return PX_STORE_EOFF;
  if (!key_ok(klen) || dbs[db].capped) return PX_EINVAL;
  MDB_txn *txn;
  int rc = mdb_txn_begin(g.env, NULL, 0, &txn);
  if (rc != 0) return fail(rc);
  MDB_val k = {klen, (void *)key}, v;
  int64_t n = 0;
  rc = mdb_get(txn, g.dbi[db], &k, &v);
  if (rc == 0 && v.mv_size == HEAD + 8) memcpy(&n, (char *)v.mv_data + HEAD, 8);
  if (rc == 0 || rc == MDB_NOTFOUND) {
    n += delta;
    rc = put_in(txn, db, key, klen, &n, 8, 0, 0);
  }
  rc = finish(txn, rc);
  if (rc == 0 && result) *result = n;
  return rc;
}

int px_store_counter(px_store_db_t db, const void *key, size_t klen, int64_t *value) {
  px_buf_t b;
  px_buf_init(&b, 64);
  int rc = px_store_get(db, key, klen, &b, 0);
  *value = 0;
  if (rc == 1 && b.len == 8) memcpy(value, b.data, 8);
  px_buf_free(&b);
  return rc < 0 ? rc : 0;
}

int px_store_each(px_store_db_t db, const void *prefix, size_t plen, uint64_t now_s,
                  px_store_each_fn fn, void *arg) {
  if (!g.env) return PX_STORE_EOFF;
  MDB_txn *txn;
  MDB_cursor *cur;
  int rc = mdb_txn_begin(g.env, NULL, MDB_RDONLY, &txn);
  if (rc != 0) return fail(rc);
  rc = mdb_cursor_open(txn, g.dbi[db], &cur);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return fail(rc);
  }
  MDB_val k = {plen, (void *)prefix}, v;
  rc = mdb_cursor_get(cur, &k, &v, plen ? MDB_SET_RANGE : MDB_FIRST);
  while (rc == 0) {
    if (plen && (k.mv_size < plen || memcmp(k.mv_data, prefix, plen) != 0)) break;
    if (live(&v, now_s)) {
      px_str_t ks = {k.mv_data, k.mv_size};
      px_str_t vs = {(char *)v.mv_data + HEAD, v.mv_size - HEAD};
      if (fn(arg, ks, vs)) break;
    }
    rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  }
  mdb_cursor_close(cur);
  mdb_txn_abort(txn);
  return rc == 0 || rc == MDB_NOTFOUND ? 0 : fail(rc);
}

uint64_t px_store_bytes(px_store_db_t db) {
  if (!g.env) return 0;
  MDB_txn *txn;
  if (mdb_txn_begin(g.env, NULL, MDB_RDONLY, &txn) != 0) return 0;
  uint64_t n = bytes_get(txn, db);
  mdb_txn_abort(txn);
  return n;
}

int px_store_trim(px_store_db_t db, uint64_t max_bytes, uint64_t now_s, size_t *deleted) {
  if (!g.env) return PX_STORE_EOFF;
  if (!dbs[db].capped) return PX_EINVAL;
  MDB_txn *txn;
  MDB_cursor *cur;
  size_t n = 0;
  int rc = mdb_txn_begin(g.env, NULL, 0, &txn);
  if (rc != 0) return fail(rc);
  rc = mdb_cursor_open(txn, g.age, &cur);
  if (rc != 0) return finish(txn, rc);
  uint64_t total = bytes_get(txn, db);
  char first = (char)db, ac[9 + PX_STORE_KEY_MAX];
  MDB_val a = {1, &first}, e;
  /* Oldest first. Records of one database share one ttl in practice, so
   * they expire in creation order too: the walk stops at the first live
   * record once the total is under the cap. */
  rc = mdb_cursor_get(cur, &a, &e, MDB_SET_RANGE);
  while (rc == 0 && a.mv_size > 9 && ((char *)a.mv_data)[0] == first) {
    size_t al = a.mv_size;
    memcpy(ac, a.mv_data, al);
    MDB_val k = {al - 9, ac + 9}, v;
    int r = mdb_get(txn, g.dbi[db], &k, &v);
    if (r == 0) {
      head_t h;
      memcpy(&h, v.mv_data, HEAD);
      uint64_t cn = 0;
      for (int i = 0; i < 8; i++) cn = cn << 8 | (unsigned char)ac[1 + i];
      if (h.created_ns != cn) r = MDB_NOTFOUND; /* a stale entry: the key was rewritten */
    }
    if (r == MDB_NOTFOUND) {
      MDB_val ak = {al, ac};
      rc = mdb_del(txn, g.age, &ak, NULL);
    } else if (r != 0) {
      rc = r;
    } else if (!live(&v, now_s) || total > max_bytes) {
      uint64_t sz = k.mv_size + v.mv_size - HEAD;
      rc = del_in(txn, db, &k, &v);
      total = total > sz ? total - sz : 0;
      n++;
    } else {
      break;
    }
    if (rc != 0) break;
    a.mv_size = al;
    a.mv_data = ac;
    rc = mdb_cursor_get(cur, &a, &e, MDB_SET_RANGE); /* the next one after it */
  }
  mdb_cursor_close(cur);
  if (rc == MDB_NOTFOUND) rc = 0;
  rc = finish(txn, rc);
  if (rc == 0 && deleted) *deleted = n;
  return rc;
}
