import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect, isCardError } from '@card-dev/client';
import { binaries, sleep, startDaemon, tempDir } from './harness.mjs';

test('a streamed run yields its events in seq order, the terminal one last, with the result', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  const heard = [];
  const off = client.on('agents.event', (ev) => heard.push(ev.seq));
  const run = client.invoke({ id: 'claude-code', task: 'Reply with PONG.', cwd: d.home });
  const kinds = [];
  let text = '';
  for await (const ev of run) {
    kinds.push(`${ev.seq}:${ev.kind}`);
    if (ev.kind === 'text') text += ev.text ?? '';
  }
  assert.deepEqual(kinds, ['1:session', '2:text', '3:usage', '4:done']);
  assert.deepEqual(heard, [1, 2, 3, 4], 'a listener hears every agents.event too');
  off();
  assert.equal(text, 'PONG from fake anthropic');
  assert.match(run.runId ?? '', /^run_\w+$/);
  assert.equal(run.result?.status, 'succeeded');
  assert.equal(run.result?.answer, 'PONG from fake anthropic');
});

test('a refused run throws a typed error from the loop', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  await assert.rejects(async () => {
    for await (const _ of client.invoke({ id: 'claude-code', task: 'x', cwd: d.home, invoked_by: 'claude-code' })) { /* none */ }
  }, (err) => {
    assert.ok(isCardError(err, 'guard_refused'), String(err));
    assert.equal(err.data.reason, 'cycle');
    assert.match(err.data.run_id ?? '', /^run_/);
    return true;
  });
});

for (const [decision, made] of [['allow', true], ['deny', false]]) {
  test(`an ask-mode question is answered ${decision} by the callback, and the agent is told`, async (t) => {
    const d = await startDaemon(t, { agent: binaries().asking });
    const work = tempDir(t);
    const client = await connect({ home: d.home });
    t.after(() => client.close());
    const questions = [];
    const run = client.invoke(
      { id: 'claude-code', task: 'TOOL Bash {"command":"echo hello > asked.txt"}', cwd: work, permission_mode: 'ask' },
      {
        onApprove: (q) => {
          questions.push(q);
          return decision === 'allow' ? { decision: 'allow' } : { decision: 'deny', message: 'Not today.' };
        },
      },
    );
    const kinds = [];
    for await (const ev of run) {
      kinds.push(ev.kind);
      if (ev.kind === 'approval_decided') {
        assert.equal(ev.approval?.decision, decision);
        assert.equal(ev.approval?.by, 'client');
      }
    }
    assert.equal(questions.length, 1);
    assert.equal(questions[0].summary, 'Bash: echo hello > asked.txt');
    assert.equal(questions[0].run_id, run.runId);
    assert.ok(kinds.includes('approval_requested') && kinds.includes('approval_decided'), kinds.join(' '));
    assert.equal(existsSync(join(work, 'asked.txt')), made);
    assert.equal(run.result?.status, 'succeeded');
    if (!made) assert.match(run.result?.answer ?? '', /Not today\./);
  });
}

test('a question left to another client: this one never answers, the client that follows the run does once the starter is gone', async (t) => {
  const d = await startDaemon(t, { agent: binaries().asking });
  const work = tempDir(t);
  const starter = await connect({ home: d.home });
  const other = await connect({ home: d.home, onApprove: () => ({ decision: 'allow' }) });
  t.after(() => { starter.close(); other.close(); });
  const run = starter.invoke({ id: 'claude-code', task: 'TOOL Bash {"command":"echo hi > other.txt"}', cwd: work, permission_mode: 'ask' }, { onApprove: 'elsewhere' });
  const followed = other.follow(await run.id());
  for await (const ev of run) {
    if (ev.kind === 'approval_requested') break; // the app's window closes with the question open
  }
  starter.close();
  let decided;
  for await (const ev of followed) if (ev.kind === 'approval_decided') decided = ev.approval;
  assert.equal(decided?.decision, 'allow');
  assert.equal(decided?.by, 'client');
  assert.equal(existsSync(join(work, 'other.txt')), true);
  assert.equal(followed.result?.status, 'succeeded');
});

test('the daemon killed and restarted mid-run: the iterator goes on from the next seq, nothing lost, nothing twice', async (t) => {
  const d = await startDaemon(t);
  let reconnected = 0;
  const client = await connect({ home: d.home, reconnect: { initialDelayMs: 50, maxDelayMs: 500, giveUpAfterMs: 20_000 }, onReconnect: () => reconnected++ });
  t.after(() => client.close());
  const run = client.invoke({ id: 'claude-code', task: 'SLOW: take your time.', cwd: d.home });
  const seqs = [];
  let last;
  for await (const ev of run) {
    seqs.push(ev.seq);
    last = ev;
    if (ev.seq === 1) {
      await sleep(300); // the event reaches the store
      await d.stop('SIGKILL');
      await d.restart();
    }
  }
  assert.equal(reconnected, 1);
  assert.deepEqual(seqs, [1, 2]);
  assert.equal(last.kind, 'error');
  assert.equal(last.status, 'interrupted');
  assert.equal(run.result?.status, 'interrupted');
});

test('a dropped socket mid-run: the client reconnects and the run streams on to its end', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home, reconnect: { initialDelayMs: 50 } });
  t.after(() => client.close());
  // TOOL makes a run of several events; drop the socket after the first.
  const run = client.invoke({ id: 'claude-code', task: 'TOOL then answer', cwd: d.home });
  const seqs = [];
  for await (const ev of run) {
    seqs.push(ev.seq);
    if (ev.seq === 1) client._dropSocket();
  }
  assert.deepEqual(seqs, seqs.map((_, i) => i + 1), 'every seq once, in order');
  assert.equal(run.result?.status, 'succeeded');
});

test('follow replays a finished run after a seq', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  const run = client.invoke({ id: 'claude-code', task: 'hello', cwd: d.home });
  const all = [];
  for await (const ev of run) all.push(ev.seq);
  const tail = [];
  for await (const ev of client.follow(run.runId, { afterSeq: 1 })) tail.push(ev.seq);
  assert.deepEqual(tail, all.slice(1));
});
