#!/usr/bin/env python3
"""Extract the interactions of recorded cassettes into files the C runner
reads (run once when a recording is added; the outputs are committed).

For each test/recordings/<case>/cassette.yaml (kept whole, as published):
  NN-request.json    the request body sent to the provider
  NN-response.json   a JSON response body, or
  NN-response.sse    a streamed (text/event-stream) response body
  NN-meta.json       {"proto": ..., "status": ..., "uri": ...}
Only interactions with the Anthropic Messages, Chat Completions, Responses
or Gemini generateContent / streamGenerateContent (Google AI and Vertex)
endpoints are extracted. usage: extract.py [DIR]"""
import json
import os
import sys

import yaml

PROTOS = (("/v1/messages", "anthropic"), ("/chat/completions", "chat"),
          ("/responses", "responses"))


def proto_of(uri):
    path = uri.split("?", 1)[0]
    if path.endswith("/count_tokens"):
        return None
    if path.endswith(":generateContent") or path.endswith(":streamGenerateContent"):
        return "gemini"
    for suffix, name in PROTOS:
        if path.endswith(suffix):
            return name
    return None


def body_of(part):
    """(kind, value): kind json (value parsed) or text (value a str)."""
    if "parsed_body" in part:
        return "json", part["parsed_body"]
    b = part.get("body")
    if isinstance(b, dict):
        if "content" in b:
            if b.get("type") == "json" or not isinstance(b["content"], str):
                return "json", b["content"]
            return "text", b["content"]
        if "string" in b:
            b = b["string"]
    if isinstance(b, bytes):
        b = b.decode("utf-8")
    if isinstance(b, str):
        try:
            return "json", json.loads(b)
        except ValueError:
            return "text", b
    return None, None


def extract(case):
    with open(os.path.join(case, "cassette.yaml"), encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    n = 0
    for it in doc.get("interactions", []):
        req, resp = it.get("request", {}), it.get("response", {})
        proto = proto_of(req.get("uri", ""))
        if proto is None:
            continue
        status = resp.get("status")
        if isinstance(status, dict):
            status = status.get("code")
        rk, rb = body_of(req)
        sk, sb = body_of(resp)
        if rk != "json" or sk is None:
            continue
        pre = os.path.join(case, "%02d-" % n)
        with open(pre + "request.json", "w", encoding="utf-8") as f:
            json.dump(rb, f, indent=1, ensure_ascii=False)
        if sk == "json":
            with open(pre + "response.json", "w", encoding="utf-8") as f:
                json.dump(sb, f, indent=1, ensure_ascii=False)
        else:
            with open(pre + "response.sse", "w", encoding="utf-8") as f:
                f.write(sb)
        with open(pre + "meta.json", "w", encoding="utf-8") as f:
            json.dump({"proto": proto, "status": status, "uri": req.get("uri")}, f)
        n += 1
    return n


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(root)):
        case = os.path.join(root, name)
        if os.path.isfile(os.path.join(case, "cassette.yaml")):
            print(name, extract(case))


if __name__ == "__main__":
    main()
