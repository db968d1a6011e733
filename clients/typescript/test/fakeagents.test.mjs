// The client against `card serve --fake-agents`, as an app's own tests run
// it: card's fake agents need no account and no agent CLI, and a marker in
// the prompt picks what a turn does (docs/testing-your-app.md). These are
// the client's behaviours that no agent in particular owns; the ones that
// hang on Claude Code's own wire stay on its stand-ins in the other files.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@card-dev/client';
import { startFakeAgents, tempDir } from './harness.mjs';

// The smallest PNG (one transparent pixel): 68 bytes.
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nGNgAAIAAAUAAXpeqz8AAAAASUVORK5CYII=';

/** A daemon with the fake agents, a client of it, and a project dir to run in. */
async function setup(t) {
  const d = await startFakeAgents(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  return { d, client, work: tempDir(t) };
}

test('the daemon serves the two fake agents as runnable, and no agent CLI of the machine', async (t) => {
  const { client } = await setup(t);
  const agents = await client.agentsDetect({});
  const runnable = agents.filter((a) => a.execution?.state === 'runnable').map((a) => `${a.id}:${a.display_name}`);
  assert.deepEqual(runnable.sort(), ['fake-2:Fake Agent 2', 'fake:Fake Agent']);
});

test('a run on a fake agent streams its answer in deltas and ends with its usage and cost', async (t) => {
  const { client, work } = await setup(t);
  const run = client.invoke({ id: 'fake', task: 'say pong', cwd: work, permission_mode: 'ask' });
  const events = [];
  for await (const ev of run) events.push(ev);
  assert.equal(events[0].kind, 'session');
  assert.equal(events.at(-1).kind, 'done');
  const texts = events.filter((ev) => ev.kind === 'text');
  assert.ok(texts.length > 1 && texts.every((ev) => ev.delta === true), 'the answer came in several deltas');
  const answer = texts.map((ev) => ev.text).join('');
  assert.equal(answer, 'You said: "say pong". This is the first turn of this session.');
  assert.deepEqual(events.filter((ev) => ev.kind === 'usage').at(-1)?.usage, { input_tokens: 100, output_tokens: 50, cached_input_tokens: 0 });
  assert.equal(run.result?.status, 'succeeded');
  assert.equal(run.result?.answer, answer);
  assert.equal(run.result?.usage.input_tokens, 100);
  assert.equal(run.result?.usage.output_tokens, 50);
  assert.equal(run.result?.total_cost_usd, 0.01);
  assert.equal((await client.runsGet({ run_id: run.runId })).status, 'succeeded');
});

test('a session on a fake agent remembers across turns what an earlier one asked it to', async (t) => {
  const { client, work } = await setup(t);
  const { session_id } = await client.sessionsStart({ id: 'fake', cwd: work, permission_mode: 'ask' });
  const answers = [];
  for (const task of ['Remember the word pelican.', 'Which word?']) {
    const turn = client.prompt({ session_id, task });
    let text = '';
    for await (const ev of turn) if (ev.kind === 'text') text += ev.text ?? '';
    answers.push(text);
  }
  assert.match(answers[0], /This is the first turn of this session\./);
  assert.match(answers[1], /You asked me to remember: the word pelican\./);
  assert.match(answers[1], /1 earlier turn/);
  await client.sessionsClose({ session_id });
});

for (const [decision, said] of /** @type {const} */ ([['allow', /was allowed/], ['deny', /was denied/]])) {
  test(`an ask turn's question reaches onApprove, and the fake agent is told ${decision}`, async (t) => {
    const { client, work } = await setup(t);
    const questions = [];
    const run = client.invoke(
      { id: 'fake', task: '[ask] edit it', cwd: work, permission_mode: 'ask' },
      { onApprove: (q) => { questions.push(q); return { decision }; } },
    );
    const kinds = [];
    for await (const ev of run) {
      kinds.push(ev.kind);
      if (ev.kind === 'approval_decided') assert.deepEqual([ev.approval?.decision, ev.approval?.by], [decision, 'client']);
    }
    assert.equal(questions.length, 1);
    assert.match(questions[0].summary, /^edit .*\/fake-agent-edit\.txt$/);
    assert.equal(questions[0].run_id, run.runId);
    assert.equal(questions[0].tool?.name, 'edit');
    for (const k of ['tool_use', 'approval_requested', 'approval_decided', 'tool_result']) assert.ok(kinds.includes(k), `${k} in ${kinds}`);
    assert.equal(run.result?.status, 'succeeded');
    assert.match(run.result?.answer ?? '', said);
    assert.equal(existsSync(join(work, 'fake-agent-edit.txt')), false, 'the fake agent writes no file');
  });
}

test('aborting the signal cancels a slow turn: the loop throws the reason and the run is recorded cancelled', async (t) => {
  const { client, work } = await setup(t);
  const ac = new AbortController();
  const run = client.invoke({ id: 'fake', task: '[slow] take your time', cwd: work, permission_mode: 'ask' }, { signal: ac.signal });
  const seen = [];
  const started = Date.now();
  await assert.rejects(async () => {
    for await (const ev of run) {
      seen.push(ev.kind);
      if (ev.kind === 'text') ac.abort(); // the first of its ten half-second chunks
    }
  }, { name: 'AbortError' });
  // A chunk already on its way may still come, then the run's end; not
  // the rest of the turn.
  assert.deepEqual(seen.slice(0, 2), ['session', 'text']);
  const after = seen.slice(2).filter((k) => k !== 'text');
  assert.ok(after.length === 0 || (after.length === 1 && seen.at(-1) === 'error'), `nothing but the run's end after the abort: ${seen}`);
  assert.ok(seen.filter((k) => k === 'text').length < 5, `the turn's ten chunks were cut short: ${seen}`);
  if (run.result) assert.equal(run.result.status, 'cancelled');
  assert.ok(Date.now() - started < 4000, 'the turn was not left to run its 4.5 s');
  const rec = await client.runsGet({ run_id: run.runId });
  assert.equal(rec.status, 'cancelled');
});

for (const [marker, kind] of [['[401]', 'auth'], ['[429]', 'rate_limit']]) {
  test(`a ${marker} turn ends the loop with an error event and a failed run of kind ${kind}`, async (t) => {
    const { client, work } = await setup(t);
    const run = client.invoke({ id: 'fake', task: `${marker} hello`, cwd: work, permission_mode: 'ask' });
    const kinds = [];
    for await (const ev of run) kinds.push(ev.kind);
    assert.deepEqual(kinds, ['session', 'error']);
    assert.equal(run.result?.status, 'failed');
    assert.equal(run.result?.is_error, true);
    assert.equal(run.result?.error?.kind, kind);
    assert.equal((await client.runsGet({ run_id: run.runId })).status, 'failed');
  });
}

test('an image the client attaches reaches the fake agent, which says what it got', async (t) => {
  const { client, work } = await setup(t);
  const run = client.invoke({
    id: 'fake', task: '[image] what is this?', cwd: work, permission_mode: 'ask',
    attachments: [{ mime_type: 'image/png', data_b64: png, name: 'pixel.png' }],
  });
  for await (const _ of run) { /* to the end */ }
  assert.equal(run.result?.status, 'succeeded');
  assert.match(run.result?.answer ?? '', /^I got 1 image: image\/png of 68 bytes\./);
});

/** The pids of every process under root, read from /proc. */
function descendants(root) {
  const parent = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // The command name is in parentheses and may hold spaces; ppid is the second field after it.
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* gone */ }
  }
  const out = [];
  const walk = (pid) => { for (const [child, ppid] of parent) if (ppid === pid) { out.push(child); walk(child); } };
  walk(root);
  return out;
}

test('no program but card runs under the daemon while a fake agent works', { skip: process.platform !== 'linux' && 'reads /proc' }, async (t) => {
  const { d, client, work } = await setup(t);
  const { session_id } = await client.sessionsStart({ id: 'fake-2', cwd: work, permission_mode: 'ask' });
  const turn = client.prompt({ session_id, task: '[slow] [tool] take your time' });
  let under = [];
  for await (const ev of turn) {
    if (ev.kind === 'text' && under.length === 0) {
      under = descendants(d.pid).map((pid) => { try { return readlinkSync(`/proc/${pid}/exe`); } catch { return `${pid}: gone`; } });
      await client.sessionsCancel({ session_id });
    }
  }
  assert.ok(under.length > 0, 'the fake agent runs as a process under the daemon');
  assert.deepEqual([...new Set(under)], [d.card]);
  await client.sessionsClose({ session_id });
});
