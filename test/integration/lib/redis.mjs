// A real redis-server for a test: on a free loopback port, no persistence,
// stopped by PID (and killed at exit if still running).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort, sleep, waitFor } from './harness.mjs';

const REDIS = process.env.REDIS_SERVER || '/usr/bin/redis-server';
const live = new Set();
process.on('exit', () => {
  for (const p of live) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
});

/** Starts redis-server (port: a free one unless given); resolves to
 *  {port, url, stop()} once it accepts connections. */
export async function startRedis({ port } = {}) {
  port = port || (await freePort());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-redis-'));
  const p = spawn(REDIS, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(p);
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.stderr.on('data', (d) => (out += d));
  let gone = null;
  const exited = new Promise((resolve) => p.on('exit', (code, signal) => {
    live.delete(p);
    gone = { code, signal };
    fs.rmSync(dir, { recursive: true, force: true });
    resolve(gone);
  }));
  await waitFor(() => {
    if (gone) throw new Error(`redis-server exited early (${JSON.stringify(gone)}): ${out}`);
    return /Ready to accept connections/.test(out);
  }, { timeout: 10000, what: 'redis-server' });
  return {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    /** One command; resolves to the raw RESP reply text. */
    command: (...args) => new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1');
      let out = '';
      s.on('data', (d) => {
        out += d;
        if (out.endsWith('\r\n')) s.end();
      });
      s.on('end', () => resolve(out));
      s.on('error', reject);
      s.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('')}`);
    }),
    stop: async () => {
      if (!gone) p.kill('SIGTERM');
      return Promise.race([exited, sleep(10000).then(() => {
        if (!gone) p.kill('SIGKILL');
        return exited;
      })]);
    },
  };
}
