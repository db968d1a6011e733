#!/usr/bin/env node
// A minimal client of the card daemon, the way an Electron app or a VS Code
// extension would write one: find the daemon through daemon.json, check that
// what listens there is this user's daemon before the token goes anywhere,
// prove we may talk to it with the token file, list the agents and whether
// each is signed in, run one with its events streamed, and cancel it on
// Ctrl-C. With --ask the run is in ask mode: each tool call outside
// read-only is a question (agents.approve) put to the person at this terminal.
//
//   node client.js [--agent claude-code] [--cwd DIR] [--invoked-by ID]
//                  [--ask [--approval-timeout SECS]] "task"
//
// Exit status: 0 the run succeeded, 1 it failed or an error, 3 no daemon,
// 130 cancelled.

import { execFileSync } from 'node:child_process';
import { constants } from 'node:fs';
import { lstat, open, readdir, readFile, readlink, stat } from 'node:fs/promises';
import { endianness, homedir, platform } from 'node:os';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
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

function noDaemon(why) {
  const e = new Error(`no card daemon running: ${why}; start it with \`card serve\``);
  e.exitCode = 3;
  return e;
}

// refuse is what the client says when it will not send the token.
function refuse(reason) {
  return new Error(`${reason}: not sending the token (the daemon daemon.json names is gone, or not yours; start yours again with \`card serve\`)`);
}

// checkHome: the home is a real directory of ours that no one else can
// write to, in a directory no one else can rename it out of. Another user
// could otherwise have planted it, and with it the URL we would send the
// token to.
async function checkHome(home) {
  let st;
  try {
    st = await lstat(home);
  } catch (err) {
    if (err.code === 'ENOENT') throw noDaemon(`home ${home} does not exist`);
    throw err;
  }
  if (st.isSymbolicLink()) throw new Error(`home ${home} is a symbolic link: refusing a home another user could have planted; use the real directory`);
  if (!st.isDirectory()) throw new Error(`home ${home} is not a directory`);
  if (st.uid !== process.geteuid()) throw new Error(`home ${home} belongs to uid ${st.uid}, not you (uid ${process.geteuid()})`);
  if (st.mode & 0o022) throw new Error(`home ${home} is writable by others (mode ${(st.mode & 0o777).toString(8)})`);
  const parent = await stat(dirname(home));
  if (parent.mode & 0o002 && !(parent.mode & 0o1000)) {
    throw new Error(`home ${home} is in ${dirname(home)}, which others can write to without the sticky bit`);
  }
}

// readPrivate reads a file of the home without following a link, and checks
// the file it opened: regular, ours, not writable (secret: not readable)
// by others.
async function readPrivate(path, secret) {
  let fh;
  try {
    fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    if (err.code === 'ELOOP') throw new Error(`${path} is a symbolic link: card does not follow links in its home; remove it`);
    throw err;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new Error(`${path} is not a regular file`);
    if (st.uid !== process.geteuid()) throw new Error(`${path} belongs to uid ${st.uid}, not you (uid ${process.geteuid()})`);
    if (st.mode & (secret ? 0o077 : 0o022)) throw new Error(`${path} has mode ${(st.mode & 0o777).toString(8)}, open to others`);
    return await fh.readFile('utf8');
  } finally {
    await fh.close();
  }
}

// findDaemon reads daemon.json (written by a listening daemon, removed
// before it stops listening) and the token, then reads daemon.json again: a
// daemon starting meanwhile removes a dead one's daemon.json before it
// writes its new token, so an unchanged file means the two belong together.
async function findDaemon(home) {
  await checkHome(home);
  const readDiscovery = async () => {
    try {
      return await readPrivate(join(home, 'daemon.json'), false);
    } catch (err) {
      if (err.code === 'ENOENT') throw noDaemon(`no daemon.json in home ${home}`);
      throw err;
    }
  };
  for (let attempt = 0; attempt < 3; attempt++) {
    const text = await readDiscovery();
    const token = (await readPrivate(join(home, 'token'), true)).trim();
    if ((await readDiscovery()) !== text) continue;
    const discovery = JSON.parse(text);
    await checkListener(discovery);
    return { url: discovery.url, token };
  }
  throw new Error(`${join(home, 'daemon.json')} keeps changing while it is read; try again`);
}

// Before you send the token (docs/protocol.md): what listens on the port of
// daemon.json's url must be ours and held by the pid daemon.json names,
// which must be running, ours, and the executable daemon.json names. After
// a daemon dies, another local user can bind its port and wait for a
// client to hand over a token.
async function checkListener(discovery) {
  const target = parseTarget(discovery);
  const me = process.geteuid();
  if (platform() === 'linux') {
    const sockets = [];
    for (const [file, v6] of [['/proc/net/tcp', false], ['/proc/net/tcp6', true]]) {
      let text;
      try {
        text = await readFile(file, 'utf8');
      } catch (err) {
        if (err.code === 'ENOENT') continue;
        throw refuse(`cannot read ${file}: ${err.message}`);
      }
      sockets.push(...parseProcNet(text, v6));
    }
    const held = sockets.filter((s) => accepts(s, target));
    if (held.length === 0) throw noDaemon(`nothing listens on port ${target.port}`);
    for (const s of held) {
      if (s.uid !== me) throw refuse(`port ${target.port} is held by uid ${s.uid}, not you (uid ${me})`);
    }
    const p = await readProcess(target.pid);
    if (!p.running) throw noDaemon(`pid ${target.pid}, which daemon.json names, is not running`);
    if (p.uid !== me) throw refuse(`pid ${target.pid}, which daemon.json names, belongs to uid ${p.uid}, not you (uid ${me})`);
    if (target.exe && p.exe && p.exe !== target.exe) throw noDaemon(`pid ${target.pid} is now ${p.exe}, not the card daemon (${target.exe})`);
    if (p.sockets && !held.some((s) => p.sockets.has(s.inode))) {
      throw refuse(`pid ${target.pid}, which daemon.json names, does not hold the socket listening on port ${target.port}`);
    }
    return;
  }
  // Elsewhere (macOS) no socket table with owners is at hand: the pid must
  // be running and ours. The port's owner and the executable are not
  // checked; the token is new at every start, so what could be taken is
  // the token of a daemon no longer running.
  try {
    process.kill(target.pid, 0);
  } catch (err) {
    if (err.code === 'ESRCH') throw noDaemon(`pid ${target.pid}, which daemon.json names, is not running`);
    if (err.code === 'EPERM') throw refuse(`pid ${target.pid}, which daemon.json names, is not yours`);
    throw err;
  }
  if (platform() === 'darwin') {
    const uid = Number(execFileSync('ps', ['-o', 'uid=', '-p', String(target.pid)], { encoding: 'utf8' }).trim());
    if (uid !== me) throw refuse(`pid ${target.pid}, which daemon.json names, belongs to uid ${uid}, not you (uid ${me})`);
  }
}

// parseTarget accepts only the URL a daemon writes: ws://<IP>:<port>/rpc.
function parseTarget(discovery) {
  const bad = () => new Error(`daemon.json: url ${JSON.stringify(discovery.url)} is not the ws://<IP>:<port>/rpc a card daemon writes`);
  let u;
  try {
    u = new URL(discovery.url);
  } catch {
    throw bad();
  }
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = Number(u.port);
  if (u.protocol !== 'ws:' || u.pathname !== '/rpc' || u.search || !port || !(Number.isInteger(discovery.pid) && discovery.pid > 0)) throw bad();
  const addr = canonicalIP(host);
  if (!addr) throw bad();
  return { addr, port, pid: discovery.pid, exe: discovery.exe };
}

// canonicalIP writes an IPv4 address dotted and an IPv6 one as eight
// unabbreviated groups, so addresses compare as strings; null if not an IP.
function canonicalIP(s) {
  if (/^\d+\.\d+\.\d+\.\d+$/.test(s)) return s.split('.').map(Number).join('.');
  if (!s.includes(':')) return null;
  const [head, tail = null] = s.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === null ? h : [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
  if (groups.length !== 8 || groups.some((g) => !/^[0-9a-fA-F]{1,4}$/.test(g))) return null;
  return groups.map((g) => parseInt(g, 16).toString(16)).join(':');
}

// parseProcNet reads /proc/net/tcp or tcp6: "sl local rem st … uid timeout
// inode"; the IP is hex 32-bit words in host byte order.
function parseProcNet(text, v6) {
  const out = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const [ipHex, portHex] = f[1].split(':');
    if (!ipHex || ipHex.length !== (v6 ? 32 : 8)) continue;
    const bytes = [];
    for (let i = 0; i < ipHex.length; i += 8) {
      const word = ipHex.slice(i, i + 8).match(/../g).map((b) => parseInt(b, 16));
      bytes.push(...(endianness() === 'LE' ? word.reverse() : word));
    }
    let addr;
    if (!v6) addr = bytes.join('.');
    else if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) addr = bytes.slice(12).join('.');
    else addr = Array.from({ length: 8 }, (_, i) => ((bytes[2 * i] << 8) | bytes[2 * i + 1]).toString(16)).join(':');
    out.push({ addr, v6, port: parseInt(portHex, 16), listen: f[3] === '0A', uid: Number(f[7]), inode: f[9] });
  }
  return out;
}

// accepts: a listening socket that would take a connection to target.
function accepts(s, target) {
  if (!s.listen || s.port !== target.port) return false;
  const targetV4 = !target.addr.includes(':');
  if (s.addr === target.addr) return true;
  if (s.addr === '0.0.0.0' && targetV4) return true;
  return s.addr === '0:0:0:0:0:0:0:0';
}

async function readProcess(pid) {
  const dir = `/proc/${pid}`;
  let status;
  try {
    status = await readFile(`${dir}/status`, 'utf8');
  } catch {
    return { running: false };
  }
  const p = { running: !/^State:\s+[ZX]/m.test(status), uid: Number((status.match(/^Uid:\s+\d+\s+(\d+)/m) || [])[1]) };
  try {
    p.exe = (await readlink(`${dir}/exe`)).replace(/ \(deleted\)$/, '');
  } catch {}
  try {
    p.sockets = new Set();
    for (const fd of await readdir(`${dir}/fd`)) {
      const m = (await readlink(`${dir}/fd/${fd}`).catch(() => '')).match(/^socket:\[(\d+)\]$/);
      if (m) p.sockets.add(m[1]);
    }
  } catch {
    p.sockets = null; // unreadable: the uid checks still hold
  }
  return p;
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
