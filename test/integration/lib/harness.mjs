// Integration test harness: start the C mock upstream and the real proxai
// binary, talk to them, and run tests sequentially. Node built-ins only.
//
//   import { startMock, startProxai, test, run } from './lib/harness.mjs';
//   test('name', async () => { ... }, { timeout: 30000 });
//   await run();
//
// Every child process is tracked by PID and stopped when the tests end or the
// Node process exits (SIGKILL on a hard exit).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const LOG_CAP = 1 << 20; // keep the last 1 MiB of each child stream

const children = new Set(); // ChildProcess objects still running
const tmpDirs = new Set();

function killAll(signal) {
  for (const child of children) {
    try {
      process.kill(child.pid, signal);
    } catch {
      // already gone
    }
  }
}
process.on('exit', () => {
  killAll('SIGKILL');
  for (const d of tmpDirs) {
    try {
      fs.rmSync(d, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    killAll('SIGKILL');
    process.exit(130);
  });
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls fn() until it returns a truthy value (returned) or throws after timeout ms. */
export async function waitFor(fn, { timeout = 10000, interval = 25, what = 'condition' } = {}) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    }
    await sleep(interval);
  }
}

function makeTmpDir(prefix) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tmpDirs.add(d);
  return d;
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Spawns a binary with captured, capped stdout/stderr; tracked for cleanup. */
function spawnTracked(bin, args, env) {
  if (!fs.existsSync(bin)) throw new Error(`binary not found: ${bin} (build it first or set the env var)`);
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  const out = { stdout: '', stderr: '' };
  for (const name of ['stdout', 'stderr']) {
    proc[name].setEncoding('utf8');
    proc[name].on('data', (d) => {
      out[name] += d;
      if (out[name].length > LOG_CAP) out[name] = out[name].slice(-LOG_CAP);
    });
  }
  children.add(proc);
  const exited = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      children.delete(proc);
      resolve({ code, signal });
    });
    proc.on('error', (err) => {
      children.delete(proc);
      out.stderr += `\nspawn error: ${err.message}`;
      resolve({ code: null, signal: null, error: err });
    });
  });
  let exitInfo = null;
  exited.then((info) => (exitInfo = info));
  const stop = async (signal = 'SIGTERM', timeoutMs = 10000) => {
    if (exitInfo) return exitInfo;
    try {
      process.kill(proc.pid, signal);
    } catch {
      // already gone
    }
    const timer = sleep(timeoutMs).then(() => 'timeout');
    const r = await Promise.race([exited, timer]);
    if (r === 'timeout') {
      try {
        process.kill(proc.pid, 'SIGKILL');
      } catch {
        // already gone
      }
      const info = await exited;
      return { ...info, killedAfterTimeout: true };
    }
    return r;
  };
  return { proc, out, exited, stop, hasExited: () => exitInfo };
}

async function httpJson(url, { method = 'GET', body } = {}) {
  const res = await fetch(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  if (!res.ok) throw new Error(`${method} ${url} -> ${res.status}: ${text}`);
  return json;
}

/**
 * Starts the mock upstream (MOCK_BIN, else build/test/mock_upstream) on an
 * ephemeral port. Returns {port, url, pid, proc, script(entries), requests(),
 * queue(), reset(), stats(), stop(signal), logs()}. `url` has no trailing
 * slash and no /v1.
 */
export async function startMock({ args = [], env = {} } = {}) {
  const bin = process.env.MOCK_BIN || path.join(repoRoot, 'build/test/mock_upstream');
  const child = spawnTracked(bin, ['--port', '0', '--host', '127.0.0.1', ...args], env);
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`mock did not start within 10 s; stderr: ${child.out.stderr}`)), 10000);
    const check = () => {
      const m = /^listening (\d+)$/m.exec(child.out.stdout);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    child.proc.stdout.on('data', check);
    child.exited.then((info) => {
      clearTimeout(timer);
      reject(new Error(`mock exited (${JSON.stringify(info)}) before listening; stderr: ${child.out.stderr}`));
    });
    check();
  });
  const url = `http://127.0.0.1:${port}`;
  const front = process.env.MOCK_TLS_CERT ? await tlsFront(port) : null;
  return {
    port,
    /** base URL for proxai: https:// through a TLS front with MOCK_TLS_CERT */
    url: front ? front.url : url,
    pid: child.proc.pid,
    proc: child.proc,
    /** Appends scripted responses (array or single entry); resolves to the queue length. */
    script: async (entries) => (await httpJson(`${url}/_mock/script`, { method: 'POST', body: entries })).queued,
    /** Every recorded (non-control) request since the last reset. */
    requests: () => httpJson(`${url}/_mock/requests`),
    /** The scripted entries not used yet. */
    queue: () => httpJson(`${url}/_mock/queue`),
    reset: () => httpJson(`${url}/_mock/reset`, { method: 'POST', body: {} }),
    stats: () => httpJson(`${url}/_mock/stats`),
    stop: (signal = 'SIGTERM', timeoutMs = 10000) => child.stop(signal, timeoutMs),
    exited: child.exited,
    logs: () => ({ stdout: child.out.stdout, stderr: child.out.stderr }),
  };
}

/**
 * With MOCK_TLS_CERT / MOCK_TLS_KEY (PEM files): a TLS server relaying each
 * connection to the plain mock on port, one to one, so that the suites can
 * run against an https:// upstream. A reset on one side destroys the other
 * (no close_notify); an orderly end is passed on as one.
 */
async function tlsFront(port) {
  const opts = { cert: fs.readFileSync(process.env.MOCK_TLS_CERT), key: fs.readFileSync(process.env.MOCK_TLS_KEY) };
  const socks = new Set();
  const server = tls.createServer(opts, (t) => {
    const p = net.connect(port, '127.0.0.1');
    socks.add(t);
    socks.add(p);
    t.on('close', () => socks.delete(t));
    p.on('close', () => socks.delete(p));
    p.setNoDelay(true);
    t.pipe(p);
    p.pipe(t);
    t.on('error', () => p.destroy());
    p.on('error', () => t.destroy());
  });
  server.on('tlsClientError', () => {});
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const close = () => {
    for (const s of socks) s.destroy();
    server.close();
  };
  process.on('exit', close);
  return { url: `https://127.0.0.1:${server.address().port}` };
}

/**
 * Starts proxai (PROXAI_BIN, else build/proxai) with `configText` written to a
 * temporary file; `{{PORT}}` in it is replaced by a free port, and any
 * `{{NAME}}` by opts.vars.NAME. Waits until GET /healthz answers 200.
 * Returns {port, url, pid, proc, configPath, stop(signal), exited, logs()}.
 */
export async function startProxai(configText, { env = {}, vars = {}, args = [], timeout = 10000 } = {}) {
  const bin = process.env.PROXAI_BIN || path.join(repoRoot, 'build/proxai');
  const port = await freePort();
  let text = configText.replaceAll('{{PORT}}', String(port));
  for (const [k, v] of Object.entries(vars)) text = text.replaceAll(`{{${k}}}`, String(v));
  const dir = makeTmpDir('proxai-test-');
  const configPath = path.join(dir, 'proxai.conf');
  fs.writeFileSync(configPath, text);
  const child = spawnTracked(bin, ['-c', configPath, ...args], env);
  const url = `http://127.0.0.1:${port}`;
  const end = Date.now() + timeout;
  for (;;) {
    const info = child.hasExited();
    if (info) {
      throw new Error(`proxai exited (code ${info.code}, signal ${info.signal}) before becoming healthy;\nstderr:\n${child.out.stderr}\nconfig:\n${text}`);
    }
    try {
      const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) });
      await res.arrayBuffer();
      if (res.status === 200) break;
    } catch {
      // not up yet
    }
    if (Date.now() > end) {
      await child.stop('SIGKILL');
      throw new Error(`proxai not healthy on ${url} within ${timeout} ms;\nstderr:\n${child.out.stderr}`);
    }
    await sleep(25);
  }
  return {
    port,
    url,
    pid: child.proc.pid,
    proc: child.proc,
    configPath,
    stop: (signal = 'SIGTERM', timeoutMs = 10000) => child.stop(signal, timeoutMs),
    exited: child.exited,
    logs: () => ({ stdout: child.out.stdout, stderr: child.out.stderr }),
  };
}

/** The proxai binary the tests run (PROXAI_BIN, else build/proxai). */
export const proxaiBin = path.resolve(process.env.PROXAI_BIN || path.join(repoRoot, 'build/proxai'));

/** This process's environment without the variables that configure proxai
 *  by themselves (provider keys and URLs, PROXAI_LISTEN, PROXAI_CONFIG),
 *  then `extra`. */
export function cleanEnv(extra = {}) {
  const env = { ...process.env };
  for (const k of ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OPENAI_BASE_URL', 'ANTHROPIC_BASE_URL',
    'PROXAI_LISTEN', 'PROXAI_CONFIG'])
    delete env[k];
  return { ...env, ...extra };
}

/** Runs proxai with args to its end (--check, --version, a failing start):
 *  {code, signal, stdout, stderr}. */
export function proxaiSync(args, { cwd, env = cleanEnv(), input, timeout = 10000 } = {}) {
  const r = spawnSync(proxaiBin, args, { cwd, env, input, encoding: 'utf8', timeout });
  return { code: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

/** Writes text to dir/name; returns the path. */
export function writeFile(dir, name, text) {
  const p = path.join(dir, name);
  fs.writeFileSync(p, text);
  return p;
}

/** The JSON records of a JSON-lines file (an access log): [] while it does not exist. */
export function jsonLines(file) {
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [];
}

/** Parses SSE text into [{event, data, id}] (data lines joined with \n). */
export function parseSSE(text) {
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
      else if (field === 'id') ev.id = value;
    }
    if (data.length) ev.data = data.join('\n');
    events.push(ev);
  }
  return events;
}

// ---- tiny test runner --------------------------------------------------------

const tests = [];

/** Registers a test; opts.timeout in ms (default 30000). */
export function test(name, fn, { timeout = 30000 } = {}) {
  tests.push({ name, fn, timeout });
}

/**
 * Runs the registered tests one after another (TEST_FILTER=substring selects),
 * prints `ok - name` / `not ok - name: error`, a summary line, stops every
 * child process, and exits 1 if any test failed (0 otherwise).
 */
export async function run() {
  const filter = process.env.TEST_FILTER;
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  for (const t of tests) {
    if (filter && !t.name.includes(filter)) {
      skipped++;
      continue;
    }
    let timer;
    try {
      await Promise.race([
        Promise.resolve().then(() => t.fn()),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`timed out after ${t.timeout} ms`)), t.timeout);
        }),
      ]);
      console.log(`ok - ${t.name}`);
      passed++;
    } catch (err) {
      const msg = err && err.stack ? err.stack : String(err);
      console.log(`not ok - ${t.name}: ${msg.split('\n').join('\n    ')}`);
      failed++;
    } finally {
      clearTimeout(timer);
    }
  }
  const left = [...children];
  killAll('SIGTERM');
  await Promise.race([
    Promise.all(left.map((c) => new Promise((resolve) => (c.exitCode !== null || c.signalCode !== null ? resolve() : c.once('exit', resolve))))),
    sleep(5000),
  ]);
  const summary = `${passed} passed, ${failed} failed` + (skipped ? `, ${skipped} skipped` : '');
  console.log(summary);
  if (passed + failed === 0) {
    console.log('no test ran');
    process.exit(1);
  }
  process.exit(failed ? 1 : 0);
}
