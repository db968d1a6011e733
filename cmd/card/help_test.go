package main

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every command and subcommand answers --help, -h and `card help X` on
// stdout with exit 0, in the shape of a CLI's help: one usage line, what it
// does, flags spelled --name, examples.
func TestEveryCommandsHelpExitsZeroAndReadsLikeHelp(t *testing.T) {
	cmds := []struct {
		args  []string
		flags bool // takes --home and the like
	}{
		{[]string{"serve"}, true},
		{[]string{"info"}, true},
		{[]string{"detect"}, true},
		{[]string{"health"}, true},
		{[]string{"invoke"}, true},
		{[]string{"acp"}, true},
		{[]string{"runs"}, true},
		{[]string{"runs", "show"}, true},
		{[]string{"runs", "follow"}, true},
		{[]string{"runs", "prune"}, true},
		{[]string{"service"}, false},
		{[]string{"service", "install"}, true},
		{[]string{"service", "uninstall"}, true},
		{[]string{"service", "status"}, true},
		{[]string{"token"}, false},
		{[]string{"token", "rotate"}, true},
		{[]string{"version"}, false},
		{[]string{"diff"}, true},
		{[]string{"apply"}, true},
		{[]string{"rewind"}, true},
		{[]string{"discard"}, true},
	}
	singleDash := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for _, c := range cmds {
		name := strings.Join(c.args, " ")
		for _, args := range [][]string{
			append(append([]string{}, c.args...), "--help"),
			append(append([]string{}, c.args...), "-h"),
			append([]string{"help"}, c.args...),
		} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, out, errOut := runCLI(args...)
				assert.Equal(t, exitOK, code)
				assert.Empty(t, errOut)
				lines := strings.Split(out, "\n")
				require.NotEmpty(t, lines)
				assert.True(t, strings.HasPrefix(lines[0], "Usage: card "+name), "first line %q", lines[0])
				assert.Equal(t, 1, strings.Count(out, "Usage:"), "one usage line")
				assert.Contains(t, out, "\nExamples:\n  card ")
				assert.NotRegexp(t, singleDash, out, "flags are spelled --name")
				if c.flags {
					assert.Contains(t, out, "\nFlags:\n")
					assert.Contains(t, out, "  --home DIR")
				}
				for _, l := range lines {
					assert.LessOrEqual(t, len([]rune(l)), tableWidth, "help fits %d columns: %q", tableWidth, l)
				}
			})
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runCLI(args...)
		assert.Equal(t, exitOK, code, "%v", args)
		assert.Empty(t, errOut)
		assert.Contains(t, out, "Usage: card COMMAND")
	}
}

func TestInvokesHelpNamesTheFlagAnErrorTellsYouToAdd(t *testing.T) {
	_, out, _ := runCLI("invoke", "--help")
	assert.Contains(t, out, "--acknowledge-unenforced-read-only")
	assert.Contains(t, out, "--timeout SECONDS")
}

// Wrong usage is said on stderr with the usage line, exit 2.
func TestBadUsageSaysWhatWasWrongAndExits2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"invoke", "--bogus"}, "unknown flag --bogus"},
		{[]string{"invoke"}, "which agent?"},
		{[]string{"invoke", "claude-code", "x", "--timeout", "abc"}, "--timeout"},
		{[]string{"runs", "show"}, "one RUN_ID"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"help", "nope"}, `no command "nope"`},
		{[]string{"token"}, "which subcommand?"},
		{[]string{"nope"}, `unknown command "nope"`},
	} {
		code, out, errOut := runCLI(tc.args...)
		assert.Equal(t, exitUsage, code, "%v", tc.args)
		assert.Empty(t, out, "%v", tc.args)
		assert.Contains(t, errOut, tc.says, "%v", tc.args)
		assert.Contains(t, errOut, "Usage: card ", "%v", tc.args)
	}
}

// The exit-code table of the usage is the set of codes the CLI has.
func TestTheUsageListsEveryExitCode(t *testing.T) {
	var listed []int
	_, table, ok := strings.Cut(usage, "Exit codes:\n")
	require.True(t, ok)
	table, _, _ = strings.Cut(table, "\n\n")
	for _, m := range regexp.MustCompile(`(?m)^  (\d+) `).FindAllStringSubmatch(table, -1) {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		listed = append(listed, n)
	}
	want := []int{exitOK, exitFailure, exitUsage, exitNoDaemon, exitRefused, exitInterrupted, exitTimedOut, exitCancelled}
	sort.Ints(want)
	assert.Equal(t, want, listed)
}
