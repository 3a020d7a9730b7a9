// Mixed soak (issue 9, "the security boundary"): for PROXAI_SOAK_SECONDS
// (default 20 s; 120 s when PROXAI_SANITIZED=1) a bounded number of raw-socket
// clients (16 in flight) hammer one proxai with a random mix of
//   * all four inbound protocols (Chat, Responses, Messages, Gemini
//     generateContent / streamGenerateContent?alt=sse), streaming or not,
//     against routes to each of the four upstream protocols (same-protocol
//     and translated);
//   * upstream behaviour scripted on the C mock: healthy, slow and chunked,
//     a long stream, error statuses, reset before the head, reset / clean
//     close / stall mid-body or mid-stream, a stalled head, a garbage answer;
//   * client behaviour: normal, slow reader, disconnect while sending the
//     request, right after it, or after a random number of response bytes,
//     malformed JSON bodies, pipelined keep-alive requests.
// Every response that completed must be well-formed for its protocol (status,
// error shape, JSON body or SSE stream with the right ending: a normal end
// for a healthy upstream, an error ending, never a fabricated normal stop,
// for a broken one). /healthz must answer throughout. After a settle period
// the process's descriptors are back to the baseline taken after a warm-up
// phase and its RSS is within a bound of the warm RSS; SIGTERM exits 0 with
// no sanitizer report on stderr.
//
// PROXAI_SOAK_SEED=N replays the same random mix (timing still varies).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { startMock, startProxai, test, run, sleep, waitFor } from './lib/harness.mjs';
import * as C from './lib/config.mjs';

const SANITIZED = process.env.PROXAI_SANITIZED === '1';
const SECONDS = Number(process.env.PROXAI_SOAK_SECONDS || (SANITIZED ? 120 : 20));
const CONCURRENCY = 16;
const OP_TIMEOUT_MS = SANITIZED ? 30000 : 15000; // one client exchange; beyond = a hang
const WARM_MS = Math.min(8000, Math.max(2000, SECONDS * 1000 * 0.15));
// RSS may grow this much over the warm baseline (allocator high-water marks,
// pools at their steady size); a per-request leak over thousands of requests
// goes far beyond it.
const RSS_SLACK_KB = (SANITIZED ? 64 : 24) * 1024;
let seed = Number(process.env.PROXAI_SOAK_SEED || (Date.now() % 1000000007));
const SEED0 = seed;
function rnd() { // mulberry32
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rnd() * a.length)];
const randInt = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));

// The sanitizer's quarantine (256 MiB by default) would hide any RSS signal:
// keep it small for the gateway child unless the caller chose a size.
const childEnv = {};
if (SANITIZED && !/quarantine_size_mb/.test(process.env.ASAN_OPTIONS || '')) {
  childEnv.ASAN_OPTIONS = [process.env.ASAN_OPTIONS, 'quarantine_size_mb=16'].filter(Boolean).join(':');
}

const mock = await startMock({ args: ['--max-records', '0'] });
const px = await startProxai(
  C.server({ log_level: 'error', header_timeout: '3s', idle_timeout: '3s', max_body: '256k' }) +
  C.upstream('oc', 'chat', mock.url, { api_key: 'up-chat-key', eject_after: 0, connect_timeout: '2s', first_byte_timeout: '1500ms', idle_timeout: '1s' }) +
  C.upstream('or', 'responses', mock.url, { api_key: 'up-resp-key', eject_after: 0, connect_timeout: '2s', first_byte_timeout: '1500ms', idle_timeout: '1s' }) +
  C.upstream('an', 'anthropic', mock.url, { api_key: 'up-ant-key', eject_after: 0, connect_timeout: '2s', first_byte_timeout: '1500ms', idle_timeout: '1s' }) +
  C.upstream('gm', 'gemini', mock.url, { api_key: 'up-gem-key', eject_after: 0, connect_timeout: '2s', first_byte_timeout: '1500ms', idle_timeout: '1s' }) +
  C.route('to-chat*', { upstream: 'oc', model: 'up-chat-model' }) +
  C.route('to-resp*', { upstream: 'or', model: 'up-resp-model' }) +
  C.route('to-ant*', { upstream: 'an', model: 'up-ant-model' }) +
  C.route('to-gem*', { upstream: 'gm', model: 'up-gem-model' }), { env: childEnv });
process.on('exit', () => { px.stop('SIGKILL'); mock.stop('SIGKILL'); });

// ---- the upstream script -------------------------------------------------------
// Each upstream behaviour is a marker word in the user text (it survives every
// translation); repeatable mock entries match it. fault_after 1 = after the
// first SSE event of a stream, after the first byte of a JSON body.

const UP_PATHS = { chat: '/chat/completions', resp: '/responses', ant: '/v1/messages', gem: [':generateContent', ':streamGenerateContent'] };
const errBody = {
  chat: (status, m) => ({ error: { message: m, type: status === 429 ? 'rate_limit_error' : 'server_error', param: null, code: null } }),
  resp: (status, m) => ({ error: { message: m, type: status === 429 ? 'rate_limit_error' : 'server_error', param: null, code: null } }),
  ant: (status, m) => ({ type: 'error', error: { type: status === 429 ? 'rate_limit_error' : 'api_error', message: m } }),
  gem: (status, m) => ({ error: { code: status, message: m, status: status === 429 ? 'RESOURCE_EXHAUSTED' : 'INTERNAL' } }),
};
const LONG_PIECE = 'x'.repeat(120);
const chatChunk = (delta, finish = null) => ({ data: { id: 'chatcmpl-long', object: 'chat.completion.chunk', created: 1700000000, model: 'up-chat-model', choices: [{ index: 0, delta, finish_reason: finish }] } });

const entries = [
  { match: 'zzSLOW', default: true, delay_ms: 20, chunk: 16, chunk_delay_ms: 3, repeat: true },
  { match: 'zzHEADLATE', default: true, headers_delay_ms: 300, repeat: true },
  { match: 'zzRESETPRE', default: true, fault: 'reset', repeat: true },
  { match: 'zzRESETMID', default: true, fault: 'reset', fault_after: 1, repeat: true },
  { match: 'zzCLOSEMID', default: true, fault: 'close', fault_after: 1, repeat: true },
  { match: 'zzSTALLMID', default: true, fault: 'stall', fault_after: 1, repeat: true },
  { match: 'zzSTALLHEAD', default: true, fault: 'stall', repeat: true },
  { match: 'zzGARBAGE', raw: 'HTTP/1.1 200 OK\r\ncontent-length: 400\r\ncontent-type: application/json\r\n\r\n{"truncated', repeat: true },
  { match: 'zzLONG', path: UP_PATHS.chat, sse: [chatChunk({ role: 'assistant', content: '' })],
    sse_repeat: { event: chatChunk({ content: LONG_PIECE }), count: 1500 },
    sse_tail: [chatChunk({}, 'stop'), { data: '[DONE]' }], repeat: true },
];
for (const [up, paths] of Object.entries(UP_PATHS)) {
  for (const p of [paths].flat()) {
    for (const status of [500, 429]) {
      entries.push({ match: `zzSTATUS${status}`, path: p, status, body: errBody[up](status, `soak ${status}`), repeat: true });
    }
  }
}
await mock.script(entries);

// ---- raw HTTP --------------------------------------------------------------------

/** Parses one HTTP/1.1 response at buf[off..]; null if incomplete, else {status, headers, body, end}. */
function parseResponse(buf, off = 0) {
  const he = buf.indexOf('\r\n\r\n', off, 'latin1');
  if (he < 0) return null;
  const lines = buf.subarray(off, he).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.1 (\d{3})/.exec(lines[0]);
  if (!m) return { malformed: `bad status line ${JSON.stringify(lines[0].slice(0, 80))}` };
  const status = Number(m[1]);
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i <= 0) return { malformed: `bad header line ${JSON.stringify(l.slice(0, 80))}` };
    const name = l.slice(0, i).trim().toLowerCase();
    if (name in headers && (name === 'content-length' || name === 'transfer-encoding')) return { malformed: `repeated ${name}` };
    headers[name] = l.slice(i + 1).trim();
  }
  let p = he + 4;
  if (headers['transfer-encoding'] !== undefined) {
    if (headers['content-length'] !== undefined) return { malformed: 'both content-length and transfer-encoding' };
    if (headers['transfer-encoding'].toLowerCase() !== 'chunked') return { malformed: `transfer-encoding ${headers['transfer-encoding']}` };
    const parts = [];
    for (;;) {
      const le = buf.indexOf('\r\n', p, 'latin1');
      if (le < 0) return null;
      const sizeText = buf.subarray(p, le).toString('latin1');
      if (!/^[0-9a-fA-F]+$/.test(sizeText)) return { malformed: `bad chunk size ${JSON.stringify(sizeText.slice(0, 40))}` };
      const n = parseInt(sizeText, 16);
      if (n === 0) {
        if (buf.length < le + 4) return null;
        if (buf.subarray(le + 2, le + 4).toString('latin1') !== '\r\n') return { malformed: 'trailers or bad last chunk' };
        return { status, headers, body: Buffer.concat(parts).toString('utf8'), end: le + 4 };
      }
      if (buf.length < le + 2 + n + 2) return null;
      parts.push(buf.subarray(le + 2, le + 2 + n));
      if (buf.subarray(le + 2 + n, le + 4 + n).toString('latin1') !== '\r\n') return { malformed: 'chunk not followed by CRLF' };
      p = le + 4 + n;
    }
  }
  if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    if (!Number.isInteger(n) || n < 0) return { malformed: `content-length ${headers['content-length']}` };
    if (buf.length < p + n) return null;
    return { status, headers, body: buf.subarray(p, p + n).toString('utf8'), end: p + n };
  }
  if (status === 204 || status === 304) return { status, headers, body: '', end: p };
  return { malformed: 'response without framing' };
}

/**
 * One client connection. reqs: Buffers written (all at once, or as given by
 * plan.parts). Resolves {responses, closed, error, timedOut, bytes}.
 * plan: {expect: number of responses to wait for, abortAfterBytes, abortAfterMs,
 *        partial: Buffer written instead of the requests then abort, slow: bool}
 */
function exchange(reqs, plan = {}) {
  return new Promise((resolve) => {
    const sock = net.connect({ port: px.port, host: '127.0.0.1' });
    let buf = Buffer.alloc(0);
    let off = 0;
    const responses = [];
    let done = false;
    let error = null;
    let slowTimer = null;
    const finish = (why) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearInterval(slowTimer);
      sock.destroy();
      resolve({ responses, why, error, bytes: buf.length, tail: buf.subarray(off).toString('latin1').slice(0, 300) });
    };
    const timer = setTimeout(() => finish('timeout'), OP_TIMEOUT_MS);
    sock.on('error', (e) => { error = e.code || e.message; });
    sock.on('close', () => finish('closed'));
    sock.on('connect', () => {
      if (plan.partial) {
        sock.write(plan.partial);
        setTimeout(() => finish('aborted'), plan.abortAfterMs ?? 0);
        return;
      }
      sock.write(Buffer.concat(reqs));
      if (plan.abortAfterMs !== undefined) setTimeout(() => finish('aborted'), plan.abortAfterMs);
      if (plan.slow) {
        sock.pause();
        slowTimer = setInterval(() => {
          sock.resume();
          setImmediate(() => { if (!done) sock.pause(); });
        }, 15);
      }
    });
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (plan.abortAfterBytes !== undefined && buf.length >= plan.abortAfterBytes) return finish('aborted');
      for (;;) {
        const r = parseResponse(buf, off);
        if (!r) break;
        if (r.malformed) {
          responses.push(r);
          return finish('malformed');
        }
        responses.push(r);
        off = r.end;
        if (responses.length >= (plan.expect ?? 1)) return finish('complete');
      }
    });
  });
}

// ---- requests of the four protocols ----------------------------------------------

const CLIENTS = ['chat', 'resp', 'ant', 'gem'];
const TARGETS = ['chat', 'resp', 'ant', 'gem'];
const MODEL = { chat: 'to-chat-x', resp: 'to-resp-x', ant: 'to-ant-x', gem: 'to-gem-x' };

function requestBytes(client, target, stream, text, { body: rawBody, last = false } = {}) {
  const model = MODEL[target];
  let path;
  let body;
  const headers = ['host: 127.0.0.1', 'content-type: application/json'];
  if (client === 'chat') {
    path = '/v1/chat/completions';
    body = { model, messages: [{ role: 'user', content: text }], ...(stream ? { stream: true } : {}) };
    headers.push('authorization: Bearer soak');
  } else if (client === 'resp') {
    path = '/v1/responses';
    body = { model, input: text, ...(stream ? { stream: true } : {}) };
    headers.push('authorization: Bearer soak');
  } else if (client === 'ant') {
    path = '/v1/messages';
    body = { model, max_tokens: 64, messages: [{ role: 'user', content: text }], ...(stream ? { stream: true } : {}) };
    headers.push('x-api-key: soak', 'anthropic-version: 2023-06-01');
  } else {
    path = `/v1beta/models/${model}:${stream ? 'streamGenerateContent?alt=sse' : 'generateContent'}`;
    body = { contents: [{ role: 'user', parts: [{ text }] }] };
    headers.push('x-goog-api-key: soak');
  }
  const b = Buffer.from(rawBody ?? JSON.stringify(body));
  headers.push(`content-length: ${b.length}`);
  if (last) headers.push('connection: close');
  return Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\n${headers.join('\r\n')}\r\n\r\n`, 'latin1'), b]);
}

// ---- well-formedness --------------------------------------------------------------

function parseSSEStrict(text) {
  if (text.length && !text.endsWith('\n\n') && !text.endsWith('\r\n\r\n')) throw new Error(`stream does not end on an event boundary: ...${JSON.stringify(text.slice(-80))}`);
  const events = [];
  for (const block of text.replace(/\r\n?/g, '\n').split('\n\n')) {
    if (!block.trim()) continue;
    const ev = { event: undefined, data: undefined };
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? '' : line.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'event') ev.event = value;
      else if (field !== 'id' && field !== 'retry') throw new Error(`unknown SSE field ${JSON.stringify(line.slice(0, 60))}`);
    }
    if (!data.length) continue;
    ev.raw = data.join('\n');
    if (ev.raw !== '[DONE]') {
      try {
        ev.data = JSON.parse(ev.raw);
      } catch {
        throw new Error(`SSE data is not JSON: ${JSON.stringify(ev.raw.slice(0, 120))}`);
      }
    }
    events.push(ev);
  }
  return events;
}

/** 'normal' | 'error': how a (framing-complete) stream of this client protocol ended; throws if malformed. */
function streamEnding(client, events) {
  if (!events.length) throw new Error('empty stream');
  const last = events[events.length - 1];
  if (client === 'chat') {
    const done = events.findIndex((e) => e.raw === '[DONE]');
    const errs = events.filter((e) => e.data && e.data.error);
    if (done >= 0) {
      if (done !== events.length - 1) throw new Error('events after [DONE]');
      if (errs.length) throw new Error('an error frame and [DONE]');
      for (const e of events.slice(0, -1)) if (e.data.object !== 'chat.completion.chunk') throw new Error(`not a chunk: ${e.raw.slice(0, 120)}`);
      return 'normal';
    }
    if (last.data && last.data.error && typeof last.data.error.message === 'string') return 'error';
    throw new Error(`chat stream ends with neither [DONE] nor an error frame: ${last.raw.slice(0, 160)}`);
  }
  if (client === 'resp') {
    for (const e of events) {
      if (!e.data || typeof e.data.type !== 'string') throw new Error(`responses event without type: ${e.raw.slice(0, 120)}`);
      if (e.event !== undefined && e.event !== e.data.type) throw new Error(`event: ${e.event} carries type ${e.data.type}`);
    }
    const t = last.data.type;
    if (t === 'response.completed') return 'normal';
    if (t === 'response.failed' || t === 'error' || t === 'response.incomplete') return 'error';
    throw new Error(`responses stream ends with ${t}`);
  }
  if (client === 'ant') {
    for (const e of events) {
      if (!e.data || typeof e.data.type !== 'string') throw new Error(`anthropic event without type: ${e.raw.slice(0, 120)}`);
      if (e.event !== e.data.type) throw new Error(`event: ${e.event} carries type ${e.data.type}`);
    }
    if (last.data.type === 'message_stop') return 'normal';
    if (last.data.type === 'error' && last.data.error && typeof last.data.error.type === 'string') return 'error';
    throw new Error(`anthropic stream ends with ${last.data.type}`);
  }
  // gemini: no terminal event; a finishReason chunk ends it normally
  for (const e of events) if (!e.data || (!e.data.candidates && !e.data.error && !e.data.usageMetadata)) throw new Error(`gemini chunk of no known shape: ${e.raw.slice(0, 120)}`);
  if (last.data.error) return 'error';
  if (events.some((e) => e.data.candidates?.[0]?.finishReason)) return 'normal';
  throw new Error('gemini stream ends with neither a finishReason chunk nor an error');
}

function streamText(client, events) {
  let s = '';
  for (const e of events) {
    const d = e.data;
    if (!d) continue;
    if (client === 'chat') s += d.choices?.[0]?.delta?.content ?? '';
    else if (client === 'resp') { if (d.type === 'response.output_text.delta') s += d.delta; }
    else if (client === 'ant') { if (d.type === 'content_block_delta' && d.delta?.type === 'text_delta') s += d.delta.text; }
    else for (const p of d.candidates?.[0]?.content?.parts ?? []) s += p.text ?? '';
  }
  return s;
}

function checkErrorShape(client, r) {
  if (!/^application\/json/.test(r.headers['content-type'] || '')) throw new Error(`error ${r.status} with content-type ${r.headers['content-type']}`);
  const j = JSON.parse(r.body);
  if (client === 'ant') {
    if (j.type !== 'error' || typeof j.error?.type !== 'string' || typeof j.error?.message !== 'string') throw new Error(`not an Anthropic error: ${r.body.slice(0, 200)}`);
  } else if (client === 'gem') {
    if (j.error?.code !== r.status || typeof j.error?.status !== 'string' || typeof j.error?.message !== 'string') throw new Error(`not a Gemini error: ${r.body.slice(0, 200)}`);
  } else if (typeof j.error?.message !== 'string' || typeof j.error?.type !== 'string') {
    throw new Error(`not an OpenAI error: ${r.body.slice(0, 200)}`);
  }
}

function checkSuccessBody(client, r, expectText) {
  if (!/^application\/json/.test(r.headers['content-type'] || '')) throw new Error(`200 with content-type ${r.headers['content-type']}`);
  const j = JSON.parse(r.body);
  let text;
  if (client === 'chat') {
    if (j.object !== 'chat.completion' || !Array.isArray(j.choices)) throw new Error(`not a chat.completion: ${r.body.slice(0, 200)}`);
    text = j.choices[0]?.message?.content;
  } else if (client === 'resp') {
    if (j.object !== 'response' || !Array.isArray(j.output)) throw new Error(`not a response: ${r.body.slice(0, 200)}`);
    text = j.output.flatMap((o) => o.content ?? []).map((c) => c.text ?? '').join('');
  } else if (client === 'ant') {
    if (j.type !== 'message' || !Array.isArray(j.content)) throw new Error(`not a message: ${r.body.slice(0, 200)}`);
    text = j.content.map((c) => c.text ?? '').join('');
  } else {
    if (!Array.isArray(j.candidates)) throw new Error(`not a generateContent answer: ${r.body.slice(0, 200)}`);
    text = (j.candidates[0]?.content?.parts ?? []).map((p) => p.text ?? '').join('');
  }
  if (expectText !== undefined && text !== expectText) throw new Error(`text ${JSON.stringify(text?.slice(0, 80))}, expected ${JSON.stringify(expectText.slice(0, 80))}`);
}

// upstream behaviour -> what a completed response may be
//   ok: 200 and a normal ending with the mock's text
//   status: that status, error shape
//   broken: (a 5xx error) or (a 200 stream with an error ending); never a normal ending
const UP_BEHAVIOURS = [
  ['ok', 10], ['zzSLOW', 4], ['zzHEADLATE', 2], ['zzLONG', 2], ['zzSTATUS500', 2], ['zzSTATUS429', 2],
  ['zzRESETPRE', 2], ['zzRESETMID', 2], ['zzCLOSEMID', 2], ['zzSTALLMID', 1], ['zzSTALLHEAD', 1], ['zzGARBAGE', 1],
];
const UP_WEIGHTED = UP_BEHAVIOURS.flatMap(([b, w]) => Array(w).fill(b));
const MOCK_TEXT = 'Hello from mock';

function expectationOf(up) {
  if (up === 'ok' || up === 'zzSLOW' || up === 'zzHEADLATE') return { kind: 'ok', text: MOCK_TEXT };
  if (up === 'zzLONG') return { kind: 'ok', text: LONG_PIECE.repeat(1500) };
  if (up === 'zzSTATUS500') return { kind: 'status', status: 500 };
  if (up === 'zzSTATUS429') return { kind: 'status', status: 429 };
  return { kind: 'broken' };
}

/** Throws if the completed response r is not what this request may get. */
function checkResponse(req, r) {
  const { client, stream, exp } = req;
  if (r.malformed) throw new Error(`malformed HTTP: ${r.malformed}`);
  if (!r.headers['x-request-id']) throw new Error('no x-request-id');
  if (exp.kind === 'malformed') {
    if (r.status !== 400) throw new Error(`malformed body answered ${r.status}: ${r.body.slice(0, 200)}`);
    return checkErrorShape(client, r);
  }
  if (exp.kind === 'status') {
    if (r.status !== exp.status) throw new Error(`status ${r.status}, expected ${exp.status}: ${r.body.slice(0, 200)}`);
    return checkErrorShape(client, r);
  }
  if (r.status !== 200) {
    if (exp.kind === 'broken' && r.status >= 500) return checkErrorShape(client, r);
    throw new Error(`status ${r.status}: ${r.body.slice(0, 300)}`);
  }
  if (!stream) {
    if (exp.kind === 'broken') throw new Error(`a broken upstream answer became a 200: ${r.body.slice(0, 200)}`);
    return checkSuccessBody(client, r, exp.text);
  }
  if (!/^text\/event-stream/.test(r.headers['content-type'] || '')) throw new Error(`stream with content-type ${r.headers['content-type']}`);
  const events = parseSSEStrict(r.body);
  const ending = streamEnding(client, events);
  stats.endings[`${exp.kind}:${ending}`] = (stats.endings[`${exp.kind}:${ending}`] || 0) + 1;
  if (exp.kind === 'broken') {
    if (ending !== 'error') throw new Error(`a broken upstream stream ended normally: ${r.body.slice(-300)}`);
    return;
  }
  if (ending !== 'normal') throw new Error(`a healthy upstream stream ended with an error: ${r.body.slice(-300)}`);
  const text = streamText(client, events);
  if (text !== exp.text) throw new Error(`stream text ${JSON.stringify(text.slice(0, 80))} (${text.length} chars), expected ${exp.text.length} chars`);
}

// ---- one random scenario ----------------------------------------------------------

const MALFORMED = ['{"model": "to-chat-x", "messages": [', 'not json at all', '{"model":"to-chat-x"}}', '\u0000\u0001{', '{"contents": [{"role": "user", "parts": [{"text": "a"}]}]', '[1,2'];
const stats = { scenarios: 0, completed: 0, aborted: 0, byClient: {}, byUp: {}, statuses: {}, endings: {} };
const failures = [];
let nextId = 0;

function newRequest({ allowBroken = true, last = false } = {}) {
  const client = pick(CLIENTS);
  let target = pick(TARGETS);
  let stream = rnd() < 0.5;
  let up = allowBroken ? pick(UP_WEIGHTED) : pick(['ok', 'ok', 'zzSLOW']);
  if (up === 'zzLONG') { target = 'chat'; stream = true; } // the long stream is scripted in the Chat shape
  const id = nextId++;
  const text = `soak ${id} ${up === 'ok' ? '' : up} say hello`;
  return { id, client, target, stream, up, exp: expectationOf(up), bytes: requestBytes(client, target, stream, text, { last }) };
}

const describe = (q) => `#${q.id} ${q.client}->${q.target} ${q.stream ? 'stream' : 'json'} up=${q.up}`;

function fail(what, q, res) {
  failures.push(`${what} [${q.map(describe).join(' | ')}] why=${res?.why} err=${res?.error} bytes=${res?.bytes} tail=${JSON.stringify(res?.tail ?? '')}`);
}

async function scenario() {
  stats.scenarios++;
  const mode = pick(['normal', 'normal', 'normal', 'slow', 'abortSend', 'abortEarly', 'abortBytes', 'abortBytes', 'malformed', 'pipeline']);
  stats[mode] = (stats[mode] || 0) + 1;
  if (mode === 'pipeline') {
    const n = randInt(2, 3);
    const qs = Array.from({ length: n }, (_, i) => newRequest({ allowBroken: false, last: i === n - 1 }));
    const res = await exchange(qs.map((q) => q.bytes), { expect: n });
    if (res.why === 'timeout') return fail('pipelined requests hung', qs, res);
    if (res.responses.length !== n) return fail(`pipelined: ${res.responses.length} of ${n} responses`, qs, res);
    qs.forEach((q, i) => {
      try {
        checkResponse(q, res.responses[i]);
        stats.completed++;
      } catch (e) {
        fail(`pipelined response ${i}: ${e.message}`, qs, res);
      }
    });
    return;
  }
  const q = newRequest();
  stats.byClient[q.client] = (stats.byClient[q.client] || 0) + 1;
  stats.byUp[q.up] = (stats.byUp[q.up] || 0) + 1;
  if (mode === 'malformed') {
    q.exp = { kind: 'malformed' };
    q.bytes = requestBytes(q.client, q.target, q.stream, '', { body: pick(MALFORMED) });
  }
  let plan = {};
  if (mode === 'slow') plan = { slow: true };
  else if (mode === 'abortSend') plan = { partial: q.bytes.subarray(0, randInt(1, q.bytes.length - 1)), abortAfterMs: randInt(0, 20) };
  else if (mode === 'abortEarly') plan = { abortAfterMs: randInt(0, 40) };
  else if (mode === 'abortBytes') plan = { abortAfterBytes: randInt(1, q.up === 'zzLONG' ? 60000 : 600) };
  const res = await exchange([q.bytes], plan);
  if (res.why === 'timeout') return fail('request hung', [q], res);
  if (res.why === 'aborted') {
    stats.aborted++;
    return;
  }
  if (res.responses.length === 0) {
    // closed without any answer: only acceptable if the client aborted; a
    // malformed-JSON request still deserves its 400
    return fail('connection closed without a response', [q], res);
  }
  const r = res.responses[0];
  stats.statuses[r.status] = (stats.statuses[r.status] || 0) + 1;
  try {
    checkResponse(q, r);
    stats.completed++;
  } catch (e) {
    fail(e.message, [q], res);
  }
}

async function soak(ms) {
  const end = Date.now() + ms;
  const worker = async () => {
    while (Date.now() < end) await scenario();
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
}

// ---- the process ------------------------------------------------------------------

const fdList = () => fs.readdirSync(`/proc/${px.pid}/fd`).map((f) => {
  try {
    return fs.readlinkSync(`/proc/${px.pid}/fd/${f}`);
  } catch {
    return null; // closed meanwhile
  }
}).filter(Boolean);

/** The process's TCP sockets by inode -> {local, remote} ports. */
function tcpPorts() {
  const map = new Map();
  for (const f of ['tcp', 'tcp6']) {
    let text;
    try {
      text = fs.readFileSync(`/proc/${px.pid}/net/${f}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const c = line.trim().split(/\s+/);
      if (c.length < 10) continue;
      map.set(c[9], { local: parseInt(c[1].split(':').pop(), 16), remote: parseInt(c[2].split(':').pop(), 16) });
    }
  }
  return map;
}

/** {total, clients (sockets of the listen port other than the listener), upstream (sockets to the mock), links} */
function fdSnapshot() {
  const links = fdList();
  const ports = tcpPorts();
  let clients = 0;
  let upstream = 0;
  for (const l of links) {
    const m = /^socket:\[(\d+)\]$/.exec(l);
    if (!m) continue;
    const p = ports.get(m[1]);
    if (!p) continue;
    if (p.local === px.port && p.remote !== 0) clients++;
    if (p.remote === mock.port) upstream++;
  }
  return { total: links.length, clients, upstream, links };
}

const rssKb = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${px.pid}/status`, 'utf8'))[1]);

async function healthz() {
  const res = await exchange([Buffer.from('GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n')], { expect: 1 });
  const r = res.responses[0];
  return r && !r.malformed && r.status === 200 ? null : `healthz: why=${res.why} status=${r?.status} err=${res.error}`;
}

async function settle(what) {
  await waitFor(() => fdSnapshot().clients === 0, { timeout: 20000, what: `${what}: no client connection left (now ${fdSnapshot().clients})` });
}

let baseline;

test('warm-up: the mix, then the descriptor and RSS baseline', async () => {
  await soak(WARM_MS);
  assert.ok(failures.length === 0, `${failures.length} failures (seed ${SEED0}):\n${failures.slice(0, 20).join('\n')}`);
  await settle('warm-up');
  await sleep(500);
  const s = fdSnapshot();
  baseline = { fdsNoUpstream: s.total - s.upstream, total: s.total, upstream: s.upstream, rss: rssKb(), links: s.links };
  console.log(`# seed ${SEED0}, ${SECONDS} s, warm-up ${WARM_MS} ms: ${stats.scenarios} scenarios; baseline fds ${s.total} (${s.upstream} upstream), RSS ${baseline.rss} kB`);
}, { timeout: WARM_MS + 60000 });

test('the mixed soak: every completed response well-formed, /healthz answers throughout', async () => {
  const healthFailures = [];
  let checks = 0;
  let stop = false;
  const checker = (async () => {
    while (!stop) {
      const e = await healthz();
      checks++;
      if (e) healthFailures.push(e);
      await sleep(250);
    }
  })();
  const before = stats.scenarios;
  await soak(SECONDS * 1000);
  stop = true;
  await checker;
  console.log(`# ${stats.scenarios - before} scenarios in ${SECONDS} s; ${checks} healthz checks; stats ${JSON.stringify(stats)}`);
  assert.ok(checks > 0);
  assert.ok(healthFailures.length === 0, healthFailures.slice(0, 10).join('\n'));
  assert.ok(failures.length === 0, `${failures.length} failures (seed ${SEED0}):\n${failures.slice(0, 20).join('\n')}`);
  assert.ok(stats.completed > 100, `only ${stats.completed} completed exchanges`);
}, { timeout: SECONDS * 1000 + 120000 });

test('after a settle period: descriptors back to the baseline, RSS within bound', async () => {
  await settle('soak');
  const e = await healthz();
  assert.equal(e, null);
  // descriptors other than pooled upstream connections: back to the baseline
  await waitFor(() => { const s = fdSnapshot(); return s.total - s.upstream <= baseline.fdsNoUpstream; },
    { timeout: 20000, what: `descriptors (without upstream ones) back to ${baseline.fdsNoUpstream}` })
    .catch((err) => { throw new Error(`${err.message}\nbaseline: ${baseline.links.join(' ')}\nnow: ${fdSnapshot().links.join(' ')}`); });
  // the upstream connections too, once the upstream is gone
  const upstreamNow = fdSnapshot().upstream;
  await mock.stop('SIGTERM');
  await waitFor(() => fdSnapshot().total <= baseline.fdsNoUpstream,
    { timeout: 20000, what: `descriptors back to ${baseline.fdsNoUpstream} after the upstream closed its ${upstreamNow} connections (now ${fdSnapshot().total})` });
  const rss = rssKb();
  console.log(`# RSS warm ${baseline.rss} kB, end ${rss} kB (bound +${RSS_SLACK_KB} kB); upstream connections before the mock stopped: ${upstreamNow}`);
  assert.ok(rss <= baseline.rss + RSS_SLACK_KB, `RSS ${rss} kB, warm baseline ${baseline.rss} kB`);
  assert.equal(await healthz(), null);
}, { timeout: 90000 });

test('SIGTERM: exit 0 and no sanitizer report', async () => {
  const info = await px.stop('SIGTERM', 30000);
  const err = px.logs().stderr;
  assert.equal(info.code, 0, `exit ${JSON.stringify(info)}\n${err.slice(-4000)}`);
  assert.ok(!/ERROR: AddressSanitizer|LeakSanitizer|runtime error:/.test(err), err.slice(-6000));
}, { timeout: 60000 });

await run();
