package acp

import (
	"encoding/json"
	"errors"
	"fmt"
)

// UpdateKind is the kind of a session/update (its sessionUpdate field).
type UpdateKind string

const (
	// The three message streams, each a ContentChunk: what the user said
	// (echoed, or replayed by session/load), what the agent says, and
	// what it thinks.
	UpdateUserMessageChunk  UpdateKind = "user_message_chunk"
	UpdateAgentMessageChunk UpdateKind = "agent_message_chunk"
	UpdateAgentThoughtChunk UpdateKind = "agent_thought_chunk"

	UpdateToolCall       UpdateKind = "tool_call"
	UpdateToolCallUpdate UpdateKind = "tool_call_update"
	UpdatePlan           UpdateKind = "plan"

	UpdateAvailableCommands UpdateKind = "available_commands_update"
	UpdateCurrentMode       UpdateKind = "current_mode_update"
	UpdateConfigOption      UpdateKind = "config_option_update"
	UpdateSessionInfo       UpdateKind = "session_info_update"
	UpdateUsage             UpdateKind = "usage_update"
	UpdateNotice            UpdateKind = "notice"
	UpdateCompaction        UpdateKind = "compaction_update"
	UpdateCompactionSummary UpdateKind = "compaction_summary_chunk"
)

// SessionNotification is the params of session/update: one update of one
// session.
type SessionNotification struct {
	SessionID string        `json:"sessionId"`
	Update    SessionUpdate `json:"update"`
	Meta      Meta          `json:"_meta,omitempty"`
}

// SessionUpdate is one update: Kind says which one field below is set.
// The kinds share field names with different shapes (a chunk's content is
// one block, a tool call's a list), so each kind has its own type instead
// of one flat struct.
//
// Reading keeps the update as it came in Raw, and reads a kind this
// package does not know as Kind with no field set, so a reader can pass
// along what it cannot map instead of losing it.
type SessionUpdate struct {
	Kind UpdateKind

	Chunk             *ContentChunk            // user_message_chunk, agent_message_chunk, agent_thought_chunk
	ToolCall          *ToolCall                // tool_call
	ToolCallUpdate    *ToolCallUpdate          // tool_call_update
	Plan              *Plan                    // plan
	AvailableCommands *AvailableCommandsUpdate // available_commands_update
	CurrentMode       *CurrentModeUpdate       // current_mode_update
	ConfigOption      *ConfigOptionUpdate      // config_option_update
	SessionInfo       *SessionInfoUpdate       // session_info_update
	Usage             *UsageUpdate             // usage_update
	Notice            *Notice                  // notice
	Compaction        *CompactionUpdate        // compaction_update
	CompactionSummary *CompactionSummaryChunk  // compaction_summary_chunk

	// Raw is the update as it was read; nil on one built to be written.
	Raw json.RawMessage
}

// slot is the address of the field Kind selects (encoding/json fills a
// nil one), or nil for a kind this package does not know.
func (u *SessionUpdate) slot() any {
	switch u.Kind {
	case UpdateUserMessageChunk, UpdateAgentMessageChunk, UpdateAgentThoughtChunk:
		return &u.Chunk
	case UpdateToolCall:
		return &u.ToolCall
	case UpdateToolCallUpdate:
		return &u.ToolCallUpdate
	case UpdatePlan:
		return &u.Plan
	case UpdateAvailableCommands:
		return &u.AvailableCommands
	case UpdateCurrentMode:
		return &u.CurrentMode
	case UpdateConfigOption:
		return &u.ConfigOption
	case UpdateSessionInfo:
		return &u.SessionInfo
	case UpdateUsage:
		return &u.Usage
	case UpdateNotice:
		return &u.Notice
	case UpdateCompaction:
		return &u.Compaction
	case UpdateCompactionSummary:
		return &u.CompactionSummary
	}
	return nil
}

// MarshalJSON writes the kind and its field's members in one object, as
// the protocol has it.
func (u SessionUpdate) MarshalJSON() ([]byte, error) {
	if u.Kind == "" {
		return nil, errors.New("acp: a session update needs its kind")
	}
	v := u.slot()
	if v == nil {
		if len(u.Raw) > 0 {
			return u.Raw, nil
		}
		return nil, fmt.Errorf("acp: session update %q is of a kind this package does not know, and has no Raw to write", u.Kind)
	}
	var body []byte
	var err error
	if c, ok := v.(**ContentChunk); ok && *c != nil {
		body, err = (*c).marshal()
	} else {
		body, err = json.Marshal(v)
	}
	if err != nil {
		return nil, err
	}
	if string(body) == "null" {
		return nil, fmt.Errorf("acp: session update %q has its field unset", u.Kind)
	}
	kind, _ := json.Marshal(u.Kind)
	out := append([]byte(`{"sessionUpdate":`), kind...)
	if len(body) > 2 { // body is an object: add its members
		out = append(out, ',')
		out = append(out, body[1:]...)
	} else {
		out = append(out, '}')
	}
	return out, nil
}

// UnmarshalJSON reads the kind, then its field. A member of the wrong type
// reads as its zero value, as the schema says of the optional ones, so an
// agent that changes one field's shape costs that field only; an update
// that is not an object, or has no kind, is an error.
func (u *SessionUpdate) UnmarshalJSON(data []byte) error {
	*u = SessionUpdate{Raw: append(json.RawMessage(nil), data...)}
	var head struct {
		Kind UpdateKind `json:"sessionUpdate"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return err
		}
	}
	if head.Kind == "" {
		return errors.New("acp: a session update without sessionUpdate")
	}
	u.Kind = head.Kind
	v := u.slot()
	if v == nil {
		return nil
	}
	return lenient(json.Unmarshal(data, v))
}

// lenient drops a type error: encoding/json has filled every other field.
func lenient(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return nil
	}
	return err
}

// ContentChunk is one piece of a message stream. Chunks of one message
// share a MessageID when the agent sends one.
type ContentChunk struct {
	Content   ContentBlock `json:"content"`
	MessageID *string      `json:"messageId,omitempty"`
	Meta      Meta         `json:"_meta,omitempty"`
}

// marshal writes the chunk as encoding/json would, but without having
// encoding/json check and copy again what the content block's MarshalJSON
// wrote: a chunk carries an answer's text, a streamed answer is all chunks,
// and that second pass scanned the text a byte at a time.
func (c *ContentChunk) marshal() ([]byte, error) {
	content, err := c.Content.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(content)+len(c.Meta)+64)
	b = append(b, `{"content":`...)
	b = append(b, content...)
	if c.MessageID != nil {
		id, err := json.Marshal(*c.MessageID)
		if err != nil {
			return nil, err
		}
		b = append(append(b, `,"messageId":`...), id...)
	}
	if len(c.Meta) > 0 {
		if !json.Valid(c.Meta) {
			return nil, errors.New("acp: a chunk's _meta is not valid JSON")
		}
		b = append(append(b, `,"_meta":`...), c.Meta...)
	}
	return append(b, '}'), nil
}

// Plan is the agent's plan for the turn, whole each time: a client
// replaces the one it had.
type Plan struct {
	Entries []PlanEntry `json:"entries"`
	Meta    Meta        `json:"_meta,omitempty"`
}

// MarshalJSON writes entries as [] for an empty plan.
func (p Plan) MarshalJSON() ([]byte, error) {
	type plain Plan
	q := plain(p)
	q.Entries = nonNil(q.Entries)
	return json.Marshal(q)
}

// PlanEntry is one step of a plan. Priority is high, medium or low;
// Status pending, in_progress or completed.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
	Meta     Meta   `json:"_meta,omitempty"`
}

// AvailableCommandsUpdate is the slash commands the agent offers now.
type AvailableCommandsUpdate struct {
	AvailableCommands []AvailableCommand `json:"availableCommands"`
	Meta              Meta               `json:"_meta,omitempty"`
}

// MarshalJSON writes availableCommands as [] when there are none.
func (a AvailableCommandsUpdate) MarshalJSON() ([]byte, error) {
	type plain AvailableCommandsUpdate
	q := plain(a)
	q.AvailableCommands = nonNil(q.AvailableCommands)
	return json.Marshal(q)
}

// AvailableCommand is one slash command; Input, when set, hints at its
// argument.
type AvailableCommand struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Input       *struct {
		Hint string `json:"hint"`
		Meta Meta   `json:"_meta,omitempty"`
	} `json:"input,omitempty"`
	Meta Meta `json:"_meta,omitempty"`
}

// CurrentModeUpdate says the session's mode changed.
type CurrentModeUpdate struct {
	CurrentModeID string `json:"currentModeId"`
	Meta          Meta   `json:"_meta,omitempty"`
}

// ConfigOptionUpdate is every config option after a change.
type ConfigOptionUpdate struct {
	ConfigOptions []SessionConfigOption `json:"configOptions"`
	Meta          Meta                  `json:"_meta,omitempty"`
}

// MarshalJSON writes configOptions as [] when there are none.
func (c ConfigOptionUpdate) MarshalJSON() ([]byte, error) {
	type plain ConfigOptionUpdate
	q := plain(c)
	q.ConfigOptions = nonNil(q.ConfigOptions)
	return json.Marshal(q)
}

// SessionInfoUpdate changes the session's title or time.
type SessionInfoUpdate struct {
	Title     *string `json:"title,omitempty"`
	UpdatedAt *string `json:"updatedAt,omitempty"`
	Meta      Meta    `json:"_meta,omitempty"`
}

// UsageUpdate is the session's context window: Used of Size tokens, and
// what it has cost so far when the agent knows.
type UsageUpdate struct {
	Used uint64 `json:"used"`
	Size uint64 `json:"size"`
	Cost *Cost  `json:"cost,omitempty"`
	Meta Meta   `json:"_meta,omitempty"`
}

// Cost is an amount of money in a currency (ISO 4217).
type Cost struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
	Meta     Meta    `json:"_meta,omitempty"`
}

// Notice is something the agent tells the user outside the conversation.
// Severity is info, warning or error.
type Notice struct {
	Severity    string  `json:"severity"`
	Title       string  `json:"title"`
	Description *string `json:"description,omitempty"`
	Meta        Meta    `json:"_meta,omitempty"`
}

// CompactionUpdate reports the agent compacting the session's context.
// Status is in_progress, completed, failed or cancelled.
type CompactionUpdate struct {
	CompactionID string         `json:"compactionId"`
	Status       string         `json:"status"`
	Summary      []ContentBlock `json:"summary,omitempty"`
	Error        *string        `json:"error,omitempty"`
	Meta         Meta           `json:"_meta,omitempty"`
}

// CompactionSummaryChunk is one piece of a compaction's summary.
type CompactionSummaryChunk struct {
	CompactionID string       `json:"compactionId"`
	Content      ContentBlock `json:"content"`
	Meta         Meta         `json:"_meta,omitempty"`
}
