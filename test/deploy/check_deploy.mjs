// The deployment examples in deploy/ against the build, for drift (no
// container runtime runs here, so this checks what can be checked):
//
// - scripts/packages.txt is the one package list: scripts/setup.sh and both
//   stages of deploy/Dockerfile install from it (through scripts/packages.sh),
//   and the Dockerfile's build commands are setup.sh's;
// - the runtime role names the Debian package of every library the built
//   binary links (dpkg), so the final image can run it;
// - the Dockerfile runs as non-root, checks /healthz, stops with SIGTERM;
// - the compose and Kubernetes files are valid YAML (python3-yaml, a test
//   package of scripts/packages.txt) whose proxai configurations name only
//   config keys src/conf/config.c knows, pass `proxai --check` without warnings,
//   and whose probes, grace periods and service names fit together;
// - deploy/compose/nginx.conf passes `nginx -t`.
//
// Usage: node test/deploy/check_deploy.mjs   (PROXAI_BIN: the built proxai)
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.resolve(process.env.PROXAI_BIN || path.join(root, 'build/proxai'));
const read = (p) => fs.readFileSync(path.join(root, p), 'utf8');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-deploy-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));

// [state] is SPEC section 3's; its keys are being added to src/conf/config.c on
// another branch. Sections config.c does not know yet may use only these
// keys; once config.c knows a section, its own table is the judge.

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

// ---- parsers ---------------------------------------------------------------------

/** scripts/packages.txt -> [{name, roles}] */
function packageList() {
  const out = [];
  for (const raw of read('scripts/packages.txt').split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const [name, ...roles] = line.split(/\s+/);
    out.push({ name, roles });
  }
  return out;
}
const withRole = (role) => packageList().filter((p) => p.roles.includes(role)).map((p) => p.name);

/** Dockerfile -> [{stage, from, alias, instr, args}] (continuations joined). */
function dockerfile() {
  const text = read('deploy/Dockerfile').replace(/\\\n/g, ' ');
  const out = [];
  let stage = -1;
  let alias;
  let from;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = /^(\w+)\s+(.*)$/.exec(line);
    assert.ok(m, `Dockerfile: cannot parse '${line}'`);
    const instr = m[1].toUpperCase();
    const args = m[2].replace(/\s+/g, ' ').trim();
    if (instr === 'FROM') {
      stage++;
      const f = /^(\S+)(?: AS (\S+))?$/i.exec(args);
      assert.ok(f, `FROM ${args}`);
      from = f[1];
      alias = f[2];
    }
    out.push({ stage, from, alias, instr, args });
  }
  return out;
}

/** `a && b; c` -> ['a', 'b', 'c'] */
const shellCommands = (s) => s.split(/&&|;|\|\|/).map((c) => c.trim()).filter(Boolean);

/** The apt-get install package arguments of a shell command, or null. */
function aptInstallArgs(cmd) {
  const m = /(?:^|\s)apt-get install\s+(.*)$/.exec(cmd);
  if (!m) return null;
  return m[1].match(/\$\([^)]*\)|\S+/g).filter((w) => !w.startsWith('-'));
}

/** INI text -> [{section, name, key, line}] (the section title's first word). */
function iniKeys(text) {
  const out = [];
  let section = null;
  let name = null;
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/(^|\s)[;#].*$/, '').trim();
    if (line === '') return;
    const s = /^\[\s*(\S+)\s*(.*?)\s*\]$/.exec(line);
    if (s) {
      section = s[1];
      name = s[2];
      return;
    }
    const kv = /^([^=]+?)\s*=/.exec(line);
    assert.ok(kv && section, `line ${i + 1}: '${raw}'`);
    out.push({ section, name, key: kv[1], line: i + 1 });
  });
  return out;
}

/** src/conf/config.c's directive table -> Map(section -> Set(keys)). */
function knownKeys() {
  const src = read('src/conf/config.c');
  const known = new Map();
  for (const m of src.matchAll(/\{\s*SEC_([A-Z_]+),\s*"([a-z0-9_]+)"/g)) {
    const sec = m[1].toLowerCase();
    if (!known.has(sec)) known.set(sec, new Set());
    known.get(sec).add(m[2]);
  }
  assert.ok(known.get('server')?.has('listen') && known.get('upstream')?.has('base_url'), 'the directive table of src/conf/config.c was not found');
  return known;
}

/** YAML files -> array of documents each, through python3-yaml (one run). */
let yamlCache;
function loadYaml(files) {
  yamlCache ??= loadYamlFiles(YAML_FILES);
  return files.map((f) => yamlCache[YAML_FILES.indexOf(f)]);
}
function loadYamlFiles(files) {
  const py = 'import json, sys, yaml\nprint(json.dumps([list(yaml.safe_load_all(open(f))) for f in sys.argv[1:]]))';
  const r = spawnSync('python3', ['-c', py, ...files.map((f) => path.join(root, f))], { encoding: 'utf8', timeout: 20000 });
  if (r.error || r.status !== 0) {
    throw new Error(`python3 with the yaml module is needed (Debian python3-yaml, a test package in scripts/packages.txt): ${r.error?.message || r.stderr}`);
  }
  return JSON.parse(r.stdout);
}

const durationSeconds = (v) => {
  const m = /^(\d+)(ms|s|m)?$/.exec(v);
  assert.ok(m, `duration '${v}'`);
  return Number(m[1]) * ({ ms: 0.001, s: 1, m: 60 }[m[2] ?? 's']);
};

// ---- one package list -----------------------------------------------------------

test('scripts/packages.txt: one line per package, known roles', () => {
  const list = packageList();
  const names = list.map((p) => p.name);
  assert.equal(new Set(names).size, names.length, 'a package is listed twice');
  for (const p of list) {
    assert.match(p.name, /^[a-z0-9][a-z0-9+.-]+$/, p.name);
    assert.ok(p.roles.length > 0, `${p.name} has no role`);
    for (const r of p.roles) assert.ok(['build', 'test', 'runtime'].includes(r), `${p.name}: unknown role ${r}`);
  }
  for (const must of ['meson', 'ninja-build', 'gcc', 'libuv1-dev', 'libcurl4-openssl-dev']) assert.ok(withRole('build').includes(must), must);
  for (const must of ['redis-server', 'nginx', 'python3-yaml']) assert.ok(withRole('test').includes(must), `${must}: the test suite runs it`);
  // scripts/packages.sh selects exactly those lines
  const sel = (...roles) => execFileSync(path.join(root, 'scripts/packages.sh'), roles, { encoding: 'utf8' }).split('\n').filter(Boolean);
  assert.deepEqual(sel('build'), withRole('build'));
  assert.deepEqual(sel('runtime'), withRole('runtime'));
  assert.deepEqual(sel('build', 'test'), list.filter((p) => p.roles.includes('build') || p.roles.includes('test')).map((p) => p.name));
});

test('scripts/setup.sh installs from the list (build and test roles), no list of its own', () => {
  const sh = read('scripts/setup.sh');
  assert.match(sh, /^mapfile -t pkgs < <\(scripts\/packages\.sh build test\)$/m);
  assert.doesNotMatch(sh, /pkgs=\(/, 'a package array written out in setup.sh');
  assert.doesNotMatch(sh, /apt-get install[^\n]*\b(meson|gcc|libuv1-dev)\b/, 'a package named in an apt-get line');
});

/** setup.sh's build commands: `meson setup ...` and `ninja -C ...`, redirections dropped. */
function setupBuildCommands() {
  const cmds = [];
  for (const line of read('scripts/setup.sh').split('\n')) {
    if (/^\s*#/.test(line)) continue;
    for (const m of line.matchAll(/\b(meson setup|ninja -C)\b[^>&|;\n]*/g)) cmds.push(m[0].trim());
  }
  return cmds;
}

test('deploy/Dockerfile: both stages on debian:12-slim install from scripts/packages.txt; the build commands are setup.sh\'s', () => {
  const df = dockerfile();
  const froms = df.filter((i) => i.instr === 'FROM');
  assert.ok(froms.length >= 2, 'multi-stage');
  for (const f of froms) assert.equal(f.from, 'debian:12-slim');
  const buildAlias = froms[0].alias;
  assert.ok(buildAlias, 'the build stage is named');
  const last = froms.length - 1;

  const installs = (stage) => df.filter((i) => i.stage === stage && i.instr === 'RUN')
    .flatMap((i) => shellCommands(i.args)).map(aptInstallArgs).filter(Boolean);
  const copied = (stage) => df.filter((i) => i.stage === stage && i.instr === 'COPY' && !/--from/.test(i.args)).map((i) => i.args).join(' ');
  for (const [stage, role] of [[0, 'build'], [last, 'runtime']]) {
    const ins = installs(stage);
    assert.equal(ins.length, 1, `stage ${stage}: one apt-get install`);
    assert.equal(ins[0].length, 1, `stage ${stage}: packages only from the list, got ${ins[0].join(' ')}`);
    const m = /^\$\((\S*)packages\.sh (\w+)\)$/.exec(ins[0][0]);
    assert.ok(m, `stage ${stage}: apt-get install $(…packages.sh ROLE), got ${ins[0][0]}`);
    assert.equal(m[2], role, `stage ${stage} installs role ${role}`);
    assert.match(copied(stage), /scripts\/packages\.txt/);
    assert.match(copied(stage), /scripts\/packages\.sh/);
    assert.ok(withRole(role).length > 0);
  }
  for (const s of froms.keys())
    if (s !== 0 && s !== last) assert.equal(installs(s).length, 0);

  const want = setupBuildCommands();
  assert.deepEqual(want, ['meson setup build --buildtype=release', 'ninja -C build'], 'setup.sh changed: update this test and the Dockerfile together');
  const got = df.filter((i) => i.instr === 'RUN').flatMap((i) => shellCommands(i.args)).filter((c) => /\b(meson|ninja)\b/.test(c));
  assert.deepEqual(got, want, 'the Dockerfile builds with exactly setup.sh\'s commands');
  assert.ok(df.filter((i) => i.instr === 'RUN' && /\bmeson setup\b/.test(i.args)).every((i) => i.stage === 0), 'built in the build stage');

  const final = df.filter((i) => i.stage === last);
  const copyBin = final.find((i) => i.instr === 'COPY' && i.args.includes(`--from=${buildAlias}`));
  assert.ok(copyBin, 'the binary comes from the build stage');
  const buildDir = /^meson setup (\S+)/.exec(want[0])[1];
  assert.match(copyBin.args, new RegExp(`/${buildDir}/proxai\\s`), 'copies the binary setup.sh builds');
});

test('deploy/Dockerfile: non-root user, HEALTHCHECK on /healthz, STOPSIGNAL SIGTERM, PROXAI_LISTEN=0.0.0.0:8080', () => {
  const final = dockerfile().filter((i, _, all) => i.stage === Math.max(...all.map((x) => x.stage)));
  const one = (instr) => {
    const l = final.filter((i) => i.instr === instr);
    assert.equal(l.length, 1, `one ${instr} in the final stage`);
    return l[0].args;
  };
  const user = one('USER');
  assert.doesNotMatch(user, /^(root|0)(:|$)/);
  const uid = user.split(':')[0];
  const run = final.filter((i) => i.instr === 'RUN').map((i) => i.args).join(' ');
  assert.match(run, new RegExp(`useradd .*--uid ${uid}\\b`), 'the user exists');
  assert.equal(one('STOPSIGNAL'), 'SIGTERM');
  const hc = one('HEALTHCHECK');
  assert.match(hc, /CMD .*http:\/\/127\.0\.0\.1:8080\/healthz/);
  const tool = /CMD (\S+)/.exec(hc)[1];
  assert.ok(withRole('runtime').includes(tool), `${tool} (the healthcheck) is a runtime package`);
  assert.match(one('ENV'), /(^| )PROXAI_LISTEN=0\.0\.0\.0:8080( |$)/);
  assert.match(one('EXPOSE'), /^8080$/);
  assert.match(one('ENTRYPOINT'), /proxai/);
  assert.ok(fs.existsSync(path.join(root, 'deploy/Dockerfile.dockerignore')));
  assert.match(read('deploy/Dockerfile.dockerignore'), /^build\*$/m, 'local builds stay out of the context');
});

test('the runtime role holds the package of every library the built binary links', () => {
  if (spawnSync('dpkg-query', ['--version']).status !== 0) {
    console.log('# skipped: no dpkg here');
    return;
  }
  const needed = [...execFileSync('readelf', ['-d', BIN], { encoding: 'utf8' }).matchAll(/\(NEEDED\).*\[(.+)\]/g)].map((m) => m[1]);
  assert.ok(needed.length > 0);
  const where = new Map();
  for (const m of execFileSync('ldd', [BIN], { encoding: 'utf8' }).matchAll(/^\s*(\S+) => (\S+)/gm)) where.set(m[1], m[2]);
  const runtime = withRole('runtime');
  // merged-/usr systems: dpkg may have recorded /lib/... for /usr/lib/...;
  // one dpkg-query for every candidate path (it is slow)
  const cands = new Map();
  for (const lib of needed) {
    const file = where.get(lib);
    if (!file) continue; // the dynamic loader itself
    if (/^lib(a|ub|l|t)san\.so/.test(lib)) continue; // a sanitizer build; the image is a release build
    const real = fs.realpathSync(file);
    cands.set(lib, [...new Set([file, real, real.replace(/^\/usr\/lib\//, '/lib/'), file.replace(/^\/usr\/lib\//, '/lib/')])]);
  }
  const q = spawnSync('dpkg-query', ['-S', ...[...cands.values()].flat()], { encoding: 'utf8' });
  const owners = new Map();
  for (const m of q.stdout.matchAll(/^([^:\s]+)(?::\S+)?: (\S+)$/gm)) owners.set(m[2], m[1]);
  for (const [lib, paths] of cands) {
    const owner = paths.map((p) => owners.get(p)).find(Boolean);
    assert.ok(owner, `${lib}: no Debian package owns ${paths.join(' or ')}`);
    if (owner === 'libc6') continue; // in every Debian image
    assert.ok(runtime.includes(owner), `${BIN} links ${lib} (Debian package ${owner}): add '${owner} runtime' to scripts/packages.txt`);
  }
});

// ---- compose and Kubernetes -----------------------------------------------------

const YAML_FILES = [
  'deploy/compose/docker-compose.yml',
  'deploy/compose/prometheus.yml',
  'deploy/compose/grafana/provisioning/datasources/prometheus.yml',
  'deploy/compose/grafana/provisioning/dashboards/proxai.yml',
  'deploy/kubernetes/sidecar.yaml',
];

test('the compose and Kubernetes files are YAML; every *.y*ml in deploy/ is covered', () => {
  const all = fs.readdirSync(path.join(root, 'deploy'), { recursive: true }).filter((f) => /\.ya?ml$/.test(f)).map((f) => `deploy/${f}`);
  assert.deepEqual(all.sort(), [...YAML_FILES].sort());
  const docs = loadYaml(YAML_FILES);
  for (const d of docs) assert.ok(d.length > 0 && d.every((x) => x && typeof x === 'object'));
});

/** Checks one proxai configuration text; returns its keys. */
function checkConf(label, text, env) {
  const known = knownKeys();
  const keys = iniKeys(text);
  for (const k of keys) {
    assert.ok(known.has(k.section), `${label}:${k.line}: [${k.section}] is not a section of src/conf/config.c`);
    assert.ok(known.get(k.section).has(k.key), `${label}:${k.line}: '${k.key}' is not a key of [${k.section}] in src/conf/config.c`);
  }
  const checked = text; // the binary validates the rest
  const file = path.join(tmp, label.replace(/\W+/g, '_'));
  fs.writeFileSync(file, checked);
  const r = spawnSync(BIN, ['-c', file, '--check'], { encoding: 'utf8', timeout: 10000, env: { PATH: process.env.PATH, ...env } });
  assert.equal(r.status, 0, `${label}: proxai --check: ${r.stderr}`);
  assert.equal(r.stderr, '', `${label}: --check warnings`);
  for (const m of text.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)) assert.ok(m[1] in env, `${label}: \${${m[1]}} is not provided`);
  return keys;
}

/** Environment names a service gets: compose list/map form. */
function composeEnv(svc) {
  const e = svc.environment || [];
  const out = {};
  if (Array.isArray(e)) for (const x of e) out[x.split('=')[0]] = x.includes('=') ? x.slice(x.indexOf('=') + 1) : 'from-host';
  else Object.assign(out, e);
  return out;
}

/** PROXAI_* variables must be ones the binary reads (or the config expands). */
function checkProxaiEnv(label, names, confText) {
  const main = read('src/main.c') + read('src/conf/config.c');
  for (const n of names) {
    if (!n.startsWith('PROXAI_')) continue;
    assert.ok(main.includes(`getenv("${n}")`) || confText.includes(`\${${n}}`), `${label}: ${n} is read by nothing`);
  }
}

test('compose: nginx in front of two proxai instances sharing Redis; configs name existing keys', () => {
  const [compose] = loadYaml(['deploy/compose/docker-compose.yml'])[0];
  const svcs = compose.services;
  const proxais = Object.keys(svcs).filter((n) => svcs[n].build);
  assert.equal(proxais.length, 2, 'two proxai instances');
  const redis = Object.keys(svcs).find((n) => /redis/.test(svcs[n].image || ''));
  const nginx = Object.keys(svcs).find((n) => /nginx/.test(svcs[n].image || ''));
  assert.ok(redis && nginx);
  const dir = path.join(root, 'deploy/compose');
  for (const n of proxais) {
    const s = svcs[n];
    assert.ok(fs.existsSync(path.join(dir, s.build.context, s.build.dockerfile)), `${n}: build file`);
    assert.equal(path.resolve(dir, s.build.context), root, `${n}: the context is the repository root`);
    assert.equal(s.stop_signal, 'SIGTERM');
    assert.ok(s.depends_on?.[redis], `${n} waits for redis`);
    const mount = s.volumes.find((v) => /proxai\.conf/.test(v));
    const [src, dst] = mount.split(':');
    const env = composeEnv(s);
    assert.equal(env.PROXAI_CONFIG, dst, 'PROXAI_CONFIG names the mounted file');
    assert.equal(env.PROXAI_LISTEN, '0.0.0.0:8080');
    const text = fs.readFileSync(path.join(dir, src), 'utf8');
    const keys = checkConf('deploy/compose/proxai.conf', text, Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v === 'from-host' ? 'x' : v])));
    checkProxaiEnv(n, Object.keys(env), text);
    const get = (sec, key) => keys.find((k) => k.section === sec && k.key === key);
    assert.ok(get('state', 'backend'), '[state] backend');
    assert.match(text, /^backend = redis$/m);
    assert.match(text, new RegExp(`^redis = redis://${redis}:6379/\\d+$`, 'm'), 'the Redis URL names the compose service');
    const grace = durationSeconds(String(s.stop_grace_period).replace(/s$/, '') + 's');
    const shutdown = durationSeconds(/^shutdown_timeout = (\S+)$/m.exec(text)[1]);
    assert.ok(grace > shutdown, `stop_grace_period ${grace}s > shutdown_timeout ${shutdown}s`);
  }
  for (const n of proxais) assert.ok(svcs[nginx].depends_on?.[n], `nginx waits for ${n}`);

  // nginx.conf: its upstream servers are the proxai services; nginx -t accepts it
  const mount = svcs[nginx].volumes.find((v) => /nginx\.conf/.test(v));
  const conf = fs.readFileSync(path.join(dir, mount.split(':')[0]), 'utf8');
  const servers = [...conf.matchAll(/^\s*server\s+([\w.-]+):(\d+)/gm)].map((m) => m[1]);
  assert.deepEqual(servers.sort(), proxais.sort());
  assert.match(conf, /proxy_buffering off;/, 'streams pass unbuffered');
  const local = path.join(tmp, 'nginx.conf');
  fs.writeFileSync(local, conf.replace(/^(\s*server\s+)[\w.-]+:\d+/gm, '$1127.0.0.1:9').replace(/^pid .*$/m, `pid ${tmp}/nginx.pid;`));
  // stderr into a file: error_log /dev/stderr cannot open Node's socket pair
  const errFile = path.join(tmp, 'nginx-t.err');
  const errFd = fs.openSync(errFile, 'w');
  const t = spawnSync('nginx', ['-t', '-q', '-p', `${tmp}/`, '-e', `${tmp}/error.log`, '-c', local], { stdio: ['ignore', 'ignore', errFd], timeout: 10000 });
  fs.closeSync(errFd);
  t.stderr = fs.readFileSync(errFile, 'utf8');
  if (t.error) console.log(`# nginx -t not run: ${t.error.message}`);
  else if (t.status !== 0 && /Permission denied/.test(t.stderr)) console.log(`# nginx -t not run here: ${t.stderr.trim()}`);
  else assert.equal(t.status, 0, `nginx -t: ${t.stderr}`);
});

test('compose: Jaeger takes the traces, Prometheus scrapes admin_listen, Grafana is provisioned with the dashboard', () => {
  const [compose] = loadYaml(['deploy/compose/docker-compose.yml'])[0];
  const svcs = compose.services;
  const dir = path.join(root, 'deploy/compose');
  const proxais = Object.keys(svcs).filter((n) => svcs[n].build);
  const byImage = (re) => Object.keys(svcs).find((n) => re.test(svcs[n].image || ''));
  const jaeger = byImage(/jaeger/), prom = byImage(/prometheus/), grafana = byImage(/grafana/);
  assert.ok(jaeger && prom && grafana, 'jaeger, prometheus and grafana services');
  const text = fs.readFileSync(path.join(dir, 'proxai.conf'), 'utf8');
  const keys = iniKeys(text);
  const value = (sec, key) => {
    const k = keys.find((x) => x.section === sec && x.key === key);
    return k && /=\s*(\S+)/.exec(text.split('\n')[k.line - 1])[1];
  };
  // traces: [trace] endpoint names the Jaeger service on its OTLP/HTTP port
  const ep = new URL(value('trace', 'endpoint'));
  assert.equal(ep.hostname, jaeger, '[trace] endpoint names the Jaeger service');
  assert.equal(ep.port, '4318');
  assert.equal(ep.pathname, '/v1/traces');
  assert.ok((svcs[jaeger].expose || []).map(String).includes('4318'));
  assert.ok(composeEnv(svcs[jaeger]).COLLECTOR_OTLP_ENABLED === 'true', 'Jaeger takes OTLP');
  for (const n of proxais) assert.ok(svcs[n].depends_on?.[jaeger], `${n} starts after Jaeger`);
  // metrics: Prometheus scrapes every proxai on its admin_listen port
  const admin = value('server', 'admin_listen');
  assert.match(admin, /^0\.0\.0\.0:\d+$/, 'admin_listen reachable from the compose network');
  const adminPort = admin.split(':')[1];
  for (const n of proxais) assert.ok((svcs[n].expose || []).map(String).includes(adminPort), `${n} exposes ${adminPort}`);
  const pmount = svcs[prom].volumes.find((v) => /prometheus\.yml/.test(v)).split(':');
  assert.ok((svcs[prom].command || []).includes(`--config.file=${pmount[1]}`), 'Prometheus reads the mounted file');
  const [pcfg] = loadYaml(['deploy/compose/prometheus.yml'])[0];
  const targets = pcfg.scrape_configs.flatMap((j) => j.static_configs.flatMap((c) => c.targets));
  assert.deepEqual(targets.sort(), proxais.map((n) => `${n}:${adminPort}`).sort());
  // Grafana: the datasource is the Prometheus service; the dashboard folder is mounted where the provider reads
  const mounts = Object.fromEntries(svcs[grafana].volumes.map((v) => v.split(':')).map(([src, dst]) => [dst, src]));
  assert.equal(path.resolve(dir, mounts['/etc/grafana/provisioning']), path.join(dir, 'grafana/provisioning'));
  const [ds] = loadYaml(['deploy/compose/grafana/provisioning/datasources/prometheus.yml'])[0];
  const [prov] = loadYaml(['deploy/compose/grafana/provisioning/dashboards/proxai.yml'])[0];
  const source = ds.datasources.find((d) => d.type === 'prometheus');
  assert.equal(source.url, `http://${prom}:9090`);
  assert.ok((svcs[prom].expose || []).map(String).includes('9090'));
  const dashPath = prov.providers[0].options.path;
  assert.ok(mounts[dashPath], 'the provider path is a mounted folder');
  const dashDir = path.resolve(dir, mounts[dashPath]);
  const files = fs.readdirSync(dashDir).filter((f) => f.endsWith('.json'));
  assert.deepEqual(files, ['proxai.json']);
  const dash = JSON.parse(fs.readFileSync(path.join(dashDir, 'proxai.json'), 'utf8'));
  const queried = dash.panels.filter((p) => p.type !== 'row');
  assert.ok(queried.length >= 10);
  for (const p of queried) {
    assert.equal(p.datasource.uid, source.uid, `panel '${p.title}' uses the provisioned datasource`);
    for (const t of p.targets) assert.equal(t.datasource.uid, source.uid);
  }
  // which series the dashboard queries are proxai's: test/integration/dashboard.mjs
});

test('Kubernetes sidecar: probes on /readyz and /healthz, preStop, grace period above preStop + shutdown_timeout', () => {
  const docs = loadYaml(['deploy/kubernetes/sidecar.yaml'])[0];
  const cm = docs.find((d) => d.kind === 'ConfigMap');
  const dep = docs.find((d) => d.kind === 'Deployment');
  assert.ok(cm && dep);
  const pod = dep.spec.template.spec;
  const all = [...(pod.initContainers || []), ...(pod.containers || [])];
  const px = all.find((c) => c.name === 'proxai');
  assert.ok(px, 'a proxai container');
  if ((pod.initContainers || []).includes(px)) assert.equal(px.restartPolicy, 'Always', 'a native sidecar');
  const env = Object.fromEntries((px.env || []).map((e) => [e.name, e.value]));
  const port = Number(/:(\d+)$/.exec(env.PROXAI_LISTEN)[1]);
  const portOf = (p) => (typeof p === 'number' ? p : px.ports.find((x) => x.name === p).containerPort);
  assert.equal(px.readinessProbe.httpGet.path, '/readyz');
  assert.equal(px.livenessProbe.httpGet.path, '/healthz');
  assert.equal(portOf(px.readinessProbe.httpGet.port), port);
  assert.equal(portOf(px.livenessProbe.httpGet.port), port);
  const pre = px.lifecycle.preStop.exec.command;
  assert.ok(Array.isArray(pre) && pre.length > 0);
  const preSeconds = pre[0] === 'sleep' ? Number(pre[1]) : 0;

  const mount = px.volumeMounts.find((m) => env.PROXAI_CONFIG.startsWith(m.mountPath + '/'));
  assert.ok(mount, 'PROXAI_CONFIG is in a mounted volume');
  const vol = pod.volumes.find((v) => v.name === mount.name);
  assert.equal(vol.configMap.name, cm.metadata.name);
  const text = cm.data[path.basename(env.PROXAI_CONFIG)];
  assert.ok(text, 'the ConfigMap holds the file PROXAI_CONFIG names');
  const secretEnv = {};
  for (const m of text.matchAll(/\$\{(\w+)\}/g)) secretEnv[m[1]] = 'x'; // from the Secret (envFrom)
  assert.ok((px.envFrom || []).some((e) => e.secretRef), 'the ${VAR}s come from a Secret');
  checkConf('deploy/kubernetes/sidecar.yaml proxai.conf', text, { ...env, ...secretEnv });
  checkProxaiEnv('proxai container', Object.keys(env), text);
  const shutdown = durationSeconds((/^shutdown_timeout = (\S+)$/m.exec(text) || [, '30s'])[1]);
  assert.ok(pod.terminationGracePeriodSeconds > preSeconds + shutdown, `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} > preStop ${preSeconds}s + shutdown_timeout ${shutdown}s`);
  if (px.securityContext) assert.notEqual(px.securityContext.runAsUser, 0);
});

// ---- run ---------------------------------------------------------------------------

let failed = 0;
for (const t of tests) {
  try {
    const t0 = Date.now();
    await t.fn();
    if (process.env.DEPLOY_TIMING) console.log(`# ${Date.now() - t0} ms`);
    console.log(`ok - ${t.name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${t.name}: ${(e.stack || String(e)).split('\n').join('\n    ')}`);
  }
}
console.log(`${tests.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
