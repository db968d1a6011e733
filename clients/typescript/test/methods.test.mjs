// Every method the daemon lists is called through its typed function
// against a live daemon, and the answer checked; the test fails when the
// daemon has a method this table does not call.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect, isCardError, methodAccess } from '@card-dev/client';
import { startDaemon, tempDir } from './harness.mjs';

/** @type {Record<string, (c: import('@card-dev/client').Client, ctx: any) => Promise<void>>} */
const calls = {
  'daemon.info': async (c, x) => {
    const info = await c.daemonInfo();
    assert.equal(info.protocol_version.split('.')[0], '1');
    assert.equal(info.home, x.home);
  },
  'rpc.discover': async (c) => {
    const doc = await c.rpcDiscover();
    assert.ok(doc.methods.some((m) => m.name === 'agents.invoke'));
  },
  'agents.detect': async (c) => {
    const specs = await c.agentsDetect({});
    const claude = specs.find((s) => s.id === 'claude-code');
    assert.equal(claude?.execution.state, 'runnable'); // typed from the schema: 'runnable' | 'unusable'
    assert.equal(claude?.version, '2.1.197');
  },
  'agents.detect_external': async (c) => { assert.ok((await c.agentsDetectExternal({})).some((s) => s.id === 'claude-code')); },
  'agents.list_external': async (c) => { assert.ok((await c.agentsListExternal({})).some((s) => s.id === 'claude-code')); },
  'agents.health_external': async (c) => {
    const one = await c.agentsHealthExternal({ id: 'claude-code' });
    assert.equal(Array.isArray(one) ? one[0]?.status : one.status, 'ready');
    const all = await c.agentsHealthExternal({});
    assert.ok(Array.isArray(all));
  },
  'agents.invoke': async (c, x) => {
    const res = await c.agentsInvoke({ id: 'claude-code', task: 'hello', cwd: x.home });
    assert.equal('answer' in res && res.answer, 'PONG from fake anthropic');
    x.runId = res.run_id;
  },
  'agents.invoke_external': async (c, x) => {
    const res = await c.agentsInvokeExternal({ id: 'claude-code', task: 'hello', cwd: x.home });
    assert.match(JSON.stringify(res), /PONG from fake anthropic/);
  },
  'agents.cancel': async (c, x) => {
    const acc = await c.agentsInvoke({ id: 'claude-code', task: 'SLOW', cwd: x.home, stream: true });
    const res = await c.agentsCancel({ run_id: acc.run_id });
    assert.equal(res.run_id, acc.run_id);
  },
  'agents.chat.cancel': async (c) => {
    const res = await c.agentsChatCancel({ session_id: 'chat-nothing-running' });
    assert.equal(typeof res.cancelled, 'boolean');
  },
  'agents.approval_decide': async (c, x) => {
    await assert.rejects(c.agentsApprovalDecide({ run_id: x.runId, request_id: 'apr_1', decision: 'allow' }),
      (e) => isCardError(e, 'approval_not_found') && e.data.run_id === x.runId);
  },
  'runs.list': async (c, x) => { assert.ok((await c.runsList({ limit: 10 })).some((r) => r.run_id === x.runId)); },
  'runs.get': async (c, x) => {
    assert.equal((await c.runsGet({ run_id: x.runId })).status, 'succeeded');
    await assert.rejects(c.runsGet({ run_id: 'run_nope' }), (e) => isCardError(e, 'run_not_found') && e.data.run_id === 'run_nope');
  },
  'runs.subscribe': async (c, x) => {
    const r = await c.runsSubscribe({ run_id: x.runId });
    assert.equal(r.live, false);
  },
  'runs.prune': async (c) => { assert.equal((await c.runsPrune({ dry_run: true })).dry_run, true); },
  'usage.summary': async (c) => { assert.ok(Array.isArray((await c.usageSummary({})).rows)); },
  'server.handshake': async (c) => { assert.ok((await c.serverHandshake({ client_version: 'ts-test' })).server_version); },
  'session.auth': async (c, x) => { assert.equal((await c.sessionAuth({ token: readFileSync(join(x.home, 'token'), 'utf8').trim() })).ok, true); },
  'substrate.info': async (c) => { assert.equal(typeof (await c.substrateInfo()).read_only, 'boolean'); },
  'substrate.run_command': async (c) => { assert.equal((await c.substrateRunCommand({ command: 'echo hi' })).stdout.trim(), 'hi'); },
  'substrate.write_text': async (c, x) => { await c.substrateWriteText({ path: join(x.work, 'a.txt'), content: 'hello' }); },
  'substrate.read_text': async (c, x) => { assert.equal((await c.substrateReadText({ path: join(x.work, 'a.txt') })).content, 'hello'); },
  'substrate.write_bytes': async (c, x) => { await c.substrateWriteBytes({ path: join(x.work, 'b.bin'), content_b64: Buffer.from([1, 2, 3]).toString('base64') }); },
  'substrate.read_bytes': async (c, x) => {
    assert.deepEqual([...Buffer.from((await c.substrateReadBytes({ path: join(x.work, 'b.bin') })).content_b64, 'base64')], [1, 2, 3]);
  },
  'substrate.path_state': async (c, x) => { assert.equal((await c.substratePathState({ path: join(x.work, 'a.txt') })).state, 'exists'); },
  'substrate.pty_start': async (c, x) => { x.pty = (await c.substratePtyStart({ command: 'cat' })).pid; assert.ok(x.pty > 0); },
  'substrate.pty_resize': async (c, x) => { assert.equal((await c.substratePtyResize({ pid: x.pty, rows: 30, cols: 100 })).ok, true); },
  'substrate.pty_input': async (c, x) => { assert.equal((await c.substratePtyInput({ pid: x.pty, data: 'ping\n' })).ok, true); },
  'substrate.pty_read': async (c, x) => {
    let out = '';
    for (let i = 0; i < 50 && !out.includes('ping'); i++) { out += (await c.substratePtyRead({ pid: x.pty })).data; await new Promise((r) => setTimeout(r, 20)); }
    assert.match(out, /ping/);
  },
  'substrate.pty_kill': async (c, x) => { assert.equal((await c.substratePtyKill({ pid: x.pty })).ok, true); },
  'sessions.start': async (c, x) => {
    const s = await c.sessionsStart({ id: 'claude-code', cwd: x.home });
    assert.equal(s.state, 'idle');
    x.session = s.session_id;
  },
  'sessions.prompt': async (c, x) => {
    const r = await c.sessionsPrompt({ session_id: x.session, task: 'SLOW: take your time.' });
    assert.equal(r.turn, 1);
    assert.match(r.run_id ?? '', /^run_/);
  },
  'sessions.steer': async (c, x) => {
    await assert.rejects(c.sessionsSteer({ session_id: x.session, task: 'and more' }), (e) => isCardError(e, 'steer_unsupported') && e.data.session_id === x.session);
  },
  'sessions.configure': async (c, x) => {
    const r = await c.sessionsConfigure({ session_id: x.session, model: 'claude-opus-4-8' });
    assert.equal(r.session.model, 'claude-opus-4-8');
    assert.deepEqual(r.changed, ['model']);
    assert.equal(r.running_turn, 1, 'the running turn keeps what it started with');
  },
  'sessions.subscribe': async (c, x) => {
    const r = await c.sessionsSubscribe({ session_id: x.session });
    assert.equal(r.live, true);
  },
  'sessions.get': async (c, x) => { assert.equal((await c.sessionsGet({ session_id: x.session })).turns, 1); },
  'sessions.list': async (c, x) => { assert.ok((await c.sessionsList({})).sessions.some((s) => s.session_id === x.session)); },
  'sessions.cancel': async (c, x) => { assert.equal((await c.sessionsCancel({ session_id: x.session })).cancelled, true); },
  'sessions.release': async (c, x) => { assert.equal((await c.sessionsRelease({ session_id: x.session })).session.session_id, x.session); },
  'sessions.close': async (c, x) => {
    assert.equal((await c.sessionsClose({ session_id: x.session })).state, 'closed');
    await assert.rejects(c.sessionsPrompt({ session_id: x.session, task: 'x' }), (e) => isCardError(e, 'session_closed') && e.data.session_id === x.session);
  },
  'sessions.diff': async (c, x) => {
    x.repo = join(x.work, 'repo');
    mkdirSync(x.repo);
    const git = (...args) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'core.hooksPath=/dev/null', ...args], { cwd: x.repo,
      env: { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' } });
    git('init', '-q');
    writeFileSync(join(x.repo, 'README.md'), '# repo\n');
    git('add', '.');
    git('commit', '-q', '-m', 'first');
    const s = await c.sessionsStart({ id: 'claude-code', cwd: x.repo, permission_mode: 'edit', isolation: 'worktree' });
    assert.equal(s.worktree?.branch, `card/${s.session_id}`);
    x.isolated = s.session_id;
    await c.sessionsPrompt({ session_id: x.isolated, task: 'WRITE hello.txt Hello from the worktree.' });
    for (let i = 0; i < 200 && (await c.sessionsGet({ session_id: x.isolated })).state !== 'idle'; i++) await new Promise((r) => setTimeout(r, 25));
    const d = await c.sessionsDiff({ session_id: x.isolated });
    assert.deepEqual(d.files.map((f) => f.path), ['hello.txt']);
    assert.match(d.patch, /\+Hello from the worktree\./);
    assert.equal(existsSync(join(x.repo, 'hello.txt')), false, 'the checkout is not written');
  },
  'sessions.apply': async (c, x) => {
    const a = await c.sessionsApply({ session_id: x.isolated });
    assert.deepEqual(a.files.map((f) => f.path), ['hello.txt']);
    assert.equal(readFileSync(join(x.repo, 'hello.txt'), 'utf8'), 'Hello from the worktree.\n');
    await assert.rejects(c.sessionsApply({ session_id: x.isolated }),
      (e) => isCardError(e, 'apply_conflict') && e.data.files?.[0]?.path === 'hello.txt', 'applying twice conflicts');
  },
  'sessions.rewind': async (c, x) => { assert.deepEqual((await c.sessionsRewind({ session_id: x.isolated, turn: 0 })).dropped_turns, [1]); },
  'sessions.discard': async (c, x) => {
    assert.equal((await c.sessionsDiscard({ session_id: x.isolated })).closed, true);
    await assert.rejects(c.sessionsDiff({ session_id: x.isolated }), (e) => isCardError(e, 'worktree_gone') && e.data.session_id === x.isolated);
  },
};

test('the table calls every method the daemon lists, and no other', () => {
  assert.deepEqual(Object.keys(calls).sort(), Object.keys(methodAccess).sort());
});

test('every method answers through its typed function', async (t) => {
  const d = await startDaemon(t);
  const client = await connect({ home: d.home });
  t.after(() => client.close());
  const x = { home: d.home, work: tempDir(t) };
  for (const [method, fn] of Object.entries(calls)) {
    await t.test(method, () => fn(client, x));
  }
});
