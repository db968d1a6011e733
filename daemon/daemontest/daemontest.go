// Package daemontest starts real card daemons for tests, as httptest starts
// HTTP servers: in this process, on a random loopback port, in a temp home,
// with an environment the test decides rather than the machine's, and shut
// down by t.Cleanup before the test ends, so goleak finds nothing of it.
//
//	d := daemontest.Start(t, daemontest.Options{
//		Config: "login_shell_path = false\n",
//		Agents: map[string]string{agent.ClaudeCode: daemontest.ReplayAgent(t, "claude", claudeVersion, fixture).Path},
//	})
//	info, err := d.Client.Info(ctx)
package daemontest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/internal/fakeacp"
	"github.com/card-dev/card/internal/fakeclaude"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/internal/testskip"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
)

// Options say how to start a test daemon. The zero value is a daemon with
// no card.toml, HOME in a temp dir and PATH=/usr/bin:/bin.
type Options struct {
	// Home is the daemon's state directory; empty makes a new temp one.
	Home string
	// Config is card.toml's text, written into the home when not empty.
	// Tests that must not find the machine's own agent CLIs set
	// login_shell_path = false in it.
	Config string
	// Environ is added to the environment the daemon reads at startup,
	// after HOME=<a temp dir>, PATH=/usr/bin:/bin and the Agents pins; a
	// later entry wins.
	Environ []string
	// ProcessEnv has the daemon read this test process's environment
	// itself, as `card serve` does, instead of the clean one; Environ and
	// Agents must then be empty.
	ProcessEnv bool
	// Agents pins adapters to executables (adapter id → path) through their
	// pin variables, as an operator would: detection never looks for them on
	// a search path, where temp dirs are skipped.
	Agents map[string]string
	// Logger is the daemon's logger; nil logs to the test's log.
	Logger *zap.Logger
	// Client configures the connected Client (OnEvent, RPC); its URL and
	// Token are filled in.
	Client client.Options
	// NoClient leaves Client nil, for tests that count connections.
	NoClient bool
	// Addr is the listen address; empty means 127.0.0.1:0.
	Addr string
	// ExtraFiles are left open in a Serve process, from descriptor 3 on,
	// as a careless launcher would leave them.
	ExtraFiles []*os.File
	// ServeArgs are more arguments for a Serve process's `card serve`
	// (--fake-agents); Start takes none.
	ServeArgs []string
	// Warm lets sessions keep warm agents, as a real daemon does. Off, the
	// card.toml written gets [sessions] max_warm = 0 (unless Config has a
	// [sessions] table of its own), so every turn is a one-shot process:
	// the scripted fake agents speak only the one-shot form of their CLI,
	// and would wait forever on a warm channel's open stdin. Tests of the
	// real CLIs set it.
	Warm bool
}

// Daemon is a running test daemon.
type Daemon struct {
	*daemon.Daemon
	// URL is ws://127.0.0.1:PORT/rpc; Home the state directory; Token the
	// bearer token in Home.
	URL, Home, Token string
	// Client is connected to the daemon (unless Options.NoClient).
	Client *client.Client
}

// Start starts a daemon and connects a client to it; both end at cleanup.
func Start(t testing.TB, opts Options) *Daemon {
	t.Helper()
	home := opts.home(t)
	environ := opts.environ(t)
	log := opts.Logger
	if log == nil {
		log = zaptest.NewLogger(t)
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	d, err := daemon.New(daemon.Options{Home: home, Addr: addr, Logger: log, Environ: environ})
	require.NoError(t, err)
	require.NoError(t, d.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = d.Shutdown(ctx)
	})
	tok, err := daemon.ReadToken(d.Home())
	require.NoError(t, err)
	td := &Daemon{Daemon: d, URL: d.URL(), Home: d.Home(), Token: tok}
	if !opts.NoClient {
		td.Client = td.Dial(t, opts.Client)
	}
	return td
}

// Context is the test's context bounded by a minute, so a call that hangs
// fails its test instead of stalling the suite until go test's timeout.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// home makes the daemon's home and writes its card.toml.
func (opts Options) home(t testing.TB) string {
	home := opts.Home
	if home == "" {
		home = filepath.Join(t.TempDir(), "card")
	}
	config := opts.Config
	if !opts.Warm && !strings.Contains(config, "[sessions]") {
		config += "\n[sessions]\nmax_warm = 0\n"
	}
	require.NoError(t, os.MkdirAll(home, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, daemon.ConfigFileName), []byte(config), 0o600))
	return home
}

// environ is the daemon's startup environment; nil means the process's.
func (opts Options) environ(t testing.TB) []string {
	if opts.ProcessEnv {
		require.Empty(t, opts.Environ, "daemontest: ProcessEnv takes the process's environment as it is")
		require.Empty(t, opts.Agents, "daemontest: ProcessEnv takes the process's environment as it is")
		return nil
	}
	environ := []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
	for id, bin := range opts.Agents {
		a, ok := agent.Lookup(id)
		require.True(t, ok, "daemontest: no adapter %q to pin", id)
		environ = append(environ, a.PinEnv+"="+bin)
	}
	return append(environ, opts.Environ...)
}

// Dial connects another typed client, closed at cleanup.
func (d *Daemon) Dial(t testing.TB, opts client.Options) *client.Client {
	t.Helper()
	opts.URL, opts.Token = d.URL, d.Token
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RPC connects a low-level client, closed at cleanup, for what no typed
// method sends.
func (d *Daemon) RPC(t testing.TB, opts rpcclient.ClientOptions) *rpcclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, d.URL, d.Token, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Raw opens a bare WebSocket with the token, closed at cleanup, to send
// frames no client would.
func (d *Daemon) Raw(t testing.TB) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, d.URL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token}}})
	require.NoError(t, err)
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}

// RepoFile is the absolute path of a file of this repository (rel is
// relative to its root), for the captured CLI output tests replay; it fails
// the test if the file is missing, since a clone must carry its fixtures.
func RepoFile(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "daemontest: no go.mod above the test's directory")
		dir = parent
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	_, err = os.Stat(p)
	require.NoError(t, err, "daemontest: %s is missing from the repository", rel)
	return p
}

// Script writes an executable shell script named name with body after the
// #! line, in a temp dir, and returns its path.
func Script(t testing.TB, name, body string) string {
	t.Helper()
	return script(t, t.TempDir(), name, body)
}

func script(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, proc.WriteExecutable(p, []byte("#!/bin/sh\n"+body+"\n")))
	return p
}

// Replay is a fake agent CLI made by ReplayAgent.
type Replay struct {
	// Path is the executable.
	Path string
	// Dir is where every run writes its environment, to env-<CARD_RUN_ID>,
	// and what it was given (Received, PrivateFile).
	Dir string
}

// ReplayAgent writes a fake agent CLI that answers --version with version
// like the real one, fails auth probes, and otherwise replays a real
// captured stream (fixture, an absolute path). The task it reads from
// stdin, as card sends it, steers it:
//
//	SLEEP  a grandchild sleeps 60 s in the run's process group
//	DRIP   the fixture's first line, its second line 10 times 100 ms apart, its last line
//	LINGER the fixture, then stays alive 60 s like a CLI still at work (or retrying)
//	FAIL   prints to stderr and exits 3
//
// It keeps its arguments and stdin, and a copy of each file of the run's
// private directory an argument names (PATH, --flag=PATH or @PATH), as the
// file was while it ran.
func ReplayAgent(t testing.TB, name, version, fixture string) Replay {
	t.Helper()
	dir := t.TempDir()
	body := fmt.Sprintf(`case "$1" in
--version) echo %q; exit 0;;
auth|login) exit 1;;
esac
task=$(cat)
env > %[2]q/env-"$CARD_RUN_ID"
printf '%%s' "$task" > %[2]q/stdin-"$CARD_RUN_ID"
printf '%%s\n' "$@" > %[2]q/args-"$CARD_RUN_ID"
for a in "$@"; do
  f=${a#*=}; f=${f#@}
  case "$f" in */card-run-*/*) [ -f "$f" ] && cp "$f" %[2]q/file-"$CARD_RUN_ID"-"$(basename "$f")";; esac
done
case "$task" in
*SLEEP*) sleep 60 & wait; exit 0;;
*DRIP*) head -n 1 %[3]q; i=0; while [ $i -lt 10 ]; do sed -n 2p %[3]q; sleep 0.1; i=$((i+1)); done; tail -n 1 %[3]q; exit 0;;
*LINGER*) cat %[3]q; exec sleep 60;;
*FAIL*) echo "boom: the fake agent failed" >&2; exit 3;;
esac
cat %[3]q`, version, dir, fixture)
	return Replay{Path: script(t, dir, name, body), Dir: dir}
}

// TeachWriting teaches the fake the task "WRITE name text": it writes text
// (and a newline) to name in its cwd, as an agent's Write tool would, then
// answers as it always does. The new script is renamed over the old one
// (proc.WriteExecutable): the daemon may be running the fake (its
// --version probe) at that moment, and writing into an executing file
// fails with ETXTBSY.
func (r Replay) TeachWriting(t testing.TB) {
	t.Helper()
	script, err := os.ReadFile(r.Path)
	require.NoError(t, err)
	body := strings.Replace(string(script), "*FAIL*)",
		"*WRITE\\ *) rest=${task#*WRITE }; name=${rest%% *}; printf '%s\\n' \"${rest#* }\" > \"$name\";;\n*FAIL*)", 1)
	require.NoError(t, proc.WriteExecutable(r.Path, []byte(body)))
}

// Received is what the fake was given for run runID: its arguments and its
// stdin (without trailing newlines).
func (r Replay) Received(t testing.TB, runID string) (args []string, stdin string) {
	t.Helper()
	a, err := os.ReadFile(filepath.Join(r.Dir, "args-"+runID))
	require.NoError(t, err, "the fake %s never ran for run %s", filepath.Base(r.Path), runID)
	s, err := os.ReadFile(filepath.Join(r.Dir, "stdin-"+runID))
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(a), "\n"), "\n"), string(s)
}

// PrivateFile is the content of the file of run runID's private directory
// named name (a base name), as the fake found it while it ran.
func (r Replay) PrivateFile(t testing.TB, runID, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.Dir, "file-"+runID+"-"+name))
	require.NoError(t, err, "the fake %s saw no private file %s in run %s", filepath.Base(r.Path), name, runID)
	return b
}

// ChildEnv is the environment the fake recorded for run runID.
func (r Replay) ChildEnv(t testing.TB, runID string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.Dir, "env-"+runID))
	require.NoError(t, err, "the fake %s never ran for run %s", filepath.Base(r.Path), runID)
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// VerifyTestMain runs a package's tests, then fails if any goroutine is
// left behind: every daemon, client and fake agent the tests started must be
// gone. modernc's SQLite driver keeps database/sql's connection opener
// running past Close, which is none of ours. Started as AskingClaude's
// executable, the test binary is that fake instead.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	if os.Getenv(fakeclaude.EnvVar) != "" {
		os.Exit(fakeclaude.Main())
	}
	if os.Getenv(fakeacp.EnvVar) != "" {
		os.Exit(fakeacp.Main())
	}
	goleak.VerifyTestMain(testskip.Wrap(m), append(opts, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))...)
}

// UserHome makes an empty directory to serve as a daemon's HOME where
// detection may take binaries from: outside the world-writable scratch
// directories (/tmp and the like), where t.TempDir usually is and where
// detection skips every binary, ~/.local/bin included. It lives under the
// user's cache directory, or, when that is in a scratch directory (a HOME
// made with mktemp), under ~/.cache of the account's own home as the user
// database has it; it is removed at cleanup. The test is skipped, saying
// why, when neither is outside the scratch directories.
func UserHome(t testing.TB) string {
	t.Helper()
	var tried []string
	base := ""
	candidates := []string{}
	if c, err := os.UserCacheDir(); err == nil {
		candidates = append(candidates, c)
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		candidates = append(candidates, filepath.Join(u.HomeDir, ".cache"))
	}
	for _, c := range candidates {
		if !InScratch(c) {
			base = c
			break
		}
		tried = append(tried, c)
	}
	if base == "" {
		testskip.Skip(t, testskip.Gap{
			Why:    "no HOME outside the scratch dirs for detection to search",
			Enable: "give the tests a HOME or XDG_CACHE_HOME outside " + strings.Join(detect.DefaultScratchDirs, ", "),
		}, "SKIPPING: no directory outside the scratch dirs for a test HOME (tried "+strings.Join(tried, ", ")+")")
	}
	require.NoError(t, os.MkdirAll(base, 0o700))
	dir, err := os.MkdirTemp(base, "card-test-home-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// InScratch says whether dir lies in one of the world-writable scratch
// directories detection never takes a binary from.
func InScratch(dir string) bool {
	for _, s := range detect.DefaultScratchDirs {
		if strings.HasPrefix(filepath.Clean(dir)+"/", s) {
			return true
		}
	}
	return false
}

// AskingClaude writes a Claude Code stand-in that asks card's permission
// tool in ask mode exactly as the real CLI does (internal/fakeclaude), and
// returns its path for Options.Agents. Its task is a script of tool calls:
// "TOOL Bash {\"command\":\"echo hi > f.txt\"}", one per line. The test
// package's TestMain must be VerifyTestMain.
func AskingClaude(t testing.TB) string {
	t.Helper()
	return fakeclaude.Install(t, t.TempDir())
}
