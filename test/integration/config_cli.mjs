// Command line and configuration of the real proxai binary: --version, --help,
// --check (valid: routes printed, no secrets, exit 0; invalid: exit 2 with
// `proxai: FILE:LINE: message`), SIGHUP reload (good and bad file), and the
// embedded default (no file, no keys: 503 saying how to configure).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startMock, startProxai, test, run, waitFor, sleep, repoRoot, parseSSE, cleanEnv, proxaiSync, proxaiBin, writeFile } from './lib/harness.mjs';
import * as C from './lib/config.mjs';

const BIN = proxaiBin;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-cli-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));

/** Environment without upstream keys (the embedded default reads them). */

const proxai = (args, { cwd = tmp, env = cleanEnv() } = {}) => proxaiSync(args, { cwd, env });

const writeConf = (name, text) => writeFile(tmp, name, text);

test('--version prints the version and exits 0', () => {
  const r = proxai(['--version']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^proxai \d+\.\d+\.\d+/);
});

test('--help prints the usage and exits 0; an unknown argument exits 2', () => {
  const r = proxai(['--help']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /usage: proxai \[-c FILE\] \[--check\] \[--version\] \[--help\]/);
  for (const opt of ['-c FILE', '--check', '--version', '--help']) assert.ok(r.stdout.includes(opt), opt);
  const bad = proxai(['--no-such-option']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /^proxai: /m);
});

test('--check on a valid config prints the routes, exits 0 and never prints a secret', () => {
  const conf = writeConf('good.conf', C.server({ listen: '127.0.0.1:1', access_log: null })
    + C.upstream('oc', 'chat', 'http://127.0.0.1:9', {
      api_key: '${CLI_TEST_UPSTREAM_KEY}', header: 'OpenAI-Organization: org-visible', retries: null,
    })
    + C.upstream('an', 'anthropic', 'http://127.0.0.1:9', { api_key: 'sk-ant-literal-secret-42', retries: null })
    + C.route('fast', { upstream: 'oc', model: 'gpt-4o-mini', fallback: 'an' })
    + C.route('claude-*', { upstream: 'an' })
    + C.route('*', { upstream: 'oc' })
    + C.key('team-a', { secret: '${CLI_TEST_CLIENT_KEY}', models: 'gpt-*' })
    + C.key('team-b', { secret: 'client-literal-secret-77' }));
  const r = proxai(['-c', conf, '--check'], { env: cleanEnv({ CLI_TEST_UPSTREAM_KEY: 'sk-env-upstream-secret-99', CLI_TEST_CLIENT_KEY: 'client-env-secret-55' }) });
  assert.equal(r.code, 0, r.stderr);
  const all = r.stdout + r.stderr;
  for (const secret of ['sk-env-upstream-secret-99', 'client-env-secret-55', 'sk-ant-literal-secret-42', 'client-literal-secret-77']) {
    assert.ok(!all.includes(secret), `--check printed a secret: ${secret}`);
  }
  assert.match(r.stdout, /route fast -> oc/);
  assert.match(r.stdout, /gpt-4o-mini/);
  assert.match(r.stdout, /route claude-\* -> an/);
  assert.match(r.stdout, /route \* -> oc/);
  assert.match(r.stdout, /team-a/);
  // route order is file order
  assert.ok(r.stdout.indexOf('route fast') < r.stdout.indexOf('route claude-*'));
  assert.ok(r.stdout.indexOf('route claude-*') < r.stdout.indexOf('route * '));
});

const bad = [
  { what: 'unknown key', text: '[server]\nlisten = 127.0.0.1:1\n\ntimout = 5s\n', line: 4, re: /timout/ },
  { what: 'bad value', text: '[upstream a]\nprotocol = openai_chat_completions\nbase_url = http://x/v1\nretries = lots\n[route *]\nupstream = a\n', line: 4, re: /retries|lots/ },
  { what: 'bad duration', text: '[server]\nheader_timeout = 5 parsecs\n', line: 2, re: /header_timeout|parsecs/ },
  { what: 'bad protocol', text: '[upstream a]\nprotocol = smoke_signals\nbase_url = http://x/v1\n', line: 2, re: /smoke_signals|protocol/ },
  { what: 'unset variable', text: '# comment\n[upstream a]\nprotocol = openai_chat_completions\nbase_url = http://x/v1\napi_key = ${PROXAI_CLI_SURELY_UNSET_VAR}\n', line: 5, re: /PROXAI_CLI_SURELY_UNSET_VAR/ },
  { what: 'unknown upstream in a route', text: '[upstream a]\nprotocol = openai_chat_completions\nbase_url = http://x/v1\n[route gpt-*]\nupstream = nope\n', line: 5, re: /nope/ },
  { what: 'unknown section', text: '[server]\nlisten = 127.0.0.1:1\n[servre]\n', line: 3, re: /servre/ },
  { what: 'repeated key', text: '[server]\nlisten = 127.0.0.1:1\nlisten = 127.0.0.1:2\n', line: 3, re: /listen/ },
];

for (const b of bad) {
  test(`--check on a bad config (${b.what}) exits 2 with proxai: FILE:LINE: message`, () => {
    const file = `bad-${b.what.replace(/\W+/g, '-')}.conf`;
    writeConf(file, b.text);
    // relative path, as given on the command line
    const r = proxai(['-c', file, '--check'], { cwd: tmp });
    assert.equal(r.code, 2, `exit ${r.code}; stdout ${r.stdout}; stderr ${r.stderr}`);
    const m = new RegExp(`^proxai: ${file.replace(/[.]/g, '\\.')}:(\\d+): (.+)$`, 'm').exec(r.stderr);
    assert.ok(m, `no "proxai: ${file}:LINE: message" line in: ${r.stderr}`);
    assert.equal(Number(m[1]), b.line, r.stderr);
    assert.match(m[2], b.re);
    // and the same error without --check: exit 2, nothing started
    const r2 = proxai(['-c', file], { cwd: tmp });
    assert.equal(r2.code, 2, r2.stderr);
    assert.ok(r2.stderr.includes(m[0]), r2.stderr);
  });
}

test('a missing config file exits 2 naming the file', () => {
  const r = proxai(['-c', path.join(tmp, 'does-not-exist.conf'), '--check']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /^proxai: .*does-not-exist\.conf/m);
});

test('./proxai.conf in the working directory is used without -c', () => {
  const dir = fs.mkdtempSync(path.join(tmp, 'cwd-'));
  fs.writeFileSync(path.join(dir, 'proxai.conf'), C.upstream('a', 'chat', 'http://x', { api_key: null, retries: null })
    + C.route('only-this-route', { upstream: 'a' }));
  const r = proxai(['--check'], { cwd: dir });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /route only-this-route -> a/);
});

// ---- SIGHUP reload -------------------------------------------------------------

test('SIGHUP reload: a new route takes effect; a bad file is rejected and the old config stays', async () => {
  const mock = await startMock();
  const base = C.server() + C.upstream('oc', 'chat', mock.url, { api_key: 'k' }) + C.route('gpt-*', { upstream: 'oc' });
  const px = await startProxai(base);
  const ask = async (model) => {
    const r = await fetch(`${px.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
    });
    return { status: r.status, json: await r.json(), headers: r.headers };
  };
  try {
    assert.equal((await ask('gpt-4o')).status, 200);
    assert.equal((await ask('llama-3')).status, 404);

    const port = px.port;
    fs.writeFileSync(px.configPath, base.replace('{{PORT}}', String(port)) + C.route('llama-*', { upstream: 'oc', model: 'served-llama' }));
    process.kill(px.pid, 'SIGHUP');
    const r = await waitFor(async () => {
      const x = await ask('llama-3');
      return x.status === 200 ? x : null;
    }, { timeout: 5000, what: 'the reloaded route' });
    assert.equal(r.headers.get('x-proxai-upstream'), 'oc/served-llama');
    assert.equal(r.json.model, 'llama-3');

    // a bad file: rejected with a log line, the running config stays
    const logLen = px.logs().stderr.length;
    fs.writeFileSync(px.configPath, base.replace('{{PORT}}', String(port)) + C.route('mistral-*', { upstream: 'no-such-upstream' }));
    process.kill(px.pid, 'SIGHUP');
    await waitFor(() => px.logs().stderr.length > logLen, { timeout: 5000, what: 'a log line about the rejected reload' });
    const logged = px.logs().stderr.slice(logLen);
    assert.match(logged, /no-such-upstream|reload/i, logged);
    await sleep(200);
    assert.equal((await ask('llama-3')).status, 200, 'the previous (reloaded) config is still in force');
    assert.equal((await ask('mistral-7b')).status, 404, 'the bad file did not take effect');
    assert.equal((await ask('gpt-4o')).status, 200);
    assert.equal(px.proc.exitCode, null, 'proxai still runs');
    const st = await px.stop();
    assert.equal(st.code, 0);
  } finally {
    await px.stop();
    await mock.stop();
  }
});

test('SIGHUP reload: an in-flight stream finishes on the configuration it started with', async () => {
  const mock = await startMock();
  const conf = (model) => C.server() + C.upstream('oc', 'chat', mock.url, { api_key: 'k' })
    + C.route('gpt-*', { upstream: 'oc', model });
  const px = await startProxai(conf('first-model'));
  try {
    await mock.script([{
      sse: [], sse_repeat: { event: { data: { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'first-model', choices: [{ index: 0, delta: { content: 't' }, finish_reason: null }] } }, count: 10 },
      sse_tail: [{ data: { id: 'c', object: 'chat.completion.chunk', created: 1, model: 'first-model', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] } }, 'data: [DONE]\n\n'],
      delay_ms: 100,
    }]);
    const res = await fetch(`${px.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gpt-x', messages: [{ role: 'user', content: 'hi' }], stream: true }) });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-proxai-upstream'), 'oc/first-model');
    const reader = res.body.getReader();
    let text = '';
    while ((text.match(/data: /g) || []).length < 2) text += Buffer.from((await reader.read()).value).toString();
    fs.writeFileSync(px.configPath, conf('second-model').replace('{{PORT}}', String(px.port)));
    process.kill(px.pid, 'SIGHUP');
    await waitFor(async () => {
      const r = await fetch(`${px.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gpt-y', messages: [{ role: 'user', content: 'hi' }] }) });
      await r.arrayBuffer();
      return r.headers.get('x-proxai-upstream') === 'oc/second-model';
    }, { timeout: 5000, what: 'the reload' });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
    const events = parseSSE(text);
    assert.equal(events.at(-1).data, '[DONE]');
    const chunks = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
    assert.equal(chunks.length, 11);
    for (const ch of chunks) assert.equal(ch.model, 'gpt-x', 'the requested name in every event, before and after the reload');
  } finally {
    await px.stop();
    await mock.stop();
  }
});

// ---- embedded default ---------------------------------------------------------

function portBusy(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(true));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(false)));
  });
}

/** Starts proxai with no config file in an empty directory; resolves once 127.0.0.1:8080 answers. */
async function startDefault(env) {
  const dir = fs.mkdtempSync(path.join(tmp, 'empty-'));
  const child = spawn(BIN, [], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  child.stdout.resume();
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  let gone = null;
  exited.then((x) => (gone = x));
  const stop = async () => {
    if (gone) return gone;
    process.kill(child.pid, 'SIGTERM');
    const r = await Promise.race([exited, sleep(10000).then(() => null)]);
    if (!r) {
      process.kill(child.pid, 'SIGKILL');
      return exited;
    }
    return r;
  };
  try {
    await waitFor(async () => {
      if (gone) throw new Error(`proxai exited ${JSON.stringify(gone)}: ${stderr}`);
      const r = await fetch('http://127.0.0.1:8080/healthz', { signal: AbortSignal.timeout(1000) });
      await r.arrayBuffer();
      return r.status === 200;
    }, { timeout: 10000, what: 'embedded default on 127.0.0.1:8080' });
  } catch (e) {
    await stop();
    throw e;
  }
  return { child, stop, stderr: () => stderr };
}

test('embedded default without keys: starts on 127.0.0.1:8080, answers model requests with 503 saying how to configure', async () => {
  if (await portBusy(8080)) {
    console.log('# skip: 127.0.0.1:8080 is in use on this machine (the embedded default listens there)');
    return;
  }
  const d = await startDefault(cleanEnv());
  try {
    const c = await fetch('http://127.0.0.1:8080/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }),
    });
    const cj = await c.json();
    assert.equal(c.status, 503);
    assert.equal(typeof cj.error.message, 'string');
    assert.match(cj.error.message, /OPENAI_API_KEY/);
    assert.match(cj.error.message, /ANTHROPIC_API_KEY/);
    assert.match(cj.error.message, /-c|proxai\.conf/);
    const a = await fetch('http://127.0.0.1:8080/v1/messages', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude-x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const aj = await a.json();
    assert.equal(a.status, 503);
    assert.equal(aj.type, 'error');
    assert.match(aj.error.message, /ANTHROPIC_API_KEY/);
    const r = await fetch('http://127.0.0.1:8080/v1/responses', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-5', input: 'hi' }),
    });
    assert.equal(r.status, 503);
    assert.match((await r.json()).error.message, /OPENAI_API_KEY/);
    assert.equal((await fetch('http://127.0.0.1:8080/readyz')).status, 200);
  } finally {
    const st = await d.stop();
    assert.equal(st.code, 0, JSON.stringify(st));
  }
});

test('embedded default with only OPENAI_API_KEY: every model (claude-* too) goes to the openai upstream', async () => {
  if (await portBusy(8080)) {
    console.log('# skip: 127.0.0.1:8080 is in use on this machine');
    return;
  }
  const mock = await startMock();
  const d = await startDefault(cleanEnv({ OPENAI_API_KEY: 'sk-from-env-123', OPENAI_BASE_URL: `${mock.url}/v1` }));
  try {
    for (const model of ['gpt-4o', 'claude-sonnet-4']) {
      const r = await fetch('http://127.0.0.1:8080/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
      });
      const j = await r.json();
      assert.equal(r.status, 200, JSON.stringify(j));
      assert.equal(j.choices[0].message.content, 'Hello from mock');
      assert.equal(r.headers.get('x-proxai-upstream'), `openai/${model}`);
    }
    const recs = await mock.requests();
    assert.equal(recs.length, 2);
    for (const rec of recs) assert.equal(rec.headers.authorization, 'Bearer sk-from-env-123');
  } finally {
    await d.stop();
    await mock.stop();
  }
});

await run();
