package spawn

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

// rawParser keeps stdout verbatim, for runner tests that check bytes.
type rawParser struct{ b strings.Builder }

func (p *rawParser) Feed(line []byte) []Event {
	p.b.Write(line)
	p.b.WriteByte('\n')
	return nil
}
func (p *rawParser) Finish(ExitInfo) api.Result { return api.Result{Answer: p.b.String()} }

func shPlan(t *testing.T, script string) Plan {
	t.Helper()
	return Plan{Program: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir()}
}

// tool is the absolute path of a system program: the runner looks a bare
// name up on the child's PATH only, and these plans give the child none.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err)
	return p
}

func runErr(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e)
	return e
}

func TestCatEchoesThePromptFromStdin(t *testing.T) {
	p := &rawParser{}
	res, err := Run(context.Background(), RunSpec{Plan: Plan{Program: tool(t, "cat"), Dir: t.TempDir()}, Prompt: "hello prompt\n", Parser: p})
	require.NoError(t, err)
	assert.Equal(t, "hello prompt\n", res.Answer)
	assert.False(t, res.IsError)
}

func TestNonZeroExitIsAnExitFailureWithStderr(t *testing.T) {
	res, err := Run(context.Background(), RunSpec{Plan: shPlan(t, "echo 'no such model' >&2; exit 3"), Parser: &rawParser{}})
	e := runErr(t, err)
	assert.Equal(t, api.KindExit, e.Kind)
	assert.Equal(t, 3, e.ExitCode)
	assert.Contains(t, e.StderrExcerpt, "no such model")
	require.NotNil(t, res.Error)
	assert.Equal(t, api.KindExit, res.Error.Kind)
	require.NotNil(t, res.Error.ExitCode)
	assert.Equal(t, 3, *res.Error.ExitCode)
	assert.True(t, res.IsError)
}

// A crash is named by its signal, whether the agent itself died of it or a
// launcher script reported it as 128+N, and its last words are kept.
func TestACrashNamesTheSignalAndKeepsTheStderr(t *testing.T) {
	for _, tc := range []struct{ name, script, says string }{
		{"killed", "echo 'Segmentation fault at 0x0' >&2; kill -SEGV $$", "sh was killed by signal 11 (segmentation fault)"},
		{"through a shell", "echo 'Segmentation fault at 0x0' >&2; exit 139", "sh exited with status 139 (128 + 11: a process it ran was killed by signal 11, segmentation fault)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), RunSpec{Plan: shPlan(t, tc.script), Parser: &rawParser{}})
			e := runErr(t, err)
			assert.Equal(t, api.KindExit, e.Kind)
			assert.Equal(t, tc.says, e.Message)
			require.NotNil(t, res.Error)
			assert.Equal(t, "Segmentation fault at 0x0", res.Error.StderrExcerpt)
		})
	}
}

func TestEmptyOutputIsAnError(t *testing.T) {
	_, err := Run(context.Background(), RunSpec{Plan: Plan{Program: tool(t, "true"), Dir: t.TempDir()}, Prompt: "x", Parser: &rawParser{}})
	assert.Equal(t, api.KindEmpty, runErr(t, err).Kind)
}

func TestMissingProgramIsASpawnFailureNamingTheCommand(t *testing.T) {
	_, err := Run(context.Background(), RunSpec{Plan: Plan{Program: "/nonexistent/definitely-not-an-agent", Args: []string{"-p"}, Dir: t.TempDir()}, Prompt: "secret task"})
	e := runErr(t, err)
	assert.Equal(t, api.KindSpawn, e.Kind)
	assert.Equal(t, "/nonexistent/definitely-not-an-agent -p", e.Command)
	assert.NotContains(t, e.Error(), "secret task", "the prompt never appears in an error")
}

func TestWorkingDirMustBeAbsoluteAndExisting(t *testing.T) {
	for _, dir := range []string{"", "relative/dir", "/nonexistent/card/dir", "/etc/hostname"} {
		_, err := Run(context.Background(), RunSpec{Plan: Plan{Program: tool(t, "pwd"), Dir: dir}})
		e := runErr(t, err)
		assert.Equal(t, api.KindSpawn, e.Kind, dir)
		assert.Contains(t, e.Message, "working directory", dir)
	}
}

func TestTheChildRunsInTheDirectoryItWasGiven(t *testing.T) {
	dir := t.TempDir()
	want, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	p := &rawParser{}
	_, err = Run(context.Background(), RunSpec{Plan: Plan{Program: tool(t, "pwd"), Dir: dir}, Parser: p})
	require.NoError(t, err)
	got, err := filepath.EvalSymlinks(strings.TrimSpace(p.b.String()))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// The daemon judges a run's directory by its real name and hands that name
// on; a name that has since become a symlink, or that now passes through
// one, leads somewhere nobody judged, so the runner starts nothing there.
func TestTheChildNeverStartsWhereTheCheckedDirNoLongerLeads(t *testing.T) {
	forbidden := t.TempDir()
	base := t.TempDir()
	// The directory itself swapped for a symlink.
	require.NoError(t, os.Symlink(forbidden, filepath.Join(base, "proj")))
	cases := []string{filepath.Join(base, "proj")}
	if runtime.GOOS == "linux" {
		// A directory on the way swapped: only a kernel that says where a
		// held descriptor points catches this one.
		require.NoError(t, os.MkdirAll(filepath.Join(forbidden, "sub"), 0o755))
		require.NoError(t, os.Symlink(forbidden, filepath.Join(base, "on-the-way")))
		cases = append(cases, filepath.Join(base, "on-the-way", "sub"))
	}
	for _, dir := range cases {
		p := &rawParser{}
		_, err := Run(context.Background(), RunSpec{Plan: Plan{Program: "/bin/sh", Args: []string{"-c", "pwd -P; : > wrote-here"}, Dir: dir}, Parser: p})
		e := runErr(t, err)
		assert.Equal(t, api.KindSpawn, e.Kind, dir)
		assert.Contains(t, e.Message, "changed after it was checked", dir)
		assert.Empty(t, p.b.String(), "the child ran in %s", dir)
	}
	wrote, _ := filepath.Glob(filepath.Join(forbidden, "*", "wrote-here"))
	wrote2, _ := filepath.Glob(filepath.Join(forbidden, "wrote-here"))
	assert.Empty(t, append(wrote, wrote2...))
}

func TestCancelKillsTheChildPromptly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	res, err := Run(ctx, RunSpec{Plan: Plan{Program: tool(t, "sleep"), Args: []string{"600"}, Dir: t.TempDir()}, Limits: Limits{KillGrace: time.Second}})
	assert.Equal(t, api.KindCancelled, runErr(t, err).Kind)
	assert.Equal(t, api.KindCancelled, res.Error.Kind)
	assert.Less(t, time.Since(start), 3*time.Second, "child was not killed promptly")
}

func TestCancelCauseIsNamed(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { cancel(errors.New("daemon shutting down")) })
	_, err := Run(ctx, RunSpec{Plan: Plan{Program: tool(t, "sleep"), Args: []string{"600"}, Dir: t.TempDir()}})
	e := runErr(t, err)
	assert.Equal(t, api.KindCancelled, e.Kind)
	assert.Contains(t, e.Message, "daemon shutting down")
}

func TestDeadlineKillsTheChildPromptlyAndIsATimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, RunSpec{Plan: Plan{Program: tool(t, "sleep"), Args: []string{"30"}, Dir: t.TempDir()}, Limits: Limits{KillGrace: time.Second}})
	assert.Equal(t, api.KindTimeout, runErr(t, err).Kind)
	assert.Less(t, time.Since(start), 3*time.Second)
}

func TestAChildIgnoringSIGTERMIsKilledAfterTheGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, RunSpec{Plan: shPlan(t, "trap '' TERM; echo started; while :; do sleep 0.05; done"),
		Parser: &rawParser{}, Limits: Limits{KillGrace: 300 * time.Millisecond}})
	assert.Equal(t, api.KindTimeout, runErr(t, err).Kind)
	assert.Less(t, time.Since(start), 3*time.Second)
}

func TestAGrandchildInTheGroupIsGoneAfterACancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var pids []int
	var pgid int
	_, err := Run(ctx, RunSpec{
		Plan:    shPlan(t, "sleep 600 & echo $!; sleep 600"),
		OnStart: func(_, g int) { pgid = g },
		OnEvent: func(ev Event) {
			if pid, err := strconv.Atoi(strings.TrimSpace(ev.Text)); err == nil {
				pids = append(pids, pid)
				cancel()
			}
		},
		Limits: Limits{KillGrace: time.Second},
	})
	assert.Equal(t, api.KindCancelled, runErr(t, err).Kind)
	require.Len(t, pids, 1)
	assert.False(t, proc.Alive(pids[0]), "grandchild %d survived the cancel", pids[0])
	members, _ := proc.GroupMembers(pgid)
	assert.Empty(t, members, "process group %d survived", pgid)
}

func TestAGrandchildLeftBehindByANormalExitIsEnded(t *testing.T) {
	var pid int
	start := time.Now()
	_, err := Run(context.Background(), RunSpec{
		// The background sleep keeps stdout open; without ending the group
		// the run would last 600 s.
		Plan: shPlan(t, "sleep 600 & echo $!; exit 0"),
		OnEvent: func(ev Event) {
			if p, err := strconv.Atoi(strings.TrimSpace(ev.Text)); err == nil {
				pid = p
			}
		},
		Limits: Limits{KillGrace: 500 * time.Millisecond},
	})
	require.NoError(t, err)
	require.NotZero(t, pid)
	assert.False(t, proc.Alive(pid), "grandchild %d outlived its agent", pid)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestALargePromptDoesNotDeadlockAgainstAnEchoingChild(t *testing.T) {
	big := strings.Repeat("line of prompt text\n", 60_000) // 1.2 MB
	p := &rawParser{}
	_, err := Run(context.Background(), RunSpec{Plan: Plan{Program: tool(t, "cat"), Dir: t.TempDir()}, Prompt: big, Parser: p})
	require.NoError(t, err)
	assert.Equal(t, len(big), p.b.Len())
}

func TestOutputBeyondTheLimitEndsTheRunWithOutputLimit(t *testing.T) {
	start := time.Now()
	res, err := Run(context.Background(), RunSpec{Plan: Plan{Program: tool(t, "yes"), Args: []string{"spam"}, Dir: t.TempDir()},
		Parser: &rawParser{}, Limits: Limits{MaxOutput: 1 << 20, KillGrace: time.Second}})
	assert.Equal(t, api.KindOutputLimit, runErr(t, err).Kind)
	assert.Equal(t, api.KindOutputLimit, res.Error.Kind)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestStderrFloodKeepsOnlyTheTail(t *testing.T) {
	_, err := Run(context.Background(), RunSpec{Plan: shPlan(t, "i=0; while [ $i -lt 2000 ]; do echo noise-$i >&2; i=$((i+1)); done; echo LAST-LINE >&2; exit 1"),
		Limits: Limits{StderrTail: 256}})
	e := runErr(t, err)
	assert.LessOrEqual(t, len(e.StderrExcerpt), 600)
	assert.Contains(t, e.StderrExcerpt, "LAST-LINE")
	assert.NotContains(t, e.StderrExcerpt, "noise-1\n")
}

func TestAnOverlongLineIsSkippedAndTheRestStillParses(t *testing.T) {
	var evs []Event
	res, err := Run(context.Background(), RunSpec{
		Plan:    shPlan(t, `head -c 300000 /dev/zero | tr '\0' 'x'; echo; cat testdata/claude-stream-success.jsonl`),
		Parser:  newClaudeParser(),
		OnEvent: func(ev Event) { evs = append(evs, ev) },
		Limits:  Limits{MaxLine: 100_000},
	}.withDir(t))
	require.NoError(t, err)
	assert.Equal(t, "PONG from fake anthropic", res.Answer)
	require.NotEmpty(t, evs)
	assert.Equal(t, api.EventOther, evs[0].Kind)
	assert.Contains(t, evs[0].Text, "line limit")
}

// withDir runs the spec in the package directory so testdata paths resolve.
func (s RunSpec) withDir(t *testing.T) RunSpec {
	wd, err := os.Getwd()
	require.NoError(t, err)
	s.Plan.Dir = wd
	return s
}

func TestEnvIsTheBaseEnvPlusThePlanAdditions(t *testing.T) {
	p := &rawParser{}
	plan := shPlan(t, `echo "$CAR_INVOKED_BY|$EXTRA|$PATH_SEEN"`)
	plan.Env = map[string]string{"EXTRA": "x1", "PATH_SEEN": "override"}
	_, err := Run(context.Background(), RunSpec{Plan: plan, Parser: p,
		BaseEnv: []string{"PATH=/usr/bin:/bin", "CAR_INVOKED_BY=card", "PATH_SEEN=base"}})
	require.NoError(t, err)
	assert.Equal(t, "card|x1|override\n", p.b.String())
}

func TestABareProgramIsFoundOnTheChildsPathNotTheDaemons(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "card-fake-agent"), []byte("#!/bin/sh\necho found-on-child-path\n"), 0o755))
	t.Setenv("PATH", "/nonexistent")
	p := &rawParser{}
	_, err := Run(context.Background(), RunSpec{Plan: Plan{Program: "card-fake-agent", Dir: t.TempDir()}, Parser: p,
		BaseEnv: []string{"PATH=" + dir}})
	require.NoError(t, err)
	assert.Equal(t, "found-on-child-path\n", p.b.String())

	t.Setenv("PATH", dir)
	_, err = Run(context.Background(), RunSpec{Plan: Plan{Program: "card-fake-agent", Dir: t.TempDir()}, Parser: &rawParser{},
		BaseEnv: []string{"PATH=/usr/bin:/bin"}})
	e := runErr(t, err)
	assert.Equal(t, api.KindSpawn, e.Kind)
	assert.Contains(t, e.Message, "agent's PATH", "the daemon's live PATH is not consulted")
}

func TestPrivateFilesGoToTheChildsTMPDIR(t *testing.T) {
	tmp := t.TempDir()
	p := &rawParser{}
	plan := shPlan(t, `dirname "$1"`)
	plan.Args = append(plan.Args, "sh", FileRef("f.txt"))
	plan.Files = []PlanFile{{Path: "f.txt", Content: []byte("x")}}
	_, err := Run(context.Background(), RunSpec{Plan: plan, Parser: p, BaseEnv: []string{"TMPDIR=" + tmp}})
	require.NoError(t, err)
	assert.Equal(t, tmp, filepath.Dir(strings.TrimSpace(p.b.String())))
}

func TestPrivateFilesAreWritten0600InA0700DirAndRemoved(t *testing.T) {
	p := &rawParser{}
	plan := shPlan(t, `f="$1"; stat -c '%a' "$f" "$(dirname "$f")"; cat "$f"; echo; echo "$(dirname "$f")"`)
	plan.Args = append(plan.Args, "sh", FileRef("system-prompt.txt"))
	plan.Files = []PlanFile{{Path: "system-prompt.txt", Content: []byte("be terse")}}
	_, err := Run(context.Background(), RunSpec{Plan: plan, Parser: p})
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(p.b.String()), "\n")
	require.Len(t, lines, 4)
	assert.Equal(t, []string{"600", "700", "be terse"}, lines[:3])
	_, statErr := os.Stat(lines[3])
	assert.True(t, os.IsNotExist(statErr), "private dir %s must be removed after the run", lines[3])
}

// Only the placeholders of files the plan writes become paths. Any other,
// even beside a real one, is refused before a process starts: card's own
// placeholder in a value from elsewhere must never turn into a path out of
// the run's private directory.
func TestAPlaceholderOfAFileThePlanDoesNotWriteIsRefusedNotExpanded(t *testing.T) {
	for _, where := range []string{"arg", "env"} {
		t.Run(where, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "started")
			plan := shPlan(t, `touch "$0"`)
			plan.Args = append(plan.Args, marker, FileRef("system-prompt.txt"))
			plan.Files = []PlanFile{{Path: "system-prompt.txt", Content: []byte("be terse")}}
			smuggled := FileRef("../../etc/passwd")
			if where == "arg" {
				plan.Args = append(plan.Args, "--model", smuggled)
			} else {
				plan.Env = map[string]string{"SOME_PATH": smuggled}
			}
			_, err := Run(context.Background(), RunSpec{Plan: plan, Parser: &rawParser{}})
			e := runErr(t, err)
			assert.Equal(t, api.KindSpawn, e.Kind)
			assert.Contains(t, e.Message, "refers to a file the plan does not write")
			_, statErr := os.Stat(marker)
			assert.True(t, os.IsNotExist(statErr), "the child started")
		})
	}
}

func TestRunReportsStartWithTheChildsOwnGroup(t *testing.T) {
	var pid, pgid int
	_, err := Run(context.Background(), RunSpec{Plan: Plan{Program: tool(t, "cat"), Dir: t.TempDir()}, Prompt: "x",
		Parser: &rawParser{}, OnStart: func(p, g int) { pid, pgid = p, g }})
	require.NoError(t, err)
	assert.NotZero(t, pid)
	assert.Equal(t, pid, pgid)
	assert.NotEqual(t, syscall.Getpgrp(), pgid)
}
