#!/usr/bin/env python3
"""bench/events.py - cost of translated streams: instructions per SSE event
and RSS per concurrent stream, for every translated pair.

  python3 bench/events.py ir  [--n 1000] [--pairs anthropic>chat,...]
  python3 bench/events.py mem [--streams 2000] [--lanes default,curl]

ir:  proxai under `valgrind --tool=callgrind` serves ONE long translated
     stream of N text deltas from bench/fastmock (unpaced, 32 bytes of text
     per delta), then, in a second run, one of 2N deltas; (Ir(2N) - Ir(N)) / N
     is the cost of one upstream event read, decoded, re-encoded and written,
     without start-up, the request and the stream's first and last events.
mem: proxai (no valgrind) holds S concurrent paced streams (10 deltas 1 s
     apart) opened by bench/streamclient (--ramp new connections per ms);
     RSS per stream = (peak - idle) / S, per lane (default = built-in
     HTTP/1.1, curl = libcurl) and pair; a stream is stalled when a gap
     between its events exceeds 3 s (3 paces, as bench.py) or it does not
     finish.

Pairs are client>upstream over chat, responses, anthropic and gemini
clients; upstreams are the three protocols bench/fastmock serves (it has no
Gemini upstream, so gemini appears only as a client). Needs a release build
with bench tools (`meson setup build --buildtype=release && ninja -C build`;
`--build DIR`). Every process started here is stopped by its PID.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

UPSTREAMS = {"chat": "to_chat", "responses": "to_resp", "anthropic": "to_anth",
             "gemini": "to_gem"}
CLIENTS = ["chat", "responses", "anthropic", "gemini"]
PAIRS = [(c, u) for c in CLIENTS for u in UPSTREAMS if c != u]
IR_TARGET = 3000  # instructions per translated event (issue 12)

GEMINI_BODY = ('{"systemInstruction":{"parts":[{"text":"You are a helpful assistant. '
               'Answer briefly."}]},"contents":[{"role":"user","parts":[{"text":"Write '
               'one short sentence that says hello to the benchmark."}]}],'
               '"generationConfig":{"maxOutputTokens":256,"temperature":0.7}}')


# the process, port and log helpers are bench.py's (same directory)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Proc, free_port, log, wait_port  # noqa: E402


def conf(tmp, port, mock_port, lane):
    path = os.path.join(tmp, "proxai-%s.conf" % lane)
    with open(path, "w") as f:
        f.write("[server]\nlisten = 127.0.0.1:%d\nworkers = 1\nmax_connections = 20000\n"
                "access_log = off\nlog_level = warn\n" % port)
        for up, proto, base in (("mock_chat", "openai_chat_completions", "/v1"),
                                ("mock_resp", "openai_responses", "/v1"),
                                ("mock_anth", "anthropic_messages", ""),
                                ("mock_gem", "gemini_generate_content", "")):
            f.write("\n[upstream %s]\nprotocol = %s\nbase_url = http://127.0.0.1:%d%s\n"
                    "max_connections = 20000\nretries = 0\nidle_timeout = 120s\n"
                    % (up, proto, mock_port, base))
            if lane == "curl":
                f.write("client = curl\n")
        for prefix, up in (("to_chat", "mock_chat"), ("to_resp", "mock_resp"),
                           ("to_anth", "mock_anth"), ("to_gem", "mock_gem")):
            f.write("\n[route %s*]\nupstream = %s\n" % (prefix, up))
    return path


def request(tmp, client, model):
    """(path, body file, extra headers) of a streaming request."""
    if client == "gemini":
        path = "/v1beta/models/%s:streamGenerateContent?alt=sse" % model
        text = GEMINI_BODY
    else:
        path = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
                "anthropic": "/v1/messages"}[client]
        with open(os.path.join(HERE, "bodies", client + ".json")) as f:
            s = ',"stream":true'
            if client == "chat":
                s += ',"stream_options":{"include_usage":true}'
            text = f.read().strip().replace("MODEL", model).replace("STREAM", s)
    json.loads(text)
    bf = os.path.join(tmp, "body-%s-%s.json" % (client, model))
    with open(bf, "w") as f:
        f.write(text)
    hdr = ["-H", "anthropic-version: 2023-06-01"] if client == "anthropic" else []
    return path, bf, hdr


def stream_client(a, port, client, model, extra, timeout=600):
    path, bf, hdr = request(a.tmp, client, model)
    cmd = [os.path.join(a.build, "bench", "streamclient"), "-p", str(port), "-P", path,
           "-b", bf] + hdr + extra
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError("streamclient failed: %s\n%s" % (cmd, out.stderr))
    return json.loads(out.stdout.strip().splitlines()[-1])


def cg_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("no total in " + path)


def run_ir(a, mock_port):
    rows = []
    for client, up in a.pairs:
        irs = []
        for n in (a.n, 2 * a.n):
            port = free_port()
            outf = os.path.join(a.tmp, "cg-%s-%s-%d.out" % (client, up, n))
            p = Proc("cg-%s-%s-%d" % (client, up, n),
                     ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + outf,
                      a.proxai, "-c", conf(a.tmp, port, mock_port, a.lane)], a.tmp)
            try:
                if not wait_port(port, p, 60.0):
                    raise RuntimeError("proxai under valgrind did not start")
                model = "%s-n%d-p0-c32" % (UPSTREAMS[up], n)
                r = stream_client(a, port, client, model, ["-n", "1"])
                if r["completed"] != 1 or r.get("non2xx") or r["events"] < n:
                    raise RuntimeError("stream incomplete: %s" % r)
            finally:
                p.stop(timeout=120)
            irs.append(cg_total(outf))
        per = (irs[1] - irs[0]) / a.n
        log("%s > %s: %.0f instructions per event" % (client, up, per))
        rows.append((client, up, per))
    print("\n| client > upstream | instructions per event (%s lane) | <= %s |"
          % (a.lane, "{:,}".format(IR_TARGET)))
    print("|---|---|---|")
    for client, up, per in rows:
        print("| %s > %s | %s | %s |" % (client, up, "{:,.0f}".format(per),
                                        "yes" if per <= IR_TARGET else "NO"))
    return rows


def run_mem(a, mock_port):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 3 * a.streams + 100
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    rows = []
    for lane in a.lanes:
        for client, up in a.pairs:
            port = free_port()
            p = Proc("mem-%s-%s-%s" % (lane, client, up),
                     [a.proxai, "-c", conf(a.tmp, port, mock_port, lane)], a.tmp)
            try:
                if not wait_port(port, p, 60.0):
                    raise RuntimeError("proxai did not start")
                model = "%s-n10-p1000-c32" % UPSTREAMS[up]
                stream_client(a, port, client, model, ["-n", "1"])  # warm
                r = stream_client(a, port, client, model,
                                  ["-c", str(a.streams), "-r", str(a.ramp), "-s", "3000",
                                   "-T", "120", "-m", str(p.pid)])
            finally:
                p.stop(timeout=120)
            kib = (r["rss_max_kb"] - r["rss_base_kb"]) / a.streams
            log("%s %s > %s: %.1f KiB per stream (completed %d, stalled %d)" %
                (lane, client, up, kib, r["completed"], r["stalled"]))
            rows.append((lane, client, up, kib, r["completed"], r["stalled"]))
    print("\n| lane | client > upstream | streams | completed | stalled | RSS per stream KiB |")
    print("|---|---|---|---|---|---|")
    for lane, client, up, kib, done, st in rows:
        print("| %s | %s > %s | %d | %d | %d | %.1f |" % (lane, client, up, a.streams, done,
                                                       st, kib))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["ir", "mem"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--proxai", default=None)
    ap.add_argument("--n", type=int, default=1000, help="ir: deltas of the short run")
    ap.add_argument("--lane", default="default", help="ir: default or curl")
    ap.add_argument("--lanes", default="default,curl", help="mem: lanes")
    ap.add_argument("--streams", type=int, default=2000, help="mem: concurrent streams")
    ap.add_argument("--ramp", type=int, default=4, help="mem: new connections per ms")
    ap.add_argument("--pairs", default="", help="e.g. anthropic>chat,chat>responses")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    a.proxai = a.proxai or os.path.join(a.build, "proxai")
    a.lanes = a.lanes.split(",")
    a.pairs = [tuple(x.split(">")) for x in a.pairs.split(",")] if a.pairs else PAIRS
    a.tmp = tempfile.mkdtemp(prefix="proxai-events-")
    mp = free_port()
    mock = Proc("fastmock", [os.path.join(a.build, "bench", "fastmock"), "-p", str(mp)],
                a.tmp)
    try:
        if not wait_port(mp, mock, 60.0):
            raise SystemExit("fastmock did not start (see %s)" % a.tmp)
        (run_ir if a.mode == "ir" else run_mem)(a, mp)
    finally:
        mock.stop(timeout=120)
        if not a.keep:
            subprocess.run(["rm", "-rf", a.tmp])
        else:
            log("kept " + a.tmp)


if __name__ == "__main__":
    main()
