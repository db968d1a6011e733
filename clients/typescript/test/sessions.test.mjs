// Sessions as async iterables: a turn's events from client.prompt, the
// session's across turns from followSession, resumed after the daemon is
// killed and restarted.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@card-dev/client';
import { binaries, sleep, startDaemon, tempDir } from './harness.mjs';

test('each prompt yields its own turn, and the session\'s stream has every turn in one gap-free seq', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  const { session_id } = await client.sessionsStart({ id: 'claude-code', cwd: d.home });
  for (const task of ['one', 'two']) {
    const turn = client.prompt({ session_id, task });
    const kinds = [];
    for await (const ev of turn) kinds.push(ev.kind);
    assert.deepEqual(kinds, ['session', 'text', 'usage', 'done'], task);
    assert.equal((await turn.result).turn, task === 'one' ? 1 : 2);
  }
  await client.sessionsClose({ session_id });
  // A closed session's history replays and the loop ends.
  const all = [];
  for await (const ev of client.followSession(session_id)) all.push(`${ev.turn}:${ev.seq}:${ev.event.kind}`);
  assert.deepEqual(all, ['1:1:session', '1:2:text', '1:3:usage', '1:4:done', '2:5:session', '2:6:text', '2:7:usage', '2:8:done']);
});

test('a prompt sent while a turn runs waits in the queue, and its iterator yields its turn once it runs', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  const { session_id } = await client.sessionsStart({ id: 'claude-code', cwd: d.home });
  const first = client.prompt({ session_id, task: 'SLOW: take your time.' });
  assert.equal((await first.result).queued, false);
  const second = client.prompt({ session_id, task: 'quick' });
  const res = await second.result;
  assert.equal(res.queued, true);
  assert.equal(res.turn, 2);
  await client.sessionsCancel({ session_id }); // ends turn one; turn two runs
  const kinds = [];
  for await (const ev of second) kinds.push(ev.kind);
  assert.equal(kinds.at(-1), 'done');
});

test('an ask-mode turn\'s question goes to the prompt\'s approver', async (t) => {
  const d = await startDaemon(t, { agent: binaries().asking });
  const work = tempDir(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  const { session_id } = await client.sessionsStart({ id: 'claude-code', cwd: work, permission_mode: 'ask' });
  const asked = [];
  const turn = client.prompt({ session_id, task: 'TOOL Bash {"command":"echo hi > s.txt"}' }, { onApprove: (q) => { asked.push(q.summary); return { decision: 'allow' }; } });
  for await (const _ of turn) { /* to the end */ }
  assert.deepEqual(asked, ['Bash: echo hi > s.txt']);
  assert.equal(existsSync(join(work, 's.txt')), true);
});

test('the daemon killed and restarted mid-turn: the session\'s stream goes on from the next seq', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home, reconnect: { initialDelayMs: 50, maxDelayMs: 500, giveUpAfterMs: 20_000 } });
  t.after(() => client.close());
  const { session_id } = await client.sessionsStart({ id: 'claude-code', cwd: d.home });
  const stream = client.followSession(session_id);
  await client.sessionsPrompt({ session_id, task: 'SLOW: take your time.' });
  const seen = [];
  for await (const ev of stream) {
    seen.push(`${ev.seq}:${ev.event.kind}`);
    if (ev.seq === 1) {
      await sleep(300);
      await d.stop('SIGKILL');
      await d.restart();
    }
    if (ev.event.kind === 'error' || ev.event.kind === 'done') {
      assert.equal(ev.event.kind === 'error' && ev.event.status, 'interrupted');
      break;
    }
  }
  assert.deepEqual(seen, ['1:session', '2:error']);
  // The conversation goes on after the restart.
  const kinds = [];
  for await (const ev of client.prompt({ session_id, task: 'again' })) kinds.push(ev.kind);
  assert.equal(kinds.at(-1), 'done');
});
