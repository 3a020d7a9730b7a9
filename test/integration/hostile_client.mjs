// The client side of the security boundary (SPEC sections 4, 6, 10): hostile
// request shapes on raw TCP sockets. Each case asserts the exact answer
// (status, the protocol's error shape, no second response, whether the
// connection closes), and after each case the gateway still serves and holds
// no client connection (its fds of the listening port, from /proc/PID).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { startMock, startProxai, test, run, sleep, waitFor } from './lib/harness.mjs';
import * as C from './lib/config.mjs';
import { rawClient, rawPost as post, parseResponses } from './lib/client.mjs';

const mock = await startMock();
const px = await startProxai(
  C.server({ max_body: '64k', max_header: '32k', header_timeout: '1s', idle_timeout: '1s' }) +
  C.upstream('oc', 'chat', mock.url, { api_key: 'up-key' }) +
  C.upstream('an', 'anthropic', mock.url, { api_key: 'up-ant' }) +
  C.route('claude-*', { upstream: 'an' }) +
  C.route('*', { upstream: 'oc' }));
process.on('exit', () => { px.stop(); mock.stop(); });

// ---- helpers -------------------------------------------------------------

/**
 * Sends `pieces` (strings/Buffers, written one by one with `gapMs` between)
 * and waits until the connection closes (or `waitMs` passes when
 * expectOpen). Returns {responses, rest, closed, st}.
 */
async function exchange(pieces, { gapMs = 0, waitMs = 8000, expectOpen = false, end = false } = {}) {
  const c = rawClient(px.port);
  await c.connected;
  for (const p of [].concat(pieces)) {
    if (c.st.closed) break;
    c.sock.write(typeof p === 'string' ? Buffer.from(p, 'latin1') : p);
    if (gapMs) await sleep(gapMs);
  }
  if (end) c.sock.end();
  if (expectOpen) {
    await Promise.race([c.closed, sleep(waitMs)]);
  } else {
    await Promise.race([c.closed, sleep(waitMs)]);
    if (!c.st.closed) {
      c.sock.destroy();
      throw new Error(`connection not closed within ${waitMs} ms; got ${JSON.stringify(c.st.data.slice(0, 500))}`);
    }
  }
  const parsed = parseResponses(c.st.data);
  const closed = c.st.closed;
  if (!closed) c.sock.destroy();
  return { ...parsed, closed, st: c.st };
}

/** Asserts exactly one response, the error shape of `proto`, and a closed connection. */
function assertOneError(r, status, proto, { type, message } = {}) {
  assert.equal(r.responses.length, 1, `one response, got ${r.responses.length}: ${JSON.stringify(r.st.data.slice(0, 600))}`);
  assert.equal(r.rest, '', `nothing after the response: ${JSON.stringify(r.rest.slice(0, 200))}`);
  assert.equal(r.closed, true, 'connection closed');
  const res = r.responses[0];
  assert.equal(res.status, status, JSON.stringify(res));
  assert.match(res.headers['content-type'], /application\/json/);
  assert.ok(res.headers['x-request-id'], 'x-request-id');
  const j = JSON.parse(res.body);
  if (proto === 'anthropic') {
    assert.equal(j.type, 'error', res.body);
    assert.equal(typeof j.error.type, 'string');
    assert.equal(typeof j.error.message, 'string');
    assert.equal(j.request_id, res.headers['x-request-id']);
    if (type) assert.equal(j.error.type, type);
    if (message) assert.match(j.error.message, message);
  } else {
    assert.equal(j.type, undefined, res.body);
    assert.equal(typeof j.error.message, 'string');
    assert.ok('param' in j.error && 'code' in j.error, res.body);
    if (type) assert.equal(j.error.type, type);
    if (message) assert.match(j.error.message, message);
  }
  assert.doesNotMatch(j.error.message, /^HPE_/, 'a real message, not an llhttp code');
  return j;
}

/** Socket inodes of proxai's client connections (its end of the listen port). */
function clientConns() {
  const inodes = new Set();
  for (const f of fs.readdirSync(`/proc/${px.pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${px.pid}/fd/${f}`));
      if (m) inodes.add(m[1]);
    } catch { /* closed meanwhile */ }
  }
  let n = 0;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try { text = fs.readFileSync(file, 'utf8'); } catch { continue; }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10) continue;
      const port = parseInt(f[1].split(':')[1], 16);
      if (port === px.port && f[3] !== '0A' && inodes.has(f[9])) n++;
    }
  }
  return n;
}
const fdCount = () => fs.readdirSync(`/proc/${px.pid}/fd`).length;

/** One GET /healthz on a fresh connection (Connection: close). */
async function healthy() {
  const r = await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.equal(r.responses.length, 1);
  assert.equal(r.responses[0].status, 200);
}

/** After every case: still serving, no client connection left open. */
async function settled() {
  await healthy();
  await waitFor(() => clientConns() === 0, { timeout: 6000, what: 'client connections closed' });
}

const hcase = (name, fn, opts) => test(name, async () => { await fn(); await settled(); }, opts);

const chatBody = JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
const anthBody = JSON.stringify({ model: 'claude-x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });

await healthy();
const fdBase = fdCount();

// ---- malformed request lines -------------------------------------------------

hcase('garbage request line: 400 OpenAI shape, closed', async () => {
  assertOneError(await exchange('HELLO THERE\r\n\r\n'), 400, 'openai', { type: 'invalid_request_error' });
});

hcase('unknown method: 400', async () => {
  assertOneError(await exchange('BREW /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n'), 400, 'openai');
});

hcase('invalid HTTP version: 400', async () => {
  assertOneError(await exchange('GET /healthz HTTP/1.x\r\nHost: x\r\n\r\n'), 400, 'openai');
});

hcase('control character in the request target: 400', async () => {
  assertOneError(await exchange('GET /heal\x01thz HTTP/1.1\r\nHost: x\r\n\r\n'), 400, 'openai');
});

hcase('NUL byte in the request target: 400', async () => {
  assertOneError(await exchange('GET /v1/\x00models HTTP/1.1\r\nHost: x\r\n\r\n'), 400, 'openai');
});

hcase('bare LF line endings: 400', async () => {
  assertOneError(await exchange('GET /healthz HTTP/1.1\nHost: x\n\n'), 400, 'openai');
});

hcase('HTTP/2 prior-knowledge preface on the HTTP/1.1 port: an error, closed', async () => {
  const r = await exchange('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
  assert.ok(r.responses.length <= 1);
  if (r.responses.length) assert.ok(r.responses[0].status >= 400 && r.responses[0].status < 500);
  assert.equal(r.closed, true);
});

// ---- 414 --------------------------------------------------------------------

hcase('20 KB URL on /v1/messages: 414 in the Anthropic shape with a real message', async () => {
  const r = await exchange(`POST /v1/messages?q=${'a'.repeat(20000)} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`);
  assertOneError(r, 414, 'anthropic', { type: 'invalid_request_error', message: /too long/ });
  assert.match(r.st.data, /^HTTP\/1\.1 414 URI Too Long\r\n/);
});

hcase('20 KB URL on /v1/chat/completions: 414 in the OpenAI shape', async () => {
  const r = await exchange(`POST /v1/chat/completions?q=${'b'.repeat(20000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  assertOneError(r, 414, 'openai', { type: 'invalid_request_error', message: /too long/ });
});

hcase('20 KB URL on count_tokens: Anthropic shape', async () => {
  const r = await exchange(`POST /v1/messages/count_tokens?q=${'c'.repeat(20000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  assertOneError(r, 414, 'anthropic', { message: /too long/ });
});

// ---- absolute-form --------------------------------------------------------------

hcase('absolute-form POST http://host/v1/messages routes like origin-form', async () => {
  await mock.reset();
  const r = await exchange(post('http://gateway.example/v1/messages', anthBody, 'Connection: close\r\n'));
  assert.equal(r.responses.length, 1, r.st.data.slice(0, 500));
  assert.equal(r.responses[0].status, 200, r.responses[0].body);
  const j = JSON.parse(r.responses[0].body);
  assert.equal(j.type, 'message');
  const reqs = await mock.requests();
  assert.equal(reqs.length, 1);
  assert.match(reqs[0].path, /\/v1\/messages$/);
});

hcase('absolute-form GET HTTP://HOST/healthz (scheme case-insensitive) and bare authority', async () => {
  const r = await exchange('GET HTTP://x.example/healthz HTTP/1.1\r\nHost: x\r\n\r\nGET http://x.example HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.equal(r.responses.length, 2);
  assert.equal(r.responses[0].status, 200);
  assert.equal(r.responses[1].status, 404); // "/": not found, OpenAI shape
  assert.equal(JSON.parse(r.responses[1].body).error.type, 'not_found_error');
});

// ---- header syntax (RFC 9112) -----------------------------------------------------

hcase('"Host : y" (whitespace before the colon): 400', async () => {
  assertOneError(await exchange('GET /healthz HTTP/1.1\r\nHost : y\r\n\r\n'), 400, 'openai', { message: /whitespace/ });
});

hcase('"Content-Length : 5" cannot smuggle a body as a second request: 400', async () => {
  const r = await exchange('POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length : 38\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  assertOneError(r, 400, 'anthropic');
});

hcase('obs-fold header line: 400', async () => {
  assertOneError(await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n'), 400, 'openai', { message: /fold/ });
});

hcase('obs-fold after an empty value, split across writes: 400', async () => {
  const r = await exchange(['GET /healthz HTTP/1.1\r\nHost: x\r\nX-A:\r', '\n', '\tb\r\n\r\n'], { gapMs: 30 });
  assertOneError(r, 400, 'openai', { message: /fold/ });
});

hcase('NUL byte in a header value: 400', async () => {
  assertOneError(await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n'), 400, 'openai');
});

hcase('bare CR in a header value: 400', async () => {
  assertOneError(await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\rb: c\r\n\r\n'), 400, 'openai');
});

hcase('header name with a space inside: 400', async () => {
  assertOneError(await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\nX A: b\r\n\r\n'), 400, 'openai');
});

// ---- framing and smuggling --------------------------------------------------------

hcase('Content-Length and Transfer-Encoding together: 400, nothing forwarded', async () => {
  await mock.reset();
  const r = await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  assertOneError(r, 400, 'openai');
  assert.equal((await mock.requests()).length, 0);
});

hcase('duplicate Content-Length: 400', async () => {
  assertOneError(await exchange('POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}'), 400, 'anthropic');
});

hcase('Content-Length with a sign or letters: 400', async () => {
  assertOneError(await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n'), 400, 'openai');
  assertOneError(await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n'), 400, 'openai');
});

hcase('Transfer-Encoding not ending in chunked on a request: 400', async () => {
  assertOneError(await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n'), 400, 'openai');
});

// RFC 9112 6.1 / 6.3: a Transfer-Encoding the gateway does not fully
// understand is refused and the connection closed, so that nothing behind it
// (the chunk bytes, a pipelined request) is ever read as a request.
hcase('empty Transfer-Encoding without Content-Length: 400, closed, the chunk bytes never a request', async () => {
  await mock.reset();
  const r = await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n\r\n' +
    '26\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\r\n0\r\n\r\n');
  assertOneError(r, 400, 'openai', { message: /Transfer-Encoding/ });
  assert.equal((await mock.requests()).length, 0);
});

hcase('blank Transfer-Encoding with Content-Length: 400, the pipelined request behind it not served', async () => {
  await mock.reset();
  const r = await exchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \t \r\nContent-Length: ${chatBody.length}\r\n\r\n${chatBody}` +
    'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  assertOneError(r, 400, 'openai', { message: /Transfer-Encoding/ });
  assert.equal((await mock.requests()).length, 0);
});

hcase('an unknown transfer coding before chunked: 501, closed', async () => {
  const r = await exchange('POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: foo, chunked\r\n\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  assertOneError(r, 501, 'anthropic', { message: /not implemented/ });
  assert.match(r.st.data, /^HTTP\/1\.1 501 Not Implemented\r\n/);
});

hcase('a coding list split over two Transfer-Encoding lines (gzip, then chunked): 501, closed', async () => {
  assertOneError(await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'), 501, 'openai');
});

hcase('chunked twice, or an empty list element: 400, closed', async () => {
  assertOneError(await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n'), 400, 'openai');
  assertOneError(await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: , chunked\r\n\r\n0\r\n\r\n'), 400, 'openai');
});

hcase('HTTP/1.0 with Transfer-Encoding (keep-alive asked): 400, closed', async () => {
  const r = await exchange('POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  assertOneError(r, 400, 'openai', { message: /HTTP\/1\.0/ });
});

// (the 20 MB of the report: the answer comes at the bound, 4 KiB into an
// extension that never ends, not after reading it all or a timeout)
hcase('an endless chunk extension (megabytes of it) is not read without limit: 400 at the bound, closed', async () => {
  const t0 = Date.now();
  const r = await exchange(['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=', Buffer.alloc(2 << 20, 'v')]);
  assertOneError(r, 400, 'openai', { message: /chunk extensions too long/ });
  assert.ok(Date.now() - t0 < 5000, 'answered at the bound, not after a timeout');
});

hcase('empty chunk extensions (";;;...") are bounded too', async () => {
  const r = await exchange(['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2', ';'.repeat(100000)]);
  assertOneError(r, 400, 'openai', { message: /chunk extensions/ });
});

hcase('a few chunk extensions are fine: 200', async () => {
  await mock.reset();
  const n = Buffer.byteLength(chatBody).toString(16);
  const r = await exchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${n};a="d e"\r\n${chatBody}\r\n0;last\r\n\r\n`);
  assert.equal(r.responses.length, 1, r.st.data.slice(0, 300));
  assert.equal(r.responses[0].status, 200, r.responses[0].body);
});

// RFC 9112 3.2: Host exactly once on HTTP/1.1, and a valid uri-host[:port]
for (const [what, head] of [
  ['no Host', ''],
  ['two Host lines', 'Host: a\r\nHost: b\r\n'],
  ['Host "a b"', 'Host: a b\r\n'],
  ['Host with userinfo', 'Host: u@evil.example\r\n'],
  ['Host with a path', 'Host: x/y\r\n'],
  ['Host with a bad port', 'Host: x:8o\r\n'],
]) {
  hcase(`${what}: 400, closed, no request served`, async () => {
    await mock.reset();
    const r = await exchange(`POST /v1/chat/completions HTTP/1.1\r\n${head}Content-Type: application/json\r\nContent-Length: ${chatBody.length}\r\n\r\n${chatBody}GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n`);
    assertOneError(r, 400, 'openai', { message: /Host/ });
    assert.equal((await mock.requests()).length, 0);
  });
}

hcase('valid Host forms are served: name:port, IPv6 literal, empty; HTTP/1.0 without Host', async () => {
  const r = await exchange('GET /healthz HTTP/1.1\r\nHost: gw.example:8080\r\n\r\nGET /healthz HTTP/1.1\r\nHost: [::1]:80\r\n\r\n' +
    'GET /healthz HTTP/1.1\r\nHost:\r\n\r\nGET /healthz HTTP/1.0\r\n\r\n');
  assert.deepEqual(r.responses.map((x) => x.status), [200, 200, 200, 200], r.st.data.slice(0, 500));
  assert.equal(r.closed, true);
});

// RFC 9110 7.8: an Upgrade the gateway does not take is ignored; the
// connection goes on in HTTP/1.1 (curl --http2 on http:// sends h2c)
hcase('h2c Upgrade (as curl --http2 sends): answered in HTTP/1.1, the next keep-alive request too', async () => {
  await mock.reset();
  const r = await exchange(post('/v1/chat/completions', chatBody, 'Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n') +
    'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.deepEqual(r.responses.map((x) => x.status), [200, 200], r.st.data.slice(0, 600));
  assert.ok(!r.responses[0].names.includes('upgrade'));
  assert.equal(JSON.parse(r.responses[1].body).status, 'ok');
});

hcase('websocket Upgrade: a normal answer, then the next keep-alive request is answered', async () => {
  const r = await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n' +
    'GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.deepEqual(r.responses.map((x) => x.status), [200, 200], r.st.data.slice(0, 600));
  assert.equal(JSON.parse(r.responses[1].body).status, 'ready');
});

hcase('chunk size above max_body: 413 at once (not 408 after the body timeout)', async () => {
  const r = await exchange('POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffff\r\nabc');
  assertOneError(r, 413, 'anthropic', { type: 'request_too_large' });
});

hcase('chunks adding up past max_body: 413', async () => {
  const piece = `${(40000).toString(16)}\r\n${'a'.repeat(40000)}\r\n`;
  const r = await exchange(['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', piece, piece]);
  assertOneError(r, 413, 'openai', { type: 'invalid_request_error' });
});

hcase('chunk size overflow (20 hex digits): 400', async () => {
  assertOneError(await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n'), 400, 'openai');
});

hcase('chunk data not followed by CRLF: 400', async () => {
  assertOneError(await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n'), 400, 'openai');
});

// RFC 9110 6.5: trailer fields are not headers. Many of them used to grow the
// header buffer under the parsed header table (a use-after-free).
hcase('chunked request with trailers: served, trailers neither kept nor forwarded', async () => {
  await mock.reset();
  const body = chatBody;
  const trailers = Array.from({ length: 40 }, (_, i) => `X-T${i}: ${'p'.repeat(400)}\r\n`).join('');
  const r = await exchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Echo: e\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n` +
    `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\nAuthorization: Bearer trailer-key\r\nX-Upstream-Trailer: t\r\n${trailers}\r\n`);
  assert.equal(r.responses.length, 1, r.st.data.slice(0, 500));
  assert.equal(r.responses[0].status, 200, r.responses[0].body);
  const reqs = await mock.requests();
  assert.equal(reqs.length, 1);
  for (const name of Object.keys(reqs[0].headers)) assert.ok(!/^x-t\d|x-upstream-trailer/.test(name), name);
  assert.notEqual(reqs[0].headers.authorization, 'Bearer trailer-key');
});

hcase('trailers past max_header: 431, closed', async () => {
  const trailers = Array.from({ length: 100 }, (_, i) => `X-T${i}: ${'p'.repeat(400)}\r\n`).join('');
  const r = await exchange(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n${trailers}\r\n`);
  assertOneError(r, 431, 'openai');
});

hcase('Content-Length over max_body: 413 before the body is read', async () => {
  assertOneError(await exchange('POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n'), 413, 'anthropic', { type: 'request_too_large' });
});

// ---- limits and slow clients ----------------------------------------------------------

hcase('header flood (thousands of small headers): 431', async () => {
  let h = '';
  for (let i = 0; i < 5000; i++) h += `X-F${i}: v\r\n`;
  assertOneError(await exchange(`GET /healthz HTTP/1.1\r\nHost: x\r\n${h}\r\n`), 431, 'openai');
});

hcase('one oversized header value: 431', async () => {
  assertOneError(await exchange(`POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Big: ${'v'.repeat(40000)}\r\n\r\n`), 431, 'anthropic');
});

hcase('slowloris head (a byte at a time, never finished): 408, closed', async () => {
  const head = 'POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Slow: ';
  /* 20 ms a byte: the path (which picks the error's shape) is in well before
   * the 1 s header timeout, the head (75 bytes) never is */
  const r = await exchange([...head, ...'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'], { gapMs: 20 });
  assertOneError(r, 408, 'anthropic', { message: /header timeout/ });
});

hcase('only empty lines, never a request line: closed by the header timeout', async () => {
  const r = await exchange(['\r\n', '\r\n', '\r\n'], { gapMs: 100 });
  assert.ok(r.responses.length <= 1);
  if (r.responses.length) assert.equal(r.responses[0].status, 408);
});

hcase('slow body: 408 "request body timeout"', async () => {
  const r = await exchange('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"model"');
  assertOneError(r, 408, 'openai', { message: /body timeout/ });
});

hcase('connection that sends nothing is closed', async () => {
  const r = await exchange([], { waitMs: 5000 });
  assert.equal(r.responses.length, 0);
});

// ---- disconnects -----------------------------------------------------------------

hcase('disconnect mid-head and mid-body: nothing forwarded, no fd kept', async () => {
  await mock.reset();
  for (const bytes of ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConte',
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"model":']) {
    const c = rawClient(px.port);
    await c.connected;
    c.sock.write(bytes);
    await sleep(50);
    c.sock.destroy();
  }
  await sleep(100);
  assert.equal((await mock.requests()).length, 0);
});

hcase('disconnect while the upstream answers: upstream cancelled', async () => {
  await mock.reset();
  await mock.script([{ delay_ms: 3000, status: 200, body: { id: 'x', object: 'chat.completion', choices: [] } }]);
  const c = rawClient(px.port);
  await c.connected;
  c.sock.write(post('/v1/chat/completions', chatBody));
  await waitFor(async () => (await mock.requests()).length === 1, { what: 'request upstream' });
  c.sock.destroy();
  await waitFor(async () => (await mock.stats()).responses_aborted >= 1 || (await mock.queue()).length === 0, { what: 'upstream cancelled' });
});

hcase('half-close after a request: the answer still arrives, then close', async () => {
  const r = await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', { end: true });
  assert.equal(r.responses.length, 1);
  assert.equal(r.responses[0].status, 200);
  assert.equal(r.closed, true);
});

hcase('half-close after two pipelined requests: both answered in order', async () => {
  const r = await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n', { end: true });
  assert.equal(r.responses.length, 2, r.st.data);
  assert.equal(JSON.parse(r.responses[0].body).status, 'ok');
  assert.equal(JSON.parse(r.responses[1].body).status, 'ready');
});

// ---- pipelining and keep-alive ----------------------------------------------------------

hcase('three pipelined requests in one write: three answers in order', async () => {
  const one = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n';
  const r = await exchange(one + one + 'GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.equal(r.responses.length, 3);
  assert.deepEqual(r.responses.map((x) => x.status), [200, 200, 200]);
  assert.equal(JSON.parse(r.responses[2].body).status, 'ready');
});

hcase('a bad request after a good one on keep-alive: one answer each, then closed (no request after the error)', async () => {
  const r = await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost : y\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  assert.equal(r.responses.length, 2, r.st.data);
  assert.equal(r.responses[0].status, 200);
  assert.equal(r.responses[1].status, 400);
  assert.equal(r.responses[1].headers.connection, 'close');
  assert.equal(r.rest, '');
  assert.equal(r.closed, true);
});

hcase('pipelined bytes past the input buffer while a request is in flight are never dropped', async () => {
  await mock.reset();
  await mock.script([{ delay_ms: 1500, status: 200, body: { id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-4o', choices: [{ index: 0, message: { role: 'assistant', content: 'slow' }, finish_reason: 'stop' }] } }]);
  const one = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n';
  const n = 40000; // 1.4 MB of pipelined requests: more than the 1 MiB input buffer
  const c = rawClient(px.port);
  await c.connected;
  c.sock.write(post('/v1/chat/completions', chatBody));
  c.sock.write(one.repeat(n) + 'GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  await Promise.race([c.closed, sleep(30000)]);
  assert.equal(c.st.closed, true, 'closed after the last request');
  const { responses, rest } = parseResponses(c.st.data);
  assert.equal(rest, '');
  assert.equal(responses.length, n + 2, `all ${n + 2} answers`);
  assert.equal(JSON.parse(responses[0].body).choices[0].message.content, 'slow');
  assert.ok(responses.slice(1).every((x) => x.status === 200));
  assert.equal(JSON.parse(responses[n + 1].body).status, 'ready');
}, { timeout: 60000 });

hcase('a 400 written before closing with unread input arrives (lingering close, no RST)', async () => {
  // the error is found in the first bytes; 2 MB more follow in the same burst
  const junk = Buffer.alloc(2 << 20, 'j');
  for (let i = 0; i < 3; i++) {
    const c = rawClient(px.port);
    await c.connected;
    c.sock.write('GET /heal\x01thz HTTP/1.1\r\nHost: y\r\n\r\n');
    c.sock.write(junk);
    await Promise.race([c.closed, sleep(8000)]);
    assert.equal(c.st.closed, true);
    const { responses } = parseResponses(c.st.data);
    assert.equal(responses.length, 1, `the 400 arrived (${c.st.error ? c.st.error.code : 'no error'}): ${JSON.stringify(c.st.data.slice(0, 200))}`);
    assert.equal(responses[0].status, 400);
    assert.equal(c.st.error, null, 'closed with FIN, not reset');
  }
});

hcase('a large answer read steadily is not cut by the keep-alive idle timer (idle_timeout = 1s)', async () => {
  await mock.reset();
  const size = 25 << 20;
  const content = 'z'.repeat(size);
  await mock.script([{ status: 200, body: { id: 'big', object: 'chat.completion', created: 1, model: 'gpt-4o', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] } }]);
  const sock = net.connect({ port: px.port, host: '127.0.0.1' });
  let closed = false;
  sock.on('close', () => (closed = true));
  sock.on('error', () => {});
  await new Promise((r) => sock.once('connect', r));
  // translated (Anthropic client, Chat upstream): the whole answer is
  // written at once
  sock.write(post('/v1/messages', JSON.stringify({ model: 'gpt-4o', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] })));
  // read steadily at about 8 MB/s from the first byte (pauses of at most
  // 50 ms): draining what the gateway queued takes several idle timeouts
  const parts = [];
  let got = 0;
  let want = -1;
  let t0 = 0;
  sock.on('data', (b) => {
    if (!t0) t0 = Date.now();
    parts.push(b);
    got += b.length;
    if (want < 0) {
      const all = Buffer.concat(parts).toString('latin1');
      const he = all.indexOf('\r\n\r\n');
      const m = /content-length: (\d+)/i.exec(all.slice(0, he));
      if (he >= 0 && m) want = he + 4 + Number(m[1]);
    }
    const ahead = got / 8e6 * 1000 - (Date.now() - t0);
    if (ahead > 0) {
      sock.pause();
      setTimeout(() => sock.resume(), Math.min(ahead, 50));
    }
  });
  const end = Date.now() + 60000;
  while (!closed && Date.now() < end && !(want >= 0 && got >= want)) await sleep(20);
  const { responses } = parseResponses(Buffer.concat(parts).toString('latin1'));
  assert.equal(responses.length, 1, `complete answer; got ${got} of ${want} bytes, closed=${closed}`);
  assert.equal(JSON.parse(responses[0].body).content[0].text.length, size);
  sock.destroy();
}, { timeout: 90000 });

// ---- header injection -----------------------------------------------------------------

hcase('a model name with CR LF never reaches a response header', async () => {
  await mock.reset();
  const body = JSON.stringify({ model: 'gpt\r\nset-cookie: evil=1\r\nx-injected: 1', messages: [{ role: 'user', content: 'hi' }] });
  const r = await exchange(post('/v1/chat/completions', body, 'Connection: close\r\n'));
  assert.equal(r.responses.length, 1, r.st.data.slice(0, 800));
  const res = r.responses[0];
  assert.ok(!res.names.includes('set-cookie'), JSON.stringify(res.headers));
  assert.ok(!res.names.includes('x-injected'), JSON.stringify(res.headers));
  const head = r.st.data.slice(0, r.st.data.indexOf('\r\n\r\n'));
  assert.ok(!/evil/.test(head), head);
});

hcase('an x-request-id with a quote is not echoed; a clean one is', async () => {
  const r = await exchange('GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: a"b\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: abc-123\r\nConnection: close\r\n\r\n');
  assert.equal(r.responses.length, 2);
  assert.notEqual(r.responses[0].headers['x-request-id'], 'a"b');
  assert.equal(r.responses[1].headers['x-request-id'], 'abc-123');
});

hcase('Expect: 100-continue: one 100, then the answer', async () => {
  await mock.reset();
  const r = await exchange(post('/v1/chat/completions', chatBody, 'Expect: 100-continue\r\nConnection: close\r\n'));
  assert.deepEqual(r.responses.map((x) => x.status), [100, 200]);
});

hcase('OPTIONS * (asterisk-form): 404 OpenAI shape, connection kept', async () => {
  const r = await exchange('OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.deepEqual(r.responses.map((x) => x.status), [404, 200]);
});

hcase('many connections opened and dropped: fds back to baseline', async () => {
  const socks = [];
  for (let i = 0; i < 50; i++) {
    const c = rawClient(px.port);
    await c.connected;
    if (i % 2) c.sock.write('GET /heal');
    socks.push(c);
  }
  await sleep(100);
  for (const c of socks) c.sock.destroy();
});

test('access log bytes_out counts bytes written to the socket, not queued', async () => {
  const logPath = `${fs.mkdtempSync('/tmp/proxai-hostile-')}/access.log`;
  const px2 = await startProxai(
    C.server({ access_log: `${logPath}`, idle_timeout: '5s' }) +
    C.upstream('oc', 'chat', mock.url, { api_key: 'up-key' }) +
    C.route('*', { upstream: 'oc' }));
  try {
    const size = 6 << 20;
    const answer = { status: 200, body: { id: 'b', object: 'chat.completion', created: 1, model: 'gpt-4o', choices: [{ index: 0, message: { role: 'assistant', content: 'q'.repeat(size) }, finish_reason: 'stop' }] } };
    const req = post('/v1/messages', JSON.stringify({ model: 'gpt-4o', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }), 'Connection: close\r\n');
    const records = () => (fs.existsSync(logPath) ? fs.readFileSync(logPath, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);
    // read in full: bytes_out is what the client received (head included)
    await mock.reset();
    await mock.script([answer]);
    let got = 0;
    await new Promise((resolve, reject) => {
      const sock = net.connect(px2.port, '127.0.0.1', () => sock.write(req));
      sock.on('data', (d) => (got += d.length));
      sock.on('close', resolve);
      sock.on('error', reject);
    });
    await waitFor(() => records().length === 1, { what: 'first access log record' });
    assert.ok(got > size);
    assert.equal(records()[0].bytes_out, got);
    // never read, then disconnect: far less than the answer was written
    await mock.script([answer]);
    const sock = net.connect(px2.port, '127.0.0.1');
    sock.on('error', () => {});
    await new Promise((r) => sock.once('connect', r));
    sock.pause();
    sock.write(req);
    await waitFor(async () => (await mock.stats()).requests >= 2, { what: 'second request upstream' });
    await sleep(500);
    sock.destroy();
    await waitFor(() => records().length === 2, { what: 'second access log record' });
    const r2 = records()[1];
    assert.equal(r2.status, 200);
    assert.ok(r2.bytes_out < size, `bytes_out ${r2.bytes_out} counts only what was written`);
  } finally {
    await px2.stop();
  }
}, { timeout: 60000 });

test('fds back to baseline at the end', async () => {
  await waitFor(() => fdCount() <= fdBase + 4, { timeout: 6000, what: `fd count back to ${fdBase} (+ upstream pool)` });
});

await run();
