package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/detect"
)

// agents answers detect and health: the daemon's client, or localAgents
// when no daemon runs.
type agents interface {
	Detect(ctx context.Context, p daemon.DetectParams) ([]detect.ExternalAgentSpec, error)
	Health(ctx context.Context, id string, force bool) (detect.ExternalAgentHealth, error)
	HealthAll(ctx context.Context, force bool) ([]detect.ExternalAgentHealth, error)
}

// localAgents detects in this process with the detector the daemon would
// build. It has no cache to bypass, so every answer is fresh.
type localAgents struct{ d *detect.Detector }

func (l localAgents) Detect(ctx context.Context, p daemon.DetectParams) ([]detect.ExternalAgentSpec, error) {
	specs := l.d.Detect(ctx, true)
	if p.IncludeHealth {
		specs = l.d.WithHealth(ctx, specs, true)
	}
	return specs, nil
}

func (l localAgents) Health(ctx context.Context, id string, _ bool) (detect.ExternalAgentHealth, error) {
	return l.d.Health(ctx, id, true)
}

func (l localAgents) HealthAll(ctx context.Context, _ bool) ([]detect.ExternalAgentHealth, error) {
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

func (e env) detect(args []string) int {
	fs, home := e.flags("detect")
	withHealth := fs.Bool("health", false, "include each agent's health")
	refresh := fs.Bool("refresh", false, "re-detect instead of using the daemon's cached answer")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	return e.withAgents("detect", *home, func(ctx context.Context, a agents) error {
		specs, err := a.Detect(ctx, daemon.DetectParams{IncludeHealth: *withHealth, Refresh: *refresh})
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

func printSpecs(w io.Writer, specs []detect.ExternalAgentSpec, withHealth bool) {
	if len(specs) == 0 {
		fmt.Fprintln(w, "no agent CLIs found (looked for: "+strings.Join(agent.IDs(), ", ")+")")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "ID\tVERSION\tRUNNABLE\tREAD-ONLY\tPATH"
	if withHealth {
		header += "\tHEALTH"
	}
	fmt.Fprintln(tw, header)
	for _, s := range specs {
		runnable := "yes"
		if reason, bad := s.UnusableReason(); bad {
			runnable = "no: " + reason
		}
		version := s.Version
		if version == "" {
			version = "-"
		}
		ro := string(s.ReadOnlyEnforcement)
		if ro == "" {
			ro = "-"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", s.ID, version, runnable, ro, s.BinaryPath)
		if withHealth {
			h := "-"
			if s.Health != nil {
				h = string(s.Health.Status)
				if s.Health.Reason != "" && s.Health.Status != detect.StatusReady {
					h += ": " + s.Health.Reason
				}
			}
			line += "\t" + h
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func (e env) health(args []string) int {
	fs, home := e.flags("health")
	force := fs.Bool("force", false, "bypass the 30 s cache")
	asJSON := fs.Bool("json", false, "print JSON")
	// Accept the id before or after the flags.
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
	}
	var all []detect.ExternalAgentHealth
	code := e.withAgents("health", *home, func(ctx context.Context, a agents) error {
		if id == "" {
			var err error
			all, err = a.HealthAll(ctx, *force)
			return err
		}
		h, err := a.Health(ctx, id, *force)
		all = []detect.ExternalAgentHealth{h}
		return err
	})
	switch {
	case code != exitOK:
		return code
	case *asJSON && id != "":
		return printJSON(e.stdout, all[0])
	case *asJSON:
		return printJSON(e.stdout, all)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tREASON")
	for _, h := range all {
		reason := h.Reason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", h.ID, h.Status, reason)
	}
	tw.Flush()
	if id != "" && all[0].Status != detect.StatusReady {
		return exitFailure
	}
	return exitOK
}
