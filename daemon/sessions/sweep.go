package sessions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/daemon/worktree"
)

// StartSweeping closes idle sessions and deletes old closed ones now, in
// the background, then every SweepEvery, until Shutdown. A session left
// open by a client that went away would otherwise hold its history, and
// its place under max_open, for ever.
func (m *Manager) StartSweeping() {
	if m.cfg.CloseIdle <= 0 && m.cfg.PruneClosed <= 0 && (m.cfg.WorktreeMaxAge <= 0 || m.deps.Worktrees == nil) {
		return
	}
	every := m.cfg.SweepEvery
	if every <= 0 {
		every = time.Hour
	}
	m.sweepStop, m.sweepDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.sweepDone)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			m.sweep()
			select {
			case <-tick.C:
			case <-m.sweepStop:
				return
			}
		}
	}()
}

// stopSweeping ends the sweeper and waits for it.
func (m *Manager) stopSweeping() {
	if m.sweepStop != nil {
		close(m.sweepStop)
		<-m.sweepDone
		m.sweepStop = nil
	}
}

// sweep closes the sessions idle past CloseIdle and deletes the ones
// closed more than PruneClosed ago.
func (m *Manager) sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	if m.cfg.CloseIdle > 0 {
		ids, err := m.st.IdleSessions(ctx, now.Add(-m.cfg.CloseIdle))
		if err != nil {
			m.log.Warn("could not look for idle sessions", zap.Error(err))
		}
		reason := fmt.Sprintf("idle for more than %s ([sessions] close_idle_hours)", m.cfg.CloseIdle)
		for _, id := range ids {
			if m.isClosing() {
				return
			}
			if m.busy(id) {
				continue // a turn runs or waits: it is not idle, whatever its row says
			}
			if _, err := m.Close(ctx, id, reason); err != nil {
				m.log.Warn("could not close an idle session", zap.String("session_id", id), zap.Error(err))
				continue
			}
			m.log.Info("closed an idle session", zap.String("session_id", id), zap.Duration("idle_for_more_than", m.cfg.CloseIdle))
		}
	}
	if m.cfg.PruneClosed > 0 {
		n, err := m.st.PruneClosedSessions(ctx, now.Add(-m.cfg.PruneClosed))
		if err != nil {
			m.log.Warn("could not prune closed sessions", zap.Error(err))
		} else if n > 0 {
			m.log.Info("pruned closed sessions", zap.Int64("sessions", n), zap.Duration("closed_for_more_than", m.cfg.PruneClosed))
		}
	}
	m.pruneWorktrees(ctx)
}

// pruneWorktrees discards the worktrees that changed nothing for
// WorktreeMaxAge, but an open session's and a one-shot run's still going:
// a closed session's worktree is kept for review until discarded, and no
// longer than that.
func (m *Manager) pruneWorktrees(ctx context.Context) {
	if m.cfg.WorktreeMaxAge <= 0 || m.deps.Worktrees == nil {
		return
	}
	removed, err := m.deps.Worktrees.Prune(ctx, m.cfg.WorktreeMaxAge, func(wt worktree.Worktree) bool {
		return m.keepWorktree(ctx, wt.SessionID)
	})
	if err != nil {
		m.log.Warn("could not prune every old worktree", zap.Error(err))
	}
	for _, id := range removed {
		row, err := m.st.GetSession(ctx, id)
		if err == nil {
			if iso := m.readIsolation(row); iso != nil && iso.DiscardedAt == nil {
				err = m.markDiscarded(ctx, id, iso)
			}
		}
		if err != nil && !errors.Is(err, store.ErrSessionNotFound) {
			m.log.Warn("could not record a pruned worktree as discarded", zap.String("session_id", id), zap.Error(err))
		}
	}
	if len(removed) > 0 {
		m.log.Info("pruned old worktrees", zap.Strings("session_ids", removed), zap.Duration("idle_for_more_than", m.cfg.WorktreeMaxAge))
	}
}

// keepWorktree says session id's worktree is still in use: the session is
// open, or its one-shot run goes on. When the store cannot say, it is kept.
func (m *Manager) keepWorktree(ctx context.Context, id string) bool {
	row, err := m.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrSessionNotFound) {
		return false
	}
	if err != nil || row.State != string(api.SessionClosed) {
		return true
	}
	return m.closedBusy(ctx, id, "") != nil
}

// busy says whether an open session in memory has a turn running or
// queued.
func (m *Manager) busy(id string) bool {
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current != nil || len(s.waitingLocked()) > 0
}
