// Where the daemon's home is, and the command that starts a daemon for it:
// the daemon's own rules, from the environment alone, reading no file. Kept
// apart from home.ts, whose checks refuse a missing home with NoDaemonError,
// so that the error can name the command without the two modules importing
// each other.

import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

type Env = Record<string, string | undefined>;

/**
 * The home a client talks to: the one given, else $CARD_HOME, else the
 * platform default ($XDG_STATE_HOME/card or ~/.local/state/card on Linux,
 * ~/Library/Application Support/card on macOS), the daemon's own rule.
 */
export function resolveHome(home?: string, env: Env = process.env, platform: NodeJS.Platform = process.platform): string {
  if (home) return home;
  if (env.CARD_HOME) return resolve(env.CARD_HOME);
  const user = env.HOME || homedir();
  if (!user) throw new Error('cannot find the home directory: set HOME, CARD_HOME or the home option');
  if (platform === 'darwin') return join(user, 'Library', 'Application Support', 'card');
  const xdg = env.XDG_STATE_HOME;
  if (xdg && xdg.startsWith('/')) return join(xdg, 'card');
  return join(user, '.local', 'state', 'card');
}

/** The command that starts a daemon for home. */
export function serveCommand(home: string, env: Env = process.env): string {
  let def = '';
  try { def = resolveHome(undefined, env); } catch { /* no default */ }
  if (def === home) return 'card serve';
  if (!/[\s'"\\$`!*?[\]{}()<>|&;#~]/.test(home)) return `card serve --home ${home}`;
  return `card serve --home '${home.replaceAll("'", "'\\''")}'`;
}
