// Finding the daemon and opening the socket: the URL in <home>/daemon.json,
// the token in <home>/token, and proof from the operating system that what
// listens there is this user's daemon before the token is sent.

import { join } from 'node:path';
import { ListenerError, NoDaemonError } from './errors.js';
import { HomeError, checkHome, discoveryFileName, readDiscovery, readToken, type Discovery } from './home.js';
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

export { ListenerError, NoDaemonError };
