// Traces (SPEC section 15): the spans proxai exports, decoded by a receiver
// that reads OTLP by the official opentelemetry-proto definitions
// (lib/otlp.mjs), the trace context sent upstream (recorded by the scripted
// upstream, lib/faultup.mjs), sampling, and collectors that are down or hang
// while requests go on unaffected.
import assert from 'node:assert/strict';
import { startProxai, test, run, sleep, waitFor, freePort } from './lib/harness.mjs';
import { startFaultUpstream, http as raw, chunked } from './lib/faultup.mjs';
import * as C from './lib/config.mjs';
import { startCollector } from './lib/otlp.mjs';

const PROMPT = 'PROMPT-TEXT-never-in-a-span';
const COMPLETION = 'COMPLETION-TEXT-never-in-a-span';
const UPSTREAM_ERROR = 'UPSTREAM-ERROR-TEXT-never-in-a-span';
const CLIENT_SECRET = 'client-secret-never-in-a-span';
const UP_KEY = 'upstream-key-never-in-a-span';
const ANT_KEY = 'anthropic-key-never-in-a-span';
const EXPORT_HEADER = 'collector-token-never-in-a-span';

const CLIENT_TRACE = '4a4a4a4a4a4a4a4a5b5b5b5b5b5b5b5b';
const CLIENT_SPAN = '6c6c6c6c7d7d7d7d';
const TRACEPARENT = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;
const TRACESTATE = 'congo=lorem1ipsum,rojo=00f0f0f0f0f0f0f0';

function config(upUrl, trace) {
  return C.server({ access_log: 'stderr' })
    + C.upstream('a', 'chat', upUrl, { api_key: UP_KEY, retries: 1, eject_after: 0 })
    + C.upstream('b', 'anthropic', upUrl, { api_key: ANT_KEY, eject_after: 0 })
    + C.route('m-*', { upstream: 'a', model: 'up-model', fallback: 'b/claude-up', max_tokens: 100 })
    + C.upstream('r', 'responses', upUrl, { api_key: UP_KEY, eject_after: 0 })
    + C.upstream('g', 'gemini', upUrl, { api_key: UP_KEY, eject_after: 0 })
    + C.route('plain-*', { upstream: 'a' })
    + C.route('pa-*', { upstream: 'b' })
    + C.route('pr-*', { upstream: 'r' })
    + C.route('pg-*', { upstream: 'g' })
    + C.team('platform')
    + C.price('up-model', { input: 2.5, output: 10 })
    + C.key('team-a', { secret: CLIENT_SECRET, team: 'platform' })
    + trace;
}

const chatJson = (usage = { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 }) =>
  raw(200, { 'content-type': 'application/json' }, JSON.stringify({
    id: 'chatcmpl-up1', object: 'chat.completion', created: 1700000000, model: 'up-model',
    choices: [{ index: 0, message: { role: 'assistant', content: COMPLETION }, finish_reason: 'stop' }],
    usage,
  }));
const anthropicJson = () =>
  raw(200, { 'content-type': 'application/json' }, JSON.stringify({
    id: 'msg_up1', type: 'message', role: 'assistant', model: 'claude-up',
    content: [{ type: 'text', text: COMPLETION }], stop_reason: 'end_turn', stop_sequence: null,
    usage: { input_tokens: 13, output_tokens: 5 },
  }));
const error503 = () => raw(503, { 'content-type': 'application/json' }, JSON.stringify({ error: { message: UPSTREAM_ERROR, type: 'server_error' } }));

async function chat(px, { model = 'm-one', headers = {}, stream = false, extra = {} } = {}) {
  const res = await fetch(`${px.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_SECRET}`, ...headers },
    body: JSON.stringify({ model, max_tokens: 64, stream, messages: [{ role: 'user', content: PROMPT }], ...extra }),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

function accessLog(px) {
  return px.logs().stderr.split('\n').filter((l) => l.startsWith('{') && l.includes('"request_id"')).map((l) => JSON.parse(l));
}

async function metric(px, name) {
  const res = await fetch(`${px.url}/metrics`, { headers: { authorization: `Bearer ${CLIENT_SECRET}` } });
  const text = await res.text();
  let sum = 0;
  for (const line of text.split('\n')) if (line.startsWith(name)) sum += Number(line.split(' ').pop());
  return sum;
}

const parseTp = (tp) => {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$/.exec(tp || '');
  assert.ok(m, `traceparent upstream: ${tp}`);
  return { trace: m[1], parent: m[2], flags: m[3] };
};

const nano = (s) => BigInt(s);

// Nothing the client or the upstream said, and no secret, in what reaches
// the collector.
function assertNothingPrivate(col) {
  for (const b of col.bodies) {
    for (const s of [PROMPT, COMPLETION, UPSTREAM_ERROR, CLIENT_SECRET, UP_KEY, ANT_KEY, EXPORT_HEADER]) {
      assert.ok(!b.text.includes(s), `the export body holds ${s}`);
    }
  }
}

const up = await startFaultUpstream();
const col = await startCollector();
const traced = C.trace({ endpoint: col.url, sample: '1.0', header: `x-collector-token: ${EXPORT_HEADER}` });
const px = await startProxai(config(up.url, traced));

test('a request is a SERVER span with its attempt as a CLIENT child, in the client\'s trace', async () => {
  up.reset();
  const n0 = col.spans.length;
  up.script(chatJson());
  const r = await chat(px, { headers: { traceparent: TRACEPARENT, tracestate: TRACESTATE, 'x-proxai-user': 'end-user-7' } });
  assert.equal(r.status, 200, r.text);
  // the upstream got the client's trace with the attempt span as parent
  const tp = parseTp(up.requests[0].headers.traceparent);
  assert.equal(tp.trace, CLIENT_TRACE);
  assert.equal(tp.flags, '01');
  assert.notEqual(tp.parent, CLIENT_SPAN);
  assert.equal(up.requests[0].headers.tracestate, TRACESTATE);
  await waitFor(() => col.spans.length >= n0 + 2, { timeout: 15000, what: 'two spans at the collector' });
  assert.deepEqual(col.errors, []);
  const spans = col.spans.slice(n0);
  const server = spans.find((s) => s.kind === 2);
  const client = spans.find((s) => s.kind === 3);
  assert.ok(server && client, JSON.stringify(spans));
  assert.equal(server.traceId, CLIENT_TRACE);
  assert.equal(client.traceId, CLIENT_TRACE);
  assert.equal(server.parentSpanId, CLIENT_SPAN);
  assert.equal(client.parentSpanId, server.spanId);
  assert.equal(client.spanId, tp.parent, 'the upstream\'s parent is the attempt span');
  assert.equal(server.traceState, TRACESTATE);
  assert.equal(server.name, 'chat m-one');
  assert.equal(client.name, 'chat up-model');
  assert.deepEqual(server.attrs, {
    'gen_ai.operation.name': 'chat',
    'gen_ai.request.model': 'm-one',
    // what the client saw: its model written back
    'gen_ai.response.model': 'm-one',
    'gen_ai.response.id': 'chatcmpl-up1',
    'gen_ai.response.finish_reasons': ['stop'],
    'gen_ai.request.max_tokens': 64,
    'gen_ai.usage.input_tokens': 11,
    'gen_ai.usage.output_tokens': 7,
    'http.response.status_code': 200,
    'proxai.key': 'team-a',
    'proxai.team': 'platform',
    'proxai.user': 'end-user-7',
    'proxai.route': 'm-*',
    // 11 input tokens at $2.50 and 7 output at $10 per million
    'proxai.cost_usd': 0.0000975,
  });
  assert.deepEqual(client.attrs, {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': 'openai',
    'gen_ai.request.model': 'up-model',
    'gen_ai.response.model': 'up-model',
    'gen_ai.response.id': 'chatcmpl-up1',
    'gen_ai.response.finish_reasons': ['stop'],
    'gen_ai.usage.input_tokens': 11,
    'gen_ai.usage.output_tokens': 7,
    'server.address': '127.0.0.1',
    'http.response.status_code': 200,
    'proxai.upstream': 'a',
    'proxai.attempt': 1,
  });
  assert.equal(server.status, undefined, 'no error: status unset');
  // the attempt lies inside the request
  assert.ok(nano(server.startTimeUnixNano) <= nano(client.startTimeUnixNano));
  assert.ok(nano(client.endTimeUnixNano) <= nano(server.endTimeUnixNano));
  const wall = BigInt(Date.now()) * 1000000n;
  assert.ok(nano(server.startTimeUnixNano) > wall - 60n * 1000000000n && nano(server.startTimeUnixNano) <= wall, 'wall-clock times');
  const ev = server.events || [];
  assert.equal(ev.length, 1);
  assert.equal(ev[0].name, 'gen_ai.first_token');
  assert.ok(nano(ev[0].timeUnixNano) >= nano(server.startTimeUnixNano) && nano(ev[0].timeUnixNano) <= nano(server.endTimeUnixNano));
  assert.equal(col.resources.at(-1)['service.name'], 'proxai');
  // the configured export header goes to the collector, in the head only
  assert.equal(col.bodies.at(-1).headers['x-collector-token'], EXPORT_HEADER);
  assert.equal(col.bodies.at(-1).path, '/v1/traces');
  assertNothingPrivate(col);
  // the access log names the trace
  await waitFor(() => accessLog(px).find((l) => l.status === 200 && l.trace_id === CLIENT_TRACE), { what: 'the access log line with trace_id' });
});

test('a client without a traceparent (or with a bad one) starts a new trace', async () => {
  up.reset();
  const n0 = col.spans.length;
  up.script(chatJson(), chatJson());
  assert.equal((await chat(px)).status, 200);
  assert.equal((await chat(px, { headers: { traceparent: `00-${CLIENT_TRACE.toUpperCase()}-${CLIENT_SPAN}-01`, tracestate: TRACESTATE } })).status, 200);
  const a = parseTp(up.requests[0].headers.traceparent), b = parseTp(up.requests[1].headers.traceparent);
  assert.notEqual(a.trace, b.trace);
  assert.notEqual(b.trace, CLIENT_TRACE.toLowerCase());
  assert.equal(up.requests[1].headers.tracestate, undefined, 'no tracestate without a valid traceparent');
  await waitFor(() => col.spans.length >= n0 + 4, { timeout: 15000, what: 'four spans' });
  const servers = col.spans.slice(n0).filter((s) => s.kind === 2);
  assert.equal(servers.length, 2);
  for (const s of servers) assert.equal(s.parentSpanId, undefined, 'a root span');
  assert.deepEqual(new Set(servers.map((s) => s.traceId)), new Set([a.trace, b.trace]));
});

test('retries and a fallback are sibling CLIENT spans; the upstream sees each as parent', async () => {
  up.reset();
  const n0 = col.spans.length;
  up.script(error503(), error503(), anthropicJson());
  const r = await chat(px, { model: 'm-two', headers: { traceparent: TRACEPARENT } });
  assert.equal(r.status, 200, r.text);
  assert.equal(up.requests.length, 3);
  const tps = up.requests.map((q) => parseTp(q.headers.traceparent));
  await waitFor(() => col.spans.length >= n0 + 4, { timeout: 15000, what: 'four spans' });
  assert.deepEqual(col.errors, []);
  const spans = col.spans.slice(n0);
  const server = spans.find((s) => s.kind === 2);
  const attempts = spans.filter((s) => s.kind === 3).sort((x, y) => x.attrs['proxai.attempt'] - y.attrs['proxai.attempt']);
  assert.equal(attempts.length, 3);
  for (const [i, a] of attempts.entries()) {
    assert.equal(a.parentSpanId, server.spanId, 'siblings under the request');
    assert.equal(a.traceId, CLIENT_TRACE);
    assert.equal(a.spanId, tps[i].parent, `attempt ${i + 1} is the upstream's parent`);
    assert.equal(a.attrs['proxai.attempt'], i + 1);
  }
  assert.equal(new Set(attempts.map((a) => a.spanId)).size, 3);
  const [a1, a2, a3] = attempts;
  for (const a of [a1, a2]) {
    assert.equal(a.name, 'chat up-model');
    assert.equal(a.attrs['gen_ai.provider.name'], 'openai');
    assert.equal(a.attrs['proxai.upstream'], 'a');
    assert.equal(a.attrs['http.response.status_code'], 503);
    assert.equal(typeof a.attrs['error.type'], 'string');
    assert.deepEqual(a.status, { code: 2 }, 'ERROR, and no message');
    assert.equal(a.attrs['gen_ai.usage.input_tokens'], undefined);
  }
  assert.ok(nano(a1.endTimeUnixNano) <= nano(a2.startTimeUnixNano), 'the retry follows the first attempt');
  assert.ok(nano(a2.endTimeUnixNano) <= nano(a3.startTimeUnixNano), 'the fallback follows the retry');
  assert.equal(a3.name, 'chat claude-up');
  assert.deepEqual(a3.attrs, {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': 'anthropic',
    'gen_ai.request.model': 'claude-up',
    'gen_ai.response.model': 'claude-up',
    'gen_ai.response.id': 'msg_up1',
    'gen_ai.response.finish_reasons': ['end_turn'],
    'gen_ai.usage.input_tokens': 13,
    'gen_ai.usage.output_tokens': 5,
    'server.address': '127.0.0.1',
    'http.response.status_code': 200,
    'proxai.upstream': 'b',
    'proxai.attempt': 3,
  });
  assert.equal(a3.status, undefined);
  assert.equal(server.name, 'chat m-two');
  assert.equal(server.attrs['http.response.status_code'], 200);
  assert.equal(server.attrs['error.type'], undefined);
  // the translated answer, as the Chat client got it
  const body = JSON.parse(r.text);
  assert.equal(server.attrs['gen_ai.response.model'], body.model);
  assert.equal(server.attrs['gen_ai.response.id'], body.id);
  assert.deepEqual(server.attrs['gen_ai.response.finish_reasons'], ['stop']);
  assert.equal(body.model, 'm-two');
  assertNothingPrivate(col);
});

test('an error answer: error.type and status ERROR on both spans, no upstream text', async () => {
  up.reset();
  const n0 = col.spans.length;
  up.script(raw(400, { 'content-type': 'application/json' }, JSON.stringify({ error: { message: UPSTREAM_ERROR, type: 'invalid_request_error', param: null, code: null } })));
  const r = await chat(px);
  assert.equal(r.status, 400);
  await waitFor(() => col.spans.length >= n0 + 2, { timeout: 15000, what: 'two spans' });
  const spans = col.spans.slice(n0);
  const server = spans.find((s) => s.kind === 2), client = spans.find((s) => s.kind === 3);
  assert.equal(server.attrs['http.response.status_code'], 400);
  assert.equal(server.attrs['error.type'], 'invalid_request_error');
  assert.deepEqual(server.status, { code: 2 });
  assert.equal(client.attrs['http.response.status_code'], 400);
  assert.equal(client.attrs['error.type'], 'invalid_request_error');
  assert.deepEqual(client.status, { code: 2 });
  assertNothingPrivate(col);
});

test('a stream\'s spans end with its last byte; first token is an event; lossy fields listed', async () => {
  up.reset();
  const n0 = col.spans.length;
  const ev = (o) => `data: ${JSON.stringify(o)}\n\n`;
  const chunk = (delta, finish = null) => ({ id: 'chatcmpl-s1', object: 'chat.completion.chunk', created: 1700000000, model: 'up-model', choices: [{ index: 0, delta, finish_reason: finish }] });
  up.script({
    raw: [
      raw(200, { 'content-type': 'text/event-stream', 'transfer-encoding': 'chunked' }, '', { length: false }),
      chunked(ev(chunk({ role: 'assistant', content: 'COMPLETION-' }))).subarray(0, -5),
      { wait: 1500 },
      chunked(ev(chunk({ content: 'TEXT-never-in-a-span' })), ev(chunk({}, 'stop')), ev({ id: 'chatcmpl-s1', object: 'chat.completion.chunk', created: 1700000000, model: 'up-model', choices: [], usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 } }), 'data: [DONE]\n\n'),
    ],
  });
  // an Anthropic client with top_k, which a Chat upstream cannot take
  const t0 = Date.now();
  const res = await fetch(`${px.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': CLIENT_SECRET, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'm-three', max_tokens: 77, top_k: 5, stream: true, messages: [{ role: 'user', content: PROMPT }] }),
  });
  assert.equal(res.status, 200);
  const lossy = res.headers.get('x-proxai-lossy');
  assert.match(lossy || '', /top_k/);
  const body = await res.text();
  assert.ok(Date.now() - t0 >= 1400, 'the stream took its time');
  assert.match(body, /message_stop/);
  await waitFor(() => col.spans.length >= n0 + 2, { timeout: 15000, what: 'two spans' });
  const spans = col.spans.slice(n0);
  const server = spans.find((s) => s.kind === 2), client = spans.find((s) => s.kind === 3);
  const dur = nano(server.endTimeUnixNano) - nano(server.startTimeUnixNano);
  assert.ok(dur >= 1400000000n, `the SERVER span lasts the stream (${dur} ns)`);
  assert.ok(nano(client.endTimeUnixNano) - nano(client.startTimeUnixNano) >= 1400000000n, 'and the CLIENT span its transfer');
  const first = nano(server.events[0].timeUnixNano);
  assert.equal(server.events[0].name, 'gen_ai.first_token');
  assert.ok(nano(server.endTimeUnixNano) - first >= 1400000000n, 'the first token came before the pause');
  assert.equal(server.name, 'chat m-three');
  assert.equal(server.attrs['gen_ai.request.max_tokens'], 77);
  assert.deepEqual(server.attrs['proxai.lossy'], lossy.split(',').map((s) => s.trim()));
  assert.equal(server.attrs['gen_ai.usage.input_tokens'], 3);
  assert.equal(server.attrs['gen_ai.usage.output_tokens'], 4);
  assert.equal(client.attrs['gen_ai.provider.name'], 'openai');
  // the upstream's answer on the attempt, the translated one on the request
  assert.equal(client.attrs['gen_ai.response.model'], 'up-model');
  assert.equal(client.attrs['gen_ai.response.id'], 'chatcmpl-s1');
  assert.deepEqual(client.attrs['gen_ai.response.finish_reasons'], ['stop']);
  const start = JSON.parse(/event: message_start\ndata: (.*)\n/.exec(body)[1]).message;
  assert.equal(server.attrs['gen_ai.response.model'], start.model);
  assert.equal(server.attrs['gen_ai.response.id'], start.id);
  assert.deepEqual(server.attrs['gen_ai.response.finish_reasons'], ['end_turn']);
  assert.equal(start.model, 'm-three');
  assertNothingPrivate(col);
});

test('a client gone mid-stream: the cut attempt span ends then, with status ERROR', async () => {
  up.reset();
  const n0 = col.spans.length;
  const ev = (o) => `data: ${JSON.stringify(o)}\n\n`;
  const chunk = (delta) => ({ id: 'chatcmpl-c1', object: 'chat.completion.chunk', created: 1700000000, model: 'up-model', choices: [{ index: 0, delta, finish_reason: null }] });
  // one event, then the upstream goes quiet far longer than the test waits
  up.script({
    raw: [
      raw(200, { 'content-type': 'text/event-stream', 'transfer-encoding': 'chunked' }, '', { length: false }),
      chunked(ev(chunk({ role: 'assistant', content: COMPLETION }))).subarray(0, -5),
      { wait: 20000 },
    ],
  });
  const ac = new AbortController();
  const t0 = Date.now();
  const res = await fetch(`${px.url}/v1/chat/completions`, {
    method: 'POST',
    signal: ac.signal,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_SECRET}` },
    body: JSON.stringify({ model: 'm-one', stream: true, messages: [{ role: 'user', content: PROMPT }] }),
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const first = await reader.read();
  assert.ok(!first.done && first.value.length > 0, 'the first event arrived');
  ac.abort();
  await reader.cancel().catch(() => {});
  await waitFor(() => col.spans.length >= n0 + 2, { timeout: 15000, what: 'two spans' });
  const waited = Date.now() - t0;
  const spans = col.spans.slice(n0);
  const server = spans.find((s) => s.kind === 2), client = spans.find((s) => s.kind === 3);
  assert.ok(server && client, JSON.stringify(spans));
  assert.equal(client.parentSpanId, server.spanId);
  assert.deepEqual(client.status, { code: 2 }, 'the cut attempt failed, with no message');
  assert.equal(client.attrs['error.type'], 'client_closed');
  assert.equal(client.attrs['http.response.status_code'], 200, 'the upstream had answered');
  const [cs, ce] = [nano(client.startTimeUnixNano), nano(client.endTimeUnixNano)];
  assert.ok(ce > cs, 'the attempt span has an end');
  assert.ok(ce - cs < BigInt(waited) * 1000000n, 'it ends at the cut, not when the upstream would have');
  assert.ok(ce <= nano(server.endTimeUnixNano));
  assert.equal(server.attrs['error.type'], 'client_closed');
  assert.deepEqual(server.status, { code: 2 });
  assertNothingPrivate(col);
});

test('the answer\'s model, id and finish reasons on both spans: pass-through, whole and streamed', async () => {
  up.reset();
  const n0 = col.spans.length;
  // a whole answer passed through untouched (the client's model is the upstream's)
  up.script(raw(200, { 'content-type': 'application/json' }, JSON.stringify({
    id: 'chatcmpl-p1', object: 'chat.completion', created: 1700000000, model: 'plain-1-2026',
    choices: [{ index: 0, message: { role: 'assistant', content: COMPLETION }, finish_reason: 'length' }],
    usage: { prompt_tokens: 2, completion_tokens: 64, total_tokens: 66 },
  })));
  assert.equal((await chat(px, { model: 'plain-1' })).status, 200);
  // a stream passed through, its model written back to the client's
  const ev = (o) => `data: ${JSON.stringify(o)}\n\n`;
  const chunk = (delta, finish = null) => ({ id: 'chatcmpl-p2', object: 'chat.completion.chunk', created: 1700000000, model: 'up-model', choices: [{ index: 0, delta, finish_reason: finish }] });
  up.script(raw(200, { 'content-type': 'text/event-stream' }, ev(chunk({ role: 'assistant', content: COMPLETION })) + ev(chunk({}, 'tool_calls')) + 'data: [DONE]\n\n'));
  const r = await chat(px, { stream: true });
  assert.equal(r.status, 200);
  assert.match(r.text, /"model":"m-one"/);
  await waitFor(() => col.spans.length >= n0 + 4, { timeout: 15000, what: 'four spans' });
  const spans = col.spans.slice(n0);
  const pick = (name, kind) => spans.find((s) => s.kind === kind && s.name === name);
  const json = [pick('chat plain-1', 2), pick('chat plain-1', 3)];
  for (const s of json) {
    assert.ok(s, JSON.stringify(spans.map((x) => x.name)));
    assert.equal(s.attrs['gen_ai.response.model'], 'plain-1-2026');
    assert.equal(s.attrs['gen_ai.response.id'], 'chatcmpl-p1');
    assert.deepEqual(s.attrs['gen_ai.response.finish_reasons'], ['length']);
  }
  const [server, client] = [pick('chat m-one', 2), pick('chat up-model', 3)];
  assert.equal(server.attrs['gen_ai.response.model'], 'm-one', 'the model the client saw');
  assert.equal(client.attrs['gen_ai.response.model'], 'up-model', 'the model the upstream sent');
  for (const s of [server, client]) {
    assert.equal(s.attrs['gen_ai.response.id'], 'chatcmpl-p2');
    assert.deepEqual(s.attrs['gen_ai.response.finish_reasons'], ['tool_calls']);
  }
  assertNothingPrivate(col);
});

// Pass-through answers of the other protocols, whole and streamed: what the
// spans say of the answer is what the answer says of itself (the watcher
// reads it from the events as they pass, the whole body at its end).
const sse = (events) => events.map(([name, o]) => (name ? `event: ${name}\n` : '') + `data: ${JSON.stringify(o)}\n\n`).join('');
const PASS = [
  {
    name: 'anthropic', model: 'pa-x', path: '/v1/messages', headers: { 'x-api-key': CLIENT_SECRET, 'anthropic-version': '2023-06-01' },
    body: (stream) => ({ model: 'pa-x', max_tokens: 64, stream, messages: [{ role: 'user', content: PROMPT }] }),
    json: { id: 'msg_pa1', type: 'message', role: 'assistant', model: 'claude-pa-2026', content: [{ type: 'text', text: COMPLETION }], stop_reason: 'max_tokens', stop_sequence: null, usage: { input_tokens: 3, output_tokens: 64 } },
    want: ['msg_pa1', 'claude-pa-2026', 'max_tokens'],
    stream: sse([
      ['message_start', { type: 'message_start', message: { id: 'msg_pa2', type: 'message', role: 'assistant', model: 'claude-pa-2027', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } } }],
      ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
      ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: COMPLETION } }],
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 9 } }],
      ['message_stop', { type: 'message_stop' }],
    ]),
    wantStream: ['msg_pa2', 'claude-pa-2027', 'tool_use'],
  },
  {
    name: 'responses', model: 'pr-x', path: '/v1/responses', headers: { authorization: `Bearer ${CLIENT_SECRET}` },
    body: (stream) => ({ model: 'pr-x', stream, store: false, input: PROMPT }),
    json: { id: 'resp_pr1', object: 'response', created_at: 1700000000, status: 'incomplete', model: 'gpt-pr-2026', output: [{ type: 'message', id: 'msg_1', status: 'incomplete', role: 'assistant', content: [{ type: 'output_text', text: COMPLETION, annotations: [] }] }], incomplete_details: { reason: 'max_output_tokens' }, usage: { input_tokens: 3, output_tokens: 64, total_tokens: 67 } },
    want: ['resp_pr1', 'gpt-pr-2026', 'incomplete'],
    stream: sse([
      ['response.created', { type: 'response.created', sequence_number: 0, response: { id: 'resp_pr2', object: 'response', created_at: 1700000000, status: 'in_progress', model: 'gpt-pr-2027', output: [] } }],
      ['response.output_text.delta', { type: 'response.output_text.delta', sequence_number: 1, item_id: 'msg_2', output_index: 0, content_index: 0, delta: COMPLETION }],
      ['response.completed', { type: 'response.completed', sequence_number: 2, response: { id: 'resp_pr2', object: 'response', created_at: 1700000000, status: 'completed', model: 'gpt-pr-2027', output: [{ type: 'message', id: 'msg_2', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: COMPLETION, annotations: [] }] }], usage: { input_tokens: 3, output_tokens: 5, total_tokens: 8 } } }],
    ]),
    wantStream: ['resp_pr2', 'gpt-pr-2027', 'completed'],
  },
  {
    name: 'gemini', model: 'pg-x', path: '/v1beta/models/pg-x:generateContent', streamPath: '/v1beta/models/pg-x:streamGenerateContent?alt=sse',
    headers: { 'x-goog-api-key': CLIENT_SECRET },
    body: () => ({ contents: [{ role: 'user', parts: [{ text: PROMPT }] }] }),
    json: { candidates: [{ content: { role: 'model', parts: [{ text: COMPLETION }] }, finishReason: 'MAX_TOKENS', index: 0 }], usageMetadata: { promptTokenCount: 3, candidatesTokenCount: 64, totalTokenCount: 67 }, modelVersion: 'gemini-pg-2026', responseId: 'gem-pg1' },
    want: ['gem-pg1', 'gemini-pg-2026', 'MAX_TOKENS'],
    stream: sse([
      [null, { candidates: [{ content: { role: 'model', parts: [{ text: COMPLETION }] }, index: 0 }], usageMetadata: { promptTokenCount: 3, totalTokenCount: 3 }, modelVersion: 'gemini-pg-2027', responseId: 'gem-pg2' }],
      [null, { candidates: [{ content: { role: 'model', parts: [{ text: COMPLETION }] }, finishReason: 'STOP', index: 0 }], usageMetadata: { promptTokenCount: 3, candidatesTokenCount: 5, totalTokenCount: 8 }, modelVersion: 'gemini-pg-2027', responseId: 'gem-pg2' }],
    ]),
    wantStream: ['gem-pg2', 'gemini-pg-2027', 'STOP'],
  },
];

for (const c of PASS) {
  test(`${c.name} pass-through: the answer's id, model and finish reason on both spans, whole and streamed`, async () => {
    for (const stream of [false, true]) {
      up.reset();
      const n0 = col.spans.length;
      up.script(stream ? raw(200, { 'content-type': 'text/event-stream' }, c.stream)
        : raw(200, { 'content-type': 'application/json' }, JSON.stringify(c.json)));
      const res = await fetch(`${px.url}${stream ? (c.streamPath || c.path) : c.path}`, {
        method: 'POST', headers: { 'content-type': 'application/json', ...c.headers }, body: JSON.stringify(c.body(stream)),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const text = await res.text();
      assert.equal(text, stream ? c.stream : JSON.stringify(c.json), 'passed through as it came');
      await waitFor(() => col.spans.length >= n0 + 2, { timeout: 15000, what: 'two spans' });
      const spans = col.spans.slice(n0);
      const [id, model, finish] = stream ? c.wantStream : c.want;
      for (const kind of [2, 3]) {
        const s = spans.find((x) => x.kind === kind);
        assert.ok(s && s.name.endsWith(c.model), JSON.stringify(spans.map((x) => x.name)));
        assert.equal(s.attrs['gen_ai.response.id'], id, `${c.name} stream=${stream} kind ${kind}`);
        assert.equal(s.attrs['gen_ai.response.model'], model);
        assert.deepEqual(s.attrs['gen_ai.response.finish_reasons'], [finish]);
      }
    }
    assertNothingPrivate(col);
  });
}

test('sample = 0 exports nothing and still propagates the trace, unsampled', async () => {
  const c0 = await startCollector();
  const u0 = await startFaultUpstream();
  const p0 = await startProxai(config(u0.url, C.trace({ endpoint: c0.url, sample: 0 })));
  try {
    u0.script(chatJson(), chatJson());
    assert.equal((await chat(p0, { headers: { traceparent: TRACEPARENT, tracestate: TRACESTATE } })).status, 200);
    assert.equal((await chat(p0)).status, 200);
    const a = parseTp(u0.requests[0].headers.traceparent), b = parseTp(u0.requests[1].headers.traceparent);
    assert.equal(a.trace, CLIENT_TRACE, 'the client\'s trace goes on');
    assert.equal(a.flags, '00', 'with the sampled flag cleared');
    assert.notEqual(a.parent, CLIENT_SPAN);
    assert.equal(u0.requests[0].headers.tracestate, TRACESTATE);
    assert.equal(b.flags, '00');
    await waitFor(() => accessLog(p0).some((l) => l.trace_id === CLIENT_TRACE), { what: 'the access log line with trace_id' });
    await sleep(2500); // more than a tick of the exporter
    assert.equal(c0.bodies.length, 0, 'nothing exported');
  } finally {
    await p0.stop();
    await u0.close();
    await c0.close();
  }
});

test('a draining proxai sends the spans of its last requests before it exits', async () => {
  const c0 = await startCollector();
  const u0 = await startFaultUpstream();
  const p0 = await startProxai(config(u0.url, C.trace({ endpoint: c0.url })));
  try {
    u0.script(chatJson());
    assert.equal((await chat(p0, { headers: { traceparent: TRACEPARENT } })).status, 200);
    await p0.stop('SIGTERM'); // well before the exporter's next tick
    assert.equal(c0.spans.length, 2, 'both spans arrived');
    assert.ok(c0.spans.every((x) => x.traceId === CLIENT_TRACE));
  } finally {
    await u0.close();
    await c0.close();
  }
});

test('an upstream that configures its own traceparent gets that one alone', async () => {
  const c0 = await startCollector();
  const u0 = await startFaultUpstream();
  const own = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`;
  const cfg = config(u0.url, C.trace({ endpoint: c0.url }))
    .replace(C.upstream('a', 'chat', u0.url, { api_key: UP_KEY, retries: 1, eject_after: 0 }),
      C.upstream('a', 'chat', u0.url, { api_key: UP_KEY, retries: 1, eject_after: 0, header: `traceparent: ${own}` }));
  assert.ok(cfg.includes(own), 'the configured line is in the configuration');
  const p0 = await startProxai(cfg);
  try {
    u0.script(chatJson());
    assert.equal((await chat(p0, { headers: { traceparent: TRACEPARENT } })).status, 200);
    assert.equal(u0.requests[0].headers.traceparent, own, 'the configured value, sent once');
  } finally {
    await p0.stop();
    await u0.close();
    await c0.close();
  }
});

test('without [trace], traceparent and tracestate go upstream unchanged', async () => {
  const u0 = await startFaultUpstream();
  const p0 = await startProxai(config(u0.url, ''));
  try {
    u0.script(chatJson());
    assert.equal((await chat(p0, { headers: { traceparent: TRACEPARENT, tracestate: TRACESTATE } })).status, 200);
    assert.equal(u0.requests[0].headers.traceparent, TRACEPARENT);
    assert.equal(u0.requests[0].headers.tracestate, TRACESTATE);
    const line = await waitFor(() => accessLog(p0).find((l) => l.status === 200), { what: 'the access log line' });
    assert.ok(line && !('trace_id' in line), 'no trace_id without [trace]: ' + JSON.stringify(line));
  } finally {
    await p0.stop();
    await u0.close();
  }
});

for (const kind of ['dead', 'hanging']) {
  test(`a ${kind} collector costs spans, never a request`, async () => {
    const hang = kind === 'hanging' ? await startCollector({ hang: true }) : null;
    const endpoint = hang ? hang.url : `http://127.0.0.1:${await freePort()}/v1/traces`;
    const u0 = await startFaultUpstream();
    const p0 = await startProxai(config(u0.url, C.trace({ endpoint })));
    try {
      u0.script(chatJson());
      assert.equal((await chat(p0)).status, 200);
      if (hang) await waitFor(() => hang.bodies.length === 1, { timeout: 15000, what: 'the export to hang' });
      else await waitFor(async () => (await metric(p0, 'proxai_trace_spans_dropped_total{reason="export_failed"}')) >= 2, { timeout: 15000, what: 'export_failed drops' });
      // requests go on while the collector is down or the export hangs
      for (let i = 0; i < 20; i++) {
        u0.script(chatJson());
        const r = await chat(p0, { headers: { traceparent: TRACEPARENT } });
        assert.equal(r.status, 200, r.text);
        assert.equal(parseTp(u0.requests.at(-1).headers.traceparent).trace, CLIENT_TRACE);
      }
      if (hang) {
        assert.equal(hang.bodies.length, 1, 'one export in flight at a time');
        await waitFor(async () => (await metric(p0, 'proxai_trace_spans_dropped_total{reason="export_timeout"}')) >= 2, { timeout: 30000, what: 'the export to time out' });
        // the spans that waited go out in the next export
        await waitFor(() => hang.bodies.length >= 2, { timeout: 15000, what: 'the next export' });
      }
      assert.match(p0.logs().stderr, /trace export to .* failed/);
      assert.equal((p0.logs().stderr.match(/trace export to .* failed/g) || []).length, 1, 'logged once');
    } finally {
      await p0.stop();
      await u0.close();
      if (hang) await hang.close();
    }
  }, { timeout: 90000 });
}

test('[trace] is checked: a bad endpoint or sample is refused at start', async () => {
  for (const [t, msg] of [[C.trace({ endpoint: 'ftp://x' }), /invalid endpoint/], [C.trace({ endpoint: 'http://127.0.0.1:1/v1/traces', sample: 2 }), /from 0 to 1/], [C.trace({ sample: 1 }), /missing 'endpoint'/]]) {
    await assert.rejects(startProxai(config(up.url, t)), msg);
  }
});

await run();
await px.stop();
await up.close();
await col.close();
