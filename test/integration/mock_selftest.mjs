// Self test of the C mock upstream: plain HTTP and the official SDKs pointed
// straight at it. Proves the default answers are protocol-correct and that
// scripting, recording, reset, pacing, faults and backpressure work.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { startMock, test, run, waitFor, parseSSE, sleep } from './lib/harness.mjs';
import { post } from './lib/client.mjs';

// The SDKs live in test/node_modules: `npm ci` in test/ installs them.
let OpenAI, Anthropic;
try {
  ({ default: OpenAI } = await import('openai'));
  ({ default: Anthropic } = await import('@anthropic-ai/sdk'));
} catch (e) {
  console.error(`cannot load the SDKs (run \`npm ci\` in test/): ${e.message}`);
  process.exit(1);
}

const mock = await startMock();
const openai = new OpenAI({ baseURL: `${mock.url}/v1`, apiKey: 'sk-test', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: mock.url, apiKey: 'sk-ant-test', maxRetries: 0 });

/** Raw HTTP/1.1 exchange on a fresh socket; resolves to everything received until close. */
function rawExchange(bytes, { endAfterMs } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(mock.port, '127.0.0.1', () => {
      sock.write(bytes);
      if (endAfterMs) setTimeout(() => sock.end(), endAfterMs);
    });
    let data = '';
    sock.setEncoding('latin1');
    sock.on('data', (d) => (data += d));
    sock.on('error', reject);
    sock.on('close', () => resolve(data));
  });
}

test('default chat completion (fetch) echoes the model', async () => {
  await mock.reset();
  const r = await post(mock.url, '/v1/chat/completions', { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /application\/json/);
  const j = JSON.parse(r.text);
  assert.equal(j.object, 'chat.completion');
  assert.equal(j.model, 'gpt-test');
  assert.equal(j.choices[0].message.content, 'Hello from mock');
  assert.equal(j.choices[0].finish_reason, 'stop');
});

test('openai SDK: chat.completions.create, non-streaming and streaming with usage', async () => {
  await mock.reset();
  const c = await openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(c.choices[0].message.content, 'Hello from mock');
  assert.equal(c.model, 'gpt-4o');
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);

  const stream = await openai.chat.completions.create({
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.model, 'gpt-4o');
    if (chunk.choices[0]) {
      text += chunk.choices[0].delta.content ?? '';
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, 'Hello from mock');
  assert.equal(finish, 'stop');
  assert.ok(usage && usage.completion_tokens > 0);

  // Without include_usage there is no usage chunk.
  const s2 = await openai.chat.completions.create({ model: 'm2', messages: [{ role: 'user', content: 'x' }], stream: true });
  let sawUsage = false;
  for await (const chunk of s2) if (chunk.usage) sawUsage = true;
  assert.equal(sawUsage, false);

  // The SDK helper that accumulates a stream.
  const runner = openai.chat.completions.stream({ model: 'm3', messages: [{ role: 'user', content: 'x' }] });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, 'Hello from mock');
});

test('openai SDK: responses.create and responses.stream', async () => {
  await mock.reset();
  const r = await openai.responses.create({ model: 'gpt-5', input: 'hi' });
  assert.equal(r.output_text, 'Hello from mock');
  assert.equal(r.status, 'completed');
  assert.equal(r.model, 'gpt-5');

  const events = [];
  const s = await openai.responses.create({ model: 'gpt-5', input: 'hi', stream: true });
  let delta = '';
  for await (const ev of s) {
    events.push(ev.type);
    if (ev.type === 'response.output_text.delta') delta += ev.delta;
  }
  assert.equal(events[0], 'response.created');
  assert.equal(events.at(-1), 'response.completed');
  assert.equal(delta, 'Hello from mock');

  const helper = openai.responses.stream({ model: 'gpt-5', input: 'hi' });
  const final = await helper.finalResponse();
  assert.equal(final.output_text, 'Hello from mock');
  assert.equal(final.usage.total_tokens, final.usage.input_tokens + final.usage.output_tokens);
});

test('openai SDK: models.list and input token count (fetch)', async () => {
  await mock.reset();
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['mock-model']);
  const r = await post(mock.url, '/v1/responses/input_tokens', { model: 'gpt-5', input: 'hello' });
  assert.equal(r.status, 200);
  const j = JSON.parse(r.text);
  assert.equal(j.object, 'response.input_tokens');
  assert.ok(Number.isInteger(j.input_tokens) && j.input_tokens > 0);
});

test('anthropic SDK: messages.create, messages.stream, countTokens, models.list', async () => {
  await mock.reset();
  const m = await anthropic.messages.create({
    model: 'claude-test',
    max_tokens: 100,
    messages: [{ role: 'user', content: 'hi' }],
  });
  assert.equal(m.type, 'message');
  assert.equal(m.model, 'claude-test');
  assert.equal(m.content[0].text, 'Hello from mock');
  assert.equal(m.stop_reason, 'end_turn');

  const stream = anthropic.messages.stream({ model: 'claude-test', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
  let text = '';
  stream.on('text', (t) => (text += t));
  const final = await stream.finalMessage();
  assert.equal(text, 'Hello from mock');
  assert.equal(final.content[0].text, 'Hello from mock');
  assert.equal(final.stop_reason, 'end_turn');
  assert.ok(final.usage.output_tokens > 0);

  const raw = await anthropic.messages.create({ model: 'claude-test', max_tokens: 10, messages: [{ role: 'user', content: 'x' }], stream: true });
  const types = [];
  for await (const ev of raw) types.push(ev.type);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');

  const ct = await anthropic.messages.countTokens({ model: 'claude-test', messages: [{ role: 'user', content: 'hello' }] });
  assert.ok(Number.isInteger(ct.input_tokens) && ct.input_tokens > 0);

  const ids = [];
  for await (const model of anthropic.models.list()) ids.push(model.id);
  assert.deepEqual(ids, ['mock-model']);
});

test('scripted errors become the SDKs typed errors', async () => {
  await mock.reset();
  await mock.script([
    { status: 429, headers: { 'retry-after': '7' }, body: { error: { message: 'slow down', type: 'rate_limit_error', param: null, code: null } } },
    { status: 500, body: { error: { message: 'boom', type: 'server_error', param: null, code: null } } },
    { status: 500, body: { type: 'error', error: { type: 'api_error', message: 'kaput' } } },
    { status: 529, body: { type: 'error', error: { type: 'overloaded_error', message: 'busy' } } },
    { status: 429, body: { type: 'error', error: { type: 'rate_limit_error', message: 'wait' } } },
  ]);
  const chat = () => openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] });
  await assert.rejects(chat(), (e) => e instanceof OpenAI.RateLimitError && e.status === 429 && /slow down/.test(e.message) && e.headers.get('retry-after') === '7');
  await assert.rejects(chat(), (e) => e instanceof OpenAI.InternalServerError && /boom/.test(e.message));
  const msg = () => anthropic.messages.create({ model: 'c', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
  await assert.rejects(msg(), (e) => e instanceof Anthropic.InternalServerError && e.error?.error?.message === 'kaput');
  await assert.rejects(msg(), (e) => e instanceof Anthropic.APIError && e.status === 529 && /busy/.test(e.message));
  await assert.rejects(msg(), (e) => e instanceof Anthropic.RateLimitError && e.status === 429);
  assert.deepEqual(await mock.queue(), []);
});

test('scripted SSE: sse list, object events, headers; SDK parses a scripted stream', async () => {
  await mock.reset();
  const chunk = (delta, finish = null) => ({
    data: { id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'sx', choices: [{ index: 0, delta, finish_reason: finish }] },
  });
  await mock.script([
    {
      headers: { 'x-custom': 'yes' },
      sse: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'scripted' }), chunk({}, 'length'), 'data: [DONE]\n\n'],
    },
  ]);
  const { data: stream, response } = await openai.chat.completions
    .create({ model: 'sx', messages: [{ role: 'user', content: 'x' }], stream: true })
    .withResponse();
  assert.equal(response.headers.get('x-custom'), 'yes');
  assert.match(response.headers.get('content-type'), /text\/event-stream/);
  let text = '';
  let finish;
  for await (const c of stream) {
    text += c.choices[0]?.delta?.content ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, 'scripted');
  assert.equal(finish, 'length');
});

test('match, path, repeat and queue order', async () => {
  await mock.reset();
  await mock.script([
    { match: 'needle', status: 200, body: 'A' },
    { path: '/v1/messages', status: 200, body: 'B' },
    { repeat: true, path: '/special', status: 201, body: 'R' },
    { status: 202, body: 'ANY' },
  ]);
  assert.equal((await post(mock.url, '/x/special', { a: 1 })).text, 'R'); // repeat entry stays
  assert.equal((await post(mock.url, '/x/special', { a: 2 })).status, 201);
  assert.equal((await post(mock.url, '/v1/messages', { no: 'match here' })).text, 'B');
  const any = await post(mock.url, '/v1/chat/completions', { q: 'none' });
  assert.equal(any.status, 202);
  assert.equal(any.text, 'ANY');
  assert.equal((await post(mock.url, '/v1/chat/completions', { q: 'has needle inside' })).text, 'A');
  const q = await mock.queue();
  assert.equal(q.length, 1);
  assert.equal(q[0].path, '/special');
  // With only the path-bound repeat entry left, other paths get defaults.
  const d = JSON.parse((await post(mock.url, '/v1/chat/completions', { model: 'dflt' })).text);
  assert.equal(d.model, 'dflt');
});

test('bad scripts are rejected with 400 and leave the queue unchanged', async () => {
  await mock.reset();
  for (const bad of [[{ bogus: 1 }], [{ status: 'x' }], [{ fault: 'explode' }], [{ sse: 'no' }], [{ body: 'x', sse: ['data: 1\n\n'] }], '{not json', [{ headers: { 'a b': 'c' } }], [{ headers: { a: 'x\r\ny: z' } }]]) {
    const r = await post(mock.url, '/_mock/script', bad);
    assert.equal(r.status, 400, `accepted ${JSON.stringify(bad)}`);
    assert.ok(JSON.parse(r.text).error);
  }
  assert.deepEqual(await mock.queue(), []);
});

test('requests are recorded with lower-case headers, parsed body and query; reset clears', async () => {
  await mock.reset();
  await anthropic.messages.create({ model: 'claude-rec', max_tokens: 9, messages: [{ role: 'user', content: 'rec' }] });
  await post(mock.url, '/v1/messages?beta=true', 'not json at all', { 'X-Mixed-Case': 'V' });
  const reqs = await mock.requests();
  assert.equal(reqs.length, 2);
  assert.equal(reqs[0].method, 'POST');
  assert.equal(reqs[0].path, '/v1/messages');
  assert.equal(reqs[0].query, null);
  // @anthropic-ai/sdk 1.x sends the key as a bearer token (0.x used x-api-key).
  const key = reqs[0].headers['x-api-key'] ?? reqs[0].headers.authorization?.replace(/^Bearer /, '');
  assert.equal(key, 'sk-ant-test');
  assert.ok(reqs[0].headers['anthropic-version']);
  assert.deepEqual(reqs[0].body, { model: 'claude-rec', max_tokens: 9, messages: [{ role: 'user', content: 'rec' }] });
  assert.equal(reqs[1].query, 'beta=true');
  assert.equal(reqs[1].headers['x-mixed-case'], 'V');
  assert.equal(reqs[1].body, 'not json at all');
  const st = await mock.stats();
  assert.equal(st.requests, 2);
  await mock.script([{ status: 500 }]);
  await mock.reset();
  assert.deepEqual(await mock.requests(), []);
  assert.deepEqual(await mock.queue(), []);
  const st2 = await mock.stats();
  assert.equal(st2.requests, 0);
  assert.equal(st2.connections_total, 0);
});

test('chunked request bodies are read', async () => {
  await mock.reset();
  const body = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: mock.port, method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' } }, (res) => {
      let d = '';
      res.on('data', (x) => (d += x));
      res.on('end', () => resolve(d));
    });
    req.on('error', reject);
    req.write('{"model": "chun');
    req.write('ked", "messages": []}');
    req.end();
  });
  assert.equal(JSON.parse(body).model, 'chunked');
  const [rec] = await mock.requests();
  assert.equal(rec.headers['transfer-encoding'], 'chunked');
  assert.equal(rec.body.model, 'chunked');
});

test('split writes (chunk), delays and default overlay keep streams intact', async () => {
  await mock.reset();
  await mock.script([{ default: true, chunk: 3, delay_ms: 1, headers_delay_ms: 5, headers: { 'x-overlay': '1' } }]);
  const { data: stream, response } = await openai.chat.completions
    .create({ model: 'split', messages: [{ role: 'user', content: 'x' }], stream: true })
    .withResponse();
  assert.equal(response.headers.get('x-overlay'), '1');
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, 'Hello from mock');
  await mock.script([{ default: true, chunk: 1 }]);
  const m = await anthropic.messages.create({ model: 'split', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
  assert.equal(m.content[0].text, 'Hello from mock');
  const st = await mock.stats();
  assert.equal(st.responses_completed, 2);
});

test('fault reset before headers: the client sees a connection error', async () => {
  await mock.reset();
  await mock.script([{ fault: 'reset' }]);
  await assert.rejects(post(mock.url, '/v1/chat/completions', { model: 'x' }), (e) => e instanceof TypeError);
  await mock.script([{ fault: 'close' }]);
  await assert.rejects(openai.chat.completions.create({ model: 'x', messages: [] }), (e) => e instanceof OpenAI.APIConnectionError);
  const st = await mock.stats();
  assert.equal(st.faults, 2);
});

test('fault close after 2 events: the stream is truncated', async () => {
  await mock.reset();
  await mock.script([{ sse: ['data: 1\n\n', 'data: 2\n\n', 'data: 3\n\n'], fault: 'close', fault_after: 2 }]);
  const res = await fetch(`${mock.url}/v1/chat/completions`, { method: 'POST', body: '{}' });
  assert.equal(res.status, 200);
  let got = '';
  const dec = new TextDecoder();
  await assert.rejects(async () => {
    for await (const part of res.body) got += dec.decode(part, { stream: true });
  });
  assert.deepEqual(parseSSE(got).map((e) => e.data), ['1', '2']);
  // The SDK reports the truncated stream as an error, not a clean end.
  await mock.script([{ default: true, fault: 'reset', fault_after: 3 }]);
  const s = await anthropic.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: 'x' }], stream: true });
  const types = [];
  await assert.rejects(async () => {
    for await (const ev of s) types.push(ev.type);
  });
  assert.deepEqual(types, ['message_start', 'content_block_start']); // the third event is a ping
});

test('fault stall, then the client disconnects: responses_aborted counts it', async () => {
  await mock.reset();
  await mock.script([{ sse: ['data: first\n\n', 'data: never\n\n'], fault: 'stall', fault_after: 1 }]);
  const ac = new AbortController();
  const res = await fetch(`${mock.url}/v1/chat/completions`, { method: 'POST', body: '{}', signal: ac.signal });
  const reader = res.body.getReader();
  const { value } = await reader.read();
  assert.match(new TextDecoder().decode(value), /data: first/);
  let st = await mock.stats();
  assert.equal(st.responses_aborted, 0);
  assert.equal(st.connections_open, 1);
  ac.abort();
  st = await waitFor(async () => {
    const s = await mock.stats();
    return s.responses_aborted === 1 && s;
  }, { what: 'responses_aborted == 1' });
  assert.equal(st.connections_closed_by_peer, 1);
  assert.equal(st.connections_open, 0);
  assert.equal(st.stream_events_written, 1);
});

test('a completed response is not counted as aborted when the client closes', async () => {
  await mock.reset();
  const data = await rawExchange('POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}');
  assert.match(data, /^HTTP\/1\.1 200 OK\r\n/);
  assert.match(data, /Hello from mock/);
  const st = await waitFor(async () => {
    const s = await mock.stats();
    return s.connections_open === 0 && s;
  });
  assert.equal(st.responses_aborted, 0);
  assert.equal(st.responses_completed, 1);
});

test('sse_repeat: a long stream is bounded by a slow reader, then delivered whole', async () => {
  await mock.reset();
  const count = 40000;
  const event = `data: ${'x'.repeat(1000)}\n\n`;
  await mock.script([{ sse: ['data: start\n\n'], sse_repeat: { event, count }, sse_tail: ['data: [DONE]\n\n'] }]);
  const res = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: mock.port, method: 'POST', path: '/v1/chat/completions' }, resolve);
    req.on('error', reject);
    req.end('{}');
  });
  res.pause();
  // 40 MB cannot fit in socket buffers: while nobody reads, the mock must stop writing.
  let last = -1;
  const st = await waitFor(async () => {
    const s = await mock.stats();
    const stable = s.stream_events_written === last;
    last = s.stream_events_written;
    return stable && s;
  }, { interval: 100, what: 'the writer to stop advancing' });
  assert.ok(st.stream_events_written < count, `wrote ${st.stream_events_written} of ${count} events to a paused reader`);
  let bytes = 0;
  let tailSeen = '';
  await new Promise((resolve, reject) => {
    res.on('data', (d) => {
      bytes += d.length;
      tailSeen = (tailSeen + d.toString('latin1')).slice(-64);
    });
    res.on('end', resolve);
    res.on('error', reject);
    res.resume();
  });
  assert.equal(bytes, 'data: start\n\n'.length + count * event.length + 'data: [DONE]\n\n'.length);
  assert.ok(tailSeen.endsWith('data: [DONE]\n\n'));
  assert.equal((await mock.stats()).stream_events_written, count + 2);
}, { timeout: 60000 });

test('raw responses and bad input do not break the mock', async () => {
  await mock.reset();
  await mock.script([{ raw: 'this is not HTTP\r\n\r\n' }]);
  await assert.rejects(post(mock.url, '/v1/chat/completions', { model: 'x' }));
  const garbage = await rawExchange('\x00\x01GARBAGE \r\n\r\n');
  assert.match(garbage, /^HTTP\/1\.1 400 /);
  const bad = await rawExchange('POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n');
  assert.match(bad, /^HTTP\/1\.1 400 /);
  // a client that vanishes mid-request
  await rawExchange('POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"a"', { endAfterMs: 1 });
  const ok = await post(mock.url, '/v1/chat/completions', { model: 'still-alive' });
  assert.equal(JSON.parse(ok.text).model, 'still-alive');
  assert.equal((await post(mock.url, '/_mock/nope', {})).status, 404);
  assert.equal((await post(mock.url, '/v1/unknown', {})).status, 404);
});

test('keep-alive: several requests on one connection', async () => {
  await mock.reset();
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  for (let i = 0; i < 5; i++) {
    const body = await new Promise((resolve, reject) => {
      const req = http.request({ agent, host: '127.0.0.1', port: mock.port, method: 'POST', path: '/v1/chat/completions' }, (res) => {
        let d = '';
        res.on('data', (x) => (d += x));
        res.on('end', () => resolve(d));
      });
      req.on('error', reject);
      req.end(JSON.stringify({ model: `k${i}` }));
    });
    assert.equal(JSON.parse(body).model, `k${i}`);
  }
  agent.destroy();
  const st = await mock.stats();
  assert.equal(st.requests, 5);
  assert.equal(st.connections_total, 1);
});

test('SIGTERM stops the mock with exit code 0, even with a stalled stream open', async () => {
  const m2 = await startMock();
  await fetch(`${m2.url}/_mock/script`, { method: 'POST', body: JSON.stringify([{ fault: 'stall', fault_after: 0, sse: ['data: x\n\n'] }]) });
  const res = await fetch(`${m2.url}/v1/chat/completions`, { method: 'POST', body: '{}' });
  assert.equal(res.status, 200);
  await sleep(10);
  const info = await m2.stop('SIGTERM');
  assert.equal(info.code, 0, `stderr: ${m2.logs().stderr}`);
});

await run();
