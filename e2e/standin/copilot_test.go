package standin

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// copilotArgs is close to card's read-only argv for Copilot (its tool
// allowlist): no ask_user, writes denied, reads allowed, JSONL output, prompt
// on stdin (never -p together with stdin).
var copilotArgs = []string{"--output-format", "json", "--no-ask-user", "--deny-tool", "write", "--allow-tool", "read",
	"--no-auto-update", "--no-custom-instructions", "--disable-builtin-mcps", "--no-color"}

func TestCopilotAnswersThroughBYOKOnEitherStandIn(t *testing.T) {
	bin := cliPath(t, "copilot")
	for _, tc := range []struct {
		name  string
		start func(testing.TB, Script) *Server
	}{{"anthropic", NewAnthropic}, {"openai", NewOpenAI}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.start(t, Script{Answer: "PONG from the " + tc.name + " stand-in via copilot"})
			home, project := sandbox(t)
			res := runCLI(t, 120*time.Second, project, s.CopilotEnv(home, nodePath()), "say pong", bin, copilotArgs...)
			t.Log(res)
			capture(t, "copilot-json-success-"+tc.name, home, res)
			require.Equal(t, 0, res.Exit, res.String())
			var answer string
			for _, o := range jsonLines(t, res.Stdout) {
				if o["type"] == "assistant.message" {
					answer, _ = o["data"].(map[string]any)["content"].(string)
				}
			}
			assert.Equal(t, "PONG from the "+tc.name+" stand-in via copilot", answer)
			calls := s.ModelCalls()
			require.NotEmpty(t, calls, "copilot never called the stand-in")
		})
	}
}

func TestCopilotReportsAScriptedAPIErrorAsAFailedRun(t *testing.T) {
	bin := cliPath(t, "copilot")
	for _, tc := range []struct {
		status int
		kind   string // session.error's data.errorType
	}{
		{http.StatusUnauthorized, "authentication"},
		{http.StatusTooManyRequests, "rate_limit"},
	} {
		status := tc.status
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			s := NewAnthropic(t, Script{Status: status})
			home, project := sandbox(t)
			res := runCLI(t, 120*time.Second, project, s.CopilotEnv(home, nodePath()), "say pong", bin, copilotArgs...)
			t.Log(res)
			capture(t, "copilot-json-"+strconv.Itoa(status), home, res)
			assert.Equal(t, 1, res.Exit, "an API %d must not look like success", status)
			objs := jsonLines(t, res.Stdout)
			serr := lastOfType(objs, "session.error")
			require.NotNil(t, serr, "no session.error line\n%s", res)
			data := serr["data"].(map[string]any)
			assert.Equal(t, tc.kind, data["errorType"])
			assert.EqualValues(t, status, data["statusCode"])
			result := lastOfType(objs, "result")
			require.NotNil(t, result, res.String())
			assert.EqualValues(t, 1, result["exitCode"])
			// Copilot has no retry knob for BYOK: it retries 401 twice and 429
			// five times, about 1 s apart. Bounded, so the test just pays it.
			assert.NotEmpty(t, s.ModelCalls())
		})
	}
}
