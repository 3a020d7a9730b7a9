// Team scale across instances: two proxai instances (workers = 2 each) behind
// a real nginx share one key's rpm and tpm through a real redis-server
// ([state] backend = redis); Redis killed mid-run gives on_error (allow /
// deny), and limits resume by themselves when it returns (SPEC sections 3, 7).
//
// redis-server and nginx are Debian packages (scripts/setup.sh installs
// them); both are started here on random loopback ports and stopped by PID.
import assert from 'node:assert/strict';
import path from 'node:path';
import { startMock, startProxai, test, run, waitFor, freePort } from './lib/harness.mjs';
import { call } from './lib/client.mjs';
import * as C from './lib/config.mjs';
import { tmp, startChild, startRedis as startRedisOn, startNginx } from './lib/team.mjs';

const REDIS = process.env.REDIS_SERVER || '/usr/bin/redis-server';
const redisPort = await freePort();
const startRedis = () => startRedisOn(redisPort);
let redis = await startRedis();

const mock = await startMock();
const prefix = `t${process.pid}:`;
const conf = (onError) => C.server({ workers: 2 })
  + C.redisState(redisPort, prefix, { on_error: onError })
  + C.upstream('oc', 'chat', mock.url, { api_key: 'up-key' })
  + C.route('*', { upstream: 'oc' })
  + C.keys({
    rpm10: { secret: 'sk-rpm10', rpm: 10 },
    tpm40: { secret: 'sk-tpm40', tpm: 40 },
    rpm3: { secret: 'sk-rpm3', rpm: 3 },
  });
const pxA = await startProxai(conf('allow'));
const pxB = await startProxai(conf('deny'));

const nginx = await startNginx([pxA.port, pxB.port]);
const front = nginx.url;

// a small Chat request (max_tokens 8) on its own connection
const CHAT = JSON.stringify({ model: 'gpt-4o', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
const post = (url, key, opts = {}) => call(url, key, { body: CHAT, ...opts });

const metrics = async (px) => (await fetch(`${px.url}/metrics`, { headers: { authorization: 'Bearer sk-rpm10' } })).text();
const metric = (text, re) => Number((re.exec(text) || [0, 0])[1]);

test('two instances x two workers behind nginx share one key\'s rpm exactly', async () => {
  const res = await Promise.all(Array.from({ length: 24 }, () => post(front, 'sk-rpm10')));
  const codes = res.map((r) => r.status);
  assert.equal(codes.filter((c) => c === 200).length, 10, codes.join(','));
  assert.equal(codes.filter((c) => c === 429).length, 14, codes.join(','));
  // both instances took part
  const served = [pxA, pxB].map(async (px) => metric(await metrics(px), /proxai_requests_total\{inbound="openai_chat_completions",upstream="[^"]+",status="\d+"\} (\d+)/));
  for (const n of await Promise.all(served)) assert.ok(n > 0, 'each instance answered some requests');
}, { timeout: 60000 });

test('... and one key\'s tpm, reserved at admission from max_tokens (within one request)', async () => {
  // the mock's answer uses 8 tokens (5 in, 3 out) and max_tokens is 8: 40 tpm
  // admits 40/8 = 5 requests and one more while the bucket is not in debt
  const res = await Promise.all(Array.from({ length: 12 }, () => post(front, 'sk-tpm40')));
  const codes = res.map((r) => r.status);
  assert.equal(codes.filter((c) => c === 200).length, 6, codes.join(','));
  // usage settled: the bucket is in debt, later requests are refused too
  const later = await post(front, 'sk-tpm40');
  assert.equal(later.status, 429);
  assert.ok(Number(later.headers['retry-after']) >= 1);
}, { timeout: 60000 });

test('Redis killed: on_error = allow serves (logged once per worker, counted), deny answers 503 in the client shape; limits resume when it returns', async () => {
  // the key's whole minute is used up while Redis is there (a fourth request
  // would be refused; not sent, so that no worker remembers the key as over
  // its limit)
  for (let i = 0; i < 3; i++) assert.equal((await post(pxA.url, 'sk-rpm3')).status, 200);

  await redis.stop('SIGKILL');
  // allow: served, past the limit
  await waitFor(async () => (await post(pxA.url, 'sk-rpm3')).status === 200, { what: 'allow after Redis died', timeout: 10000 });
  for (let i = 0; i < 5; i++) assert.equal((await post(pxA.url, 'sk-rpm3')).status, 200);
  // deny: 503 in the client's own error shape
  const d = await waitFor(async () => {
    const r = await post(pxB.url, 'sk-rpm3');
    return r.status === 503 && r;
  }, { what: 'deny after Redis died', timeout: 10000 });
  assert.equal(JSON.parse(d.text).error.type, 'api_error');
  const a = await post(pxB.url, 'sk-rpm3', {
    pathname: '/v1/messages',
    headers: { 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'gpt-4o', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(a.status, 503);
  assert.equal(JSON.parse(a.text).type, 'error');
  // keys without limits never ask Redis
  const m = await metrics(pxA);
  assert.ok(metric(m, /proxai_state_events_total\{backend="redis",event="allowed"\} (\d+)/) >= 5, m);
  assert.ok(metric(m, /proxai_state_events_total\{backend="redis",event="error"\} (\d+)/) >= 1, m);
  assert.ok(metric(await metrics(pxB), /proxai_state_events_total\{backend="redis",event="denied"\} (\d+)/) >= 2);
  const logged = pxA.logs().stderr.split('\n').filter((l) => l.includes('redis state backend unreachable'));
  assert.ok(logged.length >= 1 && logged.length <= 2, `one line per worker and incident:\n${logged.join('\n')}`);

  // Redis returns (empty): limits apply again by themselves
  redis = await startRedis();
  await waitFor(async () => (await post(pxB.url, 'sk-rpm3')).status === 200, { what: 'deny instance serving again', timeout: 15000, interval: 200 });
  let seen429 = false;
  for (let i = 0; i < 12 && !seen429; i++) seen429 = (await post(pxA.url, 'sk-rpm3')).status === 429;
  assert.ok(seen429, 'rpm = 3 enforced again after Redis came back');
  await waitFor(() => pxA.logs().stderr.includes('redis state backend is back'), { what: 'recovery logged' });
}, { timeout: 90000 });

test('password (from ${VAR}) and db in the redis address; unix:/path; a refused AUTH follows on_error', async () => {
  const port2 = await freePort();
  const sock = path.join(tmp, 'redis.sock');
  const redis2 = await startChild(REDIS, ['--port', String(port2), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--dir', tmp, '--requirepass', 'pw-test-1', '--unixsocket', sock, '--unixsocketperm', '700'],
  (o) => /Ready to accept connections/.test(o), 'redis-server with a password');
  const keyed = (addr, onError) => C.server()
    + C.state({ backend: 'redis', redis: addr, prefix: `${prefix}pw:`, on_error: onError })
    + C.upstream('oc', 'chat', mock.url, { api_key: null })
    + C.route('*', { upstream: 'oc' })
    + C.key('rpm2', { secret: 'sk-rpm2', rpm: 2 });
  const pxC = await startProxai(keyed(`redis://:\${PROXAI_TEST_REDIS_PW}@127.0.0.1:${port2}/3`, 'deny'), { env: { PROXAI_TEST_REDIS_PW: 'pw-test-1' } });
  const pxD = await startProxai(keyed(`unix:${sock}`, 'deny'));
  try {
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await post(pxC.url, 'sk-rpm2')).status);
    assert.deepEqual(codes, [200, 200, 429]);
    // no password on the unix socket: Redis refuses every script (NOAUTH): deny
    assert.equal((await post(pxD.url, 'sk-rpm2')).status, 503);
    await waitFor(() => /redis state backend unreachable \(.*NOAUTH/.test(pxD.logs().stderr), { what: 'NOAUTH logged' });
    assert.ok(!pxC.logs().stderr.includes('pw-test-1') && !pxD.logs().stderr.includes('pw-test-1'));
    for (const px of [pxC, pxD]) assert.equal((await px.stop()).code, 0);
  } finally {
    await pxC.stop();
    await pxD.stop();
    await redis2.stop();
  }
}, { timeout: 60000 });

test('instances and nginx stop cleanly', async () => {
  for (const px of [pxA, pxB]) {
    const st = await px.stop();
    assert.ok(!/Sanitizer|runtime error:/.test(px.logs().stderr), px.logs().stderr);
    assert.equal(st.code, 0, px.logs().stderr);
  }
  await nginx.stop();
  await redis.stop();
});

await run();
