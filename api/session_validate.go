package api

import "strings"

// The session params' own checks: a missing session id, an empty task or a
// filter that names nothing is refused naming the field, before the
// session is looked up.

func requireSessionID(id string) error {
	if strings.TrimSpace(id) == "" {
		return InvalidField("session_id", "required: the session sessions.start answered")
	}
	return nil
}

func requireTask(task string) error {
	if strings.TrimSpace(task) == "" {
		return InvalidField("task", "required: the text for the agent must not be empty")
	}
	if strings.ContainsRune(task, 0) {
		return InvalidField("task", "contains a NUL byte")
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
		return InvalidField("after_seq", "must not be negative")
	}
	return nil
}

// Validate checks the state filter and the limit.
func (p *SessionListParams) Validate() error {
	switch p.State {
	case "", SessionIdle, SessionRunning, SessionWaitingApproval, SessionClosed:
	default:
		return InvalidField("state", "unknown state %q; one of idle, running, waiting_approval, closed", p.State)
	}
	return checkListLimit(p.Limit)
}

// Validate requires the session id and at least one change, and refuses a
// value with a NUL or a leading dash (it would reach a CLI's argv). Which
// mode, model and effort an adapter takes is the daemon's check, as at
// sessions.start.
func (p *SessionConfigureParams) Validate() error {
	if err := requireSessionID(p.SessionID); err != nil {
		return err
	}
	if p.ID == "" && p.PermissionMode == "" && p.Model == "" && p.Effort == "" && p.Isolation == "" && p.Base == "" {
		return InvalidField("permission_mode", "nothing to change: give id, permission_mode, model, effort or isolation")
	}
	switch p.Isolation {
	case "", IsolationWorktree:
		if err := checkIsolation(p.Isolation, p.Base); err != nil {
			return err
		}
	case IsolationOff:
		if p.Base != "" {
			return InvalidField("base", "applies only with isolation %q: the commit the session's worktree starts from", IsolationWorktree)
		}
	default:
		return InvalidField("isolation", "unknown isolation %q; %q (a git worktree of the cwd's repository) or %q (the turns run in the cwd)",
			p.Isolation, IsolationWorktree, IsolationOff)
	}
	switch p.PermissionMode {
	case "", "read_only", "ask", "edit", "bypass":
	default:
		return InvalidField("permission_mode", "unknown mode %q; one of read_only, ask, edit, bypass", p.PermissionMode)
	}
	for _, f := range []struct{ name, v string }{{"model", p.Model}, {"effort", p.Effort}} {
		if strings.ContainsRune(f.v, 0) {
			return InvalidField(f.name, "contains a NUL byte")
		}
		if strings.HasPrefix(f.v, "-") {
			return InvalidField(f.name, "must not start with '-'")
		}
		if strings.TrimSpace(f.v) != f.v {
			return InvalidField(f.name, "must not start or end with white space")
		}
	}
	return nil
}
