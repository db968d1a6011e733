package docs

import (
	"encoding/json"
	"time"

	"github.com/stretchr/testify/require"
)

// captureRuns records a streamed run, a finished one, a cancel, the run
// history and two refusals.
func captureRuns(c *capturer, home string) {
	task := func(text string, extra string) string {
		return `{"id":"claude-code","task":"` + text + `","cwd":"` + home + `"` + extra + `}`
	}
	res := c.call("agents.invoke", task("Reply with PONG.", `,"stream":true`))
	var acc struct {
		RunID string `json:"run_id"`
	}
	require.NoError(c.t, json.Unmarshal(res, &acc))
	c.drainRun()
	streamed := acc.RunID

	c.quiet = true
	c.call("agents.invoke", task("Reply with PONG.", `,"permission_mode":"read_only","timeout_secs":60`))
	c.call("agents.invoke", task("Refactor everything.", `,"permission_mode":"bypass"`))
	c.call("agents.invoke", task("Reply with PONG.", `,"invoked_by":"claude-code"`))

	c.quiet = false
	res = c.call("agents.invoke", task("SLOW: think for a long time.", `,"stream":true`))
	require.NoError(c.t, json.Unmarshal(res, &acc))
	time.Sleep(300 * time.Millisecond)
	c.call("agents.cancel", `{"run_id":"`+acc.RunID+`"}`)
	c.quiet = true
	c.call("agents.cancel", `{"run_id":"`+acc.RunID+`"}`)

	c.call("runs.list", `{"limit":2}`)
	c.call("runs.get", `{"run_id":"`+streamed+`"}`)
	c.call("runs.get", `{"run_id":"no-such-run"}`)
	c.quiet = false
	c.call("runs.subscribe", `{"run_id":"`+streamed+`","after_seq":3}`)
	c.drainRun()
}
