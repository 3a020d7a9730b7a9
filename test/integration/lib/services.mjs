// Real services for the team tests: redis-server and nginx (Debian packages,
// scripts/setup.sh installs them), started on loopback ports in a temporary
// directory, tracked and stopped by PID (SIGKILL at exit if still running).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { waitFor, sleep, freePort } from './harness.mjs';

const REDIS = process.env.REDIS_SERVER || '/usr/bin/redis-server';
const NGINX = process.env.NGINX_BIN || '/usr/sbin/nginx';
const started = new Set();
const dirs = [];
process.on('exit', () => {
  for (const p of started) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

/** A temporary directory removed at exit. */
export function tmpDir(prefix) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(d);
  return d;
}

/** Spawns a tracked child; resolves once `ready` (sync or async) holds. */
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

/** redis-server on a free port with its data in dir; persist: an
 *  append-only file, so that a restart finds what was written. */
export async function startRedis(dir, { port, persist = false } = {}) {
  const p = port ?? (await freePort());
  const r = await startChild(REDIS, ['--port', String(p), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', persist ? 'yes' : 'no', '--appendfsync', 'always', '--dir', dir],
  (o) => /Ready to accept connections/.test(o), 'redis-server');
  return { ...r, port: p };
}

/** nginx on a free port in front of the given backend ports (keep-alive,
 *  no buffering). Returns {url, stop()}. */
export async function startNginx(dir, ports) {
  const port = await freePort();
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) fs.mkdirSync(path.join(dir, d), { recursive: true });
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
      proxy_next_upstream off;
    }
  }
}
`);
  const url = `http://127.0.0.1:${port}`;
  const n = await startChild(NGINX, ['-p', dir, '-e', `${dir}/nginx-error.log`, '-c', `${dir}/nginx.conf`, '-g', 'daemon off;'],
    async () => {
      try {
        return (await fetch(`${url}/healthz`)).status === 200;
      } catch {
        return false;
      }
    }, 'nginx');
  return { url, stop: () => n.stop('SIGQUIT') };
}
