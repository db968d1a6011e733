package acpagents

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/e2e/standin"
)

// agentCLI is one ACP-speaking CLI, pointed at the OpenAI stand-in.
type agentCLI struct {
	// name is its binary, and the prefix of its fixtures.
	name string
	// args start it as an ACP agent on stdio.
	args []string
	// env is its complete environment against s from home; extra is
	// merged into OpenCode's config (its permission table) and must be
	// nil for Qwen Code, which takes none.
	env func(t *testing.T, s *standin.Server, home string, extra map[string]any) []string
	// setMode puts a session in one of the agent's own modes, the way it
	// offers them.
	setMode func(a *agentProc, sid, mode string) error
	// write and shell are its model's tool calls that write path and run
	// command.
	write func(path string) standin.ToolCall
	shell func(command string) standin.ToolCall
}

var opencode = agentCLI{
	name: "opencode", args: []string{"acp"},
	env: func(t *testing.T, s *standin.Server, home string, extra map[string]any) []string {
		env, err := s.OpenCodeEnv(home, os.Getenv("PATH"), extra)
		require.NoError(t, err)
		return env
	},
	// OpenCode offers its modes (its primary agents) as the "mode" config
	// option, and no modes field; it takes session/set_mode as well.
	setMode: func(a *agentProc, sid, mode string) error {
		return a.call(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: sid, ConfigID: "mode", Value: mode}, nil)
	},
	write: func(path string) standin.ToolCall {
		return standin.ToolCall{Name: "write", Input: map[string]any{"filePath": path, "content": planted}}
	},
	shell: func(command string) standin.ToolCall {
		return standin.ToolCall{Name: "bash", Input: map[string]any{"command": command, "description": "Run it"}}
	},
}

var qwen = agentCLI{
	name: "qwen", args: []string{"--acp"},
	env: func(t *testing.T, s *standin.Server, home string, extra map[string]any) []string {
		require.Nil(t, extra, "Qwen Code takes no config from the test")
		env, err := s.QwenSetup(home, os.Getenv("PATH"))
		require.NoError(t, err)
		return env
	},
	setMode: func(a *agentProc, sid, mode string) error {
		return a.call(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: sid, ModeID: mode}, nil)
	},
	write: func(path string) standin.ToolCall {
		return standin.ToolCall{Name: "write_file", Input: map[string]any{"file_path": path, "content": planted}}
	},
	shell: func(command string) standin.ToolCall {
		return standin.ToolCall{Name: "run_shell_command", Input: map[string]any{"command": command, "description": "Run it"}}
	},
}

// planted is what every scripted write puts in its file.
const planted = "planted by the stand-in model\n"

// place is a fresh HOME with a project (the session's cwd) and, beside
// it, a directory the agent is not working in.
type place struct{ home, cwd, outside string }

func newPlace(t *testing.T) place {
	home := t.TempDir()
	p := place{home: home, cwd: filepath.Join(home, "project"), outside: filepath.Join(home, "outside")}
	require.NoError(t, os.MkdirAll(p.cwd, 0o755))
	require.NoError(t, os.MkdirAll(p.outside, 0o755))
	return p
}

// run starts c against s in pl, with the policy.
func (c agentCLI) run(t *testing.T, s *standin.Server, pl place, extra map[string]any, pol policy) *agentProc {
	t.Helper()
	bin := standin.CLI(t, c.name)
	return start(t, bin, c.args, pl.cwd, pl.home, c.env(t, s, pl.home, extra), pol)
}

// selectValues is the values of a select config option.
func selectValues(t *testing.T, opts []acp.SessionConfigOption, id string) (current any, values []string) {
	t.Helper()
	for _, o := range opts {
		if o.ID != id {
			continue
		}
		var vs []acp.SessionConfigSelectOption
		require.NoError(t, json.Unmarshal(o.Options, &vs), "config option %s", id)
		for _, v := range vs {
			values = append(values, v.Value)
		}
		return o.CurrentValue, values
	}
	t.Fatalf("no config option %q in %+v", id, opts)
	return nil, nil
}

// permissionKinds is the kind of every session/request_permission the
// agent sent, in order.
func permissionKinds(asked []*acp.Message) []acp.ToolKind {
	var kinds []acp.ToolKind
	for _, m := range asked {
		if m.Method != acp.MethodSessionRequestPermission {
			continue
		}
		var req acp.RequestPermissionRequest
		if json.Unmarshal(m.Params, &req) == nil {
			kinds = append(kinds, req.ToolCall.Kind)
		}
	}
	return kinds
}

// requested is how many requests of method the agent sent.
func requested(asked []*acp.Message, method string) int {
	n := 0
	for _, m := range asked {
		if m.Method == method {
			n++
		}
	}
	return n
}

// mainCalls are the stand-in's model calls that offered tools: the
// agent's turn, not its side calls (OpenCode's title, Qwen Code's
// classifier).
func mainCalls(s *standin.Server) []standin.Recorded {
	var out []standin.Recorded
	for _, r := range s.ModelCalls() {
		var req struct {
			Tools []json.RawMessage `json:"tools"`
		}
		if r.JSON(&req) == nil && len(req.Tools) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// bodyHas says whether any of the calls carries s.
func bodyHas(calls []standin.Recorded, s string) bool {
	for _, c := range calls {
		if strings.Contains(string(c.Body), s) {
			return true
		}
	}
	return false
}
