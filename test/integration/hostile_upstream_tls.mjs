// hostile_upstream.mjs with its fault upstream inside TLS (certificates made
// at test time, trusted through OpenSSL's SSL_CERT_FILE): the same framing,
// header, encoding, stream and retry-after rules on the built-in TLS lane.
import { makeCerts } from './lib/tlscerts.mjs';

const c = makeCerts();
process.env.FAULTUP_TLS_CERT = c.good.cert;
process.env.FAULTUP_TLS_KEY = c.good.key;
process.env.SSL_CERT_FILE = c.caA; // proxai inherits it: its default trust store
await import('./hostile_upstream.mjs');
