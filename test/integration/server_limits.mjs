// The HTTP server edge of proxai, on raw sockets: body and head limits, the
// slow-header timeout, keep-alive, pipelining, chunked bodies,
// Expect: 100-continue, max_connections, unix socket and IPv6 listeners.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startMock, startProxai, test, run, sleep, freePort } from './lib/harness.mjs';
import * as C from './lib/config.mjs';
import { rawClient, rawPost as post, parseResponses } from './lib/client.mjs';

const mock = await startMock();
const upstreams =
  C.upstream('oc', 'chat', mock.url, { api_key: 'up-key' }) +
  C.upstream('an', 'anthropic', mock.url, { api_key: 'up-ant' }) +
  C.route('claude-*', { upstream: 'an' }) +
  C.route('*', { upstream: 'oc' });
const px = await startProxai(
  C.server({ max_body: '4k', max_header: '2k', header_timeout: '1s' }) +
  upstreams);

const chatBody = JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });

const tcp = (port = px.port) => rawClient({ port, host: '127.0.0.1' });


test('HEAD gets the headers without a body; the next keep-alive answer is intact', async () => {
  const u = new URL(px.url);
  const data = await new Promise((resolve, reject) => {
    const sock = net.connect(Number(u.port), u.hostname);
    let buf = '';
    sock.on('data', (d) => (buf += d));
    sock.on('end', () => resolve(buf));
    sock.on('error', reject);
    sock.write('HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  });
  const parts = data.split('HTTP/1.1 ');
  assert.equal(parts.length, 3, data);
  assert.match(parts[1], /^200 /);
  assert.ok(parts[1].endsWith('\r\n\r\n'), `HEAD answer carries no body: ${JSON.stringify(parts[1])}`);
  assert.match(parts[2], /^200 [\s\S]*\r\n\r\n\{"status":"ok"\}$/);
});

test('413 for a body over max_body with Content-Length (OpenAI and Anthropic shape)', async () => {
  await mock.reset();
  const big = JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x'.repeat(8000) }] });
  const c = tcp();
  await c.connected;
  c.sock.write(post('/v1/chat/completions', big));
  await c.waitFor((d) => parseResponses(d).responses.length >= 1, 10000, '413');
  const [r] = parseResponses(c.st.data).responses;
  assert.equal(r.status, 413, c.st.data);
  const j = JSON.parse(r.body);
  assert.equal(j.error.type, 'invalid_request_error');
  c.sock.destroy();

  const a = tcp();
  await a.connected;
  a.sock.write(post('/v1/messages', JSON.stringify({ model: 'claude-x', max_tokens: 5, messages: [{ role: 'user', content: 'y'.repeat(8000) }] })));
  await a.waitFor((d) => parseResponses(d).responses.length >= 1, 10000, '413');
  const [ra] = parseResponses(a.st.data).responses;
  assert.equal(ra.status, 413);
  const ja = JSON.parse(ra.body);
  assert.equal(ja.type, 'error');
  assert.equal(ja.error.type, 'request_too_large');
  a.sock.destroy();
  assert.equal((await mock.stats()).requests, 0);
});

test('413 for a chunked body over max_body', async () => {
  const c = tcp();
  await c.connected;
  c.sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
  const piece = 'a'.repeat(1000);
  for (let i = 0; i < 8 && !c.st.closed; i++) {
    c.sock.write(`${piece.length.toString(16)}\r\n${piece}\r\n`);
    await sleep(5);
  }
  await c.waitFor((d) => parseResponses(d).responses.length >= 1, 10000, '413');
  assert.equal(parseResponses(c.st.data).responses[0].status, 413, c.st.data);
  c.sock.destroy();
});

test('431 for a request head over max_header', async () => {
  const c = tcp();
  await c.connected;
  c.sock.write(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: cli-431\r\nX-Big: ${'b'.repeat(4000)}\r\n\r\n`);
  await c.waitFor((d) => parseResponses(d).responses.length >= 1, 10000, '431');
  const [r] = parseResponses(c.st.data).responses;
  assert.equal(r.status, 431, c.st.data);
  assert.match(c.st.data, /\r\nx-request-id: cli-431\r\n/i, 'the client\'s request id even on a head that never completed');
  c.sock.destroy();
  // many small headers add up too
  const d = tcp();
  await d.connected;
  let head = 'GET /healthz HTTP/1.1\r\nHost: x\r\n';
  for (let i = 0; i < 200; i++) head += `X-H${i}: ${'v'.repeat(20)}\r\n`;
  d.sock.write(head + '\r\n');
  await d.waitFor((x) => parseResponses(x).responses.length >= 1, 10000, '431');
  assert.equal(parseResponses(d.st.data).responses[0].status, 431);
  d.sock.destroy();
});

test('slow request head is cut after header_timeout (408 or close)', async () => {
  const c = tcp();
  await c.connected;
  c.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ');
  const t0 = Date.now();
  await Promise.race([c.closed, sleep(8000)]);
  assert.ok(c.st.closed, `connection still open ${Date.now() - t0} ms after a half head (header_timeout = 1s)`);
  if (c.st.data) assert.match(c.st.data, /^HTTP\/1\.1 408 /);
});

test('keep-alive: two requests on one socket, the socket stays open', async () => {
  const c = tcp();
  await c.connected;
  c.sock.write(post('/v1/chat/completions', chatBody));
  await c.waitFor((d) => parseResponses(d).responses.length >= 1, 10000, 'first response');
  c.sock.write(post('/v1/chat/completions', chatBody.replace('gpt-4o', 'gpt-second')));
  await c.waitFor((d) => parseResponses(d).responses.length >= 2, 10000, 'second response');
  const rs = parseResponses(c.st.data).responses;
  assert.equal(rs[0].status, 200);
  assert.equal(rs[1].status, 200);
  assert.equal(JSON.parse(rs[0].body).model, 'gpt-4o');
  assert.equal(JSON.parse(rs[1].body).model, 'gpt-second');
  await sleep(300);
  assert.equal(c.st.closed, false, 'keep-alive socket closed');
  // and a third, GET this time
  c.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await c.waitFor((d) => parseResponses(d).responses.length >= 3, 10000, 'third response');
  assert.equal(parseResponses(c.st.data).responses[2].status, 200);
  c.sock.destroy();
});

test('an idle keep-alive connection is closed after idle_timeout', async () => {
  const p2 = await startProxai(
    C.server({ idle_timeout: '1s' }) +
    upstreams);
  try {
    const c = tcp(p2.port);
    await c.connected;
    c.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await c.waitFor((d) => parseResponses(d).responses.length >= 1, 5000, 'healthz');
    assert.equal(c.st.closed, false);
    await Promise.race([c.closed, sleep(8000)]);
    assert.ok(c.st.closed, 'idle keep-alive connection still open long after idle_timeout = 1s');
  } finally {
    await p2.stop();
  }
});

test('a request with Connection: close is answered and the connection closed', async () => {
  const c = tcp();
  await c.connected;
  c.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  await Promise.race([c.closed, sleep(5000)]);
  assert.ok(c.st.closed, 'connection not closed');
  const [r] = parseResponses(c.st.data).responses;
  assert.equal(r.status, 200);
  assert.match(r.headers.connection || '', /close/i);
});

test('pipelined requests are answered in order', async () => {
  await mock.reset();
  // the first is slow upstream, the second fast: order must still hold
  await mock.script([{ match: 'gpt-slow', default: true, headers_delay_ms: 300 }]);
  const c = tcp();
  await c.connected;
  c.sock.write(
    post('/v1/chat/completions', chatBody.replace('gpt-4o', 'gpt-slow')) +
      post('/v1/chat/completions', chatBody.replace('gpt-4o', 'gpt-fast')) +
      'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n',
  );
  await c.waitFor((d) => parseResponses(d).responses.length >= 3, 10000, 'three responses');
  const rs = parseResponses(c.st.data).responses;
  assert.deepEqual(rs.map((r) => r.status), [200, 200, 200]);
  assert.equal(JSON.parse(rs[0].body).model, 'gpt-slow');
  assert.equal(JSON.parse(rs[1].body).model, 'gpt-fast');
  assert.match(rs[2].body, /ok|status|alive|/);
  c.sock.destroy();
});

test('chunked request body is forwarded whole', async () => {
  await mock.reset();
  const c = tcp();
  await c.connected;
  c.sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
  const parts = [chatBody.slice(0, 10), chatBody.slice(10, 31), chatBody.slice(31)];
  for (const p of parts) {
    c.sock.write(`${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`);
    await sleep(20);
  }
  c.sock.write('0\r\n\r\n');
  await c.waitFor((d) => parseResponses(d).responses.length >= 1, 10000, 'response');
  const [r] = parseResponses(c.st.data).responses;
  assert.equal(r.status, 200, c.st.data);
  assert.equal(JSON.parse(r.body).choices[0].message.content, 'Hello from mock');
  const [rec] = await mock.requests();
  assert.deepEqual(rec.body, JSON.parse(chatBody));
  c.sock.destroy();
});

test('Expect: 100-continue gets 100 Continue, then the answer', async () => {
  const c = tcp();
  await c.connected;
  c.sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${chatBody.length}\r\nExpect: 100-continue\r\n\r\n`);
  await c.waitFor((d) => /^HTTP\/1\.1 100 /.test(d) && d.includes('\r\n\r\n'), 5000, '100 Continue');
  c.sock.write(chatBody);
  await c.waitFor((d) => parseResponses(d).responses.length >= 2, 10000, 'final response');
  const rs = parseResponses(c.st.data).responses;
  assert.equal(rs[0].status, 100);
  assert.equal(rs[1].status, 200);
  assert.equal(JSON.parse(rs[1].body).choices[0].message.content, 'Hello from mock');
  c.sock.destroy();
});

test('max_connections = 2: the third concurrent connection is closed at once', async () => {
  const p2 = await startProxai(
    C.server({ max_connections: 2, idle_timeout: '1s' }) +
    upstreams);
  try {
    // startProxai's /healthz poll left a keep-alive fetch connection: let
    // proxai's idle_timeout (1s) close it so that only ours count
    await sleep(1500);
    const a = tcp(p2.port);
    const b = tcp(p2.port);
    await a.connected;
    await b.connected;
    a.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    b.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await a.waitFor((d) => parseResponses(d).responses.length >= 1, 5000, 'a');
    await b.waitFor((d) => parseResponses(d).responses.length >= 1, 5000, 'b');
    const c = tcp(p2.port);
    c.sock.on('connect', () => c.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'));
    await Promise.race([c.closed, sleep(5000)]);
    assert.ok(c.st.closed, 'third connection not closed');
    assert.ok(!/^HTTP\/1\.1 200/.test(c.st.data), `third connection was served: ${c.st.data}`);
    assert.equal(a.st.closed, false);
    // the first two still work
    a.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await a.waitFor((d) => parseResponses(d).responses.length >= 2, 5000, 'a again');
    // after one leaves, a new one is accepted
    b.sock.destroy();
    await b.closed;
    await sleep(200);
    const d = tcp(p2.port);
    await d.connected;
    d.sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    await d.waitFor((x) => parseResponses(x).responses.length >= 1, 5000, 'd');
    assert.equal(parseResponses(d.st.data).responses[0].status, 200);
    a.sock.destroy();
    d.sock.destroy();
  } finally {
    await p2.stop();
  }
});

test('unix socket listener', async () => {
  const sockPath = path.join(os.tmpdir(), `proxai-integ-${process.pid}.sock`);
  fs.rmSync(sockPath, { force: true });
  const { spawn } = await import('node:child_process');
  const bin = process.env.PROXAI_BIN || 'build/proxai';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-unix-'));
  const conf = path.join(dir, 'proxai.conf');
  fs.writeFileSync(conf, C.server({ listen: `unix:${sockPath}` }) + upstreams);
  const child = spawn(bin, ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  try {
    const end = Date.now() + 10000;
    while (!fs.existsSync(sockPath)) {
      if (Date.now() > end) throw new Error(`unix socket never appeared; stderr: ${stderr}`);
      await sleep(25);
    }
    const c = rawClient({ path: sockPath });
    await c.connected;
    c.sock.write(post('/v1/chat/completions', chatBody));
    await c.waitFor((d) => parseResponses(d).responses.length >= 1, 10000, 'response over unix socket');
    const [r] = parseResponses(c.st.data).responses;
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.body).choices[0].message.content, 'Hello from mock');
    c.sock.destroy();
  } finally {
    process.kill(child.pid, 'SIGTERM');
    const r = await Promise.race([exited, sleep(10000).then(() => null)]);
    if (!r) process.kill(child.pid, 'SIGKILL');
    else assert.equal(r.code, 0, `exit ${JSON.stringify(r)}; stderr ${stderr}`);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.rmSync(sockPath, { force: true });
  }
});

function hasIPv6Loopback() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(0, '::1', () => s.close(() => resolve(true)));
  });
}

test('IPv6 [::1]:port listener (when the machine has ::1)', async () => {
  if (!(await hasIPv6Loopback())) {
    console.log('# skip: no ::1 on this machine');
    return;
  }
  const port = await freePort();
  const { spawn } = await import('node:child_process');
  const bin = process.env.PROXAI_BIN || 'build/proxai';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-v6-'));
  const conf = path.join(dir, 'proxai.conf');
  fs.writeFileSync(conf, C.server({ listen: `[::1]:${port}` }) + upstreams);
  const child = spawn(bin, ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  try {
    const end = Date.now() + 10000;
    let res;
    for (;;) {
      try {
        res = await fetch(`http://[::1]:${port}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody });
        break;
      } catch {
        if (Date.now() > end) throw new Error(`no answer on [::1]:${port}; stderr: ${stderr}`);
        await sleep(25);
      }
    }
    assert.equal(res.status, 200);
    assert.equal((await res.json()).choices[0].message.content, 'Hello from mock');
  } finally {
    process.kill(child.pid, 'SIGTERM');
    const r = await Promise.race([exited, sleep(10000).then(() => null)]);
    if (!r) process.kill(child.pid, 'SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

await run();
