package standin

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// piArgs is close to card's argv for Pi: print mode with the JSON event
// stream, hermetic (no session file, no context files, extensions, skills or
// prompt templates), a read-only tool list, prompt on stdin.
func piArgs(selectModel []string) []string {
	args := []string{"-p", "--mode", "json", "--no-session", "-nc", "--no-extensions", "--no-skills", "--no-prompt-templates",
		"--offline", "--tools", "read,grep,find,ls"}
	return append(args, selectModel...)
}

// piAnswer joins the assistant text of Pi's final agent_end (or last message_end).
func piAnswer(objs []map[string]any) string {
	for i := len(objs) - 1; i >= 0; i-- {
		if objs[i]["type"] != "message_end" {
			continue
		}
		msg, _ := objs[i]["message"].(map[string]any)
		if msg["role"] != "assistant" {
			continue
		}
		var b strings.Builder
		parts, _ := msg["content"].([]any)
		for _, p := range parts {
			if m, ok := p.(map[string]any); ok && m["type"] == "text" {
				s, _ := m["text"].(string)
				b.WriteString(s)
			}
		}
		return b.String()
	}
	return ""
}

func TestPiAnswersThroughACustomProviderOnEitherStandIn(t *testing.T) {
	bin := cliPath(t, "pi")
	for _, tc := range []struct {
		name  string
		start func(testing.TB, Script) *Server
	}{{"anthropic", NewAnthropic}, {"openai", NewOpenAI}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.start(t, Script{Answer: "PONG from the " + tc.name + " stand-in via pi"})
			home, project := sandbox(t)
			env, sel, err := s.PiSetup(home, nodePath())
			require.NoError(t, err)
			res := runCLI(t, 120*time.Second, project, env, "say pong", bin, piArgs(sel)...)
			t.Log(res)
			capture(t, "pi-json-success-"+tc.name, home, res)
			require.Equal(t, 0, res.Exit, res.String())
			assert.Equal(t, "PONG from the "+tc.name+" stand-in via pi", piAnswer(jsonLines(t, res.Stdout)))
			calls := s.ModelCalls()
			require.NotEmpty(t, calls, "pi never called the stand-in")
			assert.Contains(t, string(calls[0].Body), "say pong")
		})
	}
}

func TestPiReportsAScriptedAPIErrorAsAFailedRun(t *testing.T) {
	bin := cliPath(t, "pi")
	for _, status := range []int{http.StatusUnauthorized, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			s := NewAnthropic(t, Script{Status: status})
			home, project := sandbox(t)
			env, sel, err := s.PiSetup(home, nodePath())
			require.NoError(t, err)
			res := runCLI(t, 120*time.Second, project, env, "say pong", bin, piArgs(sel)...)
			t.Log(res)
			capture(t, "pi-json-"+strconv.Itoa(status), home, res)
			// Pi 0.73 exits 0 after an API error in --mode json: the failure is only
			// in the stream, as an assistant message with stopReason "error" and an
			// errorMessage that starts with the HTTP status. card's parser must
			// look there; the exit code alone would report success.
			end := lastOfType(jsonLines(t, res.Stdout), "message_end")
			require.NotNil(t, end, res.String())
			msg := end["message"].(map[string]any)
			assert.Equal(t, "error", msg["stopReason"])
			assert.True(t, strings.HasPrefix(msg["errorMessage"].(string), strconv.Itoa(status)+" "), msg["errorMessage"])
			// retry.enabled=false and provider.maxRetries=0 in PiSetup: one attempt.
			assert.Len(t, s.ModelCalls(), 1)
		})
	}
}
