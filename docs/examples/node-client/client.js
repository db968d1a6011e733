#!/usr/bin/env node
// A minimal client of the card daemon, the way an Electron app or a VS Code
// extension would write one: find the daemon through daemon.json, prove we
// may talk to it with the token file, list the agents and whether each is
// signed in, run one with its events streamed, and cancel it on Ctrl-C.
//
//   node client.js [--agent claude-code] [--cwd DIR] [--invoked-by ID] "task"
//
// Exit status: 0 the run succeeded, 1 it failed or an error, 3 no daemon,
// 130 cancelled.

import { readFile } from 'node:fs/promises';
import { homedir, platform } from 'node:os';
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
// per text frame, answers matched on id, notifications handed to onNotify.
class Connection {
  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.pending = new Map();
    this.onNotify = () => {};
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      const msg = JSON.parse(data.toString('utf8'));
      if (msg.id === undefined || msg.id === null) {
        if (msg.method) this.onNotify(msg.method, msg.params);
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

function printEvent(ev) {
  switch (ev.kind) {
    case 'text':
      console.log(`event ${ev.seq} text: ${ev.text}`);
      break;
    case 'tool_use':
      console.log(`event ${ev.seq} tool_use: ${ev.name ?? ''}`);
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

  const params = { id: values.agent, task, cwd: values.cwd, stream: true };
  if (values['invoked-by']) params.invoked_by = values['invoked-by'];
  const accepted = await conn.call('agents.invoke', params);
  runId = accepted.run_id;
  console.log(`run ${runId}: started ${accepted.adapter}`);
  for (const ev of early.splice(0)) if (ev.run_id === runId) onEvent(ev);

  const end = await finished;
  await cancelling; // its answer comes once the run has ended
  const r = end.result ?? {};
  console.log(`run ${runId}: ${end.status}${r.answer ? ': ' + r.answer : ''}`);
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
