package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
)

// Exit codes a script can act on; the usage's table lists them and a test
// holds each.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitNoDaemon  = 3
	exitRefused   = 4
	exitCancelled = 130
)

const usage = `card runs the coding-agent CLIs installed on this machine (Claude Code, Codex, Gemini CLI,
GitHub Copilot CLI, Factory Droid, Pi) for desktop apps and editor plugins, over one local
WebSocket JSON-RPC API. ` + "`card serve`" + ` is the daemon; the other commands are its clients.

Usage: card COMMAND [ARGUMENTS] [FLAGS]

Commands:
  serve     run the daemon in this terminal
  info      the running daemon: version, pid, address, home
  detect    which agent CLIs are installed and whether each can run
  health    whether each agent is signed in and ready
  invoke    run an agent on a task and stream its answer
  chat      hold a conversation with an agent, one prompt per line
  diff      what an isolated session (chat --worktree) changed, as a diff
  apply     bring an isolated session's changes into its checkout, uncommitted
  rewind    put an isolated session's worktree back to an earlier turn
  discard   remove an isolated session's worktree and branch
  acp       be an ACP agent on stdio for an editor (Zed, JetBrains, Neovim, Emacs)
  runs      the run history; show, follow or prune runs
  usage     what the runs used per agent per day, and the budgets left
  service   run card at login (systemd user unit, LaunchAgent or XDG autostart)
  token     rotate the token clients authenticate with
  version   print card's version
  help      this text, or one command's: card help COMMAND

Every command but version takes --home DIR, the daemon's state directory: default $CARD_HOME,
else ~/.local/state/card (Linux) or ~/Library/Application Support/card (macOS).

Exit codes:
  0    succeeded
  1    failed: the agent's run failed, or the command did
  2    usage: a flag or an argument was wrong
  3    no daemon is running for the home
  4    refused before anything ran: the guard, bypass not allowed, an agent not installed,
       too many runs, a bad argument the daemon refused
  75   interrupted: the daemon stopped, or the connection to it was lost; retrying may work
  124  the run timed out
  130  cancelled (Ctrl-C)

Examples:
  card serve                                                     # start the daemon here
  card detect --health                                           # in another terminal
  card invoke claude-code "explain main.go" --cwd ~/src/project
  card help invoke                                               # a command's flags and examples
`

type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// commands are card's subcommands, by name.
var commands = map[string]func(env, []string) int{
	"serve": env.serve, "info": env.info, "detect": env.detect, "health": env.health, "token": env.token,
	"invoke": env.invoke, "chat": env.chat, "acp": env.acp, "runs": env.runs, "usage": env.usage, "service": env.service,
	"version": env.version, "diff": env.diff, "apply": env.apply, "rewind": env.rewind, "discard": env.discard,
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
	case fakeAgentCommand:
		return e.fakeAgent(args[1:])
	case "--version", "-v":
		return e.version(nil)
	case "help", "-h", "--help", "-help":
		if args[0] == "help" && len(args) > 1 {
			// `card help runs show` is `card runs show --help`.
			if _, ok := commands[args[1]]; ok {
				return run(append(append([]string{}, args[1:]...), "--help"), stdin, stdout, stderr)
			}
			fmt.Fprintf(stderr, "card help: no command %q\n\n%s", args[1], usage)
			return exitUsage
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "card: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

var versionDoc = doc{
	name:  "version",
	usage: "version",
	about: "Prints card's version and the version of the wire protocol it speaks, then the commit it was\n" +
		"built from and that commit's date. A release says its own; a build from a clone says it is a\n" +
		"dev build and names the commit Go recorded (with uncommitted changes, it says so).",
	examples: []string{"card version"},
}

func (e env) version(args []string) int {
	fs := flag.NewFlagSet("card version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pos, code, done := e.parse(versionDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(versionDoc, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	fmt.Fprint(e.stdout, versionText(daemon.Build()))
	return exitOK
}

// versionText is `card version`'s two lines: the version and protocol
// first (what scripts read), then where the binary came from.
func versionText(b daemon.BuildStamp) string {
	head := fmt.Sprintf("card %s (protocol %s)\n", b.Version, daemon.ProtocolVersion)
	if !b.Dev {
		date := b.Date
		if date == "" {
			date = "an unrecorded date"
		}
		return head + fmt.Sprintf("commit %s, committed %s\n", b.Commit, date)
	}
	if b.Commit == "" {
		return head + "a dev build, not a release: no commit recorded (go run, or a build with -buildvcs=false;\n" +
			"`go build ./cmd/card` in a clone records it)\n"
	}
	line := "a dev build, not a release: commit " + b.Commit
	if b.Modified {
		line += " with uncommitted changes"
	}
	if b.Date != "" {
		line += ", committed " + b.Date
	}
	return head + line + "\n"
}

var infoDoc = doc{
	name:  "info",
	usage: "info [--home DIR]",
	about: "Prints the running daemon's version, pid, address, home and the guard's view of its\nancestry, as JSON. When a daemon of this home once did not stop cleanly (a crash, or a kill\nnothing saw), last_crash says when and how, and a line on stderr says it too; a crash's\nwhole output is kept under <home>/crashes.",
	examples: []string{
		"card info",
		"card info --home /tmp/card-dev  # the daemon started with card serve --home /tmp/card-dev",
	},
}

func (e env) info(args []string) int {
	fs, home := e.newFlags(infoDoc)
	pos, code, done := e.parse(infoDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(infoDoc, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	return e.call("info", *home, func(ctx context.Context, c *client.Client) error {
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if err := writeJSON(e.stdout, info); err != nil {
			return err
		}
		if lc := info.LastCrash; lc != nil {
			// Said to the person too, not only in the JSON: a supervisor's
			// silent restart is otherwise the only trace.
			fmt.Fprintf(e.stderr, "card info: %s (started %s)\n", lc.Summary, lc.StartedAt)
			if lc.File != "" {
				fmt.Fprintf(e.stderr, "card info: its crash output is in %s\n", lc.File)
			}
		}
		return nil
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

var tokenDoc = doc{
	name:  "token",
	usage: "token rotate [--home DIR]",
	about: "Manages the token clients send to the daemon (Authorization: Bearer, read from\n<home>/token). The daemon makes a new one at every start.",
	more:  "Subcommands:\n  rotate   replace the token now: new connections need the new one, open ones stay open",
	examples: []string{
		"card token rotate",
	},
}

var tokenRotateDoc = doc{
	name:  "token rotate",
	usage: "token rotate [--home DIR]",
	about: "Replaces <home>/token with a new random token. New connections need the new token;\nconnections already open stay open. The daemon need not be running.",
	examples: []string{
		"card token rotate",
		"card token rotate --home /tmp/card-dev",
	},
}

func (e env) token(args []string) int {
	if len(args) == 0 || wantsHelp(args) {
		if len(args) == 0 {
			return e.usageError(tokenDoc, "which subcommand? (rotate)")
		}
		tokenDoc.write(e.stdout, nil)
		return exitOK
	}
	if args[0] != "rotate" {
		return e.usageError(tokenDoc, fmt.Sprintf("unknown subcommand %q", args[0]))
	}
	fs, home := e.newFlags(tokenRotateDoc)
	pos, code, done := e.parse(tokenRotateDoc, fs, args[1:])
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(tokenRotateDoc, fmt.Sprintf("unexpected argument %q", pos[0]))
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
