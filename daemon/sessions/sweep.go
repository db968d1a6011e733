package sessions

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// StartSweeping closes idle sessions and deletes old closed ones now, in
// the background, then every SweepEvery, until Shutdown. A session left
// open by a client that went away would otherwise hold its history, and
// its place under max_open, for ever.
func (m *Manager) StartSweeping() {
	if m.cfg.CloseIdle <= 0 && m.cfg.PruneClosed <= 0 {
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
