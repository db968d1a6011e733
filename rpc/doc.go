// Package rpc is card's transport: JSON-RPC 2.0 over a localhost
// WebSocket, and nothing of what the methods mean.
//
// It owns, on the server side:
//   - the Gate, every check of the listener before the upgrade (the
//     token, loopback Host names, allowed browser origins), in one place so
//     a new method cannot be reached without them;
//   - the Server: one JSON-RPC message or batch per text frame, size and
//     concurrency limits, a per-connection context, $/cancelRequest, the
//     reply sent before a handler's follow-up work runs (RegisterThen), and
//     shutdown;
//   - the Registry: every method registered once with its params and result
//     types, its access class and its Doc, so the gate that refuses a call
//     and the rpc.discover document that describes it are the same table;
//   - the error codes: JSON-RPC's, the transport's own, and Error for a
//     handler to choose a code and data (a handler's *api.FieldError
//     becomes -32602 naming its field);
//   - the server's own requests to a client (Peer.Call, for approvals),
//     with ids that cannot collide with the client's;
//   - the low-level Client the typed client in client/ is built on.
//
// It does not own any method, any wire type of the product, or the mapping
// of domain errors to codes: those are the daemon's, at one edge, so this
// package knows nothing of agents, runs or the store, and a change of the
// product never reaches the transport.
package rpc
