#!/usr/bin/env python3
"""Cost of stored Responses (SPEC section 14) per request: a Responses client
talking to an Anthropic upstream (bench/fastmock), translated, three ways:

  * plain:     store: false, nothing kept (the translated request alone);
  * stored:    a new turn, kept: one write to the backend;
  * follow-up: previous_response_id naming a kept turn, store: false: one
               read of the chain (and the expanded body translated).

For [state] backend = redis it counts the Redis commands per request
(INFO commandstats: one EVAL a stored turn, one a follow-up), and for both
backends (redis, and the host's store with [state] dir when this build has
it) it measures the added latency (sequential keep-alive requests, p50 /
p99 in us) and proxai's instructions per request (callgrind, N1 and N2
requests, the difference) when valgrind is installed.

With --chain N (default 50) it also measures memory: a chain of N turns of
--turn-kb KB (300) each is built, then the worker's peak RSS above its RSS
before the request (VmHWM, reset through /proc/PID/clear_refs) is taken for
a follow-up naming the last turn, and for the same conversation sent in full
by the client (store: false): what the chain costs beside what its text costs.

Usage: bench/stored_cost.py [--build build] [--requests 3000] [--cg 100,200]
                            [--chain 50] [--turn-kb 300] [--memory-only]
Every process it starts listens on 127.0.0.1 only and is stopped by its PID.
Not a test: it asserts nothing.
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from state_cost import callgrind_total, free_port, stop, wait_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


def conf(tmp, name, port, mock_port, backend, redis_port, max_body="16m", slow=False):
    """slow: under valgrind (every reply takes some 50 times longer: [state]
    timeout 5 s, or the connection is dropped and turns are not kept)."""
    state = ("[state]\nbackend = redis\nredis = redis://127.0.0.1:%d/0\nprefix = bench:\n%s"
             % (redis_port, "timeout = 5s\n" if slow else "")
             if backend == "redis" else "[state]\ndir = %s\n" % os.path.join(tmp, "store-" + name))
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("""[server]
listen = 127.0.0.1:%d
workers = 1
access_log = off
log_level = warn
max_body = %s
%s
[upstream mock_anthropic]
protocol = anthropic_messages
base_url = http://127.0.0.1:%d
retries = 0

[route *]
upstream = mock_anthropic

[key bench]
secret = sk-bench
""" % (port, max_body, state, mock_port))
    return path


def body(kind, prev):
    b = {"model": "to_anthropic", "max_output_tokens": 16, "input": "Hi"}
    if kind != "stored":
        b["store"] = False
    if kind == "follow-up":
        b["previous_response_id"] = prev
    return json.dumps(b)


def post(c, b):
    c.request("POST", "/v1/responses", b, HEADERS)
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, data[:200]))
    return json.loads(data)


def run_requests(port, kind, n, prev):
    import time
    c = http.client.HTTPConnection("127.0.0.1", port)
    b = body(kind, prev)
    lat = []
    for _ in range(n):
        t = time.perf_counter_ns()
        post(c, b)
        lat.append((time.perf_counter_ns() - t) / 1000)
    c.close()
    return lat


def seed(port):
    """A kept turn (with one before it) for the follow-ups to name."""
    c = http.client.HTTPConnection("127.0.0.1", port)
    first = post(c, json.dumps({"model": "to_anthropic", "input": "Hello"}))["id"]
    second = post(c, json.dumps({"model": "to_anthropic", "input": "Again",
                                 "previous_response_id": first}))["id"]
    c.close()
    return second


def redis_calls(redis_port):
    """(round trips: script calls, every command run inside them included)"""
    out = subprocess.run(["redis-cli", "-p", str(redis_port), "INFO", "commandstats"],
                         capture_output=True, text=True).stdout
    trips = total = 0
    for line in out.splitlines():
        if line.startswith("cmdstat_"):
            n = int(line.split("calls=")[1].split(",")[0])
            total += n
            if line.startswith(("cmdstat_eval:", "cmdstat_evalsha:")):
                trips += n
    return trips, total


def has_dir_option(proxai, tmp, mock_port):
    path = conf(tmp, "check.conf", free_port(), mock_port, "local", 0)
    return subprocess.run([proxai, "--check", "-c", path], capture_output=True).returncode == 0


def worker_pid(master):
    with open("/proc/%d/task/%d/children" % (master, master)) as f:
        kids = f.read().split()
    return int(kids[0]) if kids else master


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def peak_of(pid, fn):
    """Peak RSS above the RSS before fn(), and the file pages it mapped
    (RssFile after less before: the host's store's map), in KiB."""
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")
    before, fbefore = status_kb(pid, "VmRSS"), status_kb(pid, "RssFile")
    fn()
    return status_kb(pid, "VmHWM") - before, status_kb(pid, "RssFile") - fbefore


def chain_memory(proxai, tmp, mock_port, redis_port, backend, turns, turn_kb):
    """A fresh proxai for each measurement (the chain stays in the backend):
    memory a worker's allocator kept from one does not hide the next."""
    path = conf(tmp, "chain-%s.conf" % backend, free_port(), mock_port, backend, redis_port,
                max_body="64m")

    def started():
        port = int(open(path).read().split("listen = 127.0.0.1:")[1].split()[0])
        p = subprocess.Popen([proxai, "-c", path])
        if not wait_port(port, p):
            sys.exit("proxai (chain) did not start")
        return p, http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    p, c = started()
    prev, items = None, []
    try:
        for i in range(turns):
            text = ("%02d:" % i) + "y" * (turn_kb * 1024)
            b = {"model": "to_anthropic", "input": text}
            if prev:
                b["previous_response_id"] = prev
            r = post(c, json.dumps(b))
            prev = r["id"]
            items.append({"role": "user", "content": text})
            items += r["output"]
    finally:
        stop(p)
    follow = json.dumps({"model": "to_anthropic", "input": "end", "store": False,
                         "previous_response_id": prev})
    full = json.dumps({"model": "to_anthropic", "store": False,
                       "input": items + [{"role": "user", "content": "end"}]})
    peaks = {}
    for name, b in (("follow-up", follow), ("full", full)):
        p, c = started()
        try:
            post(c, json.dumps({"model": "to_anthropic", "input": "warm", "store": False}))
            peaks[name] = peak_of(worker_pid(p.pid), lambda: post(c, b))
        finally:
            stop(p)
    return len(full), peaks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--cg", default="100,200", help="N1,N2 requests under callgrind")
    ap.add_argument("--chain", type=int, default=50, help="turns of the memory chain (0: none)")
    ap.add_argument("--turn-kb", type=int, default=300)
    ap.add_argument("--memory-only", action="store_true", help="only the chain's memory")
    a = ap.parse_args()
    proxai = os.path.join(a.build, "proxai")
    fastmock = os.path.join(a.build, "bench", "fastmock")
    redis_bin = shutil.which("redis-server")
    if not redis_bin:
        sys.exit("redis-server not found (Debian package redis-server)")
    tmp = tempfile.mkdtemp(prefix="proxai-stored-bench-")
    procs = []
    kinds = ("plain", "stored", "follow-up")
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
        backends = ["redis"] + (["local"] if has_dir_option(proxai, tmp, mock_port) else [])
        rows = {}
        for backend in [] if a.memory_only else backends:
            port = free_port()
            p = subprocess.Popen([proxai, "-c", conf(tmp, backend + ".conf", port, mock_port,
                                                     backend, redis_port)])
            procs.append(p)
            if not wait_port(port, p):
                sys.exit("proxai (%s) did not start" % backend)
            prev = seed(port)
            for kind in kinds:
                run_requests(port, kind, 200, prev)  # warm-up
                before = redis_calls(redis_port)
                lat = sorted(run_requests(port, kind, a.requests, prev))
                after = redis_calls(redis_port)
                calls = tuple((after[i] - before[i]) / a.requests for i in (0, 1))
                rows[(backend, kind)] = {
                    "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)],
                    "mean": statistics.fmean(lat), "redis": calls if backend == "redis" else None,
                }
            stop(p)
        if shutil.which("valgrind") and not a.memory_only:
            n1, n2 = (int(x) for x in a.cg.split(","))
            for backend in backends:
                for kind in kinds:
                    irs = []
                    for n in (n1, n2):
                        port = free_port()
                        out = os.path.join(tmp, "cg-%s-%s-%d.out" % (backend, kind, n))
                        cfg = conf(tmp, "cg-%s.conf" % backend, port, mock_port, backend, redis_port,
                                   slow=True)
                        p = subprocess.Popen(["valgrind", "--tool=callgrind",
                                              "--callgrind-out-file=" + out, proxai, "-c", cfg],
                                             stderr=subprocess.DEVNULL)
                        procs.append(p)
                        if not wait_port(port, p, 120):
                            sys.exit("proxai under valgrind did not start")
                        prev = seed(port)
                        run_requests(port, kind, n, prev)
                        stop(p, timeout=120)
                        irs.append(callgrind_total(out))
                    if None not in irs:
                        rows[(backend, kind)]["ir"] = (irs[1] - irs[0]) / (n2 - n1)
        if not a.memory_only:
            print("| backend | request | p50 us | p99 us | mean us | added p50 us vs plain "
                  "| Redis round trips/request (commands) | proxai instructions/request |")
            print("|---|---|---|---|---|---|---|---|")
        for backend in [] if a.memory_only else backends:
            base = rows[(backend, "plain")]["p50"]
            for kind in kinds:
                r = rows[(backend, kind)]
                ir = "%.0f" % r["ir"] if "ir" in r else "-"
                rc = "%.2f (%.1f)" % r["redis"] if r["redis"] is not None else "-"
                label = "redis" if backend == "redis" else "local ([state] dir)"
                print("| %s | %s | %.1f | %.1f | %.1f | %+.1f | %s | %s |" % (
                    label, kind, r["p50"], r["p99"], r["mean"], r["p50"] - base, rc, ir))
        if a.chain > 0:
            print()
            print("| backend | chain | conversation bytes | peak RSS added, follow-up (MiB) "
                  "| of which the store's file pages (MiB) "
                  "| peak RSS added, the same sent in full (MiB) |")
            print("|---|---|---|---|---|---|")
            for backend in backends:
                n, peaks = chain_memory(proxai, tmp, mock_port, redis_port, backend, a.chain,
                                        a.turn_kb)
                print("| %s | %d x %d KiB | %d | %.1f | %.1f | %.1f |" % (
                    backend, a.chain, a.turn_kb, n, peaks["follow-up"][0] / 1024.0,
                    peaks["follow-up"][1] / 1024.0, peaks["full"][0] / 1024.0))
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
