// The daemon's home as a client sees it: where it is, and the checks that
// make what is in it safe to trust, the same ones card's Go client makes
// (a private directory of this user, no links, the token readable by no
// one else). A client that read daemon.json through a link another user
// planted would send its token wherever they pointed it.

import { closeSync, constants, fstatSync, lstatSync, openSync, readlinkSync, readSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { NoDaemonError } from './errors.js';

export const tokenFileName = 'token';
export const discoveryFileName = 'daemon.json';

/** daemon.json: where the running daemon listens, and which process it is. */
export interface Discovery {
  url: string;
  pid: number;
  /** The daemon's executable, so a pid given to another program later is told apart. */
  exe?: string;
  version?: string;
  protocol_version?: string;
  started_at?: string;
}

const euid = (): number => (process.geteuid ? process.geteuid() : -1);

/** Why a home or one of its files is not to be trusted. */
export class HomeError extends Error {
  override name = 'HomeError';
}

/**
 * Checks the home before anything in it is trusted: a directory (not a
 * link) of this user that no one else can write to, in a directory not every
 * user can write to unless it is sticky. A missing home is no daemon.
 */
export function checkHome(home: string): void {
  let st;
  try {
    st = lstatSync(home);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new NoDaemonError(home, 0, e as Error);
    throw e;
  }
  if (st.isSymbolicLink()) {
    let target = '';
    try { target = readlinkSync(home); } catch { /* gone meanwhile */ }
    throw new HomeError(`home ${home} is a symbolic link (to ${target}): card does not follow a link for its home, since another user could have planted it; give the real directory, or remove the link`);
  }
  if (!st.isDirectory()) throw new HomeError(`home ${home} is not a directory; remove it or pick another`);
  const me = euid();
  if (me >= 0 && st.uid !== me) {
    throw new HomeError(`home ${home} belongs to uid ${st.uid}, not you (uid ${me}): its owner could read the token or plant files in it; use a home of your own`);
  }
  if (st.mode & 0o022) {
    throw new HomeError(`home ${home} is writable by others (mode ${octal(st.mode)}): someone could have planted files in it; check what is in it, then \`chmod 700 ${home}\``);
  }
  const parent = dirname(home);
  let pst;
  try { pst = statSync(parent); } catch { return; }
  if (pst.mode & 0o002 && !(pst.mode & 0o1000)) {
    throw new HomeError(`home ${home} is in ${parent}, which others can write to (mode ${octal(pst.mode)}, no sticky bit): another user could replace the home; pick a home under a directory only you can write to`);
  }
}

const octal = (mode: number) => (mode & 0o7777).toString(8).padStart(4, '0');

/**
 * Reads a small file of the home without following a link and checks the
 * file it opened, not the name: regular, this user's, not writable by
 * others (nor readable, when secret).
 */
export function readPrivateFile(path: string, secret: boolean): string {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ELOOP') {
      throw new HomeError(`${path} is a symbolic link: card does not follow links in its home, where one could send its token elsewhere; remove it`);
    }
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new HomeError(`${path} is not a regular file`);
    const me = euid();
    if (me >= 0 && st.uid !== me) throw new HomeError(`${path} belongs to uid ${st.uid}, not you (uid ${me})`);
    if (st.mode & (secret ? 0o077 : 0o022)) {
      throw new HomeError(secret
        ? `token file ${path} has mode ${octal(st.mode)}, readable by others; run \`card token rotate\` to replace it with a private one`
        : `${path} has mode ${octal(st.mode)}, writable by others; remove it (card writes a new one)`);
    }
    const buf = Buffer.alloc(64 << 10);
    let n = 0;
    for (;;) {
      const r = readSync(fd, buf, n, buf.length - n, null);
      if (r === 0 || n + r >= buf.length) { n += r; break; }
      n += r;
    }
    return buf.subarray(0, n).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** Reads and checks <home>/token. */
export function readToken(home: string): string {
  const path = join(home, tokenFileName);
  const tok = readPrivateFile(path, true).trim();
  if (tok.length < 64) throw new HomeError(`token file ${path} is too short to be a card token; run \`card token rotate\``);
  return tok;
}

/** Reads <home>/daemon.json, refusing a link or a file of another user. */
export function readDiscovery(home: string): Discovery {
  const path = join(home, discoveryFileName);
  const text = readPrivateFile(path, false);
  let d: unknown;
  try {
    d = JSON.parse(text);
  } catch (e) {
    throw new HomeError(`${path}: ${(e as Error).message}`);
  }
  if (typeof d !== 'object' || d === null) throw new HomeError(`${path}: not a JSON object`);
  const o = d as Record<string, unknown>;
  return {
    url: typeof o.url === 'string' ? o.url : '',
    pid: typeof o.pid === 'number' ? o.pid : 0,
    ...(typeof o.exe === 'string' ? { exe: o.exe } : {}),
    ...(typeof o.version === 'string' ? { version: o.version } : {}),
    ...(typeof o.protocol_version === 'string' ? { protocol_version: o.protocol_version } : {}),
    ...(typeof o.started_at === 'string' ? { started_at: o.started_at } : {}),
  };
}
