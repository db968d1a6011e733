// Before it sends the token a client makes sure that what listens on the
// daemon's port is this user's card daemon. When a daemon has died (a crash,
// or the moments of a shutdown), another local user can bind the port
// daemon.json still names; a client that sent the token there would hand it
// to them. The facts are read from the operating system (readFacts); what
// they mean is decided by judgeListener and judgeProcess over explicit
// inputs, as card's Go client does.

import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { isIP } from 'node:net';
import { basename } from 'node:path';
import { ListenerError, NoDaemonError } from './errors.js';
import type { Discovery } from './home.js';

/** Where daemon.json says the daemon listens. */
export interface Target {
  /** The IP address, IPv4 dotted or IPv6 without brackets. */
  host: string;
  port: number;
  pid: number;
  exe: string;
}

/** One TCP socket as the kernel lists it. */
export interface Socket {
  /** The address as 16 bytes (IPv4 mapped into IPv6). */
  addr: Uint8Array;
  /** Whether it was listed in the IPv4 table. */
  v4: boolean;
  port: number;
  listen: boolean;
  uid: number;
  inode: string;
}

/** What could be seen of the process daemon.json names. */
export interface Process {
  running: boolean;
  uid: number;
  /** Its executable ('' when it could not be read). */
  exe: string;
  /** The inodes of the sockets it holds; null when they could not be listed. */
  sockets: Set<string> | null;
}

/**
 * Accepts only the URL a daemon writes, ws://<IP>:<port>/rpc: a host name
 * would be resolved to who knows where, and could not be matched against the
 * kernel's table of listening sockets.
 */
export function parseTarget(d: Discovery): Target {
  const bad = () => new Error(`daemon.json: url ${JSON.stringify(d.url)} is not the ws://<IP address>:<port>/rpc a card daemon writes; remove the file and start the daemon again with \`card serve\``);
  let u: URL;
  try { u = new URL(d.url); } catch { throw bad(); }
  const host = u.hostname.replace(/^\[|\]$/g, '');
  const port = Number(u.port);
  if (u.protocol !== 'ws:' || !isIP(host) || !Number.isInteger(port) || port <= 0 || port > 65535 || u.pathname !== '/rpc' || u.search || u.username || u.password) {
    throw bad();
  }
  if (!(d.pid > 0)) throw new Error(`daemon.json: pid ${d.pid} names no process; remove the file and start the daemon again with \`card serve\``);
  return { host, port, pid: d.pid, exe: d.exe ?? '' };
}

/** The 16-byte form of an IP address (IPv4 mapped). */
export function ipBytes(host: string): Uint8Array {
  const out = new Uint8Array(16);
  if (isIP(host) === 4) {
    out[10] = 0xff; out[11] = 0xff;
    host.split('.').forEach((p, i) => { out[12 + i] = Number(p); });
    return out;
  }
  let [head, tail] = host.includes('::') ? host.split('::') as [string, string] : [host, undefined];
  // An embedded IPv4 tail (::ffff:127.0.0.1).
  const conv = (s: string) => s.split(':').filter(Boolean).flatMap((g) => {
    if (g.includes('.')) { const b = ipBytes(g); return [(b[12]! << 8) | b[13]!, (b[14]! << 8) | b[15]!]; }
    return [parseInt(g, 16)];
  });
  const h = conv(head);
  const t = tail === undefined ? [] : conv(tail);
  const groups = [...h, ...new Array(8 - h.length - t.length).fill(0), ...t];
  groups.forEach((g, i) => { out[2 * i] = g >> 8; out[2 * i + 1] = g & 0xff; });
  return out;
}

const isMapped4 = (a: Uint8Array) => a.slice(0, 10).every((b) => b === 0) && a[10] === 0xff && a[11] === 0xff;
const allZero = (a: Uint8Array, from = 0) => a.slice(from).every((b) => b === 0);
const equal = (a: Uint8Array, b: Uint8Array) => a.every((x, i) => x === b[i]);

/**
 * Whether a listening socket would take a connection to t: bound to t's
 * address itself, to the wildcard of its family, or (for an IPv4 target) to
 * the IPv6 wildcard or t's IPv4-mapped address.
 */
export function accepts(s: Socket, t: Target): boolean {
  if (!s.listen || s.port !== t.port) return false;
  const want = ipBytes(t.host);
  const want4 = isMapped4(want);
  if (equal(s.addr, want)) return true;
  if (s.v4 && want4 && allZero(s.addr, 12)) return true; // 0.0.0.0
  if (!s.v4 && allZero(s.addr)) return true; // :: takes both families
  return false;
}

/**
 * Decides, from the sockets of the system and the process daemon.json
 * names, whether the token may go to t. me is this process's effective uid.
 * Throws NoDaemonError (nothing is there) or ListenerError (something is,
 * and it is not ours).
 */
export function judgeListener(home: string, t: Target, me: number, sockets: Socket[], p: Process): void {
  const gone = (why: string) => new NoDaemonError(home, t.pid, new Error(why));
  const refuse = (why: string) => new ListenerError(home, t.port, why);
  const held = sockets.filter((s) => accepts(s, t));
  if (held.length === 0) throw gone(`nothing listens on port ${t.port}`);
  // Every socket that could take the connection must be ours: which one the
  // kernel picks is not ours to choose.
  for (const s of held) if (s.uid !== me) throw refuse(`port ${t.port} is held by uid ${s.uid}, not you (uid ${me})`);
  if (!p.running) throw gone(`pid ${t.pid} is not running, though something of yours listens on port ${t.port}`);
  if (p.uid !== me) throw refuse(`pid ${t.pid}, which daemon.json names, belongs to uid ${p.uid}, not you (uid ${me})`);
  if (t.exe && p.exe && p.exe !== t.exe) throw gone(`pid ${t.pid} is now ${p.exe}, not the card daemon (${t.exe}) that wrote daemon.json`);
  if (p.sockets && !held.some((s) => p.sockets!.has(s.inode))) {
    throw refuse(`pid ${t.pid}, which daemon.json names, does not hold the socket listening on port ${t.port}`);
  }
}

/**
 * Decides from the process alone, where the platform does not list sockets
 * with their owners (macOS): the process daemon.json names is running, is
 * this user's, and runs an executable of the daemon's name.
 */
export function judgeProcess(home: string, t: Target, me: number, p: Process): void {
  if (!p.running) throw new NoDaemonError(home, t.pid, new Error(`pid ${t.pid} is not running`));
  if (p.uid !== me) throw new ListenerError(home, t.port, `pid ${t.pid}, which daemon.json names, belongs to uid ${p.uid}, not you (uid ${me})`);
  if (t.exe && p.exe && !sameCommand(p.exe, t.exe)) {
    throw new NoDaemonError(home, t.pid, new Error(`pid ${t.pid} is now ${p.exe}, not the card daemon (${t.exe}) that wrote daemon.json`));
  }
}

/** Compares a process's command name, which the kernel may cut short (16 bytes on macOS), with the executable's path. */
export function sameCommand(comm: string, exe: string): boolean {
  const base = basename(exe);
  if (comm === base || comm === exe) return true;
  return comm.length >= 15 && base.length > comm.length && base.startsWith(comm);
}

const tcpListen = 0x0a;

/**
 * Reads /proc/net/tcp or tcp6: each line after the header is "sl local rem
 * st tx:rx tr:when retrnsmt uid timeout inode …"; the IP is printed as the
 * kernel's 32-bit words in host byte order, the port as a hex number.
 */
export function parseProcNet(text: string, v6: boolean, littleEndian = true): Socket[] {
  const out: Socket[] = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const [ipHex, portHex] = f[1]!.split(':');
    if (!ipHex || !portHex || ipHex.length !== (v6 ? 32 : 8)) continue;
    const raw = Buffer.from(ipHex, 'hex');
    const bytes = Buffer.alloc(raw.length);
    for (let i = 0; i < raw.length; i += 4) {
      const word = raw.readUInt32BE(i);
      if (littleEndian) bytes.writeUInt32LE(word, i); else bytes.writeUInt32BE(word, i);
    }
    let addr: Uint8Array;
    if (v6) addr = new Uint8Array(bytes);
    else { addr = new Uint8Array(16); addr[10] = 0xff; addr[11] = 0xff; addr.set(bytes, 12); }
    const st = parseInt(f[3]!, 16);
    const uid = Number(f[7]);
    if (!Number.isInteger(uid) || Number.isNaN(st)) continue;
    out.push({ addr, v4: !v6, port: parseInt(portHex, 16), listen: st === tcpListen, uid, inode: f[9]! });
  }
  return out;
}

/** What /proc shows of pid: gone or a zombie is not running; the descriptor list is null when unreadable. */
export function readProcLinux(pid: number): Process {
  const dir = `/proc/${pid}`;
  let status: string;
  try { status = readFileSync(`${dir}/status`, 'utf8'); } catch { return { running: false, uid: -1, exe: '', sockets: null }; }
  const p: Process = { running: true, uid: -1, exe: '', sockets: null };
  for (const line of status.split('\n')) {
    const [k, v = ''] = line.split(/:(.*)/s);
    const f = v.trim().split(/\s+/);
    if (k === 'State' && (f[0] === 'Z' || f[0] === 'X')) p.running = false;
    // real, effective, saved, filesystem: the effective uid is whose rights it has.
    if (k === 'Uid' && f.length > 1) p.uid = Number(f[1]);
  }
  try { p.exe = readlinkSync(`${dir}/exe`).replace(/ \(deleted\)$/, ''); } catch { /* not ours to read */ }
  try {
    const fds = readdirSync(`${dir}/fd`);
    p.sockets = new Set();
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`${dir}/fd/${fd}`));
        if (m) p.sockets.add(m[1]!);
      } catch { /* closed meanwhile */ }
    }
  } catch { /* undumpable: the uid checks still hold */ }
  return p;
}

/** What ps shows of pid on macOS: its effective uid, state and accounting name (p_comm, at most 16 bytes). */
export function readProcDarwin(pid: number): Process {
  let out: string;
  try {
    out = execFileSync('/bin/ps', ['-o', 'uid=,state=,ucomm=', '-p', String(pid)], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return { running: false, uid: -1, exe: '', sockets: null }; // ps exits 1 for a pid that names no process
  }
  const m = /^\s*(\d+)\s+(\S+)\s+(.*)$/m.exec(out);
  if (!m) return { running: false, uid: -1, exe: '', sockets: null };
  return { running: !m[2]!.startsWith('Z'), uid: Number(m[1]), exe: m[3]!.trim(), sockets: null };
}

/**
 * Checks, before the token is sent, that the daemon daemon.json names is
 * the one listening: on Linux the socket's owner in /proc/net/tcp*, and the
 * pid running, this user's, the executable that wrote the file and holding
 * that socket; on macOS the pid (running, this user's, its command name);
 * elsewhere only that the pid runs and may be signalled by this user.
 */
export function verifyListener(home: string, t: Target, platform: NodeJS.Platform = process.platform): void {
  const me = process.geteuid ? process.geteuid() : -1;
  if (platform === 'linux') {
    const sockets: Socket[] = [];
    for (const [path, v6] of [['/proc/net/tcp', false], ['/proc/net/tcp6', true]] as const) {
      let text: string;
      try {
        text = readFileSync(path, 'utf8');
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue; // no IPv6 in this kernel
        throw new ListenerError(home, t.port, `cannot read the kernel's socket table ${path}: ${(e as Error).message}`);
      }
      sockets.push(...parseProcNet(text, v6, littleEndianHost()));
    }
    judgeListener(home, t, me, sockets, readProcLinux(t.pid));
    return;
  }
  if (platform === 'darwin') {
    judgeProcess(home, t, me, readProcDarwin(t.pid));
    return;
  }
  const p: Process = { running: true, uid: me, exe: '', sockets: null };
  try { process.kill(t.pid, 0); } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ESRCH') p.running = false;
    if (code === 'EPERM') p.uid = -1;
  }
  judgeProcess(home, t, me, p);
}

function littleEndianHost(): boolean {
  return new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
}
