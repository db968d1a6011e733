package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/daemon/worktree"
	"github.com/card-dev/card/spawn"
)

// isolation is an isolated session's worktree as the store keeps it with
// the session: where it is (git holds the turns), what the user's checkout
// held when it was made, and when it was thrown away.
type isolation struct {
	Worktree    worktree.Worktree `json:"worktree"`
	Uncommitted api.Uncommitted   `json:"uncommitted"`
	DiscardedAt *time.Time        `json:"discarded_at,omitempty"`
}

// readIsolation is the record of a stored session; nil for one that runs
// in its cwd, or whose record cannot be read (logged: its worktree is then
// out of card's reach, and the sweeper leaves it to age).
func (m *Manager) readIsolation(row store.Session) *isolation {
	if len(row.Worktree) == 0 {
		return nil
	}
	var iso isolation
	if err := json.Unmarshal(row.Worktree, &iso); err != nil {
		m.log.Error("a session's worktree record could not be read", zap.String("session_id", row.ID), zap.Error(err))
		return nil
	}
	return &iso
}

func (iso *isolation) raw() json.RawMessage {
	b, _ := json.Marshal(iso)
	return b
}

func (iso *isolation) view() *api.SessionWorktree {
	if iso == nil {
		return nil
	}
	wt := iso.Worktree
	return &api.SessionWorktree{Path: wt.Path, Dir: wt.Dir(), Branch: wt.Branch, Base: wt.Base, BaseRef: wt.BaseRef, Repo: wt.Repo,
		Uncommitted: iso.Uncommitted, DiscardedAt: iso.DiscardedAt}
}

// isolated is what the planner needs of the session's worktree: where its
// turns run, and the tree they may write.
func (iso *isolation) isolated() plan.Isolated {
	if iso == nil {
		return plan.Isolated{}
	}
	return plan.Isolated{Top: iso.Worktree.Path, Dir: iso.Worktree.Dir()}
}

// cont is c for s's turn: in its worktree when it has one.
func (s *session) cont(c plan.Continue) plan.Continue {
	c.Isolated = s.iso.isolated()
	return c
}

// isolate makes the worktree of a session starting (id not yet recorded)
// in cwd, from base.
func (m *Manager) isolate(ctx context.Context, id, cwd, base string) (*isolation, error) {
	if m.deps.Worktrees == nil {
		why := m.deps.NoWorktrees
		if why == "" {
			why = "card has no git to make worktrees with"
		}
		return nil, api.InvalidField("isolation", "%s, so no session can be isolated", why)
	}
	created, err := m.deps.Worktrees.Create(ctx, worktree.CreateRequest{SessionID: id, Cwd: cwd, Base: base})
	if err != nil {
		return nil, err
	}
	u := created.Uncommitted
	iso := &isolation{Worktree: created.Worktree, Uncommitted: api.Uncommitted{Any: u.Any(), Tracked: u.Tracked, Untracked: u.Untracked,
		Paths: append([]string{}, u.Paths...)}}
	m.log.Info("made a session's worktree", zap.String("session_id", id), zap.String("repo", iso.Worktree.Repo),
		zap.String("worktree", iso.Worktree.Path), zap.String("base", iso.Worktree.Base), zap.Bool("checkout_had_changes", u.Any()))
	return iso, nil
}

// dropWorktree throws away the worktree of a session that did not start.
func (m *Manager) dropWorktree(iso *isolation) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.deps.Worktrees.Discard(ctx, iso.Worktree); err != nil {
		m.log.Warn("could not remove the worktree of a session that did not start", zap.String("session_id", iso.Worktree.SessionID), zap.Error(err))
	}
}

// commitTimeout bounds the commit of a turn's changes, which its terminal
// event waits for.
const commitTimeout = 2 * time.Minute

// commitTurn records what turn changed in the worktree as its commit.
func (m *Manager) commitTurn(ctx context.Context, wt worktree.Worktree, turn int, prompt string) api.TurnChanges {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if !m.cfg.PromptsInCommits {
		prompt = ""
	}
	c, err := m.deps.Worktrees.Commit(ctx, wt, turn, prompt)
	if err != nil {
		m.log.Error("could not commit a turn's changes", zap.String("session_id", wt.SessionID), zap.Int("turn", turn), zap.Error(err))
		return api.TurnChanges{Turn: turn, Files: []api.FileChange{}, Error: err.Error()}
	}
	return turnChanges(turn, c.Commit, c.Changes)
}

func turnChanges(turn int, commit string, c worktree.Changes) api.TurnChanges {
	return api.TurnChanges{Turn: turn, Commit: commit, Files: fileChanges(c.Files), Added: c.Added, Deleted: c.Deleted}
}

func fileChanges(fs []worktree.FileChange) []api.FileChange {
	out := make([]api.FileChange, 0, len(fs))
	for _, f := range fs {
		out = append(out, api.FileChange{Path: f.Path, Status: f.Status, Added: f.Added, Deleted: f.Deleted, Binary: f.Binary})
	}
	return out
}

func worktreeTurns(ts []worktree.Turn) []api.WorktreeTurn {
	out := make([]api.WorktreeTurn, 0, len(ts))
	for _, t := range ts {
		out = append(out, api.WorktreeTurn{Turn: t.Number, Commit: t.Commit, Time: t.Time})
	}
	return out
}

// execFunc runs a turn's agent (runs.Request.Exec).
type execFunc = func(context.Context, spawn.RunSpec) (api.Result, error)

// committing wraps a turn's exec: once the agent is done, and before the
// run's terminal event, what the turn changed becomes its commit and a
// changes event on the turn's stream. The event goes on the run's stream
// when it has room; past max_events_per_run it follows the terminal event,
// as a session event of s (nil for a run with no session in memory, whose
// event is then only logged).
func (m *Manager) committing(s *session, wt worktree.Worktree, turn int, prompt string, inner execFunc) execFunc {
	if inner == nil {
		inner = spawn.Run
	}
	return func(ctx context.Context, spec spawn.RunSpec) (api.Result, error) {
		res, err := inner(ctx, spec)
		changes := m.commitTurn(ctx, wt, turn, prompt)
		ev := api.AgentEvent{Changes: &changes}
		runID := ""
		for _, kv := range spec.BaseEnv {
			if v, ok := cutEnv(kv, "CARD_RUN_ID"); ok {
				runID = v
			}
		}
		if !m.deps.Runs.Note(runID, api.EventChanges, ev) && s != nil {
			s.mu.Lock()
			s.pending = append(s.pending, pendingNote{kind: api.EventChanges, ev: ev})
			s.mu.Unlock()
		}
		return res, err
	}
}

// worktreeGoneLocked says why an isolated session's turn cannot run: its
// worktree is discarded, or gone from the disk.
func (s *session) worktreeGoneLocked() error {
	if s.iso == nil {
		return nil
	}
	if s.iso.DiscardedAt != nil {
		return &WorktreeGoneError{SessionID: s.row.ID, Reason: "it was discarded"}
	}
	if _, err := os.Stat(s.iso.Worktree.Dir()); err != nil {
		return &WorktreeGoneError{SessionID: s.row.ID, Reason: fmt.Sprintf("%s is gone from the disk", s.iso.Worktree.Dir())}
	}
	return nil
}

// recoverCutTurnLocked commits what the last turn had changed when a dead
// daemon cut it short, before its changes were committed (a daemon that
// stops in order commits them as the turn ends), and puts its changes
// event after the end that turn was given: a restart loses none of the
// turn's work.
func (m *Manager) recoverCutTurnLocked(ctx context.Context, s *session, cut api.Run) {
	if s.iso == nil || s.iso.DiscardedAt != nil || cut.SessionTurn == 0 {
		return
	}
	if done, err := m.st.HasEvent(ctx, cut.RunID, api.EventChanges); err != nil || done {
		return
	}
	notes, err := m.st.SessionEvents(ctx, s.row.ID)
	if err != nil {
		return
	}
	for _, n := range notes {
		if n.Kind == api.EventChanges && n.Turn == cut.SessionTurn {
			return
		}
	}
	changes := m.commitTurn(ctx, s.iso.Worktree, cut.SessionTurn, cut.Task)
	m.addNoteLocked(s, cut.SessionTurn, api.EventChanges, api.AgentEvent{Changes: &changes})
	m.log.Info("committed what a turn cut short by a restart changed", zap.String("session_id", s.row.ID),
		zap.Int("turn", cut.SessionTurn), zap.String("commit", changes.Commit))
}

// mapWorktreeError is err with a gone worktree said as the session's.
func mapWorktreeError(id string, err error) error {
	if errors.Is(err, worktree.ErrNotFound) {
		return &WorktreeGoneError{SessionID: id, Reason: err.Error()}
	}
	return err
}

// reisolateLocked makes the session's worktree, or removes it, when p's
// isolation is not the session's: only before its first turn, since after
// one the conversation and its changes are where the turns ran. The
// worktree is made, and the session judged where its turns will run,
// before anything of the session changes: a refusal leaves it as it was.
// s.mu is held throughout, so no turn starts meanwhile.
func (m *Manager) reisolateLocked(ctx context.Context, s *session, p api.SessionStartParams) error {
	if p.Isolation == s.params.Isolation {
		return nil
	}
	if s.row.Turns > 0 || s.current != nil || len(s.queue) > 0 {
		return api.InvalidField("isolation", "session %s has taken %d turn(s) where it runs now; isolation is chosen before its first turn: "+
			"start a new session for another", s.row.ID, max(s.row.Turns, 1))
	}
	if m.deps.Worktrees == nil {
		why := m.deps.NoWorktrees
		if why == "" {
			why = "card has no git to make worktrees with"
		}
		return api.InvalidField("isolation", "%s, so the session's worktree can be neither made nor removed", why)
	}
	if p.Isolation == "" {
		if s.iso != nil && s.iso.DiscardedAt == nil {
			if err := m.deps.Worktrees.Discard(ctx, s.iso.Worktree); err != nil {
				return err
			}
		}
		if err := m.st.SetSessionWorktree(context.WithoutCancel(ctx), s.row.ID, nil); err != nil {
			return err
		}
		m.log.Info("removed the worktree of a session before its first turn", zap.String("session_id", s.row.ID))
		s.iso = nil
		return nil
	}
	m.startMu.Lock()
	err := m.worktreeBoundLocked(ctx, s.row.Owner)
	m.startMu.Unlock()
	if err != nil {
		return err
	}
	iso, err := m.isolate(ctx, s.row.ID, s.row.Cwd, p.Base)
	if err != nil {
		return err
	}
	if _, err := m.deps.Planner.Check(p, "", nil, plan.Continue{Isolated: iso.isolated()}); err != nil {
		m.dropWorktree(iso)
		return err
	}
	// The bound is asked again with the record, as a start asks it.
	m.startMu.Lock()
	err = m.worktreeBoundLocked(ctx, s.row.Owner)
	if err == nil {
		err = m.st.SetSessionWorktree(context.WithoutCancel(ctx), s.row.ID, iso.raw())
	}
	m.startMu.Unlock()
	if err != nil {
		m.dropWorktree(iso)
		return err
	}
	s.iso = iso
	return nil
}
