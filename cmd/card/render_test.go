package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/spawn"
)

// Streamed pieces make one line of answer on stdout; a warning is a note on
// stderr, never part of the answer and never an error.
func TestFollowRendersPiecesAsOneAnswerAndWarningsAsNotes(t *testing.T) {
	var out, errb bytes.Buffer
	f := newFollower(env{stdout: &out, stderr: &errb}, false, "claude-code")
	for _, ev := range []daemon.AgentEvent{
		{Event: api.Event{Kind: spawn.EventWarning, Text: "Model metadata for `gpt-5` not found"}},
		{Event: api.Event{Kind: spawn.EventThinking, Text: "hmm", Delta: true}},
		{Event: api.Event{Kind: spawn.EventText, Text: "PO", Delta: true}},
		{Event: api.Event{Kind: spawn.EventText, Text: "NG", Delta: true}},
	} {
		f.render(ev)
	}
	assert.Equal(t, "PONG", out.String())
	assert.Equal(t, "card: note from the agent: Model metadata for `gpt-5` not found\n", errb.String())
}
