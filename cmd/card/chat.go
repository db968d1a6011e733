package main

import (
	"bufio"
	"context"
	"fmt"
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
	usage: "chat ID [--cwd DIR] [--mode MODE] [--model M] [--warm] [--worktree] [flags]",
	about: `Holds a conversation with agent ID through the daemon: each line you type is one turn of one
session, and each turn continues the same conversation (the agent remembers the turns before it).
The answer streams to stdout; status and tool calls go to stderr. A line typed while the agent
is still answering is queued and runs next. In --mode ask the agent's questions are asked here:
answer y (allow), a (allow this tool for the rest of the session) or n (deny). Ctrl-C cancels the
running turn (a second Ctrl-C, or one while no turn runs, ends the chat); end of input (Ctrl-D)
waits for the turns still to come and closes the session. The session and its turns are recorded:
card runs lists the turns. With --worktree the agent works in a git worktree of the cwd's
repository, never in your checkout; each turn that changes something is a commit, reviewed after
(or during) the chat with card diff, card apply, card rewind and card discard. An agent whose
sign-in check says it is signed out is refused before the session starts (as card health ID would
say); --skip-health-check starts it anyway.`,
	examples: []string{
		`card chat claude-code --cwd ~/src/project`,
		`card chat codex --mode edit --cwd ~/src/project`,
		`card chat claude-code --mode edit --worktree  # review with card diff, then card apply`,
		`printf 'remember 7\nwhat number?\n' | card chat gemini`,
	},
}

// chatQuestion is one agents.approve question waiting for a y/n line.
type chatQuestion struct {
	q     api.ApproveParams
	reply chan api.ApproveAnswer
}

// chatSession is one card chat: its session, the turns in flight and the
// questions waiting for a line.
type chatSession struct {
	c         *client.Client
	s         api.Session
	f         *follower
	questions chan chatQuestion
	events    chan api.SessionEvent

	pending    []chatQuestion // questions waiting for a y/n line
	turns      int            // turns sent and not yet ended
	cancelling bool           // a Ctrl-C is cancelling the running turn
	exitCode   int
}

func (e env) chat(args []string) int {
	fs, home := e.newFlags(chatDoc)
	cwd := fs.String("cwd", "", "the agent's working `dir` (default: the current directory)")
	mode := fs.String("mode", "", "permission `mode`: read_only, edit, ask or bypass (default read_only)")
	model := fs.String("model", "", "the `model` the agent should use (default: the agent's own)")
	warm := fs.Bool("warm", false, "start the agent's process now, where the adapter keeps one across turns")
	worktree := fs.Bool("worktree", false, "run the agent in a git worktree of the cwd's repository, not in your checkout")
	skipHealth := fs.Bool("skip-health-check", false, "start the session even when the agent's sign-in check says it is signed out")
	pos, code, done := e.parse(chatDoc, fs, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return e.usageError(chatDoc, "which agent? one id (card detect lists them); the prompts come from stdin")
	}
	dir, err := absOrWorkingDir(*cwd)
	if err != nil {
		return e.fail("chat", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := &chatSession{questions: make(chan chatQuestion), events: make(chan api.SessionEvent, 1024), exitCode: exitOK}
	if ch.c, err = client.Dial(ctx, client.Options{Home: *home, OnApprove: ch.ask}); err != nil {
		return e.fail("chat", err)
	}
	defer ch.c.Close()
	if !*skipHealth {
		if err := signedIn(ctx, ch.c, pos[0]); err != nil {
			fmt.Fprintf(e.stderr, "card chat: %s\n", err)
			return exitRefused
		}
	}
	sp := api.SessionStartParams{AgentSettings: api.AgentSettings{ID: pos[0], Cwd: dir, PermissionMode: *mode, Model: *model}, Warm: *warm}
	if *worktree {
		sp.Isolation = api.IsolationWorktree
	}
	ch.s, err = ch.c.StartSession(ctx, sp)
	if err != nil {
		return e.fail("chat", err)
	}
	if _, err := ch.c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: ch.s.SessionID}, func(ev api.SessionEvent) { ch.events <- ev }); err != nil {
		return e.fail("chat", err)
	}
	ch.f = newFollower(e, false, pos[0])
	ch.f.spinner = false
	// The agent's own conversation id is card's business: the session id
	// printed here is the one card runs and the API know the chat by.
	ch.f.agentSessionIDs = false
	ch.f.status("card: session %s with %s in %s (%s); type a prompt per line, Ctrl-D to end", ch.s.SessionID, ch.s.Adapter, ch.s.Cwd, ch.s.PermissionMode)
	if wt := ch.s.Worktree; wt != nil {
		chatWorktree(ch.f, ch.s.SessionID, wt)
	}
	return ch.loop(ctx, readLines(ctx, e))
}

// loop runs the chat until end of input with no turn left, a second Ctrl-C
// or a lost daemon.
func (ch *chatSession) loop(ctx context.Context, lines <-chan string) int {
	sigs := make(chan os.Signal, 2)
	signalNotify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ended := false
	for {
		if ended && ch.turns == 0 {
			return ch.close()
		}
		select {
		case line, ok := <-lines:
			if !ok {
				ended, lines = true, nil
				continue
			}
			ch.line(ctx, line)
		case q := <-ch.questions:
			ch.pending = append(ch.pending, q)
			ch.f.status("? %s wants to %s — allow? [y]es, [a]lways for this session, [n]o", q.q.Adapter, q.q.Summary)
		case ev := <-ch.events:
			ch.event(ev)
		case <-sigs:
			if ch.turns == 0 || ch.cancelling {
				return ch.close()
			}
			ch.cancelTurn()
		case <-ch.c.Done():
			ch.f.status("card: the daemon stopped, or the connection to it was lost; session %s is kept: its turns are in card runs", ch.s.SessionID)
			return exitInterrupted
		}
	}
}

// line is one line typed: the answer to the oldest question waiting, or
// the next prompt.
func (ch *chatSession) line(ctx context.Context, line string) {
	if len(ch.pending) > 0 {
		q := ch.pending[0]
		ch.pending = ch.pending[1:]
		q.reply <- chatAnswer(line)
		return
	}
	if strings.TrimSpace(line) == "" {
		return
	}
	res, err := ch.c.PromptSession(ctx, api.SessionPromptParams{SessionID: ch.s.SessionID, Task: line})
	if err != nil {
		ch.f.status("card: %s", say(err))
		return
	}
	ch.turns++
	if res.Queued {
		ch.f.status("card: queued as turn %d (position %d)", res.Turn, res.Position)
	}
}

// event shows one event of the session; a turn's last one counts it done.
func (ch *chatSession) event(ev api.SessionEvent) {
	if ev.Event.Kind == api.EventChanges && ev.Event.Changes != nil {
		chatChanges(ch.f, *ev.Event.Changes)
		return
	}
	if !client.Terminal(ev.Event) {
		ch.f.render(ev.Event)
		return
	}
	if code := ch.f.finish(ev.Event); code != exitOK {
		ch.exitCode = code
	}
	ch.f.printed, ch.f.midLine, ch.cancelling = false, false, false
	if ch.turns > 0 {
		ch.turns--
	}
}

// cancelTurn cancels the running turn without holding up the loop, which
// must go on showing the turn's last events.
func (ch *chatSession) cancelTurn() {
	ch.cancelling = true
	ch.f.status("card: cancelling the running turn (Ctrl-C again ends the chat)")
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if _, err := ch.c.CancelTurn(cctx, api.SessionCancelParams{SessionID: ch.s.SessionID}); err != nil {
			ch.f.status("card: cancel failed: %s", say(err))
		}
	}()
}

func (ch *chatSession) close() int {
	cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer ccancel()
	if _, err := ch.c.CloseSession(cctx, ch.s.SessionID); err != nil {
		ch.f.status("card: could not close session %s: %s", ch.s.SessionID, say(err))
		return exitFailure
	}
	ch.f.status("card: session %s closed", ch.s.SessionID)
	if ch.s.Worktree != nil {
		ch.f.status("card: its worktree stays: card diff %[1]s to review it, card apply %[1]s to bring it in, card discard %[1]s to drop it", ch.s.SessionID)
	}
	return ch.exitCode
}

// ask runs on the connection's goroutine for each question of an ask-mode
// turn: it waits for the chat loop to take a line as the answer.
func (ch *chatSession) ask(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
	cq := chatQuestion{q: q, reply: make(chan api.ApproveAnswer, 1)}
	select {
	case ch.questions <- cq:
	case <-ctx.Done():
		return api.ApproveAnswer{}, ctx.Err()
	}
	select {
	case a := <-cq.reply:
		return a, nil
	case <-ctx.Done():
		return api.ApproveAnswer{}, ctx.Err()
	}
}

// readLines delivers stdin's lines until end of input, when it closes the
// channel.
func readLines(ctx context.Context, e env) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(e.stdin)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return lines
}

// signedIn refuses an agent whose sign-in check says it cannot run a turn,
// so a chat does not start only for its first prompt to fail with the same
// news. A cached verdict that says no is checked again, since the person
// may have just signed in; a check that could not decide lets the chat
// start.
func signedIn(ctx context.Context, c *client.Client, id string) error {
	h, err := c.Health(ctx, id, false)
	if err != nil || !signedOut(h.Status) {
		return nil
	}
	if h, err = c.Health(ctx, id, true); err != nil || !signedOut(h.Status) {
		return nil
	}
	return fmt.Errorf("%s is not ready (%s): %s\n(card health %s --force checks again; --skip-health-check starts the chat anyway)", id, h.Status, h.Reason, id)
}

// signedOut says whether a health status means a turn would fail before
// reaching the model. A network error or an unknown answer may be
// passing, so they do not stop a chat.
func signedOut(status api.HealthStatus) bool {
	switch status {
	case api.StatusNotConfigured, api.StatusExpired, api.StatusNotExecutable:
		return true
	}
	return false
}

// absOrWorkingDir is dir made absolute, or the working directory when dir
// is empty.
func absOrWorkingDir(dir string) (string, error) {
	if dir == "" {
		return os.Getwd()
	}
	return filepath.Abs(dir)
}

// chatWorktree says where an isolated chat's agent works.
func chatWorktree(f *follower, id string, wt *api.SessionWorktree) {
	f.status("card: the agent works in %s (branch %s), not in your checkout; card diff %s shows its changes", wt.Dir, wt.Branch, id)
	if wt.Uncommitted.Any {
		f.status("card: your checkout has uncommitted changes (%d tracked, %d untracked files); the worktree starts from %s without them",
			wt.Uncommitted.Tracked, wt.Uncommitted.Untracked, wt.BaseRef)
	}
}

// chatChanges says what a turn of an isolated chat changed.
func chatChanges(f *follower, ch api.TurnChanges) {
	switch {
	case ch.Error != "":
		f.status("card: turn %d's changes could not be committed: %s", ch.Turn, ch.Error)
	case len(ch.Files) == 0:
		f.status("card: turn %d changed no file", ch.Turn)
	default:
		names := make([]string, 0, len(ch.Files))
		for _, file := range ch.Files {
			names = append(names, file.Path)
		}
		f.status("card: turn %d changed %d files (+%d -%d): %s", ch.Turn, len(ch.Files), ch.Added, ch.Deleted, clipText(strings.Join(names, ", "), 200))
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
