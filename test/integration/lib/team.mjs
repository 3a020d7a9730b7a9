// Real redis-server and nginx for the team tests (Debian packages that
// scripts/setup.sh installs): started on loopback ports in a temporary
// folder, tracked, and killed by PID when the test process exits.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { waitFor, sleep, freePort } from './harness.mjs';

const REDIS = process.env.REDIS_SERVER || '/usr/bin/redis-server';
const NGINX = process.env.NGINX_BIN || '/usr/sbin/nginx';
const started = new Set(); // our own child processes
/** A temporary folder for the servers' files, removed at exit. */
export const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-team-'));
process.on('exit', () => {
  for (const p of started) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** Spawns a tracked child; resolves once `ready` matches its output. Returns
 *  {pid, out(), stop(signal), kill(signal)}. */
export async function startChild(bin, args, ready, what) {
  const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  started.add(p);
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.stderr.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => p.on('exit', (code, signal) => {
    started.delete(p);
    resolve({ code, signal });
  }));
  let gone = null;
  exited.then((x) => (gone = x));
  await waitFor(async () => {
    if (gone) throw new Error(`${what} exited early (${JSON.stringify(gone)}): ${out}`);
    return ready(out);
  }, { timeout: 10000, what });
  return {
    pid: p.pid,
    out: () => out,
    /** Sends a signal without waiting (SIGSTOP, SIGCONT). */
    kill: (sig) => process.kill(p.pid, sig),
    stop: async (sig = 'SIGTERM') => {
      if (gone) return gone;
      try {
        process.kill(p.pid, sig);
      } catch {
        // gone
      }
      return Promise.race([exited, sleep(10000).then(() => {
        process.kill(p.pid, 'SIGKILL');
        return exited;
      })]);
    },
  };
}

/** A redis-server without persistence on `port` (extra: more arguments). */
export function startRedis(port, extra = []) {
  return startChild(REDIS, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--dir', tmp, ...extra], (o) => /Ready to accept connections/.test(o), 'redis-server');
}

/** One Redis command over a fresh connection (inline protocol); resolves to
 *  the first reply line (e.g. "+PONG", ":3", "*4"), or to the whole reply
 *  with `all`; rejects on a connection error or after timeoutMs. */
export function redisCommand(port, command, { timeoutMs = 1000, all = false } = {}) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let data = '';
    const t = setTimeout(() => {
      s.destroy();
      reject(new Error('no reply'));
    }, timeoutMs);
    s.on('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
    s.on('connect', () => s.write(`${command}\r\n`));
    s.on('data', (d) => {
      data += d;
      if (!data.includes('\r\n')) return;
      if (all && !(data.startsWith('*') && data.split('\r\n').length > 2 * Number(data.slice(1, data.indexOf('\r\n'))) + 1)) return;
      clearTimeout(t);
      s.destroy();
      resolve(all ? data : data.slice(0, data.indexOf('\r\n')));
    });
  });
}

/** nginx on a free port in front of the given proxai ports (HTTP/1.1,
 *  keep-alive, no buffering). Returns {url, stop()}. */
export async function startNginx(ports) {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(tmp, 'nginx-'));
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) fs.mkdirSync(path.join(dir, d));
  fs.writeFileSync(path.join(dir, 'nginx.conf'), `worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream proxai {
${ports.map((p) => `    server 127.0.0.1:${p};`).join('\n')}
    keepalive 16;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://proxai;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`);
  const url = `http://127.0.0.1:${port}`;
  const nginx = await startChild(NGINX, ['-p', dir, '-e', `${dir}/nginx-error.log`, '-c', `${dir}/nginx.conf`, '-g', 'daemon off;'],
    async () => {
      try {
        return (await fetch(`${url}/healthz`)).status === 200;
      } catch {
        return false;
      }
    }, 'nginx');
  return { url, stop: () => nginx.stop('SIGQUIT') };
}

/** The worker processes of a master: its children, from /proc. */
export function childrenOf(pid) {
  const out = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return out.sort((a, b) => a - b);
}
