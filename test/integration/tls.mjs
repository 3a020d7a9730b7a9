// HTTPS upstreams: proxai reaches a TLS upstream through its built-in lane
// (OpenSSL, src/upstream/upstream_tls.c; libcurl when `http2 = on`), verifies it
// against `ca_file`, refuses an unknown certificate (502), can be told
// `tls_verify = off`, and negotiates HTTP/2 only when `http2 = on`.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http2 from 'node:http2';
import https from 'node:https';
import path from 'node:path';
import { startProxai, test, run, repoRoot, parseSSE } from './lib/harness.mjs';
import * as C from './lib/config.mjs';

const dir = path.join(repoRoot, 'test/integration/tls');
const cert = fs.readFileSync(path.join(dir, 'cert.pem'));
const key = fs.readFileSync(path.join(dir, 'key.pem'));

// One upstream answering Chat Completions over HTTPS, HTTP/1.1 or h2 (ALPN).
const seen = [];
function handler(req, res) {
  let body = '';
  req.on('data', (d) => (body += d));
  req.on('end', () => {
    const j = JSON.parse(body);
    seen.push({ version: req.httpVersion, auth: req.headers.authorization, model: j.model });
    if (j.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const piece of ['Hello', ' over', ' TLS']) {
        res.write(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: j.model, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })}\n\n`);
      }
      res.write(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: j.model, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
      res.end('data: [DONE]\n\n');
      return;
    }
    const out = JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: j.model, choices: [{ index: 0, message: { role: 'assistant', content: 'Hello over TLS' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 } });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  });
}
const server = http2.createSecureServer({ cert, key, allowHTTP1: true }, handler);
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const port = server.address().port;
process.on('exit', () => server.close());

const conf = (keys = {}) => C.server({ access_log: null })
  + C.upstream('tls', 'chat', `https://127.0.0.1:${port}`, { api_key: 'tls-key', ...keys })
  + C.route('*', { upstream: 'tls' });

async function chat(px, stream = false) {
  return fetch(`${px.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-tls', stream, messages: [{ role: 'user', content: 'hi' }] }),
  });
}

test('HTTPS upstream verified with ca_file (HTTP/1.1 by default)', async () => {
  const px = await startProxai(conf({ ca_file: path.join(dir, 'cert.pem') }));
  try {
    seen.length = 0;
    const r = await chat(px);
    assert.equal(r.status, 200, await r.clone().text());
    assert.equal((await r.json()).choices[0].message.content, 'Hello over TLS');
    assert.equal(seen.length, 1);
    assert.equal(seen[0].version, '1.1');
    assert.equal(seen[0].auth, 'Bearer tls-key');
    const s = await chat(px, true);
    const ev = parseSSE(await s.text());
    assert.equal(ev.at(-1).data, '[DONE]');
  } finally {
    await px.stop();
  }
});

test('an unknown certificate is refused: 502 in the client shape', async () => {
  const px = await startProxai(conf());
  try {
    const r = await chat(px);
    assert.equal(r.status, 502);
    const j = await r.json();
    assert.equal(j.error.type, 'api_error');
  } finally {
    await px.stop();
  }
});

test('tls_verify = off accepts the self-signed upstream', async () => {
  const px = await startProxai(conf({ tls_verify: 'off' }));
  try {
    const r = await chat(px);
    assert.equal(r.status, 200);
  } finally {
    await px.stop();
  }
});

test('http2 = on negotiates HTTP/2; streams still complete', async () => {
  const px = await startProxai(conf({ ca_file: path.join(dir, 'cert.pem'), http2: 'on' }));
  try {
    seen.length = 0;
    const s = await chat(px, true);
    const text = await s.text();
    const ev = parseSSE(text);
    assert.equal(ev.at(-1).data, '[DONE]', text);
    assert.equal(seen[0].version, '2.0');
  } finally {
    await px.stop();
  }
});

await run();
