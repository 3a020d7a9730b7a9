/* keys.c - runtime keys and teams (keys.h): their records in the store,
 * the lookup of a presented secret, and the admin API's operations.
 *
 * Key record (KEYS, by name): {"name", "team", "models", "rpm", "tpm",
 * "budget" (nano-USD), "budget_window", "expires_at", "created_at",
 * "hash", "old_hash", "old_until"} (unix seconds; 0 = none).
 * Team record (TEAMS, by name): {"name", "budget", "budget_window",
 * "created_at"}. KEYHASH: hex SHA-256 of a secret -> the key's name.
 */
#include "proxai/keys.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <math.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "proxai/money.h"
#include "proxai/protoutil.h"
#include "proxai/ratelimit.h"
#include "proxai/state_redis.h"
#include "proxai/store.h"

#define NAME_MAX_LEN 64
#define MODELS_MAX 64
#define GRACE_MAX_MS (30ull * 86400 * 1000)
#define RECORD_MAX (64u << 10)

/* A runtime key and what it points to, in one allocation's care. */
typedef struct rkey {
  px_key_conf_t k; /* first: px_keys_free casts back */
  px_team_conf_t team;
} rkey_t;

static int64_t now_s(void) {
  return (int64_t)time(NULL);
}

/* ---------------------------------------------------------------------- */
/* records: the local store, or Redis (PREFIX key:NAME, keyhash:HEX,
 * team:NAME; the admin API's blocking connection)                          */

static int redis_on(void) {
  return px_redis_running();
}

int px_keys_on(const px_config_t *cfg) {
  return cfg->admin_token != NULL && (px_store_on() || redis_on());
}

static const char *rname(px_store_db_t db) {
  return db == PX_STORE_KEYS ? "key:" : db == PX_STORE_TEAMS ? "team:" : "keyhash:";
}

/* a Redis reply, or NULL after dropping a failed connection */
static redisReply *redis_cmd(int argc, const char **argv, const size_t *lens) {
  redisContext *c = px_redis_sync();
  if (!c) return NULL;
  redisReply *r = redisCommandArgv(c, argc, argv, lens);
  if (!r) px_redis_sync_drop();
  return r;
}

static void rkey(char *buf, size_t cap, px_store_db_t db, const char *name, size_t nl) {
  snprintf(buf, cap, "%s%s%.*s", px_redis_prefix(), rname(db), (int)nl, name);
}

static int kv_get(px_store_db_t db, const char *name, size_t nl, px_buf_t *out,
                  int64_t now) {
  if (!redis_on()) return px_store_get(db, name, nl, out, (uint64_t)now);
  char k[PX_STORE_KEY_MAX + 64];
  rkey(k, sizeof(k), db, name, nl);
  const char *argv[] = {"GET", k};
  size_t lens[] = {3, strlen(k)};
  redisReply *r = redis_cmd(2, argv, lens);
  if (!r) return PX_STORE_EIO;
  int rc = r->type == REDIS_REPLY_STRING ? 1
           : r->type == REDIS_REPLY_NIL  ? 0
                                         : PX_STORE_EIO;
  if (rc == 1) {
    out->len = 0;
    if (px_buf_append_grow(out, r->str, r->len) < 0) rc = PX_ENOMEM;
  }
  freeReplyObject(r);
  return rc;
}

static int kv_put(px_store_db_t db, const char *name, size_t nl, const char *val,
                  size_t vl, int64_t expires_s, unsigned flags, int64_t now) {
  if (!redis_on()) return px_store_put(db, name, nl, val, vl, (uint64_t)expires_s, flags);
  char k[PX_STORE_KEY_MAX + 64], ms[32];
  rkey(k, sizeof(k), db, name, nl);
  const char *argv[6] = {"SET", k, val};
  size_t lens[6] = {3, strlen(k), vl};
  int n = 3;
  if (flags & PX_STORE_NEW) argv[n] = "NX", lens[n++] = 2;
  if (expires_s) {
    snprintf(ms, sizeof(ms), "%lld", (long long)((expires_s - now) * 1000));
    argv[n] = "PX", lens[n++] = 2;
    argv[n] = ms, lens[n++] = strlen(ms);
  }
  redisReply *r = redis_cmd(n, argv, lens);
  if (!r) return PX_STORE_EIO;
  int rc = r->type == REDIS_REPLY_NIL     ? PX_STORE_EEXIST
           : r->type == REDIS_REPLY_ERROR ? PX_STORE_EIO
                                          : 0;
  freeReplyObject(r);
  return rc;
}

static int kv_del(px_store_db_t db, const char *name, size_t nl) {
  if (!redis_on()) return px_store_del(db, name, nl);
  char k[PX_STORE_KEY_MAX + 64];
  rkey(k, sizeof(k), db, name, nl);
  const char *argv[] = {"DEL", k};
  size_t lens[] = {3, strlen(k)};
  redisReply *r = redis_cmd(2, argv, lens);
  if (!r) return PX_STORE_EIO;
  int rc = r->type == REDIS_REPLY_INTEGER ? (int)r->integer : PX_STORE_EIO;
  freeReplyObject(r);
  return rc;
}

/* every record of db: the store's walk, or SCAN + GET */
static int kv_each(px_store_db_t db, int64_t now, px_store_each_fn fn, void *arg) {
  if (!redis_on()) return px_store_each(db, NULL, 0, (uint64_t)now, fn, arg);
  char match[PX_STORE_KEY_MAX + 64], cursor[32] = "0";
  snprintf(match, sizeof(match), "%s%s*", px_redis_prefix(), rname(db));
  size_t skip = strlen(match) - 1;
  do {
    const char *argv[] = {"SCAN", cursor, "MATCH", match, "COUNT", "500"};
    size_t lens[] = {4, strlen(cursor), 5, strlen(match), 5, 3};
    redisReply *r = redis_cmd(6, argv, lens);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      if (r) freeReplyObject(r);
      return PX_STORE_EIO;
    }
    snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str ? r->element[0]->str : "0");
    redisReply *ks = r->element[1];
    for (size_t i = 0; i < ks->elements; i++) {
      const char *k = ks->element[i]->str;
      if (!k || strlen(k) < skip) continue;
      px_buf_t b;
      px_buf_init(&b, RECORD_MAX);
      if (kv_get(db, k + skip, strlen(k + skip), &b, now) == 1)
        fn(arg, (px_str_t){k + skip, strlen(k + skip)}, (px_str_t){b.data, b.len});
      px_buf_free(&b);
    }
    freeReplyObject(r);
  } while (strcmp(cursor, "0") != 0);
  return 0;
}

static void hash_hex(const char *secret, size_t len, char out[65]) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)secret, len, md);
  for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) sprintf(out + 2 * i, "%02x", md[i]);
}

/* a record of db by name, parsed; NULL when absent */
static json_t *load(px_store_db_t db, const char *name, int64_t now) {
  px_buf_t b;
  px_buf_init(&b, RECORD_MAX);
  json_t *j = NULL;
  if (kv_get(db, name, strlen(name), &b, now) == 1)
    j = json_loadb(b.data, b.len, 0, NULL);
  px_buf_free(&b);
  return j;
}

static int save(px_store_db_t db, const char *name, json_t *j, unsigned flags) {
  char *t = json_dumps(j, JSON_COMPACT);
  if (!t) return PX_ENOMEM;
  int rc = kv_put(db, name, strlen(name), t, strlen(t), 0, flags, now_s());
  free(t);
  return rc;
}

static int64_t jint(const json_t *o, const char *k) {
  return json_integer_value(json_object_get(o, k));
}

static const char *jstr(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* A runtime team record as a team conf (strings copied). */
static int team_from(const json_t *t, px_team_conf_t *out) {
  out->name = strdup(jstr(t, "name") ? jstr(t, "name") : "");
  out->budget = jint(t, "budget");
  if (px_window_parse(jstr(t, "budget_window") ? jstr(t, "budget_window") : "month",
                      &out->window) < 0)
    out->window = PX_WINDOW_MONTH;
  return out->name ? 0 : -1;
}

void px_keys_free(px_key_conf_t *k) {
  if (!k) return;
  rkey_t *r = (rkey_t *)k;
  free(k->name);
  for (size_t i = 0; i < k->nmodels; i++) free(k->models[i]);
  free(k->models);
  free(k->team_name);
  free(r->team.name);
  free(r);
}

/* The key conf of a record; its team static (cfg) or runtime (team_rec, or
 * read from the records when NULL). */
static px_key_conf_t *key_from(const px_config_t *cfg, const json_t *j,
                               const json_t *team_rec, int64_t now) {
  rkey_t *r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  px_key_conf_t *k = &r->k;
  k->name = strdup(jstr(j, "name") ? jstr(j, "name") : "");
  k->rpm = (uint64_t)jint(j, "rpm");
  k->tpm = (uint64_t)jint(j, "tpm");
  k->budget = jint(j, "budget");
  if (px_window_parse(jstr(j, "budget_window") ? jstr(j, "budget_window") : "month",
                      &k->window) < 0)
    k->window = PX_WINDOW_MONTH;
  json_t *m = json_object_get(j, "models");
  size_t n = json_array_size(m);
  if (n) k->models = calloc(n, sizeof(char *));
  for (size_t i = 0; k->models && i < n; i++) {
    const char *g = json_string_value(json_array_get(m, i));
    if (g && (k->models[k->nmodels] = strdup(g)) != NULL) k->nmodels++;
  }
  /* no model list read whole is no list at all (which allows every model):
   * such a key is not made */
  int models_short = k->nmodels != n;
  const char *team = jstr(j, "team");
  if (team) {
    k->team_name = strdup(team);
    k->team = px_config_team(cfg, team);
    if (!k->team) {
      json_t *t =
          team_rec ? json_incref((json_t *)team_rec) : load(PX_STORE_TEAMS, team, now);
      if (t && jstr(t, "name") && team_from(t, &r->team) == 0) k->team = &r->team;
      json_decref(t);
    }
  }
  if (!k->name || models_short || (team && !k->team_name)) {
    px_keys_free(k);
    return NULL;
  }
  return k;
}

void px_keys_hash(const char *secret, size_t len, char hex[65]) {
  hash_hex(secret, len, hex);
}

/* Whether record j opens with the secret of hash hex at now. */
static int record_opens(const json_t *j, const char *hex, int64_t now) {
  /* the record must still name this hash: a stale mapping never opens */
  const char *h = jstr(j, "hash"), *old = jstr(j, "old_hash");
  int ok = j && ((h && strcmp(h, hex) == 0) ||
                 (old && strcmp(old, hex) == 0 && jint(j, "old_until") > now));
  int64_t exp = jint(j, "expires_at");
  return ok && (exp == 0 || exp > now);
}

px_key_conf_t *px_keys_from_records(const px_config_t *cfg, const char *hex, px_str_t rec,
                                    px_str_t team, int64_t now) {
  if (rec.len == 0) return NULL;
  json_t *j = json_loadb(rec.ptr, rec.len, 0, NULL);
  json_t *t = team.len ? json_loadb(team.ptr, team.len, 0, NULL) : NULL;
  px_key_conf_t *k = NULL;
  if (record_opens(j, hex, now)) {
    /* a team that is neither static nor in the records: none */
    json_t *none = json_object();
    k = key_from(cfg, j, t ? t : none, now);
    json_decref(none);
  }
  json_decref(j);
  json_decref(t);
  return k;
}

px_key_conf_t *px_keys_find(const px_config_t *cfg, const char *secret, size_t len,
                            int64_t now) {
  if (!px_keys_on(cfg) || len == 0) return NULL;
  char hex[65];
  hash_hex(secret, len, hex);
  px_buf_t name;
  px_buf_init(&name, 256);
  px_key_conf_t *k = NULL;
  if (kv_get(PX_STORE_KEYHASH, hex, 64, &name, now) == 1 &&
      px_buf_append_grow(&name, "", 1) == 0) {
    json_t *j = load(PX_STORE_KEYS, name.data, now);
    if (record_opens(j, hex, now)) k = key_from(cfg, j, NULL, now);
    json_decref(j);
  }
  px_buf_free(&name);
  return k;
}

/* ---------------------------------------------------------------------- */
/* the admin API                                                            */

static int error(px_buf_t *out, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int error(px_buf_t *out, int status, const char *type, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  out->len = 0;
  px_openai_error_body(out, type, msg, NULL);
  return status;
}

#define BAD(out, ...) error(out, 400, "invalid_request_error", __VA_ARGS__)

static int answer(px_buf_t *out, int status, json_t *j) {
  char *t = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  out->len = 0;
  if (!t || px_buf_append_grow(out, t, strlen(t)) < 0) {
    free(t);
    return error(out, 500, "api_error", "out of memory");
  }
  free(t);
  return status;
}

static int valid_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > NAME_MAX_LEN) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
      return 0;
  return 1;
}

/* "2026-12-31T23:59:59Z" (or with an offset) -> unix seconds; -1 if not */
static int64_t parse_rfc3339(const char *s) {
  struct tm tm = {0};
  const char *e = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (!e) return -1;
  if (*e == '.')
    for (e++; *e >= '0' && *e <= '9'; e++) {
    }
  int64_t off = 0;
  if (*e == 'Z' || *e == 'z') {
    e++;
  } else if ((*e == '+' || *e == '-') && strlen(e) == 6 && e[3] == ':') {
    int hh = (e[1] - '0') * 10 + (e[2] - '0'), mm = (e[4] - '0') * 10 + (e[5] - '0');
    off = (hh * 3600 + mm * 60) * (*e == '-' ? -1 : 1);
    e += 6;
  } else {
    return -1;
  }
  if (*e) return -1;
  return (int64_t)timegm(&tm) - off;
}

static json_t *usd(int64_t nano) {
  char b[32];
  px_usd_str(nano, b, sizeof(b));
  return json_loadb(b, strlen(b), JSON_DECODE_ANY, NULL);
}

static json_t *when(int64_t t) {
  char b[40];
  return t ? json_string(px_rfc3339(t, b, sizeof(b))) : json_null();
}

/* spend, reservations and what is left of a budget, as JSON members */
static void budget_view(json_t *o, const px_key_conf_t *k, int team, int64_t now) {
  int64_t budget = team ? k->team->budget : k->budget;
  px_window_t w = team ? k->team->window : k->window;
  px_budget_state_t st[2] = {{0, 0}, {0, 0}};
  px_rl_wait_t *wait = NULL;
  int rc = redis_on() ? px_redis_usage_sync(k, now, st)
                      : px_rl_usage(k, now, st, NULL, NULL, &wait);
  px_win_t win;
  px_window_at(w, (time_t)now, &win);
  json_object_set_new(o, "budget", budget > 0 ? usd(budget) : json_null());
  json_object_set_new(o, "budget_window", json_string(px_window_name(w)));
  json_object_set_new(o, "spend_usd", rc == 0 ? usd(st[team].spend) : json_null());
  json_object_set_new(o, "reserved_usd", rc == 0 ? usd(st[team].reserved) : json_null());
  json_object_set_new(o, "remaining_usd",
                      rc == 0 && budget > 0
                          ? usd(budget - st[team].spend - st[team].reserved > 0
                                    ? budget - st[team].spend - st[team].reserved
                                    : 0)
                          : json_null());
  json_object_set_new(o, "resets_at", when(win.resets_at));
}

/* A key record as the API shows it: settings, spend, no secret, no hash. */
static json_t *key_view(const px_config_t *cfg, const json_t *rec, int64_t now) {
  json_t *o = json_object();
  json_object_set(o, "name", json_object_get(rec, "name"));
  json_object_set(o, "team", json_object_get(rec, "team"));
  json_object_set(o, "models", json_object_get(rec, "models"));
  json_object_set(o, "rpm", json_object_get(rec, "rpm"));
  json_object_set(o, "tpm", json_object_get(rec, "tpm"));
  px_key_conf_t *k = key_from(cfg, rec, NULL, now);
  if (k) {
    /* the key's own budget; the team's is shown under /admin/teams */
    budget_view(o, k, 0, now);
    px_keys_free(k);
  }
  json_object_set_new(o, "expires_at", when(jint(rec, "expires_at")));
  json_object_set_new(o, "created_at", when(jint(rec, "created_at")));
  int64_t ou = jint(rec, "old_until");
  json_object_set_new(o, "previous_secret_valid_until",
                      ou > now ? when(ou) : json_null());
  json_object_set_new(o, "last_used_at", when(px_rl_last_use(jstr(rec, "name"))));
  return o;
}

/* A static key or team ([key] / [team] of the configuration), shown beside
 * the runtime ones, read-only. */
static json_t *static_key_view(const px_key_conf_t *k, int64_t now) {
  json_t *o = json_object(), *m = json_array();
  json_object_set_new(o, "name", json_string(k->name));
  json_object_set_new(o, "team", k->team ? json_string(k->team->name) : json_null());
  for (size_t i = 0; i < k->nmodels; i++)
    json_array_append_new(m, json_string(k->models[i]));
  json_object_set_new(o, "models", m);
  json_object_set_new(o, "rpm", json_integer((json_int_t)k->rpm));
  json_object_set_new(o, "tpm", json_integer((json_int_t)k->tpm));
  budget_view(o, k, 0, now);
  json_object_set_new(o, "last_used_at", when(px_rl_last_use(k->name)));
  json_object_set_new(o, "static", json_true());
  return o;
}

static json_t *static_team_view(const px_team_conf_t *t, int64_t now) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(t->name));
  px_key_conf_t k = {.name = "", .team = t};
  budget_view(o, &k, 1, now);
  json_object_set_new(o, "static", json_true());
  return o;
}

static json_t *team_view(const json_t *rec, int64_t now) {
  json_t *o = json_object();
  json_object_set(o, "name", json_object_get(rec, "name"));
  px_team_conf_t t = {0};
  if (team_from(rec, &t) == 0) {
    px_key_conf_t k = {.name = "", .team = &t};
    budget_view(o, &k, 1, now);
  }
  free(t.name);
  json_object_set_new(o, "created_at", when(jint(rec, "created_at")));
  return o;
}

/* A secret: "sk-px-" and 32 of [A-Za-z0-9] from the OS's random source
 * (bytes >= 248 are drawn again: 62 * 4 = 248, no bias). */
static int new_secret(char out[39]) {
  static const char abc[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  memcpy(out, "sk-px-", 6);
  size_t n = 0;
  unsigned char r[64];
  while (n < 32) {
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) return -1;
    for (size_t i = 0; i < sizeof(r) && n < 32; i++)
      if (r[i] < 248) out[6 + n++] = abc[r[i] % 62];
  }
  out[38] = 0;
  return 0;
}

/* The settings of a POST or PATCH body, checked, into rec. 0 or an error
 * status (out written). what: "key" | "team". */
static int apply(const px_config_t *cfg, json_t *rec, json_t *in, int is_key, int create,
                 px_buf_t *out, int64_t now) {
  static const char *const key_fields[] = {"name",          "team",       "models",
                                           "rpm",           "tpm",        "budget",
                                           "budget_window", "expires_at", NULL};
  static const char *const team_fields[] = {"name", "budget", "budget_window", NULL};
  const char *const *fields = is_key ? key_fields : team_fields;
  const char *k;
  json_t *v;
  json_object_foreach(in, k, v) {
    size_t i = 0;
    while (fields[i] && strcmp(fields[i], k) != 0) i++;
    if (!fields[i]) return BAD(out, "unknown field '%.64s'", k);
    if (!create && strcmp(k, "name") == 0) return BAD(out, "'name' cannot be changed");
  }
  if (create) {
    const char *name = json_string_value(json_object_get(in, "name"));
    if (!name || !valid_name(name))
      return BAD(out, "'name' is required: 1 to %d letters, digits, '-', '_' or '.'",
                 NAME_MAX_LEN);
    json_object_set_new(rec, "name", json_string(name));
  }
  if ((v = json_object_get(in, "budget")) != NULL) {
    double d = json_number_value(v);
    if (!json_is_number(v) || !(d >= 0) || d > (double)PX_BUDGET_MAX_USD)
      return BAD(out, "'budget' must be a number of USD from 0 to %lld",
                 (long long)PX_BUDGET_MAX_USD);
    json_object_set_new(
        rec, "budget",
        json_integer(json_is_integer(v) ? json_integer_value(v) * PX_NANO_PER_USD
                                        : llround(d * 1e9)));
  }
  if ((v = json_object_get(in, "budget_window")) != NULL) {
    px_window_t w;
    if (!json_is_string(v) || px_window_parse(json_string_value(v), &w) < 0)
      return BAD(out, "'budget_window' must be day, month or total");
    json_object_set(rec, "budget_window", v);
  }
  if (!is_key) return 0;
  if ((v = json_object_get(in, "team")) != NULL) {
    if (json_is_null(v)) {
      json_object_set_new(rec, "team", json_null());
    } else {
      const char *t = json_string_value(v);
      json_t *tr = t ? load(PX_STORE_TEAMS, t, now) : NULL;
      int known = t && (px_config_team(cfg, t) || tr);
      json_decref(tr);
      if (!known)
        return BAD(out, "'team' must name an existing team (static or runtime)");
      json_object_set(rec, "team", v);
    }
  }
  if ((v = json_object_get(in, "models")) != NULL) {
    size_t i;
    json_t *g;
    if (!json_is_array(v) || json_array_size(v) > MODELS_MAX)
      return BAD(out, "'models' must be an array of at most %d model names or globs",
                 MODELS_MAX);
    json_array_foreach(v, i, g) {
      const char *s = json_string_value(g);
      if (!s || !*s || strlen(s) > 200 || !px_header_value_ok(s, strlen(s)))
        return BAD(out, "'models[%zu]' must be a non-empty model name or glob", i);
    }
    json_object_set(rec, "models", v);
  }
  static const char *const lim[] = {"rpm", "tpm"};
  for (int i = 0; i < 2; i++) {
    if ((v = json_object_get(in, lim[i])) == NULL) continue;
    json_int_t n = json_integer_value(v);
    if (!json_is_integer(v) || n < 0 || n > (i == 0 ? 4294967295LL : 1000000000000LL))
      return BAD(out, "'%s' must be a whole number from 0 (unlimited) to %s", lim[i],
                 i == 0 ? "4294967295" : "1000000000000");
    json_object_set(rec, lim[i], v);
  }
  if ((v = json_object_get(in, "expires_at")) != NULL) {
    int64_t t = json_is_null(v)     ? 0
                : json_is_string(v) ? parse_rfc3339(json_string_value(v))
                                    : -1;
    if (t < 0) return BAD(out, "'expires_at' must be an RFC 3339 time or null");
    json_object_set_new(rec, "expires_at", json_integer(t));
  }
  return 0;
}

static int parse_body(const char *body, size_t blen, json_t **in, px_buf_t *out) {
  json_error_t e;
  *in = blen ? json_loadb(body, blen, JSON_REJECT_DUPLICATES, &e) : json_object();
  if (!*in) return BAD(out, "the body is not valid JSON: %.200s", e.text);
  if (!json_is_object(*in)) {
    json_decref(*in);
    *in = NULL;
    return BAD(out, "the body must be a JSON object");
  }
  return 0;
}

static int static_key(const px_config_t *cfg, const char *name) {
  for (size_t i = 0; i < cfg->nkeys; i++)
    if (strcmp(cfg->keys[i].name, name) == 0) return 1;
  return 0;
}

typedef struct list {
  const px_config_t *cfg;
  json_t *data;
  int is_key;
  int64_t now;
} list_t;

static int each_record(void *arg, px_str_t k, px_str_t v) {
  (void)k;
  list_t *l = arg;
  json_t *rec = json_loadb(v.ptr, v.len, 0, NULL);
  if (rec)
    json_array_append_new(
        l->data, l->is_key ? key_view(l->cfg, rec, l->now) : team_view(rec, l->now));
  json_decref(rec);
  return 0;
}

/* the hash entries of a key record go with it */
static void drop_hashes(const json_t *rec) {
  const char *h = jstr(rec, "hash"), *old = jstr(rec, "old_hash");
  if (h) kv_del(PX_STORE_KEYHASH, h, strlen(h));
  if (old) kv_del(PX_STORE_KEYHASH, old, strlen(old));
}

static int set_secret(json_t *rec, const char *name, char secret[39], px_buf_t *out) {
  char hex[65];
  if (new_secret(secret) < 0) return error(out, 500, "api_error", "no random bytes");
  hash_hex(secret, 38, hex);
  if (kv_put(PX_STORE_KEYHASH, hex, 64, name, strlen(name), 0, PX_STORE_NEW, now_s()) < 0)
    return error(out, 500, "api_error", "the state store refused the write");
  json_object_set_new(rec, "hash", json_string(hex));
  return 0;
}

int px_keys_admin(const px_config_t *cfg, int method, const char *path, size_t plen,
                  const char *body, size_t blen, px_buf_t *out) {
  int64_t now = now_s();
  if (!px_store_on() && !redis_on())
    return error(out, 503, "api_error", "runtime keys need a state store");
  /* /admin/keys[/NAME[/rotate]] or /admin/teams[/NAME] */
  int is_key;
  const char *rest;
  if (plen >= 11 && memcmp(path, "/admin/keys", 11) == 0) {
    is_key = 1;
    rest = path + 11;
  } else if (plen >= 12 && memcmp(path, "/admin/teams", 12) == 0) {
    is_key = 0;
    rest = path + 12;
  } else {
    return error(out, 404, "not_found_error", "unknown admin path");
  }
  size_t rl = plen - (size_t)(rest - path);
  char name[NAME_MAX_LEN + 1] = "";
  int rotate = 0;
  if (rl > 0) {
    if (rest[0] != '/') return error(out, 404, "not_found_error", "unknown admin path");
    const char *n = rest + 1, *slash = memchr(n, '/', rl - 1);
    size_t nl = slash ? (size_t)(slash - n) : rl - 1;
    if (slash) {
      if (!is_key || (size_t)(path + plen - slash) != 7 ||
          memcmp(slash, "/rotate", 7) != 0)
        return error(out, 404, "not_found_error", "unknown admin path");
      rotate = 1;
    }
    if (nl == 0 || nl > NAME_MAX_LEN)
      return error(out, 404, "not_found_error", "no such %s", is_key ? "key" : "team");
    memcpy(name, n, nl);
    name[nl] = 0;
    if (!valid_name(name))
      return error(out, 404, "not_found_error", "no such %s", is_key ? "key" : "team");
  }
  px_store_db_t db = is_key ? PX_STORE_KEYS : PX_STORE_TEAMS;
  const char *what = is_key ? "key" : "team";
  json_t *in = NULL, *rec = NULL;
  int st;

  if (!name[0]) { /* the collection */
    if (method == HTTP_GET) {
      list_t l = {cfg, json_array(), is_key, now};
      for (size_t i = 0; i < (is_key ? cfg->nkeys : cfg->nteams); i++)
        json_array_append_new(l.data, is_key ? static_key_view(&cfg->keys[i], now)
                                             : static_team_view(&cfg->teams[i], now));
      if (kv_each(db, now, each_record, &l) < 0) {
        json_decref(l.data);
        return error(out, 503, "api_error", "the state backend cannot be read");
      }
      json_t *o = json_object();
      json_object_set_new(o, "data", l.data);
      return answer(out, 200, o);
    }
    if (method != HTTP_POST)
      return error(out, 405, "invalid_request_error", "method not allowed");
    if ((st = parse_body(body, blen, &in, out)) != 0) return st;
    rec = json_object();
    if ((st = apply(cfg, rec, in, is_key, 1, out, now)) != 0) goto done;
    const char *nm = jstr(rec, "name");
    if (is_key ? static_key(cfg, nm) : px_config_team(cfg, nm) != NULL) {
      st = error(out, 409, "invalid_request_error",
                 "the name '%s' is taken by a static %s ([%s %s] in the configuration)",
                 nm, what, what, nm);
      goto done;
    }
    if (!json_object_get(rec, "budget"))
      json_object_set_new(rec, "budget", json_integer(0));
    if (!json_object_get(rec, "budget_window"))
      json_object_set_new(rec, "budget_window", json_string("month"));
    json_object_set_new(rec, "created_at", json_integer(now));
    char secret[39] = "";
    if (is_key) {
      static const char *const dflt[] = {"rpm", "tpm", "expires_at"};
      for (int i = 0; i < 3; i++)
        if (!json_object_get(rec, dflt[i]))
          json_object_set_new(rec, dflt[i], json_integer(0));
      if (!json_object_get(rec, "models"))
        json_object_set_new(rec, "models", json_array());
      if (!json_object_get(rec, "team")) json_object_set_new(rec, "team", json_null());
      json_t *old = load(db, nm, now);
      json_decref(old);
      if (old) {
        st = error(out, 409, "invalid_request_error", "a key named '%s' exists", nm);
        goto done;
      }
      if ((st = set_secret(rec, nm, secret, out)) != 0) goto done;
    }
    int rc = save(db, nm, rec, PX_STORE_NEW);
    if (rc == PX_STORE_EEXIST) {
      if (is_key) kv_del(PX_STORE_KEYHASH, jstr(rec, "hash"), 64);
      st = error(out, 409, "invalid_request_error", "a %s named '%s' exists", what, nm);
      goto done;
    }
    if (rc < 0) {
      if (is_key) kv_del(PX_STORE_KEYHASH, jstr(rec, "hash"), 64);
      st = error(out, 500, "api_error", "the state store refused the write");
      goto done;
    }
    json_t *view = is_key ? key_view(cfg, rec, now) : team_view(rec, now);
    if (is_key) json_object_set_new(view, "secret", json_string(secret));
    st = answer(out, 201, view);
    goto done;
  }

  const px_team_conf_t *st_team = is_key ? NULL : px_config_team(cfg, name);
  const px_key_conf_t *st_key = NULL;
  for (size_t i = 0; is_key && i < cfg->nkeys; i++)
    if (strcmp(cfg->keys[i].name, name) == 0) st_key = &cfg->keys[i];
  if (st_key || st_team) {
    if (method == HTTP_GET && !rotate)
      return answer(
          out, 200,
          st_key ? static_key_view(st_key, now) : static_team_view(st_team, now));
    return error(out, 409, "invalid_request_error",
                 "'%s' is a static %s: change it in the configuration ([%s %s])", name,
                 what, what, name);
  }
  rec = load(db, name, now);
  if (!rec) {
    st = error(out, 404, "not_found_error", "no %s named '%s'", what, name);
    goto done;
  }
  if (rotate) {
    if (method != HTTP_POST) {
      st = error(out, 405, "invalid_request_error", "method not allowed");
      goto done;
    }
    if ((st = parse_body(body, blen, &in, out)) != 0) goto done;
    uint64_t grace = 0;
    const char *k;
    json_t *v;
    json_object_foreach(in, k, v) {
      if (strcmp(k, "grace") != 0) {
        st = BAD(out, "unknown field '%.64s'", k);
        goto done;
      }
    }
    v = json_object_get(in, "grace");
    if (v &&
        (!json_is_string(v) || px_parse_duration_ms(json_string_value(v), &grace) < 0 ||
         grace > GRACE_MAX_MS)) {
      st = BAD(out, "'grace' must be a duration such as \"10m\" (at most 30 days)");
      goto done;
    }
    const char *cur = jstr(rec, "hash"), *old = jstr(rec, "old_hash");
    if (old) kv_del(PX_STORE_KEYHASH, old, strlen(old));
    char keep[65] = "";
    if (cur) snprintf(keep, sizeof(keep), "%s", cur);
    int64_t until = now + (int64_t)((grace + 999) / 1000);
    if (keep[0]) {
      kv_del(PX_STORE_KEYHASH, keep, 64);
      if (grace) kv_put(PX_STORE_KEYHASH, keep, 64, name, strlen(name), until, 0, now);
    }
    char secret[39];
    if ((st = set_secret(rec, name, secret, out)) != 0) goto done;
    json_object_set_new(rec, "old_hash",
                        grace && keep[0] ? json_string(keep) : json_null());
    json_object_set_new(rec, "old_until", json_integer(grace ? until : 0));
    if (save(db, name, rec, 0) < 0) {
      st = error(out, 500, "api_error", "the state store refused the write");
      goto done;
    }
    json_t *view = key_view(cfg, rec, now);
    json_object_set_new(view, "secret", json_string(secret));
    st = answer(out, 200, view);
    goto done;
  }
  if (method == HTTP_GET) {
    st = answer(out, 200, is_key ? key_view(cfg, rec, now) : team_view(rec, now));
  } else if (method == HTTP_PATCH) {
    if ((st = parse_body(body, blen, &in, out)) != 0) goto done;
    json_t *next = json_deep_copy(rec);
    st = apply(cfg, next, in, is_key, 0, out, now);
    if (st == 0) {
      if (save(db, name, next, 0) < 0)
        st = error(out, 500, "api_error", "the state store refused the write");
      else
        st = answer(out, 200, is_key ? key_view(cfg, next, now) : team_view(next, now));
    }
    json_decref(next);
  } else if (method == HTTP_DELETE) {
    if (is_key) drop_hashes(rec);
    kv_del(db, name, strlen(name));
    out->len = 0;
    st = 204;
  } else {
    st = error(out, 405, "invalid_request_error", "method not allowed");
  }
done:
  json_decref(in);
  json_decref(rec);
  return st;
}
