package api

import "strings"

// The session params' own checks: a missing session id, an empty task or a
// filter that names nothing is refused naming the field, before the
// session is looked up.

func requireSessionID(id string) error {
	if strings.TrimSpace(id) == "" {
		return invalidField("session_id", "required: the session sessions.start answered")
	}
	return nil
}

func requireTask(task string) error {
	if strings.TrimSpace(task) == "" {
		return invalidField("task", "required: the text for the agent must not be empty")
	}
	if strings.ContainsRune(task, 0) {
		return invalidField("task", "contains a NUL byte")
	}
	return nil
}

// Validate requires the session id and a task.
func (p *SessionPromptParams) Validate() error {
	if err := requireSessionID(p.SessionID); err != nil {
		return err
	}
	return requireTask(p.Task)
}

// Validate requires the session id and a task.
func (p *SessionSteerParams) Validate() error {
	if err := requireSessionID(p.SessionID); err != nil {
		return err
	}
	return requireTask(p.Task)
}

// Validate requires the session id.
func (p *SessionCancelParams) Validate() error { return requireSessionID(p.SessionID) }

// Validate requires the session id.
func (p *SessionIDParams) Validate() error { return requireSessionID(p.SessionID) }

// Validate requires the session id and a seq that is not negative.
func (p *SessionSubscribeParams) Validate() error {
	if err := requireSessionID(p.SessionID); err != nil {
		return err
	}
	if p.AfterSeq < 0 {
		return invalidField("after_seq", "must not be negative")
	}
	return nil
}

// Validate checks the state filter and the limit.
func (p *SessionListParams) Validate() error {
	switch p.State {
	case "", SessionIdle, SessionRunning, SessionWaitingApproval, SessionClosed:
	default:
		return invalidField("state", "unknown state %q; one of idle, running, waiting_approval, closed", p.State)
	}
	if p.Limit < 0 {
		return invalidField("limit", "must be positive (at most %d)", MaxListLimit)
	}
	return nil
}
