// The README's opening example is examples/detect-and-run.mjs, and it runs
// as written against a live daemon.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { packageDir, startDaemon, tempDir } from './harness.mjs';

test('the README opens with the detect-and-run example, ten lines, and it runs as written', async (t) => {
  const readme = readFileSync(join(packageDir, 'README.md'), 'utf8');
  const block = /```js\n([\s\S]*?)```/.exec(readme)?.[1];
  const file = readFileSync(join(packageDir, 'examples', 'detect-and-run.mjs'), 'utf8');
  assert.equal(block, file, 'the README block and examples/detect-and-run.mjs differ');
  assert.ok(readme.indexOf('```js') < readme.indexOf('\n## '), 'the example comes before the first section');
  assert.equal(file.trimEnd().split('\n').length, 10);

  const d = await startDaemon(t);
  const work = tempDir(t);
  const { stdout } = await promisify(execFile)(process.execPath, [join(packageDir, 'examples', 'detect-and-run.mjs')], {
    cwd: work, env: { ...process.env, CARD_HOME: d.home }, timeout: 30_000,
  });
  assert.equal(stdout, 'PONG from fake anthropic\nclaude-code: succeeded\n');
});
