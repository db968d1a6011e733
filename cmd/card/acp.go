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
	"time"

	"github.com/card-dev/card/acp/agentside"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/guard"
)

var acpDoc = doc{
	name:  "acp",
	usage: "acp [ADAPTER] [--home DIR] [--mode MODE] | acp [ADAPTER] --print-config EDITOR [--npx]",
	about: "Speaks the Agent Client Protocol (ACP, version 1) on stdin and stdout, as the agent ADAPTER, for\n" +
		"an editor's custom-agent setting (Zed, JetBrains, Neovim, Emacs). With no ADAPTER it is one agent\n" +
		"for every agent CLI installed: a session runs the first one that can run and is signed in, and the\n" +
		"editor's agent option picks another until the session's first prompt. Each ACP session is a card\n" +
		"session on the running daemon: its turns are runs in card's history, its questions come to the\n" +
		"editor, and session/load replays it. Only ACP goes to stdout; card's own lines go to stderr. With\n" +
		"no daemon running it says so on stderr, answers initialize from the adapter's own facts, and\n" +
		"answers session/new with an error the editor shows. When the editor closes stdin it ends its\n" +
		"sessions' warm agents (the sessions stay open, for session/load) and exits 0. The adapters are\n" +
		"claude-code, codex, gemini, copilot, droid and pi.\n\n" +
		"--print-config EDITOR prints the entry for EDITOR's agent settings (zed, jetbrains, neovim or\n" +
		"emacs) instead, for ADAPTER or, without one, for every adapter: it runs this card by its\n" +
		"absolute path, which an editor started from a desktop menu finds without your shell's PATH.\n" +
		"With --npx the entry runs `npx -y @card-dev/card acp ADAPTER` instead: nothing to install\n" +
		"first, and the same entry on every machine, but it needs Node.js where the editor runs.",
	examples: []string{
		"card acp claude-code                     # what an editor runs",
		"card acp                                 # one agent for every installed agent CLI",
		"card acp codex --mode edit               # sessions edit without asking",
		"card acp gemini --home /tmp/card-dev     # the daemon of card serve --home /tmp/card-dev",
		"card acp claude-code --print-config zed  # an entry for Zed's settings.json",
		"card acp --print-config jetbrains --npx  # every adapter, each run through npx",
	},
}

func (e env) acp(args []string) int {
	fs, home := e.newFlags(acpDoc)
	mode := fs.String("mode", "", "the permission `mode` of a session that names none: read_only, ask, edit or bypass (default ask)")
	printConfig := fs.String("print-config", "", "print the entry for `editor`'s agent settings ("+editorNames()+") and exit")
	npx := fs.Bool("npx", false, "with --print-config: the entry runs npx -y "+npmPackage+" instead of this binary")
	pos, code, done := e.parse(acpDoc, fs, args)
	if done {
		return code
	}
	if *printConfig != "" {
		return e.printACPConfig(*printConfig, pos, *npx, *home, *mode)
	}
	if *npx {
		return e.usageError(acpDoc, "--npx goes with --print-config EDITOR")
	}
	if len(pos) > 1 {
		return e.usageError(acpDoc, fmt.Sprintf("unexpected argument %q: name at most one adapter", pos[1]))
	}
	if err := daemon.DeclareAgents(*home, os.Getenv); err != nil {
		fmt.Fprintf(e.stderr, "card acp: the agents card.toml declares are not known: %v\n", err)
	}
	adapter := ""
	if len(pos) == 1 {
		if _, known := agent.Lookup(pos[0]); !known {
			return e.usageError(acpDoc, fmt.Sprintf("no adapter %q: name one of %s (an agent card.toml declares is one of them once declared), or none", pos[0], strings.Join(agent.IDs(), ", ")))
		}
		adapter = pos[0]
	}
	logf := func(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) }
	// An agent CLI that runs card acp has card's ancestry in its
	// environment; its sessions are judged by it like any nested call.
	invokedBy := ""
	if chain := os.Getenv(guard.AncestryEnv); chain != "" {
		parts := strings.Split(chain, ",")
		invokedBy = strings.TrimSpace(parts[len(parts)-1])
	}
	srv := agentside.New(agentside.Config{Adapter: adapter, Version: daemon.Version, Logf: logf, DefaultPermissionMode: *mode,
		InvokedBy: invokedBy})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := client.Dial(dctx, client.Options{Home: *home, OnApprove: srv.Approve})
	cancel()
	exit := exitOK
	// served is closed once the editor's side has ended, before the
	// connection to the daemon is closed: that close is card's own doing,
	// not a lost daemon, and an editor that closed stdin has nothing
	// wrong to hear about.
	served := make(chan struct{})
	if err != nil {
		// One line, and the editor learns the same from initialize.
		fmt.Fprintf(e.stderr, "card acp: %v\n", err)
		srv.SetUnavailable(err)
		var nd *client.NoDaemonError
		if errors.As(err, &nd) {
			exit = exitNoDaemon
		} else {
			exit = exitFailure
		}
	} else {
		defer c.Close()
		srv.SetBackend(c)
		watched := make(chan struct{})
		defer func() { <-watched }()
		go func() {
			defer close(watched)
			select {
			case <-c.Done():
				select {
				case <-served:
					return
				default:
				}
				lost := errors.New("card acp: the connection to card's daemon was lost; restart the agent once the daemon runs")
				fmt.Fprintln(e.stderr, lost.Error())
				srv.SetUnavailable(lost)
			case <-served:
			case <-ctx.Done():
			}
		}()
	}
	err = srv.Serve(ctx, agentside.Lines(e.stdin, e.stdout))
	close(served)
	if err != nil {
		fmt.Fprintf(e.stderr, "card acp: %v\n", err)
		return exitFailure
	}
	return exit
}

// printACPConfig writes an editor's entry for `card acp`, one per adapter
// named (every adapter when none is).
func (e env) printACPConfig(editor string, pos []string, npx bool, home, mode string) int {
	write, ok := editors[editor]
	if !ok {
		return e.usageError(acpDoc, fmt.Sprintf("no editor %q for --print-config; the editors are %s", editor, editorNames()))
	}
	if len(pos) > 1 {
		return e.usageError(acpDoc, fmt.Sprintf("unexpected argument %q", pos[1]))
	}
	var adapters []string
	if len(pos) == 1 {
		if _, known := agent.Lookup(pos[0]); !known {
			return e.usageError(acpDoc, fmt.Sprintf("no adapter %q: name one of %s", pos[0], strings.Join(agent.IDs(), ", ")))
		}
		adapters = pos
	} else {
		for _, a := range agent.All() {
			adapters = append(adapters, a.ID)
		}
	}
	// The flags this command was given go into the entry, so it runs what
	// was asked for; a home is made absolute, as the editor's working
	// directory is not this shell's.
	var flags []string
	if mode != "" {
		flags = append(flags, "--mode", mode)
	}
	if home != "" {
		abs, err := filepath.Abs(home)
		if err != nil {
			return e.fail("acp", err)
		}
		flags = append(flags, "--home", abs)
	}
	var entries []acpEntry
	if npx {
		entries = acpEntries(adapters, "npx", []string{"-y", npmPackage}, flags)
	} else {
		exe, note, err := thisBinary()
		if err != nil {
			return e.fail("acp", err)
		}
		if note != "" {
			fmt.Fprintf(e.stderr, "card acp: %s\n", note)
		}
		entries = acpEntries(adapters, exe, nil, flags)
	}
	fmt.Fprint(e.stdout, write(entries))
	return exitOK
}

// The Go client is the front door's backend: every call an ACP session
// makes is a call card's own clients make.
var _ agentside.Backend = (*client.Client)(nil)
