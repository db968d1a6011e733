package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/detect"
)

// agents answers detect and health: the daemon's client, or localAgents
// when no daemon runs.
type agents interface {
	Detect(ctx context.Context, p api.DetectParams) ([]api.ExternalAgentSpec, error)
	Health(ctx context.Context, id string, force bool) (api.ExternalAgentHealth, error)
	HealthAll(ctx context.Context, force bool) ([]api.ExternalAgentHealth, error)
}

// localAgents detects in this process with the detector the daemon would
// build. It has no cache to bypass, so every answer is fresh.
type localAgents struct{ d *detect.Detector }

func (l localAgents) Detect(ctx context.Context, p api.DetectParams) ([]api.ExternalAgentSpec, error) {
	specs := l.d.Detect(ctx, true)
	if p.IncludeHealth {
		specs = l.d.WithHealth(ctx, specs, true)
	}
	return specs, nil
}

func (l localAgents) Health(ctx context.Context, id string, _ bool) (api.ExternalAgentHealth, error) {
	return l.d.Health(ctx, id, true)
}

func (l localAgents) HealthAll(ctx context.Context, _ bool) ([]api.ExternalAgentHealth, error) {
	return l.d.HealthDetected(ctx, true), nil
}

// withAgents runs f, within a minute, on the running daemon of home or, when
// none runs, in-process; an error is reported as command name's.
func (e env) withAgents(name, home string, f func(ctx context.Context, a agents) error) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var a agents
	c, err := client.Dial(ctx, client.Options{Home: home})
	var nd *client.NoDaemonError
	switch {
	case err == nil:
		defer c.Close()
		a = c
	case errors.As(err, &nd):
		fmt.Fprintf(e.stderr, "card: no daemon running for home %s; detecting in this process\n", nd.Home)
		d, lerr := daemon.LocalDetector(ctx, nd.Home, os.Environ())
		if lerr != nil {
			return e.fail(name, lerr)
		}
		defer d.Close()
		a = localAgents{d}
	default:
		return e.fail(name, err)
	}
	if err := f(ctx, a); err != nil {
		return e.fail(name, err)
	}
	return exitOK
}

var detectDoc = doc{
	name:  "detect",
	usage: "detect [--health] [--refresh] [--json] [--home DIR]",
	about: `Lists the agent CLIs card found on this machine: each one's version, whether it can run,
how its read_only mode is enforced, and where it is. With --health, also whether each is
signed in. Asks the running daemon (its cached answer, unless --refresh); with no daemon
running, detects in this process the way a daemon on the same home would.`,
	examples: []string{
		"card detect",
		"card detect --health  # and whether each is signed in",
		"card detect --json    # the daemon's ExternalAgentSpec objects",
	},
}

func (e env) detect(args []string) int {
	fs, home := e.newFlags(detectDoc)
	withHealth := fs.Bool("health", false, "include whether each agent is signed in and ready")
	refresh := fs.Bool("refresh", false, "detect again instead of using the daemon's cached answer")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, done := e.parse(detectDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(detectDoc, fmt.Sprintf("unexpected argument %q (card health %s says whether one agent is ready)", pos[0], pos[0]))
	}
	return e.withAgents("detect", *home, func(ctx context.Context, a agents) error {
		specs, err := a.Detect(ctx, api.DetectParams{IncludeHealth: *withHealth, Refresh: *refresh})
		switch {
		case err != nil:
			return err
		case *asJSON:
			return writeJSON(e.stdout, specs)
		}
		printSpecs(e.stdout, specs, *withHealth)
		return nil
	})
}

// printSpecs is the detect table; each reason goes under its agent's row,
// wrapped, and a machine with none of the CLIs is told how to install them.
func printSpecs(w io.Writer, specs []api.ExternalAgentSpec, withHealth bool) {
	if len(specs) == 0 {
		printNoneFound(w)
		return
	}
	t := table{header: []string{"ID", "VERSION", "RUNNABLE", "READ-ONLY", "PATH"}}
	if withHealth {
		t.header = []string{"ID", "VERSION", "RUNNABLE", "READ-ONLY", "HEALTH", "PATH"}
	}
	for _, s := range specs {
		var notes []string
		runnable := "yes"
		if reason, bad := s.UnusableReason(); bad {
			runnable = "no"
			notes = append(notes, "cannot run: "+reason)
		}
		cells := []string{s.ID, orDash(s.Version), runnable, orDash(string(s.ReadOnlyEnforcement))}
		if withHealth {
			h := "-"
			if s.Health != nil {
				h = string(s.Health.Status)
				if s.Health.Reason != "" && s.Health.Status != api.StatusReady && s.Health.Reason != firstReason(s) {
					notes = append(notes, string(s.Health.Status)+": "+s.Health.Reason)
				}
			}
			cells = append(cells, h)
		}
		t.add(append(cells, tildePath(s.BinaryPath)), notes...)
	}
	t.write(w)
}

// firstReason is why s cannot run, which its health repeats word for word.
func firstReason(s api.ExternalAgentSpec) string {
	reason, _ := s.UnusableReason()
	return reason
}

// printNoneFound says which CLIs card looks for and how to install or pin
// each.
func printNoneFound(w io.Writer) {
	fmt.Fprintln(w, "No agent CLI found. card looks on PATH, the login shell's PATH and the usual install")
	fmt.Fprintln(w, "directories (npm's global bin, ~/.local/bin, Homebrew, ...) for:")
	t := table{header: []string{"ID", "BINARY", "INSTALL"}, wrapLast: true}
	for _, a := range agent.All() {
		t.add([]string{a.ID, a.Binary, strings.TrimPrefix(a.InstallHint, "install it with ")})
	}
	t.write(w)
	fmt.Fprintln(w, "")
	fmt.Fprint(w, wrap("Installed somewhere card does not look? Pin it: CAR_CLAUDE_CODE_BIN=/path/to/claude (each agent's "+
		"CAR_<ID>_BIN) in the daemon's environment, or bin = \"/path/to/claude\" under [adapters.claude-code] in "+
		"card.toml; then `card detect --refresh`.", "", tableWidth))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tildePath shortens a path under $HOME to ~/…, as people read them.
func tildePath(p string) string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" || home == "/" || !strings.HasPrefix(p, home+"/") {
		return p
	}
	return "~" + strings.TrimPrefix(p, home)
}

var healthDoc = doc{
	name:  "health",
	usage: "health [ID] [--force] [--json] [--home DIR]",
	about: `Says whether each detected agent (or agent ID) is ready to invoke: signed in, expired,
not configured, not executable; every status but ready says why and what to do. Answers are
cached for 30 s; --force checks again.`,
	more: `Exit codes: 0 answered (with ID: the agent is ready), 1 with ID: the agent is not ready,
4 no agent of that ID.`,
	examples: []string{
		"card health",
		"card health claude-code  # exit 0 only when it is ready",
		"card health --force --json",
	},
}

func (e env) health(args []string) int {
	fs, home := e.newFlags(healthDoc)
	force := fs.Bool("force", false, "check again instead of using the 30 s cache")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, done := e.parse(healthDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 1 {
		return e.usageError(healthDoc, fmt.Sprintf("one agent at a time, not %q", strings.Join(pos, " ")))
	}
	id := ""
	if len(pos) == 1 {
		id = pos[0]
	}
	var all []api.ExternalAgentHealth
	code = e.withAgents("health", *home, func(ctx context.Context, a agents) error {
		if id == "" {
			var err error
			all, err = a.HealthAll(ctx, *force)
			return err
		}
		h, err := a.Health(ctx, id, *force)
		all = []api.ExternalAgentHealth{h}
		return err
	})
	switch {
	case code != exitOK:
		return code
	case *asJSON && id != "":
		return printJSON(e.stdout, all[0])
	case *asJSON:
		return printJSON(e.stdout, all)
	case len(all) == 0:
		printNoneFound(e.stdout)
		return exitOK
	}
	t := table{header: []string{"ID", "STATUS"}}
	for _, h := range all {
		var notes []string
		if h.Reason != "" {
			notes = append(notes, h.Reason)
		}
		t.add([]string{h.ID, string(h.Status)}, notes...)
	}
	t.write(e.stdout)
	if id != "" && all[0].Status != api.StatusReady {
		return exitFailure
	}
	return exitOK
}
