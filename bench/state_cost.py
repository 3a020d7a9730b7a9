#!/usr/bin/env python3
"""Cost of an admission per request: [state] backend = local (shared memory)
beside backend = redis (one Lua script per admission on a local
redis-server), each with rpm/tpm only and with budgets too (a [price], a
key budget and a team budget reserved in the same step, settled at the end;
locally the spend also goes to the LMDB store of [state] dir), and beside a
key without limits (no admission at all).

Measures, on loopback, chat pass-through against bench/fastmock:
  * added latency: N sequential keep-alive requests, p50 / p99 / mean in us;
  * instructions per request in proxai (callgrind, N1 and N2 requests, the
    difference), when valgrind is installed. Redis's own work is not in
    this figure (it runs in redis-server); the latency shows the round trip.

Usage: bench/state_cost.py [--build build] [--requests 5000] [--cg 200,400]
Every process it starts listens on 127.0.0.1 only and is stopped by its PID.
Not a test: it asserts nothing.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench import free_port, stop, wait_port  # noqa: E402


def conf(tmp, name, port, mock_port, backend, redis_port):
    budget = backend.endswith("+budget")
    backend = backend.split("+")[0]
    limits = "" if backend == "none" else "rpm = 100000000\ntpm = 1000000000000\n"
    state = ""
    if backend == "redis":
        # a generous timeout: under callgrind every reply is late
        state = ("[state]\nbackend = redis\nredis = redis://127.0.0.1:%d/0\nprefix = bench:\n"
                 "timeout = 10s\n" % redis_port)
    elif budget:
        state = "[state]\ndir = %s\n" % os.path.join(tmp, "state-" + name)
    if budget:
        limits += "team = t\nbudget = 100000000\n"
        state += ("[price *]\ninput = 2.50\noutput = 10\n"
                  "[team t]\nbudget = 100000000\n")
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("""[server]
listen = 127.0.0.1:%d
workers = 1
access_log = off
log_level = warn
%s
[upstream mock_chat]
protocol = openai_chat_completions
base_url = http://127.0.0.1:%d/v1
retries = 0

[route *]
upstream = mock_chat

[key bench]
secret = sk-bench
%s""" % (port, state, mock_port, limits))
    return path


BACKENDS = ("none", "local", "local+budget", "redis", "redis+budget")

BODY = json.dumps({"model": "to_chat", "max_tokens": 16,
                   "messages": [{"role": "user", "content": "Hi"}]})
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


def run_requests(port, n):
    c = http.client.HTTPConnection("127.0.0.1", port)
    lat = []
    for _ in range(n):
        t = time.perf_counter_ns()
        c.request("POST", "/v1/chat/completions", BODY, HEADERS)
        r = c.getresponse()
        r.read()
        lat.append((time.perf_counter_ns() - t) / 1000)
        if r.status != 200:
            raise RuntimeError("status %d" % r.status)
    c.close()
    return lat


def callgrind_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--cg", default="200,400", help="N1,N2 requests under callgrind")
    a = ap.parse_args()
    proxai = os.path.join(a.build, "proxai")
    fastmock = os.path.join(a.build, "bench", "fastmock")
    redis_bin = shutil.which("redis-server")
    if not redis_bin:
        sys.exit("redis-server not found (Debian package redis-server)")
    tmp = tempfile.mkdtemp(prefix="proxai-state-bench-")
    procs = []
    try:
        mock_port, redis_port = free_port(), free_port()
        mock = subprocess.Popen([fastmock, "-p", str(mock_port)])
        procs.append(mock)
        redis = subprocess.Popen([redis_bin, "--port", str(redis_port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", tmp],
                                 stdout=subprocess.DEVNULL)
        procs.append(redis)
        if not wait_port(mock_port, mock) or not wait_port(redis_port, redis):
            sys.exit("mock or redis did not start")
        rows = {}
        for backend in BACKENDS:
            port = free_port()
            p = subprocess.Popen([proxai, "-c", conf(tmp, backend + ".conf", port, mock_port,
                                                     backend, redis_port)])
            procs.append(p)
            if not wait_port(port, p):
                sys.exit("proxai (%s) did not start" % backend)
            run_requests(port, 200)  # warm-up: connections, script cached by Redis
            lat = sorted(run_requests(port, a.requests))
            stop(p)
            rows[backend] = {
                "p50": lat[len(lat) // 2],
                "p99": lat[int(len(lat) * 0.99)],
                "mean": statistics.fmean(lat),
            }
        if shutil.which("valgrind"):
            n1, n2 = (int(x) for x in a.cg.split(","))
            for backend in BACKENDS:
                irs = []
                for n in (n1, n2):
                    port = free_port()
                    out = os.path.join(tmp, "cg-%s-%d.out" % (backend, n))
                    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                          proxai, "-c", conf(tmp, "cg-%s-%d.conf" % (backend, n), port,
                                                             mock_port, backend, redis_port)],
                                         stderr=subprocess.DEVNULL)
                    procs.append(p)
                    if not wait_port(port, p, 120):
                        sys.exit("proxai under valgrind did not start")
                    run_requests(port, n)
                    stop(p, timeout=120)
                    irs.append(callgrind_total(out))
                if None not in irs:
                    rows[backend]["ir"] = (irs[1] - irs[0]) / (n2 - n1)
        print("| admission | p50 us | p99 us | mean us | added p50 us vs none | proxai instructions/request |")
        print("|---|---|---|---|---|---|")
        for backend, label in (("none", "no limits (no admission)"), ("local", "backend = local"),
                               ("local+budget", "backend = local, budgets (LMDB spend)"),
                               ("redis", "backend = redis"),
                               ("redis+budget", "backend = redis, budgets")):
            r = rows[backend]
            ir = "%.0f" % r["ir"] if "ir" in r else "-"
            print("| %s | %.1f | %.1f | %.1f | %+.1f | %s |" % (
                label, r["p50"], r["p99"], r["mean"], r["p50"] - rows["none"]["p50"], ir))
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
