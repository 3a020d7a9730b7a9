// Test certificates made at test time with the openssl CLI in a temporary
// directory (never committed): two CAs, leaves signed by the first for
// localhost / 127.0.0.1 (valid, wrong name, expired), one signed by the
// second, and a self-signed leaf. Returns their PEM file paths.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const SAN = 'subjectAltName=DNS:localhost,IP:127.0.0.1';

export function makeCerts() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-certs-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const f = (n) => path.join(dir, n);
  const ssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  const ca = (name) => {
    ssl('req', '-x509', ...key, '-keyout', f(`${name}.key`), '-out', f(`${name}.pem`), '-days', '30',
      '-subj', `/CN=proxai test ${name}`, '-addext', 'basicConstraints=critical,CA:TRUE',
      '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
    fs.mkdirSync(f(`${name}.db`));
    fs.writeFileSync(f(`${name}.db/index.txt`), '');
    fs.writeFileSync(f(`${name}.db/serial`), '1000\n');
    fs.writeFileSync(f(`${name}.cnf`), `[ca]
default_ca = d
[d]
database = ${f(`${name}.db/index.txt`)}
new_certs_dir = ${f(`${name}.db`)}
serial = ${f(`${name}.db/serial`)}
default_md = sha256
policy = p
copy_extensions = copy
unique_subject = no
x509_extensions = leaf
[p]
commonName = supplied
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
`);
  };
  const leaf = (name, signer, { san = SAN, cn = 'localhost', dates = ['-days', '30'] } = {}) => {
    ssl('req', '-new', ...key, '-keyout', f(`${name}.key`), '-out', f(`${name}.csr`), '-subj', `/CN=${cn}`, '-addext', san);
    ssl('ca', '-batch', '-notext', '-config', f(`${signer}.cnf`), '-cert', f(`${signer}.pem`), '-keyfile', f(`${signer}.key`),
      '-in', f(`${name}.csr`), '-out', f(`${name}.pem`), ...dates);
  };
  ca('caA');
  ca('caB');
  leaf('good', 'caA');
  leaf('otherca', 'caB');
  leaf('wrongname', 'caA', { san: 'subjectAltName=DNS:other.example', cn: 'other.example' });
  leaf('expired', 'caA', { dates: ['-startdate', '20200101000000Z', '-enddate', '20200201000000Z'] });
  ssl('req', '-x509', ...key, '-keyout', f('self.key'), '-out', f('self.pem'), '-days', '30', '-subj', '/CN=localhost', '-addext', SAN);
  const pair = (n) => ({ cert: f(`${n}.pem`), key: f(`${n}.key`) });
  return {
    dir,
    caA: f('caA.pem'),
    caB: f('caB.pem'),
    good: pair('good'),
    otherca: pair('otherca'),
    wrongname: pair('wrongname'),
    expired: pair('expired'),
    self: pair('self'),
  };
}
