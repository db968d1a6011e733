#!/usr/bin/env node
// A small client of the card daemon on @card-dev/client, the way an Electron
// app or a VS Code extension would write one: find the daemon (the package
// checks that what listens there is this user's daemon before the token
// goes anywhere), list the agents and whether each is signed in, run one
// with its events streamed, and cancel it on Ctrl-C. With --ask the run is
// in ask mode: each tool call outside read-only is a question put to the
// person at this terminal.
//
//   node client.js [--agent claude-code] [--cwd DIR] [--invoked-by ID]
//                  [--ask [--approval-timeout SECS]] "task"
//
// Exit status: 0 the run succeeded, 1 it failed or an error, 3 no daemon,
// 130 cancelled.

import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { NoDaemonError, connect } from '@card-dev/client';

// Terminal asks the person at this terminal, one question at a time. A
// question the daemon withdraws (answered elsewhere, or expired) is dropped.
class Terminal {
  constructor() {
    this.rl = createInterface({ input: process.stdin });
    /** @type {string[]} */
    this.lines = [];
    /** @type {((line: string | null | undefined) => void) | null} */
    this.waiting = null;
    this.closed = false;
    this.rl.on('line', (l) => (this.waiting ? this.take(l) : this.lines.push(l)));
    this.rl.on('close', () => { this.closed = true; this.take(null); });
    /** @type {Promise<unknown>} */
    this.queue = Promise.resolve();
  }

  /** @param {string | null | undefined} line */
  take(line) { const w = this.waiting; this.waiting = null; w?.(line); }

  /**
   * A line, null when stdin closed, undefined when signal aborted first.
   * @param {AbortSignal} signal
   * @returns {Promise<string | null | undefined>}
   */
  readLine(signal) {
    if (this.lines.length) return Promise.resolve(this.lines.shift());
    if (this.closed) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.waiting = resolve;
      signal.addEventListener('abort', () => { if (this.waiting === resolve) this.take(undefined); }, { once: true });
    });
  }

  /**
   * @param {import('@card-dev/client').ApproveParams} q
   * @param {AbortSignal} signal
   * @returns {Promise<import('@card-dev/client').ApproveAnswer | undefined>}
   */
  approve(q, signal) {
    const turn = this.queue.then(/** @returns {Promise<import('@card-dev/client').ApproveAnswer | undefined>} */ async () => {
      const withdrawn = () => console.log(`approval ${q.request_id}: withdrawn (answered elsewhere or expired)`);
      if (signal.aborted) return void withdrawn();
      const input = JSON.stringify(q.tool.input);
      console.log(`approve? run ${q.run_id} (${q.adapter}) wants ${q.summary}`);
      console.log(`  ${q.tool.name} ${input.length > 300 ? input.slice(0, 300) + '…' : input}`);
      console.log(`  answer by ${q.expires_at}: [y]es, [a]lways (${q.tool.name}, this run), [n]o`);
      for (;;) {
        const line = await this.readLine(signal);
        if (line === undefined || signal.aborted) return void withdrawn();
        if (line === null) return { decision: 'deny', message: 'Nobody was at the terminal to answer.' };
        const a = line.trim().toLowerCase();
        if (a === 'y' || a === 'yes') return { decision: 'allow' };
        if (a === 'a' || a === 'always') return { decision: 'allow_always' };
        if (a === 'n' || a === 'no') return { decision: 'deny', message: 'Denied at the terminal.' };
        console.log('  please answer y, a or n');
      }
    });
    this.queue = turn.catch(() => {});
    return turn;
  }

  close() { this.rl.close(); }
}

/** @param {import('@card-dev/client').AgentEvent} ev */
function printEvent(ev) {
  switch (ev.kind) {
    case 'text': console.log(`event ${ev.seq} text: ${ev.text}`); break;
    case 'tool_use': console.log(`event ${ev.seq} tool_use: ${ev.tool?.name ?? ''}`); break;
    case 'approval_requested': console.log(`event ${ev.seq} approval ${ev.approval?.request_id} asked: ${ev.approval?.summary}`); break;
    case 'approval_decided': {
      const a = ev.approval;
      console.log(`event ${ev.seq} approval ${a?.request_id}: ${a?.decision} by ${a?.by}${a?.message ? ` (${a.message})` : ''}`);
      break;
    }
    case 'done': case 'error': break; // reported by the run's end
    default: console.log(`event ${ev.seq} ${ev.kind}`);
  }
}

async function main() {
  const { values, positionals } = parseArgs({
    options: {
      agent: { type: 'string', default: 'claude-code' },
      cwd: { type: 'string', default: process.cwd() },
      'invoked-by': { type: 'string' },
      ask: { type: 'boolean', default: false },
      'approval-timeout': { type: 'string' },
    },
    allowPositionals: true,
  });
  const task = positionals.join(' ') || 'Say hello in one short sentence.';
  const terminal = values.ask ? new Terminal() : null;
  // Without --ask nothing asks; with it, the person at the terminal answers.
  const client = await connect({ onApprove: terminal ? (q, signal) => terminal.approve(q, signal) : undefined });

  const info = await client.daemonInfo();
  if (info.protocol_version.split('.')[0] !== '1') throw new Error(`card speaks protocol ${info.protocol_version}; this client speaks 1.x`);
  console.log(`card ${info.version} (protocol ${info.protocol_version}) at ${client.url}`);
  for (const a of await client.agentsDetect({})) {
    const block = a.spawn_block_reason ? ` (blocked: ${a.spawn_block_reason})` : '';
    console.log(`detect: ${a.id} ${a.version ?? '?'} ${a.execution.state} ${a.binary_path ?? ''}${block}`);
  }
  const health = await client.agentsHealthExternal({});
  for (const h of Array.isArray(health) ? health : [health]) console.log(`health: ${h.id} ${h.status}${h.reason ? ' - ' + h.reason : ''}`);

  /** @type {Omit<import('@card-dev/client').AgentsInvokeParams, 'stream'>} */
  const params = { id: values.agent, task, cwd: values.cwd };
  if (values['invoked-by']) params.invoked_by = values['invoked-by'];
  if (values.ask) {
    params.permission_mode = 'ask';
    if (values['approval-timeout']) params.approval_timeout_secs = Number(values['approval-timeout']);
  }
  // Ctrl-C aborts the signal, which cancels the run; Ctrl-C again quits at once.
  const ac = new AbortController();
  const run = client.invoke(params, { signal: ac.signal });
  process.on('SIGINT', () => {
    if (ac.signal.aborted || !run.runId) process.exit(130);
    console.log(`cancelling run ${run.runId} (Ctrl-C again to quit at once)`);
    ac.abort();
  });
  let status = 'failed';
  try {
    console.log(`run ${await run.id()}: started ${values.agent}`);
    for await (const ev of run) printEvent(ev);
    status = run.result?.status ?? 'failed';
    console.log(`run ${run.runId}: ${status}${run.result?.answer ? ': ' + run.result.answer : ''}`);
  } catch (err) {
    if (!ac.signal.aborted) throw err;
    // The package has cancelled the run and waited for its end.
    status = (await client.runsGet({ run_id: await run.id() })).status;
    console.log(`run ${run.runId}: ${status}`);
    console.log(`cancel: ${status === 'cancelled' ? 'cancelled' : status}`);
  }
  terminal?.close();
  client.close();
  if (status === 'succeeded') return 0;
  return status === 'cancelled' ? 130 : 1;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`card-node-client: ${err.message}`);
    process.exit(err instanceof NoDaemonError ? 3 : 1);
  },
);
