package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// card runs prune counts with --dry-run and deletes without it, keeping the
// newest runs the flags say, and its usage is refused with exit 2.
func TestRunsPruneCountsWithDryRunThenDeletes(t *testing.T) {
	home := cliDaemon(t)
	for i := 0; i < 3; i++ {
		code, _, errOut := runCLI("invoke", "claude-code", "say pong", "--home", home, "--cwd", t.TempDir())
		require.Equal(t, exitOK, code, errOut)
	}
	code, out, errOut := runCLI("runs", "prune", "--dry-run", "--max-runs", "1", "--home", home)
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `^would prune 2 runs \(\d+ events\); 1 kept \(max_runs 1, max_age_days 30\)\n$`, out)

	code, out, _ = runCLI("runs", "--home", home, "--json")
	require.Equal(t, exitOK, code)
	var runs []api.Run
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 3, "a dry run deletes nothing")

	code, out, errOut = runCLI("runs", "prune", "--max-runs", "1", "--max-age-days", "0", "--json", "--home", home)
	require.Equal(t, exitOK, code, errOut)
	var res api.PruneResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Equal(t, int64(2), res.Runs)
	assert.Positive(t, res.Events)
	assert.Equal(t, api.PruneResult{Pruned: api.Pruned{Runs: 2, Events: res.Events, Kept: 1}, MaxRuns: 1}, res)

	code, out, _ = runCLI("runs", "--home", home, "--json")
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 1)

	code, _, errOut = runCLI("runs", "prune", "extra", "--home", home)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "card runs prune [--dry-run]")
	code, _, errOut = runCLI("runs", "prune", "--max-runs", "-1", "--home", home)
	assert.Equal(t, exitRefused, code, "the daemon refuses the params")
	assert.Contains(t, errOut, "max_runs")
}
