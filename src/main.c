/* main.c - command line, configuration, workers, signals, drain. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proxai/config.h"
#include "proxai/inflight.h"
#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/proxy.h"
#include "proxai/ratelimit.h"
#include "proxai/server.h"
#include "proxai/shm.h"
#include "proxai/worker.h"

#define PX_STR__(x) #x
#define PX_STR_(x) PX_STR__(x)
#include "proxai/upstream.h"

typedef struct worker {
  px_worker_t ctx; /* loop, configuration, upstream client, draining */
  px_server_t srv; /* its client side */
  const char *config_path;
  uv_signal_t sig_term, sig_int, sig_hup, sig_usr1;
  uv_timer_t shutdown_timer;
  int stopping;
} worker_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: proxai [-c FILE] [--check] [--version] [--help] [--listen ADDR]\n"
          "\n"
          "  -c FILE        configuration file (default $PROXAI_CONFIG, else\n"
          "                 ./proxai.conf if present, else the embedded default built\n"
          "                 from OPENAI_API_KEY / ANTHROPIC_API_KEY); -c /dev/stdin\n"
          "                 reads it from a pipe (kept on SIGHUP)\n"
          "  --listen ADDR  listen address (host:port, [v6]:port, unix:/path), over the\n"
          "                 file's and $PROXAI_LISTEN\n"
          "  --check        validate the configuration, print the resolved routes, warn\n"
          "                 (stderr) about parts no request can reach, exit\n"
          "  --version      print the version\n"
          "  --help         this text\n");
}

/* --listen, else PROXAI_LISTEN: applied to every configuration loaded, the
 * reloaded ones included. NULL: the file's (or the default's) listen. */
static const char *g_listen;

/* The configuration of path with the command line's overrides applied. A
 * file must name at least one route: an empty or truncated file (a reload
 * racing an editor or a deploy) is rejected like any invalid one rather
 * than leaving every model without a route. */
static px_config_t *load_config(const char *path, char *err, size_t errlen) {
  px_config_t *c = px_config_load(path, err, errlen);
  if (c && c->path && c->nroutes == 0) {
    snprintf(err, errlen, "%s: no [route] section: at least one route is needed", c->path);
    px_config_unref(c);
    return NULL;
  }
  if (c != NULL && g_listen != NULL && px_config_set_listen(c, g_listen, err, errlen) < 0) {
    px_config_unref(c);
    return NULL;
  }
  return c;
}

/* A pipe (-c /dev/stdin, <(...)) or other non-regular file can be read only
 * once: a reload would read an empty stream. */
static int rereadable(const char *path) {
  struct stat st;
  return path == NULL || stat(path, &st) != 0 || S_ISREG(st.st_mode);
}

static void on_handle_close_noop(uv_handle_t *h) { (void)h; }

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, on_handle_close_noop);
}

static void on_uclient_closed(void *arg) {
  worker_t *w = arg;
  w->ctx.uclient = NULL;
}

static void close_uclient(void *arg) {
  worker_t *w = arg;
  if (w->ctx.uclient) px_uclient_close(w->ctx.uclient, on_uclient_closed, w);
}

/* Stop the worker: graceful once every request has ended (last writes are
 * flushed, the shutdown timer stays armed as a backstop), hard when the
 * shutdown timeout fires. */
static void finish(worker_t *w, int graceful) {
  if (w->stopping == 3) return;
  if (!graceful) {
    w->stopping = 3;
    px_server_close_all(&w->srv, 0);
    px_rl_stop();
    px_trace_export_stop();
    if (w->ctx.uclient) px_uclient_close(w->ctx.uclient, on_uclient_closed, w);
    uv_walk(w->ctx.loop, close_walk, NULL);
    return;
  }
  if (w->stopping == 2) return;
  w->stopping = 2;
  px_server_close_all(&w->srv, 1);
  uv_close((uv_handle_t *)&w->sig_term, on_handle_close_noop);
  uv_close((uv_handle_t *)&w->sig_int, on_handle_close_noop);
  uv_close((uv_handle_t *)&w->sig_hup, on_handle_close_noop);
  uv_close((uv_handle_t *)&w->sig_usr1, on_handle_close_noop);
  px_rl_stop();
  uv_unref((uv_handle_t *)&w->shutdown_timer);
  /* the spans of the last requests go out before the upstream client closes */
  px_trace_export_drain(close_uclient, w);
}

static void on_idle(px_server_t *s) {
  worker_t *w = (worker_t *)((char *)s - offsetof(worker_t, srv));
  if (w->stopping) finish(w, 1);
}

static void on_shutdown_timeout(uv_timer_t *t) {
  worker_t *w = t->data;
  px_log_warn("shutdown timeout: closing %zu request(s) still in flight", w->srv.active);
  finish(w, 0);
}

static void on_stop_signal(uv_signal_t *sig, int signum) {
  worker_t *w = sig->data;
  if (w->stopping) {
    if (signum == SIGINT) finish(w, 0); /* second ^C: now */
    return;
  }
  w->stopping = 1;
  px_log_info("signal %d: draining (up to %llu ms)", signum,
              (unsigned long long)w->ctx.config->server.shutdown_timeout_ms);
  w->shutdown_timer.data = w;
  uv_timer_start(&w->shutdown_timer, on_shutdown_timeout,
                 w->ctx.config->server.shutdown_timeout_ms, 0);
  px_server_drain(&w->srv);
}

/* The diagnostic log is stderr; when the operator pointed it at a file
 * (proxai 2>>/var/log/proxai.log), SIGUSR1 reopens that file by name too.
 * The name is taken once at start, before any rename. */
static char g_stderr_path[512];

static void remember_stderr_file(void) {
  struct stat st;
  if (fstat(STDERR_FILENO, &st) < 0 || !S_ISREG(st.st_mode)) return;
  ssize_t n = readlink("/proc/self/fd/2", g_stderr_path, sizeof(g_stderr_path) - 1);
  g_stderr_path[n > 0 && (size_t)n < sizeof(g_stderr_path) - 1 ? n : 0] = 0;
}

static void reopen_stderr_file(void) {
  if (!g_stderr_path[0]) return;
  int fd = open(g_stderr_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  dup2(fd, STDERR_FILENO); /* dup2 clears O_CLOEXEC on fd 2 */
  close(fd);
}

/* logrotate: reopen the access log file under its configured name */
static void on_usr1(uv_signal_t *sig, int signum) {
  (void)sig;
  (void)signum;
  reopen_stderr_file();
  int rc = px_log_reopen();
  if (rc < 0) px_log_error("SIGUSR1: cannot reopen the access log: %s", strerror(-rc));
  else px_log_info("SIGUSR1: log files reopened");
}

static void on_hup(uv_signal_t *sig, int signum) {
  (void)signum;
  worker_t *w = sig->data;
  char err[512];
  if (!rereadable(w->config_path)) {
    px_log_warn("SIGHUP: %s is not a regular file (a pipe?) and was read once at start; "
                "keeping the running configuration (reload re-reads regular files only)",
                w->config_path);
    px_log_reopen();
    return;
  }
  px_config_t *c = load_config(w->config_path, err, sizeof(err));
  if (c == NULL) {
    px_log_error("reload rejected, keeping the running configuration: %s", err);
    return;
  }
  if (strcmp(c->server.listen, w->ctx.config->server.listen) != 0)
    px_log_warn("reload: a new listen address needs a restart; keeping %s",
                w->ctx.config->server.listen);
  px_log_init(c->server.log_level, c->server.access_log);
  px_log_set_format(c->server.log_format);
  const px_state_conf_t *a = &w->ctx.config->state, *b = &c->state;
  if (a->backend != b->backend || a->on_error != b->on_error ||
      a->timeout_ms != b->timeout_ms || strcmp(a->prefix, b->prefix) != 0 ||
      (a->redis && b->redis ? strcmp(a->redis, b->redis) != 0 : a->redis != b->redis) ||
      (a->dir && b->dir ? strcmp(a->dir, b->dir) != 0 : a->dir != b->dir))
    px_log_warn("reload: a changed [state] section needs a restart; keeping the running one");
  px_config_unref(w->ctx.config);
  w->ctx.config = c;
  px_log_info("configuration reloaded (%zu upstreams, %zu routes)", c->nupstreams,
              c->nroutes);
}

/* A worker that cannot start: the message logged, what it opened closed. */
static int worker_fail(worker_t *w, const char *msg) {
  px_log_error("%s", msg);
  px_server_close_all(&w->srv, 0);
  px_uclient_close(w->ctx.uclient, NULL, NULL);
  uv_run(w->ctx.loop, UV_RUN_DEFAULT);
  uv_loop_close(w->ctx.loop);
  px_config_unref(w->ctx.config);
  return 1;
}

static int run_worker(const char *path, px_config_t *cfg, unsigned index) {
  px_shm_set_worker(index);
  worker_t w;
  memset(&w, 0, sizeof(w));
  w.ctx.loop = uv_default_loop();
  w.config_path = path;
  w.srv.w = &w.ctx;
  w.ctx.config = cfg;
  w.srv.on_request = px_proxy_request;
  w.srv.on_early_error = px_proxy_early_error;
  w.srv.on_idle = on_idle;
  w.ctx.uclient = px_uclient_new(w.ctx.loop);
  if (w.ctx.uclient == NULL) {
    px_log_error("cannot initialise the upstream client");
    return 1;
  }
  char err[512];
  if (px_server_listen(&w.srv, err, sizeof(err)) < 0) return worker_fail(&w, err);
  if (px_rl_start(w.ctx.loop, cfg) < 0) return worker_fail(&w, "cannot start the [state] backend");
  px_trace_export_start(&w.ctx);
  uv_timer_init(w.ctx.loop, &w.shutdown_timer);
  uv_signal_init(w.ctx.loop, &w.sig_usr1);
  w.sig_usr1.data = &w;
  uv_signal_start(&w.sig_usr1, on_usr1, SIGUSR1);
  uv_signal_init(w.ctx.loop, &w.sig_term);
  uv_signal_init(w.ctx.loop, &w.sig_int);
  uv_signal_init(w.ctx.loop, &w.sig_hup);
  w.sig_term.data = w.sig_int.data = w.sig_hup.data = &w;
  uv_signal_start(&w.sig_term, on_stop_signal, SIGTERM);
  uv_signal_start(&w.sig_int, on_stop_signal, SIGINT);
  uv_signal_start(&w.sig_hup, on_hup, SIGHUP);
  const char *const fields[] = {"version", PROXAI_VERSION, "listen", cfg->server.listen,
                                NULL};
  px_log_ctx(PX_LOG_INFO, NULL, fields, "proxai %s listening on %s (%zu upstreams, %zu routes)",
             PROXAI_VERSION, cfg->server.listen, cfg->nupstreams, cfg->nroutes);
  if (cfg->unconfigured_message) px_log_warn("%s", cfg->unconfigured_message);
  uv_run(w.ctx.loop, UV_RUN_DEFAULT);
  uv_walk(w.ctx.loop, close_walk, NULL);
  uv_run(w.ctx.loop, UV_RUN_DEFAULT);
  uv_loop_close(w.ctx.loop);
  px_config_unref(w.ctx.config);
  px_log_info("stopped");
  return 0;
}

/* The master: forks the workers, replaces any that dies (logged with its
 * pid and signal or status), forwards signals, and gives up when workers
 * die faster than RESPAWN_MAX in RESPAWN_WINDOW seconds (a crash loop) or
 * one fails at start (exit status 1: cannot bind, ...). Signals are taken
 * synchronously with sigwaitinfo(): none is lost between two waits. */
#define RESPAWN_MAX 10
#define RESPAWN_WINDOW 60

static pid_t spawn_worker(const char *path, px_config_t *cfg, unsigned index,
                          const sigset_t *oldmask) {
  pid_t p = fork();
  if (p == 0) {
    sigprocmask(SIG_SETMASK, oldmask, NULL);
    int rc = run_worker(path, cfg, index);
    curl_global_cleanup();
    _exit(rc);
  }
  return p;
}

/* What a dead worker leaves (SPEC 7): its gauges zeroed, its requests in
 * flight counted as lost, their reservations released, its outage flag
 * cleared, its in-flight part emptied for the replacement. Returns the
 * number of requests lost. */
static unsigned reap(const px_config_t *cfg, unsigned i, pid_t pid) {
  px_metrics_worker_reset(i); /* its connections and streams are gone */
  px_inflight_rec_t *recs;
  size_t nrecs;
  unsigned lost = px_inflight_reap(i, &recs, &nrecs);
  px_rl_release_lost(cfg, recs, nrecs, i, (long)pid);
  free(recs);
  px_rl_worker_gone(i);
  if (lost > 0) px_metrics_lost(lost);
  return lost;
}

static void describe_status(int st, char *out, size_t n) {
  if (WIFSIGNALED(st))
    snprintf(out, n, "killed by signal %d (%s)%s", WTERMSIG(st), strsignal(WTERMSIG(st)),
             WCOREDUMP(st) ? ", core dumped" : "");
  else
    snprintf(out, n, "exited with status %d", WEXITSTATUS(st));
}

static int run_workers(const char *path, px_config_t *cfg, unsigned n) {
  pid_t *pids = calloc(n, sizeof(pid_t));
  if (!pids) return 1;
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &old);
  int rc = 0, stopping = 0;
  unsigned alive = 0;
  for (unsigned i = 0; i < n; i++) {
    pids[i] = spawn_worker(path, cfg, i, &old);
    if (pids[i] < 0) {
      perror("proxai: fork");
      pids[i] = 0;
      rc = 1;
      stopping = 1;
      break;
    }
    alive++;
  }
  if (stopping)
    for (unsigned i = 0; i < n; i++)
      if (pids[i] > 0) kill(pids[i], SIGTERM);
  time_t deaths[RESPAWN_MAX];
  unsigned ndeaths = 0;
  while (alive > 0) {
    siginfo_t si;
    int sig = sigwaitinfo(&set, &si);
    if (sig < 0) continue; /* EINTR */
    if (sig != SIGCHLD) {
      if (sig == SIGTERM || sig == SIGINT) stopping = 1;
      if (sig == SIGUSR1) {
        reopen_stderr_file();
        px_log_reopen();
      }
      if (sig == SIGHUP && rereadable(path)) { /* workers started from now on get it too */
        char err[512];
        px_config_t *c = load_config(path, err, sizeof(err));
        if (c) {
          px_config_unref(cfg);
          cfg = c;
        }
      }
      for (unsigned i = 0; i < n; i++)
        if (pids[i] > 0) kill(pids[i], sig);
      continue;
    }
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
      unsigned i = 0;
      while (i < n && pids[i] != p) i++;
      if (i == n) continue;
      pids[i] = 0;
      alive--;
      char what[160];
      describe_status(st, what, sizeof(what));
      unsigned lost = reap(cfg, i, p);
      size_t l = strlen(what);
      if (lost > 0)
        snprintf(what + l, sizeof(what) - l, " with %u request%s in flight (lost)", lost,
                 lost == 1 ? "" : "s");
      else
        snprintf(what + l, sizeof(what) - l, " with no request in flight");
      if (stopping) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
        if (lost > 0) px_log_error("worker %ld %s", (long)p, what);
        continue;
      }
      time_t now = time(NULL);
      if (ndeaths == RESPAWN_MAX) {
        memmove(deaths, deaths + 1, sizeof(deaths[0]) * (RESPAWN_MAX - 1));
        ndeaths--;
      }
      deaths[ndeaths++] = now;
      int startup = WIFEXITED(st) && WEXITSTATUS(st) == 1;
      int loop = ndeaths == RESPAWN_MAX && now - deaths[0] < RESPAWN_WINDOW;
      if (startup || loop) {
        px_log_error("worker %ld %s; %s: stopping", (long)p, what,
                     startup ? "it could not start"
                             : "workers are dying too fast (" PX_STR_(RESPAWN_MAX)
                               " in " PX_STR_(RESPAWN_WINDOW) " s)");
        rc = 1;
        stopping = 1;
        for (unsigned k = 0; k < n; k++)
          if (pids[k] > 0) kill(pids[k], SIGTERM);
        continue;
      }
      pid_t np = spawn_worker(path, cfg, i, &old);
      if (np < 0) {
        px_log_error("worker %ld %s; cannot fork a new one: %s", (long)p, what,
                     strerror(errno));
        continue;
      }
      pids[i] = np;
      alive++;
      px_log_error("worker %ld %s; started worker %ld", (long)p, what, (long)np);
    }
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  free(pids);
  px_config_unref(cfg);
  return rc;
}

int main(int argc, char **argv) {
  const char *path = NULL;
  int check = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) path = argv[++i];
    else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) g_listen = argv[++i];
    else if (strncmp(argv[i], "--listen=", 9) == 0) g_listen = argv[i] + 9;
    else if (strcmp(argv[i], "--check") == 0) check = 1;
    else if (strcmp(argv[i], "--version") == 0) {
      printf("proxai %s\n", PROXAI_VERSION);
      return 0;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "proxai: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  /* Containers configure through the environment; the command line wins. */
  const char *env = getenv("PROXAI_CONFIG");
  if (path == NULL && env != NULL && *env != '\0') path = env;
  env = getenv("PROXAI_LISTEN");
  if (g_listen == NULL && env != NULL && *env != '\0') g_listen = env;
  char err[1024];
  px_config_t *cfg = load_config(path, err, sizeof(err));
  if (cfg == NULL) {
    fprintf(stderr, "proxai: %s\n", err);
    return 2;
  }
  if (check) {
    px_config_print(cfg, stdout);
    px_config_warn(cfg, stderr);
    px_config_unref(cfg);
    return 0;
  }
  if (px_log_init(cfg->server.log_level, cfg->server.access_log) < 0) {
    fprintf(stderr, "proxai: cannot open access log '%s'\n", cfg->server.access_log);
    px_config_unref(cfg);
    return 1;
  }
  px_log_set_format(cfg->server.log_format);
  signal(SIGPIPE, SIG_IGN);
  remember_stderr_file();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  unsigned workers = cfg->server.workers;
  if (workers == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    workers = n > 0 ? (unsigned)n : 1;
  }
  /* the host's shared limits and counters, inherited by every worker */
  px_shm_register(&px_metrics_region);
  px_shm_register(&px_rl_region);
  px_shm_register(&px_inflight_region);
  int src = px_shm_init(workers);
  if (src < 0) {
    fprintf(stderr, "proxai: cannot map shared memory: %s\n", strerror(-src));
    px_config_unref(cfg);
    return 1;
  }
  if (workers > 1 && px_server_prebind(cfg, err, sizeof(err)) < 0) {
    fprintf(stderr, "proxai: %s\n", err);
    px_config_unref(cfg);
    return 1;
  }
  /* runtime keys without [state] dir: a store of this run only */
  char scratch[64] = "";
  if (cfg->state.backend == PX_STATE_LOCAL && !cfg->state.dir && cfg->admin_token) {
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof(scratch), "%s/proxai-state-XXXXXX",
             tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (mkdtemp(scratch))
      px_rl_scratch_dir(scratch);
    else
      scratch[0] = 0;
  }
  int rc = workers > 1 ? run_workers(path, cfg, workers) : run_worker(path, cfg, 0);
  if (scratch[0]) {
    char f[128];
    snprintf(f, sizeof(f), "%s/data.mdb", scratch);
    unlink(f);
    snprintf(f, sizeof(f), "%s/lock.mdb", scratch);
    unlink(f);
    rmdir(scratch);
  }
  px_log_done();
  curl_global_cleanup();
  return rc;
}
