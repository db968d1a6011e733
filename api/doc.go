// Package api holds card's wire types, once: every method's params and
// result, the events and notifications, the error data and the enums a
// client sees. The daemon's packages build these values and the Go client
// decodes them, so a client needs nothing of the daemon (no SQLite, no
// agent runner) to speak the protocol, and rpc.discover names each schema
// by its type alone, the same name whichever package uses it.
//
// It imports only the standard library, and nothing of card imports back
// into it: the TypeScript client is generated from these shapes, so they
// must not move when the daemon's insides do.
package api
