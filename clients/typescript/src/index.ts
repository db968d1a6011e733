/// <reference types="node" preserve="true" />
// card's TypeScript client: find the daemon (with the port-owner check),
// call its methods typed from its own schema, and stream runs as async
// iterables that survive reconnects.
export * from './generated.js';
export { Client, RunStream, SessionStream, connect } from './client.js';
export type { Approver, ClientOptions, FollowOptions, InvokeOptions, PromptOptions, PromptStream, ReconnectOptions, SessionFollowOptions } from './client.js';
export { DialError, findDaemon, type Endpoint } from './connect.js';
export { CardError, ConnectionLostError, ListenerError, NoDaemonError, ProtocolVersionError, TokenRejectedError, isCardError, type ErrorData } from './errors.js';
export { HomeError, checkHome, readDiscovery, readToken, type Discovery } from './home.js';
export { resolveHome, serveCommand } from './homepath.js';
export { accepts, judgeListener, judgeProcess, parseProcNet, parseTarget, verifyListener, type Process, type Socket, type Target } from './listener.js';
