package deploy

import (
	"context"
	"fmt"
	"strings"
)

// Command is one program run with its arguments; no shell is involved.
type Command struct {
	Name string
	Args []string
}

// String is the command as a person would type it into a POSIX shell, for dry runs and errors.
func (c Command) String() string {
	words := make([]string, 0, 1+len(c.Args))
	for _, w := range append([]string{c.Name}, c.Args...) {
		words = append(words, shellQuote(w))
	}
	return strings.Join(words, " ")
}

// shellQuote leaves plain words alone and single-quotes the rest, so a printed command can be
// pasted back into a shell as it is.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Runner runs a command and returns its combined output. Implementations return a *CommandError
// when the command cannot start or exits non-zero, so callers can tell "not loaded" from "broken".
type Runner interface {
	Run(ctx context.Context, c Command) ([]byte, error)
}

// RunnerFunc adapts a function to Runner, for tests and small wrappers.
type RunnerFunc func(ctx context.Context, c Command) ([]byte, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, c Command) ([]byte, error) { return f(ctx, c) }

// CommandError is a command that failed, with what it printed: the person running
// `card service` needs both to know what to fix.
type CommandError struct {
	Command Command
	// ExitCode is the process's exit status, or -1 when it did not start or was killed.
	ExitCode int
	Output   string
	Err      error
}

func (e *CommandError) Error() string {
	out := strings.TrimSpace(e.Output)
	if out == "" {
		out = "(no output)"
	}
	return fmt.Sprintf("`%s` failed (%v): %s", e.Command, e.Err, out)
}

func (e *CommandError) Unwrap() error { return e.Err }
