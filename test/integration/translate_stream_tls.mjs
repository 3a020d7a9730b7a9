// translate_stream.mjs against an https:// upstream: the C mock behind a TLS
// front (lib/harness.mjs, MOCK_TLS_CERT), certificates made at test time and
// trusted through OpenSSL's SSL_CERT_FILE, on the built-in TLS lane.
import { makeCerts } from './lib/tlscerts.mjs';

const c = makeCerts();
process.env.MOCK_TLS_CERT = c.good.cert;
process.env.MOCK_TLS_KEY = c.good.key;
process.env.SSL_CERT_FILE = c.caA; // proxai inherits it: its default trust store
// OpenSSL frees a record buffer after each record (SSL_MODE_RELEASE_BUFFERS):
// under AddressSanitizer the freed buffers fill its quarantine (256 MiB by
// default), which the RSS bounds would read as growth. Keep it small.
if (process.env.PROXAI_SANITIZED && !/quarantine_size_mb/.test(process.env.ASAN_OPTIONS || '')) {
  process.env.ASAN_OPTIONS = [process.env.ASAN_OPTIONS, 'quarantine_size_mb=16'].filter(Boolean).join(':');
}
await import('./translate_stream.mjs');
