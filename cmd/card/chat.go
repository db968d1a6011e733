package main

import (
	"bufio"
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
)

var chatDoc = doc{
	name:  "chat",
	usage: "chat ID [--cwd DIR] [--mode MODE] [--model M] [--warm] [flags]",
	about: `Holds a conversation with agent ID through the daemon: each line you type is one turn of one
session, and each turn continues the same conversation (the agent remembers the turns before it).
The answer streams to stdout; status and tool calls go to stderr. A line typed while the agent
is still answering is queued and runs next. In --mode ask the agent's questions are asked here:
answer y (allow), a (allow this tool for the rest of the session) or n (deny). Ctrl-C cancels the
running turn (a second Ctrl-C, or one while no turn runs, ends the chat); end of input (Ctrl-D)
waits for the turns still to come and closes the session. The session and its turns are recorded:
card runs lists the turns.`,
	examples: []string{
		`card chat claude-code --cwd ~/src/project`,
		`card chat codex --mode edit --cwd ~/src/project`,
		`printf 'remember 7\nwhat number?\n' | card chat gemini`,
	},
}

// chatQuestion is one agents.approve question waiting for a y/n line.
type chatQuestion struct {
	q     api.ApproveParams
	reply chan api.ApproveAnswer
}

func (e env) chat(args []string) int {
	fs, home := e.newFlags(chatDoc)
	cwd := fs.String("cwd", "", "the agent's working `dir` (default: the current directory)")
	mode := fs.String("mode", "", "permission `mode`: read_only, edit, ask or bypass (default read_only)")
	model := fs.String("model", "", "the `model` the agent should use (default: the agent's own)")
	warm := fs.Bool("warm", false, "start the agent's process now, where the adapter keeps one across turns")
	pos, code, done := e.parse(chatDoc, fs, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return e.usageError(chatDoc, "which agent? one id (card detect lists them); the prompts come from stdin")
	}
	var err error
	if *cwd == "" {
		*cwd, err = os.Getwd()
	} else {
		*cwd, err = filepath.Abs(*cwd)
	}
	if err != nil {
		return e.fail("chat", err)
	}
	questions := make(chan chatQuestion)
	events := make(chan api.SessionEvent, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Home: *home, OnApprove: func(qctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
		cq := chatQuestion{q: q, reply: make(chan api.ApproveAnswer, 1)}
		select {
		case questions <- cq:
		case <-qctx.Done():
			return api.ApproveAnswer{}, qctx.Err()
		}
		select {
		case a := <-cq.reply:
			return a, nil
		case <-qctx.Done():
			return api.ApproveAnswer{}, qctx.Err()
		}
	}})
	if err != nil {
		return e.fail("chat", err)
	}
	defer c.Close()
	s, err := c.StartSession(ctx, api.SessionStartParams{ID: pos[0], Cwd: *cwd, PermissionMode: *mode, Model: *model, Warm: *warm})
	if err != nil {
		return e.fail("chat", err)
	}
	if _, err := c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, func(ev api.SessionEvent) { events <- ev }); err != nil {
		return e.fail("chat", err)
	}
	f := newFollower(e, false, pos[0])
	f.spinner = false
	f.status("card: session %s with %s in %s (%s); type a prompt per line, Ctrl-D to end", s.SessionID, s.Adapter, s.Cwd, s.PermissionMode)

	lines := make(chan string)
	eof := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(e.stdin)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		close(eof)
	}()
	sigs := make(chan os.Signal, 2)
	signalNotify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var (
		pending    []chatQuestion // questions waiting for a y/n line
		turns      int            // turns sent and not yet ended
		ended      bool           // end of input
		cancelling bool           // a Ctrl-C is cancelling the running turn
		exitCode   = exitOK
	)
	closeSession := func() int {
		cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer ccancel()
		if _, err := c.CloseSession(cctx, s.SessionID); err != nil {
			f.status("card: could not close session %s: %s", s.SessionID, say(err))
			return exitFailure
		}
		f.status("card: session %s closed", s.SessionID)
		return exitCode
	}
	for {
		if ended && turns == 0 {
			return closeSession()
		}
		select {
		case line := <-lines:
			if len(pending) > 0 {
				q := pending[0]
				pending = pending[1:]
				q.reply <- chatAnswer(line)
				continue
			}
			if strings.TrimSpace(line) == "" {
				continue
			}
			res, err := c.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: line})
			if err != nil {
				f.status("card: %s", say(err))
				continue
			}
			turns++
			if res.Queued {
				f.status("card: queued as turn %d (position %d)", res.Turn, res.Position)
			}
		case <-eof:
			ended, eof = true, nil
		case q := <-questions:
			pending = append(pending, q)
			f.status("? %s wants to %s — allow? [y]es, [a]lways for this session, [n]o", q.q.Adapter, q.q.Summary)
		case ev := <-events:
			if !client.Terminal(ev.Event) {
				f.render(ev.Event)
				continue
			}
			if code := f.finish(ev.Event); code != exitOK {
				exitCode = code
			}
			f.printed, f.midLine, cancelling = false, false, false
			if turns > 0 {
				turns--
			}
		case <-sigs:
			if turns == 0 || cancelling {
				return closeSession()
			}
			cancelling = true
			f.status("card: cancelling the running turn (Ctrl-C again ends the chat)")
			go func() {
				cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer ccancel()
				if _, err := c.CancelTurn(cctx, api.SessionCancelParams{SessionID: s.SessionID}); err != nil {
					f.status("card: cancel failed: %s", say(err))
				}
			}()
		case <-c.Done():
			f.status("card: the daemon stopped, or the connection to it was lost; session %s is kept: its turns are in card runs", s.SessionID)
			return exitInterrupted
		}
	}
}

// chatAnswer reads a y/a/n line as a decision; anything else denies.
func chatAnswer(line string) api.ApproveAnswer {
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return api.ApproveAnswer{Decision: api.DecisionAllow}
	case "a", "always":
		return api.ApproveAnswer{Decision: api.DecisionAllowAlways}
	}
	return api.ApproveAnswer{Decision: api.DecisionDeny, Message: "The user denied this tool call."}
}
