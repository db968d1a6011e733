// The committed types are the daemon's: generated from the rpc.discover of
// a card built from this repository, they must equal src/generated.ts. When
// this fails, run `npm run gen` and commit the result.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { discover, generate, generatedPath } from '../scripts/gen.mjs';
import { startDaemon } from './harness.mjs';

test('src/generated.ts is what the daemon of this repository describes', async (t) => {
  const d = await startDaemon(t);
  const doc = await discover(d.home);
  const want = generate(doc);
  const have = readFileSync(generatedPath, 'utf8');
  if (have !== want) {
    const a = have.split('\n');
    const b = want.split('\n');
    const i = a.findIndex((l, n) => l !== b[n]);
    assert.fail(`src/generated.ts differs from the daemon's schema from line ${i + 1}:\n  committed: ${a[i]}\n  daemon:    ${b[i]}\nrun \`npm run gen\` in clients/typescript and commit the result`);
  }
});

test('every event kind the daemon lists is a member of the AgentEvent union', async (t) => {
  const d = await startDaemon(t);
  const doc = await discover(d.home);
  const kinds = doc.components.schemas.AgentEvent.properties.kind['x-enum'];
  const { agentEventKinds } = await import('@card-dev/client');
  assert.deepEqual([...agentEventKinds], kinds);
  for (const k of kinds) assert.match(readFileSync(generatedPath, 'utf8'), new RegExp(`kind: "${k}";`));
});

test('the generator refuses an event field that names no kinds, or a kind the list lacks', async (t) => {
  const d = await startDaemon(t);
  const doc = await discover(d.home);
  const untagged = structuredClone(doc);
  untagged.components.schemas.AgentEvent.properties.future_field = { type: 'array', items: { type: 'string' } };
  assert.throws(() => generate(untagged), /AgentEvent\.future_field is optional but names no kinds \(x-kinds\)/);
  const unlisted = structuredClone(doc);
  unlisted.components.schemas.AgentEvent.properties.future_field = { type: 'array', 'x-kinds': 'future_kind' };
  assert.throws(() => generate(unlisted), /AgentEvent\.future_field names kind future_kind, which kind's x-enum does not list/);
});
