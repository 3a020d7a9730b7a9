// Reliability of the real proxai binary against the C mock upstream: client
// disconnects cancel the upstream, slow readers keep memory bounded and still
// get every event, SIGTERM drains in-flight streams, broken upstream streams
// end with the client protocol's error event, connect failures and
// first-byte timeouts map to 502 / 504 in the client's shape.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { startMock, startProxai, test, run, waitFor, parseSSE, sleep, freePort } from './lib/harness.mjs';
import * as C from './lib/config.mjs';
import { post as postJSON, rawPost, vmRSSKiB } from './lib/client.mjs';

const mock = await startMock();

const noTerminal = {
  chat: [
    { data: { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices: [{ index: 0, delta: { role: 'assistant', content: 'Hel' }, finish_reason: null }] } },
    { data: { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices: [{ index: 0, delta: { content: 'lo' }, finish_reason: null }] } },
  ],
  responses: [
    { event: 'response.created', data: { type: 'response.created', sequence_number: 0, response: { id: 'resp_1', object: 'response', created_at: 1, status: 'in_progress', model: 'resp-a', output: [] } } },
    { event: 'response.output_text.delta', data: { type: 'response.output_text.delta', sequence_number: 1, item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Hel' } },
  ],
  anthropic: [
    { event: 'message_start', data: { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-x', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1, output_tokens: 0 } } } },
    { event: 'content_block_start', data: { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } } },
    { event: 'content_block_delta', data: { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } } },
  ],
};

// An upstream that sends the head and the first events of a stream, waits
// until proxai has surely read them, then resets the connection (TCP RST).
// (The mock resets right after its writes complete; a RST that overtakes
// unread data makes the kernel drop that data, so the mock cannot script a
// deterministic "reset after K events" as seen by the reader.)
const resetServer = net.createServer((sock) => {
  let req = '';
  sock.on('data', (d) => {
    req += d.toString('latin1');
    const he = req.indexOf('\r\n\r\n');
    if (he < 0) return;
    const cl = Number((/content-length: *(\d+)/i.exec(req.slice(0, he)) || [0, 0])[1]);
    if (req.length < he + 4 + cl) return;
    const kind = req.startsWith('POST /v1/messages') ? 'anthropic' : req.includes('/responses') ? 'responses' : 'chat';
    sock.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n');
    for (const ev of noTerminal[kind]) {
      const t = (ev.event ? `event: ${ev.event}\n` : '') + `data: ${JSON.stringify(ev.data)}\n\n`;
      sock.write(`${Buffer.byteLength(t).toString(16)}\r\n${t}\r\n`);
    }
    setTimeout(() => sock.resetAndDestroy(), 300);
  });
  sock.on('error', () => {});
});
await new Promise((resolve) => resetServer.listen(0, '127.0.0.1', resolve));
const resetUrl = `http://127.0.0.1:${resetServer.address().port}`;
const deadPort = await freePort(); // nothing listens there

const upstreams =
  C.upstream('oc', 'chat', mock.url, { api_key: 'k', idle_timeout: '1s', first_byte_timeout: '1s' }) +
  C.upstream('or', 'responses', mock.url, { api_key: 'k', idle_timeout: '1s', first_byte_timeout: '1s' }) +
  C.upstream('an', 'anthropic', mock.url, { api_key: 'k', idle_timeout: '1s', first_byte_timeout: '1s' }) +
  C.upstream('slow', 'chat', mock.url, { api_key: 'k' }) +
  C.upstream('dead_oc', 'chat', `http://127.0.0.1:${deadPort}`, { api_key: 'k', connect_timeout: '2s' }) +
  C.upstream('dead_an', 'anthropic', `http://127.0.0.1:${deadPort}`, { api_key: 'k', connect_timeout: '2s' }) +
  C.upstream('rst_oc', 'chat', resetUrl, { api_key: 'k' }) +
  C.upstream('rst_or', 'responses', resetUrl, { api_key: 'k' }) +
  C.upstream('rst_an', 'anthropic', resetUrl, { api_key: 'k' }) +
  C.route('rst-chat', { upstream: 'rst_oc' }) +
  C.route('rst-resp', { upstream: 'rst_or' }) +
  C.route('rst-claude', { upstream: 'rst_an' }) +
  C.route('big-*', { upstream: 'slow' }) +
  C.route('dead-claude', { upstream: 'dead_an' }) +
  C.route('dead-*', { upstream: 'dead_oc' }) +
  C.route('claude-*', { upstream: 'an' }) +
  C.route('resp-*', { upstream: 'or' }) +
  C.route('*', { upstream: 'oc' });
// Under AddressSanitizer freed memory sits in a quarantine (256 MB by default),
// which would swamp the RSS bound of the slow-reader test: keep it small.
const asanEnv = { ASAN_OPTIONS: [process.env.ASAN_OPTIONS, 'quarantine_size_mb=8'].filter(Boolean).join(':') };
const px = await startProxai(
  C.server() +
  upstreams, { env: asanEnv });

const msgs = [{ role: 'user', content: 'hi' }];
const bodies = {
  chat: (model = 'gpt-4o') => ({ model, messages: msgs, stream: true }),
  responses: (model = 'resp-a') => ({ model, input: 'hi', stream: true }),
  anthropic: (model = 'claude-x') => ({ model, max_tokens: 20, messages: msgs, stream: true }),
};
const paths = { chat: '/v1/chat/completions', responses: '/v1/responses', anthropic: '/v1/messages' };
const upPaths = { chat: '/chat/completions', responses: '/responses', anthropic: '/v1/messages' };

/** A JSON POST (lib/client.mjs) that also names the Anthropic version. */
const post = (url, pathname, body, headers = {}) =>
  postJSON(url, pathname, body, { 'anthropic-version': '2023-06-01', ...headers });

/** Asserts `text` (an SSE body) ends with the client protocol's error event. */
function assertStreamError(kind, text) {
  const events = parseSSE(text);
  assert.ok(events.length > 0, 'no events at all');
  assert.ok(!events.some((e) => e.data === '[DONE]'), `fabricated [DONE]: ${text}`);
  const last = events.at(-1);
  if (kind === 'chat') {
    const j = JSON.parse(last.data);
    assert.ok(j.error && typeof j.error.message === 'string', `last frame is not an error: ${last.data}`);
    for (const e of events) {
      const d = JSON.parse(e.data);
      for (const ch of d.choices || []) assert.equal(ch.finish_reason ?? null, null, `fabricated finish: ${e.data}`);
    }
  } else if (kind === 'anthropic') {
    assert.equal(last.event, 'error', `last event: ${last.event} ${last.data}`);
    const j = JSON.parse(last.data);
    assert.equal(j.type, 'error');
    assert.equal(typeof j.error.type, 'string');
    assert.equal(typeof j.error.message, 'string');
    assert.ok(!events.some((e) => e.event === 'message_stop'), 'fabricated message_stop');
  } else {
    const j = JSON.parse(last.data);
    assert.equal(j.type, 'response.failed', `last event: ${last.data}`);
    assert.equal(last.event ?? 'response.failed', 'response.failed');
    assert.equal(j.response.status, 'failed');
    assert.ok(j.response.error && typeof j.response.error.message === 'string', last.data);
    assert.ok(!events.some((e) => /response\.(completed|incomplete)/.test(e.event || '')), 'fabricated completion');
  }
}

// ---- client disconnect -------------------------------------------------------

test('client disconnects mid-stream: the upstream connection is closed promptly', async () => {
  await mock.reset();
  const chunk = { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices: [{ index: 0, delta: { content: 'tick' }, finish_reason: null }] };
  await mock.script([{ sse: [], sse_repeat: { event: { data: chunk }, count: 200 }, sse_tail: ['data: [DONE]\n\n'], delay_ms: 100 }]);
  const ac = new AbortController();
  const res = await fetch(px.url + paths.chat, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(bodies.chat()), signal: ac.signal });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let got = '';
  while ((got.match(/data: /g) || []).length < 3) {
    const { value, done } = await reader.read();
    assert.ok(!done);
    got += Buffer.from(value).toString();
  }
  ac.abort();
  const st = await waitFor(async () => {
    const s = await mock.stats();
    return s.responses_aborted >= 1 && s.connections_open === 0 ? s : null;
  }, { timeout: 5000, what: 'mock to see its upstream response aborted' });
  assert.equal(st.responses_completed, 0);
  assert.ok(st.connections_closed_by_peer >= 1);
  assert.ok(st.stream_events_written < 100, `events written: ${st.stream_events_written}`);
  // the gateway still serves
  const ok = await post(px.url, paths.chat, { model: 'gpt-4o', messages: msgs });
  assert.equal(ok.status, 200);
});

// ---- slow reader / backpressure ---------------------------------------------

test('client stops reading during a long stream: RSS stays bounded, every event arrives after resuming', async () => {
  await mock.reset();
  const N = 100000;
  const pad = 'x'.repeat(2000);
  const ev = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"big-1","choices":[{"index":0,"delta":{"content":"${pad}"},"finish_reason":null}]}\n\n`;
  const totalBytes = ev.length * N;
  assert.ok(totalBytes > 200 * 1024 * 1024);
  await mock.script([{
    sse: [`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"big-1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n`],
    sse_repeat: { event: ev, count: N },
    sse_tail: ['data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"big-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', 'data: [DONE]\n\n'],
  }]);
  const baseline = vmRSSKiB(px.pid);
  const body = JSON.stringify(bodies.chat('big-1'));
  const sock = net.connect(px.port, '127.0.0.1');
  await new Promise((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  // Count events in the de-chunked body (proxai's chunk boundaries fall anywhere).
  const marker = Buffer.from('"content":"xx');
  let count = 0;
  let received = 0;
  let head = '';
  let pending = Buffer.alloc(0); // raw bytes not parsed yet
  let inHead = true;
  let chunkLeft = -1; // bytes left in the current chunk's data (+2 for CRLF); -1: expect a size line
  let tail = Buffer.alloc(0); // end of the de-chunked body, for markers split across chunks
  let bodyEnd = '';
  let complete = false;
  const feedBody = (b) => {
    const buf = Buffer.concat([tail, b]);
    let i = 0;
    for (;;) {
      const j = buf.indexOf(marker, i);
      if (j < 0) break;
      count++;
      i = j + marker.length;
    }
    tail = buf.subarray(Math.max(i, buf.length - (marker.length - 1)));
    bodyEnd = (bodyEnd + b.toString('latin1')).slice(-64);
  };
  const finished = new Promise((resolve, reject) => {
    sock.on('data', (d) => {
      received += d.length;
      pending = pending.length ? Buffer.concat([pending, d]) : d;
      if (inHead) {
        const he = pending.indexOf('\r\n\r\n');
        if (he < 0) return;
        head = pending.subarray(0, he).toString('latin1');
        pending = pending.subarray(he + 4);
        inHead = false;
      }
      for (;;) {
        if (chunkLeft < 0) {
          const le = pending.indexOf('\r\n');
          if (le < 0) return;
          const size = parseInt(pending.subarray(0, le).toString('latin1'), 16);
          pending = pending.subarray(le + 2);
          if (size === 0) {
            complete = true;
            resolve();
            return;
          }
          chunkLeft = size + 2;
        }
        if (pending.length === 0) return;
        const take = Math.min(chunkLeft, pending.length);
        const dataPart = pending.subarray(0, Math.max(0, Math.min(take, chunkLeft - 2)));
        if (dataPart.length) feedBody(dataPart);
        chunkLeft -= take;
        pending = pending.subarray(take);
        if (chunkLeft === 0) chunkLeft = -1;
      }
    });
    sock.on('error', reject);
    sock.on('close', () => (complete ? resolve() : reject(new Error(`closed after ${received} bytes, ${count} events`))));
  });
  sock.write(rawPost('/v1/chat/completions', body));
  await waitFor(() => received > 1024 * 1024, { timeout: 10000, what: 'first MB' });
  sock.pause();
  let maxRss = 0;
  for (let i = 0; i < 30; i++) {
    await sleep(100);
    maxRss = Math.max(maxRss, vmRSSKiB(px.pid));
  }
  const statsPaused = await mock.stats();
  const pausedMax = maxRss;
  assert.match(head, /^HTTP\/1\.1 200 /);
  assert.match(head, /transfer-encoding: chunked/i);
  assert.ok(maxRss - baseline < 64 * 1024, `RSS grew by ${maxRss - baseline} KiB while the client did not read (baseline ${baseline} KiB)`);
  assert.ok(statsPaused.stream_events_written < N / 2, `upstream not paused: ${statsPaused.stream_events_written} events written`);
  sock.resume();
  await finished;
  sock.destroy();
  assert.equal(count, N, `events received: ${count}`);
  console.log(`# slow reader: ${received} bytes, RSS baseline ${baseline} KiB, paused max +${pausedMax - baseline} KiB`);
  assert.match(bodyEnd, /"finish_reason":"stop"\}\]\}\n\ndata: \[DONE\]\n\n$/);
  maxRss = Math.max(maxRss, vmRSSKiB(px.pid));
  assert.ok(maxRss - baseline < 64 * 1024, `RSS grew by ${maxRss - baseline} KiB by the end of the stream (baseline ${baseline} KiB)`);
}, { timeout: 120000 });

// ---- SIGTERM drain -------------------------------------------------------------

test('SIGTERM during a paced stream: readyz 503 on a kept-alive connection, no new connections, stream completes, exit 0', async () => {
  const p = await startProxai(
    C.server({ shutdown_timeout: '20s' }) +
    upstreams);
  await mock.reset();
  const N = 20;
  await mock.script([{
    sse: [], sse_repeat: { event: { data: { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices: [{ index: 0, delta: { content: 't' }, finish_reason: null }] } }, count: N },
    sse_tail: [{ data: { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] } }, 'data: [DONE]\n\n'], delay_ms: 150,
  }]);
  // a kept-alive connection, idle when the signal comes
  const ka = net.connect(p.port, '127.0.0.1');
  let kaData = '';
  let kaClosed = false;
  ka.setEncoding('latin1');
  ka.on('data', (d) => (kaData += d));
  ka.on('close', () => (kaClosed = true));
  ka.on('error', () => {});
  await new Promise((resolve) => ka.once('connect', resolve));
  ka.write('GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n');
  await waitFor(() => /\r\n\r\n\{[^}]*\}/.test(kaData), { what: 'first readyz' });
  assert.match(kaData, /^HTTP\/1\.1 200 /);
  kaData = '';
  // a second kept-alive connection, for a model request while draining
  const ka2 = net.connect(p.port, '127.0.0.1');
  let ka2Data = '';
  ka2.setEncoding('latin1');
  ka2.on('data', (d) => (ka2Data += d));
  ka2.on('error', () => {});
  await new Promise((resolve) => ka2.once('connect', resolve));
  ka2.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await waitFor(() => /^HTTP\/1\.1 200 [^]*\r\n\r\n./.test(ka2Data), { what: 'healthz on the second connection' });
  ka2Data = '';

  const res = await fetch(p.url + paths.chat, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(bodies.chat()) });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let text = '';
  const readAll = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      text += Buffer.from(value).toString();
    }
  })();
  await waitFor(() => (text.match(/data: /g) || []).length >= 2, { what: 'first events' });
  process.kill(p.pid, 'SIGTERM');
  await sleep(200);

  // SPEC 4: /readyz is 503 while draining (asked on the kept-alive connection)
  ka.write('GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n');
  await waitFor(() => kaClosed || /\r\n\r\n\{[^}]*\}/.test(kaData), { timeout: 3000, what: 'readyz while draining' });
  const readyWhileDraining = kaData;
  // SPEC 6: a model request while draining gets 503 (Anthropic: overloaded_error)
  const mb = JSON.stringify({ model: 'claude-x', max_tokens: 5, messages: msgs });
  ka2.write(`POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nanthropic-version: 2023-06-01\r\nContent-Length: ${mb.length}\r\n\r\n${mb}`);
  await waitFor(() => /\r\n\r\n\{.*\}$/s.test(ka2Data) || ka2.destroyed || ka2.readyState === 'closed', { timeout: 3000, what: 'model request while draining' }).catch(() => {});
  const modelWhileDraining = ka2Data;
  ka2.destroy();
  // stop accepting: a new connection is refused (or closed without an answer)
  const fresh = await new Promise((resolve) => {
    const s = net.connect(p.port, '127.0.0.1');
    let d = '';
    s.setEncoding('latin1');
    s.on('data', (x) => (d += x));
    s.on('connect', () => s.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'));
    s.on('error', (e) => resolve({ error: e.code, data: d }));
    s.on('close', () => resolve({ closed: true, data: d }));
    setTimeout(() => {
      s.destroy();
      resolve({ timeout: true, data: d });
    }, 3000);
  });
  assert.ok(!/^HTTP\/1\.1 200/.test(fresh.data), `a new connection was served while draining: ${JSON.stringify(fresh)}`);

  await readAll;
  const events = parseSSE(text);
  assert.equal(events.filter((e) => e.data !== '[DONE]' && JSON.parse(e.data).choices[0].delta.content === 't').length, N, text);
  assert.equal(events.at(-1).data, '[DONE]');
  const r = await Promise.race([p.exited, sleep(15000).then(() => 'timeout')]);
  ka.destroy();
  assert.notEqual(r, 'timeout', 'proxai did not exit after the stream finished');
  assert.equal(r.code, 0, JSON.stringify(r));
  assert.match(readyWhileDraining, /^HTTP\/1\.1 503 /, `readyz on a kept-alive connection while draining: ${JSON.stringify(readyWhileDraining)} (connection closed: ${kaClosed})`);
  assert.match(modelWhileDraining, /^HTTP\/1\.1 503 /, `model request while draining: ${JSON.stringify(modelWhileDraining)}`);
  const dj = JSON.parse(modelWhileDraining.slice(modelWhileDraining.indexOf('\r\n\r\n') + 4));
  assert.equal(dj.type, 'error');
  assert.equal(dj.error.type, 'overloaded_error');
}, { timeout: 60000 });

test('shutdown_timeout: a stream longer than it is cut, the process still exits 0 (SIGINT)', async () => {
  const p = await startProxai(
    C.server({ shutdown_timeout: '1s' }) +
    upstreams);
  await mock.reset();
  await mock.script([{
    sse: [], sse_repeat: { event: { data: { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices: [{ index: 0, delta: { content: 't' }, finish_reason: null }] } }, count: 200 },
    sse_tail: ['data: [DONE]\n\n'], delay_ms: 100,
  }]);
  const res = await fetch(p.url + paths.chat, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(bodies.chat()) });
  assert.equal(res.status, 200);
  let text = '';
  const readAll = (async () => {
    try {
      for await (const chunk of res.body) text += Buffer.from(chunk).toString();
      return 'ended';
    } catch (e) {
      return `error: ${e.message}`;
    }
  })();
  await waitFor(() => (text.match(/data: /g) || []).length >= 2, { what: 'first events' });
  process.kill(p.pid, 'SIGINT');
  const r = await Promise.race([p.exited, sleep(10000).then(() => 'timeout')]);
  assert.notEqual(r, 'timeout', 'proxai did not exit after shutdown_timeout');
  assert.equal(r.code, 0, JSON.stringify(r));
  await readAll;
  assert.ok(!text.includes('[DONE]'), 'the 20 s stream cannot have completed within a 1 s shutdown_timeout');
  await waitFor(async () => (await mock.stats()).responses_aborted >= 1, { timeout: 5000, what: 'upstream transfer cancelled' });
}, { timeout: 30000 });

// ---- broken upstream streams ---------------------------------------------------

for (const kind of ['chat', 'responses', 'anthropic']) {
  test(`${kind}: stalled upstream stream (idle_timeout 1s) ends with the protocol's error event`, async () => {
    await mock.reset();
    await mock.script([{ default: true, path: upPaths[kind], fault: 'stall', fault_after: 2 }]);
    const r = await post(px.url, paths[kind], bodies[kind]());
    assert.equal(r.status, 200);
    assertStreamError(kind, r.text);
    await waitFor(async () => (await mock.stats()).responses_aborted >= 1, { timeout: 5000, what: 'stalled upstream closed' });
  });

  test(`${kind}: upstream reset (RST) mid-stream ends with the protocol's error event`, async () => {
    const model = { chat: 'rst-chat', responses: 'rst-resp', anthropic: 'rst-claude' }[kind];
    const r = await post(px.url, paths[kind], bodies[kind](model));
    assert.equal(r.status, 200, r.text);
    assertStreamError(kind, r.text);
    assert.match(r.text, /Hel/, 'the events before the reset were forwarded');
  });

  test(`${kind}: upstream stream closed cleanly mid-stream (FIN) ends with the protocol's error event`, async () => {
    await mock.reset();
    await mock.script([{ default: true, path: upPaths[kind], fault: 'close', fault_after: 3 }]);
    const r = await post(px.url, paths[kind], bodies[kind]());
    assert.equal(r.status, 200);
    assertStreamError(kind, r.text);
  });
}

for (const kind of ['chat', 'responses', 'anthropic']) {
  test(`${kind}: a stream that ends without its terminal event ends with the protocol's error event`, async () => {
    await mock.reset();
    await mock.script([{ path: upPaths[kind], sse: noTerminal[kind] }]);
    const r = await post(px.url, paths[kind], bodies[kind]());
    assert.equal(r.status, 200);
    assertStreamError(kind, r.text);
    assert.match(r.text, /Hel/, 'the events before the end were forwarded');
  });
}

test('SDKs see a broken stream as an error, not a normal end', async () => {
  const { default: OpenAI } = await import('openai');
  const { default: Anthropic } = await import('@anthropic-ai/sdk');
  await mock.reset();
  await mock.script([
    { default: true, path: '/chat/completions', fault: 'reset', fault_after: 2 },
    { default: true, path: '/v1/messages', fault: 'reset', fault_after: 2 },
  ]);
  const openai = new OpenAI({ baseURL: `${px.url}/v1`, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(openai.chat.completions.stream({ model: 'gpt-4o', messages: msgs }).finalChatCompletion());
  const anthropic = new Anthropic({ baseURL: px.url, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(anthropic.messages.stream({ model: 'claude-x', max_tokens: 5, messages: msgs }).finalMessage());
});

// ---- connect failure and first-byte timeout -----------------------------------

test('connect failure to a closed port -> 502 in the client shape', async () => {
  const a = await post(px.url, paths.chat, { model: 'dead-1', messages: msgs });
  assert.equal(a.status, 502, a.text);
  assert.equal(a.json.error.type, 'api_error');
  const s = await post(px.url, paths.chat, { model: 'dead-1', messages: msgs, stream: true });
  assert.equal(s.status, 502, s.text);
  assert.equal(s.json.error.type, 'api_error');
  const b = await post(px.url, paths.anthropic, { model: 'dead-claude', max_tokens: 5, messages: msgs });
  assert.equal(b.status, 502, b.text);
  assert.equal(b.json.type, 'error');
  assert.equal(b.json.error.type, 'api_error');
});

test('first_byte_timeout -> 504 in the client shape', async () => {
  await mock.reset();
  await mock.script([
    { path: '/chat/completions', headers_delay_ms: 3000, body: { late: true } },
    { path: '/v1/messages', headers_delay_ms: 3000, body: { late: true } },
    { path: '/responses', headers_delay_ms: 3000, body: { late: true } },
  ]);
  const a = await post(px.url, paths.chat, { model: 'gpt-4o', messages: msgs });
  assert.equal(a.status, 504, a.text);
  assert.equal(a.json.error.type, 'timeout_error');
  const b = await post(px.url, paths.anthropic, { model: 'claude-x', max_tokens: 5, messages: msgs, stream: true });
  assert.equal(b.status, 504, b.text);
  assert.equal(b.json.type, 'error');
  assert.equal(b.json.error.type, 'api_error');
  const c = await post(px.url, paths.responses, { model: 'resp-a', input: 'x' });
  assert.equal(c.status, 504, c.text);
  assert.equal(c.json.error.type, 'timeout_error');
});

test('cleanup', async () => {
  resetServer.close();
});

await run();
