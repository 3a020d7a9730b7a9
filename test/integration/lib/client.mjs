// Client-side helpers the suites share: a raw socket client and the bytes of
// a raw POST, a parser of raw HTTP/1.1 responses, a JSON POST, one request on
// a fresh connection with a key (call), a proxai started for one block of
// tests, and the process probes (RSS). Node built-ins only.
//
//   import { rawClient, rawPost, parseResponses, post, call, withProxai } from './lib/client.mjs';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';

import { sleep, startProxai } from './harness.mjs';

/**
 * A raw client socket to `target` (a port on 127.0.0.1, or net.connect
 * options): collects everything received (latin1) in st.data (st.bytes
 * counts it), resolves `closed` on close and `connected` on connect.
 * `waitFor(pred, ms, what)` resolves once pred(st.data) holds, and fails
 * when the socket closes first or the time runs out.
 */
export function rawClient(target) {
  const opts = typeof target === 'number' ? { port: target, host: '127.0.0.1' } : target;
  const sock = net.connect(opts);
  const st = { data: '', closed: false, error: null, bytes: 0 };
  sock.setEncoding('latin1');
  sock.on('data', (d) => {
    st.data += d;
    st.bytes += d.length;
  });
  sock.on('error', (e) => (st.error = e));
  const closed = new Promise((resolve) => sock.on('close', () => {
    st.closed = true;
    resolve();
  }));
  const connected = new Promise((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  const waitFor = async (pred, ms = 10000, what = 'data') => {
    const end = Date.now() + ms;
    while (!pred(st.data)) {
      const got = JSON.stringify(st.data.slice(0, 2000));
      if (st.closed && !pred(st.data)) throw new Error(`socket closed while waiting for ${what}; got: ${got}`);
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; got: ${got}`);
      await sleep(10);
    }
  };
  return { sock, st, closed, connected, waitFor };
}

/** The bytes of a raw HTTP/1.1 POST of a JSON body (extra: more header
 *  lines, each ending in CRLF), for rawClient. */
export const rawPost = (path, body, extra = '') =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

/**
 * The complete HTTP/1.1 responses at the start of `data` (Content-Length or
 * chunked framing; a 100 Continue counts as one): {responses, rest}, each
 * response {status, headers (lower-case names), names (in order), body}.
 */
export function parseResponses(data) {
  const out = [];
  let rest = data;
  for (;;) {
    const he = rest.indexOf('\r\n\r\n');
    if (he < 0) break;
    const [statusLine, ...hl] = rest.slice(0, he).split('\r\n');
    const status = Number(statusLine.split(' ')[1]);
    const headers = {};
    const names = [];
    for (const l of hl) {
      const i = l.indexOf(':');
      const name = l.slice(0, i).trim().toLowerCase();
      names.push(name);
      headers[name] = l.slice(i + 1).trim();
    }
    let body = '';
    let p = he + 4;
    if (status === 100) {
      out.push({ status, headers, names, body });
      rest = rest.slice(p);
      continue;
    }
    if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length']);
      if (rest.length < p + n) break;
      body = rest.slice(p, p + n);
      p += n;
    } else if (/chunked/i.test(headers['transfer-encoding'] || '')) {
      let complete = false;
      for (;;) {
        const le = rest.indexOf('\r\n', p);
        if (le < 0) break;
        const size = parseInt(rest.slice(p, le), 16);
        if (size === 0) {
          if (rest.length < le + 4) break;
          p = le + 4;
          complete = true;
          break;
        }
        if (rest.length < le + 2 + size + 2) break;
        body += rest.slice(le + 2, le + 2 + size);
        p = le + 2 + size + 2;
      }
      if (!complete) break;
    }
    out.push({ status, headers, names, body });
    rest = rest.slice(p);
  }
  return { responses: out, rest };
}

/**
 * POST `body` (an object is sent as JSON, a string as is) to url + pathname
 * with a JSON content type: {status, headers, text, json (undefined when
 * the answer is not JSON)}.
 */
export async function post(url, pathname, body, headers = {}) {
  const res = await fetch(url + pathname, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** One request on a fresh connection (no agent: each request may reach
 *  another worker or instance). key: Authorization: Bearer (null: none);
 *  the body defaults to a small Chat request. Resolves to {status, headers,
 *  text, json()}. */
export function call(url, key, { pathname = '/v1/chat/completions', body, headers = {}, method = 'POST' } = {}) {
  const u = new URL(url);
  const data = body ?? JSON.stringify({ model: 'gpt-4o', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] });
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: u.hostname, port: u.port, method, path: pathname, agent: false,
      headers: { connection: 'close', 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) }));
    });
    req.on('error', reject);
    req.setTimeout(30000, () => req.destroy(new Error('request timed out')));
    req.end(method === 'GET' || method === 'DELETE' ? undefined : data);
  });
}

/**
 * Runs fn(px) against a proxai started with `configText` (startProxai's
 * options), stops it afterwards, and fails when its stderr holds a
 * sanitizer report.
 */
export async function withProxai(configText, fn, opts = {}) {
  const px = await startProxai(configText, opts);
  try {
    await fn(px);
  } finally {
    await px.stop();
    const err = px.logs().stderr;
    assert.ok(!/AddressSanitizer|LeakSanitizer|runtime error/.test(err), err.slice(-4000));
  }
}

/** The resident set of process pid in KiB (0 when it is gone). */
export function vmRSSKiB(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}
