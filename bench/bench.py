#!/usr/bin/env python3
"""proxai benchmark driver: proxai vs. the mock called directly vs. nginx.

Run through bench/run.sh, which builds the binaries first. See
bench/README.md for the method. Everything runs on 127.0.0.1; every process
started here is stopped by its PID.
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PROTOS = {
    # name: (client path, model prefix routed by proxai to an upstream of it)
    "chat": ("/v1/chat/completions", "to_chat"),
    "responses": ("/v1/responses", "to_resp"),
    "anthropic": ("/v1/messages", "to_anth"),
    # the model is in Gemini's path; the stream is another method
    "gemini": ("/v1beta/models/MODEL:generateContent", "to_gem"),
}
PAIRS = [(a, b) for a in PROTOS for b in PROTOS if a != b]
HEADERS = {"anthropic": "anthropic-version: 2023-06-01"}


def client_path(proto, model, stream):
    """The path a client of proto posts to (Gemini: model and method in it)."""
    p = PROTOS[proto][0].replace("MODEL", model)
    return p.replace(":generateContent", ":streamGenerateContent?alt=sse") if stream else p


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes


class Proc:
    """A child process we started; stopped by its PID only."""

    def __init__(self, name, cmd, logdir, env=None):
        self.name = name
        self.out = open(os.path.join(logdir, name + ".log"), "wb")
        self.p = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT,
                                  env=env, start_new_session=True)
        self.pid = self.p.pid

    def alive(self):
        return self.p.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.p.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.p.wait()
        self.out.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, timeout=30.0):
    """Wait until port accepts; False when proc (a Proc or a Popen) ends first."""
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and not (proc.alive() if hasattr(proc, "alive") else
                                     proc.poll() is None):
            return False
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def stop(proc, sig=signal.SIGTERM, timeout=60):
    """Stop a subprocess.Popen by its PID: sig, then SIGKILL after timeout."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pids_tree(pid):
    """pid and its children (nginx master + worker, proxai workers)."""
    out = [pid]
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def cpu_seconds(pids):
    tck = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / tck


NICE = 0  # --nice: applied to every process the run starts, all targets alike


def pinned(cpu, cmd):
    if NICE:
        cmd = ["nice", "-n", str(NICE)] + cmd
    return (["taskset", "-c", str(cpu)] + cmd) if cpu is not None else cmd


# ---------------------------------------------------------------- targets


def nginx_conf(tmp, port, mock_port, master=True, tls=None):
    os.makedirs(os.path.join(tmp, "nginx"), exist_ok=True)
    path = os.path.join(tmp, "nginx", ("nginx.conf" if master else "nginx-cg.conf")
                        if not tls else "nginx-cg-tls.conf")
    scheme, ssl = "http", ""
    if tls:  # tls = (port of the TLS upstream, CA file)
        mock_port, scheme = tls[0], "https"
        ssl = ("proxy_ssl_trusted_certificate %s; proxy_ssl_verify on; "
               "proxy_ssl_name localhost; proxy_ssl_session_reuse on;" % tls[1])
    with open(path, "w") as f:
        f.write("""
daemon off;
master_process %s;
worker_processes 1;
worker_rlimit_nofile 20000;
pid %s/nginx/nginx%s.pid;
error_log %s/nginx/error.log warn;
events { worker_connections 20000; }
http {
  access_log off;
  client_body_temp_path %s/nginx/body;
  proxy_temp_path %s/nginx/proxy;
  fastcgi_temp_path %s/nginx/fastcgi;
  uwsgi_temp_path %s/nginx/uwsgi;
  scgi_temp_path %s/nginx/scgi;
  upstream mock { server 127.0.0.1:%d; keepalive 256; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:%d reuseport backlog=8192;
    location / {
      proxy_pass %s://mock; %s
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 120s;
    }
  }
}
""" % ("on" if master else "off", tmp, "" if master else "-cg", tmp, tmp, tmp, tmp, tmp,
       tmp, mock_port, port, scheme, ssl))
    return path


def tls_upstream_conf(tmp, port, mock_port, cert, key):
    """nginx as an HTTPS upstream in front of the mock (keep-alive both sides,
    no limit on requests per connection): the far end of the HTTPS mode."""
    path = os.path.join(tmp, "nginx", "nginx-tls-upstream.conf")
    with open(path, "w") as f:
        f.write("""
daemon off;
master_process off;
worker_processes 1;
pid %s/nginx/nginx-tls.pid;
error_log %s/nginx/error-tls.log warn;
events { worker_connections 4000; }
http {
  access_log off;
  client_body_temp_path %s/nginx/body;
  proxy_temp_path %s/nginx/proxy;
  fastcgi_temp_path %s/nginx/fastcgi;
  uwsgi_temp_path %s/nginx/uwsgi;
  scgi_temp_path %s/nginx/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  upstream mock { server 127.0.0.1:%d; keepalive 64; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:%d ssl;
    ssl_certificate %s;
    ssl_certificate_key %s;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
""" % (tmp, tmp, tmp, tmp, tmp, tmp, tmp, mock_port, port, cert, key))
    return path


def proxai_conf(tmp, port, mock_port, name="proxai.conf", client=None, tls=None):
    """client: None (the default lane), "curl" or "builtin"; tls: (port, CA
    file) of an HTTPS upstream instead of the mock."""
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("""# generated by bench/bench.py
[server]
listen = 127.0.0.1:%d
workers = 1
max_connections = 20000
access_log = off
log_level = warn
""" % port)
        for up, proto, base in (("mock_chat", "openai_chat_completions", "/v1"),
                                ("mock_resp", "openai_responses", "/v1"),
                                ("mock_anth", "anthropic_messages", ""),
                                ("mock_gem", "gemini_generate_content", "")):
            f.write("""
[upstream %s]
protocol = %s
base_url = %s://127.0.0.1:%d%s
max_connections = 20000
retries = 0
idle_timeout = 120s
""" % (up, proto, "https" if tls else "http", tls[0] if tls else mock_port, base))
            if client:
                f.write("client = %s\n" % client)
            if tls:
                # a first handshake under valgrind on a loaded machine can
                # take more than the default 5 s
                f.write("ca_file = %s\nconnect_timeout = 60s\n" % tls[1])
        for prefix, up in (("to_chat", "mock_chat"), ("to_resp", "mock_resp"),
                           ("to_anth", "mock_anth"), ("to_gem", "mock_gem")):
            f.write("\n[route %s*]\nupstream = %s\n" % (prefix, up))
    return path


class Bench:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="proxai-bench-")
        self.procs = []
        self.results = {}  # key -> target -> list of values
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) >= 2:
            self.load_cpu, self.sut_cpu = cpus[0], cpus[-1]
        else:
            self.load_cpu = self.sut_cpu = None
            log("warning: one CPU only; nothing pinned")
        b = args.build
        self.fastmock = os.path.join(b, "bench", "fastmock")
        self.client = os.path.join(b, "bench", "streamclient")
        self.proxai = args.proxai or os.path.join(b, "proxai")
        self.targets = {}  # name -> (port, Proc)
        self.cmds = {}  # name -> command line, to restart after a crash
        self.crashes = {}
        self.crash_notes = []
        self.current = ""
        self.bodies = {}

    # ---- setup
    def body(self, proto, model, stream):
        key = (proto, model, stream)
        if key not in self.bodies:
            with open(os.path.join(HERE, "bodies", proto + ".json")) as f:
                text = f.read().strip()
            s = ""
            if stream and proto != "gemini":
                s = ',"stream":true'
                if proto == "chat":
                    s += ',"stream_options":{"include_usage":true}'
            text = text.replace("MODEL", model).replace("STREAM", s)
            json.loads(text)
            path = os.path.join(self.tmp, "body-%d.json" % len(self.bodies))
            with open(path, "w") as f:
                f.write(text)
            self.bodies[key] = path
        return self.bodies[key]

    def start(self):
        mp = free_port()
        self.mock = Proc("fastmock", pinned(self.load_cpu, [self.fastmock, "-p", str(mp)]),
                         self.tmp)
        self.procs.append(self.mock)
        if not wait_port(mp, self.mock):
            raise SystemExit("fastmock did not start (see %s)" % self.tmp)
        self.mock_port = mp
        self.targets["direct"] = (mp, None)
        if "nginx" in self.a.targets:
            np_ = free_port()
            conf = nginx_conf(self.tmp, np_, mp)
            self.cmds["nginx"] = pinned(self.sut_cpu, [
                self.a.nginx, "-p", self.tmp, "-c", conf, "-e",
                os.path.join(self.tmp, "nginx", "error.log")])
            self.launch("nginx", np_)
        if "proxai" in self.a.targets:
            pp = free_port()
            conf = proxai_conf(self.tmp, pp, mp)
            self.cmds["proxai"] = pinned(self.sut_cpu, [self.proxai, "-c", conf])
            self.launch("proxai", pp)
        self.check_answers()

    def launch(self, name, port):
        n = self.crashes.get(name, 0)
        proc = Proc(name if not n else "%s-restart%d" % (name, n), self.cmds[name], self.tmp)
        self.procs.append(proc)
        if not wait_port(port, proc):
            raise SystemExit("%s did not start (logs in %s)" % (name, self.tmp))
        self.targets[name] = (port, proc)

    def ensure_alive(self, target, r):
        """A target that died during a measurement is counted, its log kept
        for the report, and started again; the measurement is marked."""
        proc = self.targets[target][1]
        if proc is None or proc.alive() or target not in self.cmds:
            return
        rc = proc.p.returncode
        self.crashes[target] = self.crashes.get(target, 0) + 1
        self.crash_notes.append("%s exited with %s during %s" %
                                (target, "signal %d" % -rc if rc < 0 else "status %d" % rc,
                                 self.current))
        log("!! " + self.crash_notes[-1] + "; restarting")
        r["crashed"] = True
        self.procs.remove(proc)
        proc.stop()
        time.sleep(0.5)
        self.launch(target, self.targets[target][0])

    def check_answers(self):
        """Every path must give 200 on every target before measuring."""
        for t in self.targets:
            port = self.targets[t][0]
            for proto in PROTOS:
                outs = [proto] if t != "proxai" else list(PROTOS)
                for out in outs:
                    for stream in (False, True):
                        r = self.client_run(t, proto, PROTOS[out][1] + "-n3", stream,
                                            ["-n", "2"])
                        if r["completed"] != 2 or r["non2xx"]:
                            raise SystemExit("%s %s->%s stream=%s: %s (logs in %s)" %
                                             (t, proto, out, stream, r, self.tmp))

    def stop(self):
        for p in reversed(self.procs):
            p.stop()
        self.procs = []

    def sut_pids(self, target):
        proc = self.targets[target][1]
        return pids_tree(proc.pid) if proc else [self.mock.pid]

    # ---- load generators
    def wrk(self, target, proto, model, conns, duration):
        port = self.targets[target][0]
        env = dict(os.environ, BENCH_BODY=self.body(proto, model, False),
                   BENCH_HEADERS=HEADERS.get(proto, ""))
        cmd = pinned(self.load_cpu, ["wrk", "-t1", "-c%d" % conns, "-d%ds" % max(1, round(duration)),
                                     "--latency", "-s", os.path.join(HERE, "lua", "post.lua"),
                                     "http://127.0.0.1:%d%s" % (port, client_path(proto, model, False))])
        pids = self.sut_pids(target)
        c0 = cpu_seconds(pids)
        self.current = "wrk %s %s model %s -c%d" % (target, proto, model, conns)
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=duration + 60)
        c1 = cpu_seconds(pids)
        r = self.parse_wrk(out.stdout + out.stderr, c1 - c0)
        self.ensure_alive(target, r)
        return r

    @staticmethod
    def parse_wrk(text, cpu):
        def us(v, unit):
            return float(v) * {"us": 1, "ms": 1e3, "s": 1e6, "m": 6e7}[unit]

        r = {"cpu_s": cpu}
        m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", text)
        if not m:
            log("wrk output not understood:\n" + text)
            return {"cpu_s": cpu, "requests": 0, "rps": None, "p50": None, "p99": None,
                    "non2xx": 0, "errors": 1, "cpu_us_per_req": None, "failed": True}
        r["requests"] = int(m.group(1))
        m = re.search(r"Requests/sec:\s+([\d.]+)", text)
        r["rps"] = float(m.group(1))
        for p in ("50", "99"):
            m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s|m)\b" % p, text)
            r["p" + p] = us(m.group(1), m.group(2)) if m else None
        m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
        r["non2xx"] = int(m.group(1)) if m else 0
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                      text)
        r["errors"] = sum(int(x) for x in m.groups()) if m else 0
        r["cpu_us_per_req"] = cpu * 1e6 / r["requests"] if r["requests"] else None
        return r

    def client_run(self, target, proto, model, stream, extra, timeout=300):
        port = self.targets[target][0]
        cmd = [self.client, "-p", str(port), "-P", client_path(proto, model, stream),
               "-b", self.body(proto, model, stream)]
        if proto in HEADERS:
            cmd += ["-H", HEADERS[proto]]
        cmd = pinned(self.load_cpu, cmd + extra)
        pids = self.sut_pids(target)
        c0 = cpu_seconds(pids)
        self.current = "streamclient %s %s model %s %s" % (target, proto, model,
                                                             " ".join(extra))
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        c1 = cpu_seconds(pids)
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError("streamclient failed: %s\n%s" % (cmd, out.stderr))
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r["cpu_s"] = c1 - c0
        if target in self.cmds:
            self.ensure_alive(target, r)
        return r

    # ---- bookkeeping
    def put(self, key, target, value):
        self.results.setdefault(key, {}).setdefault(target, []).append(value)

    def order(self, rnd, names):
        names = list(names)
        k = rnd % len(names)
        return names[k:] + names[:k]

    # ---- scenarios
    def run_rps(self):
        a = self.a
        log("== non-streaming requests/s: warm-up")
        for t in self.targets:
            for proto in PROTOS:
                self.wrk(t, proto, PROTOS[proto][1], a.conns, a.warmup)
        for rnd in range(a.rounds):
            log("== non-streaming requests/s: round %d/%d" % (rnd + 1, a.rounds))
            for t in self.order(rnd, self.targets):
                for proto in PROTOS:
                    r = self.wrk(t, proto, PROTOS[proto][1], a.conns, a.duration)
                    self.put("rps:%s" % proto, t, r)
                if t == "proxai":
                    for i, o in PAIRS:
                        r = self.wrk(t, i, PROTOS[o][1], a.conns, a.duration)
                        self.put("rps:%s>%s" % (i, o), t, r)

    def run_latency(self):
        a = self.a
        cases = [("chat", "chat"), ("anthropic", "anthropic"), ("anthropic", "chat")]
        for rnd in range(a.rounds):
            log("== latency at concurrency 1: round %d/%d" % (rnd + 1, a.rounds))
            for t in self.order(rnd, self.targets):
                for i, o in cases:
                    if i != o and t != "proxai":
                        continue
                    r = self.wrk(t, i, PROTOS[o][1], 1, a.duration)
                    self.put("lat:%s>%s" % (i, o), t, r)

    def run_ttfe(self):
        a = self.a
        n = a.ttfe_requests
        cases = [("chat", "chat"), ("anthropic", "anthropic"), ("anthropic", "chat"),
                 ("chat", "anthropic")]
        for rnd in range(a.rounds):
            log("== time to first event / gaps, paced stream: round %d/%d" % (rnd + 1, a.rounds))
            for t in self.order(rnd, self.targets):
                for i, o in cases:
                    if i != o and t != "proxai":
                        continue
                    r = self.client_run(t, i, PROTOS[o][1] + "-n10-p5-c8", True,
                                        ["-n", str(n), "-w", "2"])
                    self.put("ttfe:%s>%s" % (i, o), t, r)

    def curl_lane_target(self):
        """A second proxai with `client = curl` on every upstream (the libcurl
        lane), as target "proxai-curl"; the default one is "proxai"."""
        if "proxai-curl" in self.targets:
            return True
        if "proxai" not in self.a.targets:
            return False
        port = free_port()
        conf = proxai_conf(self.tmp, port, self.mock_port, "proxai-curl.conf", client="curl")
        self.cmds["proxai-curl"] = pinned(self.sut_cpu, [self.proxai, "-c", conf])
        self.launch("proxai-curl", port)
        return True

    def run_streams(self):
        """Concurrent slow streams per target and, for proxai, per lane (the
        built-in default and libcurl), pass-through and translated: RSS per
        stream is what a lane and a pipeline hold for an open stream."""
        a = self.a
        n = a.streams
        events, pace = (10, 1000) if not a.quick else (5, 500)
        cases = [("chat", "chat"), ("anthropic", "chat")]
        self.curl_lane_target()
        for t in list(self.targets):
            for i, o in cases:
                if i != o and not t.startswith("proxai"):
                    continue
                log("== %d concurrent slow streams: %s %s>%s" % (n, t, i, o))
                time.sleep(1.0)  # let the previous connections finish closing
                pids = self.sut_pids(t)
                model = "%s-n%d-p%d-c8" % (PROTOS[o][1], events, pace)
                r = self.client_run(t, i, model, True,
                                    ["-c", str(n), "-r", "10", "-s", str(pace * 3), "-T",
                                     str(events * pace / 1000 + 30), "-m",
                                     ",".join(str(p) for p in pids)])
                r["rss_per_stream_kib"] = (r["rss_max_kb"] - r["rss_base_kb"]) / n
                self.put("streams:%s>%s" % (i, o), t, r)

    def run_tput(self):
        a = self.a
        cases = [("chat", "chat"), ("responses", "responses"), ("anthropic", "anthropic")]
        cases += PAIRS if not a.quick else [("anthropic", "chat"), ("chat", "anthropic")]
        for rnd in range(a.rounds):
            log("== unpaced SSE throughput: round %d/%d" % (rnd + 1, a.rounds))
            for t in self.order(rnd, self.targets):
                for i, o in cases:
                    if i != o and t != "proxai":
                        continue
                    model = "%s-n%d-c32" % (PROTOS[o][1], a.tput_events)
                    r = self.client_run(t, i, model, True, ["-c", "2", "-n", "4"])
                    r["mb_per_cpu_s"] = (r["body_bytes"] / 1e6 / r["cpu_s"]
                                         if r["cpu_s"] > 0 else None)
                    self.put("tput:%s>%s" % (i, o), t, r)

    def tls_upstream(self):
        """A self-signed certificate and nginx serving HTTPS in front of the
        mock, on the load CPU; returns (port, CA file)."""
        if hasattr(self, "tls"):
            return self.tls
        d = os.path.join(self.tmp, "tls")
        os.makedirs(d, exist_ok=True)
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, capture_output=True)
        os.makedirs(os.path.join(self.tmp, "nginx"), exist_ok=True)
        port = free_port()
        conf = tls_upstream_conf(self.tmp, port, self.mock_port, cert, key)
        p = Proc("nginx-tls-upstream", pinned(self.load_cpu, [
            self.a.nginx, "-p", self.tmp, "-c", conf, "-e",
            os.path.join(self.tmp, "nginx", "error-tls.log")]), self.tmp)
        self.procs.append(p)
        if not wait_port(port, p):
            raise RuntimeError("the TLS upstream did not start")
        self.tls = (port, cert)
        return self.tls

    def run_callgrind(self):
        """Instructions per request: two runs under callgrind, N1 and N2
        sequential keep-alive requests; the difference removes start-up,
        connection set-up (TCP, TLS handshakes) and shutdown."""
        if not shutil.which("valgrind"):
            log("valgrind not found: skipping instructions per request")
            return
        a = self.a
        n1, n2 = a.cg_requests
        # (key prefix, target, lane, inbound, outbound): "ir" plain HTTP
        # upstream, every pair on both lanes (nginx beside each
        # pass-through), "irs" HTTPS upstream
        cases = []
        for i in PROTOS:
            cases.append(("ir", "nginx", None, i, i))
            for o in [i] + [o for (ii, o) in PAIRS if ii == i]:
                cases.append(("ir", "proxai", None, i, o))
                cases.append(("ir", "proxai-curl", "curl", i, o))
        cases += [("irs", "nginx", None, "chat", "chat"),
                  ("irs", "proxai", None, "chat", "chat"),
                  ("irs", "proxai-curl", "curl", "chat", "chat")]
        if a.cg_cases:
            cases = [c for c in cases if "%s:%s:%s>%s" % (c[0], c[1], c[3], c[4]) in a.cg_cases
                     or c[0] in a.cg_cases]
        for kind, t, lane, i, o in cases:
            if t.split("-")[0] not in self.a.targets:
                continue
            tls = self.tls_upstream() if kind == "irs" else None
            log("== callgrind: %s %s %s>%s" % (kind, t, i, o))
            irs = []
            for n in (n1, n2):
                port = free_port()
                tag = "%s-%s-%s-%s-%d" % (kind, t, i, o, n)
                outf = os.path.join(self.tmp, "cg-%s.out" % tag)
                vg = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + outf]
                if t == "nginx":
                    cmd = vg + [self.a.nginx, "-p", self.tmp, "-c",
                                nginx_conf(self.tmp, port, self.mock_port, master=False,
                                           tls=tls), "-e",
                                os.path.join(self.tmp, "nginx", "error.log")]
                else:
                    cmd = vg + [self.proxai, "-c",
                                proxai_conf(self.tmp, port, self.mock_port, "proxai-cg.conf",
                                            client=lane, tls=tls)]
                p = Proc("callgrind-" + tag, pinned(self.sut_cpu, cmd), self.tmp)
                try:
                    if not wait_port(port, p, 60):
                        raise RuntimeError("%s under valgrind did not start" % t)
                    self.targets["cg"] = (port, p)
                    # under callgrind a translated request on the curl lane
                    # takes tens of ms: room for N2 of them
                    r = self.client_run("cg", i, PROTOS[o][1], False,
                                        ["-n", str(n), "-T", "1200"], timeout=1500)
                    self.targets.pop("cg")
                    if r["completed"] != n or r.get("non2xx"):
                        raise RuntimeError("callgrind run incomplete: %s" % r)
                finally:
                    p.stop(timeout=180)  # callgrind writes its file at exit
                irs.append(self.callgrind_total(outf))
            if None not in irs:
                self.put("%s:%s>%s" % (kind, i, o), t,
                         {"ir_per_req": (irs[1] - irs[0]) / (n2 - n1)})

    @staticmethod
    def callgrind_total(path):
        total = 0
        found = False
        # nginx and proxai may fork (master/worker): sum every dump file.
        d = os.path.dirname(path)
        for name in os.listdir(d):
            if name == os.path.basename(path) or name.startswith(os.path.basename(path) + "."):
                with open(os.path.join(d, name)) as f:
                    for line in f:
                        if line.startswith("summary:") or line.startswith("totals:"):
                            total += int(line.split()[1])
                            found = True
                            break
        return total if found else None


# ---------------------------------------------------------------- report


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def spread(vals):
    vals = [v for v in vals if v is not None]
    if len(vals) < 2:
        return ""
    m = statistics.median(vals)
    if not m:
        return ""
    return "±%.0f%%" % (100.0 * (max(vals) - min(vals)) / 2 / m)


def passthrough_first(key):
    kind, pair = key.split(":")
    inb, out = pair.split(">")
    return (kind, inb != out, inb, out)


def fmt(v, nd=0):
    if v is None:
        return "-"
    if isinstance(v, float) and nd == 0 and abs(v) < 100:
        nd = 1
    return ("{:,.%df}" % nd).format(v)


def machine():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            info["cpu"] = m.group(1).strip() if m else platform.processor()
    except OSError:
        info["cpu"] = platform.processor()
    info["cpus"] = os.cpu_count()
    info["kernel"] = platform.release()
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 1048576, 1)
    except OSError:
        pass
    virt = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True) \
        if shutil.which("systemd-detect-virt") else None
    info["virt"] = virt.stdout.strip() if virt and virt.stdout.strip() else "unknown"
    info["load"] = load_avg()
    return info


def load_avg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def versions(b):
    v = {}

    def cmd(c):
        try:
            r = subprocess.run(c, capture_output=True, text=True, timeout=10)
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    v["nginx"] = cmd([b.a.nginx, "-v"])
    v["wrk"] = cmd(["wrk", "-v"]).split(" Copyright")[0]
    v["proxai"] = cmd([b.proxai, "--version"]) if "proxai" in b.a.targets else "-"
    v["commit"] = cmd(["git", "-C", ROOT, "describe", "--always", "--dirty"])
    v["cc"] = cmd(["cc", "--version"])
    try:
        with open(os.path.join(b.a.build, "meson-info", "intro-buildoptions.json")) as f:
            for o in json.load(f):
                if o["name"] == "buildtype":
                    v["buildtype"] = o["value"]
    except (OSError, ValueError):
        pass
    return v


def report(b, started):
    R = b.results
    a = b.a
    lines = []
    w = lines.append
    mi, ve = machine(), versions(b)
    w("# proxai benchmark, %s%s" % (started.strftime("%Y-%m-%d %H:%M UTC"),
                                    " (quick run)" if a.quick else ""))
    w("")
    w("Machine: %s, %s CPUs, %s GiB, Linux %s, virtualization: %s." %
      (mi["cpu"], mi["cpus"], mi.get("mem_gib", "?"), mi["kernel"], mi["virt"]))
    w("Load average (1/5/15 min) before the run: %s; after: %s. Other work on the machine "
      "during the run distorts every figure." % (b.load_before, mi["load"]))
    w("System under test pinned to CPU %s; mock and load generators on CPU %s%s." %
      (b.sut_cpu, b.load_cpu, "; all at nice %d" % a.nice if a.nice else ""))
    w("Versions: proxai %s (commit %s, %s build), %s, %s, %s." %
      (ve.get("proxai"), ve.get("commit"), ve.get("buildtype", "?"), ve.get("nginx"),
       ve.get("wrk"), ve.get("cc")))
    w("Method: %d interleaved rounds of %.1f s per measurement after a %.1f s warm-up; "
      "wrk -t1 -c%d for requests/s; medians over rounds, ± is half the range as a %% of "
      "the median. `bench/run.sh%s`." %
      (a.rounds, a.duration, a.warmup, a.conns, " --quick" if a.quick else ""))
    w("")

    def col(key, target, field):
        rs = R.get(key, {}).get(target)
        if not rs:
            return None, ""
        vals = [r.get(field) for r in rs if not r.get("failed")]
        flag = ""
        if any(r.get("crashed") or r.get("failed") for r in rs):
            flag = " †"
        elif any(r.get("non2xx") or r.get("errors") for r in rs):
            flag = " ‡"
        return med(vals), spread(vals) + flag

    verdicts = []

    def verdict(ok):
        if ok is None:
            return "-"
        verdicts.append(ok)
        return "yes" if ok else "**no**"

    # requests/s
    w("## Non-streaming requests per second (wrk -c%d)" % a.conns)
    w("")
    w("| case | direct | nginx | proxai | proxai / nginx | target | met | proxai CPU us/req "
      "| nginx CPU us/req |")
    w("|---|---|---|---|---|---|---|---|---|")
    for key, label, inb, target in (
            [("rps:%s" % p, "%s pass-through" % p, p, 0.8) for p in PROTOS] +
            [("rps:%s>%s" % (i, o), "%s → %s upstream" % (i, o), i, 0.6) for i, o in PAIRS]):
        d, ds = col("rps:%s" % inb, "direct", "rps") if key.count(">") == 0 else (None, "")
        n, ns = col("rps:%s" % inb, "nginx", "rps")
        p, ps = col(key, "proxai", "rps")
        ratio = p / n if p and n else None
        cpu_p, _ = col(key, "proxai", "cpu_us_per_req")
        cpu_n, _ = col("rps:%s" % inb, "nginx", "cpu_us_per_req")
        w("| %s | %s %s | %s %s | %s %s | %s | ≥ %.1f | %s | %s | %s |" %
          (label, fmt(d), ds, fmt(n), ns, fmt(p), ps, fmt(ratio, 2), target,
           verdict(ratio >= target if ratio else None), fmt(cpu_p), fmt(cpu_n)))
    w("")
    w("Translated rows compare with nginx passing the client's own protocol through.")
    w("")

    # latency
    w("## Latency at concurrency 1 (wrk -c1), microseconds")
    w("")
    w("| case | direct p50 / p99 | nginx p50 / p99 | proxai p50 / p99 | proxai added p50 / p99 "
      "| nginx added p50 / p99 | target | met |")
    w("|---|---|---|---|---|---|---|---|")
    for key, label in (("lat:chat>chat", "chat pass-through"),
                       ("lat:anthropic>anthropic", "anthropic pass-through"),
                       ("lat:anthropic>chat", "anthropic → chat upstream")):
        inb = key.split(":")[1].split(">")[0]
        ref = "lat:%s>%s" % (inb, inb)
        d50, _ = col(ref, "direct", "p50")
        d99, _ = col(ref, "direct", "p99")
        n50, _ = col(ref, "nginx", "p50")
        n99, _ = col(ref, "nginx", "p99")
        p50, _ = col(key, "proxai", "p50")
        p99, _ = col(key, "proxai", "p99")
        ap50 = p50 - d50 if p50 is not None and d50 is not None else None
        ap99 = p99 - d99 if p99 is not None and d99 is not None else None
        an50 = n50 - d50 if n50 is not None and d50 is not None else None
        an99 = n99 - d99 if n99 is not None and d99 is not None else None
        ok = (ap50 < 30 and ap99 < 100) if ap50 is not None and ap99 is not None else None
        w("| %s | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s | < 30 / < 100 | %s |" %
          (label, fmt(d50), fmt(d99), fmt(n50), fmt(n99), fmt(p50), fmt(p99), fmt(ap50),
           fmt(ap99), fmt(an50), fmt(an99), verdict(ok if ref == key else None)))
    w("")

    # ttfe
    w("## Paced stream at concurrency 1: time to first event and gaps, microseconds")
    w("")
    w("10 deltas 5 ms apart; the mock sends the first event with the headers. "
      "Time to first event (TTFE) is from writing the request to the end of the first "
      "complete SSE event; gaps are between reads that complete events.")
    w("")
    w("| case | direct TTFE p50 / p99 | nginx TTFE p50 / p99 | proxai TTFE p50 / p99 "
      "| proxai added p99 | target | met | gap p50 / p99 direct | nginx | proxai |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted((k for k in R if k.startswith("ttfe:")), key=passthrough_first):
        inb, out = key.split(":")[1].split(">")
        ref = "ttfe:%s>%s" % (inb, inb)

        def tt(k, t, f, sub):
            rs = R.get(k, {}).get(t)
            return med([r[sub][f] for r in rs]) if rs else None

        d = [tt(ref, "direct", f, "ttfe_us") for f in ("p50", "p99")]
        n = [tt(ref, "nginx", f, "ttfe_us") for f in ("p50", "p99")]
        p = [tt(key, "proxai", f, "ttfe_us") for f in ("p50", "p99")]
        g = [[tt(ref if t != "proxai" else key, t, f, "gap_us") for f in ("p50", "p99")]
             for t in ("direct", "nginx", "proxai")]
        add99 = p[1] - d[1] if p[1] is not None and d[1] is not None else None
        w("| %s | %s / %s | %s / %s | %s / %s | %s | < 100 | %s | %s / %s | %s / %s | %s / %s |"
          % ("%s → %s" % (inb, out) if inb != out else "%s pass-through" % inb,
             fmt(d[0]), fmt(d[1]), fmt(n[0]), fmt(n[1]), fmt(p[0]), fmt(p[1]), fmt(add99),
             verdict(add99 < 100 if add99 is not None else None), fmt(g[0][0]), fmt(g[0][1]),
             fmt(g[1][0]), fmt(g[1][1]), fmt(g[2][0]), fmt(g[2][1])))
    w("")

    # streams
    w("## %d concurrent slow streams on one worker" % a.streams)
    w("")
    w("Each stream: %s; a stream is stalled when a gap exceeds 3 paces or it does not "
      "finish. RSS is the sum over the target's processes (peak minus idle)." %
      ("10 events 1 s apart" if not a.quick else "5 events 0.5 s apart"))
    w("")
    w("proxai is the default configuration (the built-in lane for http://); proxai-curl "
      "the same with `client = curl` on every upstream (the libcurl lane).")
    w("")
    w("| case | target | completed | stalled | errors | RSS per stream KiB | "
      "TTFE p99 ms | max gap ms | target | met |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted((k for k in R if k.startswith("streams:")), key=passthrough_first):
        for t, rs in R[key].items():
            r = rs[0]
            ok = None
            if t == "proxai":
                ok = r["stalled"] == 0 and r["completed"] == a.streams and \
                    r["rss_per_stream_kib"] < 32
            w("| %s | %s | %d | %d | %d | %.1f | %s | %s | < 32 KiB, 0 stalled "
              "(issue 12: < 16 KiB) | %s |" %
              (key.split(":")[1].replace(">", " → "), t, r["completed"], r["stalled"],
               r["errors"] + r["non2xx"], r["rss_per_stream_kib"],
               fmt(r["ttfe_us"]["p99"] / 1e3), fmt(r["gap_us"]["max"] / 1e3),
               verdict(ok) if t == "proxai" else "-"))
    w("")

    # throughput
    w("## Unpaced SSE throughput, MB/s of body received (2 connections, %d deltas of 32 "
      "text bytes per stream)" % a.tput_events)
    w("")
    w("| case | direct | nginx | proxai | proxai MB per CPU-second | target | met |")
    w("|---|---|---|---|---|---|---|")
    for key in sorted((k for k in R if k.startswith("tput:")), key=passthrough_first):
        inb, out = key.split(":")[1].split(">")
        d, ds = col(key, "direct", "mb_per_s")
        n, ns = col(key, "nginx", "mb_per_s")
        p, ps = col(key, "proxai", "mb_per_s")
        pc, _ = col(key, "proxai", "mb_per_cpu_s")
        translated = inb != out
        w("| %s | %s %s | %s %s | %s %s | %s | %s | %s |" %
          ("%s → %s" % (inb, out) if translated else "%s pass-through" % inb, fmt(d), ds,
           fmt(n), ns, fmt(p), ps, fmt(pc), "≥ 200" if translated else "-",
           verdict((pc or 0) >= 200 and (p or 0) >= 200) if translated and p else "-"))
    w("")
    w("\"MB per CPU-second\" divides the bytes by the CPU time proxai used: the rate one "
      "saturated core would reach. The MB/s column can be limited by the client and the "
      "mock, which share the other core.")
    w("")

    if any(k.startswith("ir") for k in R):
        w("## Instructions per request under callgrind (non-streaming, sequential)")
        w("")
        w("N and 2N sequential keep-alive requests under callgrind; the difference "
          "divided by N. proxai: the default configuration (built-in lane for http://, "
          "built-in with OpenSSL for https://); proxai-curl: the same with `client = curl`.")
        w("")
        w("Ratios: a pass-through against nginx passing the same protocol through; a "
          "translated request against the pass-through of the client's protocol on the "
          "same lane (the same request passed through).")
        w("")
        w("| upstream | case | nginx | proxai | ratio | proxai-curl | ratio | target |")
        w("|---|---|---|---|---|---|---|---|")
        for key in sorted((k for k in R if k.startswith("ir")), key=passthrough_first):
            kind, pair = key.split(":")
            inb, out = pair.split(">")
            nref = med([r["ir_per_req"] for r in
                        R.get("%s:%s>%s" % (kind, inb, inb), {}).get("nginx", [])])
            p = med([r["ir_per_req"] for r in R[key].get("proxai", [])])
            pc = med([r["ir_per_req"] for r in R[key].get("proxai-curl", [])])
            n = nref if inb == out else None
            if inb != out:  # against the same lane's pass-through of the client's protocol
                pt = R.get("%s:%s>%s" % (kind, inb, inb), {})
                ref = med([r["ir_per_req"] for r in pt.get("proxai", [])])
                refc = med([r["ir_per_req"] for r in pt.get("proxai-curl", [])])
            else:
                ref = refc = nref
            target = ("≤ 1.25 x nginx" if kind == "ir" else "≤ 1.5 x nginx (issue: 2 x)") \
                if inb == out else "≤ 2 x pass-through"
            w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                "http" if kind == "ir" else "https",
                "%s → %s" % (inb, out) if inb != out else "%s pass-through" % inb,
                fmt(n), fmt(p), fmt(p / ref, 2) if p and ref else "-", fmt(pc),
                fmt(pc / refc, 2) if pc and refc else "-", target))
        w("")

    w("† the target crashed during a measurement (restarted; see below) or the measurement "
      "failed. ‡ some responses were not 2xx or had socket errors.")
    w("")
    if b.crash_notes:
        w("## Crashes")
        w("")
        for n in b.crash_notes:
            w("* " + n)
        w("")
    met = sum(1 for v in verdicts if v)
    w("Targets met: %d of %d (SPEC section 9)." % (met, len(verdicts)))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="short run (about two minutes)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--proxai", help="proxai binary (default BUILD/proxai)")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--targets", default="direct,nginx,proxai")
    ap.add_argument("--only", default="rps,lat,ttfe,streams,tput,ir",
                    help="comma-separated scenarios: rps,lat,ttfe,streams,tput,ir")
    ap.add_argument("--cg-cases", default="",
                    help="callgrind cases to run, e.g. ir,irs or ir:proxai-curl:chat>chat "
                    "(default all)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=float, help="seconds per wrk measurement")
    ap.add_argument("--out", help="markdown output (default bench/results/DATE.md)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--nice", type=int, default=0,
                    help="nice value for every process started (negative needs root); "
                    "reduces interference from other work on a shared machine")
    a = ap.parse_args()
    global NICE
    NICE = a.nice
    a.targets = a.targets.split(",")
    a.cg_cases = [c for c in a.cg_cases.split(",") if c]
    a.rounds = a.rounds or (2 if a.quick else 5)
    a.duration = a.duration or (2.0 if a.quick else 5.0)
    a.warmup = 1.0 if a.quick else 3.0
    a.conns = 50
    a.ttfe_requests = 20 if a.quick else 60
    a.streams = 2000 if a.quick else 8000
    a.tput_events = 20000 if a.quick else 100000
    a.cg_requests = (100, 600) if a.quick else (200, 2200)
    only = a.only.split(",")

    for tool in (("wrk", "taskset") if {"rps", "lat"} & set(only) else ("taskset",)):
        if not shutil.which(tool):
            raise SystemExit("%s not found (apt install %s)" % (tool, tool))
    if "nginx" in a.targets and not os.path.exists(a.nginx):
        raise SystemExit("nginx not found (apt install nginx) or use --targets direct,proxai")

    # Each proxied stream takes two descriptors in the target and one in the
    # client: raise the soft limit, and scale the stream count down if the
    # hard limit is too low.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and soft < 2 * a.streams + 200:
        n = max(100, (soft - 200) // 2)
        log("warning: open files limit %d: %d concurrent streams instead of %d" %
            (soft, n, a.streams))
        a.streams = n

    started = datetime.datetime.now(datetime.timezone.utc)
    b = Bench(a)
    b.load_before = load_avg()
    try:
        b.start()
        if "rps" in only:
            b.run_rps()
        if "lat" in only:
            b.run_latency()
        if "ttfe" in only:
            b.run_ttfe()
        if "tput" in only:
            b.run_tput()
        if "streams" in only:
            b.run_streams()
        if "ir" in only:
            b.run_callgrind()
    finally:
        b.stop()
        if not a.keep:
            shutil.rmtree(b.tmp, ignore_errors=True)
        else:
            log("kept", b.tmp)
    text = report(b, started)
    print(text)
    out = a.out or os.path.join(HERE, "results", started.strftime("%Y-%m-%d") +
                                ("-quick" if a.quick else "") + ".md")
    with open(out, "w") as f:
        f.write(text)
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump({"started": started.isoformat(), "results": b.results}, f, indent=1)
    log("written", out)
    if not a.quick and not a.out and set(only) >= {"rps", "lat", "ttfe", "tput", "streams"}:
        update_readme(text, os.path.relpath(out, HERE))


def update_readme(text, rel):
    """Copy the newest full run into bench/README.md between the markers."""
    path = os.path.join(HERE, "README.md")
    with open(path) as f:
        readme = f.read()
    start, end = "<!-- latest -->\n", "<!-- /latest -->"
    i, j = readme.find(start), readme.find(end)
    if i < 0 or j < i:
        return
    body = "\n".join(("##" + l if l.startswith("#") else l) for l in text.splitlines())
    readme = readme[:i + len(start)] + "From `%s`:\n\n" % rel + body.strip() + "\n" + \
        readme[j:]
    with open(path, "w") as f:
        f.write(readme)


if __name__ == "__main__":
    main()
