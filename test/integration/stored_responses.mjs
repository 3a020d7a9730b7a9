// Stored Responses for every upstream (SPEC section 14): Responses clients
// (the official openai SDK) chain turns with previous_response_id toward
// Anthropic, Chat and Gemini upstreams; the gateway keeps each turn in the
// state backend before the client sees its end, expands the chain into the
// upstream's protocol, serves GET / DELETE / input_items in OpenAI's shapes,
// per key. On Redis (a real redis-server), or with STORED_BACKEND=local on
// the host's store ([state] dir, LMDB): then a restart keeps the turns and
// the workers of one host share them.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { startMock, startProxai, test, run, sleep, waitFor } from './lib/harness.mjs';
import { startRedis } from './lib/redis.mjs';
import * as C from './lib/config.mjs';
import * as up from './lib/stored.mjs';
import { startCollector } from './lib/otlp.mjs';

const { default: OpenAI } = await import('openai');

const LOCAL = process.env.STORED_BACKEND === 'local';
const redis = LOCAL ? null : await startRedis();
const mock = await startMock();
const prefix = `sr${process.pid}:`;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-stored-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
const mainDir = path.join(tmp, 'state');
// timeout: a 15 MB chain (the 50-turn test) is read within it, on a loaded machine
const state = (dir) => (LOCAL ? C.state({ dir }) : C.state({
  backend: 'redis', redis: redis.url, prefix: `${prefix}${dir === mainDir ? '' : 'other:'}`, on_error: 'allow',
  timeout: '5s',
}));

const conf = ({ ttl = '30d', maxSize = '1g', maxBody = '16m', store = 'on', responses = false, dir = mainDir,
  workers = 1 } = {}) => C.server({ max_body: maxBody, workers })
  + state(dir)
  + C.responses({ store, ttl, max_size: maxSize })
  + up.upstreams(mock.url, { responses })
  + C.keys({ alice: { secret: 'sk-alice' }, bob: { secret: 'sk-bob' } });

const px = await startProxai(conf());
const client = (p = px, key = 'sk-alice') => new OpenAI({ baseURL: `${p.url}/v1`, apiKey: key, maxRetries: 0 });
const alice = client();
const bob = client(px, 'sk-bob');

/** The body of the mock's last recorded request. */
async function lastUpstream() {
  const r = await mock.requests();
  return r[r.length - 1];
}

for (const fam of up.FAMILIES) {
  const model = fam.model;

  test(`${fam.name}: create, then stream a follow-up: the upstream gets the whole conversation`, async () => {
    const r1 = await alice.responses.create({ model, input: 'What is 2+2?', instructions: 'Be brief.' });
    assert.match(r1.id, /^resp_[a-z0-9]{24}$/);
    assert.equal(r1.output_text, 'Hello from mock');
    const stream = alice.responses.stream({ model, input: 'And 3+3?', previous_response_id: r1.id });
    const r2 = await stream.finalResponse();
    assert.equal(r2.previous_response_id, r1.id);
    assert.notEqual(r2.id, r1.id);
    const sent = up.conversation(fam, (await lastUpstream()).body);
    assert.deepEqual(sent.turns, [['user', 'What is 2+2?'], ['assistant', 'Hello from mock'], ['user', 'And 3+3?']]);
    assert.equal(sent.system, null, 'instructions are not inherited');
    // the streamed turn is kept whole, as the client saw it
    const got = await alice.responses.retrieve(r2.id);
    assert.deepEqual(got.output.map((o) => o.id), r2.output.map((o) => o.id));
    assert.equal(got.output_text, r2.output_text);
    assert.equal(got.status, 'completed');
    assert.equal(got.previous_response_id, r1.id);
    assert.deepEqual((await alice.responses.inputItems.list(r2.id)).data.map((i) => i.content[0].text), ['And 3+3?']);
  });

  test(`${fam.name}: a 5-turn chain alternating stream and JSON, and branches that stay apart`, async () => {
    let prev;
    const ids = [];
    for (let i = 1; i <= 5; i++) {
      const req = { model, input: `turn ${i}`, previous_response_id: prev };
      const r = i % 2 ? await alice.responses.create(req) : await alice.responses.stream(req).finalResponse();
      ids.push(r.id);
      prev = r.id;
    }
    const sent = up.conversation(fam, (await lastUpstream()).body);
    const want = [];
    for (let i = 1; i <= 5; i++) {
      want.push(['user', `turn ${i}`]);
      if (i < 5) want.push(['assistant', 'Hello from mock']);
    }
    assert.deepEqual(sent.turns, want);
    // two branches from turn 2
    await alice.responses.create({ model, input: 'branch A', previous_response_id: ids[1] });
    const a = up.conversation(fam, (await lastUpstream()).body).turns.map((t) => t[1]);
    await alice.responses.stream({ model, input: 'branch B', previous_response_id: ids[1] }).finalResponse();
    const b = up.conversation(fam, (await lastUpstream()).body).turns.map((t) => t[1]);
    assert.deepEqual(a, ['turn 1', 'Hello from mock', 'turn 2', 'Hello from mock', 'branch A']);
    assert.deepEqual(b, ['turn 1', 'Hello from mock', 'turn 2', 'Hello from mock', 'branch B']);
  });

  test(`${fam.name}: a tool call round trip across turns`, async () => {
    await mock.script(fam.toolCall());
    const tools = [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }];
    const r1 = await alice.responses.create({ model, input: 'Weather in Paris?', tools });
    const call = r1.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(r1.output));
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
    const r2 = await alice.responses.stream({
      model, tools, previous_response_id: r1.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' }],
    }).finalResponse();
    assert.equal(r2.output_text, 'Hello from mock');
    const body = (await lastUpstream()).body;
    assert.deepEqual(up.toolExchange(fam, body), { name: 'get_weather', args: { city: 'Paris' }, result: 'sunny, 21 C', paired: true });
  });

  test(`${fam.name}: retrieval, input_items pages, deletion`, async () => {
    const r1 = await alice.responses.create({
      model, input: [
        { role: 'user', content: 'one' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'two' }], id: 'msg_client2' },
        { role: 'user', content: 'three' },
      ],
    });
    const got = await alice.responses.retrieve(r1.id);
    assert.equal(got.id, r1.id);
    assert.deepEqual(got.output, r1.output);
    assert.equal(got.output_text, 'Hello from mock');
    const all = await alice.responses.inputItems.list(r1.id);
    assert.equal(all.data.length, 3);
    assert.equal(all.data[1].id, 'msg_client2');
    assert.ok(all.data.every((it) => typeof it.id === 'string' && it.id.length > 0));
    const texts = (page) => page.data.map((it) => (typeof it.content === 'string' ? it.content : it.content[0].text));
    assert.deepEqual(texts(all), ['three', 'two', 'one'], 'desc by default');
    const asc = await alice.responses.inputItems.list(r1.id, { order: 'asc', limit: 2 });
    assert.deepEqual(texts(asc), ['one', 'two']);
    assert.equal(asc.has_more, true);
    const next = await alice.responses.inputItems.list(r1.id, { order: 'asc', after: asc.data[1].id });
    assert.deepEqual(texts(next), ['three']);
    assert.equal(next.has_more, false);
    await alice.responses.delete(r1.id);
    await assert.rejects(alice.responses.retrieve(r1.id), (e) => e.status === 404 && e.message.includes(r1.id));
    const n = (await mock.requests()).length;
    await assert.rejects(alice.responses.create({ model, input: 'x', previous_response_id: r1.id }),
      (e) => e.status === 404 && e.error?.type === 'not_found_error' && e.message.includes(r1.id));
    assert.equal((await mock.requests()).length, n, 'nothing sent upstream');
    await assert.rejects(alice.responses.delete(r1.id), (e) => e.status === 404);
  });
}

test('a response is visible only to the key that made it', async () => {
  const r = await alice.responses.create({ model: 'claude-sonnet', input: 'mine' });
  await assert.rejects(bob.responses.retrieve(r.id), (e) => e.status === 404 && e.message.includes(r.id));
  await assert.rejects(bob.responses.inputItems.list(r.id), (e) => e.status === 404);
  await assert.rejects(bob.responses.delete(r.id), (e) => e.status === 404);
  await assert.rejects(bob.responses.create({ model: 'claude-sonnet', input: 'x', previous_response_id: r.id }),
    (e) => e.status === 404 && e.message.includes(r.id));
  assert.equal((await alice.responses.retrieve(r.id)).id, r.id, 'still there for its owner');
});

test('a follow-up sent the instant the terminal event arrives always finds the turn', async () => {
  for (let i = 0; i < 20; i++) {
    const fam = up.FAMILIES[i % up.FAMILIES.length];
    const stream = await alice.responses.create({ model: fam.model, input: `q${i}`, stream: true });
    let follow = null;
    for await (const ev of stream) {
      if (ev.type === 'response.completed') {
        // no await before this: the next request leaves at once
        follow = alice.responses.create({ model: fam.model, input: 'next', previous_response_id: ev.response.id })
          .catch((e) => e);
      }
    }
    const r = await follow;
    assert.equal(r.status, 'completed', String(r));
  }
});

/** A TCP relay to port that holds every piece of data for ms, each way,
 *  in order: a slow link to Redis. */
async function slowRelay(port, ms) {
  const server = net.createServer((a) => {
    const b = net.connect(port, '127.0.0.1');
    const pipe = (from, to) => {
      let chain = Promise.resolve();
      from.on('data', (d) => {
        chain = chain.then(() => sleep(ms)).then(() => to.destroyed || to.write(d));
      });
      from.on('close', () => chain.then(() => to.destroy()));
      from.on('error', () => to.destroy());
    };
    pipe(a, b);
    pipe(b, a);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  process.on('exit', () => server.close());
  return { port: server.address().port, close: () => server.close() };
}

/** A TCP relay to port that holds each chunk of 8 KiB or more from the
 *  server for ms (in order): a chain's read is slow, Redis's small answers
 *  (PONG, a write's result) are not. */
async function bulkyRelay(port, ms) {
  const server = net.createServer((a) => {
    const b = net.connect(port, '127.0.0.1');
    let chain = Promise.resolve();
    b.on('data', (d) => {
      chain = chain.then(() => (d.length >= 8192 ? sleep(ms) : null)).then(() => a.destroyed || a.write(d));
    });
    a.on('data', (d) => b.destroyed || b.write(d));
    for (const [x, y] of [[a, b], [b, a]]) {
      x.on('close', () => chain.then(() => y.destroy()));
      x.on('error', () => y.destroy());
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  process.on('exit', () => server.close());
  return { port: server.address().port, close: () => server.close() };
}

if (!LOCAL) test('a chain\'s read is bounded by [responses] timeout, not [state] timeout', async () => {
  // [state] timeout 200 ms (the limits' small scripts); a chain's reply held
  // 400 ms a chunk: read within [responses] timeout, the connection kept
  const relay = await bulkyRelay(redis.port, 400);
  const cf = (rt) => conf().replace(redis.url, `redis://127.0.0.1:${relay.port}/0`)
    .replace('timeout = 5s', 'timeout = 200ms').replace('max_size = 1g', `max_size = 1g\ntimeout = ${rt}`);
  const px2 = await startProxai(cf('20s'));
  try {
    const c = client(px2);
    let prev;
    for (let i = 0; i < 3; i++) {
      const t0 = Date.now();
      const r = await c.responses.create({ model: 'claude-sonnet', input: `${i} ${'z'.repeat(30000)}`, previous_response_id: prev });
      if (i > 0) assert.ok(Date.now() - t0 >= 400, 'the chain\'s read took longer than [state] timeout');
      prev = r.id;
    }
    const sent = up.conversation(up.FAMILIES[0], (await lastUpstream()).body);
    assert.equal(sent.turns.length, 5);
    assert.doesNotMatch(px2.logs().stderr, /unreachable/);
  } finally {
    await px2.stop();
  }
  // and the bound holds: a read slower than it is a 503, never a shortened chain
  const px3 = await startProxai(cf('300ms'));
  try {
    const c = client(px3);
    const r = await c.responses.create({ model: 'claude-sonnet', input: `a ${'z'.repeat(30000)}` });
    await assert.rejects(c.responses.create({ model: 'claude-sonnet', input: 'b', previous_response_id: r.id }),
      (e) => e.status === 503);
  } finally {
    await px3.stop();
    relay.close();
  }
}, { timeout: 90000 });

if (!LOCAL) test('the terminal event waits for the write: another instance finds the turn at once', async () => {
  // instance A reaches Redis over a link that holds every byte 150 ms; B
  // reads directly: were the event sent before A's write is answered, B
  // would look first
  const relay = await slowRelay(redis.port, 150);
  // (a slow link within the 5 s timeout, not a dead one)
  const slow = await startProxai(conf().replace(redis.url, `redis://127.0.0.1:${relay.port}/0`));
  try {
    const a = client(slow);
    for (let i = 0; i < 6; i++) {
      const fam = up.FAMILIES[i % up.FAMILIES.length];
      const stream = await a.responses.create({ model: fam.model, input: `s${i}`, stream: true });
      let follow = null;
      for await (const ev of stream) {
        if (ev.type === 'response.completed') {
          follow = alice.responses.create({ model: fam.model, input: 'next', previous_response_id: ev.response.id })
            .catch((e) => e);
        }
      }
      const r2 = await follow;
      assert.equal(r2.status, 'completed', String(r2));
      // the JSON answer likewise
      const r = await a.responses.create({ model: fam.model, input: `j${i}` });
      assert.equal((await alice.responses.retrieve(r.id)).id, r.id);
    }
    // a client that leaves while its turn is being written does not cut it
    // short; nor when Redis forgot the script meanwhile (SCRIPT FLUSH: the
    // write answered NOSCRIPT after the client left is sent again in full,
    // its input, over the size copied at once, still there)
    for (const flush of [false, true]) {
      if (flush) assert.match(await redis.command('SCRIPT', 'FLUSH'), /OK/);
      const input = flush ? `leaving ${'x'.repeat(20000)}` : 'leaving';
      const ac = new AbortController();
      const gone = await a.responses.create({ model: 'claude-sonnet', input, stream: true },
        { signal: ac.signal });
      let id = null;
      try {
        for await (const ev of gone) {
          if (ev.type === 'response.created') id = ev.response.id;
          if (ev.type === 'response.output_item.done') ac.abort(); // the terminal event is held now
        }
      } catch {
        // aborted
      }
      assert.ok(id);
      await waitFor(async () => {
        try {
          return (await alice.responses.retrieve(id)).status === 'completed';
        } catch {
          return false;
        }
      }, { timeout: 10000, what: `the turn of a client that left${flush ? ' (NOSCRIPT)' : ''}` });
      const items = await alice.responses.inputItems.list(id);
      assert.equal(items.data[0].content[0].text, input);
    }
    assert.equal((await fetch(`${slow.url}/healthz`)).status, 200);
  } finally {
    await slow.stop();
    relay.close();
  }
}, { timeout: 90000 });

test('traced: a kept turn\'s request span reads its held terminal event and ends after the write', async () => {
  const col = await startCollector();
  // on Redis over a link that holds every byte 150 ms each way: the write
  // takes 300 ms or more, which the client waits for, and so does the span
  const relay = LOCAL ? null : await slowRelay(redis.port, 150);
  const cf = LOCAL ? conf() : conf().replace(redis.url, `redis://127.0.0.1:${relay.port}/0`);
  const traced = await startProxai(`${cf}\n[trace]\nendpoint = ${col.url}\nsample = 1.0\n`);
  try {
    const c = client(traced);
    for (const stream of [true, false]) {
      const n0 = col.spans.length;
      const r = stream
        ? await c.responses.stream({ model: 'claude-sonnet', input: 'traced' }).finalResponse()
        : await c.responses.create({ model: 'claude-sonnet', input: 'traced' });
      await waitFor(() => col.spans.length >= n0 + 2, { timeout: 15000, what: 'two spans' });
      const spans = col.spans.slice(n0);
      const server = spans.find((s) => s.kind === 2), attempt = spans.find((s) => s.kind === 3);
      // what the client got, the terminal event held for the write included
      assert.equal(server.attrs['gen_ai.response.id'], r.id, `stream ${stream}`);
      assert.deepEqual(server.attrs['gen_ai.response.finish_reasons'], ['completed'], `stream ${stream}`);
      if (!LOCAL) {
        const dur = BigInt(server.endTimeUnixNano) - BigInt(server.startTimeUnixNano);
        assert.ok(dur >= 300000000n, `the request span lasts the write (${dur} ns, stream ${stream})`);
        assert.ok(BigInt(server.endTimeUnixNano) > BigInt(attempt.endTimeUnixNano));
      }
    }
  } finally {
    await traced.stop();
    relay?.close();
    await col.close();
  }
}, { timeout: 60000 });

test('bad input: malformed id, store:false history, unknown id; nothing sent upstream', async () => {
  const n = (await mock.requests()).length;
  await assert.rejects(alice.responses.create({ model: 'gpt-4o', input: 'x', previous_response_id: 'resp_"bad id' }),
    (e) => e.status === 400 && e.error?.param === 'previous_response_id');
  const r = await alice.responses.create({ model: 'gpt-4o', input: 'not kept', store: false });
  assert.match(r.id, /^resp_/);
  assert.notEqual(r.store, true);
  await assert.rejects(alice.responses.retrieve(r.id), (e) => e.status === 404);
  const m = (await mock.requests()).length;
  assert.equal(m, n + 1);
  await assert.rejects(alice.responses.create({ model: 'gpt-4o', input: 'x', previous_response_id: r.id }),
    (e) => e.status === 404 && e.message.includes(r.id));
  await assert.rejects(alice.responses.create({ model: 'gemini-2.5-pro', input: 'x', previous_response_id: 'resp_nosuchthing' }),
    (e) => e.status === 404 && e.message.includes('resp_nosuchthing'));
  assert.equal((await mock.requests()).length, m, 'nothing sent upstream');
});

test('Anthropic thinking signatures come back whole through the stored turn; another family declares the loss', async () => {
  await mock.script(up.anthropicThinking('sig-opaque-123'));
  const r1 = await alice.responses.create({ model: 'claude-sonnet', input: 'think' });
  const rs = r1.output.find((o) => o.type === 'reasoning');
  assert.ok(rs?.encrypted_content, JSON.stringify(r1.output));
  await alice.responses.create({ model: 'claude-sonnet', input: 'more', previous_response_id: r1.id });
  const body = (await lastUpstream()).body;
  const thinking = body.messages[1].content.find((b) => b.type === 'thinking');
  assert.deepEqual(thinking, { type: 'thinking', thinking: 'let me see', signature: 'sig-opaque-123' });
  // the same turn continued on Gemini: what it cannot carry is declared
  const { response } = await alice.responses
    .create({ model: 'gemini-2.5-pro', input: 'elsewhere', previous_response_id: r1.id }).withResponse();
  assert.match(response.headers.get('x-proxai-lossy') || '', /signature/);
  assert.equal(JSON.stringify((await lastUpstream()).body).includes('sig-opaque-123'), false);
});

test(`a second instance on the same ${LOCAL ? 'directory' : 'Redis'} finds the turn`, async () => {
  const px2 = await startProxai(conf());
  try {
    const r1 = await alice.responses.create({ model: 'gemini-2.5-pro', input: 'first here' });
    const other = client(px2);
    assert.equal((await other.responses.retrieve(r1.id)).id, r1.id);
    await other.responses.stream({ model: 'claude-sonnet', input: 'then there', previous_response_id: r1.id }).finalResponse();
    const sent = up.conversation(up.FAMILIES[0], (await lastUpstream()).body);
    assert.deepEqual(sent.turns.map((t) => t[1]), ['first here', 'Hello from mock', 'then there']);
  } finally {
    await px2.stop();
  }
});

// an instance with an openai_responses upstream too (oai-*)
const pxo = await startProxai(conf({ responses: true }));
const alo = client(pxo);

test('toward an OpenAI Responses upstream nothing changes', async () => {
  const alice = alo;
  const r = await alice.responses.create({ model: 'oai-model', input: 'hi', previous_response_id: 'resp_upstream_own' });
  assert.match(r.id, /^resp_mock/);
  const body = (await lastUpstream()).body;
  assert.equal(body.previous_response_id, 'resp_upstream_own');
  // a turn the gateway kept is expanded for it too
  const kept = await alice.responses.create({ model: 'claude-sonnet', input: 'kept turn' });
  await alice.responses.create({ model: 'oai-model', input: 'on', previous_response_id: kept.id });
  const b2 = (await lastUpstream()).body;
  assert.equal(b2.previous_response_id ?? null, null);
  assert.equal(b2.input.length, 3);
});

test('an id the gateway does not hold goes to the upstream that stores its own', async () => {
  const alice = alo;
  await mock.reset();
  await mock.script([
    { path: '/responses/resp_upown', body: { id: 'resp_upown', object: 'response', status: 'completed', output: [] } },
    { path: '/responses/resp_upown/input_items', body: { object: 'list', data: [], first_id: null, last_id: null, has_more: false } },
    { path: '/responses/resp_upown', body: { id: 'resp_upown', object: 'response', deleted: true } },
  ]);
  assert.equal((await alice.responses.retrieve('resp_upown')).id, 'resp_upown');
  assert.equal((await alice.responses.inputItems.list('resp_upown', { limit: 5 })).has_more, false);
  await alice.responses.delete('resp_upown');
  const reqs = await mock.requests();
  assert.deepEqual(reqs.map((r) => [r.method, r.path, r.query]), [
    ['GET', '/v1/responses/resp_upown', null],
    ['GET', '/v1/responses/resp_upown/input_items', 'limit=5'],
    ['DELETE', '/v1/responses/resp_upown', null],
  ]);
  assert.ok(reqs.every((r) => r.headers.authorization === 'Bearer up-key'), 'the upstream key, never the client key');
  // unknown there too: its 404 in its own shape
  await assert.rejects(alice.responses.retrieve('resp_neither'), (e) => e.status === 404);
});

test('a chain of 50 turns of 300 KB: each turn stored once, the 51st request carries all of them', async () => {
  // (a tenth of the size under the sanitizers: the same shape, less time)
  const size = process.env.PROXAI_SANITIZED ? 30000 : 300000;
  const bytes = async () => (LOCAL ? 0 : Number((await redis.command('GET', `${prefix}resp:bytes`)).split('\r\n')[1] || 0));
  const before = await bytes();
  let prev;
  for (let i = 0; i < 50; i++) {
    const input = `${String(i).padStart(2, '0')}:${'y'.repeat(size)}`;
    prev = (await alice.responses.create({ model: 'gpt-4o', input, previous_response_id: prev, store: true })).id;
    if (i % 10 === 9) await mock.reset(); // the mock keeps every body otherwise
  }
  const stored = (await bytes()) - before;
  if (!LOCAL) assert.ok(stored > 50 * size && stored < 50 * (size + 4096), `stored ${stored} bytes for 50 turns`);
  await alice.responses.create({ model: 'gpt-4o', input: 'the end', previous_response_id: prev });
  const sent = up.conversation(up.FAMILIES[1], (await lastUpstream()).body).turns;
  assert.equal(sent.length, 101);
  for (let i = 0; i < 50; i++) assert.equal(sent[2 * i][1].slice(0, 3), `${String(i).padStart(2, '0')}:`);
  assert.equal(sent[100][1], 'the end');
  await mock.reset();
}, { timeout: 240000 });

test('a chain over the size limit is refused before anything is sent', async () => {
  const small = await startProxai(conf({ maxBody: '64k' }));
  try {
    const c = client(small);
    const big = 'x'.repeat(25000);
    let prev;
    for (let i = 0; i < 2; i++) prev = (await c.responses.create({ model: 'gpt-4o', input: big, previous_response_id: prev })).id;
    const n = (await mock.requests()).length;
    await assert.rejects(c.responses.create({ model: 'gpt-4o', input: big, previous_response_id: prev }),
      (e) => e.status === 413 && e.message.includes(prev));
    assert.equal((await mock.requests()).length, n);
  } finally {
    await small.stop();
  }
});

test('expiry ([responses] ttl) and max_size (the oldest go first)', async () => {
  const short = await startProxai(conf({ ttl: '1s' }));
  try {
    const c = client(short);
    const r = await c.responses.create({ model: 'claude-sonnet', input: 'fleeting' });
    assert.equal((await c.responses.retrieve(r.id)).id, r.id);
    await sleep(2500);
    await assert.rejects(c.responses.retrieve(r.id), (e) => e.status === 404);
    await assert.rejects(c.responses.create({ model: 'claude-sonnet', input: 'x', previous_response_id: r.id }),
      (e) => e.status === 404 && e.message.includes(r.id));
  } finally {
    await short.stop();
  }
  const capped = await startProxai(conf({ maxSize: '12k', dir: path.join(tmp, 'capped') }));
  try {
    const c = client(capped);
    const ids = [];
    for (let i = 0; i < 6; i++) ids.push((await c.responses.create({ model: 'gpt-4o', input: `${i}`.repeat(3000) })).id);
    await assert.rejects(c.responses.retrieve(ids[0]), (e) => e.status === 404, 'the oldest went first');
    assert.equal((await c.responses.retrieve(ids[5])).id, ids[5]);
  } finally {
    await capped.stop();
  }
});

test('store = off: nothing kept; previous_response_id toward a non-Responses upstream is a 400', async () => {
  const off = await startProxai(conf({ store: 'off' }));
  try {
    const c = client(off);
    const r = await c.responses.create({ model: 'claude-sonnet', input: 'x' });
    await assert.rejects(c.responses.retrieve(r.id), (e) => e.status === 404);
    await assert.rejects(c.responses.create({ model: 'claude-sonnet', input: 'x', previous_response_id: r.id }),
      (e) => e.status === 400 && /store/.test(e.message));
  } finally {
    await off.stop();
  }
});

if (LOCAL) test('a restart keeps the turns ([state] dir)', async () => {
  const first = await startProxai(conf({ dir: path.join(tmp, 'restart') }));
  const r1 = await client(first).responses.create({ model: 'claude-sonnet', input: 'before the restart' });
  await first.stop();
  const again = await startProxai(conf({ dir: path.join(tmp, 'restart') }));
  try {
    const c = client(again);
    assert.equal((await c.responses.retrieve(r1.id)).id, r1.id);
    await c.responses.create({ model: 'gpt-4o', input: 'after', previous_response_id: r1.id });
    const sent = up.conversation(up.FAMILIES[1], (await lastUpstream()).body);
    assert.deepEqual(sent.turns.map((t) => t[1]), ['before the restart', 'Hello from mock', 'after']);
  } finally {
    await again.stop();
  }
});

if (LOCAL) test('the workers of a host share the turns', async () => {
  const multi = await startProxai(conf({ workers: 2, dir: path.join(tmp, 'workers') }));
  try {
    // a new connection each time: the kernel spreads them over the workers
    let prev;
    for (let i = 0; i < 12; i++) {
      const c = client(multi);
      const r = await c.responses.create({ model: 'gemini-2.5-pro', input: `w${i}`, previous_response_id: prev });
      prev = r.id;
    }
    const sent = up.conversation(up.FAMILIES[2], (await lastUpstream()).body);
    assert.equal(sent.turns.length, 23);
  } finally {
    await multi.stop();
  }
});

if (!LOCAL) test('Redis forgot the scripts (SCRIPT FLUSH): they are sent again in full', async () => {
  const r1 = await alice.responses.create({ model: 'claude-sonnet', input: 'before the flush' });
  assert.match(await redis.command('SCRIPT', 'FLUSH'), /OK/);
  const r2 = await alice.responses.create({ model: 'claude-sonnet', input: 'after', previous_response_id: r1.id });
  assert.match(await redis.command('SCRIPT', 'FLUSH'), /OK/);
  assert.equal((await alice.responses.retrieve(r2.id)).previous_response_id, r1.id);
  assert.match(await redis.command('SCRIPT', 'FLUSH'), /OK/);
  await alice.responses.delete(r2.id);
  await assert.rejects(alice.responses.retrieve(r2.id), (e) => e.status === 404);
});

if (!LOCAL) test('Redis unreachable: a follow-up gets 503, never a shortened chain', async () => {
  const r = await alice.responses.create({ model: 'claude-sonnet', input: 'before the outage' });
  await redis.stop();
  const n = (await mock.requests()).length;
  await assert.rejects(alice.responses.create({ model: 'claude-sonnet', input: 'x', previous_response_id: r.id }),
    (e) => e.status === 503);
  await assert.rejects(alice.responses.retrieve(r.id), (e) => e.status === 503);
  assert.equal((await mock.requests()).length, n, 'nothing sent upstream');
  // a new turn is still answered (not kept)
  const fresh = await alice.responses.create({ model: 'claude-sonnet', input: 'during' });
  assert.equal(fresh.output_text, 'Hello from mock');
}, { timeout: 60000 });

await run();
