// The socket to the daemon: the WebSocket upgrade with the token, and
// finding the daemon then dialling it. Apart from connect.ts so that the
// package's published types reach no type of ws: an app compiles against
// them with skipLibCheck off and no @types/ws.

import WebSocket from 'ws';
import { DialError, findDaemon, type Endpoint } from './connect.js';
import { NoDaemonError, TokenRejectedError } from './errors.js';
import { type Discovery } from './home.js';
import { resolveHome } from './homepath.js';

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

