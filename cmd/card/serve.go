package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/card-dev/card/daemon"
	homedir "github.com/card-dev/card/internal/home"
)

var serveDoc = doc{
	name:  "serve",
	usage: "serve [--home DIR] [--addr HOST:PORT] [--log-level LEVEL] [--fake-agents]",
	about: `Runs the daemon in the foreground until Ctrl-C or SIGTERM. It listens on a loopback port,
writes its address to <home>/daemon.json and a new token to <home>/token, and finds the
agent CLIs on this machine. Clients (card's other commands, apps, editor plugins) find it
through those two files. card.toml in the home is optional.

On a terminal it says where it listens and logs readable lines; otherwise (a supervisor,
a pipe) it logs one JSON record per line. ` + "`card service install`" + ` runs it at login instead.

--fake-agents adds two agents, fake and fake-2, for an app's own tests: card itself speaking
ACP, with no account, model or network; markers in a prompt choose what a turn does
(docs/testing-your-app.md). They never start a real agent CLI.`,
	more: "Exit codes: 0 stopped cleanly, 1 failed (e.g. the port is taken), 4 another daemon\nalready serves this home.",
	examples: []string{
		"card serve",
		"card serve --home /tmp/card-dev --addr 127.0.0.1:7777  # a second, separate daemon",
		"card serve --log-level debug",
		"card serve --home /tmp/card-test --fake-agents  # agents for an app's tests",
	},
}

// serveUntil is the context card serve runs in: until SIGTERM or Ctrl-C.
// Tests replace it to stop a daemon in their own process.
var serveUntil = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

func (e env) serve(args []string) int {
	fs, home := e.newFlags(serveDoc)
	addr := fs.String("addr", "", "listen on `host:port` (default 127.0.0.1:0, any free port; card.toml's addr)")
	level := fs.String("log-level", "", "`level`: debug, info, warn or error (default info)")
	fake := fs.Bool("fake-agents", false, "add the fake agents fake and fake-2, for an app's tests (docs/testing-your-app.md)")
	pos, code, done := e.parse(serveDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(serveDoc, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	opts := daemon.Options{Home: *home, Addr: *addr, LogLevel: *level, LogOutput: e.stderr, CaptureCrashes: true}
	if *fake {
		if err := e.withFakeAgents(&opts); err != nil {
			fmt.Fprintf(e.stderr, "card serve: %v\n", err)
			return exitFailure
		}
	}
	d, err := daemon.New(opts)
	if err != nil {
		fmt.Fprintf(e.stderr, "card serve: %v\n", err)
		var already *homedir.AlreadyRunningError
		if errors.As(err, &already) {
			return exitRefused
		}
		return exitFailure
	}
	ctx, stop := serveUntil()
	defer stop()
	if err := d.Start(); err != nil {
		d.Shutdown(context.Background())
		fmt.Fprintf(e.stderr, "card serve: %v\n", err)
		return exitFailure
	}
	if daemon.IsTerminal(e.stderr) {
		fmt.Fprint(e.stderr, listening(d, *home != ""))
	}
	if err := d.Serve(ctx); err != nil {
		fmt.Fprintf(e.stderr, "card serve: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// listening is what a person who ran `card serve` in a terminal needs next:
// where it listens, where a client finds the token, and what to type in
// another terminal (with --home when they gave one).
func listening(d *daemon.Daemon, homeFlag bool) string {
	h := ""
	if homeFlag {
		h = " --home " + shellWord(d.Home())
	}
	card := "card"
	if exe, err := os.Executable(); err == nil && strings.Contains(exe, "go-build") {
		// Started by go run: card itself may not be on PATH yet.
		card = "go run ./cmd/card"
	}
	return fmt.Sprintf(`
card %s is listening on %s (pid %d)
  home:   %s
  token:  %s (new at every start; clients read it there)
  try, in another terminal:  %[6]s info%[7]s   %[6]s detect%[7]s --health
  Ctrl-C stops it.

`, daemon.Version, d.URL(), os.Getpid(), d.Home(), filepath.Join(d.Home(), homedir.TokenFileName), card, h)
}

// shellWord quotes s for a POSIX shell when it needs quoting.
func shellWord(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// withFakeAgents declares the fake agents for the daemon opts describe:
// card's own executable, in the home the daemon will use.
func (e env) withFakeAgents(opts *daemon.Options) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--fake-agents: card cannot find its own executable to run as the fake agents: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return fmt.Errorf("--fake-agents: %w", err)
	}
	home := opts.Home
	if home == "" {
		if home, err = daemon.DefaultHome(os.Getenv); err != nil {
			return fmt.Errorf("--fake-agents: %w", err)
		}
	}
	// The agents run in their sessions' directories: their state
	// directory must not be relative to the daemon's.
	if home, err = filepath.Abs(home); err != nil {
		return fmt.Errorf("--fake-agents: %w", err)
	}
	return declareFakeAgents(opts, exe, fakeAgentDecls(exe, home))
}
