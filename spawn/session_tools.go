package spawn

import (
	"encoding/json"

	"github.com/card-dev/card/api"
)

// maxSessionTools bounds how many tool calls one session turn tracks, so an
// agent that invents call ids without end cannot grow the daemon's memory
// with them.
const maxSessionTools = 10000

// sessionTool is what a session protocol knows of one tool call. The
// agents announce a call in pieces (its start, its input, a question about
// it, its result) and in no fixed order, so each protocol keeps this per
// call id to emit tool_use once and tool_result once.
type sessionTool struct {
	name      string
	input     json.RawMessage
	announced bool // its tool_use event was emitted
	done      bool // its tool_result event was emitted
}

// sessionTools are one turn's tool calls by id, and how many of them were
// announced (the result's ToolCalls).
type sessionTools struct {
	byID  map[string]*sessionTool
	calls int
}

// get is the record of the call with id, made on first sight; nil once
// maxSessionTools calls are tracked.
func (s *sessionTools) get(id string) *sessionTool {
	if t, ok := s.byID[id]; ok {
		return t
	}
	if len(s.byID) >= maxSessionTools {
		return nil
	}
	if s.byID == nil {
		s.byID = map[string]*sessionTool{}
	}
	t := &sessionTool{}
	s.byID[id] = t
	return t
}

// announce is the tool_use event of a call not announced yet, with the name
// and input recorded for it.
func (s *sessionTools) announce(id string, t *sessionTool) []Event {
	if t == nil || t.announced {
		return nil
	}
	t.announced = true
	s.calls++
	return []Event{{Kind: api.EventToolUse, Tool: &api.Tool{Name: t.name, ID: id, Input: validRaw(t.input)}}}
}
