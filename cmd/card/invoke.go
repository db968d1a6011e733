package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
)

// Exit codes of `card invoke` and `card runs follow` by how the run ended,
// so a script can tell "the agent failed" from "it ran out of time";
// exitInterrupted (75) is a daemon that stopped under the run.
const exitTimedOut = 124 // like timeout(1)

var invokeDoc = doc{
	name:  "invoke",
	usage: "invoke ID [TASK|-] [--cwd DIR] [--mode MODE] [--model M] [--timeout SECONDS] [flags]",
	about: `Runs agent ID (claude-code, codex, gemini, copilot, droid, pi, opencode, qwen-code, or an agent
card.toml declares) on TASK through the daemon, in --cwd. With TASK "-" or no TASK, the task is
read from stdin. The answer streams to stdout as it arrives; status and tool calls go to stderr. On
a terminal, control characters in what the agent wrote (ESC and the sequences it starts: clipboard
writes, clearing the screen, moving the cursor; a bare carriage return, backspace, DEL, the C1
controls) are printed as visible escapes such as \x1b, so a model cannot act on your terminal;
newlines and tabs pass. Piped or redirected, the text is written as the agent gave it. Ctrl-C
cancels the run (a second Ctrl-C stops waiting and leaves it running). The run is recorded: card
runs lists it.

Modes: read_only (the default) may read but not change anything; edit may change files under
--cwd; bypass turns the agent's own protections off and needs allow_bypass = true in
card.toml. An agent whose read_only card cannot enforce is refused in read_only unless you
pass --acknowledge-unenforced-read-only.`,
	more: `Exit codes: 0 succeeded, 1 failed, 2 usage, 3 no daemon, 4 refused before it started (the
guard, bypass not allowed, not installed, too many runs, a bad argument), 75 interrupted (the
daemon stopped, or the connection to it was lost), 124 timed out, 130 cancelled.`,
	examples: []string{
		`card invoke claude-code "explain main.go"`,
		`card invoke codex "fix the failing test" --mode edit --cwd ~/src/project`,
		`git diff | card invoke gemini - --timeout 120  # the task from stdin`,
		`card invoke claude-code "summarize README.md" --json  # the finished run as JSON`,
	},
}

func (e env) invoke(args []string) int {
	fs, home := e.newFlags(invokeDoc)
	cwd := fs.String("cwd", "", "the agent's working `dir` (default: the current directory)")
	mode := fs.String("mode", "", "permission `mode`: read_only, edit or bypass (default read_only)")
	model := fs.String("model", "", "the `model` the agent should use (default: the agent's own)")
	invokedBy := fs.String("invoked-by", "", "your own agent `id`, when the caller is itself an agent (the guard counts it)")
	timeout := fs.Int("timeout", 0, "the run's deadline in `seconds`, 1 to 3600 (default 300)")
	asJSON := fs.Bool("json", false, "print the finished run as JSON instead of streaming text")
	ack := fs.Bool("acknowledge-unenforced-read-only", false, "run an agent whose read_only card cannot enforce anyway")
	pos, code, done := e.parse(invokeDoc, fs, args)
	if done {
		return code
	}
	switch {
	case len(pos) == 0:
		return e.usageError(invokeDoc, "which agent? (card detect lists them)")
	case len(pos) > 2:
		return e.usageError(invokeDoc, fmt.Sprintf("one task, not %d arguments: quote it, \"like this\"", len(pos)-1))
	}
	timeoutSet := false
	fs.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	if timeoutSet && (*timeout < api.MinInvokeTimeoutSecs || *timeout > api.MaxInvokeTimeoutSecs) {
		return e.usageError(invokeDoc, fmt.Sprintf("--timeout %d: the deadline is %d to %d seconds (default %d)",
			*timeout, api.MinInvokeTimeoutSecs, api.MaxInvokeTimeoutSecs, int(api.DefaultInvokeTimeout.Seconds())))
	}
	task := "-"
	if len(pos) == 2 {
		task = pos[1]
	}
	if task == "-" {
		if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			fmt.Fprintln(e.stderr, "card invoke: reading the task from stdin; end it with Ctrl-D (or give it as an argument: card invoke "+pos[0]+" \"…\")")
		}
		b, err := io.ReadAll(io.LimitReader(e.stdin, 8<<20))
		if err != nil {
			return e.fail("invoke", fmt.Errorf("read the task from stdin: %w", err))
		}
		task = string(b)
	}
	var err error
	if *cwd == "" {
		*cwd, err = os.Getwd()
	} else {
		// The daemon runs elsewhere: a relative dir means this shell's.
		*cwd, err = filepath.Abs(*cwd)
	}
	if err != nil {
		return e.fail("invoke", err)
	}
	params := api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: pos[0], Cwd: *cwd, PermissionMode: *mode, Model: *model, InvokedBy: *invokedBy, TimeoutSecs: *timeout, AcknowledgeUnenforcedReadOnly: *ack},
		Task:          task,
	}

	f := newFollower(e, *asJSON, pos[0])
	c, err := dial(*home)
	if err != nil {
		return e.fail("invoke", err)
	}
	defer c.Close()
	acc, err := c.Stream(context.Background(), params, f.push)
	if err != nil {
		return e.fail("invoke", err)
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
	// agentSessionIDs shows the agent's own session id when it reports
	// one; a chat, which has card's id for its conversation, hides it.
	agentSessionIDs bool

	// escapeOut and escapeErr are set when stdout and stderr are
	// terminals: the agent's text is then printed through termSafe.
	escapeOut, escapeErr bool

	events  chan api.AgentEvent
	outMu   sync.Mutex
	midLine bool // stdout's last write did not end a line
	printed bool // some answer text went to stdout
	spun    bool // a spinner line is on stderr
}

func newFollower(e env, asJSON bool, label string) *follower {
	f := &follower{e: e, asJSON: asJSON, label: label, events: make(chan api.AgentEvent, 1024),
		escapeOut: isTerminal(e.stdout), escapeErr: isTerminal(e.stderr), agentSessionIDs: true}
	f.spinner = f.escapeErr
	return f
}

// push runs on the connection's read goroutine: hand off.
func (f *follower) push(ev api.AgentEvent) { f.events <- ev }

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
					f.status("card: cancel failed: %s", say(err))
				}
			}()
		case <-c.Done():
			// The run's last event may have come in with the close.
			for {
				select {
				case ev := <-f.events:
					if code, done := f.render(ev); done {
						return code
					}
					continue
				default:
				}
				break
			}
			f.status("card: the daemon stopped, or the connection to it was lost, before run %s ended; "+
				"once it is back, `card runs show %s` says how the run ended", runID, runID)
			return exitInterrupted
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
	msg := fmt.Sprintf(format, args...)
	if f.escapeErr {
		// Status lines carry the agent's words too: tool inputs, its
		// errors and warnings, the end of its stderr.
		msg = termSafe(msg)
	}
	fmt.Fprintln(f.e.stderr, msg)
}

func (f *follower) render(ev api.AgentEvent) (int, bool) {
	switch ev.Kind {
	case api.EventDone, api.EventRunError:
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
		text := ev.Text
		if f.escapeOut {
			text = termSafe(text)
		}
		fmt.Fprint(f.e.stdout, text)
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
		if ev.MaxAttempts > 0 {
			f.status("card: the agent is retrying (attempt %d of %d): %s", ev.Attempt, ev.MaxAttempts, ev.Error)
		} else {
			f.status("card: the agent is retrying (attempt %d): %s", ev.Attempt, ev.Error)
		}
	case api.EventAgentError:
		f.status("card: the agent reported: %s", ev.Error)
	case "warning":
		f.status("card: note from the agent: %s", ev.Text)
	case "session":
		if ev.SessionID != "" && f.agentSessionIDs {
			f.status("card: %s's own session id: %s", f.label, ev.SessionID)
		}
	}
	return 0, false
}

func (f *follower) finish(ev api.AgentEvent) int {
	res := ev.Result
	if f.asJSON && res != nil {
		f.outMu.Lock()
		f.clearSpinner()
		f.outMu.Unlock()
		printJSON(f.e.stdout, res)
	} else if res != nil && res.Answer != "" && !f.printed {
		// An agent that reports its answer only in the result still shows it.
		answer := res.Answer
		if f.escapeOut {
			answer = termSafe(answer)
		}
		f.outMu.Lock()
		fmt.Fprintln(f.e.stdout, answer)
		f.outMu.Unlock()
	}
	f.status("%s", outcomeLine(ev))
	if res != nil && res.Error != nil && res.Error.StderrExcerpt != "" {
		// A crash's own words are in what it printed last.
		f.status("card: the agent's stderr ended with:\n%s", indent(res.Error.StderrExcerpt, "  "))
	}
	return exitForStatus(ev.Status)
}

// outcomeLine is how a run ended, in one line: its status, how long it took
// (with the unit), what it cost, and why it did not succeed. The error's
// kind is named only when it adds to the status ("failed (auth)"), never
// "cancelled: cancelled".
func outcomeLine(ev api.AgentEvent) string {
	msg := fmt.Sprintf("card: run %s %s", ev.RunID, strings.ReplaceAll(string(ev.Status), "_", " "))
	res := ev.Result
	if res == nil {
		return msg
	}
	msg += fmt.Sprintf(" after %.1fs", float64(res.DurationMs)/1000)
	if res.Error != nil && ev.Status == api.StatusFailed && res.Error.Kind != "" {
		msg += " (" + res.Error.Kind + ")"
	}
	if res.CostUSD != nil {
		msg += fmt.Sprintf(", $%.4f", *res.CostUSD)
	}
	if res.Error != nil && res.Error.Message != "" {
		msg += ": " + res.Error.Message
	}
	return msg
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

func exitForStatus(s api.Status) int {
	switch s {
	case api.StatusSucceeded:
		return exitOK
	case api.StatusCancelled:
		return exitCancelled
	case api.StatusTimedOut:
		return exitTimedOut
	case api.StatusInterrupted:
		return exitInterrupted
	case api.StatusRefused:
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
