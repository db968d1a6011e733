package standin

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// claudeArgs is close to what card's spawn builder uses for read-only mode.
var claudeArgs = []string{"-p", "--output-format", "stream-json", "--verbose", "--max-turns", "1", "--tools", "", "--permission-mode", "default"}

// jsonLines decodes every JSON object line of a CLI's stdout; other lines are skipped.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			objs = append(objs, m)
		}
	}
	return objs
}

func lastOfType(objs []map[string]any, typ string) map[string]any {
	for i := len(objs) - 1; i >= 0; i-- {
		if objs[i]["type"] == typ {
			return objs[i]
		}
	}
	return nil
}

func TestClaudeCodeAnswersWithTheStandInsScriptedText(t *testing.T) {
	bin := cliPath(t, "claude")
	s := NewAnthropic(t, Script{Answer: "PONG from the anthropic stand-in"})
	home, project := sandbox(t)

	res := runCLI(t, 90*time.Second, project, s.ClaudeEnv(home, nodePath()), "say pong", bin, claudeArgs...)
	t.Log(res)
	capture(t, "claude-stream-success", home, res)
	require.Equal(t, 0, res.Exit, res.String())
	result := lastOfType(jsonLines(t, res.Stdout), "result")
	require.NotNil(t, result, "no result line\n%s", res)
	assert.Equal(t, "success", result["subtype"])
	assert.Equal(t, "PONG from the anthropic stand-in", result["result"])

	calls := s.ModelCalls()
	require.NotEmpty(t, calls, "claude never called the stand-in")
	var prompted bool
	for _, c := range calls {
		assert.Equal(t, Redacted, c.Header.Get("X-Api-Key"), "the key is sent but never recorded")
		prompted = prompted || strings.Contains(string(c.Body), "say pong")
	}
	assert.True(t, prompted, "no model call carried the prompt")
}

func TestClaudeCodeReportsAScriptedAPIErrorAsAFailedRun(t *testing.T) {
	bin := cliPath(t, "claude")
	for _, tc := range []struct {
		status int
		kind   string // the assistant line's "error" field
	}{
		{http.StatusUnauthorized, "authentication_failed"},
		{http.StatusTooManyRequests, "rate_limit"},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			s := NewAnthropic(t, Script{Status: tc.status})
			home, project := sandbox(t)
			res := runCLI(t, 90*time.Second, project, s.ClaudeEnv(home, nodePath()), "say pong", bin, claudeArgs...)
			t.Log(res)
			capture(t, "claude-stream-"+strconv.Itoa(tc.status), home, res)
			assert.NotEqual(t, 0, res.Exit, "an API %d must not look like success", tc.status)
			result := lastOfType(jsonLines(t, res.Stdout), "result")
			require.NotNil(t, result, "no result line\n%s", res)
			assert.Equal(t, true, result["is_error"])
			assert.EqualValues(t, tc.status, result["api_error_status"])
			assistant := lastOfType(jsonLines(t, res.Stdout), "assistant")
			require.NotNil(t, assistant, res.String())
			assert.Equal(t, tc.kind, assistant["error"])
			// CLAUDE_CODE_MAX_RETRIES=0 in ClaudeEnv: exactly one attempt, no backoff.
			assert.Len(t, s.ModelCalls(), 1)
		})
	}
}
