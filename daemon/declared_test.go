package daemon_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/fakeacp"
)

func TestADeclarationCardCannotRunAsItSaysIsRefusedAtLoadNamingItsKey(t *testing.T) {
	for _, tc := range []struct {
		name, toml, want string
	}{
		{"a built-in id", `[agents.gemini]
name = "G"
command = ["gemini", "--acp"]`, `[agents.gemini]: "gemini" is a built-in adapter`},
		{"an empty command", `[agents.mine]
name = "Mine"
command = []`, "[agents.mine] command: empty"},
		{"a flag card owns", `[agents.mine]
name = "Mine"
command = ["mine", "--acp", "--yolo"]`, "[agents.mine] command[2]"},
		{"a bad id", `[agents.Mine_Agent]
name = "Mine"
command = ["mine"]`, `[agents.Mine_Agent]: "Mine_Agent" is not an agent id`},
		{"no name", `[agents.mine]
command = ["mine"]`, "[agents.mine] name: empty"},
		{"a guard variable in env", `[agents.mine]
name = "Mine"
command = ["mine"]
env = { CAR_INVOKED_BY = "x" }`, `[agents.mine] env: key "CAR_INVOKED_BY"`},
		{"an unknown key", `[agents.mine]
name = "Mine"
command = ["mine"]
args = ["--x"]`, "agents.mine.args"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := daemon.ParseConfig("card.toml", tc.toml)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := daemon.ParseConfig("card.toml", "[agents.mine]\nname = \"Mine\"\ncommand = [\"mine\", \"--acp\"]\nversion_args = [\"--version\"]\nenv = { MINE_URL = \"http://127.0.0.1:1\" }\n[adapters.mine]\nbin = \"/opt/mine\"\n[budget.adapters.mine]\ndaily_tokens = 100\n")
	assert.NoError(t, err, "a good declaration, pinned and budgeted, loads")
}

// declaredDaemon starts a daemon with the fake ACP agent declared as id.
func declaredDaemon(t *testing.T, id string, opts client.Options) (*daemontest.Daemon, string) {
	t.Helper()
	bin := fakeacp.Install(t, t.TempDir(), "fake-acp")
	t.Cleanup(func() { agent.Forget(id) })
	home := t.TempDir()
	td := daemontest.Start(t, daemontest.Options{
		Config:  "login_shell_path = false\nallow_bypass = true\n[agents." + id + "]\nname = \"Fake ACP\"\ncommand = [\"fake-acp\", \"--acp\"]\nversion_args = [\"--version\"]\n",
		Environ: []string{agent.PinEnvOf(id) + "=" + bin, "HOME=" + home},
		Client:  opts,
	})
	return td, home
}

func TestADeclaredACPAgentIsDetectedCheckedAndRunOneShotWithinItsMode(t *testing.T) {
	td, _ := declaredDaemon(t, "fake-oneshot", client.Options{})
	ctx := daemontest.Context(t)
	specs, err := td.Client.Detect(ctx, api.DetectParams{})
	require.NoError(t, err)
	var found *api.ExternalAgentSpec
	for i := range specs {
		if specs[i].ID == "fake-oneshot" {
			found = &specs[i]
		}
	}
	require.NotNil(t, found, "the declared agent is detected")
	assert.Equal(t, fakeacp.Version, found.Version)
	assert.Equal(t, api.NotEnforced, found.ReadOnlyEnforcement)
	h, err := td.Client.Health(ctx, "fake-oneshot", true)
	require.NoError(t, err)
	assert.Equal(t, api.StatusReady, h.Status, "an agent that offers no sign-in needs none: %s", h.Reason)

	cwd := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside.txt")
	task := "WRITE " + filepath.Join(cwd, "inside.txt") + " in\nWRITE " + outside + " out\nRUN echo ran > " + filepath.Join(cwd, "ran.txt") + "\nhello"
	_, err = td.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "fake-oneshot", Cwd: cwd, PermissionMode: "edit"}, Task: task})
	require.Error(t, err, "edit on an agent that may write unasked needs the acknowledgement")
	assert.Contains(t, err.Error(), "acknowledge_unenforced_edit")
	assert.Equal(t, api.NotEnforced, found.EditEnforcement)
	res, err := td.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "fake-oneshot", Cwd: cwd, PermissionMode: "edit", AcknowledgeUnenforcedEdit: true}, Task: task})
	require.NoError(t, err)
	require.Equal(t, api.StatusSucceeded, res.Status, "%+v", res.Error)
	assert.Contains(t, res.Answer, "turn 1: hello")
	assert.FileExists(t, filepath.Join(cwd, "inside.txt"), "edit allows a write inside the cwd")
	assert.NoFileExists(t, outside, "edit refuses a write outside the cwd")
	assert.NoFileExists(t, filepath.Join(cwd, "ran.txt"), "edit runs no command")
	assert.Equal(t, int64(10), res.Usage.InputTokens)

	_, err = td.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "fake-oneshot", Cwd: cwd}, Task: "hi"})
	require.Error(t, err, "read_only on an agent card cannot hold needs the acknowledgement")
	assert.Contains(t, err.Error(), "acknowledge_unenforced_read_only")
	res, err = td.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "fake-oneshot", Cwd: cwd, AcknowledgeUnenforcedReadOnly: true},
		Task: "WRITE " + filepath.Join(cwd, "ro.txt") + " x\nRUN echo ran > " + filepath.Join(cwd, "ro-ran.txt")})
	require.NoError(t, err)
	assert.NoFileExists(t, filepath.Join(cwd, "ro.txt"), "read_only refuses an edit")
	assert.NoFileExists(t, filepath.Join(cwd, "ro-ran.txt"), "read_only refuses a command")
	assert.Contains(t, res.Answer, "WRITE denied")

	res, err = td.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "fake-oneshot", Cwd: cwd, PermissionMode: "bypass"},
		Task: "RUN echo ran > " + filepath.Join(cwd, "by-ran.txt")})
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(cwd, "by-ran.txt"), "bypass allows: %s", res.Answer)
}

func TestADeclaredACPAgentsQuestionReachesTheClientInAskModeAndADenialHolds(t *testing.T) {
	asked := make(chan api.ApproveParams, 4)
	td, _ := declaredDaemon(t, "fake-ask", client.Options{OnApprove: func(_ context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
		asked <- q
		return api.ApproveAnswer{Decision: "deny", Message: "no"}, nil
	}})
	ctx := daemontest.Context(t)
	cwd := t.TempDir()
	res, err := td.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "fake-ask", Cwd: cwd, PermissionMode: "ask"},
		Task: "WRITE " + filepath.Join(cwd, "f.txt") + " x"})
	require.NoError(t, err)
	require.Len(t, asked, 1, "the question reached the client")
	q := <-asked
	assert.Equal(t, "fake-ask", q.Adapter)
	assert.Equal(t, "edit", q.Tool.Name)
	assert.NoFileExists(t, filepath.Join(cwd, "f.txt"), "the denial is honoured")
	assert.Contains(t, res.Answer, "WRITE denied")
}

func TestADeclaredACPAgentsSessionCarriesItsTurnsWarmAndAcrossProcesses(t *testing.T) {
	td, _ := declaredDaemon(t, "fake-session", client.Options{})
	ctx := daemontest.Context(t)
	cwd := t.TempDir()
	for _, warm := range []bool{true, false} {
		s, err := td.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "fake-session", Cwd: cwd, PermissionMode: "edit", AcknowledgeUnenforcedEdit: true}, Warm: warm})
		require.NoError(t, err)
		var answers []string
		for i, task := range []string{"first", "second"} {
			p, err := td.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: task})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				r, err := td.Client.Run(ctx, p.RunID)
				return err == nil && r.Status != api.StatusRunning
			}, 20*time.Second, 20*time.Millisecond)
			r, err := td.Client.Run(ctx, p.RunID)
			require.NoError(t, err)
			require.Equal(t, api.StatusSucceeded, r.Status, "turn %d: %+v", i+1, r.Error)
			answers = append(answers, r.Answer)
			waitSessionIdle(t, td.Client, s.SessionID)
		}
		assert.True(t, strings.HasPrefix(answers[1], "turn 2: second"), "warm=%v: the second turn carries the first: %q", warm, answers[1])
		got, err := td.Client.Session(ctx, s.SessionID)
		require.NoError(t, err)
		assert.NotEmpty(t, got.AgentSessionID)
	}
}
