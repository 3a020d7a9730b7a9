// Money and keys across instances (SPEC sections 7, 12, 13): two proxai
// instances with two workers each behind a real nginx, sharing one real
// redis-server ([state] backend = redis). Spend to the nano-dollar whichever
// instance served; 200 concurrent requests never overspend a key's or a
// team's budget (one atomic script admits rpm, tpm and both budgets);
// runtime keys made on one instance, rotated and revoked, seen at once on
// the other; spend and runtime keys surviving a restart of everything.
import assert from 'node:assert/strict';
import { startMock, startProxai, test, run, sleep, freePort, waitFor } from './lib/harness.mjs';
import { call as post } from './lib/client.mjs';
import * as C from './lib/config.mjs';
import { startRedis, startNginx, childrenOf } from './lib/team.mjs';

// an append-only file: a restarted Redis finds what was written
const redisPort = await freePort();
const PERSIST = ['--appendonly', 'yes', '--appendfsync', 'always'];
let redis = await startRedis(redisPort, PERSIST);
const mock = await startMock();
const ADMIN = 'adm-redis-Yx7c6v5b4n3m';
const prefix = `m${process.pid}:`;
const conf = (adminPort) => C.server({ admin_listen: `127.0.0.1:${adminPort}`, workers: 2 })
  + C.redisState(redisPort, prefix, { on_error: 'allow' })
  + C.admin(ADMIN)
  + C.upstream('oc', 'chat', mock.url, { api_key: null })
  + C.route('*', { upstream: 'oc' })
  + C.price('gpt-4o*', { input: '2.50', output: 10 })
  + C.team('plat', { budget: 0.002, budget_window: 'month' })
  + C.keys({
    plain: { secret: 'sk-plain' },
    capped: { secret: 'sk-capped', budget: 0.0005, budget_window: 'day', rpm: 100000, tpm: 10000000 },
    t1: { secret: 'sk-t1', team: 'plat', budget: 0.0015 },
    t2: { secret: 'sk-t2', team: 'plat', budget: 0.0015 },
  });
let admins = [await freePort(), await freePort()];
let pxA = await startProxai(conf(admins[0]));
let pxB = await startProxai(conf(admins[1]));
let nginx = await startNginx([pxA.port, pxB.port]);
const CHAT_COST = 5 * 2500 + 3 * 10000; // the mock's 5 in, 3 out at 2.50 / 10 per million

const adminOf = (i) => `http://127.0.0.1:${admins[i]}`;
const adminCall = (i, method, pathname, body) =>
  post(adminOf(i), ADMIN, { method, pathname, body: body === undefined ? undefined : JSON.stringify(body) });
const usage = async (px, key) => (await post(px.url, key, { method: 'GET', pathname: '/v1/proxai/usage' })).json();
const nano = (usd) => Math.round(usd * 1e9);
// a settlement is sent when the response has gone: read the usage once every
// reservation is settled and the spend has stopped moving
async function settled(px, key) {
  let last = null;
  let u;
  await waitFor(async () => {
    u = await usage(px, key);
    const seen = JSON.stringify(u);
    const done = u.key.reserved_usd === 0 && (!u.team || u.team.reserved_usd === 0) && seen === last;
    last = seen;
    return done;
  }, { what: 'settled usage', timeout: 10000, interval: 150 });
  return u;
}

test('spend to the nano-dollar, whichever instance served', async () => {
  const res = await Promise.all(Array.from({ length: 40 }, () => post(nginx.url, 'sk-plain')));
  assert.ok(res.every((r) => r.status === 200));
  const [a, b] = [await settled(pxA, 'sk-plain'), await usage(pxB, 'sk-plain')];
  assert.deepEqual(a, b, 'both instances read the one spend');
  assert.equal(nano(a.key.spend_usd), 40 * CHAT_COST);
  // /metrics per instance: their sum is the spend
  let total = 0;
  for (const i of [0, 1]) {
    const m = await (await fetch(`${adminOf(i)}/metrics`)).text();
    const v = /proxai_spend_usd_total\{key="plain",team="",upstream_model="gpt-4o"\} ([0-9.]+)/.exec(m);
    assert.ok(v, 'each instance served some');
    total += nano(Number(v[1]));
  }
  assert.equal(total, 40 * CHAT_COST);
}, { timeout: 60000 });

test('200 concurrent requests through both instances never overspend a key budget', async () => {
  const res = await Promise.all(Array.from({ length: 200 }, () => post(nginx.url, 'sk-capped')));
  const ok = res.filter((r) => r.status === 200).length;
  const refused = res.filter((r) => r.status === 429);
  assert.ok(ok >= 1 && ok + refused.length === 200, res.map((r) => r.status).join(','));
  assert.equal(refused[0].json().error.type, 'insufficient_quota');
  assert.match(refused[0].json().error.message, /budget exceeded for key capped: .* per day, resets at \d{4}-\d\d-\d\dT00:00:00Z/);
  const u = await settled(pxA, 'sk-capped');
  assert.equal(nano(u.key.spend_usd), ok * CHAT_COST);
  assert.ok(nano(u.key.spend_usd) <= nano(0.0005));
  assert.equal(u.key.reserved_usd, 0, 'every reservation settled');
}, { timeout: 90000 });

test('key and team budgets together, across instances', async () => {
  const res = await Promise.all(Array.from({ length: 200 }, (_, i) => post(nginx.url, i % 2 ? 'sk-t1' : 'sk-t2')));
  const ok = res.filter((r) => r.status === 200).length;
  const [u1, u2] = [await settled(pxA, 'sk-t1'), await settled(pxB, 'sk-t2')];
  assert.equal(nano(u1.team.spend_usd), ok * CHAT_COST);
  assert.ok(nano(u1.team.spend_usd) <= nano(0.002));
  assert.ok(nano(u1.key.spend_usd) <= nano(0.0015) && nano(u2.key.spend_usd) <= nano(0.0015));
  assert.equal(nano(u1.key.spend_usd) + nano(u2.key.spend_usd), ok * CHAT_COST);
  assert.equal(u1.team.reserved_usd, 0);
  assert.ok(res.some((r) => r.status === 429 && /team plat/.test(r.text)));
}, { timeout: 90000 });

let secret;
test('a runtime key made on one instance works on the other; rotation and revocation hold at once', async () => {
  let r = await adminCall(0, 'POST', '/admin/teams', { name: 'rt', budget: 0.01 });
  assert.equal(r.status, 201, r.text);
  r = await adminCall(0, 'POST', '/admin/keys', { name: 'rk', team: 'rt', budget: 0.005 });
  assert.equal(r.status, 201, r.text);
  secret = r.json().secret;
  assert.equal((await post(pxB.url, secret)).status, 200, 'seen by the other instance at once');
  assert.equal((await post(pxA.url, secret)).status, 200);
  const u = await settled(pxB, secret);
  assert.equal(nano(u.key.spend_usd), 2 * CHAT_COST);
  assert.equal(nano(u.team.spend_usd), 2 * CHAT_COST);
  assert.equal((await adminCall(1, 'POST', '/admin/keys', { name: 'rk' })).status, 409, 'one namespace');
  const shown = (await adminCall(1, 'GET', '/admin/keys/rk')).json();
  assert.equal(nano(shown.spend_usd), 2 * CHAT_COST, 'the admin API reads the spend in Redis');
  assert.equal(nano(shown.remaining_usd), nano(0.005) - 2 * CHAT_COST);
  // rotate on B with a grace: A takes both, then only the new one
  r = await adminCall(1, 'POST', '/admin/keys/rk/rotate', { grace: '2s' });
  assert.equal(r.status, 200, r.text);
  const next = r.json().secret;
  assert.equal((await post(pxA.url, next)).status, 200);
  assert.equal((await post(pxA.url, secret)).status, 200);
  await sleep(2500);
  assert.equal((await post(pxA.url, secret)).status, 401);
  // revoke on A: B refuses the next request
  assert.equal((await adminCall(0, 'DELETE', '/admin/keys/rk')).status, 204);
  for (let i = 0; i < 6; i++) assert.equal((await post(nginx.url, next)).status, 401);
  r = await adminCall(1, 'POST', '/admin/keys', { name: 'keeper', budget: 0.01 });
  secret = r.json().secret;
  assert.equal((await post(nginx.url, secret)).status, 200);
}, { timeout: 60000 });

test('a dead worker\'s budget reservations in Redis are dropped by its master at once (no 60 s wait)', async () => {
  await mock.script([{ path: '/v1/chat/completions', default: true, headers_delay_ms: 30000 }]);
  const pending = post(pxA.url, 'sk-t1').catch((e) => e);
  let u;
  await waitFor(async () => (u = await usage(pxB, 'sk-t1')).team.reserved_usd > 0, { what: 'a reservation', timeout: 10000 });
  assert.ok(u.key.reserved_usd > 0);
  for (const w of childrenOf(pxA.pid)) process.kill(w, 'SIGKILL');
  await pending;
  await waitFor(async () => {
    u = await usage(pxB, 'sk-t1');
    return u.key.reserved_usd === 0 && u.team.reserved_usd === 0;
  }, { what: 'the reservations dropped', timeout: 15000 });
  await mock.reset();
  await waitFor(async () => (await post(pxA.url, 'sk-plain')).status === 200, { what: 'workers replaced', timeout: 10000 });
}, { timeout: 60000 });

test('a dead instance\'s budget reservations lapse within 60 s', async () => {
  const pxC = await startProxai(conf(await freePort()));
  await mock.script([{ path: '/v1/chat/completions', default: true, headers_delay_ms: 120000 }]);
  const pending = post(pxC.url, 'sk-t2').catch((e) => e);
  let u;
  await waitFor(async () => (u = await usage(pxA, 'sk-t2')).team.reserved_usd > 0, { what: 'a reservation', timeout: 10000 });
  const t0 = Date.now();
  // the whole instance at once, master first: nobody left to release anything
  const workers = childrenOf(pxC.pid);
  process.kill(pxC.pid, 'SIGKILL');
  for (const w of workers) process.kill(w, 'SIGKILL');
  await pending;
  await waitFor(async () => {
    u = await usage(pxA, 'sk-t2');
    return u.key.reserved_usd === 0 && u.team.reserved_usd === 0;
  }, { what: 'the reservations lapsed', timeout: 80000, interval: 1000 });
  const took = Date.now() - t0;
  assert.ok(took <= 75000, `lapsed after ${took} ms`);
  await mock.reset();
}, { timeout: 120000 });

test('Redis unreachable: budgets and runtime keys never fail open (503), a key without either follows on_error', async () => {
  await redis.stop();
  const budgeted = await waitFor(async () => {
    const r = await post(pxA.url, 'sk-capped');
    return r.status === 503 && r;
  }, { what: 'a budgeted request refused', timeout: 10000 });
  assert.equal(budgeted.json().error.type, 'api_error');
  assert.match(budgeted.json().error.message, /budget cannot be checked/);
  const an = await post(pxA.url, 'sk-t1', {
    pathname: '/v1/messages', headers: { 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'gpt-4o', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(an.status, 503);
  assert.equal(an.json().error.type, 'overloaded_error');
  assert.equal((await post(pxA.url, secret)).status, 503, 'a runtime key cannot be checked');
  assert.equal((await post(pxA.url, 'sk-plain')).status, 200, 'on_error = allow');
  redis = await startRedis(redisPort, PERSIST);
  await waitFor(async () => (await post(pxA.url, secret)).status === 200, { what: 'back on Redis', timeout: 15000 });
}, { timeout: 60000 });

test('a request admitted before Redis went away and ended during the outage is charged, its reservation released, once Redis is back', async () => {
  const before = await settled(pxB, 'sk-t1');
  await mock.script([{ path: '/v1/chat/completions', default: true, headers_delay_ms: 3000 }]);
  const pending = post(pxA.url, 'sk-t1');
  let u;
  await waitFor(async () => (u = await usage(pxB, 'sk-t1')).key.reserved_usd > 0, { what: 'a reservation', timeout: 10000 });
  await redis.stop(); // written to its append-only file: the reservation is there when it is back
  const r = await pending;
  assert.equal(r.status, 200, 'admitted before the outage: served');
  await mock.reset();
  redis = await startRedis(redisPort, PERSIST);
  u = await settled(pxB, 'sk-t1');
  assert.equal(nano(u.key.spend_usd), nano(before.key.spend_usd) + CHAT_COST, 'the spend made during the outage');
  assert.equal(nano(u.team.spend_usd), nano(before.team.spend_usd) + CHAT_COST);
  assert.equal(u.key.reserved_usd, 0, 'the reservation released, not left to lapse');
}, { timeout: 60000 });

test('spend and runtime keys survive a restart of everything', async () => {
  const before = [await settled(pxA, 'sk-plain'), await settled(pxA, 'sk-t1'), await settled(pxA, secret)];
  for (const px of [pxA, pxB]) {
    assert.equal((await px.stop()).code, 0);
    assert.ok(!/Sanitizer|runtime error:/.test(px.logs().stderr), px.logs().stderr);
    assert.ok(!px.logs().stderr.includes(ADMIN) && !px.logs().stderr.includes(secret));
  }
  await nginx.stop();
  await redis.stop();
  redis = await startRedis(redisPort, PERSIST);
  admins = [await freePort(), await freePort()];
  pxA = await startProxai(conf(admins[0]));
  pxB = await startProxai(conf(admins[1]));
  nginx = await startNginx([pxA.port, pxB.port]);
  const after = [await usage(pxB, 'sk-plain'), await usage(pxB, 'sk-t1'), await usage(pxB, secret)];
  assert.deepEqual(after, before);
  assert.equal((await post(nginx.url, secret)).status, 200);
  for (const px of [pxA, pxB]) assert.equal((await px.stop()).code, 0);
  await nginx.stop();
  await redis.stop();
}, { timeout: 90000 });

await run();
