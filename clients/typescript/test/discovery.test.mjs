// Finding the daemon as card's Go client does: the home's rules, clear
// errors for no daemon, a stale daemon.json and a changed token, and no
// token sent to a port the daemon does not hold.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  HomeError, ListenerError, NoDaemonError, ProtocolVersionError, TokenRejectedError, accepts, connect, judgeListener, parseProcNet, parseTarget,
  protocolVersion, resolveHome,
} from '@card-dev/client';
import { WebSocketServer } from 'ws';
// open is the package's own, not its API (its socket is ws's): the build's.
import { open } from '../dist/esm/socket.js';
import { discovery, startDaemon, tempDir } from './harness.mjs';

test('the home is the one given, else $CARD_HOME, else the platform default', () => {
  assert.equal(resolveHome('/x/given', { CARD_HOME: '/y' }), '/x/given');
  assert.equal(resolveHome(undefined, { CARD_HOME: '/y/card' }), '/y/card');
  assert.equal(resolveHome(undefined, { HOME: '/h', XDG_STATE_HOME: '/s' }, 'linux'), '/s/card');
  assert.equal(resolveHome(undefined, { HOME: '/h', XDG_STATE_HOME: 'relative' }, 'linux'), '/h/.local/state/card');
  assert.equal(resolveHome(undefined, { HOME: '/h' }, 'darwin'), '/h/Library/Application Support/card');
});

test('no daemon: a missing home, or one without daemon.json, says how to start one', async (t) => {
  const dir = tempDir(t);
  for (const home of [join(dir, 'never-made'), dir]) {
    await assert.rejects(connect({ home }), (e) => {
      assert.ok(e instanceof NoDaemonError, String(e));
      assert.equal(e.pid, 0);
      assert.match(e.message, new RegExp(`no daemon running for home ${home}: start it with \`card serve --home ${home}\``));
      return true;
    });
  }
});

test('a stale daemon.json (its daemon was killed) is no daemon, naming the dead pid', async (t) => {
  const d = await startDaemon(t);
  await d.stop('SIGKILL');
  await assert.rejects(connect({ home: d.home }), (e) => {
    assert.ok(e instanceof NoDaemonError, String(e));
    assert.equal(e.pid, d.pid);
    // Nothing listens on the port any more, or (on a busy machine) some
    // other process of this user took it meanwhile: either way, no daemon.
    assert.match(e.message, new RegExp(`daemon.json names pid ${d.pid}: (nothing listens on port \\d+|pid ${d.pid} is not running, though something of yours listens on port \\d+)`));
    return true;
  });
});

test('a token that changed between the read and the upgrade is read again once', async (t) => {
  const d = await startDaemon(t);
  let rotations = 0;
  const rotate = () => { rotations++; execFileSync(d.card, ['token', 'rotate', '--home', d.home]); };
  const first = await open({ home: d.home }, () => { if (rotations === 0) rotate(); });
  first.ws.close();
  assert.equal(rotations, 1);
  // Rotated before every upgrade: refused again after the one retry.
  await assert.rejects(open({ home: d.home }, rotate), (e) => e instanceof TokenRejectedError && e.status === 401);
  assert.equal(rotations, 3);
});

/** A TCP listener that counts connections, in a process of its own (uid when given). */
async function squatter(t, port, uid) {
  const code = `const s=require('net').createServer(c=>{process.stdout.write('conn\\n');c.destroy()});s.listen(${port},'127.0.0.1',()=>process.stdout.write('up\\n'))`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'], ...(uid !== undefined ? { uid, gid: uid } : {}) });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (b) => { out += b; });
  for (let i = 0; i < 200 && !out.includes('up'); i++) await new Promise((r) => setTimeout(r, 10));
  assert.match(out, /up/, 'the squatter listens');
  return { connections: () => out.split('\n').filter((l) => l === 'conn').length, pid: child.pid };
}

test('a squatted port: another process listens where daemon.json says, and the token is not sent', { skip: process.platform !== 'linux' && 'reads /proc' }, async (t) => {
  const d = await startDaemon(t);
  const { url } = discovery(d.home);
  const port = Number(new URL(url).port);
  await d.stop('SIGKILL'); // a crash: daemon.json stays behind, its port free

  // daemon.json's pid runs (a sleeping process of this user), but the
  // socket on its port is another process's.
  const sleeper = spawn('sleep', ['60']);
  t.after(() => sleeper.kill('SIGKILL'));
  const disc = { ...discovery(d.home), pid: sleeper.pid, exe: '' };
  writeFileSync(join(d.home, 'daemon.json'), JSON.stringify(disc), { mode: 0o600 });
  const sq = await squatter(t, port);
  await assert.rejects(connect({ home: d.home }), (e) => {
    assert.ok(e instanceof ListenerError, String(e));
    assert.equal(e.reason, `pid ${sleeper.pid}, which daemon.json names, does not hold the socket listening on port ${port}`);
    assert.match(e.message, /not sending the token/);
    return true;
  });
  assert.equal(sq.connections(), 0, 'the client connected before it refused');
});

test('a port squatted by another user is refused whatever daemon.json says', { skip: (process.geteuid?.() !== 0 || process.platform !== 'linux') && 'needs root to listen as another user' }, async (t) => {
  const d = await startDaemon(t);
  const port = Number(new URL(discovery(d.home).url).port);
  await d.stop('SIGKILL');
  const sq = await squatter(t, port, 65534);
  await assert.rejects(connect({ home: d.home }), (e) => {
    assert.ok(e instanceof ListenerError, String(e));
    assert.equal(e.reason, `port ${port} is held by uid 65534, not you (uid 0)`);
    return true;
  });
  assert.equal(sq.connections(), 0);
});

test('a home that is a link, or a token others can read, is refused', async (t) => {
  const d = await startDaemon(t);
  const link = join(tempDir(t), 'card');
  symlinkSync(d.home, link);
  await assert.rejects(connect({ home: link }), (e) => e instanceof HomeError && /is a symbolic link/.test(e.message));
  chmodSync(join(d.home, 'token'), 0o644);
  await assert.rejects(connect({ home: d.home }), (e) => e instanceof HomeError && /readable by others; run `card token rotate`/.test(e.message));
});

test('daemon.json must name an IP address, a port and /rpc', () => {
  for (const url of ['ws://localhost:1/rpc', 'wss://127.0.0.1:1/rpc', 'ws://127.0.0.1:1/other', 'ws://127.0.0.1/rpc', 'ws://u:p@127.0.0.1:1/rpc']) {
    assert.throws(() => parseTarget({ url, pid: 1 }), /is not the ws:\/\/<IP address>:<port>\/rpc/, url);
  }
  assert.throws(() => parseTarget({ url: 'ws://127.0.0.1:1/rpc', pid: 0 }), /names no process/);
  assert.deepEqual(parseTarget({ url: 'ws://[::1]:8/rpc', pid: 5 }), { host: '::1', port: 8, pid: 5, exe: '' });
});

test('the kernel socket tables are read as the kernel prints them', () => {
  const v4 = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n' +
    '   0: 0100007F:9595 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1566456 2 0\n' +
    '   1: 00000000:07E8 00000000:0000 01 00000000:00000000 00:00000000 00000000     0        0 1592 1 0\n';
  const [a, b] = parseProcNet(v4, false, true);
  const t = { host: '127.0.0.1', port: 0x9595, pid: 1, exe: '' };
  assert.equal(a.port, 0x9595); assert.equal(a.uid, 1000); assert.equal(a.inode, '1566456'); assert.equal(a.listen, true);
  assert.equal(accepts(a, t), true);
  assert.equal(b.listen, false);
  const v6 = 'header\n   0: 00000000000000000000000000000000:9595 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 77 1 0\n';
  assert.equal(accepts(parseProcNet(v6, true, true)[0], t), true, 'the IPv6 wildcard takes IPv4 connections');
});

test('judging the listener: every socket that could take the connection must be ours, and held by daemon.json\'s pid', () => {
  const t = { host: '127.0.0.1', port: 7, pid: 42, exe: '/usr/bin/card' };
  const sock = (uid, inode, host = '127.0.0.1') => ({ ...parseProcNet(`h\n 0: ${host === '0.0.0.0' ? '00000000' : '0100007F'}:0007 00000000:0000 0A 0:0 0:0 0 ${uid} 0 ${inode} 1\n`, false, true)[0] });
  const me = 1000;
  const proc = (o = {}) => ({ running: true, uid: me, exe: '/usr/bin/card', sockets: new Set(['9']), ...o });
  const cases = [
    { name: 'ours, held by the pid', sockets: [sock(me, '9')], p: proc(), want: null },
    { name: 'nothing listens', sockets: [], p: proc(), want: NoDaemonError },
    { name: 'another uid holds the port', sockets: [sock(1001, '9')], p: proc(), want: ListenerError },
    { name: 'another uid on the wildcard too', sockets: [sock(me, '9'), sock(1001, '5', '0.0.0.0')], p: proc(), want: ListenerError },
    { name: 'the pid is gone', sockets: [sock(me, '9')], p: proc({ running: false }), want: NoDaemonError },
    { name: 'the pid is another user\'s', sockets: [sock(me, '9')], p: proc({ uid: 0 }), want: ListenerError },
    { name: 'the pid runs another program now', sockets: [sock(me, '9')], p: proc({ exe: '/usr/bin/vim' }), want: NoDaemonError },
    { name: 'the pid does not hold the socket', sockets: [sock(me, '8')], p: proc(), want: ListenerError },
    { name: 'the descriptors could not be read', sockets: [sock(me, '8')], p: proc({ sockets: null }), want: null },
  ];
  for (const c of cases) {
    const run = () => judgeListener('/h', t, me, c.sockets, c.p);
    if (c.want === null) assert.doesNotThrow(run, c.name); else assert.throws(run, c.want, c.name);
  }
});

test('a home in a directory everyone may write to (not sticky) is refused', async (t) => {
  const dir = tempDir(t);
  const open777 = join(dir, 'open');
  mkdirSync(open777);
  chmodSync(open777, 0o777);
  const home = join(open777, 'card');
  mkdirSync(home, { mode: 0o700 });
  await assert.rejects(connect({ home }), (e) => e instanceof HomeError && /which others can write to/.test(e.message));
});

test('judging by the process alone (macOS): running, this user\'s, and the daemon\'s command name, which the kernel cuts at 16 bytes', async () => {
  const { judgeProcess } = await import('@card-dev/client');
  const t = { host: '127.0.0.1', port: 7, pid: 42, exe: '/opt/homebrew/bin/card-daemon-with-a-long-name' };
  const p = (o = {}) => ({ running: true, uid: 501, exe: 'card-daemon-wit', sockets: null, ...o });
  assert.doesNotThrow(() => judgeProcess('/h', t, 501, p()), 'a name cut short by the kernel');
  assert.doesNotThrow(() => judgeProcess('/h', { ...t, exe: '/usr/local/bin/card' }, 501, p({ exe: 'card' })));
  assert.throws(() => judgeProcess('/h', t, 501, p({ running: false })), NoDaemonError);
  assert.throws(() => judgeProcess('/h', t, 501, p({ uid: 0 })), ListenerError);
  assert.throws(() => judgeProcess('/h', t, 501, p({ exe: 'Safari' })), NoDaemonError);
});

/**
 * A stand-in daemon that answers daemon.info with version and every other
 * request with an empty result.
 * @param {import('node:test').TestContext} t
 * @param {string} version
 */
async function fakeDaemon(t, version) {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => wss.once('listening', r));
  t.after(() => new Promise((r) => { for (const c of wss.clients) c.terminate(); wss.close(() => r(undefined)); }));
  wss.on('connection', (ws) => ws.on('message', (m) => {
    const req = JSON.parse(String(m));
    if (req.id === undefined) return;
    const result = req.method === 'daemon.info' ? { protocol_version: version, version: 'x', pid: 1, addr: '', url: '', home: '', ancestry: [], max_chain: 3, started_at: '' } : {};
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: req.id, result }));
  }));
  const addr = /** @type {import('node:net').AddressInfo} */ (wss.address());
  return `ws://127.0.0.1:${addr.port}/rpc`;
}

test('connect refuses a daemon of another major protocol version, naming both, and takes any minor of its own', async (t) => {
  const major = protocolVersion.split('.')[0];
  const other = `${Number(major) + 1}.0`;
  await assert.rejects(connect({ url: await fakeDaemon(t, other), token: 't', reconnect: false }), (e) => {
    assert.ok(e instanceof ProtocolVersionError, String(e));
    assert.equal(e.daemonVersion, other);
    assert.equal(e.clientVersion, protocolVersion);
    assert.match(e.message, new RegExp(`protocol ${other.replace('.', '\\.')}.*protocol ${protocolVersion.replace('.', '\\.')}`));
    return true;
  });
  const c = await connect({ url: await fakeDaemon(t, `${major}.99`), token: 't', reconnect: false });
  assert.equal(c.protocolVersion, `${major}.99`);
  c.close();
});
