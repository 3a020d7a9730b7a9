// translate_parts.mjs against an https:// upstream: the body's parts sealed
// into TLS records by the built-in lane (the C mock behind a TLS front,
// lib/harness.mjs, MOCK_TLS_CERT; certificates made at test time and trusted
// through OpenSSL's SSL_CERT_FILE).
import { makeCerts } from './lib/tlscerts.mjs';

const c = makeCerts();
process.env.MOCK_TLS_CERT = c.good.cert;
process.env.MOCK_TLS_KEY = c.good.key;
process.env.SSL_CERT_FILE = c.caA; // proxai inherits it: its default trust store
await import('./translate_parts.mjs');
