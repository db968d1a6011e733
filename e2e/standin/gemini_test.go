package standin

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// geminiArgs is close to card's read-only argv: headless JSON stream, the
// prompt on stdin (no -p: the CLI runs headless when stdin is not a TTY).
func geminiArgs(s *Server) []string {
	return []string{"-m", s.Model, "--output-format", "stream-json", "--approval-mode", "default", "--skip-trust"}
}

func TestGeminiCLIAnswersWithTheStandInsScriptedText(t *testing.T) {
	bin := cliPath(t, "gemini")
	s := NewGemini(t, Script{Answer: "PONG from the gemini stand-in"})
	home, project := sandbox(t)
	env, err := s.GeminiSetup(home, nodePath())
	require.NoError(t, err)

	res := runCLI(t, 120*time.Second, project, env, "say pong", bin, geminiArgs(s)...)
	t.Log(res)
	capture(t, "gemini-stream-success", home, res)
	require.Equal(t, 0, res.Exit, res.String())

	objs := jsonLines(t, res.Stdout)
	var answer string
	for _, o := range objs {
		if o["type"] == "message" && o["role"] == "assistant" {
			text, _ := o["content"].(string)
			answer += text
		}
	}
	assert.Equal(t, "PONG from the gemini stand-in", answer)
	result := lastOfType(objs, "result")
	require.NotNil(t, result, res.String())
	assert.Equal(t, "success", result["status"])

	calls := s.ModelCalls()
	require.NotEmpty(t, calls, "gemini never called the stand-in")
	var prompted bool
	for _, c := range calls {
		assert.Equal(t, Redacted, c.Header.Get("X-Goog-Api-Key"))
		prompted = prompted || contains(c.Body, "say pong")
	}
	assert.True(t, prompted, "no model call carried the prompt")
}

func TestGeminiCLIReportsAScriptedAPIErrorAsAFailedRun(t *testing.T) {
	bin := cliPath(t, "gemini")
	for _, status := range []int{http.StatusUnauthorized, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			s := NewGemini(t, Script{Status: status})
			home, project := sandbox(t)
			env, err := s.GeminiSetup(home, nodePath())
			require.NoError(t, err)
			res := runCLI(t, 120*time.Second, project, env, "say pong", bin, geminiArgs(s)...)
			t.Log(res)
			capture(t, "gemini-stream-"+strconv.Itoa(status), home, res)
			assert.NotEqual(t, 0, res.Exit, "an API %d must not look like success", status)
			assert.NotEmpty(t, s.ModelCalls())
		})
	}
}
