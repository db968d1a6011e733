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

// codexArgs is close to what card's spawn builder uses for read-only mode,
// with the operator extras (the stand-in provider) before the stdin marker.
func codexArgs(s *Server) []string {
	extras, _ := s.CodexExtras()
	args := []string{"exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only", "-c", `approval_policy="never"`, "--color", "never"}
	args = append(args, extras...)
	return append(args, "-")
}

func codexEnv(s *Server, home string) []string {
	_, extra := s.CodexExtras()
	env := []string{"HOME=" + home, "PATH=" + nodePath(), "NO_COLOR=1"}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

func TestCodexAnswersWithTheStandInsScriptedText(t *testing.T) {
	bin := cliPath(t, "codex")
	s := NewOpenAI(t, Script{Answer: "PONG from the openai stand-in"})
	home, project := sandbox(t)

	res := runCLI(t, 90*time.Second, project, codexEnv(s, home), "say pong", bin, codexArgs(s)...)
	t.Log(res)
	capture(t, "codex-exec-json-success", home, res)
	require.Equal(t, 0, res.Exit, res.String())

	var answer string
	objs := jsonLines(t, res.Stdout)
	for _, o := range objs {
		if item, ok := o["item"].(map[string]any); ok && o["type"] == "item.completed" && item["type"] == "agent_message" {
			answer, _ = item["text"].(string)
		}
	}
	assert.Equal(t, "PONG from the openai stand-in", answer)
	require.NotNil(t, lastOfType(objs, "turn.completed"), res.String())

	calls := s.ModelCalls()
	require.NotEmpty(t, calls, "codex never called the stand-in")
	assert.Equal(t, "/v1/responses", calls[0].Path)
	assert.Equal(t, Redacted, calls[0].Header.Get("Authorization"))
	assert.Contains(t, string(calls[0].Body), "say pong")
}

func TestCodexReportsAScriptedAPIErrorAsAFailedTurn(t *testing.T) {
	bin := cliPath(t, "codex")
	for _, status := range []int{http.StatusUnauthorized, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			s := NewOpenAI(t, Script{Status: status})
			home, project := sandbox(t)
			res := runCLI(t, 90*time.Second, project, codexEnv(s, home), "say pong", bin, codexArgs(s)...)
			t.Log(res)
			capture(t, "codex-exec-json-"+strconv.Itoa(status), home, res)
			assert.NotEqual(t, 0, res.Exit, "an API %d must not look like success", status)
			objs := jsonLines(t, res.Stdout)
			failed := lastOfType(objs, "turn.failed")
			require.NotNil(t, failed, "no turn.failed line\n%s", res)
			assert.Contains(t, strings.ToLower(res.Stdout), strconv.Itoa(status))
			// request_max_retries=0 in CodexExtras: one attempt, no backoff.
			assert.Len(t, s.ModelCalls(), 1)
		})
	}
}
