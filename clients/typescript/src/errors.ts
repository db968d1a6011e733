import { errorCodes, type ErrorCode, type ErrorName } from './generated.js';
import { serveCommand } from './homepath.js';

/**
 * No daemon answers for the home: none was started, or the one daemon.json
 * names is gone (a stale daemon.json: its pid is not running, nothing
 * listens on its port, or the port refuses connections).
 */
export class NoDaemonError extends Error {
  override name = 'NoDaemonError';
  constructor(
    readonly home: string,
    /** The pid daemon.json names when it names one that does not answer; 0 when there is no daemon.json. */
    readonly pid: number,
    override readonly cause?: Error,
  ) {
    super(
      (pid
        ? `no daemon answering for home ${home} (daemon.json names pid ${pid}: ${cause?.message ?? 'gone'})`
        : `no daemon running for home ${home}`) + `: start it with \`${serveCommand(home)}\``,
    );
  }
}

/**
 * The client refused to send the token: what listens on the daemon's port,
 * or the process daemon.json names, is not this user's card daemon.
 */
export class ListenerError extends Error {
  override name = 'ListenerError';
  constructor(
    readonly home: string,
    readonly port: number,
    /** What was wrong, e.g. "port 41234 is held by uid 1001, not you (uid 1000)". */
    readonly reason: string,
  ) {
    super(
      `${reason}: not sending the token (daemon.json of home ${home} names a daemon that is not there any more, or not yours; ` +
        'start yours again with `card serve`, which writes a new daemon.json and token)',
    );
  }
}

/** The daemon refused the token, also after the client read it again (it was rotated and changed again, or the file is not the daemon's). */
export class TokenRejectedError extends Error {
  override name = 'TokenRejectedError';
  constructor(readonly home: string, readonly status: number) {
    super(`the daemon of home ${home} refused the token (HTTP ${status}), also after reading ${home}/token again; run \`card token rotate\` or restart the daemon`);
  }
}

/** The major number of a protocol version ("1" of "1.0"). */
export const protocolMajor = (v: string): string => v.split('.')[0] ?? '';

/**
 * The daemon speaks another major version of card's protocol than the one
 * this client's types were generated from (`protocolVersion`): a field may
 * have changed its meaning, so the client refuses it rather than misread
 * it. Minor versions only add, and any minor of the same major is taken.
 */
export class ProtocolVersionError extends Error {
  override name = 'ProtocolVersionError';
  constructor(
    /** The home the daemon was found through ('' when given a URL). */
    readonly home: string,
    /** The daemon's protocol_version (daemon.info). */
    readonly daemonVersion: string,
    /** The version this client was generated from. */
    readonly clientVersion: string,
  ) {
    super(
      `the card daemon${home ? ` of home ${home}` : ''} speaks protocol ${daemonVersion}, and this @card-dev/client protocol ${clientVersion}: ` +
        `their major versions differ, so it would misread the daemon. Install the @card-dev/client of protocol ${protocolMajor(daemonVersion)}.x, ` +
        `or run a card daemon of protocol ${protocolMajor(clientVersion)}.x`,
    );
  }
}

/** The connection to the daemon ended and the client gave up reconnecting (or was told not to). */
export class ConnectionLostError extends Error {
  override name = 'ConnectionLostError';
}

/**
 * What each error's data carries, by error name: the fields
 * docs/protocol/errors.md lists for each code. The daemon's schema gives
 * codes and names but not these shapes, so they are written here; the
 * `satisfies` below makes the build fail when the daemon gains a code this
 * table does not cover.
 */
export interface ErrorData {
  parse_error: Record<string, never>;
  invalid_request: Record<string, never>;
  method_not_found: Record<string, never>;
  invalid_params: { field?: string; id?: string; known?: string[]; [k: string]: unknown };
  internal_error: Record<string, never>;
  too_many_requests: Record<string, unknown>;
  shutting_down: Record<string, unknown>;
  request_cancelled: { run_id?: string };
  guard_refused: { adapter: string; ancestry: string[]; max_chain: number; reason: 'cycle' | 'depth'; run_id?: string };
  agent_not_installed: { adapter: string; binary: string; pin_env: string; install_hint: string; run_id?: string };
  agent_unusable: { adapter: string; path: string; reason: string; run_id?: string };
  bypass_not_allowed: { adapter: string; permission_mode: string; config_key: string; run_id?: string };
  too_many_runs: { running: number; max_concurrent_runs: number; run_id?: string };
  read_only_not_enforced: { adapter: string; read_only_enforcement: string; field: string; run_id?: string };
  run_not_found: { run_id: string };
  approval_not_found: { run_id: string; request_id: string };
  approval_closed: { run_id: string; request_id?: string; decision?: string; by?: string };
  approval_not_asked: { run_id: string; request_id: string };
  substrate_read_only: { config_key: string };
  substrate_failed: { reason?: string; command?: string; after_secs?: number };
  substrate_transport: { op?: string; target?: string; timeout?: boolean; attempts?: number };
  substrate_not_supported: Record<string, unknown>;
  access_denied: { method: string; access: string; grants: string[]; origin?: string; config_key?: string; param?: string; [k: string]: unknown };
  too_many_subscriptions: { open: number; max_subscriptions_per_connection: number; config_key: string };
  session_in_use: { session_id: string; run_id: string };
  /** A daily or monthly budget (budget, scope, period, …) or a session's cap (kind budget, cap, field, session_id). */
  budget_exceeded: {
    budget?: string; scope?: string; period?: string; limit: number; spent: number; in_flight?: number;
    in_flight_runs?: number; resets_at?: string; config_key?: string; run_id?: string;
    kind?: 'budget'; cap?: string; field?: string; session_id?: string;
  };
  session_not_found: { field: 'session_id'; session_id: string };
  session_closed: { field: 'session_id'; session_id: string; close_reason: string };
  session_queue_full: { session_id: string; queued: number; max_queue: number; config_key: string };
  steer_unsupported: { session_id: string; adapter: string; reason: string };
  adapter_gone: { field: 'session_id'; session_id: string; adapter: string; reason: string; run_id?: string };
  not_session_owner: { field: 'session_id'; session_id: string; method: string; origin: string };
  too_many_sessions: { open: number; max: number; config_key: string };
  /** sessions.apply refused: the checkout (repo) is unchanged; each file with git's reason. */
  apply_conflict: { repo: string; files: { path: string; reason: string }[] };
  session_busy: { session_id: string; method: string; run_id?: string; queued: number };
  worktree_gone: { session_id: string; reason: string };
}
// Every name the daemon's schema has must be in the table above.
type Missing = Exclude<ErrorName, keyof ErrorData>;
/** Compile-time check: fails to build with the names the table above lacks. */
export const errorDataCovers: [Missing] extends [never] ? true : { missing: Missing } = true;

const nameOf = new Map<number, ErrorName>(Object.entries(errorCodes).map(([n, c]) => [c as number, n as ErrorName]));

/** A JSON-RPC error answer from the daemon, typed by its code's name. */
export class CardError<N extends ErrorName = ErrorName> extends Error {
  override name = 'CardError';
  constructor(
    readonly code: number,
    message: string,
    readonly data: N extends keyof ErrorData ? Partial<ErrorData[N]> : Record<string, unknown>,
    /** The method that was answered with it. */
    readonly method: string,
  ) {
    super(message);
  }
  /** The code's name in the daemon's table (e.g. "run_not_found"); undefined for a code it does not list. */
  get errorName(): N | undefined {
    return nameOf.get(this.code) as N | undefined;
  }
  /** Whether this is the error of that name, narrowing data to its shape. */
  is<M extends ErrorName>(name: M): this is CardError<M> {
    return this.code === (errorCodes[name] as ErrorCode);
  }
}

/** Whether err is a CardError, of that name when one is given. */
export function isCardError<M extends ErrorName>(err: unknown, name?: M): err is CardError<M> {
  return err instanceof CardError && (name === undefined || err.is(name));
}
