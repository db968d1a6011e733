package sessions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// warmAgent is a session's warm agent and its place in the pool.
type warmAgent struct {
	agent    Agent
	session  *session
	lastUsed time.Time
	// runID is the run of the turn on it now ("" between turns).
	runID string
	idle  *time.Timer
	// started is closed once the agent's start has ended, well or not;
	// a turn that finds the agent starting waits for it instead of
	// starting a second process.
	started chan struct{}
	// stale says the session was configured while the agent was in a turn
	// (or starting): its CLI runs with the old settings, so it ends when
	// the turn does and the next turn starts one with the new.
	stale bool
}

func (w *warmAgent) alive() bool { return w != nil && w.agent != nil && w.agent.Alive() }

// turning says whether the warm agent is running run's turn.
func (w *warmAgent) turning(runID string) bool {
	return w != nil && w.runID != "" && w.runID == runID
}

// warmPool holds the warm agents: at most MaxWarm alive, the least
// recently used ended first when another is needed; each ended after
// IdleTimeout without a turn. Its mutex guards every session's warm field
// and the agents' state; it is never held while a turn runs, and is taken
// after a session's mutex, never before.
type warmPool struct {
	m      *Manager
	mu     sync.Mutex
	agents []*warmAgent
	closed bool
}

func (p *warmPool) init(m *Manager) { p.m = m }

// errConversationGone is why a turn that only its warm agent could carry
// cannot run: that agent, and the conversation it held, has ended.
var errConversationGone = errors.New("the warm agent that held the conversation has ended")

// holds says whether the session has a warm agent, starting or alive,
// that its next turn would go over.
func (p *warmPool) holds(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := s.warm
	return w != nil && !p.closed && (w.agent == nil || w.alive())
}

// errAllBusy is why a turn runs cold when every warm agent is in a turn.
var errAllBusy = errors.New("every warm agent is in a turn ([sessions] max_warm)")

// acquire is the session's warm agent for run's turn: its own if alive,
// else a new one started (ending the least recently used idle one when the
// pool is full). It returns nil, with why, when the turn runs cold.
func (p *warmPool) acquire(ctx context.Context, s *session, runID string, start func(context.Context) (Agent, error)) (*warmAgent, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("card is shutting down")
	}
	for w := s.warm; w != nil && w.agent == nil; w = s.warm {
		// Starting (sessions.start with warm): wait, then look again.
		ch := w.started
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p.mu.Lock()
	}
	if w := s.warm; w != nil {
		if w.runID != "" {
			// A session runs one turn at a time; two on one agent would be
			// two conversations' worth of input in one process.
			err := fmt.Errorf("session %s's agent is already in a turn (run %s)", s.row.ID, w.runID) // runID is the pool's, read under its lock
			p.mu.Unlock()
			return nil, err
		}
		if w.alive() {
			w.runID = runID
			w.idle.Stop()
			p.touchLocked(w)
			p.mu.Unlock()
			return w, nil
		}
		p.removeLocked(w)
	}
	var evict *warmAgent
	if len(p.agents) >= p.m.cfg.MaxWarm {
		for _, w := range p.agents { // oldest first
			if w.runID == "" {
				evict = w
				break
			}
		}
		if evict == nil {
			p.mu.Unlock()
			return nil, errAllBusy
		}
		p.removeLocked(evict)
	}
	// The new agent holds its place (and the session's warm field) while
	// it starts, so no other turn of the session can start a second one.
	w := &warmAgent{session: s, runID: runID, lastUsed: time.Now(), idle: time.NewTimer(time.Hour), started: make(chan struct{})}
	defer close(w.started)
	w.idle.Stop()
	s.warm = w
	p.agents = append(p.agents, w)
	p.mu.Unlock()
	if evict != nil {
		p.m.log.Info("ended the least recently used warm agent for another session", zap.String("session_id", evict.session.row.ID),
			zap.Int("max_warm", p.m.cfg.MaxWarm))
		p.close(evict)
	}
	a, err := start(ctx)
	p.mu.Lock()
	if err != nil || p.closed {
		p.removeLocked(w)
		p.mu.Unlock()
		if err == nil {
			a.Close()
			err = errors.New("card is shutting down")
		}
		return nil, err
	}
	w.agent = a
	if runID == warmStartRun {
		// Started for no turn: idle from the moment it is up, under the
		// same lock, so a first prompt that waited for the start finds it
		// free (a release after the unlock let that prompt see it busy and
		// run cold beside it: two processes of one conversation).
		w.runID, w.lastUsed = "", time.Now()
		w.idle = time.AfterFunc(p.m.cfg.IdleTimeout, func() { p.expire(w) })
	}
	p.mu.Unlock()
	p.m.setWarmPgid(s, a.Pid())
	go p.watch(w)
	return w, nil
}

// release ends a turn on w: the agent waits for the next one, until the
// idle timeout.
func (p *warmPool) release(w *warmAgent) {
	p.mu.Lock()
	w.runID = ""
	w.lastUsed = time.Now()
	if w.stale && slices.Contains(p.agents, w) {
		p.removeLocked(w)
		p.mu.Unlock()
		p.m.log.Info("ended a warm agent started with settings its session no longer has; the next turn starts one with the new",
			zap.String("session_id", w.session.row.ID))
		p.close(w)
		return
	}
	defer p.mu.Unlock()
	if !w.alive() || !slices.Contains(p.agents, w) {
		p.removeLocked(w)
		return
	}
	w.idle = time.AfterFunc(p.m.cfg.IdleTimeout, func() { p.expire(w) })
}

// Warm agent fates a configure or a release reports
// (api.SessionConfigureResult.WarmAgent, api.SessionReleaseResult.WarmAgent).
const (
	warmEnded         = "ended"
	warmEndsAfterTurn = "ends_after_turn"
	// warmKept: sessions.release left the agent, the only holder of its
	// conversation, to end at idle_secs.
	warmKept = "kept"
)

// retire takes the session's warm agent, whose CLI was started with
// settings the session no longer has, out of service: an idle one is
// returned for the caller to end (outside the session's lock), one in a
// turn or starting is marked to end when that is over.
func (p *warmPool) retire(s *session) (string, *warmAgent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := s.warm
	if w == nil {
		return "", nil
	}
	if w.runID != "" {
		w.stale = true
		return warmEndsAfterTurn, nil
	}
	p.removeLocked(w)
	return warmEnded, w
}

// expire ends w if it is still idle.
func (p *warmPool) expire(w *warmAgent) {
	p.mu.Lock()
	if w.runID != "" || !slices.Contains(p.agents, w) {
		p.mu.Unlock()
		return
	}
	p.removeLocked(w)
	p.mu.Unlock()
	p.m.log.Info("ended a warm agent idle for its timeout; the next turn resumes the conversation cold",
		zap.String("session_id", w.session.row.ID), zap.Duration("idle", p.m.cfg.IdleTimeout))
	p.close(w)
}

// watch forgets an agent that died by itself.
func (p *warmPool) watch(w *warmAgent) {
	<-w.agent.Done()
	p.mu.Lock()
	busy := w.runID != ""
	if !busy {
		p.removeLocked(w)
	}
	p.mu.Unlock()
	p.m.setWarmPgid(w.session, 0)
}

func (p *warmPool) touchLocked(w *warmAgent) {
	w.lastUsed = time.Now()
	if i := slices.Index(p.agents, w); i >= 0 {
		p.agents = append(slices.Delete(p.agents, i, i+1), w)
	}
}

// removeLocked takes w out of the pool and its session; the caller ends
// its process.
func (p *warmPool) removeLocked(w *warmAgent) {
	if w == nil {
		return
	}
	if w.idle != nil {
		w.idle.Stop()
	}
	p.agents = slices.DeleteFunc(p.agents, func(x *warmAgent) bool { return x == w })
	if w.session.warm == w {
		w.session.warm = nil
	}
}

func (p *warmPool) close(w *warmAgent) {
	if w != nil && w.agent != nil {
		w.agent.Close()
	}
}

// end ends a session's warm agent (the session closed).
func (p *warmPool) end(s *session, why string) {
	p.mu.Lock()
	w := s.warm
	p.removeLocked(w)
	p.mu.Unlock()
	if w != nil {
		p.m.log.Info("ended a session's warm agent", zap.String("session_id", s.row.ID), zap.String("why", why))
		p.close(w)
	}
}

// shutdown ends every warm agent and starts no more.
// refuse starts no more warm agents; the ones alive carry their turns to
// their end.
func (p *warmPool) refuse() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

func (p *warmPool) shutdown() {
	p.mu.Lock()
	p.closed = true
	agents := slices.Clone(p.agents)
	for _, w := range agents {
		p.removeLocked(w)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range agents {
		wg.Add(1)
		go func() { defer wg.Done(); p.close(w) }()
	}
	wg.Wait()
}

// pidOf is the session's warm agent's pid, 0 when it has none alive.
func (p *warmPool) pidOf(s *session) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := s.warm; w.alive() {
		return w.agent.Pid()
	}
	return 0
}

// of is the session's warm agent with a snapshot of its turn, or nil.
func (p *warmPool) of(s *session) *warmAgent {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := s.warm; w.alive() {
		c := *w
		return &c
	}
	return nil
}

// count is how many warm agents are alive (tests and sessions.get).
func (p *warmPool) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, w := range p.agents {
		if w.alive() {
			n++
		}
	}
	return n
}
