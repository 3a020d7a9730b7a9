// Several deployments per route, passive health and failover (SPEC sections
// 3 and 7), with the real proxai binary against real mock upstreams:
// balancing splits per mode (counts per mock), ejection and return after
// eject_for, a cross-protocol fallback that receives its own model, failover
// from a blackholed host (a local port whose accept queue is full, so no
// packet leaves the machine), the retry-after cap, and `upstream = a, b/model`
// sending model-b to b.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { startMock, startProxai, test, run, waitFor, freePort, parseSSE, repoRoot } from './lib/harness.mjs';
import { post, withProxai } from './lib/client.mjs';
import * as C from './lib/config.mjs';

const mocks = [await startMock(), await startMock(), await startMock()];
const [ma, mb, mc] = mocks;

// The blackholed host: started once, stopped by PID at the end.
const blackholeBin = process.env.BLACKHOLE_BIN || path.join(repoRoot, 'build/test/blackhole');
const blackhole = spawn(blackholeBin, [], { stdio: ['ignore', 'pipe', 'inherit'] });
process.on('exit', () => {
  try {
    process.kill(blackhole.pid, 'SIGKILL');
  } catch {
    // gone
  }
});
const blackholePort = await new Promise((resolve, reject) => {
  let out = '';
  const timer = setTimeout(() => reject(new Error('blackhole did not start')), 10000);
  blackhole.stdout.on('data', (d) => {
    out += d;
    const m = /^listening (\d+)$/m.exec(out);
    if (m) {
      clearTimeout(timer);
      resolve(Number(m[1]));
    }
  });
  blackhole.on('exit', () => reject(new Error('blackhole exited')));
});
const refusedPort = await freePort(); // nothing listens there

// [upstream name] on mock m: api key k-NAME, the default retries
const upstream = (name, m, keys = {}, proto = 'chat') =>
  C.upstream(name, proto, m.url, { api_key: `k-${name}`, retries: null, ...keys });
// the access log on stderr (log lines are matched)
const config = (body) => C.server({ log_level: 'info', access_log: null }) + body;

async function resetAll() {
  await Promise.all(mocks.map((m) => m.reset()));
}

const chat = (px, model, extra = {}) =>
  post(px.url, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], ...extra });

async function counts() {
  return Promise.all(mocks.map(async (m) => (await m.requests()).length));
}

async function metric(px, name) {
  const text = await (await fetch(`${px.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

// proxai's stderr reaches this process through a pipe, maybe after the
// response that followed the line: wait for it (bounded).
async function logMatch(px, re) {
  await waitFor(() => re.test(px.logs().stderr), { timeout: 5000, what: `log line ${re}` });
}

test('balance = round_robin spreads requests evenly over the deployments', async () => {
  await resetAll();
  await withProxai(config(
    upstream('a', ma) + upstream('b', mb) + upstream('c', mc) +
      C.route('*', { upstream: ['a', 'b', 'c'], balance: 'round_robin' })),
    async (px) => {
      for (let i = 0; i < 30; i++) assert.equal((await chat(px, 'gpt-x')).status, 200);
      assert.deepEqual(await counts(), [10, 10, 10]);
    },
  );
});

test('balance = weighted follows the upstreams\' weights', async () => {
  await resetAll();
  await withProxai(config(
    upstream('a', ma, { weight: 3 }) + upstream('b', mb) +
      C.route('*', { upstream: ['a', 'b'], balance: 'weighted' })),
    async (px) => {
      for (let i = 0; i < 40; i++) assert.equal((await chat(px, 'gpt-x')).status, 200);
      assert.deepEqual(await counts(), [30, 10, 0]);
    },
  );
});

test('balance = least_busy (the default) keeps away from a slow deployment', async () => {
  await resetAll();
  // a answers every request 300 ms late; b at once
  await ma.script([{ default: true, headers_delay_ms: 300, repeat: true }]);
  await withProxai(config(
    upstream('a', ma) + upstream('b', mb) + C.route('*', { upstream: ['a', 'b'] })),
    async (px) => {
      for (let i = 0; i < 20; i++) assert.equal((await chat(px, 'gpt-x')).status, 200);
      const [a, b] = await counts();
      assert.equal(a + b, 20);
      // each is probed once at most before its latency is known; then b wins
      assert.ok(a <= 2, `slow deployment got ${a} of 20`);
    },
  );
});

test('upstream = a, b/model-b sends model-b to b and the requested name to a', async () => {
  await resetAll();
  await withProxai(config(
    upstream('a', ma) + upstream('b', mb) +
      C.route('gpt-x', { upstream: ['a', 'b/model-b'], balance: 'round_robin' })),
    async (px) => {
      for (let i = 0; i < 4; i++) {
        const r = await chat(px, 'gpt-x');
        assert.equal(r.status, 200);
        // the client sees the name it asked for, whoever answered
        assert.equal(r.json.model, 'gpt-x');
      }
      const ra = await ma.requests();
      const rb = await mb.requests();
      assert.equal(ra.length, 2);
      assert.equal(rb.length, 2);
      for (const r of ra) assert.equal(r.body.model, 'gpt-x');
      for (const r of rb) assert.equal(r.body.model, 'model-b');
      assert.equal(ra[0].headers.authorization, 'Bearer k-a');
      assert.equal(rb[0].headers.authorization, 'Bearer k-b');
    },
  );
});

test('a failing deployment is ejected after eject_after failures, retried elsewhere, and returns after eject_for', async () => {
  await resetAll();
  await ma.script([{ status: 503, body: { error: { message: 'down', type: 'server_error' } }, repeat: true }]);
  await withProxai(config(
    upstream('a', ma, { eject_after: 2, eject_for: '3s', retries: 0 }) + upstream('b', mb, { retries: 0 }) +
      C.route('*', { upstream: ['a', 'b'], balance: 'round_robin' })),
    async (px) => {
      for (let i = 0; i < 10; i++) {
        const r = await chat(px, 'gpt-x');
        // a retry goes to the other deployment: the client never sees the 503
        assert.equal(r.status, 200, r.text);
      }
      const [a, b] = await counts();
      assert.equal(a, 2, 'a gets requests until its second failure in a row');
      assert.equal(b, 10);
      await logMatch(px, /upstream a ejected for 3000 ms after 2 consecutive failures \(last: http_5xx\)/);
      await logMatch(px, /retry 1 on upstream b after http_503 from upstream a/);
      assert.equal(await metric(px, 'proxai_upstream_ejected{upstream="a"}'), 1);
      assert.equal(await metric(px, 'proxai_upstream_ejections_total{upstream="a"}'), 1);
      // a recovers; once eject_for is over it is back in rotation
      await ma.reset();
      await waitFor(async () => (await metric(px, 'proxai_upstream_ejected{upstream="a"}')) === 0, {
        timeout: 10000,
        what: 'the ejection to end',
      });
      await mb.reset();
      for (let i = 0; i < 4; i++) assert.equal((await chat(px, 'gpt-x')).status, 200);
      const [a2, b2] = await counts();
      assert.equal(a2, 2);
      assert.equal(b2, 2);
    },
  );
});

test('a fallback to another protocol receives its own model, translated', async () => {
  await resetAll();
  await ma.script([{ status: 503, body: { error: { message: 'down', type: 'server_error' } }, repeat: true }]);
  await withProxai(config(
    upstream('primary', ma, { retries: 0 }) + upstream('claude', mb, {}, 'anthropic') +
      upstream('spare', mc, { retries: 0 }) +
      C.route('gpt-primary', { upstream: 'primary', fallback: 'claude/claude-fallback-1' }) +
      C.route('gpt-plain', { upstream: 'primary', fallback: 'spare' })),
    async (px) => {
      const r = await chat(px, 'gpt-primary');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.object, 'chat.completion');
      assert.equal(r.json.choices[0].message.content, 'Hello from mock');
      assert.equal(r.headers.get('x-proxai-upstream'), 'claude/claude-fallback-1');
      const got = await mb.requests();
      assert.equal(got.length, 1);
      assert.equal(got[0].path, '/v1/messages');
      assert.equal(got[0].body.model, 'claude-fallback-1');
      assert.equal(got[0].headers['x-api-key'], 'k-claude');
      await logMatch(px, /fallback 1 on upstream claude after http_503 from upstream primary/);
      // streaming too: the fallback's stream is translated to the client's
      const rs = await chat(px, 'gpt-primary', { stream: true });
      assert.equal(rs.status, 200, rs.text);
      const events = parseSSE(rs.text);
      const text = events
        .filter((e) => e.data && e.data !== '[DONE]')
        .map((e) => JSON.parse(e.data).choices?.[0]?.delta?.content ?? '')
        .join('');
      assert.equal(text, 'Hello from mock');
      assert.equal(events.at(-1).data, '[DONE]');
      const got3 = await mb.requests();
      assert.equal(got3.length, 2);
      assert.equal(got3[1].body.model, 'claude-fallback-1');
      assert.equal(got3[1].body.stream, true);
      // a fallback without a model gets the requested name
      const r2 = await chat(px, 'gpt-plain');
      assert.equal(r2.status, 200, r2.text);
      const got2 = await mc.requests();
      assert.equal(got2.length, 1);
      assert.equal(got2[0].body.model, 'gpt-plain');
    },
  );
});

test('connect failures and a blackholed host fail over like a 503', async () => {
  await resetAll();
  const dead = (name, port) =>
    C.upstream(name, 'chat', `http://127.0.0.1:${port}`, { api_key: 'k', connect_timeout: '300ms', retries: 1 });
  await withProxai(config(
    dead('hole', blackholePort) + dead('refused', refusedPort) + upstream('good', ma) +
      C.route('via-hole', { upstream: 'hole', fallback: 'good/good-model' }) +
      C.route('via-refused', { upstream: 'refused', fallback: 'good' }) +
      C.route('only-hole', { upstream: 'hole' }) +
      C.route('pair', { upstream: ['hole', 'good'], balance: 'round_robin' })),
    async (px) => {
      const r = await chat(px, 'via-hole');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-proxai-upstream'), 'good/good-model');
      // retried once (retries = 1), then the fallback
      await logMatch(px, /retry 1 on upstream hole after connect_timeout from upstream hole/);
      await logMatch(px, /fallback 2 on upstream good after connect_timeout from upstream hole/);
      await logMatch(px, /"route":"via-hole".*"attempts":3/);
      const r2 = await chat(px, 'via-refused');
      assert.equal(r2.status, 200, r2.text);
      await logMatch(px, /fallback 2 on upstream good after connect from upstream refused/);
      // nothing left: the client gets the gateway timeout in its shape
      const r3 = await chat(px, 'only-hole');
      assert.equal(r3.status, 504);
      assert.equal(r3.json.error.type, 'timeout_error');
      // a deployment that cannot be reached: the retry goes to the other one
      await ma.reset();
      for (let i = 0; i < 4; i++) assert.equal((await chat(px, 'pair')).status, 200);
      assert.equal((await ma.requests()).length, 4);
      assert.equal((await ma.requests())[0].body.model, 'pair');
    },
  );
});

test('a retry-after above retry_after_max moves on at once; the 429 reaches the client only when nothing is left', async () => {
  await resetAll();
  const limited = { status: 429, headers: { 'retry-after': '15' }, body: { error: { message: 'slow down', type: 'rate_limit_error' } }, repeat: true };
  await ma.script([limited]);
  await mb.script([{ ...limited, headers: { 'retry-after': '1' }, repeat: false }]);
  await withProxai(config(
    upstream('a', ma, { retry_after_max: '2s', retries: 2 }) + upstream('b', mb, { retries: 1 }) +
      upstream('c', mc) +
      C.route('with-fallback', { upstream: 'a', fallback: 'c' }) +
      C.route('alone', { upstream: 'a' }) +
      C.route('short-wait', { upstream: 'b' })),
    async (px) => {
      const r = await chat(px, 'with-fallback');
      assert.equal(r.status, 200, r.text);
      assert.equal((await ma.requests()).length, 1, 'a is not retried while its retry-after is above the cap');
      assert.equal((await mc.requests()).length, 1);
      await logMatch(px, /fallback 1 on upstream c after http_429, retry-after 15000 ms above retry_after_max from upstream a/);
      // nothing else to try: the upstream's 429 and its retry-after, at once
      const r2 = await chat(px, 'alone');
      assert.equal(r2.status, 429);
      assert.equal(r2.headers.get('retry-after'), '15');
      assert.equal(r2.json.error.message, 'slow down');
      assert.equal((await ma.requests()).length, 2);
      // a retry-after within the cap is honoured on the same upstream
      const r3 = await chat(px, 'short-wait');
      assert.equal(r3.status, 200, r3.text);
      assert.equal((await mb.requests()).length, 2);
    },
  );
});

test('a retry-after above the cap on one deployment goes to the next deployment at once', async () => {
  await resetAll();
  await ma.script([{ status: 429, headers: { 'retry-after': '60' }, body: { error: { message: 'later', type: 'rate_limit_error' } }, repeat: true }]);
  await withProxai(config(
    upstream('a', ma, { retries: 3 }) + upstream('b', mb/* default cap 10s */) +
      C.route('*', { upstream: ['a', 'b/b-model'], balance: 'round_robin' })),
    async (px) => {
      for (let i = 0; i < 2; i++) {
        const r = await chat(px, 'gpt-x');
        assert.equal(r.status, 200, r.text);
      }
      // each request tried a once (retries = 3 not used), then b
      assert.equal((await ma.requests()).length, 2);
      const rb = await mb.requests();
      assert.equal(rb.length, 2);
      assert.equal(rb[0].body.model, 'b-model');
      await logMatch(px, /retry 1 on upstream b after http_429, retry-after 60000 ms above retry_after_max from upstream a/);
    },
  );
});

await run();
