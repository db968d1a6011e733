import {
  AbstractMessageReader,
  AbstractMessageWriter,
  CancellationTokenSource,
  ResponseError,
  createMessageConnection,
  type DataCallback,
  type Disposable,
  type Message,
  type MessageConnection,
  type MessageReader,
  type MessageWriter,
} from 'vscode-jsonrpc/node';
import type WebSocket from 'ws';
import { type Endpoint } from './connect.js';
import { open } from './socket.js';
import { CardError, ConnectionLostError, ProtocolVersionError, protocolMajor } from './errors.js';
import {
  MethodsBase,
  protocolVersion,
  type AgentEvent,
  type AgentsInvokeParams,
  type ApproveAnswer,
  type ApproveParams,
  type CallOptions,
  type Info,
  type InvokeResult,
  type MethodName,
  type Methods,
  type Notifications,
  type SessionEvent,
  type SessionsPromptParams,
  type SessionsPromptResult,
} from './generated.js';

/**
 * Answers one ask-mode question. signal aborts when the daemon withdraws
 * it (answered elsewhere, expired) or the connection closes; an answer
 * after that is not counted. undefined answers nothing here: the question
 * stays open for another client, agents.approval_decide or the timeout.
 */
export type Approver = (question: ApproveParams, signal: AbortSignal) => ApproveAnswer | undefined | Promise<ApproveAnswer | undefined>;

/** How the client reconnects when the socket drops. */
export interface ReconnectOptions {
  /** First wait, doubled per failed attempt (default 100 ms). */
  initialDelayMs?: number;
  /** Longest wait between attempts (default 5 s). */
  maxDelayMs?: number;
  /** Give up after this long without a connection (default 120 s); the streams then fail with the last error. */
  giveUpAfterMs?: number;
}

export interface ClientOptions extends Endpoint {
  /**
   * Answers the questions of this connection's ask-mode runs. 'elsewhere'
   * leaves them unanswered for another client (or agents.approval_decide,
   * or the timeout); undefined answers each with -32601, which denies it at
   * once, as card's Go client does. invoke's own onApprove comes first.
   */
  onApprove?: Approver | 'elsewhere';
  /** false: a dropped socket ends the client (the streams fail). Default: reconnect. */
  reconnect?: boolean | ReconnectOptions;
  /**
   * Called when the socket dropped and the client starts reconnecting
   * (never after close(), nor with reconnect: false): err says why. Calls
   * made meanwhile wait for the new connection; a stream goes on where it
   * was once it is back. For a "reconnecting…" line in the app.
   */
  onDisconnect?: (err: Error) => void;
  /**
   * Called each time the client has connected again, possibly to a
   * restarted daemon (a new port and token), and resubscribed its streams.
   * Not called if it gives up (giveUpAfterMs): the streams then fail with
   * a ConnectionLostError, and so does every later call.
   */
  onReconnect?: () => void;
}

export interface InvokeOptions {
  /** Aborting cancels the run (agents.cancel); the iterator then throws the signal's reason. */
  signal?: AbortSignal;
  /** Answers this run's questions, before the client's own onApprove. */
  onApprove?: Approver | 'elsewhere';
}

export interface FollowOptions {
  /** Only the events after this seq (default 0: from the start). */
  afterSeq?: number;
  /** Aborting stops following (the run goes on); the iterator throws the signal's reason. */
  signal?: AbortSignal;
  onApprove?: Approver | 'elsewhere';
}

/** One text frame per JSON-RPC message, as the daemon speaks it. */
class WsReader extends AbstractMessageReader implements MessageReader {
  constructor(private readonly ws: WebSocket) {
    super();
    ws.on('close', () => this.fireClose());
    ws.on('error', (err) => this.fireError(err));
  }
  listen(callback: DataCallback): Disposable {
    const onMessage = (data: WebSocket.RawData, isBinary: boolean) => {
      if (isBinary) return;
      try {
        callback(JSON.parse(String(data)) as Message);
      } catch (err) {
        this.fireError(err);
      }
    };
    this.ws.on('message', onMessage);
    return { dispose: () => { this.ws.off('message', onMessage); } };
  }
}

class WsWriter extends AbstractMessageWriter implements MessageWriter {
  constructor(private readonly ws: WebSocket) {
    super();
    ws.on('close', () => this.fireClose());
  }
  write(msg: Message): Promise<void> {
    return new Promise((resolve, reject) => {
      this.ws.send(JSON.stringify(msg), (err) => {
        if (err) { this.fireError([err, msg, undefined]); reject(err); } else resolve();
      });
    });
  }
  end(): void { this.ws.close(); }
}

// The codes vscode-jsonrpc gives requests that failed on this side (not
// written, the connection disposed, read failed, inactive): never the
// daemon's answer.
const writeError = -32099;
const localCodes = new Set([-32099, -32098, -32097, -32096]);

/** A stream's end of its run: what the terminal event said. */
const isTerminal = (ev: AgentEvent) => ev.kind === 'done' || ev.kind === 'error';

const abortReason = (signal: AbortSignal): Error =>
  signal.reason instanceof Error ? signal.reason : new DOMException(String(signal.reason ?? 'This operation was aborted'), 'AbortError');

/**
 * The events of one run as an async iterable, in seq order, each once, the
 * terminal one (done or error) last. It survives reconnects: the client
 * resubscribes from the last seq it handed out. Breaking out of the loop
 * stops following; the run goes on (cancel it with the signal).
 */
export class RunStream implements AsyncIterable<AgentEvent> {
  /** The run's id, once agents.invoke answered (set before the first event). */
  runId: string | undefined;
  /** The last seq handed to the stream. */
  lastSeq = 0;
  /** The run's result, from its terminal event. */
  result: InvokeResult | undefined;
  private readonly queue: AgentEvent[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  private failure: Error | null = null;
  private readonly idKnown: Promise<string>;
  private resolveId!: (id: string) => void;
  private rejectId!: (err: Error) => void;

  constructor(
    private readonly client: Client,
    readonly onApprove: Approver | 'elsewhere' | undefined,
  ) {
    this.idKnown = new Promise((res, rej) => { this.resolveId = res; this.rejectId = rej; });
    this.idKnown.catch(() => {});
  }

  /** Resolves with the run id once the daemon named it; rejects with the refusal when it refused the run. */
  id(): Promise<string> { return this.idKnown; }

  /** @internal */
  setRunId(id: string): void { this.runId = id; this.resolveId(id); }

  private lateEnd = false;
  private aborted: Error | null = null;

  /** @internal The caller aborted: the stream ends with err, after the events already here. */
  abort(err: Error): void { this.aborted = err; }

  /** @internal The run has ended: its terminal event is taken even at a seq already seen. */
  acceptLateEnd(): void { this.lateEnd = true; }

  /** @internal Takes an event of this run; drops what was seen already. */
  push(ev: AgentEvent): void {
    if (this.ended) return;
    if (ev.seq <= this.lastSeq && !(this.lateEnd && isTerminal(ev))) return;
    // Seqs rise but may skip: events past max_events_per_run are counted,
    // not sent.
    this.lastSeq = Math.max(this.lastSeq, ev.seq);
    this.queue.push(ev);
    if (isTerminal(ev)) {
      this.result = (ev as { result?: InvokeResult }).result;
      this.ended = true;
      // Aborted: the loop throws after the last event, whichever came
      // first, the cancel's answer or the run's end.
      if (this.aborted) this.failure = this.aborted;
      this.client.detach(this);
    }
    this.poke();
  }

  /** @internal Ends the stream with err after what is queued. */
  fail(err: Error): void {
    if (!this.runId) this.rejectId(err);
    if (this.ended) return;
    this.ended = true;
    this.failure = err;
    this.client.detach(this);
    this.poke();
  }

  /** @internal */
  get finished(): boolean { return this.ended; }

  private poke() { const w = this.wake; this.wake = null; w?.(); }

  async *[Symbol.asyncIterator](): AsyncIterator<AgentEvent> {
    try {
      for (;;) {
        const ev = this.queue.shift();
        if (ev) { yield ev; continue; }
        if (this.ended) {
          if (this.failure) throw this.failure;
          return;
        }
        await new Promise<void>((r) => { this.wake = r; });
      }
    } finally {
      if (!this.ended) { this.ended = true; this.client.detach(this); }
    }
  }
}

export interface PromptOptions {
  /** Aborting stops following the turn (the turn goes on; sessions.cancel ends it); the iterator throws the signal's reason. */
  signal?: AbortSignal;
  /** Answers the questions of this turn, before the client's own onApprove. */
  onApprove?: Approver | 'elsewhere';
}

/**
 * One prompt's turn, as client.prompt gives it: its events as an async
 * iterable, the prompt's answer, and where the loop is.
 */
export interface PromptStream extends AsyncIterable<AgentEvent> {
  /** sessions.prompt's answer: the turn, and whether it waits in the queue. */
  result: Promise<SessionsPromptResult>;
  /**
   * The turn's run, once known: from the answer when the turn started at
   * once, else from its first event. Keep it with lastSeq to take the turn
   * up again after a window reload: `client.follow(runId, { afterSeq: lastSeq })`.
   */
  runId: string | undefined;
  /** The run seq of the last event the loop handed out (0 before the first). */
  lastSeq: number;
}

export interface SessionFollowOptions {
  /** Only the session's events after this seq (default 0: from the start). */
  afterSeq?: number;
  /** Aborting stops following (the session goes on); the iterator throws the signal's reason. */
  signal?: AbortSignal;
  /** Answers the questions of this session's turns, before the client's own onApprove. */
  onApprove?: Approver | 'elsewhere';
}

/**
 * A session's events across its turns (sessions.subscribe), in the
 * session's seq order, each once, surviving reconnects like a RunStream.
 * It follows the session until the loop breaks, the signal aborts or the
 * client closes; a closed session's history ends the loop once replayed.
 */
export class SessionStream implements AsyncIterable<SessionEvent> {
  /** The last session seq handed to the stream. */
  lastSeq = 0;
  /** Where a closed session's history ends (next_seq - 1); null while the session is open. */
  private endSeq: number | null = null;
  /** The run ids of the session's turns seen so far, so their questions go to this stream's approver. */
  readonly runs = new Set<string>();
  private readonly queue: SessionEvent[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  private failure: Error | null = null;

  constructor(
    private readonly client: Client,
    readonly sessionId: string,
    readonly onApprove: Approver | 'elsewhere' | undefined,
  ) {}

  /** @internal */
  push(ev: SessionEvent): void {
    if (this.ended || ev.seq <= this.lastSeq) return;
    this.lastSeq = ev.seq;
    this.runs.add(ev.event.run_id);
    this.queue.push(ev);
    if (this.endSeq !== null && this.lastSeq >= this.endSeq) this.finish();
    this.poke();
  }

  /** @internal The session is closed: its history ends at seq. */
  closedAt(seq: number): void {
    this.endSeq = seq;
    if (this.lastSeq >= seq) { this.finish(); this.poke(); }
  }

  /** @internal */
  fail(err: Error): void {
    if (this.ended) return;
    this.failure = err;
    this.finish();
    this.poke();
  }

  /** @internal */
  get finished(): boolean { return this.ended; }

  private finish() { this.ended = true; this.client.detachSession(this); }
  private poke() { const w = this.wake; this.wake = null; w?.(); }

  async *[Symbol.asyncIterator](): AsyncIterator<SessionEvent> {
    try {
      for (;;) {
        const ev = this.queue.shift();
        if (ev) { yield ev; continue; }
        if (this.ended) {
          if (this.failure) throw this.failure;
          return;
        }
        await new Promise<void>((r) => { this.wake = r; });
      }
    } finally {
      if (!this.ended) this.finish();
    }
  }
}

/**
 * One connection to the card daemon, kept: when the socket drops (the
 * daemon restarted, the machine slept) it reconnects with backoff, finding
 * the daemon again through the home, and resubscribes every stream from the
 * last seq it saw. Every method of the daemon is a typed function of it
 * (agentsDetect, runsList, …); invoke and follow give a run's events as an
 * async iterable.
 */
export class Client extends MethodsBase {
  /** The home the client found the daemon through ('' when given a URL). */
  home = '';
  /** The daemon's URL, as daemon.json gave it (or the url option). */
  url = '';
  /** The protocol version the daemon speaks (daemon.info's), checked at every connection to have this client's major. */
  protocolVersion = '';
  private conn: MessageConnection | null = null;
  private ws: WebSocket | null = null;
  private ready: Promise<MessageConnection>;
  private closed = false;
  private readonly streams = new Map<string, RunStream>();
  private readonly sessionStreams = new Map<string, Set<SessionStream>>();
  private readonly starting = new Set<RunStream>();
  private readonly early = new Map<string, AgentEvent[]>();
  private readonly listeners = new Map<string, Set<(params: never) => void>>();

  private constructor(private readonly opts: ClientOptions) {
    super();
    this.ready = Promise.reject(new ConnectionLostError('not connected'));
    this.ready.catch(() => {});
  }

  /** Finds the daemon (see findDaemon) and connects. */
  static async connect(opts: ClientOptions = {}): Promise<Client> {
    const c = new Client(opts);
    const conn = await c.open();
    c.ready = Promise.resolve(conn);
    return c;
  }

  private async open(): Promise<MessageConnection> {
    const { ws, home, url } = await open(this.opts);
    this.home = home;
    this.url = url;
    const conn = createMessageConnection(new WsReader(ws), new WsWriter(ws));
    conn.onNotification('agents.event', (ev: AgentEvent) => this.route(ev));
    conn.onNotification('runs.subscription_ended', (p: Notifications['runs.subscription_ended']) => {
      this.emit('runs.subscription_ended', p);
      if (p.session_id) {
        // A session's subscription, cut off behind its turn: one
        // subscription takes the session up again from the furthest-behind
        // stream's last seq (every stream of the session reads it, each
        // seq once); a follower of the turn's run alone was not cut off.
        let behind: SessionStream | undefined;
        for (const st of this.sessionStreams.get(p.session_id) ?? []) if (!behind || st.lastSeq < behind.lastSeq) behind = st;
        if (behind) void this.subscribeSession(behind);
        return;
      }
      // Cut off for being too far behind: go on from where it stopped.
      const s = this.streams.get(p.run_id);
      if (s) void this.resubscribe(s, Math.min(s.lastSeq, p.next_seq - 1));
    });
    // Every other notification (a method with a handler above is not
    // passed to this one).
    conn.onNotification((method: string, params: unknown) => this.emit(method, params));
    conn.onNotification('sessions.event', (ev: SessionEvent) => {
      this.emit('sessions.event', ev);
      for (const st of this.sessionStreams.get(ev.session_id) ?? []) st.push(ev);
    });
    conn.onRequest('agents.approve', (q: ApproveParams, token) => this.approve(q, token));
    conn.onError(() => {});
    conn.listen();
    // The protocol's major version before anything else: a daemon of
    // another major may mean something else by the same field. Checked on
    // every connection, since a restarted daemon may be another build.
    let info: Info;
    try {
      info = await conn.sendRequest<Info>('daemon.info', {});
    } catch (err) {
      conn.dispose();
      ws.terminate();
      throw err instanceof ResponseError ? new CardError(err.code, err.message, (err.data ?? {}) as never, 'daemon.info') : err;
    }
    if (protocolMajor(info.protocol_version) !== protocolMajor(protocolVersion)) {
      conn.dispose();
      ws.terminate();
      throw new ProtocolVersionError(home, info.protocol_version, protocolVersion);
    }
    this.protocolVersion = info.protocol_version;
    conn.onClose(() => this.dropped(conn, new ConnectionLostError('the connection to the daemon closed')));
    this.conn = conn;
    this.ws = ws;
    return conn;
  }

  private async approve(q: ApproveParams, token: { isCancellationRequested: boolean; onCancellationRequested: (l: () => void) => Disposable }): Promise<ApproveAnswer | ResponseError> {
    let handler = this.streams.get(q.run_id)?.onApprove;
    for (const set of this.sessionStreams.values()) for (const st of set) if (!handler && st.runs.has(q.run_id)) handler = st.onApprove;
    handler ??= this.opts.onApprove;
    if (!handler) return new ResponseError(-32601, 'this client answers no agents.approve questions');
    const ac = new AbortController();
    token.onCancellationRequested(() => ac.abort());
    // Left open: never answered here; the daemon withdraws the question
    // once it is decided.
    const leave = async () => {
      if (!ac.signal.aborted) await new Promise<void>((r) => ac.signal.addEventListener('abort', () => r(), { once: true }));
      return new ResponseError(-32800, 'left to another client');
    };
    if (handler === 'elsewhere') return leave();
    let answer: ApproveAnswer | undefined;
    try {
      answer = await handler(q, ac.signal);
    } catch (err) {
      return new ResponseError(-32603, `the approver failed: ${(err as Error).message}`);
    }
    return answer ?? leave();
  }

  private emit(method: string, params: unknown): void {
    for (const l of this.listeners.get(method) ?? []) {
      try { (l as (p: unknown) => void)(params); } catch { /* a listener's failure is its own */ }
    }
  }

  private route(ev: AgentEvent): void {
    this.emit('agents.event', ev);
    const s = this.streams.get(ev.run_id);
    if (s) { s.push(ev); return; }
    if (this.starting.size > 0) {
      // A run whose agents.invoke answer is not handled yet: keep its
      // events for the stream that is about to claim it.
      const list = this.early.get(ev.run_id) ?? [];
      if (list.length < 10_000) list.push(ev);
      this.early.set(ev.run_id, list);
    }
  }

  /** @internal */
  detach(s: RunStream): void {
    if (s.runId && this.streams.get(s.runId) === s) this.streams.delete(s.runId);
    this.starting.delete(s);
  }

  private attach(s: RunStream, id: string): void {
    s.setRunId(id);
    this.starting.delete(s);
    if (s.finished) return;
    this.streams.set(id, s);
    for (const ev of this.early.get(id) ?? []) s.push(ev);
    this.early.delete(id);
    if (this.starting.size === 0) this.early.clear();
  }

  private dropped(conn: MessageConnection, err: Error): void {
    if (this.conn !== conn) return;
    this.conn = null;
    this.ws = null;
    conn.dispose();
    if (this.closed) return;
    const rc = this.opts.reconnect ?? true;
    if (rc === false) {
      this.closed = true;
      this.ready = Promise.reject(err);
      this.ready.catch(() => {});
      for (const s of this.allStreams()) s.fail(err);
      return;
    }
    this.opts.onDisconnect?.(err);
    this.ready = this.reconnect(rc === true ? {} : rc);
    this.ready.catch(() => {});
  }

  private async reconnect(o: ReconnectOptions): Promise<MessageConnection> {
    const initial = o.initialDelayMs ?? 100;
    const max = o.maxDelayMs ?? 5000;
    const deadline = Date.now() + (o.giveUpAfterMs ?? 120_000);
    let last: Error = new ConnectionLostError('the connection to the daemon closed');
    for (let attempt = 0; ; attempt++) {
      const wait = Math.min(max, initial * 2 ** attempt) * (0.8 + 0.4 * Math.random());
      await new Promise((r) => setTimeout(r, wait));
      if (this.closed) throw new ConnectionLostError('the client was closed');
      try {
        const conn = await this.open();
        if (this.closed) { conn.dispose(); this.ws?.terminate(); throw new ConnectionLostError('the client was closed'); }
        this.ready = Promise.resolve(conn);
        for (const s of [...this.streams.values()]) void this.resubscribe(s, s.lastSeq);
        for (const set of this.sessionStreams.values()) for (const st of set) void this.subscribeSession(st);
        this.opts.onReconnect?.();
        return conn;
      } catch (err) {
        last = err as Error;
        if (err instanceof ProtocolVersionError) {
          // Another daemon took the home's place: waiting will not make
          // it speak this client's protocol.
          this.closed = true;
          for (const s of this.allStreams()) s.fail(err);
          throw err;
        }
        if (Date.now() > deadline) {
          const gaveUp = new ConnectionLostError(`gave up reconnecting to the daemon: ${last.message}`, { cause: last });
          this.closed = true;
          for (const s of this.allStreams()) s.fail(gaveUp);
          throw gaveUp;
        }
      }
    }
  }

  private async resubscribe(s: RunStream, afterSeq: number): Promise<void> {
    if (!s.runId) return;
    try {
      const r = await this.call('runs.subscribe', { run_id: s.runId, after_seq: afterSeq });
      if (!r.live && !s.finished) {
        // The run ended while we were away. A daemon that was killed keeps
        // only the events it had stored, and gives the run its terminal
        // event at the seq after those at restart, which can be at or
        // below what this stream saw live: replay it whole so that end is
        // not missed (what was seen is dropped again as a duplicate).
        s.acceptLateEnd();
        await this.call('runs.subscribe', { run_id: s.runId, after_seq: 0 });
      }
    } catch (err) {
      if (err instanceof ConnectionLostError) return; // the next reconnect tries again
      s.fail(err as Error);
    }
  }

  async call<M extends MethodName>(method: M, params?: Methods[M]['params'], opts: CallOptions = {}): Promise<Methods[M]['result']> {
    const { signal } = opts;
    if (signal?.aborted) throw abortReason(signal);
    for (let attempt = 0; ; attempt++) {
      const conn = await this.ready;
      const cts = new CancellationTokenSource();
      const onAbort = () => cts.cancel();
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        const p = params === undefined
          ? conn.sendRequest<Methods[M]['result']>(method, cts.token)
          : conn.sendRequest<Methods[M]['result']>(method, params, cts.token);
        return await p;
      } catch (err) {
        if (signal?.aborted) throw abortReason(signal);
        if (err instanceof ResponseError && !localCodes.has(err.code)) {
          throw new CardError(err.code, err.message, (err.data ?? {}) as never, method);
        }
        // A request that could not be written never reached the daemon, so
        // it is sent again once the client has connected again; one that
        // was in flight when the socket dropped may have been handled, and
        // only the caller knows whether it may be repeated.
        if (err instanceof ResponseError && err.code === writeError && attempt < 3 && !this.closed) {
          await new Promise((r) => setTimeout(r, 50 * (attempt + 1)));
          continue;
        }
        throw new ConnectionLostError(`${method}: ${(err as Error).message}`, { cause: err });
      } finally {
        signal?.removeEventListener('abort', onAbort);
        cts.dispose();
      }
    }
  }

  /**
   * Runs an agent and streams its events:
   *
   *     for await (const ev of client.invoke({ id: 'claude-code', task, cwd })) …
   *
   * A refusal (an agent not installed, the guard, …) is thrown from the
   * loop as a CardError.
   */
  invoke(params: Omit<AgentsInvokeParams, 'stream'>, opts: InvokeOptions = {}): RunStream {
    const s = new RunStream(this, opts.onApprove);
    this.starting.add(s);
    const { signal } = opts;
    const cancel = () => {
      s.abort(abortReason(signal!));
      s.id().then(async (id) => {
        try { await this.agentsCancel({ run_id: id }); } catch { /* ended meanwhile */ }
        s.fail(abortReason(signal!));
      }, () => { /* refused: nothing to cancel */ });
    };
    if (signal?.aborted) { s.fail(abortReason(signal)); return s; }
    signal?.addEventListener('abort', cancel, { once: true });
    this.agentsInvoke({ ...params, stream: true } as AgentsInvokeParams).then(
      (acc) => {
        const id = (acc as { run_id: string }).run_id;
        this.attach(s, id);
      },
      (err: Error) => { this.starting.delete(s); s.fail(err); },
    );
    return s;
  }

  /** Follows a run (runs.subscribe): its events after afterSeq, then live to its end. */
  follow(runId: string, opts: FollowOptions = {}): RunStream {
    const s = new RunStream(this, opts.onApprove);
    s.lastSeq = opts.afterSeq ?? 0;
    this.attach(s, runId);
    const { signal } = opts;
    if (signal?.aborted) { s.fail(abortReason(signal)); return s; }
    signal?.addEventListener('abort', () => s.fail(abortReason(signal)), { once: true });
    this.runsSubscribe({ run_id: runId, after_seq: s.lastSeq }).catch((err: Error) => s.fail(err));
    return s;
  }

  /**
   * Follows a session across its turns (sessions.subscribe):
   *
   *     for await (const { turn, event } of client.followSession(id)) …
   */
  followSession(sessionId: string, opts: SessionFollowOptions = {}): SessionStream {
    const st = new SessionStream(this, sessionId, opts.onApprove);
    st.lastSeq = opts.afterSeq ?? 0;
    const set = this.sessionStreams.get(sessionId) ?? new Set();
    set.add(st);
    this.sessionStreams.set(sessionId, set);
    const { signal } = opts;
    if (signal?.aborted) { st.fail(abortReason(signal)); return st; }
    signal?.addEventListener('abort', () => st.fail(abortReason(signal)), { once: true });
    void this.subscribeSession(st);
    return st;
  }

  /**
   * Sends a prompt to a session and yields the events of its turn, from
   * its first to its terminal one, whether it started at once or waited in
   * the queue. result resolves with sessions.prompt's answer; runId and
   * lastSeq say where the loop is, for taking the turn up again elsewhere
   * (after a window reload: `client.follow(runId, { afterSeq: lastSeq })`).
   */
  prompt(params: SessionsPromptParams, opts: PromptOptions = {}): PromptStream {
    const ac = new AbortController();
    const stop = () => ac.abort(opts.signal?.reason);
    opts.signal?.addEventListener('abort', stop, { once: true });
    const self = this;
    const started = (async () => {
      const { next_seq } = await self.sessionsGet({ session_id: params.session_id });
      const st = self.followSession(params.session_id, { afterSeq: next_seq - 1, signal: ac.signal, ...(opts.onApprove ? { onApprove: opts.onApprove } : {}) });
      try {
        return { st, res: await self.sessionsPrompt(params) };
      } catch (err) {
        st.fail(err as Error);
        throw err;
      }
    })();
    started.catch(() => {});
    const result = started.then((x) => x.res);
    result.catch(() => {});
    const stream: PromptStream = {
      result,
      runId: undefined,
      lastSeq: 0,
      async *[Symbol.asyncIterator]() {
        const { st, res } = await started;
        if (res.run_id) stream.runId = res.run_id;
        try {
          for await (const ev of st) {
            if (ev.turn !== res.turn) continue;
            stream.runId = ev.event.run_id;
            stream.lastSeq = ev.event.seq;
            yield ev.event;
            if (isTerminal(ev.event)) return;
          }
        } finally {
          opts.signal?.removeEventListener('abort', stop);
          ac.abort();
        }
      },
    };
    return stream;
  }

  private async subscribeSession(st: SessionStream): Promise<void> {
    try {
      const r = await this.call('sessions.subscribe', { session_id: st.sessionId, after_seq: st.lastSeq });
      if (!r.live) st.closedAt(r.next_seq - 1);
    } catch (err) {
      if (err instanceof ConnectionLostError) return;
      st.fail(err as Error);
    }
  }

  /** @internal */
  detachSession(st: SessionStream): void {
    const set = this.sessionStreams.get(st.sessionId);
    set?.delete(st);
    if (set?.size === 0) this.sessionStreams.delete(st.sessionId);
  }

  private allStreams(): Array<RunStream | SessionStream> {
    return [...this.streams.values(), ...this.starting, ...[...this.sessionStreams.values()].flatMap((set) => [...set])];
  }

  /** Calls handler with every notification of that method on this connection (after reconnects too); returns what removes it. */
  on<N extends keyof Notifications>(method: N, handler: (params: Notifications[N]) => void): () => void;
  on(method: string, handler: (params: unknown) => void): () => void;
  on(method: string, handler: (params: never) => void): () => void {
    const set = this.listeners.get(method) ?? new Set();
    set.add(handler);
    this.listeners.set(method, set);
    return () => { set.delete(handler); };
  }

  /** Closes the connection. Runs it started go on unless the daemon cancels them on disconnect. */
  close(): void {
    this.closed = true;
    const err = new ConnectionLostError('the client was closed');
    for (const s of this.allStreams()) s.fail(err);
    this.conn?.dispose();
    this.ws?.close();
    this.conn = null;
    this.ws = null;
  }

  /** @internal For tests: drops the socket as a network failure would. */
  _dropSocket(): void { this.ws?.terminate(); }

  /** @internal For tests: stops reading the socket, as a busy client would, until the returned function is called. */
  _pauseReading(): () => void {
    const ws = this.ws;
    ws?.pause();
    return () => ws?.resume();
  }
}

/** Finds the daemon and connects to it; see Client. */
export function connect(opts: ClientOptions = {}): Promise<Client> {
  return Client.connect(opts);
}
