#!/usr/bin/env python3
"""bench/agents.py - what coding agents' traffic costs: agent-shaped bodies,
nginx proxy_pass of the same body beside proxai passing it through and
translating it, instructions per request under callgrind, in one run.

  python3 bench/agents.py gen DIR [--sizes 20,100,300]   # write the bodies
  python3 bench/agents.py ir [--sizes 20,100,300] [--shapes claude_code,...]
  python3 bench/agents.py ir --shapes sdk_chat,sdk_responses,sdk_anthropic,sdk_gemini \
                             --sizes 0 --streams 1      # the small SDK bodies, streamed
                             [--streams 0,1] [--n 3] [--ups all]

The bodies are generated deterministically from the real requests in
test/agents/captured/ (Claude Code: Anthropic Messages; Codex: OpenAI
Responses; Gemini CLI: Gemini generateContent): the capture's last request
(system blocks with cache_control, 9-16 tools with their JSON schemas,
thinking / reasoning with opaque signatures, include, prompt_cache_key,
thinkingConfig, thoughtSignature parts), its elided texts filled with
pseudo-random prose and code (quotes, backslashes, newlines, some
non-ASCII), then grown with tool-call rounds (an assistant turn with a tool
call, a user turn with its output) to the size asked: 20 KB about 8 turns,
100 KB about 20, 300 KB about 40. The same seed gives the same bytes.

ir: one proxai and one nginx (`proxy_pass` to bench/fastmock, as bench.py
configures it) each under `valgrind --tool=callgrind`; per case one warm-up
request, then the counters are zeroed (callgrind_control -z), N sequential
requests sent (bench/streamclient) and the counters dumped
(callgrind_control -d): instructions per request = the dump's total / N.
Cases: each shape x size x streamed or not, through nginx (the client's
protocol to the mock), through proxai to the same protocol (pass-through)
and to every other upstream protocol (translated). Needs a release build
with the bench tools (`--build DIR`, default build/). Every process started
here is stopped by its PID.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CAPTURED = os.path.join(ROOT, "test", "agents", "captured")

sys.path.insert(0, HERE)
from bench import Proc, free_port, log, nginx_conf, proxai_conf, wait_port  # noqa: E402

# shape: (capture file, client protocol); sdk_*: the bench's small SDK body
# (bench/bodies/<protocol>.json, about 250 bytes; the size is ignored)
SHAPES = {
    "claude_code": ("claude_code-2.1.330.json", "anthropic"),
    "codex": ("codex-0.169.0-gpt-5.1-codex.json", "responses"),
    "gemini_cli": ("gemini_cli-0.61.0.json", "gemini"),
    "sdk_chat": (None, "chat"),
    "sdk_responses": (None, "responses"),
    "sdk_anthropic": (None, "anthropic"),
    "sdk_gemini": (None, "gemini"),
}
PREFIX = {"chat": "to_chat", "responses": "to_resp", "anthropic": "to_anth",
          "gemini": "to_gem"}
UPS = ["chat", "responses", "anthropic", "gemini"]
ROUNDS = {20: 4, 100: 10, 300: 20}  # tool rounds (two turns each) per size
HEADERS = {"anthropic": ["-H", "anthropic-version: 2023-06-01"]}

WORDS = ("the a of to in is that for it with as was on be by this are from or have "
         "an which one you were all we when there can use file function return value "
         "request response model token stream buffer config parse error test build "
         "module index string object array handler server client upstream gateway "
         "é → 日本 ünïcode").split()
CODE = ["def f(x):\n    return x + 1\n", "if (p == NULL) return -1;\n",
        "    \"key\": \"value\",\n", "path = \"C:\\\\work\\\\src\"\n",
        "printf(\"%d\\n\", n);\n", "\tfor (i = 0; i < n; i++) {\n",
        "<div class=\"x\">&amp;</div>\n", "$ ls -la /tmp\n", "}\n"]


def text(rng, n, code=False):
    """n characters (about) of prose, or code-like lines with quotes,
    backslashes, tabs and newlines."""
    out, size = [], 0
    while size < n:
        if code and rng.random() < 0.5:
            w = rng.choice(CODE)
        else:
            w = rng.choice(WORDS) + (" " if rng.random() < 0.9 else ".\n")
        out.append(w)
        size += len(w)
    return "".join(out)[:n]


PLACEHOLDER = re.compile(r"<text: (\d+) chars>|\.\.\. <(\d+) chars>")


def fill(v, rng, cap):
    """The capture with its elided texts filled (each at most cap chars)."""
    if isinstance(v, dict):
        return {k: fill(x, rng, cap) for k, x in v.items()}
    if isinstance(v, list):
        return [fill(x, rng, cap) for x in v]
    if isinstance(v, str):
        def rep(m):
            return text(rng, min(int(m.group(1) or m.group(2)), cap))
        return PLACEHOLDER.sub(rep, v).replace("<id-", "id").replace(">", "")
    return v


def size_of(b):
    return len(json.dumps(b, separators=(",", ":"), ensure_ascii=False).encode())


def claude_round(rng, k, out_len):
    tid = "toolu_%02d%s" % (k, "".join(rng.choice("abcdefghjk") for _ in range(18)))
    cmd = text(rng, 60, code=True)
    asst = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": text(rng, 200),
         "signature": "c2ln" + "".join(rng.choice("ABCDEFGH0123") for _ in range(120))},
        {"type": "text", "text": text(rng, 80)},
        {"type": "tool_use", "id": tid, "name": rng.choice(["Bash", "Read", "Edit", "Grep"]),
         "input": {"command": cmd, "description": text(rng, 40)}}]}
    res = {"type": "tool_result", "tool_use_id": tid,
           "content": text(rng, out_len, code=True), "is_error": False}
    return [asst, {"role": "user", "content": [res]}]


def codex_round(rng, k, out_len):
    cid = "call_%02d%s" % (k, "".join(rng.choice("abcdefghjk") for _ in range(16)))
    args = json.dumps({"cmd": text(rng, 60, code=True), "workdir": "/work/src",
                       "yield_time_ms": 1000})
    return [
        {"type": "reasoning", "id": "rs_%02d" % k,
         "summary": [{"type": "summary_text", "text": text(rng, 160)}], "content": None,
         "encrypted_content": "gAAAA" + "".join(rng.choice("ABCDEFGH0123") for _ in range(200))},
        {"type": "function_call", "status": "completed", "id": "fc_%02d" % k,
         "name": "exec_command", "arguments": args, "call_id": cid},
        {"type": "function_call_output", "call_id": cid,
         "output": "Chunk ID: %06x\nWall time: 0.0169 seconds\nProcess exited with code 0\n"
                   "Output:\n" % k + text(rng, out_len, code=True)},
    ]


def gemini_round(rng, k, out_len):
    name = rng.choice(["run_shell_command", "read_file", "search_file_content"])
    fid = "%s_%d_%d" % (name, 1795592045375 + k, k)
    return [
        {"role": "model", "parts": [
            {"text": text(rng, 80)},
            {"functionCall": {"id": fid, "name": name,
                              "args": {"command": text(rng, 60, code=True)}},
             "thoughtSignature": "Z2Vt" + "".join(rng.choice("ABCDEFGH0123")
                                                  for _ in range(120))}]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": fid, "name": name,
                                  "response": {"output": text(rng, out_len, code=True)}}}]},
    ]


def generate(shape, kb, stream, model):
    """The body (bytes) of an agent-shaped request of about kb KB."""
    fname, proto = SHAPES[shape]
    if fname is None:
        with open(os.path.join(HERE, "bodies", proto + ".json")) as f:
            text = f.read().strip()
        st = ""
        if stream and proto != "gemini":
            st = ',"stream":true'
            if proto == "chat":
                st += ',"stream_options":{"include_usage":true}'
        return text.replace("MODEL", model).replace("STREAM", st).encode()
    with open(os.path.join(CAPTURED, fname)) as f:
        base = json.load(f)[-1]["body"]
    rng = random.Random("%s-%d" % (shape, kb))
    # elided texts at most this long, so that the small body stays small
    b = fill(base, rng, {20: 300, 100: 3000}.get(kb, 1 << 30))
    rounds = ROUNDS.get(kb, max(4, kb // 15))
    target = kb * 1000
    key, mk = {"anthropic": ("messages", claude_round), "responses": ("input", codex_round),
               "gemini": ("contents", gemini_round)}[proto]
    # the capture's own last turn (the tool result) ends the conversation
    conv = b[key]
    head, tail = conv[:-1], conv[-1:]
    per = max(200, (target - size_of(b)) // rounds - 900)
    for k in range(rounds):
        head += mk(rng, k, per)
    b[key] = head + tail
    if proto == "anthropic":  # cache_control on the last tool_result, as Claude Code
        b[key][-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    if proto == "gemini":
        b.pop("model", None)
    else:
        b["model"] = model
        b["stream"] = bool(stream)
    return json.dumps(b, separators=(",", ":"), ensure_ascii=False).encode()


def client_path(proto, model, stream):
    if proto == "gemini":
        return "/v1beta/models/%s:%s" % (
            model, "streamGenerateContent?alt=sse" if stream else "generateContent")
    return {"anthropic": "/v1/messages", "responses": "/v1/responses",
            "chat": "/v1/chat/completions"}[proto]


# ------------------------------------------------------------------ ir


class Target:
    """A server under callgrind, measured case by case with
    callgrind_control (zero, requests, dump)."""

    def __init__(self, a, name, cmd_of_port):
        self.a = a
        self.port = free_port()
        self.outf = os.path.join(a.tmp, "cg-%s.out" % name)
        vg = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + self.outf]
        self.p = Proc("cg-" + name, ["nice", "-n", str(a.nice)] + vg +
                      cmd_of_port(self.port), a.tmp)
        if not wait_port(self.port, self.p, 120.0):
            raise RuntimeError("%s under valgrind did not start (%s)" % (name, a.tmp))

    def control(self, flag):
        # nice execs valgrind: the pid is valgrind's
        out = subprocess.run(["callgrind_control", flag, str(self.p.pid)],
                             capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError("callgrind_control %s: %s" % (flag, out.stderr))

    def requests(self, path, body_file, hdr, n):
        cmd = [os.path.join(self.a.build, "bench", "streamclient"), "-p", str(self.port),
               "-P", path, "-b", body_file, "-n", str(n), "-T", "1200"] + hdr
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError("streamclient failed: %s\n%s" % (cmd, out.stderr))
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if r["completed"] != n or r.get("non2xx"):
            raise RuntimeError("requests incomplete (%s): %s" % (path, r))
        return r

    def measure(self, path, body_file, hdr, n):
        self.requests(path, body_file, hdr, 1)  # warm-up (and the check)
        before = set(os.listdir(self.a.tmp))
        self.control("-z")
        self.requests(path, body_file, hdr, n)
        self.control("-d")
        end = time.time() + 60
        while time.time() < end:
            new = [f for f in set(os.listdir(self.a.tmp)) - before
                   if f.startswith(os.path.basename(self.outf) + ".")]
            if new:
                with open(os.path.join(self.a.tmp, new[0])) as f:
                    for line in f:
                        if line.startswith("summary:") or line.startswith("totals:"):
                            return int(line.split()[1]) / n
            time.sleep(0.1)
        raise RuntimeError("no callgrind dump")

    def stop(self):
        self.p.stop(timeout=300)


def run_ir(a):
    mp = free_port()
    mock = Proc("fastmock", [os.path.join(a.build, "bench", "fastmock"), "-p", str(mp)],
                a.tmp)
    targets = []
    rows = []
    try:
        if not wait_port(mp, mock, 60.0):
            raise RuntimeError("fastmock did not start")
        ng = Target(a, "nginx", lambda port: [
            a.nginx, "-p", a.tmp, "-c", nginx_conf(a.tmp, port, mp, master=False), "-e",
            os.path.join(a.tmp, "nginx", "error.log")])
        targets.append(ng)
        px = Target(a, "proxai", lambda port: [
            a.proxai, "-c", proxai_conf(a.tmp, port, mp, "proxai-agents.conf")])
        targets.append(px)
        for shape in a.shapes:
            proto = SHAPES[shape][1]
            for kb in a.sizes:
                for stream in a.streams:
                    ups = [proto] + [u for u in a.ups if u != proto]
                    row = {"shape": shape, "kb": kb, "stream": stream, "ir": {}}
                    for up in ups:
                        model = PREFIX[up] + "-n20-p0-c16"
                        body = generate(shape, kb, stream, model)
                        bf = os.path.join(a.tmp, "body-%s-%d-%d-%s.json"
                                          % (shape, kb, stream, up))
                        with open(bf, "wb") as f:
                            f.write(body)
                        row["bytes"] = len(body)
                        path = client_path(proto, model, stream)
                        hdr = HEADERS.get(proto, [])
                        if up == proto:
                            row["ir"]["nginx"] = ng.measure(path, bf, hdr, a.n)
                        row["ir"][up] = px.measure(path, bf, hdr, a.n)
                        log("%s %d KB %s -> %s: %.0f" % (shape, kb, "stream" if stream
                                                        else "json", up, row["ir"][up]))
                    rows.append(row)
    finally:
        for t in targets:
            t.stop()
        mock.stop()
    return rows


def fmt(v):
    return "{:,.0f}".format(v) if v is not None else "-"


def table(rows):
    out = ["| shape | body | stream | nginx | pass-through | / nginx | translated to | "
           "translated (per upstream) | worst / pass-through | per body byte (pass / worst) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        proto = SHAPES[r["shape"]][1]
        ng, pt = r["ir"].get("nginx"), r["ir"][proto]
        tr = {u: v for u, v in r["ir"].items() if u not in ("nginx", proto)}
        worst = max(tr.values()) if tr else None
        out.append("| %s | %s B | %s | %s | %s | %.1fx | %s | %s | %s | %.1f / %s |" % (
            r["shape"], "{:,}".format(r["bytes"]), "yes" if r["stream"] else "no", fmt(ng),
            fmt(pt), pt / ng if ng else 0, ", ".join(tr), " / ".join(fmt(v) for v in
                                                                      tr.values()),
            "%.1fx" % (worst / pt) if worst else "-", pt / r["bytes"],
            "%.0f" % (worst / r["bytes"]) if worst else "-"))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["gen", "ir"])
    ap.add_argument("dir", nargs="?", help="gen: where the bodies go")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--proxai", default=None)
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--sizes", default="20,100,300")
    ap.add_argument("--shapes", default="claude_code,codex,gemini_cli")
    ap.add_argument("--streams", default="0,1")
    ap.add_argument("--ups", default=",".join(UPS),
                    help="upstream protocols translated to (none: pass-through only)")
    ap.add_argument("--n", type=int, default=3, help="ir: requests per case")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--json", default=None, help="ir: also write the rows here")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    a.proxai = a.proxai or os.path.join(a.build, "proxai")
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.shapes = a.shapes.split(",")
    a.streams = [int(x) for x in a.streams.split(",")]
    a.ups = [u for u in a.ups.split(",") if u in UPS]
    if a.mode == "gen":
        os.makedirs(a.dir, exist_ok=True)
        for shape in a.shapes:
            proto = SHAPES[shape][1]
            for kb in a.sizes:
                for stream in a.streams:
                    p = os.path.join(a.dir, "%s-%dk%s.json" % (shape, kb, "-stream" if stream
                                                                 else ""))
                    with open(p, "wb") as f:
                        f.write(generate(shape, kb, stream, PREFIX[proto] + "-n20-p0-c16"))
                    print(p)
        return
    a.tmp = tempfile.mkdtemp(prefix="proxai-agents-")
    try:
        rows = run_ir(a)
    finally:
        if not a.keep:
            shutil.rmtree(a.tmp, ignore_errors=True)
        else:
            log("kept " + a.tmp)
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
