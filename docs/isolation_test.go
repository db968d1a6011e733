package docs

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/daemontest"
)

// captureIsolation records the examples of isolated sessions: a session in
// a worktree of a repository whose checkout has a change of its own, two
// turns that each write a file, the diffs, an apply refused and one done,
// a rewind, a discard, and a one-shot isolated agents.invoke.
func captureIsolation(c *capturer) {
	repo := filepath.Join(os.TempDir(), "card-example-repo")
	_ = os.RemoveAll(repo)
	c.t.Cleanup(func() { _ = os.RemoveAll(repo) })
	require.NoError(c.t, os.MkdirAll(filepath.Join(repo, "src"), 0o755))
	daemontest.Git(c.t, repo, "init", "--quiet")
	require.NoError(c.t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("# example\n\nA project.\n"), 0o644))
	require.NoError(c.t, os.WriteFile(filepath.Join(repo, "src", "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644))
	daemontest.Git(c.t, repo, "add", ".")
	daemontest.Git(c.t, repo, "commit", "--quiet", "-m", "first")
	require.NoError(c.t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("# example\n\nA project, edited by hand.\n"), 0o644))

	res := c.call("sessions.start", `{"id":"claude-code","cwd":"`+repo+`","permission_mode":"edit","isolation":"worktree"}`)
	var s struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(c.t, json.Unmarshal(res, &s))
	id := `"session_id":"` + s.SessionID + `"`
	c.sessionEnds = 0
	c.call("sessions.subscribe", `{`+id+`}`)
	c.call("sessions.prompt", `{`+id+`,"task":"WRITE hello.txt Hello from turn one."}`)
	c.drainSession(1)
	c.call("sessions.prompt", `{`+id+`,"task":"WRITE src/todo.md - write the tests"}`)
	c.drainSession(2)
	c.call("sessions.diff", `{`+id+`}`)
	c.call("sessions.diff", `{`+id+`,"turn":2}`)
	// A file of the same name in the checkout: the apply is refused,
	// and writes nothing.
	require.NoError(c.t, os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("the user's own hello\n"), 0o644))
	c.call("sessions.apply", `{`+id+`}`)
	require.NoError(c.t, os.Remove(filepath.Join(repo, "hello.txt")))
	c.call("sessions.apply", `{`+id+`}`)
	c.call("sessions.rewind", `{`+id+`,"turn":1}`)
	c.call("sessions.get", `{`+id+`}`)
	c.call("sessions.discard", `{`+id+`}`)
	c.call("sessions.diff", `{`+id+`}`)
	c.quiet = true
	c.call("agents.invoke", `{"id":"claude-code","task":"WRITE CHANGELOG.md - one-shot change","cwd":"`+repo+`","permission_mode":"edit","isolation":"worktree"}`)
	c.call("agents.invoke", `{"id":"claude-code","task":"say pong","cwd":"`+os.TempDir()+`","isolation":"worktree"}`)
	c.quiet = false
	captureIsolationLater(c, repo)
}

// captureIsolationLater records isolation chosen after the start, as an
// editor's config option chooses it: a worktree made before the first
// turn, and removing it refused after that turn.
func captureIsolationLater(c *capturer, repo string) {
	res := c.call("sessions.start", `{"id":"claude-code","cwd":"`+repo+`","permission_mode":"edit"}`)
	var s struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(c.t, json.Unmarshal(res, &s))
	id := `"session_id":"` + s.SessionID + `"`
	c.call("sessions.configure", `{`+id+`,"isolation":"worktree"}`)
	c.sessionEnds = 0
	c.quiet = true
	c.call("sessions.subscribe", `{`+id+`}`)
	c.call("sessions.prompt", `{`+id+`,"task":"WRITE notes.txt written in the worktree"}`)
	c.drainSession(1)
	c.quiet = false
	c.call("sessions.configure", `{`+id+`,"isolation":"off"}`)
}
