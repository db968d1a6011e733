// `npm test`'s runner: builds card and the asking stand-in once for every
// test file (node --test runs each file in a process of its own), then runs
// them one file at a time, since each starts its own daemons.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const dir = mkdtempSync(join(tmpdir(), 'card-ts-bin-'));
process.env.CARD_TEST_BIN_DIR = dir;
const { binaries } = await import('./harness.mjs');
const t0 = Date.now();
binaries();
console.log(`built card and the stand-in in ${Date.now() - t0} ms`);
const here = new URL('.', import.meta.url).pathname;
const files = process.argv.slice(2).length ? process.argv.slice(2) : readdirSync(here).filter((f) => f.endsWith('.test.mjs')).sort().map((f) => join(here, f));
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', '--test-timeout=60000', ...files], { stdio: 'inherit', env: process.env });
rmSync(dir, { recursive: true, force: true });
process.exit(r.status ?? 1);
