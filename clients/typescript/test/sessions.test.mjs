// Sessions as async iterables: a turn's events from client.prompt, the
// session's across turns from followSession, resumed after the daemon is
// killed and restarted.
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '@card-dev/client';
import { binaries, scriptClaude, sleep, startDaemon, tempDir } from './harness.mjs';

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

// A window that reloads mid-turn keeps runId and lastSeq and takes the
// turn up again where its loop was.
test('a prompt says its run and last seq, and following the run from there gives the rest of the turn', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  const { session_id } = await client.sessionsStart({ id: 'claude-code', cwd: d.home });
  const turn = client.prompt({ session_id, task: 'one' });
  assert.equal(turn.runId, undefined);
  assert.equal(turn.lastSeq, 0);
  const seen = [];
  for await (const ev of turn) {
    seen.push(ev);
    assert.equal(turn.runId, ev.run_id, 'runId is the run of the events handed out');
    assert.equal(turn.lastSeq, ev.seq, 'lastSeq is the last one handed out');
    if (seen.length === 2) break; // the window reloads here
  }
  const runId = turn.runId;
  const rest = [];
  for await (const ev of client.follow(runId, { afterSeq: turn.lastSeq })) rest.push(ev);
  assert.deepEqual([...seen, ...rest].map((ev) => ev.kind), ['session', 'text', 'usage', 'done']);
  assert.deepEqual(rest.map((ev) => ev.seq), [3, 4], 'nothing handed out twice, nothing lost');
  assert.equal(rest.at(-1).result.run_id, runId);
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

test('a session stream the daemon cuts off behind a long turn takes the session up again: every event once, in order', async (t) => {
  // A Claude Code that answers BIG with about 24 MB of whole messages
  // (more than the sockets between the daemon and a client that stopped
  // reading hold), and anything else as the script stand-in does.
  const dir = tempDir(t);
  const msg = JSON.stringify({ type: 'assistant', message: { id: 'm', type: 'message', role: 'assistant', model: 'claude-opus-4-8', content: [{ type: 'text', text: 'x'.repeat(16000) }] } });
  const big = join(dir, 'big.jsonl');
  writeFileSync(big, `${msg}\n`.repeat(1500) + '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s","usage":{"input_tokens":1,"output_tokens":1}}\n');
  const agent = join(dir, 'claude');
  writeFileSync(agent, `#!/bin/sh
case "$1" in --version|auth) exec sh ${scriptClaude} "$@" ;; esac
task=$(cat)
case "$task" in *BIG*) exec cat ${big} ;; esac
printf '%s' "$task" | exec sh ${scriptClaude}
`, { mode: 0o755 });
  const d = await startDaemon(t, { agent, config: 'login_shell_path = false\nmax_subscriber_queue_bytes = 65536\n' });
  const slow = await connect({ home: d.home });
  const other = await connect({ home: d.home });
  t.after(() => { slow.close(); other.close(); });
  const ended = [];
  slow.on('runs.subscription_ended', (p) => ended.push(p));
  const { session_id } = await other.sessionsStart({ id: 'claude-code', cwd: d.home });
  const it = slow.followSession(session_id)[Symbol.asyncIterator]();
  // A first turn, read through, so the stream is subscribed.
  for await (const ev of other.prompt({ session_id, task: 'hello' })) void ev;
  const seqs = [];
  for (;;) {
    const { value } = await it.next();
    seqs.push(value.seq);
    if (value.event.kind === 'done') break;
  }
  // The slow client stops reading while the long turn runs to its end.
  const resume = slow._pauseReading();
  let bigRun = '';
  for await (const ev of other.prompt({ session_id, task: 'BIG' })) bigRun = ev.run_id;
  resume();
  for (;;) {
    const { value } = await it.next();
    seqs.push(value.seq);
    if (value.event.kind === 'done') break;
  }
  await it.return();
  assert.deepEqual(seqs, Array.from({ length: seqs.length }, (_, i) => i + 1), 'every session event once, in order');
  const { next_seq } = await other.sessionsGet({ session_id });
  assert.equal(seqs.at(-1), next_seq - 1);
  assert.equal(ended.length > 0, true, 'the daemon cut the slow stream off');
  assert.equal(ended[0].session_id, session_id);
  assert.equal(ended[0].run_id, bigRun);
});
