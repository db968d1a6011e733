// Finding the daemon and opening the socket: the URL in <home>/daemon.json,
// the token in <home>/token, and proof from the operating system that what
// listens there is this user's daemon before the token is sent.

import { join } from 'node:path';
import WebSocket from 'ws';
import { ListenerError, NoDaemonError, TokenRejectedError } from './errors.js';
import { HomeError, checkHome, discoveryFileName, readDiscovery, readToken, resolveHome, type Discovery } from './home.js';
import { parseTarget, verifyListener } from './listener.js';

/** Where to reach the daemon, as connect takes it. */
export interface Endpoint {
  /** The daemon's state directory; default $CARD_HOME, else the platform's. */
  home?: string;
  /** With url and token, reach that daemon directly; nothing is checked, the caller vouches for what listens at url. */
  url?: string;
  token?: string;
  /** Largest message accepted from the daemon, in bytes (default 64 MiB). */
  maxPayload?: number;
}

/** The upgrade failed: status is the HTTP status, 0 when no HTTP answer came (refused, reset). */
export class DialError extends Error {
  override name = 'DialError';
  constructor(readonly url: string, readonly status: number, override readonly cause?: Error) {
    super(status ? `dial ${url}: the daemon answered HTTP ${status}` : `dial ${url}: ${cause?.message ?? 'failed'}`);
  }
}

const isENOENT = (e: unknown) => (e as NodeJS.ErrnoException)?.code === 'ENOENT';

/**
 * Reads the home's daemon.json and token and checks, before the token goes
 * anywhere, that the daemon the file names is this user's and is the one
 * listening on its port. The file is read again after the token: a daemon
 * that starts meanwhile removes a dead one's daemon.json before it writes
 * its new token, so a new token is never paired with a dead daemon's port.
 */
export function findDaemon(home: string): { discovery: Discovery; token: string } {
  checkHome(home);
  for (let attempt = 0; ; attempt++) {
    let disc: Discovery;
    try { disc = readDiscovery(home); } catch (e) {
      if (isENOENT(e)) throw new NoDaemonError(home, 0, e as Error);
      throw e;
    }
    let token = '';
    let tokErr: unknown;
    try { token = readToken(home); } catch (e) { tokErr = e; }
    let again: Discovery;
    try { again = readDiscovery(home); } catch (e) {
      // Stopped while we read: the token is gone or dead with it.
      if (isENOENT(e)) throw new NoDaemonError(home, 0, e as Error);
      throw e;
    }
    if (JSON.stringify(again) === JSON.stringify(disc)) {
      if (tokErr) {
        const msg = `read the token of home ${home}: ${(tokErr as Error).message}`;
        throw tokErr instanceof HomeError ? new HomeError(msg, { cause: tokErr }) : new Error(msg, { cause: tokErr });
      }
      verifyListener(home, parseTarget(disc));
      return { discovery: disc, token };
    }
    if (attempt === 2) {
      throw new Error(`${join(home, discoveryFileName)} keeps changing while it is read (daemons starting and stopping on home ${home}?); try again`);
    }
  }
}

/** One WebSocket upgrade with the token in the Authorization header (never in the URL). */
export function dial(url: string, token: string, maxPayload = 64 << 20): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` }, maxPayload, handshakeTimeout: 10_000, perMessageDeflate: false });
    let settled = false;
    ws.once('open', () => { settled = true; resolve(ws); });
    ws.once('unexpected-response', (_req, res) => {
      settled = true;
      res.resume();
      ws.terminate();
      reject(new DialError(url, res.statusCode ?? 0));
    });
    ws.once('error', (err) => { if (!settled) { settled = true; reject(new DialError(url, 0, err)); } });
  });
}

/**
 * Finds the daemon and opens a socket to it. A token the daemon refuses is
 * read again once (it may have been rotated, or the daemon restarted
 * between the read and the upgrade); refused again, TokenRejectedError.
 * beforeDial runs before each upgrade (for tests).
 */
export async function open(ep: Endpoint, beforeDial?: () => void): Promise<{ ws: WebSocket; url: string; home: string; discovery?: Discovery }> {
  if (ep.url) return { ws: await dial(ep.url, ep.token ?? '', ep.maxPayload), url: ep.url, home: ep.home ?? '' };
  const home = resolveHome(ep.home);
  let { discovery, token } = findDaemon(home);
  for (let retried = false; ; retried = true) {
    beforeDial?.(); // tests: the token changes between the read and the upgrade
    try {
      return { ws: await dial(discovery.url, token, ep.maxPayload), url: discovery.url, home, discovery };
    } catch (e) {
      if (!(e instanceof DialError)) throw e;
      if (e.status === 0) throw new NoDaemonError(home, discovery.pid, e);
      if ((e.status === 401 || e.status === 403) && !retried) {
        const before = token;
        ({ discovery, token } = findDaemon(home));
        if (token !== before) continue;
      }
      if (e.status === 401 || e.status === 403) throw new TokenRejectedError(home, e.status);
      throw e;
    }
  }
}

export { ListenerError, NoDaemonError };
