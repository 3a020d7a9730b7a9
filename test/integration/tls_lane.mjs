// The built-in lane's TLS (src/upstream/upstream_tls.c), the default for https://
// upstreams: certificate and host-name verification as curl's (a wrong CA, a
// wrong name, an expired or a self-signed certificate are each a 502 in the
// client's protocol; `tls_verify = false` accepts them), pass-through and
// streaming over TLS, one TLS connection reused by sequential requests,
// sessions resumed on a new connection, and a hostile TLS upstream (a TCP
// close without close_notify, a close mid-body, garbage records).
// Certificates are made at test time (lib/tlscerts.mjs).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import { startProxai, test, run, parseSSE } from './lib/harness.mjs';
import { withProxai } from './lib/client.mjs';
import * as C from './lib/config.mjs';
import { makeCerts } from './lib/tlscerts.mjs';

const certs = makeCerts();

const chatJson = (model, text) => JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model, choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 } });
const chunk = (model, delta, finish = null) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

/**
 * An HTTPS upstream on 127.0.0.1 serving `pair` (cert, key): raw TCP
 * accepted here, wrapped in TLS, handed to an http.Server, so that a test can
 * cut the TCP connection under TLS. Counts accepted connections and resumed
 * sessions. The model name picks a behaviour.
 */
async function tlsUpstream(pair) {
  const ctx = tls.createSecureContext({ cert: fs.readFileSync(pair.cert), key: fs.readFileSync(pair.key) });
  const st = { accepts: 0, resumed: 0, sni: [], requests: 0 };
  const raws = new WeakMap();
  const socks = new Set();
  const hs = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      st.requests++;
      const j = JSON.parse(body);
      const m = j.model;
      const raw = raws.get(req.socket);
      const text = 'Hello over TLS';
      if (m === 'close-after') {
        const out = chatJson(m, text);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out), connection: 'close' });
        res.end(out);
      } else if (m === 'cut-tcp' || m === 'cut-notify' || m === 'garbage') {
        // a Content-Length body cut after half
        const out = chatJson(m, text);
        res.socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${out.length}\r\n\r\n${out.slice(0, 20)}`, () => {
          if (m === 'cut-tcp') raw.destroy();
          else if (m === 'cut-notify') res.socket.end();
          else raw.write(Buffer.from('\x17\x03\x03\x00\x20garbage-garbage-garbage-garbage'), () => setTimeout(() => raw.destroy(), 200));
        });
      } else if (m === 'eof-notify' || m === 'eof-tcp') {
        // an HTTP/1.0-style body delimited by the close
        const out = chatJson(m, text);
        res.socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n${out}`, () => {
          if (m === 'eof-notify') res.socket.end();
          else raw.destroy();
        });
      } else if (j.stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (const piece of ['Hello', ' over', ' TLS']) res.write(chunk(m, { content: piece }));
        res.write(chunk(m, {}, 'stop'));
        res.end('data: [DONE]\n\n');
      } else {
        const out = chatJson(m, text + (m === 'big' ? ' ' + 'x'.repeat(300000) : ''));
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
      }
    });
  });
  hs.keepAliveTimeout = 60000;
  const server = net.createServer((raw) => {
    st.accepts++;
    socks.add(raw);
    raw.on('close', () => socks.delete(raw));
    raw.on('error', () => {});
    const t = new tls.TLSSocket(raw, { isServer: true, secureContext: ctx, ALPNProtocols: ['http/1.1'] });
    raws.set(t, raw);
    t.on('error', () => {});
    t.on('secure', () => {
      if (t.isSessionReused()) st.resumed++;
      st.sni.push(t.servername || '');
      hs.emit('connection', t);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;
  const close = () => {
    for (const s of socks) s.destroy();
    server.close();
  };
  process.on('exit', close);
  return { port, st, reset: () => Object.assign(st, { accepts: 0, resumed: 0, sni: [], requests: 0 }) };
}

const good = await tlsUpstream(certs.good);
const otherca = await tlsUpstream(certs.otherca);
const wrongname = await tlsUpstream(certs.wrongname);
const expired = await tlsUpstream(certs.expired);
const self = await tlsUpstream(certs.self);

const conf = (up, keys = {}, { host = '127.0.0.1' } = {}) => C.server({ access_log: null })
  + C.upstream('u', 'chat', `https://${host}:${up.port}`, { api_key: 'k', ...keys })
  + C.route('*', { upstream: 'u' });

async function chat(px, model = 'gpt-tls', stream = false) {
  const r = await fetch(`${px.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, stream, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: r.status, text: await r.text() };
}

async function messages(px) {
  const r = await fetch(`${px.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'gpt-tls', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: r.status, text: await r.text() };
}

function bad(r) {
  assert.equal(r.status, 502, r.text);
  assert.equal(JSON.parse(r.text).error.type, 'api_error', r.text);
}

/** One proxai for the block, stopped after it; ASan/UBSan reports fail. */

test('valid chain via ca_file: 200, body and stream passed through; one connection', async () => {
  good.reset();
  await withProxai(conf(good, { ca_file: certs.caA }), async (px) => {
    const r = await chat(px);
    assert.equal(r.status, 200, r.text);
    assert.equal(JSON.parse(r.text).choices[0].message.content, 'Hello over TLS');
    const s = await chat(px, 'gpt-tls', true);
    assert.equal(s.status, 200, s.text);
    const ev = parseSSE(s.text);
    assert.equal(ev.at(-1).data, '[DONE]');
    assert.equal(ev.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data).choices[0].delta.content || '').join(''), 'Hello over TLS');
    const b = await chat(px, 'big');
    assert.equal(b.status, 200);
    assert.equal(JSON.parse(b.text).choices[0].message.content.length, 'Hello over TLS'.length + 300001);
  });
  assert.equal(good.st.accepts, 1, 'the three requests shared one TLS connection');
  assert.deepEqual(good.st.sni, [''], 'no SNI for an IP literal');
});

test('a host name: SNI sent, verified against the DNS name', async () => {
  good.reset();
  await withProxai(conf(good, { ca_file: certs.caA }, { host: 'localhost' }), async (px) => {
    const r = await chat(px);
    assert.equal(r.status, 200, r.text);
  });
  assert.deepEqual(good.st.sni, ['localhost']);
});

test('keep-alive: 30 sequential requests use one TLS connection; 4 concurrent use at most 4', async () => {
  good.reset();
  await withProxai(conf(good, { ca_file: certs.caA, max_connections: 4 }), async (px) => {
    for (let i = 0; i < 30; i++) assert.equal((await chat(px)).status, 200);
    assert.equal(good.st.accepts, 1);
    for (let round = 0; round < 5; round++) {
      const rs = await Promise.all([0, 1, 2, 3].map(() => chat(px)));
      for (const r of rs) assert.equal(r.status, 200, r.text);
    }
    assert.ok(good.st.accepts <= 4, `accepts ${good.st.accepts}`);
    assert.equal(good.st.requests, 50);
  });
});

test('a new connection resumes the TLS session', async () => {
  good.reset();
  await withProxai(conf(good, { ca_file: certs.caA }), async (px) => {
    assert.equal((await chat(px, 'close-after')).status, 200);
    assert.equal((await chat(px)).status, 200);
  });
  assert.equal(good.st.accepts, 2);
  assert.equal(good.st.resumed, 1, 'the second handshake resumed the first session');
});

test('wrong CA: 502 in the Chat and in the Anthropic shape', async () => {
  otherca.reset();
  await withProxai(conf(otherca, { ca_file: certs.caA }), async (px) => {
    bad(await chat(px));
    const m = await messages(px);
    assert.equal(m.status, 502, m.text);
    const j = JSON.parse(m.text);
    assert.equal(j.type, 'error');
    assert.equal(j.error.type, 'api_error');
  });
  assert.equal(otherca.st.requests, 0, 'no request left over an unverified connection');
});

test('wrong host name: 502 (IP literal and DNS name)', async () => {
  wrongname.reset();
  await withProxai(conf(wrongname, { ca_file: certs.caA }), async (px) => bad(await chat(px)));
  await withProxai(conf(wrongname, { ca_file: certs.caA }, { host: 'localhost' }), async (px) => bad(await chat(px)));
  assert.equal(wrongname.st.requests, 0);
});

test('expired certificate: 502', async () => {
  expired.reset();
  await withProxai(conf(expired, { ca_file: certs.caA }), async (px) => bad(await chat(px)));
  assert.equal(expired.st.requests, 0);
});

test('self-signed certificate without ca_file: 502', async () => {
  self.reset();
  await withProxai(conf(self), async (px) => bad(await chat(px)));
  assert.equal(self.st.requests, 0);
});

test('a ca_file of another CA does not trust the default store\'s absence: 502; the right one: 200', async () => {
  await withProxai(conf(good, { ca_file: certs.caB }), async (px) => bad(await chat(px)));
  await withProxai(conf(self, { ca_file: certs.self.cert }), async (px) => assert.equal((await chat(px)).status, 200));
});

test('tls_verify = false accepts self-signed, expired and wrong-name certificates', async () => {
  for (const up of [self, expired, wrongname, otherca]) {
    await withProxai(conf(up, { tls_verify: 'false' }), async (px) => {
      const r = await chat(px);
      assert.equal(r.status, 200, r.text);
    });
  }
});

test('client = builtin takes https (verification applies); client = curl still works', async () => {
  await withProxai(conf(wrongname, { ca_file: certs.caA, client: 'builtin' }), async (px) => bad(await chat(px)));
  good.reset();
  await withProxai(conf(good, { ca_file: certs.caA, client: 'curl' }), async (px) => {
    for (let i = 0; i < 3; i++) assert.equal((await chat(px)).status, 200);
  });
  assert.equal(good.st.accepts, 1);
});

test('hostile: a TCP close without close_notify, close mid-body, garbage records', async () => {
  good.reset();
  await withProxai(conf(good, { ca_file: certs.caA }), async (px) => {
    for (const m of ['cut-tcp', 'cut-notify', 'garbage']) {
      bad(await chat(px, m));
      assert.equal((await chat(px)).status, 200, `healthy after ${m}`);
    }
    // a body delimited by the close: complete with close_notify, truncated
    // (an error) without it
    const ok = await chat(px, 'eof-notify');
    assert.equal(ok.status, 200, ok.text);
    assert.equal(JSON.parse(ok.text).choices[0].message.content, 'Hello over TLS');
    bad(await chat(px, 'eof-tcp'));
    assert.equal((await chat(px)).status, 200);
  });
});

test('a TLS upstream that never answers the handshake: connect timeout, 502 or 504', async () => {
  const silent = net.createServer((s) => s.on('error', () => {}));
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  try {
    await withProxai(conf({ port: silent.address().port }, { ca_file: certs.caA, connect_timeout: '300ms' }), async (px) => {
      const r = await chat(px);
      assert.ok(r.status === 502 || r.status === 504, r.text);
    });
  } finally {
    silent.close();
  }
});

test('--check warns that client = builtin with http2 = on still uses libcurl', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-tls-check-'));
  try {
    const f = path.join(dir, 'p.conf');
    fs.writeFileSync(f, conf(good, { http2: 'on', client: 'builtin' }).replace('{{PORT}}', '1'));
    const bin = process.env.PROXAI_BIN || 'build/proxai';
    const r = spawnSync(bin, ['--check', '-c', f], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /\[upstream u\] client = builtin with http2 = on/);
    fs.writeFileSync(path.join(dir, 'q.conf'), conf(good, { client: 'builtin' }).replace('{{PORT}}', '1'));
    const q = spawnSync(bin, ['--check', '-c', path.join(dir, 'q.conf')], { encoding: 'utf8' });
    assert.equal(q.status, 0, q.stderr);
    assert.doesNotMatch(q.stderr, /http2/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

await run();
