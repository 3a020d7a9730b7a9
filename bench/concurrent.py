#!/usr/bin/env python3
"""bench/concurrent.py - many large agent-shaped requests at once, beside
nginx: the time to the first event and the gateway's memory per request in
flight.

  python3 bench/concurrent.py [--conns 200] [--kb 300] [--shape claude_code]
                              [--ups chat,responses,gemini] [--runs 3]

One fastmock, one nginx (`proxy_pass` to the mock, as bench.py configures
it) and one proxai (one worker, release build), no valgrind. The body is
bench/agents.py's agent-shaped one (the shape's client protocol, streamed,
about KB kilobytes). Per case and run, CONNS connections each send the body
once, all at once (bench/streamclient -c CONNS -n CONNS), and the mock paces
its 20 deltas 50 ms apart, so that every request is in flight together for
about a second. Cases: nginx (to the mock in the client's protocol), proxai
passing the body through to the same protocol, and proxai translating it to
each upstream protocol of --ups.

proxai is started afresh for each burst (its memory is that burst's alone).
Reported per case (the median run): the time to the first event (median and
slowest of the CONNS requests) and its ratio to nginx's in the same run;
the CPU seconds the server spent on the burst (utime + stime: on a shared
machine steadier than the wall-clock figures) beside nginx's;
for proxai, VmRSS before the burst, its peak while the streams are open
(streamclient -m samples it every 100 ms), the peak growth per request in
flight against the body's size, and VmRSS two seconds after the burst.
Run the script under `nice -n 10` (everything it starts inherits it);
every process started here is stopped by its PID.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from agents import HEADERS, PREFIX, SHAPES, UPS, client_path, generate  # noqa: E402
from bench import Proc, cpu_seconds, free_port, log, nginx_conf, proxai_conf, wait_port  # noqa: E402


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def burst(a, port, path, body_file, hdr, pid=None):
    cmd = [os.path.join(a.build, "bench", "streamclient"), "-p", str(port), "-P", path,
           "-b", body_file, "-c", str(a.conns), "-n", str(a.conns), "-r", "1000",
           "-T", "300"] + hdr
    if pid:
        cmd += ["-m", str(pid)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError("streamclient failed: %s\n%s" % (cmd, out.stderr))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["completed"] != a.conns or r.get("non2xx"):
        raise RuntimeError("burst incomplete (%s): %s" % (path, r))
    return r


def ttfe(r, q):
    t = r.get("ttfe_us") or {}
    return t.get(q)


def run(a):
    tmp = a.tmp
    mp = free_port()
    mock = Proc("fastmock", [os.path.join(a.build, "bench", "fastmock"), "-p", str(mp)], tmp)
    procs = [mock]
    rows = []
    try:
        if not wait_port(mp, mock, 60.0):
            raise RuntimeError("fastmock did not start")
        ngp = free_port()
        ng = Proc("nginx", [a.nginx, "-p", tmp, "-c", nginx_conf(tmp, ngp, mp, master=False),
                            "-e", os.path.join(tmp, "nginx", "error.log")], tmp)
        procs.append(ng)
        if not wait_port(ngp, ng, 60.0):
            raise RuntimeError("nginx did not start (%s)" % tmp)
        proto = SHAPES[a.shape][1]
        hdr = HEADERS.get(proto, [])
        cases = [("nginx", proto)] + [("proxai", proto)] + [
            ("proxai", u) for u in a.ups if u != proto]
        res = {c: [] for c in cases}
        for k in range(a.runs):
            for who, up in cases:
                model = PREFIX[up] + "-n20-p50-c16"
                body = generate(a.shape, a.kb, 1, model)
                bf = os.path.join(tmp, "body-%s.json" % up)
                with open(bf, "wb") as f:
                    f.write(body)
                path = client_path(proto, model, 1)
                if who == "nginx":
                    c0 = cpu_seconds([ng.pid])
                    r = burst(a, ngp, path, bf, hdr)
                    r["cpu_s"] = cpu_seconds([ng.pid]) - c0
                else:  # a fresh proxai per burst: its memory is this burst's alone
                    pxp = free_port()
                    px = Proc("proxai", [a.proxai, "-c", proxai_conf(
                        tmp, pxp, mp, "proxai-conc.conf")], tmp)
                    try:
                        if not wait_port(pxp, px, 60.0):
                            raise RuntimeError("proxai did not start (%s)" % tmp)
                        c0 = cpu_seconds([px.pid])
                        r = burst(a, pxp, path, bf, hdr, px.pid)
                        r["cpu_s"] = cpu_seconds([px.pid]) - c0
                        time.sleep(2.0)
                        r["rss_after_kb"] = rss_kb(px.pid)
                    finally:
                        px.stop()
                r["bytes"] = len(body)
                res[(who, up)].append(r)
                log("run %d %s -> %s: ttfe p50 %s us, max %s us%s" % (
                    k, who, up, ttfe(r, "p50"), ttfe(r, "max"),
                    "" if who == "nginx" else ", rss %d -> %d -> %d KiB" % (
                        r["rss_base_kb"], r["rss_max_kb"], r["rss_after_kb"])))
        for c in cases:
            rows.append({"who": c[0], "up": c[1], "proto": proto, "runs": res[c]})
    finally:
        for p in reversed(procs):
            p.stop()
    return rows


def median_run(runs, key):
    vals = sorted(runs, key=key)
    return vals[len(vals) // 2]


def table(a, rows):
    ng = [r for r in rows if r["who"] == "nginx"][0]
    ng_p50 = statistics.median(ttfe(r, "p50") for r in ng["runs"])
    ng_max = statistics.median(ttfe(r, "max") for r in ng["runs"])
    ng_cpu = statistics.median(r["cpu_s"] for r in ng["runs"])
    out = ["| target | body | first event p50 | / nginx | first event max | / nginx | "
           "CPU per burst | / nginx | RSS before | RSS peak | peak growth per request | "
           "/ body | RSS 2 s after |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        p50 = statistics.median(ttfe(r, "p50") for r in row["runs"])
        mx = statistics.median(ttfe(r, "max") for r in row["runs"])
        size = row["runs"][0]["bytes"]
        name = "nginx" if row["who"] == "nginx" else (
            "proxai pass-through" if row["up"] == row["proto"] else
            "proxai to %s" % row["up"])
        if row["who"] == "nginx":
            mem = ["-"] * 5
        else:
            m = median_run(row["runs"], lambda r: r["rss_max_kb"] - r["rss_base_kb"])
            per = (m["rss_max_kb"] - m["rss_base_kb"]) * 1024.0 / a.conns
            mem = ["{:,} KiB".format(m["rss_base_kb"]), "{:,} KiB".format(m["rss_max_kb"]),
                   "{:,.0f} KiB".format(per / 1024), "%.2fx" % (per / size),
                   "{:,} KiB".format(m["rss_after_kb"])]
        cpu = statistics.median(r["cpu_s"] for r in row["runs"])
        out.append("| %s | %s B | %.1f ms | %.2fx | %.1f ms | %.2fx | %.2f s | %.1fx | %s |" % (
            name, "{:,}".format(size), p50 / 1000, p50 / ng_p50, mx / 1000, mx / ng_max, cpu,
            cpu / ng_cpu if ng_cpu > 0 else 0, " | ".join(mem)))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--proxai", default=None)
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--conns", type=int, default=200)
    ap.add_argument("--kb", type=int, default=300)
    ap.add_argument("--shape", default="claude_code",
                    choices=[s for s in SHAPES if not s.startswith("sdk_")])
    ap.add_argument("--ups", default=",".join(UPS), help="upstream protocols translated to")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    a.proxai = a.proxai or os.path.join(a.build, "proxai")
    a.ups = [u for u in a.ups.split(",") if u in UPS]
    a.tmp = tempfile.mkdtemp(prefix="proxai-conc-")
    try:
        rows = run(a)
    finally:
        if not a.keep:
            shutil.rmtree(a.tmp, ignore_errors=True)
        else:
            log("kept " + a.tmp)
    print(table(a, rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
