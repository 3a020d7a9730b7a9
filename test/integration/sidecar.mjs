// proxai as a container runs it (issue 15): configured from the environment
// (PROXAI_LISTEN, PROXAI_CONFIG, --listen over both), a configuration read
// from a pipe and kept on SIGHUP, log_format = json on stderr and
// access_log = stdout, and the --check warnings.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort, startMock, test, run, waitFor, sleep, repoRoot, cleanEnv, proxaiSync as runSync, proxaiBin, writeFile } from './lib/harness.mjs';
import { post } from './lib/client.mjs';
import * as C from './lib/config.mjs';

const BIN = proxaiBin;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-sidecar-'));
const running = new Set();
process.on('exit', () => {
  for (const p of running) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** Environment without the variables the embedded default and main() read. */


/* a file must route something: the smallest route, for tests about [server] */
const ROUTE = C.section('upstream u', { protocol: C.PROTOCOL.chat, base_url: 'http://127.0.0.1:9' })
  + C.route('*', { upstream: 'u' });
// [upstream name] with no key or retries (--check warnings)
const bare = (name, proto = 'chat') => C.upstream(name, proto, 'http://127.0.0.1:9', { api_key: null, retries: null });

const proxaiSync = (args, { env = cleanEnv(), input } = {}) => runSync(args, { cwd: tmp, env, input });
const writeConf = (name, text) => writeFile(tmp, name, text);

/**
 * Starts proxai and waits for /healthz on port. With opts.heredoc, the way the
 * README shows: /bin/sh execs proxai with that text on its stdin, a pipe
 * (Node's own stdio pipes are socket pairs, which /dev/stdin cannot open).
 */
async function startRaw(args, { env = cleanEnv(), port, heredoc } = {}) {
  const proc = heredoc === undefined
    ? spawn(BIN, args, { cwd: tmp, env, stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn('/bin/sh', ['-c', `exec "$0" "$@" <<'PROXAI_EOF'\n${heredoc}PROXAI_EOF\n`, BIN, ...args], { cwd: tmp, env, stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(proc);
  const out = { stdout: '', stderr: '' };
  for (const s of ['stdout', 'stderr']) {
    proc[s].setEncoding('utf8');
    proc[s].on('data', (d) => (out[s] = (out[s] + d).slice(-(1 << 20))));
  }
  let exitInfo = null;
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve((exitInfo = { code, signal }))));
  exited.then(() => running.delete(proc));
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => {
    if (exitInfo) throw Object.assign(new Error(`proxai exited ${JSON.stringify(exitInfo)}: ${out.stderr}`), { fatal: true });
    const r = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) });
    await r.arrayBuffer();
    return r.status === 200;
  }, { timeout: 10000, what: `proxai healthy on ${url}` }).catch((e) => {
    throw new Error(`${e.message}\nstderr:\n${out.stderr}`);
  });
  const stop = async () => {
    if (!exitInfo) proc.kill('SIGTERM');
    const r = await Promise.race([exited, sleep(10000).then(() => null)]);
    if (!r) proc.kill('SIGKILL');
    return r || (await exited);
  };
  return { proc, pid: proc.pid, url, out, exited, stop };
}

const upstreamConf = (port) =>
  C.upstream('up', 'chat', `http://127.0.0.1:${port}`, { api_key: null }) + C.route('*', { upstream: 'up' });

const chat = (model) => ({ model, messages: [{ role: 'user', content: 'hi' }] });

// ---- listen address and config path from the environment -------------------

test('PROXAI_LISTEN sets the embedded default\'s listen address (0.0.0.0 with one variable)', async () => {
  const c = proxaiSync(['--check'], { env: cleanEnv({ PROXAI_LISTEN: '0.0.0.0:8080' }) });
  assert.equal(c.code, 0, c.stderr);
  assert.match(c.stdout, /configuration: \(embedded default\)/);
  assert.match(c.stdout, /^ {2}listen: 0\.0\.0\.0:8080$/m);

  const port = await freePort();
  const px = await startRaw([], { env: cleanEnv({ PROXAI_LISTEN: `127.0.0.1:${port}` }), port });
  assert.match(px.out.stderr, new RegExp(`listening on 127\\.0\\.0\\.1:${port}`));
  const info = await px.stop();
  assert.equal(info.code, 0);
});

test('--listen overrides a file\'s listen and PROXAI_LISTEN; PROXAI_LISTEN overrides the file', async () => {
  const [p1, p2, p3] = [await freePort(), await freePort(), await freePort()];
  const conf = writeConf('listen.conf', C.server({ listen: `127.0.0.1:${p1}`, access_log: null }) + ROUTE);
  const listenOf = (r) => /^ {2}listen: (.*)$/m.exec(r.stdout)?.[1];
  assert.equal(listenOf(proxaiSync(['-c', conf, '--check'])), `127.0.0.1:${p1}`);
  assert.equal(listenOf(proxaiSync(['-c', conf, '--check'], { env: cleanEnv({ PROXAI_LISTEN: `127.0.0.1:${p2}` }) })), `127.0.0.1:${p2}`);
  assert.equal(listenOf(proxaiSync(['-c', conf, '--listen', `127.0.0.1:${p3}`, '--check'], { env: cleanEnv({ PROXAI_LISTEN: `127.0.0.1:${p2}` }) })), `127.0.0.1:${p3}`);
  assert.equal(listenOf(proxaiSync([`--listen=[::1]:${p3}`, '-c', conf, '--check'])), `[::1]:${p3}`);

  // the running server binds the flag's address, and a SIGHUP reload keeps
  // the override (no "needs a restart" warning, still serving)
  const px = await startRaw(['-c', conf, '--listen', `127.0.0.1:${p3}`], { env: cleanEnv({ PROXAI_LISTEN: `127.0.0.1:${p2}` }), port: p3 });
  const before = px.out.stderr.length;
  px.proc.kill('SIGHUP');
  await waitFor(() => /reloaded/.test(px.out.stderr.slice(before)), { timeout: 5000, what: 'the reload log line' });
  assert.doesNotMatch(px.out.stderr, /needs a restart/);
  assert.equal((await fetch(`http://127.0.0.1:${p3}/healthz`)).status, 200);
  assert.equal((await px.stop()).code, 0);

  for (const [args, env] of [[['--listen', 'nowhere', '--check'], cleanEnv()], [['--check'], cleanEnv({ PROXAI_LISTEN: 'nowhere' })]]) {
    const r = proxaiSync(args, { env });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /^proxai: invalid listen address 'nowhere'/m);
  }
});

test('PROXAI_CONFIG is the config path when -c is not given; -c wins', () => {
  const a = writeConf('env-a.conf', C.server({ listen: '127.0.0.1:1', access_log: null }) + ROUTE);
  const b = writeConf('env-b.conf', C.server({ listen: '127.0.0.1:2', access_log: null }) + ROUTE);
  let r = proxaiSync(['--check'], { env: cleanEnv({ PROXAI_CONFIG: a }) });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`configuration: ${a.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  r = proxaiSync(['-c', b, '--check'], { env: cleanEnv({ PROXAI_CONFIG: a }) });
  assert.match(r.stdout, /listen: 127\.0\.0\.1:2$/m);
  r = proxaiSync(['--check'], { env: cleanEnv({ PROXAI_CONFIG: path.join(tmp, 'missing.conf') }) });
  assert.equal(r.code, 2);
  assert.match(r.stderr, /missing\.conf/);
});

// ---- logs ----------------------------------------------------------------------

test('log_format = json: every stderr line is a JSON object (time, level, pid, request id, message, fields); access_log = stdout', async () => {
  const port = await freePort();
  const dead = await freePort(); // nothing listens there: the attempt fails
  const conf = writeConf('json.conf', C.server({ listen: `127.0.0.1:${port}`, log_format: 'json', access_log: 'stdout', log_level: 'debug' })
    + upstreamConf(dead));
  const px = await startRaw(['-c', conf], { port });
  const rid = 'sidecar-rid-1';
  const r = await post(px.url, '/v1/chat/completions', chat('gpt-x'), { 'x-request-id': rid });
  assert.ok(r.status >= 500, r.text);
  await waitFor(() => px.out.stdout.includes(rid), { timeout: 5000, what: 'the access log line on stdout' });
  px.proc.kill('SIGHUP');
  await waitFor(() => /reloaded/.test(px.out.stderr), { timeout: 5000, what: 'the reload line' });
  assert.equal((await px.stop()).code, 0);

  const lines = px.out.stderr.split('\n').filter((l) => l !== '');
  assert.ok(lines.length >= 4, px.out.stderr);
  const recs = lines.map((l) => {
    let o;
    assert.doesNotThrow(() => (o = JSON.parse(l)), `not JSON: ${l}`);
    assert.equal(typeof o, 'object');
    assert.match(o.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, l);
    assert.ok(['error', 'warn', 'info', 'debug'].includes(o.level), l);
    assert.equal(o.pid, px.pid, l);
    assert.equal(typeof o.message, 'string', l);
    assert.ok(!('time' in o && o.message.startsWith('{')), l);
    return o;
  });
  const mine = recs.filter((o) => o.request_id === rid);
  assert.ok(mine.length >= 1, `no line carries request_id ${rid}:\n${px.out.stderr}`);
  const failed = mine.find((o) => o.fields && o.fields.upstream === 'up');
  assert.ok(failed, `no upstream failure line with fields:\n${px.out.stderr}`);
  assert.equal(failed.level, 'warn');
  assert.equal(typeof failed.fields.error_type, 'string');
  assert.ok(!failed.message.startsWith(rid), 'the request id is a field, not a message prefix');
  const start = recs.find((o) => /listening on/.test(o.message));
  assert.equal(start.fields.listen, `127.0.0.1:${port}`);
  for (const o of recs) if (!o.message.includes(rid) && o.request_id === undefined) assert.ok(!('request_id' in o));

  // the access log went to stdout, one JSON object per line, and not to stderr
  const access = px.out.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
  assert.equal(access.length, 1, px.out.stdout);
  assert.equal(access[0].request_id, rid);
  assert.equal(access[0].status, r.status);
  assert.ok(!recs.some((o) => 'status' in o), 'no access record on stderr');
});

test('log_format = text keeps the text lines; an unknown log_format is a config error', async () => {
  const bad = writeConf('badfmt.conf', '[server]\nlog_format = yaml\n' + ROUTE);
  const r = proxaiSync(['-c', bad, '--check']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /badfmt\.conf:2: invalid log_format 'yaml' \(text or json\)/);
  const port = await freePort();
  const conf = writeConf('text.conf', C.server({ listen: `127.0.0.1:${port}`, log_format: 'text', access_log: 'stdout' }) + ROUTE);
  const c = proxaiSync(['-c', conf, '--check']);
  assert.match(c.stdout, /log_format: text/);
  assert.match(c.stdout, /access_log: stdout/);
  const px = await startRaw(['-c', conf], { port });
  await post(px.url, '/v1/chat/completions', chat('gpt-x'));
  await waitFor(() => px.out.stdout.includes('"path":"/v1/chat/completions"'), { timeout: 5000, what: 'the access line on stdout' });
  assert.equal((await px.stop()).code, 0);
  assert.match(px.out.stderr, /^\d{4}-\d\d-\d\dT[\d:.]+Z info \[\d+\] proxai .* listening on/m);
  assert.ok(!fs.existsSync(path.join(tmp, 'stdout')), 'stdout is not a file name');
});

// ---- a configuration from a pipe -----------------------------------------------

test('-c /dev/stdin: the piped config stays in force on SIGHUP, which says it did not re-read', async () => {
  const mock = await startMock();
  await mock.script([{ status: 200, body: { id: 'c1', object: 'chat.completion', created: 1, model: 'gpt-x', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } } }]);
  const port = await freePort();
  const text = C.server({ listen: `127.0.0.1:${port}`, access_log: null }) + upstreamConf(mock.port)
    + C.key('app', { secret: 'piped-secret-1' });
  const px = await startRaw(['-c', '/dev/stdin'], { port, heredoc: text });
  assert.equal((await post(px.url, '/v1/chat/completions', chat('gpt-x'))).status, 401, 'the piped key is in force');
  const before = px.out.stderr.length;
  px.proc.kill('SIGHUP');
  await waitFor(() => /not a regular file/.test(px.out.stderr.slice(before)), { timeout: 5000, what: 'the SIGHUP log line' });
  const line = px.out.stderr.slice(before);
  assert.match(line, /\/dev\/stdin/);
  assert.match(line, /keeping the running configuration/);
  assert.doesNotMatch(line, /reloaded/);
  // still the piped configuration: the key is required and the route works
  assert.equal((await post(px.url, '/v1/chat/completions', chat('gpt-x'))).status, 401);
  const ok = await post(px.url, '/v1/chat/completions', chat('gpt-x'), { authorization: 'Bearer piped-secret-1' });
  assert.equal(ok.status, 200, ok.text);
  assert.equal((await px.stop()).code, 0);
  await mock.stop();
});

// ---- --check warnings ----------------------------------------------------------

test('--check warns (stderr, exit 0) about unused upstreams, shadowed routes and keys whose models match no route', () => {
  const conf = writeConf('warn.conf', bare('a') + bare('b', 'anthropic') + bare('c') + bare('spare')
    + C.route('gpt-4*', { upstream: 'a', fallback: 'c' })
    + C.route('gpt-4o', { upstream: 'a' })
    + C.route('gpt-4?', { upstream: 'a' })
    + C.route('gpt-*', { upstream: 'a' })
    + C.route('claude-*', { upstream: 'b' })
    + C.route('*', { upstream: 'a' })
    + C.route('o1', { upstream: 'a' })
    + C.key('team', { secret: 's1', models: ['gpt-4o', 'llama-*'] })
    + C.key('other', { secret: 's2', models: ['ll?ma-3', '*-haiku'] }));
  const r = proxaiSync(['-c', conf, '--check']);
  assert.equal(r.code, 0, r.stderr);
  const warnings = r.stderr.split('\n').filter((l) => l !== '');
  for (const w of warnings) assert.match(w, /^proxai: warning: /, w);
  const has = (re) => warnings.some((w) => re.test(w));
  assert.ok(has(/\[upstream spare\] is used by no route/), r.stderr);
  assert.ok(!has(/\[upstream c\]/), 'a fallback counts as use');
  assert.ok(has(/\[route gpt-4o\] is never used: the earlier \[route gpt-4\*\]/), r.stderr);
  assert.ok(has(/\[route gpt-4\?\] is never used: the earlier \[route gpt-4\*\]/), r.stderr);
  assert.ok(has(/\[route o1\] is never used: the earlier \[route \*\]/), r.stderr);
  assert.ok(!has(/\[route gpt-\*\]/), 'gpt-* is wider than gpt-4*');
  assert.ok(!has(/\[route claude-\*\]/), r.stderr);
  assert.ok(!has(/\[route \*\] is never used/), r.stderr);
  // every key glob overlaps [route *]
  assert.ok(!has(/\[key /), r.stderr);
  assert.equal(warnings.length, 4, r.stderr);
  assert.match(r.stdout, /route gpt-4o -> a/, 'the resolved routes are still printed on stdout');

  const keys = writeConf('keys.conf', bare('a')
    + C.route('gpt-*', { upstream: 'a' })
    + C.route('claude-?-*', { upstream: 'a' })
    + C.key('team', { secret: 's1', models: ['gpt-4o', 'llama-*', 'claude-3*', '*-mini', 'claude-x'] }));
  const k = proxaiSync(['-c', keys, '--check']);
  assert.equal(k.code, 0, k.stderr);
  const kw = k.stderr.split('\n').filter((l) => l !== '');
  assert.ok(kw.some((w) => /\[key team\] models 'llama-\*' matches no route/.test(w)), k.stderr);
  assert.ok(kw.some((w) => /\[key team\] models 'claude-x' matches no route/.test(w)), k.stderr);
  assert.equal(kw.length, 2, k.stderr);

  // a configuration without such parts: no warning at all
  const clean = writeConf('clean.conf', bare('a') + C.route('gpt-4o', { upstream: 'a' }) + C.route('*', { upstream: 'a' }));
  const c = proxaiSync(['-c', clean, '--check']);
  assert.equal(c.code, 0);
  assert.equal(c.stderr, '');
  const d = proxaiSync(['--check'], { env: cleanEnv({ OPENAI_API_KEY: 'k', ANTHROPIC_API_KEY: 'k' }) });
  assert.equal(d.code, 0);
  assert.equal(d.stderr, '', 'the embedded default warns about nothing');
});

await run();
