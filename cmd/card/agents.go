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

// agentSource answers detect and health from the running daemon, or, when
// none runs, in-process with the same detector the daemon would build.
type agentSource struct {
	client *client.Client
	local  *detect.Detector
}

func (e env) agentSource(ctx context.Context, flagHome string) (*agentSource, func(), error) {
	c, err := client.Dial(ctx, client.Options{Home: flagHome})
	if err == nil {
		return &agentSource{client: c}, func() { c.Close() }, nil
	}
	var nd *client.NoDaemonError
	if !errors.As(err, &nd) {
		return nil, nil, err
	}
	fmt.Fprintf(e.stderr, "card: no daemon running for home %s; detecting in this process\n", nd.Home)
	d, lerr := daemon.LocalDetector(ctx, nd.Home, os.Environ())
	if lerr != nil {
		return nil, nil, lerr
	}
	return &agentSource{local: d}, d.Close, nil
}

func (e env) detect(args []string) int {
	fs, home := e.flags("detect")
	withHealth := fs.Bool("health", false, "include each agent's health")
	refresh := fs.Bool("refresh", false, "re-detect instead of using the daemon's cached answer")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src, done, err := e.agentSource(ctx, *home)
	if err != nil {
		return e.fail("detect", err)
	}
	defer done()
	var specs []detect.ExternalAgentSpec
	if src.client != nil {
		specs, err = src.client.Detect(ctx, daemon.DetectParams{IncludeHealth: *withHealth, Refresh: *refresh})
		if err != nil {
			return e.fail("detect", err)
		}
	} else {
		specs = src.local.Detect(ctx, true)
		if *withHealth {
			specs = src.local.WithHealth(ctx, specs, true)
		}
	}
	if *asJSON {
		return printJSON(e.stdout, specs)
	}
	printSpecs(e.stdout, specs, *withHealth)
	return exitOK
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src, done, err := e.agentSource(ctx, *home)
	if err != nil {
		return e.fail("health", err)
	}
	defer done()
	var all []detect.ExternalAgentHealth
	switch {
	case src.client != nil && id != "":
		var h detect.ExternalAgentHealth
		h, err = src.client.Health(ctx, id, *force)
		all = []detect.ExternalAgentHealth{h}
	case src.client != nil:
		all, err = src.client.HealthAll(ctx, *force)
	case id != "":
		var h detect.ExternalAgentHealth
		h, err = src.local.Health(ctx, id, true)
		all = []detect.ExternalAgentHealth{h}
	default:
		all = src.local.HealthAll(ctx, true)
	}
	if err != nil {
		return e.fail("health", err)
	}
	if *asJSON {
		if id != "" {
			return printJSON(e.stdout, all[0])
		}
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
