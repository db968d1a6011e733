package standin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/internal/testskip"
)

// realCLI is one real agent CLI pointed at a stand-in the way an operator
// would point it (its own env and config under HOME, card's argv), and what
// its stream says on success and on an API error.
type realCLI struct {
	name string
	// binary finds the CLI (CLI's skip and fail rules).
	binary func(t *testing.T) string
	// servers are the stand-ins it answers through; the first is the one
	// the API errors come from.
	servers []standIn
	// via ends its scripted answer (" via copilot"), as in the captures.
	via string
	// capture is the prefix of the files CARD_STANDIN_CAPTURE writes.
	capture string
	timeout time.Duration
	// setup is the CLI's environment and argv for s, with HOME at home.
	setup func(t *testing.T, s *Server, home string) (env, args []string)
	// answer is the answer the stream carries.
	answer func(objs []map[string]any) string
	// answered checks the rest of a successful run (optional).
	answered func(t *testing.T, s *Server, objs []map[string]any)
	// statuses are the API errors it is tried against, and failed checks
	// that the run says it failed with status.
	statuses []int
	failed   func(t *testing.T, s *Server, status int, res cliResult, objs []map[string]any)
}

// standIn is one vendor API stand-in, by name.
type standIn struct {
	name  string
	start func(testing.TB, Script) *Server
}

var (
	anthropic = standIn{"anthropic", NewAnthropic}
	openai    = standIn{"openai", NewOpenAI}
	gemini    = standIn{"gemini", NewGemini}
)

var realCLIs = []realCLI{
	{
		name: "claude", capture: "claude-stream", timeout: 90 * time.Second, servers: []standIn{anthropic},
		setup: func(t *testing.T, s *Server, home string) ([]string, []string) {
			// Close to what card's spawn builder uses for read-only mode.
			return s.ClaudeEnv(home, nodePath()), []string{"-p", "--output-format", "stream-json", "--verbose", "--max-turns", "1",
				"--tools", "", "--permission-mode", "default"}
		},
		answer: func(objs []map[string]any) string {
			if r := lastOfType(objs, "result"); r != nil && r["subtype"] == "success" {
				s, _ := r["result"].(string)
				return s
			}
			return ""
		},
		answered: func(t *testing.T, s *Server, _ []map[string]any) {
			for _, c := range s.ModelCalls() {
				assert.Equal(t, Redacted, c.Header.Get("X-Api-Key"), "the key is sent but never recorded")
			}
		},
		statuses: []int{http.StatusUnauthorized, http.StatusTooManyRequests},
		failed: func(t *testing.T, s *Server, status int, res cliResult, objs []map[string]any) {
			assert.NotEqual(t, 0, res.Exit, "an API %d must not look like success", status)
			result := lastOfType(objs, "result")
			require.NotNil(t, result, "no result line\n%s", res)
			assert.Equal(t, true, result["is_error"])
			assert.EqualValues(t, status, result["api_error_status"])
			assistant := lastOfType(objs, "assistant")
			require.NotNil(t, assistant, res.String())
			kind := map[int]string{http.StatusUnauthorized: "authentication_failed", http.StatusTooManyRequests: "rate_limit"}[status]
			assert.Equal(t, kind, assistant["error"])
			// CLAUDE_CODE_MAX_RETRIES=0 in ClaudeEnv: exactly one attempt, no backoff.
			assert.Len(t, s.ModelCalls(), 1)
		},
	},
	{
		name: "codex", capture: "codex-exec-json", timeout: 90 * time.Second, servers: []standIn{openai},
		setup: func(t *testing.T, s *Server, home string) ([]string, []string) {
			// Close to card's read-only argv, with the operator extras (the
			// stand-in provider) before the stdin marker.
			extras, extraEnv := s.CodexExtras()
			env := []string{"HOME=" + home, "PATH=" + nodePath(), "NO_COLOR=1"}
			for k, v := range extraEnv {
				env = append(env, k+"="+v)
			}
			args := []string{"exec", "--json", "--skip-git-repo-check", "--sandbox", "read-only", "-c", `approval_policy="never"`, "--color", "never"}
			return env, append(append(args, extras...), "-")
		},
		answer: func(objs []map[string]any) string {
			var answer string
			for _, o := range objs {
				if item, ok := o["item"].(map[string]any); ok && o["type"] == "item.completed" && item["type"] == "agent_message" {
					answer, _ = item["text"].(string)
				}
			}
			return answer
		},
		answered: func(t *testing.T, s *Server, objs []map[string]any) {
			assert.NotNil(t, lastOfType(objs, "turn.completed"))
			calls := s.ModelCalls()
			assert.Equal(t, "/v1/responses", calls[0].Path)
			assert.Equal(t, Redacted, calls[0].Header.Get("Authorization"))
		},
		statuses: []int{http.StatusUnauthorized, http.StatusTooManyRequests},
		failed: func(t *testing.T, s *Server, status int, res cliResult, objs []map[string]any) {
			assert.NotEqual(t, 0, res.Exit, "an API %d must not look like success", status)
			require.NotNil(t, lastOfType(objs, "turn.failed"), "no turn.failed line\n%s", res)
			assert.Contains(t, strings.ToLower(res.Stdout), strconv.Itoa(status))
			// request_max_retries=0 in CodexExtras: one attempt, no backoff.
			assert.Len(t, s.ModelCalls(), 1)
		},
	},
	{
		name: "gemini", capture: "gemini-stream", timeout: 120 * time.Second, servers: []standIn{gemini},
		setup: func(t *testing.T, s *Server, home string) ([]string, []string) {
			env, err := s.GeminiSetup(home, nodePath())
			require.NoError(t, err)
			// Close to card's read-only argv: headless JSON stream, the prompt
			// on stdin (no -p: the CLI runs headless when stdin is not a TTY).
			return env, []string{"-m", s.Model, "--output-format", "stream-json", "--approval-mode", "default", "--skip-trust"}
		},
		answer: func(objs []map[string]any) string {
			var answer string
			for _, o := range objs {
				if o["type"] == "message" && o["role"] == "assistant" {
					text, _ := o["content"].(string)
					answer += text
				}
			}
			return answer
		},
		answered: func(t *testing.T, s *Server, objs []map[string]any) {
			result := lastOfType(objs, "result")
			require.NotNil(t, result)
			assert.Equal(t, "success", result["status"])
			for _, c := range s.ModelCalls() {
				assert.Equal(t, Redacted, c.Header.Get("X-Goog-Api-Key"))
			}
		},
		statuses: []int{http.StatusUnauthorized, http.StatusTooManyRequests},
		failed: func(t *testing.T, s *Server, status int, res cliResult, _ []map[string]any) {
			assert.NotEqual(t, 0, res.Exit, "an API %d must not look like success", status)
			assert.NotEmpty(t, s.ModelCalls())
		},
	},
	{
		name: "copilot", capture: "copilot-json", timeout: 120 * time.Second,
		servers: []standIn{anthropic, openai}, via: " via copilot",
		setup: func(t *testing.T, s *Server, home string) ([]string, []string) {
			// Close to card's read-only argv (its tool allowlist): no
			// ask_user, writes denied, reads allowed, JSONL output, prompt on
			// stdin (never -p together with stdin).
			return s.CopilotEnv(home, nodePath()), []string{"--output-format", "json", "--no-ask-user", "--deny-tool", "write",
				"--allow-tool", "read", "--no-auto-update", "--no-custom-instructions", "--disable-builtin-mcps", "--no-color"}
		},
		answer: func(objs []map[string]any) string {
			var answer string
			for _, o := range objs {
				if o["type"] == "assistant.message" {
					answer, _ = o["data"].(map[string]any)["content"].(string)
				}
			}
			return answer
		},
		statuses: []int{http.StatusUnauthorized, http.StatusTooManyRequests},
		failed: func(t *testing.T, s *Server, status int, res cliResult, objs []map[string]any) {
			assert.Equal(t, 1, res.Exit, "an API %d must not look like success", status)
			serr := lastOfType(objs, "session.error")
			require.NotNil(t, serr, "no session.error line\n%s", res)
			data := serr["data"].(map[string]any)
			kind := map[int]string{http.StatusUnauthorized: "authentication", http.StatusTooManyRequests: "rate_limit"}[status]
			assert.Equal(t, kind, data["errorType"])
			assert.EqualValues(t, status, data["statusCode"])
			result := lastOfType(objs, "result")
			require.NotNil(t, result, res.String())
			assert.EqualValues(t, 1, result["exitCode"])
			// Copilot has no retry knob for BYOK: it retries 401 twice and 429
			// five times, about 1 s apart. Bounded, so the test just pays it.
			assert.NotEmpty(t, s.ModelCalls())
		},
	},
	{
		name: "droid", capture: "droid-exec-stream-json", timeout: 120 * time.Second,
		servers: []standIn{anthropic}, via: " via droid", binary: droidBinary,
		setup: func(t *testing.T, s *Server, home string) ([]string, []string) {
			env, sel, err := s.DroidSetup(home, nodePath())
			require.NoError(t, err)
			// Close to card's argv: exec in its default read-only autonomy
			// (never --auto or --skip-permissions-unsafe), stream-json output,
			// prompt on stdin.
			return env, append([]string{"exec", "-o", "stream-json"}, sel...)
		},
		answer: func(objs []map[string]any) string {
			s, _ := lastOfType(objs, "completion")["finalText"].(string)
			return s
		},
		// Only 401: Droid 0.225.2 retries a 429 with backoff for about 80 s
		// before failing the same way, and no retry knob was found
		// (docs/e2e-notes.md).
		statuses: []int{http.StatusUnauthorized},
		failed: func(t *testing.T, s *Server, status int, res cliResult, objs []map[string]any) {
			assert.Equal(t, 1, res.Exit, "an API %d must not look like success", status)
			var loopErr string
			for _, o := range objs {
				if o["type"] == "error" && o["source"] == "agent_loop" {
					loopErr, _ = o["message"].(string)
				}
			}
			assert.True(t, strings.HasPrefix(loopErr, strconv.Itoa(status)+" "), "agent_loop error names the status: %q", loopErr)
			assert.Nil(t, lastOfType(objs, "completion"), "a failed run has no completion line")
			assert.NotEmpty(t, s.ModelCalls())
		},
	},
	{
		name: "pi", capture: "pi-json", timeout: 120 * time.Second,
		servers: []standIn{anthropic, openai}, via: " via pi",
		setup: func(t *testing.T, s *Server, home string) ([]string, []string) {
			env, sel, err := s.PiSetup(home, nodePath())
			require.NoError(t, err)
			// Close to card's argv: print mode with the JSON event stream,
			// hermetic (no session file, no context files, extensions, skills
			// or prompt templates), a read-only tool list, prompt on stdin.
			args := []string{"-p", "--mode", "json", "--no-session", "-nc", "--no-extensions", "--no-skills", "--no-prompt-templates",
				"--offline", "--tools", "read,grep,find,ls"}
			return env, append(args, sel...)
		},
		answer:   piAnswer,
		statuses: []int{http.StatusUnauthorized, http.StatusTooManyRequests},
		failed: func(t *testing.T, s *Server, status int, res cliResult, objs []map[string]any) {
			// Pi 0.73 exits 0 after an API error in --mode json: the failure is
			// only in the stream, as an assistant message with stopReason
			// "error" and an errorMessage that starts with the HTTP status.
			// card's parser must look there; the exit code alone would report
			// success.
			end := lastOfType(objs, "message_end")
			require.NotNil(t, end, res.String())
			msg := end["message"].(map[string]any)
			assert.Equal(t, "error", msg["stopReason"])
			assert.True(t, strings.HasPrefix(msg["errorMessage"].(string), strconv.Itoa(status)+" "), msg["errorMessage"])
			// retry.enabled=false and provider.maxRetries=0 in PiSetup: one attempt.
			assert.Len(t, s.ModelCalls(), 1)
		},
	},
}

// run starts the stand-in with script, runs the CLI against it on
// "say pong" in a fresh HOME, captures what it printed, and returns it with
// the stream's JSON lines.
func (c realCLI) run(t *testing.T, bin string, server standIn, script Script, captureName string) (*Server, cliResult, []map[string]any) {
	t.Helper()
	s := server.start(t, script)
	home, project := sandbox(t)
	env, args := c.setup(t, s, home)
	res := runCLI(t, c.timeout, project, env, "say pong", bin, args...)
	t.Log(res)
	capture(t, captureName, home, res)
	return s, res, jsonLines(t, res.Stdout)
}

func (c realCLI) bin(t *testing.T) string {
	if c.binary != nil {
		return c.binary(t)
	}
	return cliPath(t, c.name)
}

func TestEachRealCLIAnswersWithTheStandInsScriptedText(t *testing.T) {
	for _, c := range realCLIs {
		t.Run(c.name, func(t *testing.T) {
			bin := c.bin(t)
			for _, server := range c.servers {
				name := c.capture + "-success"
				if len(c.servers) > 1 {
					name += "-" + server.name
				}
				t.Run(server.name, func(t *testing.T) {
					t.Parallel()
					answer := "PONG from the " + server.name + " stand-in" + c.via
					s, res, objs := c.run(t, bin, server, Script{Answer: answer}, name)
					require.Equal(t, 0, res.Exit, res.String())
					assert.Equal(t, answer, c.answer(objs))
					calls := s.ModelCalls()
					require.NotEmpty(t, calls, "%s never called the stand-in", c.name)
					var prompted bool
					for _, call := range calls {
						prompted = prompted || strings.Contains(string(call.Body), "say pong")
					}
					assert.True(t, prompted, "no model call carried the prompt")
					if c.answered != nil {
						c.answered(t, s, objs)
					}
				})
			}
		})
	}
}

func TestEachRealCLIReportsAScriptedAPIErrorAsAFailedRun(t *testing.T) {
	for _, c := range realCLIs {
		t.Run(c.name, func(t *testing.T) {
			bin := c.bin(t)
			for _, status := range c.statuses {
				t.Run(http.StatusText(status), func(t *testing.T) {
					t.Parallel()
					s, res, objs := c.run(t, bin, c.servers[0], Script{Status: status}, c.capture+"-"+strconv.Itoa(status))
					c.failed(t, s, status, res, objs)
				})
			}
		})
	}
}

// The npm package @factory/cli is only a launcher; the binary comes from a
// platform package (@factory/cli-linux-x64). When that is missing, as with
// the pinned 0.225.1 whose linux-x64 package was never published, the
// launcher exits 1 with this text: detection must report the install as
// unusable with that cause. Reproduced here from a copy of the launcher in a
// node_modules that holds nothing else, so it does not depend on what npm
// managed to install next to it.
func TestDroidLauncherWithoutItsPlatformPackageNamesTheMissingBinary(t *testing.T) {
	launcher := cliPath(t, "droid")
	pkg, err := filepath.EvalSymlinks(launcher)
	require.NoError(t, err)
	pkgDir := filepath.Dir(filepath.Dir(pkg)) // .../@factory/cli
	copyRoot := filepath.Join(t.TempDir(), "node_modules", "@factory", "cli")
	require.NoError(t, os.CopyFS(copyRoot, os.DirFS(pkgDir)))

	home, project := sandbox(t)
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is needed to run the droid launcher")
	res := runCLI(t, 30*time.Second, project, []string{"HOME=" + home, "PATH=" + nodePath()}, "", node,
		filepath.Join(copyRoot, "bin", "droid"), "--version")
	t.Log(res)
	capture(t, "droid-missing-platform-binary", home, res)
	assert.Equal(t, 1, res.Exit)
	assert.Empty(t, res.Stdout)
	assert.Contains(t, res.Stderr, "Error: Could not find the droid binary for linux-x64.")
	assert.Contains(t, res.Stderr, `the optional dependency "@factory/cli-linux-x64" was not installed`)
}

// droidBinary is a working droid: CARD_E2E_DROID_BIN (the platform package's
// bin/droid), else the launcher if its platform package is there.
func droidBinary(t *testing.T) string {
	launcher := cliPath(t, "droid")
	if p := os.Getenv("CARD_E2E_DROID_BIN"); p != "" {
		return p
	}
	if out, err := exec.Command(launcher, "--version").CombinedOutput(); err != nil {
		testskip.Skip(t, testskip.Gap{
			Why:    "no runnable droid platform binary",
			Enable: "set CARD_E2E_DROID_BIN to a platform binary (npm install @factory/cli-linux-x64 into a temp prefix)",
		}, fmt.Sprintf("DROID NOT RUNNABLE: %s --version: %v: %s", launcher, err, out))
	}
	return launcher
}

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

// piAnswer joins the assistant text of Pi's last message_end.
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
