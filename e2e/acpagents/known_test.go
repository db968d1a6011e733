package acpagents

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/e2e/standin"
)

// Gemini CLI and Copilot CLI, which card already runs over ACP, open a
// session in ways a generic adapter must read around: neither offers
// session/resume; Gemini offers no session list or close, refuses a
// privileged mode in a folder it does not trust, and names the session's
// model outside the schema; Copilot's mode ids are URLs and its allow-all
// switch is a config option of its own.
func TestGeminiAndCopilotOpenSessionsAsTheGenericAdapterMustRead(t *testing.T) {
	t.Run("gemini", func(t *testing.T) {
		t.Parallel()
		bin := standin.CLI(t, "gemini")
		s := standin.NewGemini(t, standin.Script{})
		pl := newPlace(t)
		env, err := s.GeminiSetup(pl.home, os.Getenv("PATH"))
		require.NoError(t, err)
		a := start(t, bin, []string{"--acp"}, pl.cwd, pl.home, env, policy{})
		init := a.initialize()
		caps := init.AgentCapabilities
		assert.True(t, caps.LoadSession)
		assert.Nil(t, caps.SessionCapabilities.Resume)
		assert.Nil(t, caps.SessionCapabilities.List)
		assert.Nil(t, caps.SessionCapabilities.Close)
		var methods []string
		for _, m := range init.AuthMethods {
			methods = append(methods, m.ID)
		}
		assert.Contains(t, methods, "gemini-api-key")
		ns := a.newSession(pl.cwd)
		require.NotNil(t, ns.Modes)
		assert.Equal(t, "default", ns.Modes.CurrentModeID)
		var ids []string
		for _, m := range ns.Modes.AvailableModes {
			ids = append(ids, m.ID)
		}
		assert.Equal(t, []string{"default", "autoEdit", "yolo", "plan"}, ids)
		assert.Empty(t, ns.ConfigOptions)
		require.NotNil(t, ns.Models)
		assert.Equal(t, s.Model, ns.Models.CurrentModelID)
		err = a.call(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: ns.SessionID, ModeID: "yolo"}, nil)
		var rpcErr *acp.Error
		require.ErrorAs(t, err, &rpcErr)
		assert.Equal(t, acp.CodeInternalError, rpcErr.Code)
		assert.Contains(t, string(rpcErr.Data), "Cannot enable privileged approval modes in an untrusted folder.")
		_, _, exited := a.closeStdin(15 * time.Second)
		assert.True(t, exited)
		a.capture("gemini-acp-session")
	})
	t.Run("copilot", func(t *testing.T) {
		t.Parallel()
		bin := standin.CLI(t, "copilot")
		s := standin.NewAnthropic(t, standin.Script{})
		pl := newPlace(t)
		a := start(t, bin, []string{"--acp", "--no-auto-update", "--no-color"}, pl.cwd, pl.home,
			append(s.CopilotEnv(pl.home, os.Getenv("PATH")), "COPILOT_ALLOW_ALL=false"), policy{})
		init := a.initialize()
		caps := init.AgentCapabilities
		assert.True(t, caps.LoadSession)
		assert.Nil(t, caps.SessionCapabilities.Resume)
		assert.NotNil(t, caps.SessionCapabilities.List)
		assert.NotNil(t, caps.SessionCapabilities.Close)
		require.NotNil(t, caps.Auth)
		assert.NotNil(t, caps.Auth.Logout)
		assert.False(t, caps.PromptCapabilities.Audio)
		ns := a.newSession(pl.cwd)
		require.NotNil(t, ns.Modes)
		const modes = "https://agentclientprotocol.com/protocol/session-modes#"
		assert.Equal(t, modes+"agent", ns.Modes.CurrentModeID)
		var ids []string
		for _, m := range ns.Modes.AvailableModes {
			ids = append(ids, m.ID)
		}
		assert.Equal(t, []string{modes + "agent", modes + "plan", modes + "autopilot"}, ids)
		allowAll, values := selectValues(t, ns.ConfigOptions, "allow_all")
		assert.Equal(t, "off", allowAll)
		assert.Equal(t, []string{"on", "off"}, values)
		mode, _ := selectValues(t, ns.ConfigOptions, "mode")
		assert.Equal(t, modes+"agent", mode)
		_, _, exited := a.closeStdin(15 * time.Second)
		assert.True(t, exited)
		a.capture("copilot-acp-session")
	})
}
