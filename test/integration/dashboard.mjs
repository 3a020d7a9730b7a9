// The Grafana dashboard of deploy/compose queries only series proxai
// exports, with labels those series have: traffic through two proxai
// instances (one exporting traces, one to a collector that is down; an
// upstream that answers, one that refuses connections and gets ejected; a
// Redis that is down under [state] on_error = allow; a translated request
// with a dropped field) makes every family the dashboard names appear in
// /metrics, then each query's metric names and label names are checked
// against what was scraped.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startProxai, test, run, waitFor, freePort, repoRoot } from './lib/harness.mjs';
import { startFaultUpstream, http as raw } from './lib/faultup.mjs';
import { post } from './lib/client.mjs';
import * as C from './lib/config.mjs';
import { startCollector } from './lib/otlp.mjs';

const dash = JSON.parse(fs.readFileSync(path.join(repoRoot, 'deploy/compose/grafana/dashboards/proxai.json'), 'utf8'));

const chatJson = () =>
  raw(200, { 'content-type': 'application/json' }, JSON.stringify({
    id: 'c1', object: 'chat.completion', created: 1700000000, model: 'up',
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
  }));

const config = (upUrl, deadPort, redisPort, trace) => C.server()
  + C.redisState(redisPort, undefined, { on_error: 'allow' })
  + C.upstream('live', 'chat', upUrl, { api_key: null })
  + C.upstream('dead', 'chat', `http://127.0.0.1:${deadPort}`, { api_key: null, eject_after: 1 })
  + C.route('live-*', { upstream: 'live' })
  + C.route('dead-*', { upstream: 'dead' })
  + C.team('platform')
  + C.price('*', { input: 1, output: 2 })
  + C.key('team-a', { secret: 'sk-dash', team: 'platform', rpm: 100000 })
  + C.trace({ endpoint: trace });

/** /metrics -> Map(family -> Set(label names)); families from # TYPE. */
function families(text) {
  const fam = new Map();
  const types = new Map();
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) {
      types.set(t[1], t[2]);
      if (!fam.has(t[1])) fam.set(t[1], null);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? /.exec(line);
    if (!m) continue;
    let name = m[1];
    const base = name.replace(/_(bucket|sum|count)$/, '');
    if (base !== name && types.get(base) === 'histogram') name = base;
    const labels = new Set([...(m[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)].map((x) => x[1]));
    const had = fam.get(name) || new Set();
    for (const l of labels) had.add(l);
    fam.set(name, had);
  }
  return { fam, types };
}

async function scrape(px) {
  const res = await fetch(`${px.url}/metrics`, { headers: { authorization: 'Bearer sk-dash' } });
  assert.equal(res.status, 200);
  return res.text();
}

// the status of a request of key sk-dash
const send = async (px, pathName, body, headers = {}) =>
  (await post(px.url, pathName, body, { authorization: 'Bearer sk-dash', ...headers })).status;

test('every series the dashboard queries is one proxai exports, with its labels', async () => {
  const up = await startFaultUpstream();
  const col = await startCollector();
  const deadPort = await freePort();
  const redisPort = await freePort();
  const a = await startProxai(config(up.url, deadPort, redisPort, col.url));
  const b = await startProxai(config(up.url, deadPort, redisPort, `http://127.0.0.1:${deadPort}/v1/traces`));
  const seen = new Map();
  const types = new Map();
  try {
    for (const px of [a, b]) {
      up.script(chatJson(), chatJson());
      assert.equal(await send(px, '/v1/chat/completions', { model: 'live-1', messages: [{ role: 'user', content: 'hi' }] }), 200);
      // an Anthropic client with top_k: dropped on the way to Chat (proxai_lossy_fields_total)
      assert.equal(await send(px, '/v1/messages', { model: 'live-1', max_tokens: 10, top_k: 3, messages: [{ role: 'user', content: 'hi' }] }, { 'anthropic-version': '2023-06-01' }), 200);
      assert.equal(await send(px, '/v1/chat/completions', { model: 'dead-1', messages: [{ role: 'user', content: 'hi' }] }), 502);
    }
    await waitFor(async () => /proxai_trace_spans_exported_total \d/.test(await scrape(a)), { timeout: 15000, what: 'an export' });
    await waitFor(async () => /proxai_trace_spans_dropped_total\{reason="export_failed"\}/.test(await scrape(b)), { timeout: 15000, what: 'a failed export' });
    for (const px of [a, b]) {
      const f = families(await scrape(px));
      for (const [k, v] of f.types) types.set(k, v);
      for (const [k, v] of f.fam) {
        const had = seen.get(k) || null;
        if (v) seen.set(k, new Set([...(had || []), ...v]));
        else if (!seen.has(k)) seen.set(k, null);
      }
    }
  } finally {
    await a.stop();
    await b.stop();
    await up.close();
    await col.close();
  }
  let queries = 0;
  for (const p of dash.panels.filter((x) => x.type !== 'row')) {
    for (const t of p.targets) {
      queries++;
      const where = `panel '${p.title}': ${t.expr}`;
      const names = [...new Set([...t.expr.matchAll(/\b(proxai_[a-z0-9_]+)\b/g)].map((m) => m[1]))];
      assert.ok(names.length > 0, `${where}: names no proxai series`);
      const allowed = new Set();
      for (const n of names) {
        const base = n.replace(/_(bucket|sum|count)$/, '');
        const fam = types.get(base) === 'histogram' ? base : n;
        assert.ok(types.has(fam), `${where}: ${n} is not a series proxai exports`);
        if (fam !== n) assert.equal(types.get(fam), 'histogram');
        const labels = seen.get(fam);
        assert.ok(labels, `${where}: ${fam} had no series after the traffic (its labels are unknown)`);
        for (const l of labels) allowed.add(l);
        if (n.endsWith('_bucket')) allowed.add('le');
      }
      const used = new Set();
      for (const m of t.expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)) for (const l of m[1].split(',').map((s) => s.trim()).filter(Boolean)) used.add(l);
      for (const m of t.expr.matchAll(/\{([^}]*)\}/g)) for (const x of m[1].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g)) used.add(x[1]);
      for (const l of used) assert.ok(allowed.has(l), `${where}: label '${l}' is not one of ${[...allowed].join(', ')}`);
      // counters are read as rates, gauges as they are
      for (const n of names) {
        const fam = n.replace(/_(bucket|sum|count)$/, '');
        const type = types.get(types.get(fam) === 'histogram' ? fam : n);
        if (type === 'counter' || type === 'histogram') assert.match(t.expr, new RegExp(`(rate|increase)\\(${n}\\b`), `${where}: ${n} is a ${type}`);
      }
    }
  }
  assert.ok(queries >= 15, `${queries} queries`);
}, { timeout: 90000 });

await run();
