package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/rpc"
)

// Exit codes a script can act on.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitNoDaemon  = 3
	exitRefused   = 4
	exitCancelled = 130
)

const usage = `card — run the coding agents installed on this machine, over one local API.

Usage:
  card serve [--home DIR] [--addr HOST:PORT] [--log-level LEVEL]
  card info [--home DIR]
  card detect [--health] [--refresh] [--json] [--home DIR]
  card health [ID] [--force] [--json] [--home DIR]
  card token rotate [--home DIR]
  card invoke ID [TASK|-] [--cwd DIR] [--mode read_only|edit|bypass] [--model M]
              [--invoked-by X] [--timeout S] [--json]
  card runs [--limit N] [--json] | card runs show RUN_ID | card runs follow RUN_ID
  card service install|uninstall|status [--dry-run] [--home DIR]
  card version

card invoke and card runs follow exit 0 succeeded, 1 failed, 3 no daemon, 4 refused,
75 interrupted, 124 timed out, 130 cancelled.

Home defaults to $CARD_HOME, else ~/.local/state/card (Linux) or
~/Library/Application Support/card (macOS).
`

type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// commands are the subcommands that take arguments, by name.
var commands = map[string]func(env, []string) int{
	"serve": env.serve, "info": env.info, "detect": env.detect, "health": env.health, "token": env.token,
	"invoke": env.invoke, "runs": env.runs, "service": env.service,
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := env{stdin, stdout, stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	if cmd, ok := commands[args[0]]; ok {
		return cmd(e, args[1:])
	}
	switch args[0] {
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "card %s (protocol %s)\n", daemon.Version, daemon.ProtocolVersion)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "card: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

func (e env) flags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("card "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	home := fs.String("home", "", "state directory (default $CARD_HOME or the platform default)")
	return fs, home
}

func (e env) serve(args []string) int {
	fs, home := e.flags("serve")
	addr := fs.String("addr", "", "listen address, e.g. 127.0.0.1:0 (port 0 = any free port)")
	level := fs.String("log-level", "", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	d, err := daemon.New(daemon.Options{Home: *home, Addr: *addr, LogLevel: *level, LogOutput: e.stderr})
	if err != nil {
		fmt.Fprintf(e.stderr, "card serve: %v\n", err)
		var already *daemon.AlreadyRunningError
		if errors.As(err, &already) {
			return exitRefused
		}
		return exitFailure
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(e.stderr, "card serve: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func (e env) fail(cmd string, err error) int {
	fmt.Fprintf(e.stderr, "card %s: %v\n", cmd, err)
	var nd *client.NoDaemonError
	if errors.As(err, &nd) {
		return exitNoDaemon
	}
	var re *rpc.Error
	if errors.As(err, &re) && re.Code != rpc.CodeInternalError {
		return exitRefused
	}
	return exitFailure
}

func (e env) info(args []string) int {
	fs, home := e.flags("info")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	return e.call("info", *home, func(ctx context.Context, c *client.Client) error {
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		return writeJSON(e.stdout, info)
	})
}

// dial connects to the daemon of home (daemon.json and the token file)
// within 10 s.
func dial(home string) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Dial(ctx, client.Options{Home: home})
}

// call runs f on a connection to the daemon of home within 10 s; an error
// is reported as command name's, with its exit code.
func (e env) call(name, home string, f func(ctx context.Context, c *client.Client) error) int {
	c, err := dial(home)
	if err == nil {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = f(ctx, c)
	}
	if err != nil {
		return e.fail(name, err)
	}
	return exitOK
}

func (e env) token(args []string) int {
	if len(args) == 0 || args[0] != "rotate" {
		fmt.Fprintln(e.stderr, "usage: card token rotate [--home DIR]")
		return exitUsage
	}
	fs, home := e.flags("token rotate")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	h, err := client.ResolveHome(*home)
	if err != nil {
		return e.fail("token rotate", err)
	}
	if _, err := daemon.RotateToken(h); err != nil {
		return e.fail("token rotate", err)
	}
	fmt.Fprintf(e.stdout, "token rotated in %s; new connections need the new token, open ones stay open\n", h)
	return exitOK
}
