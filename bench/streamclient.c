/*
 * streamclient - load client for what wrk cannot measure: time to first SSE
 * event, gaps between events, thousands of concurrent streams, streamed
 * bytes per second. libuv + llhttp (response parser, so chunked bodies are
 * decoded), one thread.
 *
 *   streamclient -p PORT -P PATH -b BODYFILE [options]
 *
 *   -h HOST        default 127.0.0.1
 *   -H 'K: V'      extra request header (repeatable)
 *   -c CONNS       concurrent connections (default 1)
 *   -n REQUESTS    total requests (default: CONNS, i.e. one each)
 *   -d SECONDS     stop starting requests after this long (default: none)
 *   -T SECONDS     hard deadline; unfinished requests count as stalled (60)
 *   -r RATE        new connections per millisecond while ramping up (10)
 *   -s STALL_MS    a gap between events longer than this marks the stream
 *                  stalled (default 0 = off)
 *   -m PIDS        comma-separated pids whose VmRSS is summed: sampled
 *                  before connecting and (max) while streams are open
 *   -w WARMUP      requests whose timings are not recorded (default 0)
 *
 * Prints one JSON object: counts, percentiles in microseconds for the whole
 * request, time to first event (ttfe) and inter-event gaps, body bytes per
 * second, and RSS figures when -m is given.
 */
#include <llhttp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

typedef struct samples {
  double *v;
  size_t n, cap;
} samples_t;

typedef struct conn {
  uv_tcp_t tcp;
  uv_connect_t cr;
  uv_write_t wr;
  llhttp_t parser;
  int closing, connected, in_request;
  int nl_state; /* trailing newlines seen in the body (ignoring \r) */
  int recording;
  int stalled;
  uint64_t t_start, t_first, t_last_ev;
  uint64_t events;
  uint64_t max_gap;
  int event_in_read;
} conn_t;

static uv_loop_t *loop;
static llhttp_settings_t settings;
static struct sockaddr_in addr;
static char *request;
static size_t request_len;

static unsigned nconns = 1, ramp = 10, stall_ms = 0, warmup = 0;
static uint64_t nreq = 0, deadline_ns, stop_start_ns;
static uint64_t t0;
static const char *pids;

static uint64_t started, completed, errors, non2xx, stalled_n, connected_n, opened;
static uint64_t streaming_now; /* requests that have received their first event */
static uint64_t body_bytes, events_total;
static uint64_t rss_base_kb, rss_max_kb;
static samples_t lat, ttfe, gaps;
static uv_timer_t ramp_timer, deadline_timer, rss_timer;

static void add(samples_t *s, double v) {
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 1024;
    if (nc > (64u << 20)) return;
    double *p = realloc(s->v, nc * sizeof(double));
    if (!p) return;
    s->v = p;
    s->cap = nc;
  }
  s->v[s->n++] = v;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(samples_t *s, double p) {
  if (!s->n) return -1;
  size_t i = (size_t)(p / 100.0 * (double)(s->n - 1) + 0.5);
  return s->v[i];
}

static void print_stats(const char *name, samples_t *s, int comma) {
  qsort(s->v, s->n, sizeof(double), cmpd);
  printf("\"%s\":{\"n\":%zu,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f}%s", name,
         s->n, pct(s, 50), pct(s, 90), pct(s, 99), s->n ? s->v[s->n - 1] : -1.0,
         comma ? "," : "");
}

static uint64_t read_rss_kb(void) {
  if (!pids) return 0;
  uint64_t total = 0;
  char *list = strdup(pids), *save = NULL;
  for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%s/status", p);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof(line), f))
      if (strncmp(line, "VmRSS:", 6) == 0) total += strtoull(line + 6, NULL, 10);
    fclose(f);
  }
  free(list);
  return total;
}

static void start_conn(void);
static void send_request(conn_t *c);

static int all_done(void) {
  if (completed + errors >= nreq) return 1;
  return 0;
}

static void on_close(uv_handle_t *h) {
  free(h->data);
}

static void finish(void) {
  uv_stop(loop);
}

static void conn_close(conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  if (c->connected) connected_n--;
  uv_close((uv_handle_t *)&c->tcp, on_close);
}

static int want_more(void) {
  uint64_t now = uv_hrtime();
  if (stop_start_ns && now >= stop_start_ns) return 0;
  return started < nreq;
}

static void request_end(conn_t *c, int ok) {
  if (!c->in_request) return;
  c->in_request = 0;
  if (c->t_first) streaming_now--;
  if (ok) {
    completed++;
    if (c->recording) add(&lat, (double)(uv_hrtime() - c->t_start) / 1e3);
  } else {
    errors++;
  }
  if (c->stalled) stalled_n++;
}

static void maybe_next(conn_t *c) {
  if (all_done() || (!want_more() && started == completed + errors)) {
    finish();
    return;
  }
  if (!c->closing && want_more()) send_request(c);
}

static int on_headers_complete(llhttp_t *p) {
  if (p->status_code < 200 || p->status_code >= 300) non2xx++;
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  conn_t *c = p->data;
  body_bytes += n;
  for (size_t i = 0; i < n; i++) {
    char ch = at[i];
    if (ch == '\r') continue;
    if (ch == '\n') {
      if (++c->nl_state == 2) {
        c->events++;
        events_total++;
        c->event_in_read = 1;
      }
    } else {
      c->nl_state = 0;
    }
  }
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  (void)p; /* timing is taken in on_read, after llhttp_execute returns */
  return HPE_PAUSED;
}

static void note_events(conn_t *c, uint64_t now) {
  if (!c->event_in_read) return;
  c->event_in_read = 0;
  if (!c->t_first) {
    c->t_first = now;
    streaming_now++;
    if (c->recording) add(&ttfe, (double)(now - c->t_start) / 1e3);
  } else {
    uint64_t g = now - c->t_last_ev;
    if (c->recording) add(&gaps, (double)g / 1e3);
    if (g > c->max_gap) c->max_gap = g;
    if (stall_ms && g > (uint64_t)stall_ms * 1000000ULL) c->stalled = 1;
  }
  c->t_last_ev = now;
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  static char buf[256 * 1024];
  (void)h;
  (void)sz;
  *b = uv_buf_init(buf, sizeof(buf));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  conn_t *c = s->data;
  if (n < 0) {
    request_end(c, 0);
    conn_close(c);
    if (want_more())
      start_conn();
    else if (started == completed + errors)
      finish();
    return;
  }
  uint64_t now = uv_hrtime();
  const char *p = b->base;
  size_t left = (size_t)n;
  while (left > 0) {
    llhttp_errno_t e = llhttp_execute(&c->parser, p, left);
    note_events(c, now);
    if (e == HPE_OK) return;
    if (e != HPE_PAUSED) {
      request_end(c, 0);
      conn_close(c);
      if (want_more()) start_conn();
      return;
    }
    const char *stop = llhttp_get_error_pos(&c->parser);
    size_t used = stop ? (size_t)(stop - p) : left;
    p += used;
    left -= used;
    llhttp_resume(&c->parser);
    int ka = llhttp_should_keep_alive(&c->parser);
    request_end(c, 1);
    if (!ka) {
      conn_close(c);
      if (want_more())
        start_conn();
      else if (started == completed + errors)
        finish();
      return;
    }
    maybe_next(c);
    if (!c->in_request) return;
  }
}

static void on_write(uv_write_t *w, int status) {
  conn_t *c = w->data;
  if (status < 0 && !c->closing) {
    request_end(c, 0);
    conn_close(c);
  }
}

static void send_request(conn_t *c) {
  started++;
  c->in_request = 1;
  c->recording = started > warmup;
  c->t_start = uv_hrtime();
  c->t_first = c->t_last_ev = 0;
  c->events = 0;
  c->nl_state = 0;
  c->stalled = 0;
  c->max_gap = 0;
  uv_buf_t b = uv_buf_init(request, (unsigned)request_len);
  c->wr.data = c;
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
    request_end(c, 0);
    conn_close(c);
  }
}

static void on_connect(uv_connect_t *r, int status) {
  conn_t *c = r->data;
  if (status < 0) {
    fprintf(stderr, "streamclient: connect: %s\n", uv_strerror(status));
    errors++;
    started++;
    conn_close(c);
    if (started == completed + errors && !want_more()) finish();
    return;
  }
  c->connected = 1;
  connected_n++;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (want_more())
    send_request(c);
  else
    conn_close(c);
}

static void start_conn(void) {
  conn_t *c = calloc(1, sizeof(*c));
  if (!c) return;
  opened++;
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  c->cr.data = c;
  llhttp_init(&c->parser, HTTP_RESPONSE, &settings);
  c->parser.data = c;
  if (uv_tcp_connect(&c->cr, &c->tcp, (const struct sockaddr *)&addr, on_connect) < 0) {
    errors++;
    started++;
    conn_close(c);
  }
}

static void on_ramp(uv_timer_t *t) {
  for (unsigned i = 0; i < ramp && opened < nconns; i++) start_conn();
  if (opened >= nconns) uv_timer_stop(t);
}

static void on_deadline(uv_timer_t *t) {
  (void)t;
  finish();
}

static void on_rss(uv_timer_t *t) {
  (void)t;
  uint64_t r = read_rss_kb();
  if (r > rss_max_kb) rss_max_kb = r;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  if (p) {
    p[n] = 0;
    *len = (size_t)n;
  }
  return p;
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *path = "/", *bodyfile = NULL;
  int port = 0;
  double dur = 0, hard = 60;
  char hdrs[4096] = "";
  int opt;
  while ((opt = getopt(argc, argv, "h:p:P:b:H:c:n:d:T:r:s:m:w:")) != -1) {
    switch (opt) {
      case 'h':
        host = optarg;
        break;
      case 'p':
        port = atoi(optarg);
        break;
      case 'P':
        path = optarg;
        break;
      case 'b':
        bodyfile = optarg;
        break;
      case 'H':
        if (strlen(hdrs) + strlen(optarg) + 3 < sizeof(hdrs)) {
          strcat(hdrs, optarg);
          strcat(hdrs, "\r\n");
        }
        break;
      case 'c':
        nconns = (unsigned)atoi(optarg);
        break;
      case 'n':
        nreq = strtoull(optarg, NULL, 10);
        break;
      case 'd':
        dur = atof(optarg);
        break;
      case 'T':
        hard = atof(optarg);
        break;
      case 'r':
        ramp = (unsigned)atoi(optarg);
        break;
      case 's':
        stall_ms = (unsigned)atoi(optarg);
        break;
      case 'm':
        pids = optarg;
        break;
      case 'w':
        warmup = (unsigned)atoi(optarg);
        break;
      default:
        fprintf(stderr, "usage: see the comment at the top of bench/streamclient.c\n");
        return 2;
    }
  }
  if (!port || !bodyfile || nconns == 0) {
    fprintf(stderr, "streamclient: -p PORT and -b BODYFILE are required\n");
    return 2;
  }
  if (nreq == 0) nreq = dur > 0 ? UINT64_MAX / 2 : nconns;
  nreq += warmup;
  size_t blen = 0;
  char *body = slurp(bodyfile, &blen);
  if (!body) {
    fprintf(stderr, "streamclient: cannot read %s\n", bodyfile);
    return 2;
  }
  request = malloc(blen + strlen(path) + strlen(hdrs) + 512);
  request_len = (size_t)sprintf(request,
                                "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: "
                                "application/json\r\nContent-Length: %zu\r\n%s\r\n",
                                path, host, port, blen, hdrs);
  memcpy(request + request_len, body, blen);
  request_len += blen;
  free(body);

  signal(SIGPIPE, SIG_IGN);
  llhttp_settings_init(&settings);
  settings.on_headers_complete = on_headers_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;
  loop = uv_default_loop();
  if (uv_ip4_addr(host, port, &addr) < 0) return 2;

  rss_base_kb = read_rss_kb();
  t0 = uv_hrtime();
  if (dur > 0) stop_start_ns = t0 + (uint64_t)(dur * 1e9);
  deadline_ns = t0 + (uint64_t)(hard * 1e9);
  uv_timer_init(loop, &ramp_timer);
  uv_timer_init(loop, &deadline_timer);
  uv_timer_init(loop, &rss_timer);
  uv_timer_start(&ramp_timer, on_ramp, 0, 1);
  uv_timer_start(&deadline_timer, on_deadline, (uint64_t)(hard * 1000), 0);
  if (pids) uv_timer_start(&rss_timer, on_rss, 100, 100);
  uv_run(loop, UV_RUN_DEFAULT);
  uint64_t t1 = uv_hrtime();
  if (pids) on_rss(&rss_timer);

  /* Requests still open at the end did not finish: stalled. */
  uint64_t unfinished = started - completed - errors;
  double secs = (double)(t1 - t0) / 1e9;
  printf(
      "{\"started\":%llu,\"completed\":%llu,\"errors\":%llu,\"non2xx\":%llu,"
      "\"unfinished\":%llu,\"stalled\":%llu,\"max_connected\":%llu,\"events\":%llu,"
      "\"body_bytes\":%llu,\"seconds\":%.3f,\"mb_per_s\":%.2f,\"req_per_s\":%.1f,",
      (unsigned long long)started, (unsigned long long)completed,
      (unsigned long long)errors, (unsigned long long)non2xx,
      (unsigned long long)unfinished, (unsigned long long)(stalled_n + unfinished),
      (unsigned long long)opened, (unsigned long long)events_total,
      (unsigned long long)body_bytes, secs, (double)body_bytes / 1e6 / secs,
      (double)completed / secs);
  if (pids)
    printf("\"rss_base_kb\":%llu,\"rss_max_kb\":%llu,", (unsigned long long)rss_base_kb,
           (unsigned long long)rss_max_kb);
  print_stats("latency_us", &lat, 1);
  print_stats("ttfe_us", &ttfe, 1);
  print_stats("gap_us", &gaps, 0);
  printf("}\n");
  fflush(stdout);
  /* Connections are left to the kernel: exiting closes them. */
  return 0;
}
