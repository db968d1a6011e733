// Package detect finds the coding-agent CLIs installed on this machine and
// tells whether each can run and is signed in.
//
// The wire types in this file are shared by every surface that reports
// detection (the JSON-RPC methods agents.detect and agents.health_external,
// and `card detect --json`), so a host can switch transports without
// reshaping payloads. Their JSON bytes are pinned by golden tests: a renamed
// field or enum string is a breaking change for every client.
package detect

import "github.com/card-dev/card/api"

// Runnable is the status of a binary detection could execute (api.Runnable).
func Runnable() api.ExecutableStatus { return api.Runnable() }

// Unusable is the status of a binary the OS refused to run (api.Unusable).
func Unusable(reason string, checkedAt uint64) api.ExecutableStatus {
	return api.Unusable(reason, checkedAt)
}
