// Team scale on one host: limits and /metrics shared by every worker
// (shared memory), admin_listen, /v1/models per key, the master replacing a
// dead worker, SIGUSR1 reopening the access log, socket_mode, and mid-stream
// failures counted as failures (SPEC sections 3, 4, 7, 8).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startMock, startProxai, test, run, waitFor, sleep, freePort } from './lib/harness.mjs';
import * as C from './lib/config.mjs';
import { childrenOf } from './lib/team.mjs';

const mock = await startMock();
const upstreams =
  C.upstream('oc', 'chat', mock.url, { api_key: 'up-key' });
const KEY = 'sk-team-a';
const chatBody = JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-team-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));

/** One request on its own connection (no keep-alive: SO_REUSEPORT spreads
 *  new connections over the workers). */
function request(target, { method = 'GET', path: p = '/', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const opts = { method, path: p, headers: { connection: 'close', ...headers }, agent: false };
    if (typeof target === 'string') Object.assign(opts, { host: '127.0.0.1', port: new URL(target).port });
    else Object.assign(opts, target);
    if (body !== undefined) opts.headers['content-type'] = 'application/json';
    const req = http.request(opts, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(20000, () => req.destroy(new Error('request timed out')));
    if (body !== undefined) req.write(body);
    req.end();
  });
}

const chat = (url, headers = {}) =>
  request(url, { method: 'POST', path: '/v1/chat/completions', headers, body: chatBody });
const auth = { authorization: `Bearer ${KEY}` };

/** Stop proxai; it must exit 0 without a sanitizer report (ASan build). */
async function stopClean(px) {
  const st = await px.stop();
  assert.ok(!/Sanitizer|runtime error:/.test(px.logs().stderr), px.logs().stderr);
  assert.equal(st.code, 0, px.logs().stderr);
}

function metricValue(text, re) {
  const m = re.exec(text);
  return m ? Number(m[1]) : 0;
}

test('workers = 2: rpm = 10 admits exactly 10 of 20 requests across workers; 10 scrapes of /metrics agree', async () => {
  const px = await startProxai(
    C.server({ workers: 2 }) +
    upstreams +
    C.route('*', { upstream: 'oc' }) +
    C.key('team-a', { secret: `${KEY}`, rpm: 10 }));
  try {
    await waitFor(() => childrenOf(px.pid).length === 2, { what: 'two workers' });
    const res = await Promise.all(Array.from({ length: 20 }, () => chat(px.url, auth)));
    const ok = res.filter((r) => r.status === 200).length;
    const limited = res.filter((r) => r.status === 429);
    assert.equal(ok, 10, `statuses: ${res.map((r) => r.status).join(',')}`);
    assert.equal(limited.length, 10);
    for (const r of limited) assert.ok(Number(r.headers['retry-after']) >= 1);

    // /metrics on the client listener needs the key when keys exist
    assert.equal((await request(px.url, { path: '/metrics' })).status, 401);
    const scrapes = [];
    for (let i = 0; i < 10; i++) {
      const r = await request(px.url, { path: '/metrics', headers: auth });
      assert.equal(r.status, 200);
      // the connection gauge counts the scrape itself; everything else must match
      scrapes.push(r.text.split('\n').filter((l) => !l.startsWith('proxai_open_connections')).join('\n'));
    }
    for (const s of scrapes) assert.equal(s, scrapes[0]);
    const s = scrapes[0];
    const inb = 'inbound="openai_chat_completions"';
    assert.equal(metricValue(s, new RegExp(`proxai_requests_total\\{${inb},upstream="oc",status="200"\\} (\\d+)`)), 10, s);
    assert.equal(metricValue(s, new RegExp(`proxai_requests_total\\{${inb},upstream="none",status="429"\\} (\\d+)`)), 10, s);
    assert.equal(metricValue(s, new RegExp(`proxai_request_duration_seconds_count\\{${inb}\\} (\\d+)`)), 20, s);
    assert.equal(metricValue(s, new RegExp(`proxai_request_duration_seconds_bucket\\{${inb},le="\\+Inf"\\} (\\d+)`)), 20, s);
    assert.equal(metricValue(s, /proxai_upstream_attempts_total\{upstream="oc",result="ok"\} (\d+)/), 10, s);
    assert.equal(metricValue(s, /proxai_tokens_total\{key="team-a",upstream="oc",direction="in"\} (\d+)/), 50, s);
    await stopClean(px);
  } finally {
    await px.stop();
  }
}, { timeout: 60000 });

test('admin_listen serves /metrics without a key; the client listener does not serve it', async () => {
  const admin = await freePort();
  const px = await startProxai(
    C.server({ admin_listen: `127.0.0.1:${admin}` }) +
    upstreams +
    C.route('*', { upstream: 'oc' }) +
    C.key('team-a', { secret: `${KEY}` }));
  try {
    assert.equal((await chat(px.url, auth)).status, 200);
    const m = await request(`http://127.0.0.1:${admin}`, { path: '/metrics' });
    assert.equal(m.status, 200);
    assert.match(m.text, /proxai_requests_total\{inbound="openai_chat_completions",upstream="oc",status="200"\} 1\n/);
    assert.equal((await request(`http://127.0.0.1:${admin}`, { path: '/healthz' })).status, 200);
    // client traffic is not served on the admin listener
    const c = await request(`http://127.0.0.1:${admin}`, { method: 'POST', path: '/v1/chat/completions', body: chatBody });
    assert.equal(c.status, 404);
    // and /metrics is not served on the client listener, key or not
    assert.equal((await request(px.url, { path: '/metrics', headers: auth })).status, 404);
    await stopClean(px);
  } finally {
    await px.stop();
  }
});

test('/v1/models lists the concrete names the key may use (never a glob) and needs a key', async () => {
  const px = await startProxai(
    C.server() +
    upstreams +
    C.route('gpt-4o', { upstream: 'oc' }) +
    C.route('claude-*', { upstream: 'oc', models: 'claude-a, claude-b' }) +
    C.route('gpt-4o-mini', { upstream: 'oc' }) +
    C.route('*', { upstream: 'oc' }) +
    C.key('narrow', { secret: 'sk-narrow', models: 'gpt-*' }) +
    C.key('wide', { secret: 'sk-wide' }));
  try {
    const ids = async (key, headers = {}) => {
      const r = await request(px.url, { path: '/v1/models', headers: { authorization: `Bearer ${key}`, ...headers } });
      assert.equal(r.status, 200, r.text);
      return JSON.parse(r.text);
    };
    assert.deepEqual((await ids('sk-wide')).data.map((m) => m.id), ['gpt-4o', 'claude-a', 'claude-b', 'gpt-4o-mini']);
    assert.deepEqual((await ids('sk-narrow')).data.map((m) => m.id), ['gpt-4o', 'gpt-4o-mini']);
    const a = await ids('sk-wide', { 'anthropic-version': '2023-06-01' });
    assert.equal(a.first_id, 'gpt-4o');
    assert.equal(a.last_id, 'gpt-4o-mini');
    assert.equal(a.data[1].type, 'model');
    const none = await request(px.url, { path: '/v1/models' });
    assert.equal(none.status, 401);
    assert.equal(JSON.parse(none.text).error.type, 'authentication_error');
    assert.equal((await request(px.url, { path: '/v1/models', headers: { authorization: 'Bearer nope' } })).status, 401);
    await stopClean(px);
  } finally {
    await px.stop();
  }
});

test('a route `models =` entry must be concrete: a glob there is a configuration error', async () => {
  const conf = path.join(tmp, 'glob-models.conf');
  fs.writeFileSync(conf, upstreams + C.route('c-*', { upstream: 'oc', models: ['c-1', 'c-*'] }));
  const { spawnSync } = await import('node:child_process');
  const r = spawnSync(process.env.PROXAI_BIN || 'build/proxai', ['--check', '-c', conf], { encoding: 'utf8' });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /glob-models\.conf:\d+: model 'c-\*' in \[route c-\*\] is not a concrete model name/);
});

test('kill -9 of a worker: the master logs it and starts a new one; traffic goes on', async () => {
  const px = await startProxai(
    C.server({ workers: 2 }) +
    upstreams +
    C.route('*', { upstream: 'oc' }));
  try {
    const before = await waitFor(() => {
      const c = childrenOf(px.pid);
      return c.length === 2 && c;
    }, { what: 'two workers' });
    process.kill(before[0], 'SIGKILL');
    const line = await waitFor(() => px.logs().stderr.split('\n').find((l) => l.includes(`worker ${before[0]} killed by signal 9`)), { what: 'the death logged' });
    assert.match(line, /killed by signal 9 \(Killed\) with no request in flight; started worker \d+/);
    const after = await waitFor(() => {
      const c = childrenOf(px.pid);
      return c.length === 2 && !c.includes(before[0]) && c;
    }, { what: 'a replacement worker' });
    assert.ok(after.includes(before[1]));
    for (let i = 0; i < 6; i++) assert.equal((await chat(px.url)).status, 200);
    assert.equal(px.proc.exitCode, null, 'the master is still running');
    // the master still stops cleanly
    await stopClean(px);
  } finally {
    await px.stop();
  }
}, { timeout: 30000 });

test('workers dying in a loop: after 10 deaths within 60 s the master stops (exit 1) instead of respawning forever', async () => {
  const px = await startProxai(
    C.server({ workers: 2 }) +
    upstreams +
    C.route('*', { upstream: 'oc' }));
  try {
    for (let i = 0; i < 10; i++) {
      const c = await waitFor(() => {
        const k = childrenOf(px.pid);
        return k.length === 2 && k;
      }, { what: `two workers (round ${i})` });
      process.kill(c[0], 'SIGKILL');
      await waitFor(() => !childrenOf(px.pid).includes(c[0]), { what: 'the worker gone' });
    }
    const info = await Promise.race([px.exited, sleep(10000).then(() => null)]);
    assert.ok(info, 'the master exited');
    assert.equal(info.code, 1);
    assert.match(px.logs().stderr, /workers are dying too fast \(10 in 60 s\): stopping/);
  } finally {
    await px.stop();
  }
}, { timeout: 40000 });

for (const workers of [1, 2]) {
  test(`SIGUSR1 reopens the access log after logrotate renamed it (workers = ${workers})`, async () => {
    const log = path.join(tmp, `access-${workers}.log`);
    const px = await startProxai(
      C.server({ workers: `${workers}`, access_log: `${log}` }) +
      upstreams +
      C.route('*', { upstream: 'oc' }));
    try {
      if (workers > 1) await waitFor(() => childrenOf(px.pid).length === workers, { what: 'workers' });
      assert.equal((await chat(px.url, { 'x-request-id': 'before-rotate' })).status, 200);
      await waitFor(() => fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('before-rotate'), { what: 'first line' });
      fs.renameSync(log, `${log}.1`);
      process.kill(px.pid, 'SIGUSR1');
      await waitFor(() => fs.existsSync(log), { what: 'the log reopened under its name' });
      // every worker reopened: several requests on new connections all land in the new file
      for (let i = 0; i < 6; i++) assert.equal((await chat(px.url, { 'x-request-id': `after-rotate-${i}` })).status, 200);
      await waitFor(() => (fs.readFileSync(log, 'utf8').match(/after-rotate-/g) || []).length === 6, { what: 'six lines in the new file' });
      const old = fs.readFileSync(`${log}.1`, 'utf8');
      assert.ok(old.includes('before-rotate') && !old.includes('after-rotate'));
      assert.equal(px.proc.exitCode, null, 'SIGUSR1 must not kill the process');
      await stopClean(px);
    } finally {
      await px.stop();
    }
  }, { timeout: 30000 });
}

test('SIGUSR1 also reopens the diagnostic log when stderr is a file', async () => {
  const { spawn } = await import('node:child_process');
  const errLog = path.join(tmp, 'proxai-error.log');
  const conf = path.join(tmp, 'stderr-file.conf');
  const port = await freePort();
  fs.writeFileSync(conf, C.server({ listen: `127.0.0.1:${port}`, workers: 2 }) + upstreams + C.route('*', { upstream: 'oc' }));
  const fd = fs.openSync(errLog, 'a');
  const child = spawn(process.env.PROXAI_BIN || 'build/proxai', ['-c', conf], { stdio: ['ignore', 'ignore', fd] });
  fs.closeSync(fd);
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  try {
    await waitFor(async () => (await request(`http://127.0.0.1:${port}`, { path: '/healthz' })).status === 200, { what: 'proxai up' });
    await waitFor(() => childrenOf(child.pid).length === 2, { what: 'two workers' });
    fs.renameSync(errLog, `${errLog}.1`);
    process.kill(child.pid, 'SIGUSR1');
    // each worker writes "log files reopened" into the file under the old name
    await waitFor(() => fs.existsSync(errLog) && (fs.readFileSync(errLog, 'utf8').match(/log files reopened/g) || []).length === 2, { what: 'two workers logging to the new file' });
    assert.ok(!fs.readFileSync(`${errLog}.1`, 'utf8').includes('log files reopened'));
  } finally {
    try {
      process.kill(child.pid, 'SIGTERM');
    } catch {
      // gone
    }
    assert.equal(await exited, 0);
  }
  assert.match(fs.readFileSync(errLog, 'utf8'), /stopped/);
});

test('SIGHUP with an emptied or truncated file is rejected; the running configuration stays', async () => {
  const px = await startProxai(
    C.server({ workers: 2 }) +
    upstreams +
    C.route('*', { upstream: 'oc' }));
  try {
    await waitFor(() => childrenOf(px.pid).length === 2, { what: 'two workers' });
    const text = fs.readFileSync(px.configPath, 'utf8');
    for (const cut of ['', text.slice(0, text.indexOf('[route'))]) {
      const before = (px.logs().stderr.match(/reload rejected/g) || []).length;
      fs.writeFileSync(px.configPath, cut);
      process.kill(px.pid, 'SIGHUP');
      await waitFor(() => (px.logs().stderr.match(/reload rejected/g) || []).length === before + 2, { what: 'both workers rejecting the file' });
      assert.match(px.logs().stderr, /no \[route\] section/);
      for (let i = 0; i < 4; i++) assert.equal((await chat(px.url)).status, 200);
    }
    // a worker started after the rejected reload still gets the good configuration
    const c = childrenOf(px.pid);
    process.kill(c[0], 'SIGKILL');
    await waitFor(() => {
      const k = childrenOf(px.pid);
      return k.length === 2 && !k.includes(c[0]);
    }, { what: 'a replacement worker' });
    for (let i = 0; i < 4; i++) assert.equal((await chat(px.url)).status, 200);
    await stopClean(px);
  } finally {
    await px.stop();
  }
});

test('socket_mode: a unix listener gets 0660 by default, else the configured mode', async () => {
  for (const [mode, want] of [[undefined, 0o660], ['0600', 0o600]]) {
    const sock = path.join(tmp, `px-${want.toString(8)}.sock`);
    const px = await startProxai(C.server({ listen: `unix:${sock}`, admin_listen: '127.0.0.1:{{PORT}}', socket_mode: mode })
      + upstreams + C.route('*', { upstream: 'oc' }));
    try {
      assert.equal(fs.statSync(sock).mode & 0o777, want, `mode of ${sock}`);
      const r = await request({ socketPath: sock }, { method: 'POST', path: '/v1/chat/completions', body: chatBody });
      assert.equal(r.status, 200);
      await stopClean(px);
    } finally {
      await px.stop();
    }
  }
});

test('workers = 2 on a unix listener: every worker accepts on the one socket at the path', async () => {
  const sock = path.join(tmp, 'px-workers.sock');
  const px = await startProxai(C.server({ listen: `unix:${sock}`, admin_listen: '127.0.0.1:{{PORT}}', workers: 2 })
    + upstreams + C.route('*', { upstream: 'oc' }));
  try {
    const workers = await waitFor(() => {
      const c = childrenOf(px.pid);
      return c.length === 2 && c;
    }, { what: 'two workers' });
    // the inode of the listening socket (/proc/net/unix: ... Inode Path; the
    // path is the name it was bound under, PATH.PID~, renamed to PATH once
    // listening)
    const line = fs.readFileSync('/proc/net/unix', 'utf8').split('\n').find((l) => l.endsWith(` ${sock}.${px.pid}~`));
    assert.ok(line, 'socket listed in /proc/net/unix');
    const inode = line.trim().split(/\s+/)[6];
    for (const w of workers) {
      const fds = fs.readdirSync(`/proc/${w}/fd`).map((fd) => {
        try {
          return fs.readlinkSync(`/proc/${w}/fd/${fd}`);
        } catch {
          return '';
        }
      });
      assert.ok(fds.includes(`socket:[${inode}]`), `worker ${w} listens on the socket at ${sock}`);
    }
    for (let i = 0; i < 4; i++) {
      const r = await request({ socketPath: sock }, { method: 'POST', path: '/v1/chat/completions', body: chatBody });
      assert.equal(r.status, 200);
    }
    await stopClean(px);
  } finally {
    await px.stop();
  }
});

test('a stream cut by the upstream counts as a failure in /metrics, not as 200 / ok', async () => {
  const px = await startProxai(
    C.server() +
    upstreams +
    C.route('*', { upstream: 'oc' }));
  try {
    await mock.reset();
    await mock.script({ default: true, fault: 'reset', fault_after: 2, delay_ms: 50 });
    const r = await request(px.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      body: JSON.stringify({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(r.status, 200);
    assert.match(r.text, /"error"/);
    const m = (await request(px.url, { path: '/metrics' })).text;
    assert.equal(metricValue(m, /proxai_requests_total\{inbound="openai_chat_completions",upstream="oc",status="200"\} (\d+)/), 0, m);
    assert.equal(metricValue(m, /proxai_requests_total\{inbound="openai_chat_completions",upstream="oc",status="502"\} (\d+)/), 1, m);
    assert.equal(metricValue(m, /proxai_upstream_attempts_total\{upstream="oc",result="ok"\} (\d+)/), 0, m);
    assert.equal(metricValue(m, /proxai_upstream_attempts_total\{upstream="oc",result="reset"\} (\d+)/), 1, m);
    await stopClean(px);
  } finally {
    await px.stop();
  }
});

await run();
