// An OTLP/HTTP trace receiver for tests. It decodes what proxai POSTs by the
// official opentelemetry-proto definitions (the protobufjs module that
// @opentelemetry/otlp-transformer generates from them), never by proxai's
// code: the JSON is read into ExportTraceServiceRequest, encoded to protobuf
// and decoded back, and must come out equal to what was sent, so a field the
// definitions do not have, or of the wrong type, fails the test.
//
//   const col = await startCollector();            // answers 200
//   const col = await startCollector({ hang: true }); // accepts, never answers
//   col.spans -> [{ traceId, spanId, parentSpanId, name, kind, ..., attrs }]
import assert from 'node:assert/strict';
import http from 'node:http';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root.js');
const Req = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

// OTLP/JSON writes these bytes fields in hex (not base64 as proto3 JSON).
const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId']);

function mapIds(v, fn) {
  if (Array.isArray(v)) return v.map((x) => mapIds(x, fn));
  if (v && typeof v === 'object' && !Buffer.isBuffer(v) && !(v instanceof Uint8Array)) {
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = ID_FIELDS.has(k) ? fn(x) : mapIds(x, fn);
    return o;
  }
  return v;
}

/** Decodes one OTLP/JSON body by the official definitions; throws unless
 *  it round-trips through the protobuf encoding unchanged. */
export function decodeOtlpJson(text) {
  const json = JSON.parse(text);
  const withBytes = mapIds(json, (h) => {
    assert.match(h, /^[0-9a-f]*$/, `an id is not lower-case hex: ${h}`);
    return Buffer.from(h, 'hex');
  });
  const err = Req.verify(Req.fromObject(withBytes));
  assert.equal(err, null, `not an ExportTraceServiceRequest: ${err}`);
  const wire = Req.encode(Req.fromObject(withBytes)).finish();
  const back = Req.toObject(Req.decode(wire), { longs: String, enums: Number, bytes: Buffer });
  const backJson = mapIds(back, (b) => Buffer.from(b).toString('hex'));
  assert.deepEqual(JSON.parse(JSON.stringify(backJson)), json, 'the body does not round-trip through the official definitions (an unknown or mistyped field)');
  return backJson;
}

function anyValue(v) {
  if ('stringValue' in v) return v.stringValue;
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return v.doubleValue;
  if ('boolValue' in v) return v.boolValue;
  if ('arrayValue' in v) return (v.arrayValue.values || []).map(anyValue);
  throw new Error(`unexpected AnyValue ${JSON.stringify(v)}`);
}

/** Starts a collector on 127.0.0.1. opts.hang: accept and never answer;
 *  opts.status: the status to answer (default 200). */
export async function startCollector({ hang = false, status = 200 } = {}) {
  const bodies = [];
  const spans = [];
  const resources = [];
  const errors = [];
  const pending = new Set();
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (d) => chunks.push(d));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      bodies.push({ path: req.url, headers: req.headers, text });
      try {
        assert.equal(req.method, 'POST');
        assert.match(req.headers['content-type'] || '', /^application\/json/);
        const msg = decodeOtlpJson(text);
        for (const rs of msg.resourceSpans || []) {
          resources.push(Object.fromEntries((rs.resource?.attributes || []).map((a) => [a.key, anyValue(a.value)])));
          for (const ss of rs.scopeSpans || []) {
            for (const s of ss.spans || []) {
              spans.push({ ...s, scope: ss.scope, attrs: Object.fromEntries((s.attributes || []).map((a) => [a.key, anyValue(a.value)])) });
            }
          }
        }
      } catch (e) {
        errors.push(e);
      }
      if (hang) {
        pending.add(res);
        return;
      }
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = server.address().port;
  return {
    port,
    url: `http://127.0.0.1:${port}/v1/traces`,
    bodies,
    spans,
    resources,
    errors,
    close: async () => {
      for (const r of pending) r.destroy();
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
