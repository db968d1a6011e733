package api

// CommandResult is what a one-shot command produced. A command that ran and
// failed is a result with a nonzero ExitCode, not an error: errors are kept
// for "the command could not be run or finished" so a caller never confuses a
// failing test suite with a broken environment.
type CommandResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

// PathStatus is the answer to "is something at this path?".
type PathStatus string

const (
	// PathMissing means the environment confirmed nothing is there.
	PathMissing PathStatus = "missing"
	// PathExists means an entry is there, including a dangling symlink: a
	// create-only write must not replace a link just because its target is gone.
	PathExists PathStatus = "exists"
	// PathUnknown means the environment could not tell (permission denied on a
	// parent, a transport fault). It is never treated as missing.
	PathUnknown PathStatus = "unknown"
)

// PathState is the outcome of a presence check. It is a value, not an error,
// because "unknown" is a legitimate answer that guarded writes must see and
// fail closed on rather than mistake for "missing".
type PathState struct {
	Status PathStatus `json:"state"`
	// Reason says why the state is unknown; empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// SubstrateInfo is what a client needs to know about the substrate before using it
// (the `substrate.info` answer).
type SubstrateInfo struct {
	Name  string `json:"name"`
	Local bool   `json:"local"`
	// PTY reports whether PTYStart can succeed here.
	PTY bool `json:"pty"`
	// ReadOnly reports `[substrate] read_only = true`.
	ReadOnly bool `json:"read_only"`
}
