// Package acp is the Agent Client Protocol, version 1, as Go types: the
// messages both sides send, their method names and error codes, and the
// framing (JSON-RPC 2.0, one message per line, over a child's stdio or a
// socket).
//
// ACP is spoken in two directions in card. As a client, card runs Gemini
// CLI and Copilot CLI over it (spawn maps their updates and questions onto
// a run); as an agent, card answers editors that speak it. Both sides read
// and write the same messages, so the types live here once, apart from
// either role: a message one side writes is the message the other reads,
// and a change of the protocol is one change.
//
// The types follow the published schema (the stable schema/v1 of the
// protocol's TypeScript SDK, kept in testdata and checked by this package's
// tests), not anyone's memory of it. Fields an agent is known to send
// outside the schema are kept where card reads them, and marked so.
//
// Reading is lenient where the schema is: the schema marks most optional
// fields to read as their default when they have the wrong type, so a
// session update whose one field changed shape costs that field, not the
// update. Writing is strict: every message this package writes carries the
// fields the schema requires, even when they are empty.
//
// The package imports only the standard library: the connection (request
// ids, replies, cancellation) is the user's, so that the client side and
// the agent side can each keep their own.
package acp
