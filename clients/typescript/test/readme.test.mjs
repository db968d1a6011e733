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

// The README is read on npm's page and in node_modules, where the
// repository around the package is not: a link leads out of the package
// only as an absolute URL, and one inside it to a file the package ships.
test('the README links only to what the packed package has, or by absolute URL', () => {
  const readme = readFileSync(join(packageDir, 'README.md'), 'utf8').replace(/```[\s\S]*?```/g, '');
  const pkg = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
  const links = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
  assert.ok(links.length > 0);
  for (const link of links) {
    if (/^https?:\/\//.test(link) || link.startsWith('#')) continue;
    const path = link.split('#')[0];
    assert.ok(!path.startsWith('..') && !path.startsWith('/'), `${link} leads out of the package`);
    assert.ok(pkg.files.some((/** @type {string} */ f) => path === f || path.startsWith(`${f}/`)), `${link} is not in package.json's files`);
  }
});
