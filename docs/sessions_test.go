package docs

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/stretchr/testify/require"
)

// captureSessions records the session methods' examples: a conversation of
// three turns (one that ends, one cancelled with one queued behind it),
// the refusals, and a replay of the closed session.
func captureSessions(c *capturer, home string) {
	res := c.call("sessions.start", `{"id":"claude-code","cwd":"`+home+`","model":"claude-opus-4-8"}`)
	var s struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(c.t, json.Unmarshal(res, &s))
	id := `"session_id":"` + s.SessionID + `"`
	c.call("sessions.subscribe", `{`+id+`}`)
	c.call("sessions.prompt", `{`+id+`,"task":"Reply with PONG."}`)
	c.drainSession(1)
	c.call("sessions.configure", `{`+id+`,"model":"claude-sonnet-4-5","effort":"high"}`)
	c.call("sessions.configure", `{`+id+`,"permission_mode":"edit"}`)
	c.call("sessions.prompt", `{`+id+`,"task":"SLOW: think for a long time."}`)
	time.Sleep(200 * time.Millisecond)
	c.call("sessions.prompt", `{`+id+`,"task":"Now reply with PONG again."}`)
	c.call("sessions.get", `{`+id+`}`)
	c.call("sessions.steer", `{`+id+`,"task":"Be brief."}`)
	c.call("sessions.cancel", `{`+id+`}`)
	c.drainSession(3)
	c.quiet = true
	c.call("sessions.list", `{"adapter":"claude-code"}`)
	c.call("sessions.release", `{`+id+`}`)
	c.call("sessions.close", `{`+id+`}`)
	c.call("sessions.prompt", `{`+id+`,"task":"Reply with PONG."}`)
	c.call("sessions.get", `{"session_id":"ses_NOSUCHSESSION"}`)
	c.quiet = false
	c.call("sessions.subscribe", `{`+id+`,"after_seq":5}`)
	time.Sleep(300 * time.Millisecond)
	c.call("daemon.info", "")
}

// noteSession counts the terminal sessions.event notifications.
func (c *capturer) noteSession(method string, msg []byte) {
	if method != "sessions.event" {
		return
	}
	var note struct {
		Params struct {
			Event struct {
				Kind string `json:"kind"`
			} `json:"event"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &note) == nil && (note.Params.Event.Kind == "done" || note.Params.Event.Kind == "error") {
		c.sessionEnds++
	}
}

// drainSession reads notifications until n session turns have ended.
func (c *capturer) drainSession(n int) {
	for c.sessionEnds < n {
		c.read()
	}
}

var _ = fmt.Sprint
