#!/usr/bin/env node
// A minimal client of the card daemon, the way an Electron app or a VS Code
// extension would write one: find the daemon through daemon.json, prove we
// may talk to it with the token file, list the agents and whether each is
// signed in, run one with its events streamed, and cancel it on Ctrl-C.
// With --ask the run is in ask mode: each tool call outside read-only is a
// question (agents.approve) put to the person at this terminal.
//
//   node client.js [--agent claude-code] [--cwd DIR] [--invoked-by ID]
//                  [--ask [--approval-timeout SECS]] "task"
//
// Exit status: 0 the run succeeded, 1 it failed or an error, 3 no daemon,
// 130 cancelled.

import { readFile } from 'node:fs/promises';
import { homedir, platform } from 'node:os';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';

const SUPPORTED_MAJOR = '1';

// cardHome applies the daemon's own rule, so client and daemon agree
// without configuration: $CARD_HOME, else the platform's state directory.
function cardHome() {
  if (process.env.CARD_HOME) return process.env.CARD_HOME;
  if (platform() === 'darwin') return join(homedir(), 'Library', 'Application Support', 'card');
  const state = process.env.XDG_STATE_HOME || join(homedir(), '.local', 'state');
  return join(state, 'card');
}

// findDaemon reads daemon.json (written by a listening daemon, removed when
// it stops) and the token; a missing daemon.json means none is running.
async function findDaemon(home) {
  let discovery;
  try {
    discovery = JSON.parse(await readFile(join(home, 'daemon.json'), 'utf8'));
  } catch (err) {
    if (err.code === 'ENOENT') {
      const e = new Error(`no card daemon running for home ${home}: start it with \`card serve\``);
      e.exitCode = 3;
      throw e;
    }
    throw err;
  }
  const token = (await readFile(join(home, 'token'), 'utf8')).trim();
  return { url: discovery.url, token };
}

// Connection is a small JSON-RPC 2.0 client over one WebSocket: one message
// per text frame, answers matched on id, notifications handed to onNotify,
// and the daemon's own requests (agents.approve) to onRequest, whose
// returned promise is sent back as the response. The daemon withdraws a
// request it no longer waits for with $/cancelRequest; onCancel hears it.
class Connection {
  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.pending = new Map();
    this.onNotify = () => {};
    this.onRequest = async (method) => {
      throw Object.assign(new Error(`this client does not serve ${method}`), { code: -32601 });
    };
    this.onCancel = () => {};
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      const msg = JSON.parse(data.toString('utf8'));
      if (msg.method && msg.id !== undefined && msg.id !== null) {
        this.answer(msg);
        return;
      }
      if (msg.id === undefined || msg.id === null) {
        if (msg.method === '$/cancelRequest') this.onCancel(msg.params?.id);
        else if (msg.method) this.onNotify(msg.method, msg.params);
        return;
      }
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      if (msg.error) {
        const e = new Error(`${msg.error.message} (code ${msg.error.code})`);
        e.rpc = msg.error;
        p.reject(e);
      } else {
        p.resolve(msg.result);
      }
    });
    ws.on('close', (code, reason) => {
      const e = new Error(`connection closed (${code}${reason.length ? ': ' + reason : ''})`);
      for (const p of this.pending.values()) p.reject(e);
      this.pending.clear();
    });
  }

  static open(url, token) {
    // The token goes in a header, never in the URL. A browser, which cannot
    // set headers, would offer ['card.v1', `card.bearer.${token}`] instead.
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(new Connection(ws)));
      ws.once('unexpected-response', (req, res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => reject(new Error(`card refused the connection: HTTP ${res.statusCode}: ${body.trim()}`)));
      });
      ws.once('error', reject);
    });
  }

  // answer runs onRequest for one of the daemon's requests and sends its
  // result, or its error, under the request's id.
  async answer(req) {
    let reply;
    try {
      reply = { jsonrpc: '2.0', id: req.id, result: await this.onRequest(req.method, req.params, req.id) };
    } catch (err) {
      reply = { jsonrpc: '2.0', id: req.id, error: { code: err.code ?? -32603, message: err.message } };
    }
    if (reply.result === undefined && !reply.error) return; // withdrawn: nobody waits for it
    this.ws.send(JSON.stringify(reply));
  }

  call(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params: params ?? {} }), (err) => {
        if (err) {
          this.pending.delete(id);
          reject(err);
        }
      });
    });
  }

  close() {
    this.ws.close(1000);
  }
}

// Terminal asks the person at this terminal, one question at a time: the
// agent may ask again while a question is open, and the answers must go to
// the right one.
class Terminal {
  constructor() {
    this.rl = createInterface({ input: process.stdin });
    this.lines = [];
    this.waiting = null;
    this.queue = Promise.resolve();
    this.rl.on('line', (line) => {
      if (this.waiting) {
        const w = this.waiting;
        this.waiting = null;
        w(line);
      } else this.lines.push(line);
    });
    this.rl.on('close', () => {
      this.closed = true;
      if (this.waiting) this.waiting(null);
    });
  }

  readLine() {
    if (this.lines.length) return Promise.resolve(this.lines.shift());
    if (this.closed) return Promise.resolve(null);
    return new Promise((resolve) => (this.waiting = resolve));
  }

  // approve asks about one tool call and resolves with the answer, or with
  // undefined when the daemon withdrew the question first (withdrawn
  // resolves).
  approve(q, withdrawn) {
    let gone = false;
    let active = false;
    withdrawn.then(() => {
      gone = true;
      // Only this question's prompt is dropped, not one asked before it.
      if (active && this.waiting) {
        const w = this.waiting;
        this.waiting = null;
        w(undefined);
      }
    });
    const turn = this.queue.then(async () => {
      if (gone) return undefined;
      active = true;
      const input = JSON.stringify(q.tool.input);
      console.log(`approve? run ${q.run_id} (${q.adapter}) wants ${q.summary}`);
      console.log(`  ${q.tool.name} ${input.length > 300 ? input.slice(0, 300) + '…' : input}`);
      console.log(`  answer by ${q.expires_at}: [y]es, [a]lways (${q.tool.name}, this run), [n]o`);
      for (;;) {
        const line = await this.readLine();
        if (gone || line === undefined) {
          console.log(`approval ${q.request_id}: withdrawn (answered elsewhere or expired)`);
          return undefined;
        }
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

  close() {
    this.rl.close();
  }
}

function printEvent(ev) {
  switch (ev.kind) {
    case 'text':
      console.log(`event ${ev.seq} text: ${ev.text}`);
      break;
    case 'tool_use':
      console.log(`event ${ev.seq} tool_use: ${ev.tool?.name ?? ''}`);
      break;
    case 'approval_requested':
      console.log(`event ${ev.seq} approval ${ev.approval.request_id} asked: ${ev.approval.summary}`);
      break;
    case 'approval_decided':
      console.log(`event ${ev.seq} approval ${ev.approval.request_id}: ${ev.approval.decision} by ${ev.approval.by}` +
        (ev.approval.message ? ` (${ev.approval.message})` : ''));
      break;
    case 'done':
    case 'error':
      break; // reported by the run's end
    default:
      console.log(`event ${ev.seq} ${ev.kind}`);
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

  const { url, token } = await findDaemon(cardHome());
  const conn = await Connection.open(url, token);

  const info = await conn.call('daemon.info');
  if (info.protocol_version.split('.')[0] !== SUPPORTED_MAJOR) {
    throw new Error(`card speaks protocol ${info.protocol_version}; this client speaks ${SUPPORTED_MAJOR}.x`);
  }
  console.log(`card ${info.version} (protocol ${info.protocol_version}) at ${url}`);

  for (const a of await conn.call('agents.detect')) {
    const block = a.spawn_block_reason ? ` (blocked: ${a.spawn_block_reason})` : '';
    console.log(`detect: ${a.id} ${a.version ?? '?'} ${a.execution.state} ${a.binary_path ?? ''}${block}`);
  }
  for (const h of await conn.call('agents.health_external')) {
    console.log(`health: ${h.id} ${h.status}${h.reason ? ' - ' + h.reason : ''}`);
  }

  // Events may arrive just before invoke's answer names the run, so they
  // are buffered until we know our run id.
  let runId = null;
  const early = [];
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const onEvent = (ev) => {
    printEvent(ev);
    if (ev.kind === 'done' || ev.kind === 'error') finish(ev);
  };
  conn.onNotify = (method, ev) => {
    if (method !== 'agents.event') return;
    if (runId === null) early.push(ev);
    else if (ev.run_id === runId) onEvent(ev);
  };

  let cancelling = null;
  process.on('SIGINT', () => {
    if (cancelling || runId === null) process.exit(130);
    console.log(`cancelling run ${runId} (Ctrl-C again to quit at once)`);
    cancelling = conn.call('agents.cancel', { run_id: runId }).then(
      (r) => console.log(`cancel: ${r.cancelled ? 'cancelled' : r.reason}`),
      (err) => console.error(`cancel failed: ${err.message}`),
    );
  });

  // Ask mode: the daemon's agents.approve requests are put to the person at
  // this terminal; a question the daemon withdraws ($/cancelRequest: answered
  // on another connection, or expired) is dropped from the terminal.
  let terminal = null;
  if (values.ask) {
    terminal = new Terminal();
    const withdrawals = new Map();
    conn.onCancel = (id) => withdrawals.get(id)?.();
    conn.onRequest = async (method, q, id) => {
      if (method !== 'agents.approve') {
        throw Object.assign(new Error(`this client does not serve ${method}`), { code: -32601 });
      }
      const withdrawn = new Promise((resolve) => withdrawals.set(id, resolve));
      try {
        return await terminal.approve(q, withdrawn);
      } finally {
        withdrawals.delete(id);
      }
    };
  }

  const params = { id: values.agent, task, cwd: values.cwd, stream: true };
  if (values['invoked-by']) params.invoked_by = values['invoked-by'];
  if (values.ask) {
    params.permission_mode = 'ask';
    if (values['approval-timeout']) params.approval_timeout_secs = Number(values['approval-timeout']);
  }
  const accepted = await conn.call('agents.invoke', params);
  runId = accepted.run_id;
  console.log(`run ${runId}: started ${accepted.adapter}`);
  for (const ev of early.splice(0)) if (ev.run_id === runId) onEvent(ev);

  const end = await finished;
  await cancelling; // its answer comes once the run has ended
  const r = end.result ?? {};
  console.log(`run ${runId}: ${end.status}${r.answer ? ': ' + r.answer : ''}`);
  terminal?.close();
  conn.close();
  if (end.status === 'succeeded') return 0;
  return end.status === 'cancelled' ? 130 : 1;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`card-node-client: ${err.message}`);
    process.exit(err.exitCode ?? 1);
  },
);
