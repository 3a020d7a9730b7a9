// A raw-TCP fault upstream: an HTTP/1.1 server that reads each request (head
// and Content-Length body) and answers it with scripted raw bytes, so tests
// can send what no well-behaved server library would: broken framing, bare
// CRs in headers, gzip, redirects, streams cut or over-long. Node built-ins
// only; every timer and socket is bounded and closed by close().
//
//   import { startFaultUpstream, http, chunked } from './lib/faultup.mjs';
//   const up = await startFaultUpstream();
//   up.script(http(200, { 'content-type': 'application/json' }, '{}'));
//   ... up.requests[0].json ...
//
// A script entry is one of:
//   string | Buffer                 raw bytes, then the connection is closed
//   { raw, close = true, hang }     raw: string | Buffer | array of those and
//                                   { wait: ms } pauses; close: false keeps the
//                                   connection for the next request; hang: keep
//                                   it open without answering further
//   (req) => entry                  computed from the recorded request
// With the queue empty a request gets a 599 answer that no test expects.
// With FAULTUP_TLS_CERT and FAULTUP_TLS_KEY (PEM files) in the environment it
// speaks the same bytes inside TLS (url https://), for the built-in TLS lane.
import fs from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';

const MAX_REQUEST = 64 << 20;

/** Raw HTTP/1.1 response with a Content-Length (unless headers set framing). */
export function http(status, headers = {}, body = '', { reason = 'X', length = true } = {}) {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  let head = `HTTP/1.1 ${status} ${reason}\r\n`;
  const names = Object.keys(headers).map((k) => k.toLowerCase());
  for (const [k, v] of Object.entries(headers)) {
    for (const one of Array.isArray(v) ? v : [v]) head += `${k}: ${one}\r\n`;
  }
  if (length && !names.includes('content-length') && !names.includes('transfer-encoding')) {
    head += `Content-Length: ${b.length}\r\n`;
  }
  return Buffer.concat([Buffer.from(head + '\r\n'), b]);
}

/** A chunked body: each piece one chunk, then the last chunk. */
export function chunked(...pieces) {
  const parts = [];
  for (const p of pieces) {
    const b = Buffer.isBuffer(p) ? p : Buffer.from(p);
    parts.push(Buffer.from(b.length.toString(16) + '\r\n'), b, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}

/** SSE text from [{event?, data}] (data: string or object). */
export function sse(events) {
  let s = '';
  for (const e of events) {
    if (e.event) s += `event: ${e.event}\n`;
    s += `data: ${typeof e.data === 'string' ? e.data : JSON.stringify(e.data)}\n\n`;
  }
  return s;
}

/** Starts the fault upstream on 127.0.0.1 (ephemeral port). */
export async function startFaultUpstream() {
  const queue = [];
  const requests = [];
  const sockets = new Set();
  const timers = new Set();
  const wait = (ms) =>
    new Promise((resolve) => {
      const t = setTimeout(() => {
        timers.delete(t);
        resolve();
      }, ms);
      timers.add(t);
    });

  async function answer(sock, req) {
    let entry = queue.length ? queue.shift() : http(599, {}, 'no scripted answer');
    if (typeof entry === 'function') entry = entry(req);
    if (typeof entry === 'string' || Buffer.isBuffer(entry)) entry = { raw: entry };
    const pieces = Array.isArray(entry.raw) ? entry.raw : [entry.raw];
    for (const p of pieces) {
      if (sock.destroyed) return false;
      if (p && typeof p === 'object' && !Buffer.isBuffer(p) && 'wait' in p) {
        await wait(p.wait);
        continue;
      }
      if (p === undefined || p === null) continue;
      await new Promise((resolve) => sock.write(p, () => resolve()));
    }
    if (entry.hang) return false;
    if (entry.close !== false) {
      sock.end();
      return false;
    }
    return true;
  }

  const tlsOpts = process.env.FAULTUP_TLS_CERT && {
    cert: fs.readFileSync(process.env.FAULTUP_TLS_CERT),
    key: fs.readFileSync(process.env.FAULTUP_TLS_KEY),
  };
  const onSocket = (sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    let busy = false;
    let open = true;
    const pump = async () => {
      if (busy) return;
      busy = true;
      while (open) {
        const he = buf.indexOf('\r\n\r\n');
        if (he < 0) break;
        const head = buf.subarray(0, he).toString('latin1');
        const lines = head.split('\r\n');
        const [method, path] = lines[0].split(' ');
        const headers = {};
        for (const l of lines.slice(1)) {
          const i = l.indexOf(':');
          if (i > 0) {
            const k = l.slice(0, i).trim().toLowerCase();
            const v = l.slice(i + 1).trim();
            headers[k] = k in headers ? `${headers[k]}, ${v}` : v;
          }
        }
        const len = Number(headers['content-length'] || 0);
        if (buf.length < he + 4 + len) break;
        const body = buf.subarray(he + 4, he + 4 + len).toString('utf8');
        buf = buf.subarray(he + 4 + len);
        let json;
        try {
          json = JSON.parse(body);
        } catch {
          json = undefined;
        }
        const req = { method, path, headers, rawHead: head, body, json };
        requests.push(req);
        open = await answer(sock, req);
      }
      busy = false;
    };
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length > MAX_REQUEST) {
        sock.destroy();
        return;
      }
      pump();
    });
  };
  const server = tlsOpts ? tls.createServer(tlsOpts, onSocket) : net.createServer(onSocket);
  if (tlsOpts) server.on('tlsClientError', () => {});
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = server.address().port;
  return {
    port,
    url: `${tlsOpts ? 'https' : 'http'}://127.0.0.1:${port}`,
    requests,
    /** Appends script entries (answers for the next requests, in order). */
    script: (...entries) => queue.push(...entries),
    /** Script entries not used yet. */
    pending: () => queue.length,
    /** Forget the queue and the recorded requests; drop open connections. */
    reset: () => {
      queue.length = 0;
      requests.length = 0;
      for (const s of sockets) s.destroy();
    },
    close: async () => {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

// ---- a strict raw client ------------------------------------------------------

/** Reads from a socket with a deadline; fails on close before enough bytes. */
class Reader {
  constructor(sock, deadlineMs) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.ended = false;
    this.err = null;
    this.waiter = null;
    this.deadline = Date.now() + deadlineMs;
    sock.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake();
    });
    sock.on('end', () => {
      this.ended = true;
      this.wake();
    });
    sock.on('close', () => {
      this.ended = true;
      this.wake();
    });
    sock.on('error', (e) => {
      this.err = e;
      this.ended = true;
      this.wake();
    });
  }
  wake() {
    const w = this.waiter;
    this.waiter = null;
    if (w) w();
  }
  async more(what) {
    if (this.ended) throw new Error(`connection closed while reading ${what} (have ${this.buf.length} bytes: ${JSON.stringify(this.buf.toString('latin1').slice(0, 300))})`);
    const left = this.deadline - Date.now();
    if (left <= 0) throw new Error(`timed out reading ${what}`);
    let t;
    await new Promise((resolve) => {
      this.waiter = resolve;
      t = setTimeout(resolve, left);
    });
    clearTimeout(t);
  }
  async until(delim, what) {
    for (;;) {
      const i = this.buf.indexOf(delim);
      if (i >= 0) {
        const out = this.buf.subarray(0, i);
        this.buf = this.buf.subarray(i + delim.length);
        return out;
      }
      await this.more(what);
    }
  }
  async take(n, what) {
    while (this.buf.length < n) await this.more(what);
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }
  async rest() {
    while (!this.ended) await this.more('the end of the connection').catch((e) => {
      if (!this.ended) throw e;
    });
    const out = this.buf;
    this.buf = Buffer.alloc(0);
    return out;
  }
}

/** Reads exactly one HTTP/1.1 response, strictly (RFC 9112 framing). */
async function readResponse(r) {
  const head = (await r.until('\r\n\r\n', 'a response head')).toString('latin1');
  const lines = head.split('\r\n');
  const m = /^HTTP\/1\.1 (\d{3}) [^\r\n]*$/.exec(lines[0]);
  if (!m) throw new Error(`bad status line: ${JSON.stringify(lines[0])}`);
  const headers = {};
  const list = [];
  for (const l of lines.slice(1)) {
    if (/[\r\n\0]/.test(l)) throw new Error(`control character in a header line: ${JSON.stringify(l)}`);
    const i = l.indexOf(':');
    if (i <= 0 || /\s/.test(l.slice(0, i))) throw new Error(`bad header line: ${JSON.stringify(l)}`);
    const k = l.slice(0, i).toLowerCase();
    const v = l.slice(i + 1).trim();
    list.push([k, v]);
    headers[k] = k in headers ? `${headers[k]}, ${v}` : v;
  }
  const status = Number(m[1]);
  let body;
  if ('transfer-encoding' in headers) {
    if (headers['transfer-encoding'] !== 'chunked') throw new Error(`transfer-encoding ${headers['transfer-encoding']}`);
    if ('content-length' in headers) throw new Error('both Content-Length and Transfer-Encoding');
    const parts = [];
    for (;;) {
      const sz = (await r.until('\r\n', 'a chunk size')).toString('latin1');
      if (!/^[0-9a-fA-F]+$/.test(sz)) throw new Error(`bad chunk size ${JSON.stringify(sz)}`);
      const n = parseInt(sz, 16);
      if (n === 0) {
        const trailer = await r.until('\r\n', 'the last chunk');
        if (trailer.length) throw new Error('unexpected trailer');
        break;
      }
      parts.push(await r.take(n, 'chunk data'));
      const crlf = await r.take(2, 'chunk end');
      if (crlf.toString() !== '\r\n') throw new Error('chunk not followed by CRLF');
    }
    body = Buffer.concat(parts);
  } else if ('content-length' in headers) {
    if (!/^\d+$/.test(headers['content-length'])) throw new Error(`bad content-length ${headers['content-length']}`);
    body = await r.take(Number(headers['content-length']), 'the body');
  } else if (status === 204 || status === 304) {
    body = Buffer.alloc(0);
  } else {
    throw new Error(`response without framing: ${head}`);
  }
  const text = body.toString('utf8');
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status, headers, list, head, body, text, json };
}

/** Raw request bytes for a JSON POST. */
export function post(path, body, headers = {}, { close = false } = {}) {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  let h = `POST ${path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\n`;
  for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
  if (close) h += 'Connection: close\r\n';
  return Buffer.concat([Buffer.from(h + '\r\n'), b]);
}

/**
 * Sends the requests one after another on ONE connection, reading exactly one
 * strictly framed response for each; the last request should ask to close.
 * Returns the responses and any bytes that followed the last response before
 * the server closed (a smuggled or second response shows up there).
 */
export async function exchange(port, reqs, { timeout = 20000 } = {}) {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  const r = new Reader(sock, timeout);
  await new Promise((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  const out = [];
  try {
    for (const q of reqs) {
      sock.write(q);
      out.push(await readResponse(r));
    }
    const extra = await r.rest();
    return { responses: out, extra };
  } finally {
    sock.destroy();
  }
}

/**
 * Sends one request and returns the socket and a reader, for streams the test
 * reads piece by piece or drops half-way.
 */
export async function openRaw(port, req, { timeout = 20000 } = {}) {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  const r = new Reader(sock, timeout);
  await new Promise((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  sock.write(req);
  return { sock, reader: r, readResponse: () => readResponse(r) };
}
