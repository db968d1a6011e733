package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
)

// Exit codes of `card invoke` and `card runs follow`, by how the run ended,
// so a script can tell "the agent failed" from "it ran out of time".
const (
	exitTimedOut    = 124 // like timeout(1)
	exitInterrupted = 75  // EX_TEMPFAIL: the daemon stopped; retrying may work
)

const invokeUsage = `usage: card invoke ID [TASK|-] [--cwd DIR] [--mode read_only|edit|bypass] [--model M]
                   [--invoked-by X] [--timeout S] [--json] [--home DIR]

Runs agent ID (claude-code, codex, gemini, ...) on TASK through the daemon. TASK "-" or no
TASK reads it from stdin. The answer streams to stdout as it arrives; status and tool calls
go to stderr. Ctrl-C cancels the run (a second Ctrl-C stops waiting).

Exit codes: 0 succeeded, 1 failed, 2 usage, 3 no daemon, 4 refused before it started
(guard, bypass, not installed, too many runs, bad params), 75 interrupted (the daemon
stopped), 124 timed out, 130 cancelled.
`

// permute parses flags wherever they appear among the positional args, as
// people type them: `card invoke codex "task" --mode edit`.
func permute(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func (e env) invoke(args []string) int {
	fs, home := e.flags("invoke")
	fs.Usage = func() { fmt.Fprint(e.stderr, invokeUsage) }
	cwd := fs.String("cwd", "", "working directory for the agent (default: the current directory)")
	mode := fs.String("mode", "", "permission mode: read_only (default), edit or bypass")
	model := fs.String("model", "", "model name to pass to the agent")
	invokedBy := fs.String("invoked-by", "", "your own adapter id, when you are an agent yourself")
	timeout := fs.Int("timeout", 0, "deadline in seconds (default 300, at most 3600)")
	asJSON := fs.Bool("json", false, "print the finished run as JSON instead of streaming text")
	ack := fs.Bool("acknowledge-unenforced-read-only", false, "run an agent whose read_only is not enforced anyway")
	pos, err := permute(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) < 1 || len(pos) > 2 {
		fmt.Fprint(e.stderr, invokeUsage)
		return exitUsage
	}
	task := "-"
	if len(pos) == 2 {
		task = pos[1]
	}
	if task == "-" {
		b, err := io.ReadAll(io.LimitReader(e.stdin, 8<<20))
		if err != nil {
			return e.fail("invoke", fmt.Errorf("read the task from stdin: %w", err))
		}
		task = string(b)
	}
	if *cwd == "" {
		if *cwd, err = os.Getwd(); err != nil {
			return e.fail("invoke", err)
		}
	}
	params := daemon.InvokeParams{ID: pos[0], Task: task, Cwd: *cwd, PermissionMode: *mode, Model: *model,
		InvokedBy: *invokedBy, TimeoutSecs: *timeout, AcknowledgeUnenforcedReadOnly: *ack}

	f := newFollower(e, *asJSON, pos[0])
	c, err := dial(*home)
	if err != nil {
		return e.fail("invoke", err)
	}
	defer c.Close()
	acc, err := c.Stream(context.Background(), params, f.push)
	if err != nil {
		code := e.fail("invoke", err)
		var re *rpc.Error
		if errors.As(err, &re) && re.Code == daemon.CodeUnenforcedReadOnly {
			fmt.Fprintln(e.stderr, "card invoke: to run it anyway, add --acknowledge-unenforced-read-only")
		}
		return code
	}
	return f.follow(c, acc.RunID, true)
}

// signalNotify is signal.Notify; tests replace it to deliver a Ctrl-C
// without signalling the test process.
var signalNotify = signal.Notify

// follower renders one run's agents.event stream.
type follower struct {
	e       env
	asJSON  bool
	label   string
	spinner bool

	events  chan daemon.AgentEvent
	outMu   sync.Mutex
	midLine bool // stdout's last write did not end a line
	printed bool // some answer text went to stdout
	spun    bool // a spinner line is on stderr
}

func newFollower(e env, asJSON bool, label string) *follower {
	f := &follower{e: e, asJSON: asJSON, label: label, events: make(chan daemon.AgentEvent, 1024)}
	if fd, ok := e.stderr.(*os.File); ok && term.IsTerminal(int(fd.Fd())) {
		f.spinner = true
	}
	return f
}

// push runs on the connection's read goroutine: hand off.
func (f *follower) push(ev daemon.AgentEvent) { f.events <- ev }

// follow prints events of runID until its terminal event and returns the
// exit code for how it ended. cancellable makes Ctrl-C cancel the run.
func (f *follower) follow(c *client.Client, runID string, cancellable bool) int {
	sigs := make(chan os.Signal, 2)
	signalNotify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
	frame, interrupts := 0, 0
	// The cancel call runs beside the event loop; it is waited for before
	// returning so it never writes after the command has finished.
	var cancelling sync.WaitGroup
	defer cancelling.Wait()
	for {
		select {
		case ev := <-f.events:
			if code, done := f.render(ev); done {
				return code
			}
		case <-sigs:
			interrupts++
			if interrupts > 1 || !cancellable {
				f.status("card: stopped waiting; the run goes on (card runs follow %s)", runID)
				return exitCancelled
			}
			f.status("card: cancelling run %s (Ctrl-C again to stop waiting)", runID)
			cancelling.Add(1)
			go func() {
				defer cancelling.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := c.Cancel(ctx, runID); err != nil {
					f.status("card: cancel failed: %v", err)
				}
			}()
		case <-c.Done():
			f.status("card: lost the connection to the daemon; the run may go on: card runs follow %s", runID)
			return exitFailure
		case <-tick.C:
			if f.spinner {
				f.outMu.Lock()
				fmt.Fprintf(f.e.stderr, "\r\033[K%c %s %.1fs", frames[frame%len(frames)], f.label, time.Since(start).Seconds())
				f.spun = true
				f.outMu.Unlock()
				frame++
			}
		}
	}
}

// clearSpinner must be called with outMu held.
func (f *follower) clearSpinner() {
	if f.spun {
		fmt.Fprint(f.e.stderr, "\r\033[K")
		f.spun = false
	}
}

func (f *follower) status(format string, args ...any) {
	f.outMu.Lock()
	defer f.outMu.Unlock()
	f.clearSpinner()
	if f.midLine {
		fmt.Fprintln(f.e.stdout)
		f.midLine = false
	}
	fmt.Fprintf(f.e.stderr, format+"\n", args...)
}

func (f *follower) render(ev daemon.AgentEvent) (int, bool) {
	switch ev.Kind {
	case daemon.EventDone, daemon.EventRunError:
		return f.finish(ev), true
	case "text":
		if f.asJSON || ev.Text == "" {
			return 0, false
		}
		f.outMu.Lock()
		f.clearSpinner()
		if !ev.Delta && f.midLine {
			fmt.Fprintln(f.e.stdout)
		}
		fmt.Fprint(f.e.stdout, ev.Text)
		f.printed = true
		f.midLine = !strings.HasSuffix(ev.Text, "\n")
		if !ev.Delta && f.midLine {
			fmt.Fprintln(f.e.stdout)
			f.midLine = false
		}
		f.outMu.Unlock()
	case "tool_use":
		if ev.Tool != nil {
			f.status("→ %s %s", ev.Tool.Name, clipText(string(ev.Tool.Input), 120))
		}
	case "retry":
		f.status("card: the agent is retrying (attempt %d): %s", ev.Attempt, ev.Error)
	case daemon.EventAgentError:
		f.status("card: the agent reported: %s", ev.Error)
	case "warning":
		f.status("card: note from the agent: %s", ev.Text)
	case "session":
		if ev.SessionID != "" {
			f.status("card: session %s", ev.SessionID)
		}
	}
	return 0, false
}

func (f *follower) finish(ev daemon.AgentEvent) int {
	res := ev.Result
	if f.asJSON && res != nil {
		f.outMu.Lock()
		f.clearSpinner()
		f.outMu.Unlock()
		printJSON(f.e.stdout, res)
	} else if res != nil && res.Answer != "" && !f.printed {
		// An agent that reports its answer only in the result still shows it.
		f.outMu.Lock()
		fmt.Fprintln(f.e.stdout, res.Answer)
		f.outMu.Unlock()
	}
	msg := fmt.Sprintf("card: run %s %s", ev.RunID, ev.Status)
	if res != nil {
		msg += fmt.Sprintf(" in %.1fs", float64(res.DurationMs)/1000)
		if res.CostUSD != nil {
			msg += fmt.Sprintf(", $%.4f", *res.CostUSD)
		}
		if res.Error != nil {
			msg += ": " + res.Error.Kind + ": " + res.Error.Message
		}
	}
	f.status("%s", msg)
	return exitForStatus(ev.Status)
}

func exitForStatus(s store.Status) int {
	switch s {
	case store.StatusSucceeded:
		return exitOK
	case store.StatusCancelled:
		return exitCancelled
	case store.StatusTimedOut:
		return exitTimedOut
	case store.StatusInterrupted:
		return exitInterrupted
	case store.StatusRefused:
		return exitRefused
	}
	return exitFailure
}

func clipText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
