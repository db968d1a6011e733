//go:build !unix

package deploy

import (
	"context"
	"errors"
	"time"
)

// ExecRunner is unavailable where card has no service support; it exists so callers compile.
type ExecRunner struct {
	Dir       string
	Timeout   time.Duration
	Grace     time.Duration
	MaxOutput int
}

// Run always fails: card service supports linux and darwin only.
func (r ExecRunner) Run(ctx context.Context, c Command) ([]byte, error) {
	return nil, &CommandError{Command: c, ExitCode: -1, Err: errors.New("card service supports linux and darwin only")}
}
