/*
 * config.c - proxai.conf -> immutable px_config_t (SPEC sections 2, 3).
 *
 * inih splits lines into key/value pairs and strips comments. Two things it
 * cannot tell us are handled by our own line reader: the line number of the
 * pair being handled (this build of inih has no INI_HANDLER_LINENO) and
 * section headers themselves (inih only reports sections through the keys in
 * them, and truncates names at 50 bytes). The reader counts lines and opens
 * sections as it hands them to inih; the handler looks each key up in the
 * directive table below. References between sections (route -> upstream)
 * are resolved once the whole file is read, since an upstream may be defined
 * after the routes that use it.
 */
#include "proxai/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "proxai/scrub.h"

#define PX_CONF_MAX_FILE (1u << 20) /* bytes of configuration text */
#define PX_CONF_MAX_LINE 16384      /* bytes per line */
#define PX_CONF_MAX_LIST 1024       /* headers, fallbacks or models per section */

#define DEFAULT_LISTEN "127.0.0.1:8080"
#define DEFAULT_ANTHROPIC_VERSION "2023-06-01"

typedef enum sec_kind {
  SEC_NONE,
  SEC_BAD,
  SEC_SERVER,
  SEC_UPSTREAM,
  SEC_ROUTE,
  SEC_KEY,
  SEC_STATE,
  SEC_TEAM,
  SEC_PRICE,
  SEC_ADMIN,
  SEC_TRACE,
  SEC_RESPONSES
} sec_kind_t;

static const char *const sec_names[] = {"",      "",      "server", "upstream",
                                        "route", "key",   "state",  "team",
                                        "price", "admin", "trace",  "responses"};

/* `NAME[/MODEL]` as written, resolved to a px_target_t after parsing. */
typedef struct target_ref {
  char *name;
  char *model; /* NULL when none was given */
  int line;
} target_ref_t;

/* Route references by name, resolved after parsing. */
typedef struct route_refs {
  target_ref_t *deps; /* `upstream = A, B/model` */
  size_t ndeps;
  target_ref_t *fallback;
  size_t nfallback;
} route_refs_t;

typedef struct parse parse_t;
typedef struct directive directive_t;

/* A setter takes ownership of v (heap string, env already expanded). Returns
 * 1 on success, 0 after recording an error. */
typedef int (*set_fn)(parse_t *p, const directive_t *d, void *obj, char *v);

enum { D_REPEATABLE = 1, D_REQUIRED = 2 };

struct directive {
  sec_kind_t sec;
  const char *name;
  set_fn set;
  size_t off;
  uint64_t min, max; /* for integers */
  int flags;
};

#define NDIRECTIVES 128

struct parse {
  px_config_t *c;
  const char *name; /* for messages */
  /* reader */
  const char *text;
  size_t len, pos;
  int line;
  bool at_line_start;
  /* error: the first one wins */
  char *err;
  size_t errlen;
  bool failed;
  /* current section */
  sec_kind_t sec;
  size_t idx;
  int sec_line;
  char *sec_title; /* "upstream openai" */
  int seen[NDIRECTIVES];
  /* section lines, for duplicate messages and post-parse checks */
  int server_line;
  int *up_line, *route_line, *key_line, *team_line, *price_line;
  int state_line, admin_line, trace_line, responses_line;
  route_refs_t *refs; /* parallel to c->routes */
};

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */

__attribute__((format(printf, 3, 4))) static int fail(parse_t *p, int line,
                                                      const char *fmt, ...) {
  if (p->failed) return 0;
  p->failed = true;
  if (p->err == NULL || p->errlen == 0) return 0;
  int n;
  if (line > 0)
    n = snprintf(p->err, p->errlen, "%s:%d: ", p->name, line);
  else
    n = snprintf(p->err, p->errlen, "%s: ", p->name);
  if (n < 0 || (size_t)n >= p->errlen) return 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return 0;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */

static bool is_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\v' || ch == '\f';
}

static char *dup_range(const char *s, size_t n) {
  char *r = malloc(n + 1);
  if (r == NULL) return NULL;
  memcpy(r, s, n);
  r[n] = '\0';
  return r;
}

/* Append one element to an array of elements of size sz. */
static int push(void **arr, size_t *n, size_t sz) {
  void *a = realloc(*arr, (*n + 1) * sz);
  if (a == NULL) return -1;
  memset((char *)a + *n * sz, 0, sz);
  *arr = a;
  (*n)++;
  return 0;
}

/* Grow a parallel array to n elements (zeroed). */
static int grow_to(void **arr, size_t n, size_t sz) {
  void *a = realloc(*arr, n * sz);
  if (a == NULL) return -1;
  memset((char *)a + (n - 1) * sz, 0, sz);
  *arr = a;
  return 0;
}

static bool valid_name(const char *s) {
  if (*s == '\0') return false;
  for (; *s; s++) {
    char ch = *s;
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
      return false;
  }
  return true;
}

static bool has_ctl(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return true;
  return false;
}

/* ------------------------------------------------------------------------ */
/* Units                                                                    */

static int parse_u64(const char *s, const char **end, uint64_t *out) {
  uint64_t v = 0;
  if (*s < '0' || *s > '9') return -1;
  for (; *s >= '0' && *s <= '9'; s++) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *end = s;
  *out = v;
  return 0;
}

int px_parse_duration_ms(const char *s, uint64_t *out) {
  const char *u;
  uint64_t v, mul;
  if (s == NULL || parse_u64(s, &u, &v) < 0) return -1;
  if (*u == '\0' || strcmp(u, "s") == 0)
    mul = 1000;
  else if (strcmp(u, "ms") == 0)
    mul = 1;
  else if (strcmp(u, "m") == 0)
    mul = 60000;
  else if (strcmp(u, "h") == 0)
    mul = 3600000;
  else if (strcmp(u, "d") == 0)
    mul = 86400000;
  else
    return -1;
  if (v > UINT64_MAX / mul) return -1;
  *out = v * mul;
  return 0;
}

int px_parse_size(const char *s, uint64_t *out) {
  const char *u;
  uint64_t v, mul;
  if (s == NULL || parse_u64(s, &u, &v) < 0) return -1;
  if (*u == '\0')
    mul = 1;
  else if (u[1] != '\0')
    return -1;
  else if (*u == 'k' || *u == 'K')
    mul = 1024;
  else if (*u == 'm' || *u == 'M')
    mul = 1024 * 1024;
  else if (*u == 'g' || *u == 'G')
    mul = 1024 * 1024 * 1024;
  else
    return -1;
  if (v > UINT64_MAX / mul) return -1;
  *out = v * mul;
  return 0;
}

static int parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"on", "true", "yes", "1"};
  static const char *const no[] = {"off", "false", "no", "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = 1;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  }
  return -1;
}

int px_glob_match(const char *pat, const char *s) {
  const char *star = NULL, *resume = NULL;
  while (*s) {
    if (*pat == '*') {
      star = pat++;
      resume = s;
    } else if (*pat == '?' || *pat == *s) {
      pat++;
      s++;
    } else if (star != NULL) {
      pat = star + 1;
      s = ++resume;
    } else {
      return 0;
    }
  }
  while (*pat == '*') pat++;
  return *pat == '\0';
}

/* ------------------------------------------------------------------------ */
/* Validation of values                                                     */

static bool valid_port(const char *s) {
  uint64_t v;
  const char *end;
  if (parse_u64(s, &end, &v) < 0 || *end != '\0' || end - s > 5) return false;
  return v <= 65535;
}

static bool valid_listen(const char *s) {
  if (strncmp(s, "unix:", 5) == 0) {
    size_t n = strlen(s + 5);
    return s[5] == '/' && n < 108; /* sizeof(sockaddr_un.sun_path) */
  }
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    char v6[64];
    if (close == NULL || close[1] != ':' || (size_t)(close - s - 1) >= sizeof v6)
      return false;
    memcpy(v6, s + 1, (size_t)(close - s - 1));
    v6[close - s - 1] = '\0';
    struct in6_addr a6;
    return inet_pton(AF_INET6, v6, &a6) == 1 && valid_port(close + 2);
  }
  const char *colon = strrchr(s, ':');
  if (colon == NULL || colon == s) return false;
  for (const char *h = s; h < colon; h++) {
    char ch = *h;
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
      return false;
  }
  return valid_port(colon + 1);
}

/* Checks an http(s) URL and strips trailing slashes in place. */
static bool norm_base_url(char *s) {
  size_t pre;
  if (strncasecmp(s, "http://", 7) == 0)
    pre = 7;
  else if (strncasecmp(s, "https://", 8) == 0)
    pre = 8;
  else
    return false;
  size_t n = strlen(s);
  while (n > pre && s[n - 1] == '/') s[--n] = '\0';
  if (n == pre || s[pre] == '/') return false;
  for (const char *q = s; *q; q++)
    if (*q == ' ' || *q == '\t') return false;
  return true;
}

static bool is_tchar(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') ||
         (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* ------------------------------------------------------------------------ */
/* Setters                                                                  */

#define FIELD(obj, d, type) ((type *)((char *)(obj) + (d)->off))

static int need_value(parse_t *p, const directive_t *d, char *v) {
  if (*v != '\0') return 1;
  free(v);
  return fail(p, p->line, "empty value for '%s' in [%s]", d->name, p->sec_title);
}

static int set_str(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  char **f = FIELD(obj, d, char *);
  free(*f);
  *f = v;
  return 1;
}

/* Empty means "no key". */
static int set_opt_str(parse_t *p, const directive_t *d, void *obj, char *v) {
  (void)p;
  char **f = FIELD(obj, d, char *);
  free(*f);
  *f = NULL;
  if (*v == '\0')
    free(v);
  else
    *f = v;
  return 1;
}

static int set_listen(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!valid_listen(v)) {
    fail(p, p->line,
         "invalid listen address '%s' (expected host:port, [v6]:port or unix:/path)", v);
    free(v);
    return 0;
  }
  return set_str(p, d, obj, v);
}

static int set_base_url(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!norm_base_url(v)) {
    fail(p, p->line, "invalid base_url '%s': must start with http:// or https://", v);
    free(v);
    return 0;
  }
  return set_str(p, d, obj, v);
}

static int set_proto(parse_t *p, const directive_t *d, void *obj, char *v) {
  int pr = px_proto_by_name(v);
  if (pr < 0) {
    char names[256] = "";
    size_t n = 0;
#define XX(e, name, inpath, uppath, sym)                                            \
  n += (size_t)snprintf(names + n, n < sizeof names ? sizeof names - n : 0, "%s%s", \
                        n ? ", " : "", name);
    PX_PROTO_MAP(XX)
#undef XX
    fail(p, p->line, "unknown protocol '%s' (expected one of: %s)", v, names);
    free(v);
    return 0;
  }
  *FIELD(obj, d, px_proto_t) = (px_proto_t)pr;
  free(v);
  return 1;
}

static int set_duration(parse_t *p, const directive_t *d, void *obj, char *v) {
  uint64_t ms;
  if (px_parse_duration_ms(v, &ms) < 0) {
    fail(p, p->line, "invalid duration '%s' for '%s' (examples: 150ms, 5s, 2m)", v,
         d->name);
    free(v);
    return 0;
  }
  *FIELD(obj, d, uint64_t) = ms;
  free(v);
  return 1;
}

static int set_size(parse_t *p, const directive_t *d, void *obj, char *v) {
  uint64_t n;
  if (px_parse_size(v, &n) < 0 || n < d->min) {
    fail(p, p->line, "invalid size '%s' for '%s' (examples: 1000, 64k, 16m, 1g)", v,
         d->name);
    free(v);
    return 0;
  }
  *FIELD(obj, d, uint64_t) = n;
  free(v);
  return 1;
}

static int get_int(parse_t *p, const directive_t *d, char *v, uint64_t *out) {
  const char *end;
  uint64_t n;
  if (parse_u64(v, &end, &n) < 0 || *end != '\0' || n < d->min || n > d->max) {
    fail(p, p->line,
         "invalid value '%s' for '%s' (expected an integer from %llu to %llu)", v,
         d->name, (unsigned long long)d->min, (unsigned long long)d->max);
    free(v);
    return 0;
  }
  free(v);
  *out = n;
  return 1;
}

static int set_uint(parse_t *p, const directive_t *d, void *obj, char *v) {
  uint64_t n;
  if (!get_int(p, d, v, &n)) return 0;
  *FIELD(obj, d, unsigned) = (unsigned)n;
  return 1;
}

static int set_u64(parse_t *p, const directive_t *d, void *obj, char *v) {
  uint64_t n;
  if (!get_int(p, d, v, &n)) return 0;
  *FIELD(obj, d, uint64_t) = n;
  return 1;
}

static int set_i64(parse_t *p, const directive_t *d, void *obj, char *v) {
  uint64_t n;
  if (!get_int(p, d, v, &n)) return 0;
  *FIELD(obj, d, int64_t) = (int64_t)n;
  return 1;
}

static int set_bool(parse_t *p, const directive_t *d, void *obj, char *v) {
  int b;
  if (parse_bool(v, &b) < 0) {
    fail(p, p->line, "invalid boolean '%s' for '%s' (on/off, true/false, yes/no, 1/0)", v,
         d->name);
    free(v);
    return 0;
  }
  *FIELD(obj, d, int) = b;
  free(v);
  return 1;
}

/* `client = curl | builtin`: the upstream lane (include/proxai/upstream.h,
 * px_xfer_client_t: 0 auto, 1 curl, 2 builtin). */
static int set_client(parse_t *p, const directive_t *d, void *obj, char *v) {
  int k = strcmp(v, "auto") == 0 ? 0 : strcmp(v, "curl") == 0 ? 1
                                   : strcmp(v, "builtin") == 0 ? 2 : -1;
  if (k < 0) {
    fail(p, p->line, "invalid client '%s' (curl, builtin or auto)", v);
    free(v);
    return 0;
  }
  *FIELD(obj, d, int) = k;
  free(v);
  return 1;
}

static int set_log_level(parse_t *p, const directive_t *d, void *obj, char *v) {
  static const char *const lv[] = {"error", "warn", "info", "debug"};
  for (size_t i = 0; i < 4; i++) {
    if (strcmp(v, lv[i]) == 0) {
      *FIELD(obj, d, px_log_level_t) = (px_log_level_t)i;
      free(v);
      return 1;
    }
  }
  fail(p, p->line, "invalid log_level '%s' (error, warn, info or debug)", v);
  free(v);
  return 0;
}

static int set_log_format(parse_t *p, const directive_t *d, void *obj, char *v) {
  px_log_format_t f;
  if (strcmp(v, "text") == 0)
    f = PX_LOG_TEXT;
  else if (strcmp(v, "json") == 0)
    f = PX_LOG_JSON;
  else {
    fail(p, p->line, "invalid log_format '%s' (text or json)", v);
    free(v);
    return 0;
  }
  *FIELD(obj, d, px_log_format_t) = f;
  free(v);
  return 1;
}

/* A `header = Name: value` line appended to (*list, *n), normalized to
 * "Name: value". */
static int add_header_line(parse_t *p, char ***list, size_t *count, char *v) {
  const char *colon = strchr(v, ':');
  size_t nlen = colon ? (size_t)(colon - v) : 0;
  while (nlen > 0 && is_space(v[nlen - 1])) nlen--;
  bool ok = colon != NULL && nlen > 0;
  for (size_t i = 0; ok && i < nlen; i++) ok = is_tchar(v[i]);
  const char *val = colon ? colon + 1 : v;
  while (is_space(*val)) val++;
  if (!ok || *val == '\0') {
    fail(p, p->line, "invalid header '%s' (expected 'Name: value')", v);
    free(v);
    return 0;
  }
  if ((nlen == 14 && strncasecmp(v, "content-length", 14) == 0) ||
      (nlen == 17 && strncasecmp(v, "transfer-encoding", 17) == 0) ||
      (nlen == 10 && strncasecmp(v, "connection", 10) == 0)) {
    fail(p, p->line, "header '%.*s' is managed by proxai and cannot be set", (int)nlen,
         v);
    free(v);
    return 0;
  }
  if (*count >= PX_CONF_MAX_LIST) {
    free(v);
    return fail(p, p->line, "too many headers in [%s]", p->sec_title);
  }
  char *line = malloc(nlen + 2 + strlen(val) + 1);
  if (line == NULL || push((void **)list, count, sizeof(char *)) < 0) {
    free(line);
    free(v);
    return fail(p, p->line, "out of memory");
  }
  sprintf(line, "%.*s: %s", (int)nlen, v, val);
  (*list)[*count - 1] = line;
  free(v);
  return 1;
}

static int set_header(parse_t *p, const directive_t *d, void *obj, char *v) {
  (void)d;
  px_upstream_conf_t *u = obj;
  return add_header_line(p, &u->headers, &u->nheaders, v);
}

static int set_trace_header(parse_t *p, const directive_t *d, void *obj, char *v) {
  (void)d;
  px_trace_conf_t *t = obj;
  return add_header_line(p, &t->headers, &t->nheaders, v);
}

/* The collector's URL: http(s), kept as written (the exact URL spans go to). */
static int set_trace_endpoint(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  int ok = (strncasecmp(v, "http://", 7) == 0 && v[7] && v[7] != '/') ||
           (strncasecmp(v, "https://", 8) == 0 && v[8] && v[8] != '/');
  for (const char *q = v; ok && *q; q++) ok = *q != ' ' && *q != '\t';
  if (!ok) {
    fail(p, p->line, "invalid endpoint '%s': must be an http:// or https:// URL", v);
    free(v);
    return 0;
  }
  px_trace_conf_t *t = obj;
  free(t->endpoint);
  t->endpoint = v;
  return 1;
}

/* A ratio from 0 to 1. */
static int set_ratio(parse_t *p, const directive_t *d, void *obj, char *v) {
  char *end;
  double r = strtod(v, &end);
  int ok = *v && *end == 0 && r >= 0 && r <= 1; /* NaN fails both */
  if (!ok)
    fail(p, p->line, "invalid value '%s' for '%s' (expected a number from 0 to 1)", v,
         d->name);
  free(v);
  if (ok) *FIELD(obj, d, double) = r;
  return ok;
}

/* Appends `NAME[/MODEL]` (s, n: trimmed, not empty) to *refs. The name is an
 * upstream section name (which has no '/'); the model is the rest. */
static int add_target_ref(parse_t *p, const char *what, const char *s, size_t n,
                          target_ref_t **refs, size_t *nrefs) {
  const char *slash = memchr(s, '/', n);
  size_t nlen = slash ? (size_t)(slash - s) : n;
  size_t mlen = slash ? n - nlen - 1 : 0;
  if (nlen == 0 || (slash != NULL && mlen == 0))
    return fail(p, p->line, "invalid %s '%.*s' in [%s] (expected NAME or NAME/MODEL)",
                what, (int)n, s, p->sec_title);
  for (size_t i = 0; i < n; i++)
    if (is_space(s[i]))
      return fail(p, p->line, "invalid %s '%.*s' in [%s] (no spaces)", what, (int)n, s,
                  p->sec_title);
  if (*nrefs >= PX_CONF_MAX_LIST)
    return fail(p, p->line, "too many entries for '%s' in [%s]", what, p->sec_title);
  char *name = dup_range(s, nlen);
  char *model = slash ? dup_range(slash + 1, mlen) : NULL;
  if (name == NULL || (slash && model == NULL) ||
      push((void **)refs, nrefs, sizeof **refs) < 0) {
    free(name);
    free(model);
    return fail(p, p->line, "out of memory");
  }
  (*refs)[*nrefs - 1] = (target_ref_t){name, model, p->line};
  return 1;
}

/* Calls each(p, entry, len, arg) for every entry of a comma-separated list
 * (trimmed); an empty entry is an error. Frees v. */
static int each_in_list(parse_t *p, const char *what, char *v,
                        int (*each)(parse_t *, const char *, size_t, void *), void *arg) {
  int ok = 1;
  for (const char *s = v; ok;) {
    const char *comma = strchr(s, ',');
    const char *e = comma ? comma : s + strlen(s);
    while (s < e && is_space(*s)) s++;
    while (e > s && is_space(e[-1])) e--;
    if (e == s) {
      ok = fail(p, p->line, "empty entry in %s list '%s'", what, v);
      break;
    }
    ok = each(p, s, (size_t)(e - s), arg);
    if (comma == NULL) break;
    s = comma + 1;
  }
  free(v);
  return ok;
}

static int each_deployment(parse_t *p, const char *s, size_t n, void *arg) {
  route_refs_t *r = arg;
  return add_target_ref(p, "upstream", s, n, &r->deps, &r->ndeps);
}

static int set_route_upstream(parse_t *p, const directive_t *d, void *obj, char *v) {
  (void)obj;
  if (!need_value(p, d, v)) return 0;
  return each_in_list(p, "upstream", v, each_deployment, &p->refs[p->idx]);
}

static int set_fallback(parse_t *p, const directive_t *d, void *obj, char *v) {
  (void)obj;
  if (!need_value(p, d, v)) return 0;
  route_refs_t *r = &p->refs[p->idx];
  int ok = add_target_ref(p, "fallback", v, strlen(v), &r->fallback, &r->nfallback);
  free(v);
  return ok;
}

static int set_balance(parse_t *p, const directive_t *d, void *obj, char *v) {
  static const px_balance_t all[] = {PX_BALANCE_LEAST_BUSY, PX_BALANCE_ROUND_ROBIN,
                                     PX_BALANCE_WEIGHTED};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (strcmp(v, px_balance_name(all[i])) == 0) {
      *FIELD(obj, d, px_balance_t) = all[i];
      free(v);
      return 1;
    }
  }
  fail(p, p->line, "invalid balance '%s' (least_busy, round_robin or weighted)", v);
  free(v);
  return 0;
}

typedef struct name_list {
  char ***v;
  size_t *n;
  const char *route; /* route pattern every name must match; NULL for keys */
} name_list_t;

static int each_name(parse_t *p, const char *s, size_t n, void *arg) {
  name_list_t *l = arg;
  if (*l->n >= PX_CONF_MAX_LIST)
    return fail(p, p->line, "too many models in [%s]", p->sec_title);
  char *m = dup_range(s, n);
  if (m == NULL) return fail(p, p->line, "out of memory");
  if (l->route != NULL) {
    const char *why = NULL;
    if (strpbrk(m, "*? \t") != NULL)
      why = "is not a concrete model name";
    else if (!px_glob_match(l->route, m))
      why = "does not match the route's pattern";
    if (why != NULL) {
      fail(p, p->line, "model '%s' in [%s] %s", m, p->sec_title, why);
      free(m);
      return 0;
    }
  }
  if (push((void **)l->v, l->n, sizeof(char *)) < 0) {
    free(m);
    return fail(p, p->line, "out of memory");
  }
  (*l->v)[*l->n - 1] = m;
  return 1;
}

/* "a, b, c" appended to (*list, *n); takes v. */
static int split_list(parse_t *p, const directive_t *d, char ***list, size_t *n, char *v);

static int set_models(parse_t *p, const directive_t *d, void *obj, char *v) {
  px_key_conf_t *k = obj;
  return split_list(p, d, &k->models, &k->nmodels, v);
}

static int set_mode(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  char *end;
  unsigned long m = strtoul(v, &end, 8);
  int ok = *v && *end == 0 && m <= 0777;
  free(v);
  if (!ok) return fail(p, p->line, "'%s' must be an octal mode like 0660", d->name);
  *(unsigned *)((char *)obj + d->off) = (unsigned)m;
  return 1;
}

static int set_opt_listen(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  if (!valid_listen(v)) {
    fail(p, p->line, "invalid %s address '%s'", d->name, v);
    free(v);
    return 0;
  }
  char **slot = (char **)((char *)obj + d->off);
  free(*slot);
  *slot = v;
  return 1;
}

static int set_backend(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  int ok = 1;
  px_state_conf_t *st = obj;
  if (strcmp(v, "local") == 0) st->backend = PX_STATE_LOCAL;
  else if (strcmp(v, "redis") == 0) st->backend = PX_STATE_REDIS;
  else ok = fail(p, p->line, "backend must be local or redis, not '%s'", v);
  free(v);
  return ok;
}

static int set_on_error(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  int ok = 1;
  px_state_conf_t *st = obj;
  if (strcmp(v, "allow") == 0)
    st->on_error = PX_ON_ERROR_ALLOW;
  else if (strcmp(v, "deny") == 0)
    st->on_error = PX_ON_ERROR_DENY;
  else if (strcmp(v, "local") == 0)
    st->on_error = PX_ON_ERROR_LOCAL;
  else
    ok = fail(p, p->line, "on_error must be allow, deny or local, not '%s'", v);
  free(v);
  return ok;
}

static int set_redis(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  if (strncmp(v, "redis://", 8) != 0 && strncmp(v, "unix:/", 6) != 0) {
    fail(p, p->line, "redis must be redis://host:port[/db] or unix:/path");
    free(v);
    return 0;
  }
  px_state_conf_t *st = obj;
  free(st->redis);
  st->redis = v;
  return 1;
}

/* budget / price amounts: decimal USD, d->max the largest accepted */
static int set_usd(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  int64_t n;
  int ok = 1;
  if (px_parse_usd(v, (int64_t)d->max, &n) < 0)
    ok = fail(
        p, p->line,
        "%s must be an amount in USD from 0 to %llu with at most 9 decimals, not '%s'",
        d->name, (unsigned long long)d->max, v);
  else
    *(int64_t *)((char *)obj + d->off) = n;
  free(v);
  return ok;
}

static int set_window(parse_t *p, const directive_t *d, void *obj, char *v) {
  if (!need_value(p, d, v)) return 0;
  int ok = 1;
  if (px_window_parse(v, (px_window_t *)((char *)obj + d->off)) < 0)
    ok = fail(p, p->line, "budget_window must be day, month or total, not '%s'", v);
  free(v);
  return ok;
}

static int split_list(parse_t *p, const directive_t *d, char ***list, size_t *count, char *v) {
  if (!need_value(p, d, v)) return 0;
  name_list_t l = {list, count, NULL};
  return each_in_list(p, "models", v, each_name, &l);
}

/* Glob routes: the concrete names /v1/models lists. */
static int set_route_models(parse_t *p, const directive_t *d, void *obj, char *v) {
  px_route_conf_t *r = obj;
  if (!need_value(p, d, v)) return 0;
  name_list_t l = {&r->models, &r->nmodels, r->pattern};
  return each_in_list(p, "models", v, each_name, &l);
}

#define SRV(f) offsetof(px_server_conf_t, f)
#define UP(f) offsetof(px_upstream_conf_t, f)
#define RT(f) offsetof(px_route_conf_t, f)
#define KEY(f) offsetof(px_key_conf_t, f)
#define ST(f) offsetof(px_state_conf_t, f)
#define RS(f) offsetof(px_responses_conf_t, f)
#define TEAM(f) offsetof(px_team_conf_t, f)
#define PRICE(f) offsetof(px_price_conf_t, f)
#define TR(f) offsetof(px_trace_conf_t, f)
#define U32MAX 4294967295ull

static const directive_t directives[] = {
    {SEC_SERVER, "listen", set_listen, SRV(listen), 0, 0, 0},
    {SEC_SERVER, "workers", set_uint, SRV(workers), 0, 1024, 0},
    {SEC_SERVER, "max_connections", set_uint, SRV(max_connections), 1, 1000000, 0},
    {SEC_SERVER, "max_body", set_size, SRV(max_body), 1, 0, 0},
    {SEC_SERVER, "translate_memory", set_uint, SRV(translate_memory), 0, 1000, 0},
    {SEC_SERVER, "translate_memory_base", set_size, SRV(translate_memory_base), 0, 0, 0},
    {SEC_SERVER, "max_header", set_size, SRV(max_header), 1024, 0, 0},
    {SEC_SERVER, "header_timeout", set_duration, SRV(header_timeout_ms), 0, 0, 0},
    {SEC_SERVER, "idle_timeout", set_duration, SRV(idle_timeout_ms), 0, 0, 0},
    {SEC_SERVER, "shutdown_timeout", set_duration, SRV(shutdown_timeout_ms), 0, 0, 0},
    {SEC_SERVER, "access_log", set_str, SRV(access_log), 0, 0, 0},
    {SEC_SERVER, "log_level", set_log_level, SRV(log_level), 0, 0, 0},
    {SEC_SERVER, "log_format", set_log_format, SRV(log_format), 0, 0, 0},
    {SEC_SERVER, "admin_listen", set_opt_listen, SRV(admin_listen), 0, 0, 0},
    {SEC_SERVER, "socket_mode", set_mode, SRV(socket_mode), 0, 0, 0},

    {SEC_UPSTREAM, "protocol", set_proto, UP(protocol), 0, 0, D_REQUIRED},
    {SEC_UPSTREAM, "base_url", set_base_url, UP(base_url), 0, 0, D_REQUIRED},
    {SEC_UPSTREAM, "api_key", set_opt_str, UP(api_key), 0, 0, 0},
    {SEC_UPSTREAM, "header", set_header, 0, 0, 0, D_REPEATABLE},
    {SEC_UPSTREAM, "anthropic_version", set_str, UP(anthropic_version), 0, 0, 0},
    {SEC_UPSTREAM, "connect_timeout", set_duration, UP(connect_timeout_ms), 0, 0, 0},
    {SEC_UPSTREAM, "first_byte_timeout", set_duration, UP(first_byte_timeout_ms), 0, 0,
     0},
    {SEC_UPSTREAM, "idle_timeout", set_duration, UP(idle_timeout_ms), 0, 0, 0},
    {SEC_UPSTREAM, "max_connections", set_uint, UP(max_connections), 1, 1000000, 0},
    {SEC_UPSTREAM, "retries", set_uint, UP(retries), 0, 100, 0},
    {SEC_UPSTREAM, "http2", set_bool, UP(http2), 0, 0, 0},
    {SEC_UPSTREAM, "ca_file", set_opt_str, UP(ca_file), 0, 0, 0},
    {SEC_UPSTREAM, "tls_verify", set_bool, UP(tls_verify), 0, 0, 0},
    {SEC_UPSTREAM, "retry_after_max", set_duration, UP(retry_after_max_ms), 0, 0, 0},
    {SEC_UPSTREAM, "eject_after", set_uint, UP(eject_after), 0, 1000000, 0},
    {SEC_UPSTREAM, "eject_for", set_duration, UP(eject_for_ms), 0, 0, 0},
    {SEC_UPSTREAM, "weight", set_uint, UP(weight), 1, 1000000, 0},
    {SEC_UPSTREAM, "client", set_client, UP(client), 0, 0, 0},

    {SEC_ROUTE, "upstream", set_route_upstream, 0, 0, 0, D_REQUIRED},
    {SEC_ROUTE, "model", set_str, RT(model), 0, 0, 0},
    {SEC_ROUTE, "balance", set_balance, RT(balance), 0, 0, 0},
    {SEC_ROUTE, "fallback", set_fallback, 0, 0, 0, D_REPEATABLE},
    {SEC_ROUTE, "max_tokens", set_i64, RT(max_tokens), 1, U32MAX, 0},
    {SEC_ROUTE, "models", set_route_models, 0, 0, 0, 0},

    {SEC_KEY, "secret", set_str, KEY(secret), 0, 0, D_REQUIRED},
    {SEC_KEY, "models", set_models, 0, 0, 0, 0},
    {SEC_KEY, "rpm", set_u64, KEY(rpm), 0, U32MAX, 0},
    {SEC_KEY, "tpm", set_u64, KEY(tpm), 0, UINT64_MAX / 2, 0},
    {SEC_KEY, "team", set_str, KEY(team_name), 0, 0, 0},
    {SEC_KEY, "budget", set_usd, KEY(budget), 0, PX_BUDGET_MAX_USD, 0},
    {SEC_KEY, "budget_window", set_window, KEY(window), 0, 0, 0},

    {SEC_TEAM, "budget", set_usd, TEAM(budget), 0, PX_BUDGET_MAX_USD, 0},
    {SEC_TEAM, "budget_window", set_window, TEAM(window), 0, 0, 0},

    {SEC_PRICE, "input", set_usd, PRICE(input), 0, PX_PRICE_MAX_USD, D_REQUIRED},
    {SEC_PRICE, "output", set_usd, PRICE(output), 0, PX_PRICE_MAX_USD, D_REQUIRED},
    {SEC_PRICE, "cache_read", set_usd, PRICE(cache_read), 0, PX_PRICE_MAX_USD, 0},
    {SEC_PRICE, "cache_write", set_usd, PRICE(cache_write), 0, PX_PRICE_MAX_USD, 0},

    {SEC_ADMIN, "token", set_str, offsetof(px_config_t, admin_token), 0, 0, D_REQUIRED},

    {SEC_STATE, "backend", set_backend, 0, 0, 0, 0},
    {SEC_STATE, "redis", set_redis, 0, 0, 0, 0},
    {SEC_STATE, "prefix", set_str, ST(prefix), 0, 0, 0},
    {SEC_STATE, "on_error", set_on_error, 0, 0, 0, 0},
    {SEC_STATE, "timeout", set_duration, ST(timeout_ms), 0, 0, 0},
    {SEC_STATE, "dir", set_opt_str, ST(dir), 0, 0, 0},

    {SEC_TRACE, "endpoint", set_trace_endpoint, 0, 0, 0, D_REQUIRED},
    {SEC_TRACE, "sample", set_ratio, TR(sample), 0, 0, 0},
    {SEC_TRACE, "header", set_trace_header, 0, 0, 0, D_REPEATABLE},

    {SEC_RESPONSES, "store", set_bool, RS(store), 0, 0, 0},
    {SEC_RESPONSES, "ttl", set_duration, RS(ttl_ms), 0, 0, 0},
    {SEC_RESPONSES, "max_size", set_size, RS(max_size), 1, 0, 0},
    {SEC_RESPONSES, "timeout", set_duration, RS(timeout_ms), 0, 0, 0},
};
#define NDIR (sizeof directives / sizeof directives[0])
_Static_assert(NDIR <= NDIRECTIVES, "seen[] too small");

/* ------------------------------------------------------------------------ */
/* Construction and destruction                                             */

static void free_strv(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

static void config_free(px_config_t *c) {
  if (c == NULL) return;
  free(c->path);
  free(c->server.listen);
  free(c->server.access_log);
  free(c->server.admin_listen);
  free(c->state.redis);
  free(c->state.prefix);
  free(c->trace.endpoint);
  free_strv(c->trace.headers, c->trace.nheaders);
  for (size_t i = 0; i < c->nupstreams; i++) {
    px_upstream_conf_t *u = &c->upstreams[i];
    free(u->name);
    free(u->base_url);
    free(u->api_key);
    free_strv(u->headers, u->nheaders);
    free(u->anthropic_version);
    free(u->ca_file);
  }
  free(c->upstreams);
  for (size_t i = 0; i < c->nroutes; i++) {
    px_route_conf_t *r = &c->routes[i];
    free(r->pattern);
    free(r->model);
    for (size_t j = 0; j < r->ndeployments; j++) free(r->deployments[j].model);
    free(r->deployments);
    for (size_t j = 0; j < r->nfallbacks; j++) free(r->fallbacks[j].model);
    free(r->fallbacks);
    free_strv(r->models, r->nmodels);
  }
  free(c->routes);
  for (size_t i = 0; i < c->nkeys; i++) {
    px_key_conf_t *k = &c->keys[i];
    free(k->name);
    free(k->secret);
    free(k->team_name);
    free_strv(k->models, k->nmodels);
  }
  free(c->keys);
  for (size_t i = 0; i < c->nteams; i++) free(c->teams[i].name);
  free(c->teams);
  for (size_t i = 0; i < c->nprices; i++) free(c->prices[i].pattern);
  free(c->prices);
  free(c->admin_token);
  free(c->state.dir);
  free(c->unconfigured_message);
  free(c);
}

static px_config_t *config_new(void) {
  px_config_t *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->refs = 1;
  px_server_conf_t *s = &c->server;
  s->listen = strdup(DEFAULT_LISTEN);
  s->workers = 1;
  s->max_connections = 10000;
  s->max_body = 16u << 20;
  s->translate_memory = PX_TR_IR_FACTOR;
  s->translate_memory_base = PX_TR_IR_BASE;
  s->max_header = 64u << 10;
  s->header_timeout_ms = 10000;
  s->idle_timeout_ms = 75000;
  s->shutdown_timeout_ms = 30000;
  s->access_log = strdup("stderr");
  s->log_level = PX_LOG_INFO;
  s->socket_mode = 0660;
  c->state.prefix = strdup("proxai:");
  c->state.timeout_ms = 250;
  c->trace.sample = 1.0;
  c->responses.store = 1;
  c->responses.ttl_ms = 30ull * 24 * 3600 * 1000;
  c->responses.max_size = 1ull << 30;
  c->responses.timeout_ms = 5000;
  if (s->listen == NULL || s->access_log == NULL || c->state.prefix == NULL) {
    config_free(c);
    return NULL;
  }
  return c;
}

/* Appends an upstream with its defaults; NULL on allocation failure. */
static px_upstream_conf_t *add_upstream(px_config_t *c, const char *name) {
  if (push((void **)&c->upstreams, &c->nupstreams, sizeof *c->upstreams) < 0) return NULL;
  px_upstream_conf_t *u = &c->upstreams[c->nupstreams - 1];
  u->protocol = (px_proto_t)0; /* the first protocol of the table */
  u->name = strdup(name);
  u->anthropic_version = strdup(DEFAULT_ANTHROPIC_VERSION);
  u->connect_timeout_ms = 5000;
  u->first_byte_timeout_ms = 120000;
  u->idle_timeout_ms = 120000;
  u->max_connections = 256;
  u->retries = 2;
  u->http2 = 0;
  u->tls_verify = 1;
  u->retry_after_max_ms = 10000;
  u->eject_after = 5;
  u->eject_for_ms = 30000;
  u->weight = 1;
  if (u->name == NULL || u->anthropic_version == NULL) return NULL;
  return u;
}

static px_route_conf_t *add_route(px_config_t *c, const char *pattern) {
  if (push((void **)&c->routes, &c->nroutes, sizeof *c->routes) < 0) return NULL;
  px_route_conf_t *r = &c->routes[c->nroutes - 1];
  r->pattern = strdup(pattern);
  return r->pattern ? r : NULL;
}

/* The embedded default's routes: one deployment each. */
static int add_deployment(px_route_conf_t *r, ssize_t u) {
  if (push((void **)&r->deployments, &r->ndeployments, sizeof *r->deployments) < 0)
    return -1;
  r->deployments[r->ndeployments - 1].upstream = (size_t)u;
  r->upstream = r->deployments[0].upstream;
  return 0;
}

static px_team_conf_t *add_team(px_config_t *c, const char *name) {
  if (push((void **)&c->teams, &c->nteams, sizeof *c->teams) < 0) return NULL;
  px_team_conf_t *t = &c->teams[c->nteams - 1];
  t->name = strdup(name);
  return t->name ? t : NULL;
}

/* cache_read / cache_write default to input (filled in by resolve) */
static px_price_conf_t *add_price(px_config_t *c, const char *pattern) {
  if (push((void **)&c->prices, &c->nprices, sizeof *c->prices) < 0) return NULL;
  px_price_conf_t *pr = &c->prices[c->nprices - 1];
  pr->pattern = strdup(pattern);
  pr->cache_read = pr->cache_write = -1;
  return pr->pattern ? pr : NULL;
}

static px_key_conf_t *add_key(px_config_t *c, const char *name) {
  if (push((void **)&c->keys, &c->nkeys, sizeof *c->keys) < 0) return NULL;
  px_key_conf_t *k = &c->keys[c->nkeys - 1];
  k->name = strdup(name);
  return k->name ? k : NULL;
}

px_config_t *px_config_ref(px_config_t *c) {
  if (c != NULL) __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
  return c;
}

void px_config_unref(px_config_t *c) {
  if (c == NULL) return;
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) config_free(c);
}

/* ------------------------------------------------------------------------ */
/* Sections                                                                 */

static ssize_t find_upstream(const px_config_t *c, const char *name) {
  for (size_t i = 0; i < c->nupstreams; i++)
    if (strcmp(c->upstreams[i].name, name) == 0) return (ssize_t)i;
  return -1;
}

/* Checks the required keys of the section being closed. */
static int end_section(parse_t *p) {
  if (p->sec == SEC_NONE || p->sec == SEC_BAD) return 1;
  for (size_t i = 0; i < NDIR; i++) {
    const directive_t *d = &directives[i];
    if (d->sec == p->sec && (d->flags & D_REQUIRED) && p->seen[i] == 0)
      return fail(p, p->sec_line, "missing '%s' in [%s]", d->name, p->sec_title);
  }
  return 1;
}

static int begin_section(parse_t *p, const char *title, size_t tlen) {
  px_config_t *c = p->c;
  if (!end_section(p)) return 0;
  p->sec = SEC_BAD;
  p->sec_line = p->line;
  memset(p->seen, 0, sizeof p->seen);

  size_t klen = 0;
  while (klen < tlen && !is_space(title[klen])) klen++;
  const char *rest = title + klen;
  size_t rlen = tlen - klen;
  while (rlen > 0 && is_space(*rest)) rest++, rlen--;

  sec_kind_t kind = SEC_BAD;
  for (int k = SEC_SERVER; k <= SEC_RESPONSES; k++)
    if (strlen(sec_names[k]) == klen && strncmp(title, sec_names[k], klen) == 0)
      kind = (sec_kind_t)k;
  if (kind == SEC_BAD)
    return fail(p, p->line,
                "unknown section [%.*s] (expected [server], [upstream NAME], "
                "[route PATTERN], [key NAME], [team NAME], [price PATTERN], [state], "
                "[admin], [trace] or [responses])",
                (int)tlen, title);

  char *arg = dup_range(rest, rlen);
  if (arg == NULL) return fail(p, p->line, "out of memory");
  free(p->sec_title);
  p->sec_title = malloc(klen + 1 + rlen + 1);
  if (p->sec_title == NULL) {
    free(arg);
    return fail(p, p->line, "out of memory");
  }
  sprintf(p->sec_title, "%s%s%s", sec_names[kind], rlen ? " " : "", arg);

  int ok = 1;
  int *lines = NULL;
  size_t n = 0;
  switch (kind) {
    case SEC_SERVER:
      if (rlen != 0) {
        ok = fail(p, p->line, "[server] takes no name");
      } else if (p->server_line != 0) {
        ok = fail(p, p->line, "duplicate section [server] (first at line %d)",
                  p->server_line);
      } else {
        p->server_line = p->line;
      }
      break;
    case SEC_STATE:
    case SEC_ADMIN:
    case SEC_TRACE:
    case SEC_RESPONSES: {
      int *at = kind == SEC_STATE   ? &p->state_line
                : kind == SEC_ADMIN ? &p->admin_line
                : kind == SEC_TRACE ? &p->trace_line
                                    : &p->responses_line;
      if (rlen != 0) {
        ok = fail(p, p->line, "[%s] takes no name", sec_names[kind]);
      } else if (*at != 0) {
        ok = fail(p, p->line, "duplicate section [%s] (first at line %d)",
                  sec_names[kind], *at);
      } else {
        *at = p->line;
      }
      break;
    }
    case SEC_TEAM:
      if (rlen == 0 || !valid_name(arg)) {
        ok =
            fail(p, p->line,
                 "[team] needs a name of letters, digits, '-', '_' and '.': [team NAME]");
        break;
      }
      for (size_t j = 0; j < c->nteams && ok; j++)
        if (strcmp(c->teams[j].name, arg) == 0)
          ok = fail(p, p->line, "duplicate section [%s] (first at line %d)", p->sec_title,
                    p->team_line[j]);
      if (!ok) break;
      if (add_team(c, arg) == NULL ||
          grow_to((void **)&p->team_line, c->nteams, sizeof(int)) < 0) {
        ok = fail(p, p->line, "out of memory");
        break;
      }
      lines = p->team_line;
      n = c->nteams;
      break;
    case SEC_PRICE:
      if (rlen == 0 || memchr(arg, ' ', rlen) || memchr(arg, '\t', rlen)) {
        ok = fail(p, p->line, "[price] needs a model name or pattern: [price PATTERN]");
        break;
      }
      for (size_t j = 0; j < c->nprices && ok; j++)
        if (strcmp(c->prices[j].pattern, arg) == 0)
          ok = fail(p, p->line, "duplicate section [%s] (first at line %d)", p->sec_title,
                    p->price_line[j]);
      if (!ok) break;
      if (add_price(c, arg) == NULL ||
          grow_to((void **)&p->price_line, c->nprices, sizeof(int)) < 0) {
        ok = fail(p, p->line, "out of memory");
        break;
      }
      lines = p->price_line;
      n = c->nprices;
      break;
    case SEC_UPSTREAM:
    case SEC_KEY:
      if (rlen == 0) {
        ok = fail(p, p->line, "[%s] needs a name: [%s NAME]", sec_names[kind],
                  sec_names[kind]);
        break;
      }
      if (!valid_name(arg)) {
        ok = fail(p, p->line, "invalid %s name '%s' (letters, digits, '-', '_' and '.')",
                  sec_names[kind], arg);
        break;
      }
      if (kind == SEC_UPSTREAM) {
        ssize_t j = find_upstream(c, arg);
        if (j >= 0) {
          ok = fail(p, p->line, "duplicate section [%s] (first at line %d)", p->sec_title,
                    p->up_line[j]);
          break;
        }
        if (add_upstream(c, arg) == NULL ||
            grow_to((void **)&p->up_line, c->nupstreams, sizeof(int)) < 0) {
          ok = fail(p, p->line, "out of memory");
          break;
        }
        lines = p->up_line;
        n = c->nupstreams;
      } else {
        for (size_t j = 0; j < c->nkeys; j++) {
          if (strcmp(c->keys[j].name, arg) == 0) {
            ok = fail(p, p->line, "duplicate section [%s] (first at line %d)",
                      p->sec_title, p->key_line[j]);
            break;
          }
        }
        if (!ok) break;
        if (add_key(c, arg) == NULL ||
            grow_to((void **)&p->key_line, c->nkeys, sizeof(int)) < 0) {
          ok = fail(p, p->line, "out of memory");
          break;
        }
        lines = p->key_line;
        n = c->nkeys;
      }
      break;
    case SEC_ROUTE:
      if (rlen == 0) {
        ok = fail(p, p->line, "[route] needs a model name or pattern: [route PATTERN]");
        break;
      }
      for (size_t j = 0; j < rlen; j++) {
        if (is_space(arg[j])) {
          ok = fail(p, p->line, "invalid route pattern '%s' (no spaces)", arg);
          break;
        }
      }
      if (!ok) break;
      for (size_t j = 0; j < c->nroutes; j++) {
        if (strcmp(c->routes[j].pattern, arg) == 0) {
          ok = fail(p, p->line, "duplicate section [%s] (first at line %d)", p->sec_title,
                    p->route_line[j]);
          break;
        }
      }
      if (!ok) break;
      if (add_route(c, arg) == NULL ||
          grow_to((void **)&p->route_line, c->nroutes, sizeof(int)) < 0 ||
          grow_to((void **)&p->refs, c->nroutes, sizeof(route_refs_t)) < 0) {
        ok = fail(p, p->line, "out of memory");
        break;
      }
      lines = p->route_line;
      n = c->nroutes;
      break;
    default:
      break;
  }
  free(arg);
  if (!ok) return 0;
  if (lines != NULL) lines[n - 1] = p->line;
  p->sec = kind;
  p->idx = n ? n - 1 : 0;
  return 1;
}

/* ------------------------------------------------------------------------ */
/* inih callbacks                                                           */

/* Expands ${NAME}; returns a heap string or NULL after recording an error. */
static char *expand_env(parse_t *p, const char *v) {
  size_t cap = strlen(v) + 1, len = 0;
  char *out = malloc(cap);
  if (out == NULL) goto oom;
  for (const char *s = v; *s;) {
    const char *piece = s;
    size_t plen = 1;
    if (s[0] == '$' && s[1] == '{') {
      const char *close = strchr(s + 2, '}');
      if (close == NULL) {
        fail(p, p->line, "unterminated '${' in value");
        goto fail;
      }
      size_t nlen = (size_t)(close - s - 2);
      char name[256];
      if (nlen == 0 || nlen >= sizeof name) {
        fail(p, p->line, "invalid environment variable reference '%.*s'",
             (int)(close - s + 1), s);
        goto fail;
      }
      memcpy(name, s + 2, nlen);
      name[nlen] = '\0';
      piece = getenv(name);
      if (piece == NULL) {
        fail(p, p->line, "environment variable '%s' is not set", name);
        goto fail;
      }
      plen = strlen(piece);
      s = close + 1;
    } else {
      s++;
    }
    if (len + plen + 1 > cap) {
      if (len + plen + 1 > PX_CONF_MAX_LINE * 4) {
        fail(p, p->line, "value too long after expanding environment variables");
        goto fail;
      }
      cap = (len + plen + 1) * 2;
      char *n = realloc(out, cap);
      if (n == NULL) goto oom;
      out = n;
    }
    memcpy(out + len, piece, plen);
    len += plen;
  }
  out[len] = '\0';
  return out;
oom:
  fail(p, p->line, "out of memory");
fail:
  free(out);
  return NULL;
}

static int on_pair(void *user, const char *section, const char *name, const char *value) {
  parse_t *p = user;
  (void)section; /* ours is complete; inih's is truncated at 50 bytes */
  if (p->failed) return 0;
  if (p->sec == SEC_NONE)
    return fail(p, p->line, "key '%s' outside of any section", name);
  if (p->sec == SEC_BAD) return 0;
  size_t i;
  for (i = 0; i < NDIR; i++)
    if (directives[i].sec == p->sec && strcmp(directives[i].name, name) == 0) break;
  if (i == NDIR) return fail(p, p->line, "unknown key '%s' in [%s]", name, p->sec_title);
  const directive_t *d = &directives[i];
  if (p->seen[i] != 0 && !(d->flags & D_REPEATABLE))
    return fail(p, p->line, "duplicate key '%s' in [%s] (first at line %d)", name,
                p->sec_title, p->seen[i]);
  if (p->seen[i] == 0) p->seen[i] = p->line;
  char *v = expand_env(p, value);
  if (v == NULL) return 0;
  if (has_ctl(v)) {
    free(v);
    return fail(p, p->line, "control character in value of '%s'", name);
  }
  void *obj = NULL;
  switch (p->sec) {
    case SEC_SERVER:
      obj = &p->c->server;
      break;
    case SEC_UPSTREAM:
      obj = &p->c->upstreams[p->idx];
      break;
    case SEC_ROUTE:
      obj = &p->c->routes[p->idx];
      break;
    case SEC_KEY:
      obj = &p->c->keys[p->idx];
      break;
    case SEC_STATE:
      obj = &p->c->state;
      break;
    case SEC_RESPONSES:
      obj = &p->c->responses;
      break;
    case SEC_TEAM:
      obj = &p->c->teams[p->idx];
      break;
    case SEC_PRICE:
      obj = &p->c->prices[p->idx];
      break;
    case SEC_ADMIN:
      obj = p->c;
      break;
    case SEC_TRACE:
      obj = &p->c->trace;
      break;
    default:
      break;
  }
  return d->set(p, d, obj, v);
}

/* fgets-like reader over the text; opens sections as their lines go by. */
static char *on_read(char *str, int num, void *stream) {
  parse_t *p = stream;
  if (p->failed || p->pos >= p->len || num < 2) return NULL;
  if (p->at_line_start) {
    const char *l = p->text + p->pos;
    const char *nl = memchr(l, '\n', p->len - p->pos);
    size_t llen = nl ? (size_t)(nl - l) : p->len - p->pos;
    p->line++;
    p->at_line_start = false;
    if (llen > PX_CONF_MAX_LINE) {
      fail(p, p->line, "line too long (more than %d bytes)", PX_CONF_MAX_LINE);
      return NULL;
    }
    if (memchr(l, '\0', llen) != NULL) {
      fail(p, p->line, "NUL byte in configuration");
      return NULL;
    }
    if (p->line == 1 && llen >= 3 && memcmp(l, "\xEF\xBB\xBF", 3) == 0) l += 3, llen -= 3;
    while (llen > 0 && is_space(*l)) l++, llen--;
    if (llen > 0 && *l == '[') {
      const char *close = memchr(l, ']', llen);
      if (close == NULL) {
        /* inih reports the syntax error; keep keys out of the last section */
        if (!end_section(p)) return NULL;
        p->sec = SEC_BAD;
      } else {
        const char *t = l + 1;
        size_t tlen = (size_t)(close - t);
        while (tlen > 0 && is_space(*t)) t++, tlen--;
        while (tlen > 0 && is_space(t[tlen - 1])) tlen--;
        if (!begin_section(p, t, tlen)) return NULL;
      }
    }
  }
  size_t n = 0, max = (size_t)num - 1;
  while (n < max && p->pos < p->len) {
    char ch = p->text[p->pos++];
    str[n++] = ch;
    if (ch == '\n') {
      p->at_line_start = true;
      break;
    }
  }
  if (p->pos >= p->len) p->at_line_start = true;
  str[n] = '\0';
  return str;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */

static void parse_done(parse_t *p) {
  free(p->sec_title);
  free(p->up_line);
  free(p->route_line);
  free(p->key_line);
  free(p->team_line);
  free(p->price_line);
  for (size_t i = 0; p->refs != NULL && i < p->c->nroutes; i++) {
    route_refs_t *rf = &p->refs[i];
    for (size_t j = 0; j < rf->ndeps; j++)
      free(rf->deps[j].name), free(rf->deps[j].model);
    free(rf->deps);
    for (size_t j = 0; j < rf->nfallback; j++)
      free(rf->fallback[j].name), free(rf->fallback[j].model);
    free(rf->fallback);
  }
  free(p->refs);
}

static bool same_target(const px_target_t *a, const px_target_t *b) {
  if (a->upstream != b->upstream) return false;
  if (a->model == NULL || b->model == NULL) return a->model == b->model;
  return strcmp(a->model, b->model) == 0;
}

static const char *ref_text(const target_ref_t *t, char *buf, size_t len) {
  snprintf(buf, len, "%s%s%s", t->name, t->model ? "/" : "", t->model ? t->model : "");
  return buf;
}

/* Resolves refs into out (allocated, n entries), taking the models. An entry
 * equal to one in out[0..i) or in `others` is an error. */
static int resolve_targets(parse_t *p, const px_route_conf_t *r, const char *what,
                           const char *unknown, target_ref_t *refs, size_t n,
                           px_target_t **out, size_t *nout, const px_target_t *others,
                           size_t nothers) {
  char tbuf[512];
  if (n == 0) return 1;
  *out = calloc(n, sizeof **out);
  if (*out == NULL) return fail(p, refs[0].line, "out of memory");
  for (size_t j = 0; j < n; j++) {
    ssize_t u = find_upstream(p->c, refs[j].name);
    if (u < 0)
      return fail(p, refs[j].line, "unknown %s '%s' in [route %s]", unknown, refs[j].name,
                  r->pattern);
    px_target_t t = {(size_t)u, refs[j].model};
    for (size_t k = 0; k < nothers; k++)
      if (same_target(&t, &others[k]))
        return fail(p, refs[j].line,
                    "fallback '%s' is the route's own upstream in [route %s]",
                    ref_text(&refs[j], tbuf, sizeof tbuf), r->pattern);
    for (size_t k = 0; k < j; k++)
      if (same_target(&t, &(*out)[k]))
        return fail(p, refs[j].line, "%s '%s' listed twice in [route %s]", what,
                    ref_text(&refs[j], tbuf, sizeof tbuf), r->pattern);
    refs[j].model = NULL; /* owned by the config now */
    (*out)[j] = t;
    *nout = j + 1;
  }
  return 1;
}

/* Route -> upstream names, once every upstream is known. */
static int resolve(parse_t *p) {
  px_config_t *c = p->c;
  for (size_t i = 0; i < c->nroutes; i++) {
    px_route_conf_t *r = &c->routes[i];
    route_refs_t *rf = &p->refs[i];
    if (rf->ndeps > PX_MAX_DEPLOYMENTS)
      return fail(p, rf->deps[0].line, "more than %d upstreams in [route %s]",
                  PX_MAX_DEPLOYMENTS, r->pattern);
    if (!resolve_targets(p, r, "upstream", "upstream", rf->deps, rf->ndeps,
                         &r->deployments, &r->ndeployments, NULL, 0) ||
        !resolve_targets(p, r, "fallback", "fallback upstream", rf->fallback,
                         rf->nfallback, &r->fallbacks, &r->nfallbacks, r->deployments,
                         r->ndeployments))
      return 0;
    r->upstream = r->deployments[0].upstream;
  }
  for (size_t i = 0; i < c->nkeys; i++)
    for (size_t j = 0; j < i; j++)
      if (strcmp(c->keys[i].secret, c->keys[j].secret) == 0)
        return fail(p, p->key_line[i], "key '%s' has the same secret as key '%s'",
                    c->keys[i].name, c->keys[j].name);
  for (size_t i = 0; i < c->nprices; i++) {
    px_price_conf_t *pr = &c->prices[i];
    if (pr->cache_read < 0) pr->cache_read = pr->input;
    if (pr->cache_write < 0) pr->cache_write = pr->input;
  }
  for (size_t i = 0; i < c->nkeys; i++) {
    px_key_conf_t *k = &c->keys[i];
    if (k->team_name == NULL) continue;
    k->team = px_config_team(c, k->team_name);
    if (k->team == NULL)
      return fail(p, p->key_line[i], "unknown team '%s' in [key %s] (no [team %s])",
                  k->team_name, k->name, k->team_name);
  }
  if (c->state.backend == PX_STATE_REDIS && c->state.redis == NULL)
    return fail(p, p->state_line, "[state] backend = redis needs 'redis ='");
  if (c->state.timeout_ms == 0)
    return fail(p, p->state_line, "[state] timeout must be at least 1ms");
  if (c->responses.timeout_ms == 0)
    return fail(p, p->responses_line, "[responses] timeout must be at least 1ms");
  return 1;
}

static char ini_comments[] = ";#";
static char ini_inline[] = ";#";

/* The configuration's secrets, for the scrubber (scrub.h): upstream keys,
 * the credential of a configured upstream header (a name about auth, keys
 * or tokens: its value, without a "Bearer " scheme), client key secrets,
 * the admin token, the state backend's password. */
static void add_secrets(const px_config_t *c) {
  for (size_t i = 0; i < c->nupstreams; i++) {
    const px_upstream_conf_t *u = &c->upstreams[i];
    if (u->api_key) px_scrub_add(u->api_key, strlen(u->api_key));
    for (size_t h = 0; h < u->nheaders; h++) {
      const char *line = u->headers[h], *colon = strchr(line, ':');
      if (colon == NULL) continue;
      char name[64];
      size_t nl = (size_t)(colon - line) < sizeof(name) - 1 ? (size_t)(colon - line)
                                                            : sizeof(name) - 1;
      for (size_t k = 0; k < nl; k++) name[k] = (char)(line[k] | 0x20);
      name[nl] = 0;
      if (!strstr(name, "auth") && !strstr(name, "key") && !strstr(name, "token") &&
          !strstr(name, "secret"))
        continue;
      const char *v = colon + 1;
      while (*v == ' ' || *v == '\t') v++;
      if (strncasecmp(v, "bearer ", 7) == 0 || strncasecmp(v, "basic ", 6) == 0)
        v = strchr(v, ' ') + 1;
      px_scrub_add(v, strlen(v));
    }
  }
  for (size_t i = 0; i < c->nkeys; i++)
    if (c->keys[i].secret) px_scrub_add(c->keys[i].secret, strlen(c->keys[i].secret));
  if (c->admin_token) px_scrub_add(c->admin_token, strlen(c->admin_token));
  const char *r = c->state.redis, *at = r ? strrchr(r, '@') : NULL;
  if (at != NULL) {
    const char *u = strstr(r, "://");
    u = u ? u + 3 : r;
    const char *colon = memchr(u, ':', (size_t)(at - u));
    if (colon) px_scrub_add(colon + 1, (size_t)(at - colon - 1));
  }
}

static px_config_t *parse_text(const char *text, size_t len, const char *name, char *err,
                               size_t errlen) {
  parse_t p = {0};
  p.name = name ? name : "(config)";
  p.text = text;
  p.len = len;
  p.at_line_start = true;
  p.err = err;
  p.errlen = errlen;
  if (err != NULL && errlen > 0) err[0] = '\0';
  p.c = config_new();
  if (p.c == NULL) {
    set_err(err, errlen, "%s: out of memory", p.name);
    return NULL;
  }

  /* This inih build reads its options at run time. */
  ini_allow_multiline = false; /* an indented line would repeat the key */
  ini_allow_bom = true;
  ini_start_comment_prefixes = ini_comments;
  ini_allow_inline_comments = true;
  ini_inline_comment_prefixes = ini_inline;
  ini_use_stack = false;
  ini_allow_realloc = true;
  ini_initial_alloc = 256;
  ini_max_line = PX_CONF_MAX_LINE + 3;
  ini_stop_on_first_error = true;
  ini_allow_no_value = false;

  int rc = ini_parse_stream(on_read, &p, on_pair, &p);
  if (!p.failed) {
    if (rc > 0)
      fail(&p, rc, "syntax error (expected '[section]' or 'key = value')");
    else if (rc < 0)
      fail(&p, 0, "out of memory");
  }
  if (!p.failed && end_section(&p) && resolve(&p)) {
    if (name != NULL && (p.c->path = strdup(name)) == NULL) fail(&p, 0, "out of memory");
  }
  parse_done(&p);
  if (p.failed) {
    config_free(p.c);
    return NULL;
  }
  add_secrets(p.c);
  return p.c;
}

px_config_t *px_config_parse(const char *text, const char *name, char *err,
                             size_t errlen) {
  if (text == NULL) {
    set_err(err, errlen, "%s: no configuration text", name ? name : "(config)");
    return NULL;
  }
  return parse_text(text, strlen(text), name, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* The embedded default (SPEC section 2)                                    */

static const char unconfigured[] =
    "proxai has no upstream configured: set OPENAI_API_KEY, ANTHROPIC_API_KEY and/or "
    "GEMINI_API_KEY in proxai's environment (optionally OPENAI_BASE_URL / "
    "ANTHROPIC_BASE_URL / GEMINI_BASE_URL), or start it with -c proxai.conf (see "
    "proxai.conf.example)";

static const char *env_nonempty(const char *name) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? v : NULL;
}

static int default_upstream(px_config_t *c, const char *name, px_proto_t proto,
                            const char *key_env, const char *url_env, const char *url_def,
                            char *err, size_t errlen) {
  const char *key = env_nonempty(key_env);
  const char *url = env_nonempty(url_env);
  if (key == NULL) return 0;
  if (has_ctl(key)) {
    set_err(err, errlen, "%s: contains a control character", key_env);
    return -1;
  }
  px_upstream_conf_t *u = add_upstream(c, name);
  if (u == NULL || (u->api_key = strdup(key)) == NULL ||
      (u->base_url = strdup(url ? url : url_def)) == NULL) {
    set_err(err, errlen, "out of memory");
    return -1;
  }
  u->protocol = proto;
  if (has_ctl(u->base_url) || !norm_base_url(u->base_url)) {
    set_err(err, errlen, "%s: invalid base_url '%s': must start with http:// or https://",
            url_env, url);
    return -1;
  }
  return 0;
}

/* The embedded default (SPEC section 2): an upstream for every protocol
 * whose key variable is set; each protocol's model glob routes to it, and
 * everything else to the one without a glob (else the first). */
static px_config_t *config_default(char *err, size_t errlen) {
  px_config_t *c = config_new();
  if (c == NULL) goto oom;
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_proto_ops_t *ops = px_proto_get((px_proto_t)p);
    if (ops->env_key != NULL &&
        default_upstream(c, ops->default_name, (px_proto_t)p, ops->env_key, ops->env_base,
                         ops->default_base, err, errlen) < 0)
      goto fail;
  }
  if (c->nupstreams == 0) {
    if ((c->unconfigured_message = strdup(unconfigured)) == NULL) goto oom;
    return c;
  }
  size_t rest = 0;
  px_route_conf_t *r;
  for (size_t u = c->nupstreams; u-- > 0;) {
    const px_proto_ops_t *ops = px_proto_get(c->upstreams[u].protocol);
    if (ops->default_glob == NULL) rest = u;
  }
  for (size_t u = 0; u < c->nupstreams; u++) {
    const char *glob = px_proto_get(c->upstreams[u].protocol)->default_glob;
    if (glob != NULL && ((r = add_route(c, glob)) == NULL || add_deployment(r, u) < 0))
      goto oom;
  }
  if ((r = add_route(c, "*")) == NULL || add_deployment(r, rest) < 0) goto oom;
  return c;
oom:
  set_err(err, errlen, "out of memory");
fail:
  config_free(c);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                  */

px_config_t *px_config_load(const char *path, char *err, size_t errlen) {
  if (path == NULL) {
    if (access("proxai.conf", F_OK) != 0) return config_default(err, errlen);
    path = "proxai.conf";
  }
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    set_err(err, errlen, "%s: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = PX_CONF_MAX_FILE + 1, len = 0;
  char *text = malloc(cap);
  if (text == NULL) {
    fclose(f);
    set_err(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  for (size_t n; (n = fread(text + len, 1, cap - len, f)) > 0;) len += n;
  int rerr = ferror(f) ? errno : 0;
  fclose(f);
  px_config_t *c = NULL;
  if (rerr != 0)
    set_err(err, errlen, "%s: %s", path, strerror(rerr));
  else if (len > PX_CONF_MAX_FILE)
    set_err(err, errlen, "%s: file too large (more than %u bytes)", path,
            PX_CONF_MAX_FILE);
  else
    c = parse_text(text, len, path, err, errlen);
  free(text);
  if (c != NULL && c->nroutes == 0) {
    /* an empty or truncated file would leave the gateway routing nothing
     * and, with no [key], open to anyone: a file must route something */
    set_err(err, errlen,
            "%s: no [route] section: the file routes no model (empty or truncated?)", path);
    config_free(c);
    c = NULL;
  }
  return c;
}

int px_config_set_listen(px_config_t *c, const char *listen, char *err, size_t errlen) {
  if (!valid_listen(listen)) {
    set_err(err, errlen,
            "invalid listen address '%s' (expected host:port, [v6]:port or unix:/path)",
            listen);
    return -1;
  }
  char *v = strdup(listen);
  if (v == NULL) {
    set_err(err, errlen, "out of memory");
    return -1;
  }
  free(c->server.listen);
  c->server.listen = v;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Lookups                                                                  */

const char *px_target_model(const px_route_conf_t *r, const px_target_t *t,
                            const char *requested) {
  if (t != NULL && t->model != NULL) return t->model;
  return r->model != NULL ? r->model : requested;
}

const char *px_balance_name(px_balance_t b) {
  switch (b) {
    case PX_BALANCE_ROUND_ROBIN:
      return "round_robin";
    case PX_BALANCE_WEIGHTED:
      return "weighted";
    default:
      return "least_busy";
  }
}

const px_route_conf_t *px_config_route(const px_config_t *c, const char *model) {
  if (c == NULL || model == NULL) return NULL;
  for (size_t i = 0; i < c->nroutes; i++)
    if (px_glob_match(c->routes[i].pattern, model)) return &c->routes[i];
  return NULL;
}

/* Compares the presented secret with every key without stopping at the first
 * differing byte or the first match, so the time taken does not tell how much
 * of a secret was right. Only the lengths influence timing. */
const px_key_conf_t *px_config_key(const px_config_t *c, const char *secret, size_t len) {
  if (c == NULL || secret == NULL || len == 0) return NULL;
  size_t found = SIZE_MAX;
  for (size_t i = 0; i < c->nkeys; i++) {
    const unsigned char *k = (const unsigned char *)c->keys[i].secret;
    size_t klen = strlen(c->keys[i].secret);
    volatile unsigned diff = klen != len;
    for (size_t j = 0; j < len; j++)
      diff |= (unsigned)(k[j < klen ? j : 0] ^ (unsigned char)secret[j]);
    /* branch-free select: mask is all ones when diff == 0 */
    size_t mask = (size_t)0 - (size_t)(((diff | (0u - diff)) >> 31) ^ 1u);
    found = (found & ~mask) | (i & mask);
  }
  return found == SIZE_MAX ? NULL : &c->keys[found];
}

int px_key_allows(const px_key_conf_t *k, const char *model) {
  if (k == NULL || model == NULL) return 0;
  if (k->nmodels == 0) return 1;
  for (size_t i = 0; i < k->nmodels; i++)
    if (px_glob_match(k->models[i], model)) return 1;
  return 0;
}

int px_config_keyed(const px_config_t *c) {
  return c != NULL && (c->nkeys > 0 || c->admin_token != NULL);
}

const px_team_conf_t *px_config_team(const px_config_t *c, const char *name) {
  for (size_t i = 0; name && i < c->nteams; i++)
    if (strcmp(c->teams[i].name, name) == 0) return &c->teams[i];
  return NULL;
}

const px_price_conf_t *px_config_price(const px_config_t *c, const char *model) {
  for (size_t i = 0; model && i < c->nprices; i++)
    if (px_glob_match(c->prices[i].pattern, model)) return &c->prices[i];
  return NULL;
}

static const char *const window_names[] = {"month", "day", "total"};

const char *px_window_name(px_window_t w) {
  return (unsigned)w < 3 ? window_names[w] : "month";
}

int px_window_parse(const char *s, px_window_t *out) {
  for (int i = 0; i < 3; i++)
    if (strcmp(s, window_names[i]) == 0) {
      *out = (px_window_t)i;
      return 0;
    }
  return -1;
}

int px_parse_usd(const char *s, int64_t max_usd, int64_t *nano) {
  int64_t whole = 0, frac = 0;
  int digits = 0, fd = 0;
  for (; *s >= '0' && *s <= '9'; s++, digits++) {
    whole = whole * 10 + (*s - '0');
    if (whole > max_usd) return -1;
  }
  if (*s == '.') {
    s++;
    for (; *s >= '0' && *s <= '9'; s++, fd++) {
      if (fd == 9) return -1;
      frac = frac * 10 + (*s - '0');
    }
    if (fd == 0) return -1;
  }
  if (*s != '\0' || digits + fd == 0) return -1;
  for (int i = fd; i < 9; i++) frac *= 10;
  if (whole == max_usd && frac > 0) return -1;
  *nano = whole * PX_NANO_PER_USD + frac;
  return 0;
}

const char *px_usd_str(int64_t nano, char *buf, size_t len) {
  const char *sign = nano < 0 ? "-" : "";
  uint64_t v = nano < 0 ? (uint64_t)0 - (uint64_t)nano : (uint64_t)nano;
  uint64_t w = v / PX_NANO_PER_USD, f = v % PX_NANO_PER_USD;
  if (f == 0) {
    snprintf(buf, len, "%s%llu", sign, (unsigned long long)w);
    return buf;
  }
  int n = snprintf(buf, len, "%s%llu.%09llu", sign, (unsigned long long)w,
                   (unsigned long long)f);
  while (n > 0 && (size_t)n < len && buf[n - 1] == '0') buf[--n] = 0;
  return buf;
}

/* ------------------------------------------------------------------------ */
/* --check output                                                           */

static void print_ms(FILE *out, const char *label, uint64_t ms) {
  if (ms % 1000 == 0)
    fprintf(out, "  %s: %llus\n", label, (unsigned long long)(ms / 1000));
  else
    fprintf(out, "  %s: %llums\n", label, (unsigned long long)ms);
}

void px_config_print(const px_config_t *c, FILE *out) {
  static const char *const lv[] = {"error", "warn", "info", "debug"};
  const px_server_conf_t *s = &c->server;
  fprintf(out, "configuration: %s\n", c->path ? c->path : "(embedded default)");
  fprintf(out, "server\n  listen: %s\n  workers: %u\n  max_connections: %u\n", s->listen,
          s->workers, s->max_connections);
  fprintf(out, "  max_body: %llu\n  max_header: %llu\n", (unsigned long long)s->max_body,
          (unsigned long long)s->max_header);
  fprintf(out, "  translate_memory: %u\n  translate_memory_base: %llu\n",
          s->translate_memory, (unsigned long long)s->translate_memory_base);
  print_ms(out, "header_timeout", s->header_timeout_ms);
  print_ms(out, "idle_timeout", s->idle_timeout_ms);
  print_ms(out, "shutdown_timeout", s->shutdown_timeout_ms);
  fprintf(out, "  access_log: %s\n  log_level: %s\n", s->access_log,
          (unsigned)s->log_level < 4 ? lv[s->log_level] : "?");
  fprintf(out, "  log_format: %s\n", s->log_format == PX_LOG_JSON ? "json" : "text");
  if (s->admin_listen) fprintf(out, "  admin_listen: %s\n", s->admin_listen);
  fprintf(out, "  socket_mode: %04o\n", s->socket_mode);
  /* the redis address may carry a password: not printed */
  static const char *const on_error[] = {"allow", "deny", "local"};
  fprintf(out, "state\n  backend: %s\n  prefix: %s\n  on_error: %s\n  timeout: %llums\n",
          c->state.backend == PX_STATE_REDIS ? "redis" : "local", c->state.prefix,
          on_error[c->state.on_error], (unsigned long long)c->state.timeout_ms);
  if (c->trace.endpoint) /* header values are never printed (they hold keys) */
    fprintf(out, "trace\n  endpoint: %s\n  sample: %g\n  headers: %zu\n",
            c->trace.endpoint, c->trace.sample, c->trace.nheaders);
  fprintf(out, "responses\n  store: %s\n", c->responses.store ? "on" : "off");
  print_ms(out, "ttl", c->responses.ttl_ms);
  fprintf(out, "  max_size: %llu\n", (unsigned long long)c->responses.max_size);
  print_ms(out, "timeout", c->responses.timeout_ms);
  for (size_t i = 0; i < c->nupstreams; i++) {
    const px_upstream_conf_t *u = &c->upstreams[i];
    const char *pname = "?";
#define XX(e, name, inpath, uppath, sym) \
  if (u->protocol == PX_PROTO_##e) pname = name;
    PX_PROTO_MAP(XX)
#undef XX
    fprintf(out, "upstream %s\n  protocol: %s\n  base_url: %s\n  api_key: %s\n", u->name,
            pname, u->base_url, u->api_key ? "set" : "none");
    /* header values may carry credentials: names only */
    for (size_t j = 0; j < u->nheaders; j++) {
      const char *h = u->headers[j];
      const char *colon = strchr(h, ':');
      fprintf(out, "  header: %.*s (value hidden)\n", colon ? (int)(colon - h) : 0, h);
    }
    if (px_proto_get(u->protocol)->version_header)
      fprintf(out, "  anthropic_version: %s\n", u->anthropic_version);
    print_ms(out, "connect_timeout", u->connect_timeout_ms);
    print_ms(out, "first_byte_timeout", u->first_byte_timeout_ms);
    print_ms(out, "idle_timeout", u->idle_timeout_ms);
    fprintf(out, "  max_connections: %u\n  retries: %u\n  http2: %s\n",
            u->max_connections, u->retries, u->http2 ? "on" : "off");
    if (u->ca_file) fprintf(out, "  ca_file: %s\n", u->ca_file);
    if (!u->tls_verify) fprintf(out, "  tls_verify: off\n");
    print_ms(out, "retry_after_max", u->retry_after_max_ms);
    fprintf(out, "  eject_after: %u\n", u->eject_after);
    print_ms(out, "eject_for", u->eject_for_ms);
    fprintf(out, "  weight: %u\n", u->weight);
    if (u->client) fprintf(out, "  client: %s\n", u->client == 1 ? "curl" : "builtin");
  }
  for (size_t i = 0; i < c->nroutes; i++) {
    const px_route_conf_t *r = &c->routes[i];
    fprintf(out, "route %s ->", r->pattern);
    for (size_t j = 0; j < r->ndeployments; j++) {
      const px_target_t *t = &r->deployments[j];
      fprintf(out, "%s %s%s%s", j ? "," : "", c->upstreams[t->upstream].name,
              t->model ? "/" : "", t->model ? t->model : "");
    }
    fprintf(out, "\n");
    if (r->model) fprintf(out, "  model: %s\n", r->model);
    if (r->ndeployments > 1) fprintf(out, "  balance: %s\n", px_balance_name(r->balance));
    if (r->nfallbacks > 0) {
      fprintf(out, "  fallback:");
      for (size_t j = 0; j < r->nfallbacks; j++) {
        const px_target_t *t = &r->fallbacks[j];
        fprintf(out, "%s %s%s%s", j ? "," : "", c->upstreams[t->upstream].name,
                t->model ? "/" : "", t->model ? t->model : "");
      }
      fprintf(out, "\n");
    }
    if (r->max_tokens > 0) fprintf(out, "  max_tokens: %lld\n", (long long)r->max_tokens);
    if (r->nmodels > 0) {
      fprintf(out, "  models:");
      for (size_t j = 0; j < r->nmodels; j++)
        fprintf(out, "%s %s", j ? "," : "", r->models[j]);
      fprintf(out, "\n");
    }
  }
  for (size_t i = 0; i < c->nkeys; i++) {
    const px_key_conf_t *k = &c->keys[i];
    fprintf(out, "key %s\n  models:", k->name);
    if (k->nmodels == 0) fprintf(out, " (all)");
    for (size_t j = 0; j < k->nmodels; j++)
      fprintf(out, "%s %s", j ? "," : "", k->models[j]);
    fprintf(out, "\n  rpm: %llu\n  tpm: %llu\n", (unsigned long long)k->rpm,
            (unsigned long long)k->tpm);
    char b[32];
    if (k->team) fprintf(out, "  team: %s\n", k->team->name);
    if (k->budget > 0)
      fprintf(out, "  budget: %s USD per %s\n", px_usd_str(k->budget, b, sizeof(b)),
              px_window_name(k->window));
  }
  for (size_t i = 0; i < c->nteams; i++) {
    char b[32];
    const px_team_conf_t *t = &c->teams[i];
    fprintf(out, "team %s\n  budget: %s USD per %s\n", t->name,
            t->budget > 0 ? px_usd_str(t->budget, b, sizeof(b)) : "none",
            px_window_name(t->window));
  }
  for (size_t i = 0; i < c->nprices; i++) {
    char in[32], o[32], cr[32], cw[32];
    const px_price_conf_t *p = &c->prices[i];
    fprintf(out,
            "price %s (USD per million tokens)\n  input: %s\n  output: %s\n"
            "  cache_read: %s\n  cache_write: %s\n",
            p->pattern, px_usd_str(p->input, in, sizeof(in)),
            px_usd_str(p->output, o, sizeof(o)),
            px_usd_str(p->cache_read, cr, sizeof(cr)),
            px_usd_str(p->cache_write, cw, sizeof(cw)));
  }
  if (c->admin_token) fprintf(out, "admin API: on (admin_listen, token set)\n");
  if (c->nkeys == 0 && !c->admin_token)
    fprintf(out, "client keys: none (open gateway)\n");
  if (c->unconfigured_message) fprintf(out, "no upstream: %s\n", c->unconfigured_message);
}
