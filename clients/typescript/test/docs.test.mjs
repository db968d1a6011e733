// docs/testing-your-app.md shows an app's test file against card's fake
// agents; it runs here as written, so what the page tells app authors to
// copy works with this package and this card.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { binaries, packageDir, repoRoot, tempDir } from './harness.mjs';

test('the TypeScript test file of docs/testing-your-app.md passes as written', async (t) => {
  const page = readFileSync(join(repoRoot, 'docs', 'testing-your-app.md'), 'utf8');
  const section = page.slice(page.indexOf("## From a TypeScript app's tests"));
  const block = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block?.includes("from '@card-dev/client'"), 'the section has the test file');
  // An app's directory, with the package installed as npm links it.
  const app = tempDir(t, 'card-ts-app-');
  mkdirSync(join(app, 'node_modules', '@card-dev'), { recursive: true });
  symlinkSync(packageDir, join(app, 'node_modules', '@card-dev', 'client'), 'dir');
  writeFileSync(join(app, 'package.json'), '{ "type": "module" }\n');
  writeFileSync(join(app, 'app.test.mjs'), block);
  // Without this runner's NODE_TEST_CONTEXT, which would make the inner
  // runner report to this one instead of printing its results.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const { stdout } = await promisify(execFile)(process.execPath, ['--test', '--test-reporter=tap', 'app.test.mjs'], {
    cwd: app, env: { ...env, CARD_BIN: binaries().card }, timeout: 50_000,
  }).catch((err) => assert.fail(`the page's test file failed:\n${err.stdout}\n${err.stderr}`));
  assert.match(stdout, /^# pass 2$/m);
  assert.match(stdout, /^# fail 0$/m);
  assert.match(stdout, /was denied/, 'the denied turn\'s text was written out');
});
