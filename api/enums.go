package api

// The values each enumerated string type takes on the wire. rpc.discover
// publishes them (EnumValues as a closed enum, KnownValues as an open one
// the protocol may add to within a major version: health statuses and
// sources), so the clients generated from it get unions of these values
// instead of bare strings. A test holds each list to its constants.

// EnumValues lists every run status, in lifecycle order.
func (Status) EnumValues() []string { return strs(Statuses) }

// EnumValues lists what a running run may be doing.
func (RunState) EnumValues() []string {
	return strs([]RunState{StateStarting, StateWorking, StateWaitingApproval, StateWaitingAPI, StateStalled})
}

// EnumValues lists what a session may be doing.
func (SessionState) EnumValues() []string {
	return strs([]SessionState{SessionIdle, SessionRunning, SessionWaitingApproval, SessionClosed})
}

// EnumValues lists the two states of an executable.
func (ExecState) EnumValues() []string { return strs([]ExecState{StateRunnable, StateUnusable}) }

// EnumValues lists the kinds of sign-in detection guesses.
func (AuthKind) EnumValues() []string {
	return strs([]AuthKind{AuthSubscription, AuthAPIKey, AuthKindUnknown, AuthUnauthenticated})
}

// EnumValues lists how read-only may be enforced.
func (ReadOnlyEnforcement) EnumValues() []string {
	return strs([]ReadOnlyEnforcement{EnforcedByOSSandbox, EnforcedByAllowlist, EnforcedByAgentDefault, NotEnforced})
}

// EnumValues lists the answers to "is something at this path?".
func (PathStatus) EnumValues() []string {
	return strs([]PathStatus{PathMissing, PathExists, PathUnknown})
}

// KnownValues lists today's health statuses; a later minor version may add
// one (a client treats one it does not know as not ready).
func (HealthStatus) KnownValues() []string {
	return strs([]HealthStatus{StatusReady, StatusNotConfigured, StatusExpired, StatusNetworkError, StatusNotExecutable, StatusUnknown})
}

// KnownValues lists today's places detection finds a binary; a later minor
// version may add one.
func (Source) KnownValues() []string {
	return strs([]Source{SourcePin, SourcePath, SourceLoginShell, SourceWellKnown})
}

// ErrorKinds are the kinds of a run's error (RunError.Kind), as the
// schema's x-enum on that field lists them; a later minor version may add
// one.
var ErrorKinds = []string{
	KindSpawn, KindTimeout, KindCancelled, KindExit, KindEmpty, KindOutputLimit, KindAuth, KindRateLimit,
	KindNetwork, KindAPI, KindMaxTurns, KindUntrustedWorkspace, KindBadOutput, KindBadInput, KindConfig,
	KindTool, KindStalled, KindBudget, KindInterrupted,
}

func strs[S ~string](vs []S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
