// Team resilience (SPEC sections 3 [state], 7 Redis outages and processes,
// 8): two instances of two workers each on a real redis-server that is
// killed, restarted and frozen (SIGSTOP); every worker back on Redis within
// a second of Redis answering; [state] timeout honoured; on_error = local
// holding the instance's share; a worker killed with streams in flight
// counted as lost, its reservations released, its gauges corrected; SIGHUP
// on two workers without a cut stream.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { startMock, startProxai, test, run, waitFor, sleep, freePort } from './lib/harness.mjs';
import * as C from './lib/config.mjs';
import { startRedis, redisCommand, startNginx, childrenOf } from './lib/team.mjs';

const slow = process.env.PROXAI_SANITIZED ? 3 : 1; // time bounds that are not the SPEC's own
const redisPort = await freePort();
let redis = await startRedis(redisPort);
const mock = await startMock();
const prefix = `r${process.pid}:`;

const conf = (onError, stateKeys = {}, pfx = prefix) => C.server({ workers: 2 })
  + C.redisState(redisPort, pfx, { on_error: onError, ...stateKeys })
  + C.upstream('oc', 'chat', mock.url, { api_key: 'up-key' })
  + C.route('*', { upstream: 'oc' })
  + C.keys({
    rpm10: { secret: 'sk-rpm10', rpm: 10 },
    tpm80: { secret: 'sk-tpm80', tpm: 80 },
    front: { secret: 'sk-front', rpm: 10 },
    tpm1k: { secret: 'sk-tpm1k', tpm: 1000 },
    big: { secret: 'sk-big', rpm: 1000000, tpm: 1000000 },
  });
// A first: B's workers find both instances in the registry when they start
const pxA = await startProxai(conf('deny'));
const pxB = await startProxai(conf('local', { timeout: '600ms' }));

/** One request on its own connection (SO_REUSEPORT spreads them over the
 *  workers); resolves to {status, headers, text, ms}. */
function request(px, key, pathname, body) {
  const data = JSON.stringify(body);
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port: px.port, method: 'POST', path: pathname, agent: false,
      headers: {
        connection: 'close', 'content-type': 'application/json', authorization: `Bearer ${key}`,
        'anthropic-version': '2023-06-01',
      },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text, ms: Date.now() - t0 }));
    });
    req.on('error', reject);
    req.setTimeout(20000, () => req.destroy(new Error('request timed out')));
    req.end(data);
  });
}

const post = (px, key) => request(px, key, '/v1/chat/completions', { model: 'gpt-4o', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });

const metrics = async (px) => (await fetch(`${px.url}/metrics`, { headers: { authorization: 'Bearer sk-big' } })).text();
const metric = (text, re) => Number((re.exec(text) || [0, 0])[1]);
const stateEvent = (text, ev) => metric(text, new RegExp(`proxai_state_events_total\\{backend="redis",event="${ev}"\\} (\\d+)`));

/** The pids whose log lines after `from` (an offset in stderr) match re,
 *  each with how many lines. */
function linesByPid(px, re, from = 0) {
  const out = new Map();
  for (const l of px.logs().stderr.slice(from).split('\n')) {
    if (!re.test(l)) continue;
    const m = /\[(\d+)\]/.exec(l);
    if (m) out.set(Number(m[1]), (out.get(Number(m[1])) || 0) + 1);
  }
  return out;
}

const UNREACHABLE = /redis state backend unreachable/;
const BACK = /redis state backend is back/;

/** Polls every 10 ms until each of the instances' workers has logged a line
 *  matching re after the offsets; resolves to a Map pid -> Date.now() when
 *  its line was first seen. */
async function whenEachWorker(pxs, froms, re, timeout) {
  const seen = new Map();
  const workers = new Set(pxs.flatMap((px) => childrenOf(px.pid)));
  assert.equal(workers.size, 2 * pxs.length, 'two workers per instance');
  await waitFor(() => {
    pxs.forEach((px, i) => {
      for (const pid of linesByPid(px, re, froms[i]).keys()) if (!seen.has(pid)) seen.set(pid, Date.now());
    });
    return [...workers].every((w) => seen.has(w));
  }, { timeout, interval: 10, what: `${re} from every worker (${seen.size} of ${workers.size})` });
  return seen;
}

/** Exactly one line each way per worker of A and B since the offsets (one
 *  incident, however many reconnect attempts it took). */
function oneLineEachWay(from) {
  [pxA, pxB].forEach((px, i) => {
    for (const re of [UNREACHABLE, BACK]) {
      const lines = linesByPid(px, re, from[i]);
      assert.equal(lines.size, 2, re.toString());
      for (const n of lines.values()) assert.equal(n, 1, `${re}: ${px.logs().stderr.slice(from[i])}`);
    }
  });
}

/** Restarts Redis and resolves to the time it first answered a PING. */
async function restartRedis() {
  const starting = startRedis(redisPort);
  let firstPong = 0;
  while (!firstPong) {
    try {
      if ((await redisCommand(redisPort, 'PING', { timeoutMs: 200 })) === '+PONG') firstPong = Date.now();
    } catch {
      await sleep(5);
    }
  }
  redis = await starting;
  return firstPong;
}

test('on_error = local: each instance holds ceil(limit / 2) for rpm and tpm in its shared memory, buckets full at the outage; the shared buckets again once Redis is back', async () => {
  // both instances recorded in Redis, as B counted them
  // (within one registration period of 10 s, should B have counted first)
  await waitFor(async () => metric(await metrics(pxB), /proxai_state_instances (\d+)/) === 2, { what: 'B counting 2 instances', timeout: 15000 * slow, interval: 200 });
  // while Redis is up the shared bucket decides: 3 of rpm 10 used
  for (let i = 0; i < 3; i++) assert.equal((await post(pxB, 'sk-rpm10')).status, 200);

  const fromA = pxA.logs().stderr.length;
  const fromB = pxB.logs().stderr.length;
  await redis.stop('SIGKILL');
  await whenEachWorker([pxA, pxB], [fromA, fromB], UNREACHABLE, 10000 * slow);

  // rpm 10 over 2 instances: 5 here, whichever worker takes the request,
  // however much the shared bucket had used
  const res = await Promise.all(Array.from({ length: 12 }, () => post(pxB, 'sk-rpm10')));
  const codes = res.map((r) => r.status);
  assert.equal(codes.filter((c) => c === 200).length, 5, codes.join(','));
  for (const r of res.filter((x) => x.status === 429)) assert.ok(Number(r.headers['retry-after']) >= 1);
  // tpm 80 over 2: 40 here; each answer uses 8 tokens, charged at its end:
  // five fill it, a sixth is admitted while it is not in debt
  const tcodes = [];
  for (let i = 0; i < 9; i++) tcodes.push((await post(pxB, 'sk-tpm80')).status);
  assert.deepEqual(tcodes, [200, 200, 200, 200, 200, 200, 429, 429, 429]);
  // the deny instance refuses meanwhile: 503 in each client's shape
  const denied = await post(pxA, 'sk-big');
  assert.equal(denied.status, 503);
  assert.equal(JSON.parse(denied.text).error.type, 'api_error');
  const an = await request(pxA, 'sk-big', '/v1/messages', { model: 'claude-x', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(an.status, 503);
  assert.equal(JSON.parse(an.text).error.type, 'overloaded_error');
  const ge = await request(pxA, 'sk-big', '/v1beta/models/gemini-x:generateContent', { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] });
  assert.equal(ge.status, 503);
  assert.equal(JSON.parse(ge.text).error.status, 'UNAVAILABLE');
  const m = await metrics(pxB);
  assert.equal(stateEvent(m, 'local'), 21, m);
  assert.equal(stateEvent(m, 'error'), 2, m); // one incident per worker

  await restartRedis();
  await whenEachWorker([pxB], [fromB], BACK, 5000 * slow);
  // a fresh Redis: the shared bucket of 10 applies again, not the share of 5
  const again = await Promise.all(Array.from({ length: 12 }, () => post(pxB, 'sk-rpm10')));
  assert.equal(again.filter((r) => r.status === 200).length, 10, again.map((r) => r.status).join(','));
}, { timeout: 90000 * slow });

test('Redis killed and restarted: every worker of both instances is back on Redis within 1 s of Redis answering a PING, with no request to trigger it; one line per worker for each end of the incident', async () => {
  await whenEachWorker([pxA], [0], BACK, 5000 * slow); // A too, from the last test
  const from = [pxA.logs().stderr.length, pxB.logs().stderr.length];
  const before = [await metrics(pxA), await metrics(pxB)];
  await redis.stop('SIGKILL');
  await whenEachWorker([pxA, pxB], from, UNREACHABLE, 10000 * slow);
  await sleep(1500); // down a while: several reconnect attempts, none logged
  const pong = await restartRedis();
  const back = await whenEachWorker([pxA, pxB], from, BACK, 5000 * slow);
  console.log(`# back after the first PONG (ms): ${[...back.values()].map((t) => t - pong).join(', ')}`);
  for (const [pid, at] of back) assert.ok(at - pong <= 1000, `worker ${pid} back ${at - pong} ms after the first PONG`);
  oneLineEachWay(from);
  // the deny instance serves again on every worker
  for (let i = 0; i < 8; i++) assert.equal((await post(pxA, 'sk-big')).status, 200);
  for (const [i, px] of [pxA, pxB].entries()) {
    const m = await metrics(px);
    assert.equal(stateEvent(m, 'error') - stateEvent(before[i], 'error'), 2, m);
    assert.equal(stateEvent(m, 'back') - stateEvent(before[i], 'back'), 2, m);
  }
}, { timeout: 90000 * slow });

test('Redis frozen (SIGSTOP): an admission waits at most [state] timeout (250 ms default, 600 ms set), later ones follow on_error at once; every worker back within 1 s of SIGCONT', async () => {
  const from = [pxA.logs().stderr.length, pxB.logs().stderr.length];
  redis.kill('SIGSTOP');
  let resumed = false;
  try {
    // A: deny after at most the timeout
    const a = [];
    for (let i = 0; i < 6; i++) a.push(await post(pxA, 'sk-big'));
    assert.deepEqual(a.map((r) => r.status), [503, 503, 503, 503, 503, 503]);
    const ams = a.map((r) => r.ms);
    assert.ok(ams[0] >= 200, `the first waited for Redis: ${ams}`);
    for (const ms of ams) assert.ok(ms <= 250 + 750 * slow, `within the timeout: ${ams}`);
    // B: 600 ms, then its local share
    const b = [];
    for (let i = 0; i < 6; i++) b.push(await post(pxB, 'sk-big'));
    assert.deepEqual(b.map((r) => r.status), [200, 200, 200, 200, 200, 200]);
    const bms = b.map((r) => r.ms);
    assert.ok(bms[0] >= 500, `the first waited for Redis: ${bms}`);
    for (const ms of bms) assert.ok(ms <= 600 + 750 * slow, `within the timeout: ${bms}`);
    await whenEachWorker([pxA, pxB], from, UNREACHABLE, 10000 * slow);
    assert.match(pxA.logs().stderr.slice(from[0]), /unreachable \(no reply within 250 ms\)/);
    assert.match(pxB.logs().stderr.slice(from[1]), /unreachable \(no reply within 600 ms\)/);
    await sleep(1000);
    redis.kill('SIGCONT');
    resumed = true;
    const t0 = Date.now();
    const back = await whenEachWorker([pxA, pxB], from, BACK, 5000 * slow);
    console.log(`# waits (ms): deny ${ams}, local ${bms}; back after SIGCONT: ${[...back.values()].map((t) => t - t0).join(', ')}`);
    for (const [pid, at] of back) assert.ok(at - t0 <= 1000, `worker ${pid} back ${at - t0} ms after SIGCONT`);
    oneLineEachWay(from);
    for (let i = 0; i < 6; i++) assert.equal((await post(pxA, 'sk-big')).status, 200);
  } finally {
    if (!resumed) redis.kill('SIGCONT');
  }
}, { timeout: 90000 * slow });

test('two instances behind nginx still share one key\'s rpm exactly', async () => {
  const nginx = await startNginx([pxA.port, pxB.port]);
  try {
    const res = await Promise.all(Array.from({ length: 24 }, () => fetch(`${nginx.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-front' },
      body: JSON.stringify({ model: 'gpt-4o', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
    }).then(async (r) => (await r.arrayBuffer(), r.status))));
    assert.equal(res.filter((c) => c === 200).length, 10, res.join(','));
    assert.equal(res.filter((c) => c === 429).length, 14, res.join(','));
  } finally {
    await nginx.stop();
  }
}, { timeout: 60000 * slow });

// ---- a worker killed with streams in flight ----------------------------------

/** The socket inodes of a process. */
function socketInodes(pid) {
  const out = new Set();
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) out.add(m[1]);
    } catch {
      // closed meanwhile
    }
  }
  return out;
}

/** Established connections accepted on port: inode -> the client's port. */
function acceptedOn(port) {
  const out = new Map();
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = fs.readFileSync(f, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const c = line.trim().split(/\s+/);
      if (c.length < 10 || c[3] !== '01') continue;
      if (parseInt(c[1].split(':')[1], 16) !== port) continue;
      out.set(c[9], parseInt(c[2].split(':')[1], 16));
    }
  }
  return out;
}

/** An SSE request left open: resolves `started` at the first content chunk;
 *  `cut` resolves when the connection ends without the stream's end. */
function openStream(px, key, maxTokens) {
  const s = { port: 0, text: '', ended: false };
  s.req = http.request({
    host: '127.0.0.1', port: px.port, method: 'POST', path: '/v1/chat/completions', agent: false,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
  });
  s.req.on('socket', (sock) => sock.on('connect', () => (s.port = sock.localPort)));
  s.started = new Promise((resolve, reject) => {
    s.req.on('response', (res) => {
      s.status = res.statusCode;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        s.text += d;
        if (s.text.includes('Hello')) resolve(s);
      });
      res.on('end', () => (s.ended = true));
    });
    s.req.on('error', reject);
  });
  s.cut = new Promise((resolve) => s.req.on('close', () => resolve(!s.ended || !s.text.includes('[DONE]'))));
  s.req.on('error', () => {});
  s.req.end(JSON.stringify({ model: 'gpt-4o', stream: true, max_tokens: maxTokens, messages: [{ role: 'user', content: 'hi' }] }));
  return s;
}

/** The key's tpm level in Redis in tokens, and the Redis ms it was refilled to. */
async function tpmLevel(pfx, key) {
  const r = await redisCommand(redisPort, `HMGET ${pfx}rl:${key} tl tt`, { all: true });
  const v = r.split('\r\n').filter((l) => /^-?\d/.test(l)).map(Number);
  return { tokens: v[0] / 60000, at: v[1] };
}

test('kill -9 of a worker with streams in flight: the master logs pid, signal and how many (idle connections excluded), counts them in proxai_requests_lost_total, releases their tpm reservations in Redis and corrects the gauges; a reservation never exceeds the key\'s tpm', async () => {
  const up = await startMock();
  const pfx = `${prefix}kill:`;
  const px = await startProxai(conf('deny', {}, pfx).replace(mock.url, up.url));
  const streams = [];
  const idle = [];
  try {
    await waitFor(() => childrenOf(px.pid).length === 2, { what: 'two workers' });
    // the upstream sends the head and two chunks, then nothing
    await up.script([{ path: '/chat/completions', default: true, fault: 'stall', fault_after: 2, repeat: true }]);
    for (let i = 0; i < 3; i++) {
      const s = net.connect(px.port, '127.0.0.1');
      s.on('error', () => {});
      idle.push(s); // connected, no request: not in flight
    }
    const N = 10;
    const RESERVE = 50000;
    for (let i = 0; i < N; i++) streams.push(openStream(px, 'sk-big', RESERVE));
    await Promise.all(streams.map((s) => s.started));
    await Promise.all(idle.map((s) => new Promise((resolve) => (s.remotePort ? resolve() : s.on('connect', resolve)))));
    // which worker holds which stream
    const conns = acceptedOn(px.port);
    const workers = childrenOf(px.pid).map((pid) => {
      const inodes = socketInodes(pid);
      const ports = new Set([...conns].filter(([ino]) => inodes.has(ino)).map(([, p]) => p));
      return { pid, streams: streams.filter((s) => ports.has(s.port)) };
    });
    assert.equal(workers[0].streams.length + workers[1].streams.length, N);
    const victim = workers[0].streams.length >= workers[1].streams.length ? workers[0] : workers[1];
    const K = victim.streams.length;
    console.log(`# streams per worker: ${workers.map((w) => w.streams.length).join(', ')}`);
    const before = await tpmLevel(pfx, 'big');
    assert.ok(before.tokens < 1000000 - (N - 1) * RESERVE, `the reservations are held: ${JSON.stringify(before)}`);

    process.kill(victim.pid, 'SIGKILL');
    const line = await waitFor(() => px.logs().stderr.split('\n').find((l) => l.includes(`worker ${victim.pid} killed by signal 9`)), { what: 'the death logged' });
    assert.match(line, new RegExp(`worker ${victim.pid} killed by signal 9 \\(Killed\\) with ${K} requests? in flight \\(lost\\); started worker \\d+`));
    // exactly the victim's streams were cut
    const cut = await Promise.all(streams.map((s) => Promise.race([s.cut, sleep(3000 * slow).then(() => false)])));
    assert.equal(cut.filter(Boolean).length, K);
    for (const s of victim.streams) assert.equal(s.status, 200);

    const m = await metrics(px);
    assert.equal(metric(m, /proxai_requests_lost_total (\d+)/), K, m);
    assert.equal(metric(m, /proxai_active_streams (-?\d+)/), N - K, m);
    // the K reservations went back to the bucket (refill as Redis computed it)
    const after = await tpmLevel(pfx, 'big');
    const expected = Math.min(1000000, Math.min(1000000, before.tokens + (after.at - before.at) * 1000000 / 60000) + K * RESERVE);
    assert.ok(Math.abs(after.tokens - expected) < 1, `level ${after.tokens}, expected ${expected}`);

    // a reservation is at most the key's tpm (here 1000 of max_tokens
    // 100000): one its instance never settles is refilled within a minute
    const capped = openStream(px, 'sk-tpm1k', 100000);
    streams.push(capped);
    await capped.started;
    const lvl = await tpmLevel(pfx, 'tpm1k');
    assert.ok(lvl.tokens >= 0 && lvl.tokens < 100 * slow, `tpm 1000 reserved whole, no deeper: ${lvl.tokens}`);
  } finally {
    for (const s of streams) s.req.destroy();
    for (const s of idle) s.destroy();
    await px.stop();
    await up.stop();
  }
}, { timeout: 60000 * slow });

test('SIGHUP with streams open on two workers: every stream finishes, both workers reload', async () => {
  const up = await startMock();
  const px = await startProxai(conf('deny', {}, `${prefix}hup:`).replace(mock.url, up.url));
  try {
    await waitFor(() => childrenOf(px.pid).length === 2, { what: 'two workers' });
    await up.script([{ path: '/chat/completions', default: true, chunk_delay_ms: 400, repeat: true }]);
    const streams = Array.from({ length: 6 }, () => openStream(px, 'sk-big', 100));
    await Promise.all(streams.map((s) => s.started));
    const from = px.logs().stderr.length;
    process.kill(px.pid, 'SIGHUP');
    const cut = await Promise.all(streams.map((s) => s.cut));
    assert.deepEqual(cut, cut.map(() => false), 'no stream was cut');
    for (const s of streams) assert.equal(s.status, 200);
    await waitFor(() => linesByPid(px, /configuration reloaded/, from).size === 2, { what: 'both workers reloaded' });
    assert.equal(px.proc.exitCode, null);
    const st = await px.stop();
    assert.equal(st.code, 0, px.logs().stderr);
  } finally {
    await px.stop();
    await up.stop();
  }
}, { timeout: 60000 * slow });

test('instances stop cleanly', async () => {
  for (const px of [pxA, pxB]) {
    const st = await px.stop();
    assert.ok(!/Sanitizer|runtime error:/.test(px.logs().stderr), px.logs().stderr);
    assert.equal(st.code, 0, px.logs().stderr);
  }
  await redis.stop();
});

await run();
