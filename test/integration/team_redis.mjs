await import('./lib/harness.mjs').then((h) => { h.test('placeholder', () => {}); return h.run(); });
