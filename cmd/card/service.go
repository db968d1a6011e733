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

var serviceDoc = doc{
	name:  "service",
	usage: "service install|uninstall|status [--dry-run] [--home DIR]",
	about: `Runs card serve at login, as this user: a systemd user unit on Linux (an XDG autostart
entry where there is no systemd user manager), a LaunchAgent on macOS. The definition pins
this binary and the home, so install from an installed card (go install ./cmd/card), not
from go run.`,
	more: `Subcommands:
  install     write the service definition and start it
  uninstall   stop the service and remove its definition
  status      whether the service is installed and loaded, its pid, and what daemon.json says`,
	examples: []string{
		"card service install --dry-run  # every file and command, nothing done",
		"card service install",
		"card service status",
	},
}

var serviceVerbDocs = map[string]doc{
	"install": {
		name:  "service install",
		usage: "service install [--dry-run] [--home DIR]",
		about: "Writes the service definition for this binary, this user and the home, then starts it.\nRun again after moving the binary or to change the home.",
		examples: []string{
			"card service install --dry-run  # every file and command, nothing done",
			"card service install --home ~/card-home",
		},
	},
	"uninstall": {
		name:     "service uninstall",
		usage:    "service uninstall [--dry-run] [--home DIR]",
		about:    "Stops the service and removes its definition. The home and its run history are kept.",
		examples: []string{"card service uninstall --dry-run", "card service uninstall"},
	},
	"status": {
		name:     "service status",
		usage:    "service status [--home DIR]",
		about:    "Says whether the service is installed and loaded, its pid, and what daemon.json says.",
		examples: []string{"card service status"},
	},
}

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
	if len(args) == 0 {
		return e.usageError(serviceDoc, "which subcommand? (install, uninstall or status)")
	}
	if wantsHelp(args) {
		serviceDoc.write(e.stdout, nil)
		return exitOK
	}
	verb := args[0]
	d, ok := serviceVerbDocs[verb]
	if !ok {
		return e.usageError(serviceDoc, fmt.Sprintf("unknown subcommand %q", verb))
	}
	fs, home := e.newFlags(d)
	var dryRun *bool
	if verb != "status" {
		dryRun = fs.Bool("dry-run", false, "print every file and command instead of doing them")
	}
	pos, code, done := e.parse(d, fs, args[1:])
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(d, fmt.Sprintf("unexpected argument %q", pos[0]))
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
