#!/usr/bin/env python3
"""Cost of tracing per request (SPEC section 15, issue 25): no [trace],
[trace] with sample = 0 (the trace context propagated, nothing recorded) and
[trace] with sample = 1 (two spans per request written and exported to a
local collector that answers 200), for chat pass-through and an Anthropic
client translated to a Chat upstream, against bench/fastmock.

Measures, on loopback:
  * instructions per request in proxai (callgrind, N1 and N2 sequential
    requests, the difference: span encoding and the exports of the run
    included), when valgrind is installed. The requests are --pause ms
    apart (3 by default): back to back, how the loop groups the reads of
    the client, the upstream and the collector depends on timing under
    valgrind, and the libuv and read work a request took moved by +-1.5k
    instructions between runs of the same binary (sample = 0 measured
    +6 % over no [trace] in one run); spaced, each request meets an idle
    loop, and the totals repeat within ~100 instructions;
  * instructions per request inside the tracing functions (callgrind's
    inclusive cost of the trace entry points, TRACE_ROOTS, the part one
    calls of another not counted twice): the steadier view, as the totals
    move by several hundred instructions between runs of the same binary
    (the loop's grouping of reads, malloc's state);
  * latency of N sequential keep-alive requests, p50 / p99 in us.

Usage: bench/trace_cost.py [--build build] [--requests 3000] [--cg 200,600]
                           [--binary LABEL=PATH ...] [--cases CASE,...]
                           [--pause MS] [--keep DIR]
--binary (repeatable) measures each given proxai binary in the same run
(e.g. before=/tmp/old/proxai after=build/proxai); --requests 0 skips the
latency rounds.
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


import http.server
import threading


def conf(tmp, name, port, mock_port, mode, collector_port):
    trace = ""
    if mode != "off":
        trace = "[trace]\nendpoint = http://127.0.0.1:%d/v1/traces\nsample = %s\n" % (
            collector_port, "0" if mode == "sample0" else "1")
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("""[server]
listen = 127.0.0.1:%d
workers = 1
access_log = off
log_level = warn

[upstream mock_chat]
protocol = openai_chat_completions
base_url = http://127.0.0.1:%d/v1
retries = 0

[route *]
upstream = mock_chat

[key bench]
secret = sk-bench
%s""" % (port, mock_port, trace))
    return path


CHAT_H = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
ANTH_H = {"content-type": "application/json", "x-api-key": "sk-bench",
          "anthropic-version": "2023-06-01"}
MSGS = [{"role": "user", "content": "Hi"}]
# small bodies; a stream of 3 text deltas (fastmock: model suffix -n3)
CASES = {
    "chat>chat": ("/v1/chat/completions", json.dumps(
        {"model": "to_chat", "max_tokens": 16, "messages": MSGS}), CHAT_H),
    "anthropic>chat": ("/v1/messages", json.dumps(
        {"model": "to_chat", "max_tokens": 16, "messages": MSGS}), ANTH_H),
    "chat>chat stream": ("/v1/chat/completions", json.dumps(
        {"model": "to_chat-n3", "max_tokens": 16, "messages": MSGS, "stream": True,
         "stream_options": {"include_usage": True}}), CHAT_H),
    "anthropic>chat stream": ("/v1/messages", json.dumps(
        {"model": "to_chat-n3", "max_tokens": 16, "messages": MSGS, "stream": True}), ANTH_H),
}


def run_requests(port, n, case, pause=0.0):
    path, body, headers = CASES[case]
    c = http.client.HTTPConnection("127.0.0.1", port)
    lat = []
    for _ in range(n):
        if pause:
            time.sleep(pause)
        t = time.perf_counter_ns()
        c.request("POST", path, body, headers)
        r = c.getresponse()
        r.read()
        lat.append((time.perf_counter_ns() - t) / 1000)
        if r.status != 200:
            raise RuntimeError("status %d" % r.status)
    c.close()
    return lat


class Collector(http.server.BaseHTTPRequestHandler):
    """Takes OTLP/JSON exports and answers 200; counts spans."""
    spans = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        for rs in json.loads(body).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                Collector.spans += len(ss.get("spans", []))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


# The entry points of the traced work: the context and the upstream
# traceparent (px_trace_begin, px_exch_trace_attempt), the answer's reading
# (px_exch_trace_answer, px_exch_trace_stream), the spans' records and
# encoding (emit_attempt, px_trace_emit) and the exporter's batches
# (send_batch). Not in them: the span records' glue inlined into the
# exchange's finalize, the pass-through watcher's own event checks, the
# exporter's transfer once started (the loop's I/O).
TRACE_ROOTS = ("px_trace_begin", "px_exch_trace_attempt", "px_exch_trace_answer",
               "px_exch_trace_stream", "emit_attempt", "px_trace_emit", "send_batch")


def trace_inclusive(path):
    """{root: inclusive instructions} of TRACE_ROOTS in a callgrind output,
    the cost of calls from one root to another counted in the caller only."""
    try:
        out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--tree=caller",
                              "--threshold=100", path], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    res, callers = {}, []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0][0].isdigit():
            callers = [] if not line.strip() else callers
            continue
        cost = int(parts[0].replace(",", ""))
        rest = [w for w in parts[1:] if w in ("<", "*") or ":" in w]
        if len(rest) < 2:
            continue
        if rest[0] == "<":
            callers.append((rest[1].rsplit(":", 1)[-1], cost))
        elif rest[0] == "*":
            fn = rest[1].rsplit(":", 1)[-1]
            if fn in TRACE_ROOTS:
                res[fn] = res.get(fn, 0) + cost - sum(c for f, c in callers if f in TRACE_ROOTS)
            callers = []
    return res


def callgrind_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--cg", default="200,600", help="N1,N2 requests under callgrind")
    ap.add_argument("--binary", action="append", default=[],
                    help="LABEL=PATH of a proxai to measure (default: BUILD/proxai)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    ap.add_argument("--keep", help="a directory to keep the callgrind outputs in")
    ap.add_argument("--pause", type=float, default=3,
                    help="ms between requests under callgrind (0: none)")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.binary] or [["", os.path.join(a.build, "proxai")]]
    cases = a.cases.split(",")
    fastmock = os.path.join(a.build, "bench", "fastmock")
    tmp = tempfile.mkdtemp(prefix="proxai-trace-bench-")
    procs = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    cport = srv.server_address[1]
    modes = (("off", "no [trace]"), ("sample0", "[trace] sample = 0"), ("on", "[trace] sample = 1"))
    try:
        mock_port = free_port()
        mock = subprocess.Popen([fastmock, "-p", str(mock_port)])
        procs.append(mock)
        if not wait_port(mock_port, mock):
            sys.exit("mock did not start")
        rows = {}
        for label, proxai in bins:
            for case in cases:
                for mode, _ in modes:
                    r = rows[(label, case, mode)] = {}
                    if a.requests <= 0:
                        continue
                    port = free_port()
                    p = subprocess.Popen([proxai, "-c", conf(tmp, mode + ".conf", port,
                                                             mock_port, mode, cport)])
                    procs.append(p)
                    if not wait_port(port, p):
                        sys.exit("proxai (%s) did not start" % mode)
                    run_requests(port, 200, case)
                    lat = sorted(run_requests(port, a.requests, case))
                    stop(p)
                    r["p50"], r["p99"] = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
        if shutil.which("valgrind"):
            n1, n2 = (int(x) for x in a.cg.split(","))
            for label, proxai in bins:
                for case in cases:
                    for mode, _ in modes:
                        irs, incl = [], []
                        for n in (n1, n2):
                            port = free_port()
                            name = "cg-%s-%s-%s-%d.out" % (label, case.replace(">", "-").replace(
                                " ", "-"), mode, n)
                            out = os.path.join(a.keep or tmp, name)
                            p = subprocess.Popen(["valgrind", "--tool=callgrind",
                                                  "--callgrind-out-file=" + out, proxai, "-c",
                                                  conf(tmp, "cg.conf", port, mock_port, mode,
                                                       cport)],
                                                 stderr=subprocess.DEVNULL)
                            procs.append(p)
                            if not wait_port(port, p, 120):
                                sys.exit("proxai under valgrind did not start")
                            run_requests(port, n, case, a.pause / 1000)
                            time.sleep(1.5)  # the last batch leaves before the stop
                            stop(p, timeout=120)
                            irs.append(callgrind_total(out))
                            incl.append(trace_inclusive(out))
                        r = rows[(label, case, mode)]
                        if None not in irs:
                            r["ir"] = (irs[1] - irs[0]) / (n2 - n1)
                        if None not in incl:
                            r["fn"] = {f: (incl[1].get(f, 0) - incl[0].get(f, 0)) / (n2 - n1)
                                       for f in TRACE_ROOTS}
        head = "| binary " if len(bins) > 1 else ""
        print(head + "| case | tracing | p50 us | p99 us | proxai instructions/request "
              "| vs no [trace] | in tracing functions | vs no [trace] |")
        print("|---" * (8 + (len(bins) > 1)) + "|")
        for label, _ in bins:
            for case in cases:
                base = rows[(label, case, "off")].get("ir")
                fn_off = rows[(label, case, "off")].get("fn")
                for mode, mlabel in modes:
                    r = rows[(label, case, mode)]
                    ir = "%.0f" % r["ir"] if "ir" in r else "-"
                    rel = "%+.1f%%" % (100 * (r["ir"] - base) / base) if "ir" in r and base else "-"
                    lat = ("%.1f | %.1f" % (r["p50"], r["p99"])) if "p50" in r else "- | -"
                    tf = sum(r["fn"].values()) if "fn" in r else None
                    tfs = "%.0f" % tf if tf is not None else "-"
                    trel = ("%+.1f%%" % (100 * (tf - sum(fn_off.values())) / base)
                            if tf is not None and fn_off and base else "-")
                    print(("| %s " % label if len(bins) > 1 else "") +
                          "| %s | %s | %s | %s | %s | %s | %s |" % (case, mlabel, lat, ir, rel,
                                                                   tfs, trel))
        print("\ninstructions/request inside each tracing entry point (inclusive):")
        for label, _ in bins:
            for case in cases:
                for mode, mlabel in modes[1:]:
                    r = rows[(label, case, mode)]
                    if "fn" in r:
                        print("  %s%s, %s: %s" % (label + " " if label else "", case, mlabel,
                              ", ".join("%s %.0f" % (f, c) for f, c in r["fn"].items() if c)))
        print("\nspans received by the collector: %d" % Collector.spans)
    finally:
        srv.shutdown()
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
