package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/internal/fakeagent"
)

// fakeAgentCommand is the hidden subcommand the fake agents run as: card's
// own binary speaking ACP on stdio. It is not in `card help`: a person
// never types it, `card serve --fake-agents` declares it.
const fakeAgentCommand = "fake-agent"

var fakeAgentDoc = doc{
	name:  fakeAgentCommand,
	usage: fakeAgentCommand + " [--name NAME] [--no-sign-in] [--version]",
	about: `Speaks the Agent Client Protocol on stdin and stdout as an agent that needs no account, model
or network; markers in a prompt choose what its turn does (docs/testing-your-app.md).
` + "`card serve --fake-agents`" + ` runs it; sessions are kept under $` + fakeagent.StateEnv + ` when it is set.`,
}

func (e env) fakeAgent(args []string) int {
	fs := flag.NewFlagSet("card "+fakeAgentCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	name := fs.String("name", "card-fake-agent", "the agent's `name` in initialize")
	noSignIn := fs.Bool("no-sign-in", false, "offer no sign-in method in initialize")
	version := fs.Bool("version", false, "print the version and exit")
	pos, code, done := e.parse(fakeAgentDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(fakeAgentDoc, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	if *version {
		fmt.Fprintf(e.stdout, "card-fake-agent %s\n", daemon.Version)
		return exitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := fakeagent.Serve(ctx, e.stdin, e.stdout, fakeagent.Options{Name: *name, Version: daemon.Version,
		StateDir: os.Getenv(fakeagent.StateEnv), NoSignIn: *noSignIn})
	if err != nil {
		fmt.Fprintf(e.stderr, "card %s: %v\n", fakeAgentCommand, err)
		return exitFailure
	}
	return exitOK
}

// fakeAgentDecl is one agent `card serve --fake-agents` declares: the
// fields of a card.toml [agents.<id>] table, so that the daemon runs it
// through the generic ACP adapter exactly as an operator's declared agent.
type fakeAgentDecl struct {
	ID, Name    string
	Command     []string
	VersionArgs []string
	Env         map[string]string
}

// fakeAgentIDs are the ids the fake agents take. Two, so that an app that
// lets its user pick an agent has a choice; neither is a built-in id, and
// a declared agent may not shadow one.
var fakeAgentIDs = []struct{ id, name string }{
	{"fake", "Fake Agent"},
	{"fake-2", "Fake Agent 2"},
}

// fakeAgentDecls are the fake agents for a daemon whose binary is exe and
// home is home: card itself, `fake-agent`, keeping its sessions under
// the home so that they outlive a warm agent and a restart of the daemon.
// They offer no sign-in, as they need none: card's health check of an
// ACP agent reads offered sign-in methods as "cannot tell", and the fake
// agents are ready.
func fakeAgentDecls(exe, home string) []fakeAgentDecl {
	state := filepath.Join(home, "fake-agents")
	out := make([]fakeAgentDecl, 0, len(fakeAgentIDs))
	for _, f := range fakeAgentIDs {
		out = append(out, fakeAgentDecl{
			ID: f.id, Name: f.name,
			Command:     []string{exe, fakeAgentCommand, "--name", f.name, "--no-sign-in"},
			VersionArgs: []string{fakeAgentCommand, "--version"},
			Env:         map[string]string{fakeagent.StateEnv: state},
		})
	}
	return out
}

// fakeAgentPins are the variables that pin each fake agent's binary to
// exe, added to the daemon's environment, so that detection finds card
// where it is even when that is a directory it skips on a search path (a
// temp dir). The name is the one card gives a declared agent's pin.
func fakeAgentPins(exe string, decls []fakeAgentDecl) []string {
	out := make([]string, 0, len(decls))
	for _, d := range decls {
		out = append(out, agent.PinEnvOf(d.ID)+"="+exe)
	}
	return out
}

// declareFakeAgents adds decls to what the daemon declares, on top of
// card.toml's own agents and hiding none of the built-in ones. It is the
// one place the fake agents meet the daemon's config.
func declareFakeAgents(opts *daemon.Options, exe string, decls []fakeAgentDecl) error {
	if opts.Agents == nil {
		opts.Agents = map[string]daemon.AgentDeclConfig{}
	}
	for _, d := range decls {
		opts.Agents[d.ID] = daemon.AgentDeclConfig{Name: d.Name, Command: d.Command, VersionArgs: d.VersionArgs, Env: d.Env}
	}
	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	opts.Environ = append(environ, fakeAgentPins(exe, decls)...)
	return nil
}
