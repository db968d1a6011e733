package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/deploy"
)

const serviceUsage = `usage: card service install|uninstall|status [--dry-run] [--home DIR]

  install     write the service definition for this binary and user and start it
              (systemd user unit, XDG autostart entry, or LaunchAgent on macOS)
  uninstall   stop the service and remove its definition
  status      whether the service is installed and loaded, its pid, and what daemon.json says

  --dry-run   (install, uninstall) print every file and command instead of doing them
  --home DIR  the daemon home the service runs with (default $CARD_HOME or the platform default)
`

// serviceMachine is how `card service` learns about this machine and runs
// systemctl/launchctl. It is a variable so the CLI test can pin a target: a
// `go test` binary lives in a go-build directory that CurrentTarget rightly
// refuses to install.
var serviceMachine = func(ctx context.Context, cardHome string) (deploy.Target, deploy.Runner, error) {
	r := deploy.ExecRunner{}
	t, err := deploy.CurrentTarget(ctx, cardHome, r)
	return t, r, err
}

func (e env) service(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, serviceUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	verb := args[0]
	if verb != "status" {
		if _, err := deploy.ParseAction(verb); err != nil {
			fmt.Fprintf(e.stderr, "card service: %v\n\n%s", err, serviceUsage)
			return exitUsage
		}
	}
	fs, home := e.flags("service " + verb)
	var dryRun *bool
	if verb != "status" {
		dryRun = fs.Bool("dry-run", false, "print every file and command instead of doing them")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "card service %s: unexpected argument %q\n\n%s", verb, fs.Arg(0), serviceUsage)
		return exitUsage
	}
	cardHome, err := client.ResolveHome(*home)
	if err == nil {
		// The unit pins --home: the supervisor's environment has no
		// CARD_HOME, and a relative path would resolve against its cwd.
		cardHome, err = filepath.Abs(cardHome)
	}
	if err != nil {
		return e.fail("service "+verb, err)
	}

	// Ctrl-C stops a hung systemctl/launchctl (the runner kills its process
	// group) instead of leaving the terminal stuck.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	t, runner, err := serviceMachine(ctx, cardHome)
	if err != nil {
		return e.fail("service "+verb, err)
	}

	if verb == "status" {
		rep, err := deploy.Status(ctx, t, runner)
		if err != nil {
			return e.fail("service status", err)
		}
		if err := rep.WriteText(e.stdout); err != nil {
			return exitFailure
		}
		return exitOK
	}

	steps, err := deploy.Plan(t, deploy.Action(verb))
	if err != nil {
		return e.fail("service "+verb, err)
	}
	if *dryRun {
		if err := steps.DryRun(e.stdout); err != nil {
			return e.fail("service "+verb, err)
		}
		return exitOK
	}
	if err := steps.Apply(ctx, runner, e.stdout); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintf(e.stderr, "card service %s: interrupted; run it again, or `card service status` to see where it stopped\n", verb)
			return exitCancelled
		}
		// Apply's error names the step, the command and its output, and a
		// failed command's already starts with "card service <verb>:".
		msg := err.Error()
		if !strings.HasPrefix(msg, "card service") {
			msg = "card service " + verb + ": " + msg
		}
		fmt.Fprintln(e.stderr, msg)
		return exitFailure
	}
	return exitOK
}
