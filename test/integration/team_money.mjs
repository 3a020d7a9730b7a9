// Money and keys on one host (SPEC sections 4, 12, 13): one instance with two
// workers and a persistent store ([state] dir, LMDB). The cost of each request
// from its usage and the upstream model's [price], to the nano-dollar, in the
// access log, /metrics and GET /v1/proxai/usage; budgets of keys and teams
// never overspent under 200 concurrent requests; the admin API (runtime keys
// and teams, hashed secrets, revocation and rotation seen at once by both
// workers), its bad inputs; spend and runtime keys surviving a restart.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startMock, startProxai, test, run, sleep, freePort, waitFor } from './lib/harness.mjs';
import { call as post } from './lib/client.mjs';
import * as C from './lib/config.mjs';
import { childrenOf } from './lib/team.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-money-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
const stateDir = path.join(tmp, 'state');
const accessLog = path.join(tmp, 'access.log');
const ADMIN = 'adm-Zq8s7d6f5g4h3j2k';
const mock = await startMock();
const adminPort = await freePort();
const conf = C.server({ admin_listen: `127.0.0.1:${adminPort}`, workers: 2, access_log: accessLog })
  + C.state({ dir: stateDir })
  + C.admin(ADMIN)
  + C.upstream('oc', 'chat', mock.url, { api_key: null })
  + C.upstream('an', 'anthropic', mock.url, { api_key: null })
  + C.route('claude-*', { upstream: 'an' })
  + C.route('free-*', { upstream: 'oc' })
  + C.route('*', { upstream: 'oc' })
  + C.price('gpt-4o*', { input: '2.50', output: 10, cache_read: 1.25 })
  + C.price('claude-*', { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 })
  + C.team('plat', { budget: 0.002, budget_window: 'day' })
  + C.keys({
    plain: { secret: 'sk-plain' },
    capped: { secret: 'sk-capped', budget: 0.0005 },
    t1: { secret: 'sk-t1', team: 'plat', budget: 0.0015 },
    slow: { secret: 'sk-slow', budget: 1, tpm: 100000 },
    t2: { secret: 'sk-t2', team: 'plat', budget: 0.0015 },
  });
let px = await startProxai(conf);
const admin = `http://127.0.0.1:${adminPort}`;

const adminCall = (method, pathname, body, token = ADMIN) =>
  post(admin, token, { method, pathname, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
const usage0 = async (key) => (await post(px.url, key, { method: 'GET', pathname: '/v1/proxai/usage' })).json();
// a settlement follows the response's last byte: read the usage once every
// reservation is settled
async function usage(key) {
  let u;
  await waitFor(async () => {
    u = await usage0(key);
    return u.key.reserved_usd === 0 && (!u.team || u.team.reserved_usd === 0);
  }, { what: 'settled usage', timeout: 10000 });
  return u;
}
const nano = (usd) => Math.round(usd * 1e9);
const logLines = () => fs.readFileSync(accessLog, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
// the mock's chat answer: 5 tokens in, 3 out
const CHAT_COST = 5 * 2500 + 3 * 10000; // nano-USD at 2.50 / 10 per million

test('every request costs its usage x the price of the model sent upstream, to the nano-dollar', async () => {
  for (let i = 0; i < 7; i++) assert.equal((await post(px.url, 'sk-plain', {
    body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], user: 'alice' }),
  })).status, 200);
  // cached reads and cache writes at their own prices (Anthropic usage)
  await mock.script([{ path: '/v1/messages', body: {
    id: 'msg_c1', type: 'message', role: 'assistant', model: 'claude-x', content: [{ type: 'text', text: 'ok' }],
    stop_reason: 'end_turn', stop_sequence: null,
    usage: { input_tokens: 100, cache_read_input_tokens: 2000, cache_creation_input_tokens: 300, output_tokens: 50 },
  } }]);
  const a = await post(px.url, 'sk-plain', {
    pathname: '/v1/messages', headers: { 'anthropic-version': '2023-06-01', 'x-proxai-user': 'bob' },
    body: JSON.stringify({ model: 'claude-x', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(a.status, 200, a.text);
  const claude = 100 * 3000 + 2000 * 300 + 300 * 3750 + 50 * 15000;
  // the same answer translated for a Chat client: the same cost
  await mock.script([{ path: '/v1/messages', body: {
    id: 'msg_c2', type: 'message', role: 'assistant', model: 'claude-x', content: [{ type: 'text', text: 'ok' }],
    stop_reason: 'end_turn', stop_sequence: null,
    usage: { input_tokens: 100, cache_read_input_tokens: 2000, cache_creation_input_tokens: 300, output_tokens: 50 },
  } }]);
  const tr = await post(px.url, 'sk-plain', { body: JSON.stringify({ model: 'claude-x', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }], user: 'carol' }) });
  assert.equal(tr.status, 200, tr.text);
  // a model without a price: no cost, no spend, the request is served
  assert.equal((await post(px.url, 'sk-plain', { body: JSON.stringify({ model: 'free-1', messages: [] }) })).status, 200);
  const u = await usage('sk-plain');
  assert.equal(nano(u.key.spend_usd), 7 * CHAT_COST + 2 * claude);
  assert.equal(u.key.reserved_usd, 0);
  assert.equal(u.key.budget_usd, null);
  assert.equal(u.team, null);
  assert.deepEqual(u.limits, { rpm: 0, tpm: 0 });
  await sleep(200); // the last access log lines are written after the bytes
  const mine = logLines().filter((l) => l.key === 'plain');
  assert.equal(mine.filter((l) => l.user === 'alice').length, 7);
  const ant = mine.find((l) => l.user === 'bob');
  assert.equal(nano(ant.cost_usd), claude);
  assert.equal(nano(mine.find((l) => l.user === 'carol').cost_usd), claude, 'translated: the same cost');
  assert.equal(mine.find((l) => l.model === 'free-1').cost_usd, null);
  assert.equal(mine.reduce((s, l) => s + nano(l.cost_usd ?? 0), 0), 7 * CHAT_COST + 2 * claude);
  const m = await (await fetch(`${admin}/metrics`)).text();
  assert.match(m, new RegExp(`proxai_spend_usd_total\\{key="plain",team="",upstream_model="gpt-4o"\\} ${(7 * CHAT_COST / 1e9).toString()}\\n`));
  assert.ok(m.includes(`proxai_spend_usd_total{key="plain",team="",upstream_model="claude-x"} ${2 * claude / 1e9}\n`), m);
  assert.doesNotMatch(m, /alice|bob/, 'the end user is never a metric label');
}, { timeout: 60000 });

test('a stream cut midway costs the last usage reported; a refused request costs 0', async () => {
  const ev = (event, data) => ({ event, data: { type: event, ...data } });
  await mock.script([{ path: '/v1/messages', sse: [
    ev('message_start', { message: { id: 'msg_cut', type: 'message', role: 'assistant', model: 'claude-x', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 1000, output_tokens: 1 } } }),
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'partial' } }),
    ev('content_block_stop', { index: 0 }),
  ], fault: 'close', fault_after: 3 }, { path: '/v1/messages', status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message: 'no' } } }]);
  const body = JSON.stringify({ model: 'claude-x', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'hi' }] });
  const h = { 'anthropic-version': '2023-06-01' };
  const cut = await post(px.url, 'sk-slow', { pathname: '/v1/messages', headers: { ...h, 'x-proxai-user': 'cut' }, body });
  assert.equal(cut.status, 200);
  assert.match(cut.text, /event: error/);
  const refused = await post(px.url, 'sk-slow', { pathname: '/v1/messages', headers: { ...h, 'x-proxai-user': 'refused' }, body });
  assert.equal(refused.status, 400);
  await sleep(200);
  const lines = logLines();
  assert.equal(nano(lines.find((l) => l.user === 'cut').cost_usd), 1000 * 3000 + 1 * 15000);
  assert.equal(lines.find((l) => l.user === 'refused').cost_usd, 0);
  const u = await usage('sk-slow');
  assert.equal(nano(u.key.spend_usd), 1000 * 3000 + 1 * 15000);
}, { timeout: 30000 });

test('200 concurrent requests against a key budget never overspend it; refusals name the budget', async () => {
  const res = await Promise.all(Array.from({ length: 200 }, () => post(px.url, 'sk-capped')));
  const ok = res.filter((r) => r.status === 200).length;
  assert.ok(ok >= 1, 'some were admitted');
  const refused = res.filter((r) => r.status === 429);
  assert.equal(ok + refused.length, 200);
  const e = refused[0].json().error;
  assert.equal(e.type, 'insufficient_quota');
  assert.equal(e.code, 'insufficient_quota');
  assert.match(e.message, /key capped: [0-9.]+ USD remaining of 0\.0005 USD per month, resets at \d{4}-\d\d-01T00:00:00Z/);
  assert.ok(Number(refused[0].headers['retry-after']) >= 1);
  const u = await usage('sk-capped');
  assert.equal(nano(u.key.spend_usd), ok * CHAT_COST);
  assert.ok(nano(u.key.spend_usd) <= nano(0.0005), JSON.stringify(u));
  assert.equal(u.key.reserved_usd, 0, 'every reservation settled');
  assert.equal(nano(u.key.remaining_usd), nano(0.0005) - ok * CHAT_COST);
  // Anthropic clients get their own shape (a body whose bound cannot fit
  // what the burst left)
  const a = await post(px.url, 'sk-capped', {
    pathname: '/v1/messages', headers: { 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'gpt-4o', max_tokens: 3, messages: [{ role: 'user', content: 'x'.repeat(300) }] }),
  });
  assert.equal(a.status, 429);
  assert.equal(a.json().error.type, 'rate_limit_error');
  assert.match(a.json().error.message, /budget exceeded for key capped/);
  // ... and Gemini clients theirs
  const gm = await post(px.url, null, {
    pathname: '/v1beta/models/gpt-4o:generateContent', headers: { 'x-goog-api-key': 'sk-capped' },
    body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'x'.repeat(300) }] }], generationConfig: { maxOutputTokens: 3 } }),
  });
  assert.equal(gm.status, 429, gm.text);
  assert.equal(gm.json().error.status, 'RESOURCE_EXHAUSTED');
  assert.match(gm.json().error.message, /budget exceeded for key capped/);
}, { timeout: 90000 });

test('key and team budgets together: neither the team nor a key is ever overspent', async () => {
  const res = await Promise.all(Array.from({ length: 200 }, (_, i) => post(px.url, i % 2 ? 'sk-t1' : 'sk-t2')));
  const ok = res.filter((r) => r.status === 200).length;
  assert.ok(ok >= 1 && ok < 200);
  const [u1, u2] = [await usage('sk-t1'), await usage('sk-t2')];
  assert.equal(u1.team.name, 'plat');
  assert.equal(nano(u1.team.spend_usd), ok * CHAT_COST, 'the team spent what its keys spent');
  assert.ok(nano(u1.team.spend_usd) <= nano(0.002));
  assert.ok(nano(u1.key.spend_usd) <= nano(0.0015) && nano(u2.key.spend_usd) <= nano(0.0015));
  assert.equal(nano(u1.key.spend_usd) + nano(u2.key.spend_usd), ok * CHAT_COST);
  assert.equal(u1.team.reserved_usd, 0);
  assert.match(u1.team.resets_at, /T00:00:00Z$/);
  assert.ok(res.some((r) => r.status === 429 && /team plat/.test(r.text)), 'the team budget refused some');
}, { timeout: 90000 });

test('a budgeted key asking for a model with no price: 403, never silently free', async () => {
  const r = await post(px.url, 'sk-capped', { body: JSON.stringify({ model: 'free-1', messages: [] }) });
  assert.equal(r.status, 403);
  assert.equal(r.json().error.type, 'permission_error');
  assert.match(r.json().error.message, /no price is configured for model 'free-1'/);
});

let rk; // a runtime key
test('admin API: a runtime key made, shown once, used by both workers; teams likewise', async () => {
  let r = await adminCall('POST', '/admin/teams', { name: 'rt-team', budget: 1, budget_window: 'total' });
  assert.equal(r.status, 201, r.text);
  r = await adminCall('POST', '/admin/keys', { name: 'rk', team: 'rt-team', models: ['gpt-*'], rpm: 1000, budget: 0.5, budget_window: 'day' });
  assert.equal(r.status, 201, r.text);
  rk = r.json();
  assert.match(rk.secret, /^sk-px-[A-Za-z0-9]{32}$/);
  assert.equal(rk.budget, 0.5);
  for (let i = 0; i < 6; i++) assert.equal((await post(px.url, rk.secret)).status, 200);
  assert.equal((await post(px.url, rk.secret, { body: JSON.stringify({ model: 'claude-x', max_tokens: 3, messages: [] }) })).status, 403, 'models enforced');
  const u = await usage(rk.secret);
  assert.equal(nano(u.key.spend_usd), 6 * CHAT_COST);
  assert.equal(u.team.name, 'rt-team');
  assert.equal(u.team.resets_at, null);
  r = await adminCall('GET', '/admin/keys/rk');
  assert.equal(r.status, 200);
  assert.equal(r.json().secret, undefined, 'never shown again');
  assert.equal(nano(r.json().spend_usd), 6 * CHAT_COST);
  assert.ok(r.json().last_used_at);
  const list = (await adminCall('GET', '/admin/keys')).json().data;
  assert.ok(list.some((k) => k.name === 'rk') && list.some((k) => k.name === 'plain' && k.static));
  assert.ok(!JSON.stringify(list).includes('sk-'), 'no secret in the list');
  const teams = (await adminCall('GET', '/admin/teams')).json().data;
  assert.ok(teams.some((t) => t.name === 'rt-team') && teams.some((t) => t.name === 'plat' && t.static));
  // a change holds from the next request
  r = await adminCall('PATCH', '/admin/keys/rk', { models: ['claude-*'] });
  assert.equal(r.status, 200, r.text);
  assert.equal((await post(px.url, rk.secret)).status, 403);
  assert.equal((await adminCall('PATCH', '/admin/keys/rk', { models: [] })).status, 200);
}, { timeout: 60000 });

test('rotation with a grace period, and revocation, hold at once on every worker', async () => {
  let r = await adminCall('POST', '/admin/keys/rk/rotate', { grace: '3s' });
  assert.equal(r.status, 200, r.text);
  const next = r.json().secret;
  assert.notEqual(next, rk.secret);
  for (let i = 0; i < 6; i++) {
    assert.equal((await post(px.url, rk.secret)).status, 200, 'the old secret within its grace');
    assert.equal((await post(px.url, next)).status, 200);
  }
  await sleep(3500);
  for (let i = 0; i < 6; i++) assert.equal((await post(px.url, rk.secret)).status, 401, 'grace over');
  // rotation without grace: the old one ends at once
  r = await adminCall('POST', '/admin/keys/rk/rotate', {});
  const third = r.json().secret;
  for (let i = 0; i < 6; i++) assert.equal((await post(px.url, next)).status, 401);
  assert.equal((await post(px.url, third)).status, 200);
  assert.equal((await adminCall('DELETE', '/admin/keys/rk')).status, 204);
  for (let i = 0; i < 8; i++) assert.equal((await post(px.url, third)).status, 401, 'revoked: refused on every worker at once');
  assert.equal((await adminCall('GET', '/admin/keys/rk')).status, 404);
  rk = null;
}, { timeout: 60000 });

test('a runtime key with expires_at stops at that time', async () => {
  const at = new Date(Date.now() + 2500).toISOString().replace(/\.\d+Z$/, 'Z');
  const r = await adminCall('POST', '/admin/keys', { name: 'brief', expires_at: at });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.json().expires_at, at);
  assert.equal((await post(px.url, r.json().secret)).status, 200);
  await sleep(3500);
  assert.equal((await post(px.url, r.json().secret)).status, 401);
  assert.equal((await adminCall('DELETE', '/admin/keys/brief')).status, 204);
}, { timeout: 30000 });

test('admin API bad input: a clear 4xx and nothing changed', async () => {
  const before = JSON.stringify((await adminCall('GET', '/admin/keys')).json().data.map((k) => k.name).sort());
  const cases = [
    ['POST', '/admin/keys', '{"name": "x",', 400, /not valid JSON/],
    ['POST', '/admin/keys', '[1]', 400, /must be a JSON object/],
    ['POST', '/admin/keys', { name: 'x', colour: 'red' }, 400, /unknown field 'colour'/],
    ['POST', '/admin/keys', { name: 'x', secret: 'sk-mine' }, 400, /unknown field 'secret'/],
    ['POST', '/admin/keys', { name: 'x', budget: -1 }, 400, /'budget' must be/],
    ['POST', '/admin/keys', { name: 'x', budget: 1e12 }, 400, /'budget' must be/],
    ['POST', '/admin/keys', { name: 'x', budget: '5' }, 400, /'budget' must be/],
    ['POST', '/admin/keys', { name: 'x', rpm: -3 }, 400, /'rpm'/],
    ['POST', '/admin/keys', { name: 'x', budget_window: 'week' }, 400, /budget_window/],
    ['POST', '/admin/keys', { name: 'x', team: 'nope' }, 400, /'team' must name an existing team/],
    ['POST', '/admin/keys', { name: 'x', expires_at: 'tomorrow' }, 400, /expires_at/],
    ['POST', '/admin/keys', { name: 'bad name!' }, 400, /'name' is required/],
    ['POST', '/admin/keys', {}, 400, /'name' is required/],
    ['POST', '/admin/keys', { name: 'plain' }, 409, /taken by a static key/],
    ['POST', '/admin/teams', { name: 'plat' }, 409, /taken by a static team/],
    ['PATCH', '/admin/keys/plain', { rpm: 1 }, 409, /static key/],
    ['DELETE', '/admin/keys/capped', undefined, 409, /static key/],
    ['PATCH', '/admin/keys/none', { rpm: 1 }, 404, /no key named 'none'/],
    ['POST', '/admin/keys/none/rotate', {}, 404, /no key named/],
    ['PUT', '/admin/keys', {}, 405, /method not allowed/],
    ['GET', '/admin/other', undefined, 404, /unknown admin path/],
  ];
  for (const [method, p, body, status, re] of cases) {
    const r = await adminCall(method, p, body);
    assert.equal(r.status, status, `${method} ${p} ${JSON.stringify(body)}: ${r.text}`);
    assert.match(r.json().error.message, re, `${method} ${p}`);
    assert.equal(r.json().error.type === undefined, false);
  }
  // duplicate runtime names
  assert.equal((await adminCall('POST', '/admin/keys', { name: 'dup' })).status, 201);
  const d = await adminCall('POST', '/admin/keys', { name: 'dup' });
  assert.equal(d.status, 409);
  assert.equal((await adminCall('POST', '/admin/teams', { name: 'rt-team' })).status, 409);
  assert.equal((await adminCall('DELETE', '/admin/keys/dup')).status, 204);
  // a missing or wrong token: 401; the client listener has no admin API
  assert.equal((await adminCall('GET', '/admin/keys', undefined, null)).status, 401);
  assert.equal((await adminCall('GET', '/admin/keys', undefined, 'adm-wrong')).status, 401);
  assert.equal((await adminCall('POST', '/admin/keys', { name: 'sneaky' }, 'sk-plain')).status, 401);
  assert.equal((await post(px.url, ADMIN, { method: 'GET', pathname: '/admin/keys' })).status, 404);
  assert.equal((await post(px.url, ADMIN, { pathname: '/admin/keys', body: JSON.stringify({ name: 'sneaky' }) })).status, 404);
  const after = JSON.stringify((await adminCall('GET', '/admin/keys')).json().data.map((k) => k.name).sort());
  assert.equal(after, before, 'nothing changed');
}, { timeout: 60000 });

test('a dead worker\'s reservations are released when the master reaps it', async () => {
  await mock.script([{ path: '/v1/chat/completions', default: true, headers_delay_ms: 30000 }]);
  const pending = post(px.url, 'sk-slow').catch((e) => e);
  let u;
  await waitFor(async () => (u = await usage0('sk-slow')).key.reserved_usd > 0, { what: 'a reservation', timeout: 10000 });
  const workers = childrenOf(px.pid);
  assert.equal(workers.length, 2);
  for (const w of workers) process.kill(w, 'SIGKILL');
  await pending;
  await waitFor(async () => {
    try {
      u = await usage0('sk-slow');
      return u.key.reserved_usd === 0;
    } catch {
      return false;
    }
  }, { what: 'the reservation released', timeout: 15000 });
  assert.equal(nano(u.key.spend_usd), 1000 * 3000 + 1 * 15000, 'nothing charged for its unknown output');
  await mock.reset();
}, { timeout: 60000 });

test('spend and runtime keys survive a restart; no token or secret in a log line or metric', async () => {
  const r = await adminCall('POST', '/admin/keys', { name: 'keeper', budget: 0.01 });
  const secret = r.json().secret;
  assert.equal((await post(px.url, secret)).status, 200);
  const before = [await usage('sk-plain'), await usage('sk-t1'), await usage(secret)];
  const metrics = await (await fetch(`${admin}/metrics`)).text();
  assert.equal((await px.stop()).code, 0);
  const logs = px.logs().stderr + fs.readFileSync(accessLog, 'utf8') + metrics;
  for (const s of [ADMIN, secret, 'sk-plain', 'sk-capped', 'sk-px-']) assert.ok(!logs.includes(s), `${s} leaked`);
  assert.ok(!/Sanitizer|runtime error:/.test(px.logs().stderr), px.logs().stderr);
  px = await startProxai(conf);
  const after = [await usage('sk-plain'), await usage('sk-t1'), await usage(secret)];
  assert.deepEqual(after, before);
  assert.equal((await post(px.url, secret)).status, 200, 'the runtime key still opens');
  assert.equal(nano((await usage(secret)).key.spend_usd), 2 * CHAT_COST);
  assert.equal((await px.stop()).code, 0);
}, { timeout: 60000 });

await run();
