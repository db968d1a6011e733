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

// Detection's wire types are shared by every surface that reports detection
// (agents.detect, agents.health_external, `card detect --json`) and live in
// package api with the other wire types; these aliases keep detection and
// its callers compiling under the old names.
type (
	AuthKind            = api.AuthKind
	ExecState           = api.ExecState
	ExecutableStatus    = api.ExecutableStatus
	Source              = api.Source
	ExternalAgentSpec   = api.ExternalAgentSpec
	HealthStatus        = api.HealthStatus
	ExternalAgentHealth = api.ExternalAgentHealth
	Capabilities        = api.Capabilities
	ReadOnlyEnforcement = api.ReadOnlyEnforcement
)

const (
	AuthSubscription       = api.AuthSubscription
	AuthAPIKey             = api.AuthAPIKey
	AuthKindUnknown        = api.AuthKindUnknown
	AuthUnauthenticated    = api.AuthUnauthenticated
	StateRunnable          = api.StateRunnable
	StateUnusable          = api.StateUnusable
	SourcePin              = api.SourcePin
	SourcePath             = api.SourcePath
	SourceLoginShell       = api.SourceLoginShell
	SourceWellKnown        = api.SourceWellKnown
	EnforcedByOSSandbox    = api.EnforcedByOSSandbox
	EnforcedByAllowlist    = api.EnforcedByAllowlist
	EnforcedByAgentDefault = api.EnforcedByAgentDefault
	NotEnforced            = api.NotEnforced
	StatusReady            = api.StatusReady
	StatusNotConfigured    = api.StatusNotConfigured
	StatusExpired          = api.StatusExpired
	StatusNetworkError     = api.StatusNetworkError
	StatusNotExecutable    = api.StatusNotExecutable
	StatusUnknown          = api.StatusUnknown
)

// Runnable is the status of a binary detection could execute (api.Runnable).
func Runnable() ExecutableStatus { return api.Runnable() }

// Unusable is the status of a binary the OS refused to run (api.Unusable).
func Unusable(reason string, checkedAt uint64) ExecutableStatus {
	return api.Unusable(reason, checkedAt)
}
