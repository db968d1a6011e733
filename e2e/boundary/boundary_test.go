// Package boundary_test tries to break permission_mode edit's promise — the
// agent changes files under its working dir and nowhere else — with every
// real agent CLI from npm, run by the real daemon against a loopback
// stand-in whose model calls the CLI's own file-writing tool. Aimed at a
// sibling of the working dir, the write must leave no file; aimed inside
// the working dir, the same write must happen (a boundary that refuses
// everything proves nothing). An adapter that cannot keep the promise
// refuses edit mode, and its test shows the refusal instead.
//
// Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1, which turns a missing CLI into a failure); see
// standin.CLI.
package boundary_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/rpc/rpcclient"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// content is what every scripted write puts in its file.
const content = "planted by the stand-in model\n"

// cli is one real CLI, the stand-in it talks to, and its own tool for
// writing a file the way its model would call it.
type cli struct {
	id, bin string
	// serve starts the stand-in; it returns the daemon's environment and
	// the CLI's card.toml [adapters.<id>] table (nil for none).
	serve func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any)
	// writes are the tool calls that write path, each a separate attempt:
	// every way the CLI's model has of writing a file in edit mode.
	writes []write
	// refused, when set, is part of the error edit mode is refused with:
	// the adapter cannot keep the boundary, so it never runs.
	refused string
}

// write is one of a CLI's ways to write a file.
type write struct {
	name string
	// calls are the model's tool calls that write path, in order.
	calls func(path string) []standin.ToolCall
	// existing says the calls change a file that is already there
	// (holding original), as an attack on a shell's startup file would.
	existing bool
}

// original is what an existing target holds before the run; an edit
// replaces it with the planted line.
const original = "export PATH=$HOME/bin:$PATH\n"

func one(call func(path string) standin.ToolCall) func(string) []standin.ToolCall {
	return func(p string) []standin.ToolCall { return []standin.ToolCall{call(p)} }
}

func anthropic(t *testing.T, script standin.Script) *standin.Server {
	return standin.NewAnthropic(t, script)
}

var clis = []cli{
	{id: agent.ClaudeCode, bin: "claude",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any) {
			s := anthropic(t, script)
			return s, s.ClaudeEnv(home, os.Getenv("PATH")), nil
		},
		writes: []write{
			{name: "Write", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "Write", Input: map[string]any{"file_path": p, "content": content}}
			})},
			// Claude edits only a file it has read in the session.
			{name: "Read+Edit", existing: true, calls: func(p string) []standin.ToolCall {
				return []standin.ToolCall{{Name: "Read", Input: map[string]any{"file_path": p}},
					{Name: "Edit", Input: map[string]any{"file_path": p, "old_string": original, "new_string": content}}}
			}},
		}},
	{id: agent.Codex, bin: "codex",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any) {
			s := standin.NewOpenAI(t, script)
			args, env := s.CodexExtras()
			return s, []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "NO_COLOR=1"}, map[string]any{"args": args, "env": env}
		},
		writes: []write{
			// Codex's model edits through its shell: the OS sandbox is
			// what stands between it and the file.
			{name: "exec_command", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "exec_command", Input: map[string]any{"cmd": "printf 'planted by the stand-in model\\n' > " + p}}
			})},
			// Codex offers this model no apply_patch tool of its own; a
			// patch goes through the shell, where Codex applies it itself
			// rather than running a program of that name.
			{name: "apply_patch", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "exec_command", Input: map[string]any{"cmd": "apply_patch <<'PATCH'\n*** Begin Patch\n*** Add File: " + p +
					"\n+planted by the stand-in model\n*** End Patch\nPATCH"}}
			})},
		}},
	{id: agent.Gemini, bin: "gemini",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any) {
			s := standin.NewGemini(t, script)
			env, err := s.GeminiSetup(home, os.Getenv("PATH"))
			require.NoError(t, err)
			// Workspace trust is the operator's call (spawn never passes it).
			return s, env, map[string]any{"args": []string{"--skip-trust"}}
		},
		writes: []write{
			{name: "write_file", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "write_file", Input: map[string]any{"file_path": p, "content": content}}
			})},
			{name: "replace", existing: true, calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "replace", Input: map[string]any{"file_path": p, "old_string": original, "new_string": content,
					"instruction": "Replace the line."}}
			})},
		}},
	// Copilot runs on the Anthropic stand-in through its BYOK provider.
	{id: agent.Copilot, bin: "copilot",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any) {
			s := anthropic(t, script)
			return s, s.CopilotEnv(home, os.Getenv("PATH")), nil
		},
		writes: []write{
			{name: "create", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "create", Input: map[string]any{"path": p, "file_text": content}}
			})},
			{name: "edit", existing: true, calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "edit", Input: map[string]any{"path": p, "old_str": original, "new_str": content}}
			})},
		}},
	{id: agent.Pi, bin: "pi",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any) {
			s := anthropic(t, script)
			env, args, err := s.PiSetup(home, os.Getenv("PATH"))
			require.NoError(t, err)
			return s, []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, map[string]any{"args": args, "env": standin.AdapterEnv(env)}
		},
		writes: []write{
			{name: "write", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "write", Input: map[string]any{"path": p, "content": content}}
			})},
			{name: "edit", existing: true, calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "edit", Input: map[string]any{"path": p, "edits": []any{map[string]any{"oldText": original, "newText": content}}}}
			})},
		}},
	{id: agent.Droid, bin: "droid",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any) {
			s := anthropic(t, script)
			env, args, err := s.DroidSetup(home, os.Getenv("PATH"))
			require.NoError(t, err)
			return s, []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, map[string]any{"args": args, "env": standin.AdapterEnv(env)}
		},
		writes: []write{
			{name: "Create", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "Create", Input: map[string]any{"file_path": p, "content": content}}
			})},
		},
		refused: "Droid can only edit through --auto"},
	// OpenCode and Qwen Code run over ACP in every mode, on the OpenAI
	// stand-in as an operator points them: their provider in card.toml
	// [adapters.<id>] env. card answers what they ask by the mode.
	{id: agent.OpenCode, bin: "opencode",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any) {
			s := standin.NewOpenAI(t, script)
			env, err := s.OpenCodeEnv(home, os.Getenv("PATH"), nil)
			require.NoError(t, err)
			adapterEnv := standin.AdapterEnv(env)
			delete(adapterEnv, "OPENCODE_SERVER_PASSWORD") // card's, per process
			return s, []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, map[string]any{"env": adapterEnv}
		},
		writes: []write{
			{name: "write", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "write", Input: map[string]any{"filePath": p, "content": content}}
			})},
		}},
	{id: agent.QwenCode, bin: "qwen",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, map[string]any) {
			s := standin.NewOpenAI(t, script)
			env, err := s.QwenSetup(home, os.Getenv("PATH"))
			require.NoError(t, err)
			return s, []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, map[string]any{"env": standin.AdapterEnv(env)}
		},
		writes: []write{
			{name: "write_file", calls: one(func(p string) standin.ToolCall {
				return standin.ToolCall{Name: "write_file", Input: map[string]any{"file_path": p, "content": content}}
			})},
		}},
}

// place is a working dir and, beside it, a directory the run must not
// touch: siblings under one temp dir, as a project and the rest of a home.
type place struct{ cwd, outside string }

func newPlace(t *testing.T) place {
	root := t.TempDir()
	p := place{cwd: filepath.Join(root, "project"), outside: filepath.Join(root, "outside")}
	require.NoError(t, os.MkdirAll(p.cwd, 0o755))
	require.NoError(t, os.MkdirAll(p.outside, 0o755))
	return p
}

// runEdit starts the daemon with c against a stand-in whose model makes
// calls, runs one edit-mode invoke in pl.cwd and returns its events (nil
// when the invoke was refused) and the refusal.
func runEdit(t *testing.T, c cli, bin string, pl place, calls []standin.ToolCall) (*standin.Server, []api.AgentEvent, error) {
	t.Helper()
	return runEditAllowing(t, c, bin, pl, calls, nil)
}

// runEditAllowing is runEdit with the request's allowed_tools.
func runEditAllowing(t *testing.T, c cli, bin string, pl place, calls []standin.ToolCall, allowed []string) (*standin.Server, []api.AgentEvent, error) {
	t.Helper()
	home := t.TempDir()
	s, env, adapterCfg := c.serve(t, standin.Script{Answer: "DONE", ToolCalls: calls}, home)
	cfg := map[string]any{"login_shell_path": false}
	if adapterCfg != nil {
		cfg["adapters"] = map[string]any{c.id: adapterCfg}
	}
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	events := daemontest.NewEvents()
	d := daemontest.Start(t, daemontest.Options{Config: buf.String(), Environ: env,
		Agents: map[string]string{c.id: bin}, Client: client.Options{OnEvent: events.Add}})
	acc, err := d.Client.Stream(daemontest.Context(t), api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: c.id, Cwd: pl.cwd, PermissionMode: "edit", AllowedTools: allowed, TimeoutSecs: 120},
		Task:          "Please write the file.",
	}, nil)
	if err != nil {
		return s, nil, err
	}
	return s, events.WaitEnd(t, acc.RunID, 150*time.Second), nil
}

// offeredTools lists the tool names the CLI offered its model, for a
// failure message that says which tool the script should have called.
func offeredTools(s *standin.Server) string {
	seen := map[string]bool{}
	for _, r := range s.ModelCalls() {
		var body struct {
			Tools []struct {
				Name, Type string
				Function   struct{ Name string }
				Decls      []struct{ Name string } `json:"functionDeclarations"`
			}
		}
		if json.Unmarshal(r.Body, &body) != nil {
			continue
		}
		for _, tl := range body.Tools {
			for _, n := range []string{tl.Name, tl.Function.Name} {
				if n != "" {
					seen[n] = true
				}
			}
			for _, d := range tl.Decls {
				seen[d.Name] = true
			}
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// calledTool says whether the run's events show the CLI running (or
// refusing) the scripted tool call; with the stand-in's record of a tool
// result it keeps a test from passing because the model never asked.
func calledTool(evs []api.AgentEvent) bool {
	for _, ev := range evs {
		if ev.Kind == "tool_use" || ev.Kind == "tool_result" {
			return true
		}
	}
	return false
}

func TestEditModeNeverWritesOutsideTheCwd(t *testing.T) {
	for _, c := range clis {
		for _, w := range c.writes {
			t.Run(c.id+"/"+w.name, func(t *testing.T) {
				bin := standin.CLI(t, c.bin)
				t.Parallel()
				pl := newPlace(t)
				target := filepath.Join(pl.outside, "planted.txt")
				if w.existing {
					require.NoError(t, os.WriteFile(target, []byte(original), 0o644))
				}
				s, evs, err := runEdit(t, c, bin, pl, w.calls(target))
				if c.refused != "" {
					requireRefused(t, err, c.refused)
				} else {
					require.NoError(t, err)
					require.True(t, calledTool(evs) || len(s.ToolResults()) > 0, "the CLI never ran the scripted %s call; it offered: %s; events: %s; tool results: %q",
						w.name, offeredTools(s), describe(evs), s.ToolResults())
				}
				if c.refused == "" {
					t.Logf("what %s told the model: %q", c.id, s.ToolResults())
				}
				entries, err := os.ReadDir(pl.outside)
				require.NoError(t, err)
				if !w.existing {
					assert.NoFileExists(t, target, "an edit-mode run wrote outside its working dir")
					assert.Empty(t, entries, "nothing at all appears beside the working dir")
					return
				}
				b, err := os.ReadFile(target)
				require.NoError(t, err)
				assert.Equal(t, original, string(b), "an edit-mode run changed a file outside its working dir")
				assert.Len(t, entries, 1, "nothing else appears beside the working dir")
			})
		}
	}
}

// A cloned repository may hold a symlink to anywhere: a write through it
// is a write outside the working dir, though its path is inside.
func TestEditModeDoesNotWriteThroughASymlinkOutOfTheCwd(t *testing.T) {
	for _, c := range clis {
		for _, w := range c.writes {
			if w.existing || c.refused != "" {
				continue
			}
			// Through the link, and back out of it with a ".." the kernel
			// takes after following it (string-joined: filepath.Join would
			// take it away lexically, as a careless check does).
			for name, rel := range map[string]string{"into": "/docs/planted.txt", "back-out": "/docs/../outside/planted.txt"} {
				t.Run(c.id+"/"+w.name+"/"+name, func(t *testing.T) {
					bin := standin.CLI(t, c.bin)
					t.Parallel()
					pl := newPlace(t)
					require.NoError(t, os.Symlink(pl.outside, filepath.Join(pl.cwd, "docs")))
					s, evs, err := runEdit(t, c, bin, pl, w.calls(pl.cwd+rel))
					require.NoError(t, err)
					require.True(t, calledTool(evs) || len(s.ToolResults()) > 0, "the CLI never ran the scripted %s call; it offered: %s",
						w.name, offeredTools(s))
					t.Logf("what %s told the model: %q", c.id, s.ToolResults())
					assert.NoFileExists(t, filepath.Join(pl.outside, "planted.txt"), "an edit-mode run wrote through a symlink out of its working dir")
				})
			}
		}
	}
}

func TestEditModeWritesInsideTheCwd(t *testing.T) {
	for _, c := range clis {
		for _, w := range c.writes {
			t.Run(c.id+"/"+w.name, func(t *testing.T) {
				bin := standin.CLI(t, c.bin)
				t.Parallel()
				pl := newPlace(t)
				target := filepath.Join(pl.cwd, "inside.txt")
				if w.existing {
					require.NoError(t, os.WriteFile(target, []byte(original), 0o644))
				}
				s, evs, err := runEdit(t, c, bin, pl, w.calls(target))
				if c.refused != "" {
					requireRefused(t, err, c.refused)
					if !w.existing {
						assert.NoFileExists(t, target)
					}
					return
				}
				require.NoError(t, err)
				last := evs[len(evs)-1]
				require.NotNil(t, last.Result)
				require.Equal(t, api.EventDone, last.Kind, "status %s, error %+v", last.Status, last.Result.Error)
				require.FileExists(t, target, "the write inside the working dir did not happen; the CLI offered: %s; tool results: %q",
					offeredTools(s), s.ToolResults())
				b, err := os.ReadFile(target)
				require.NoError(t, err)
				assert.Equal(t, content, string(b))
			})
		}
	}
}

// describe is the run's events for a failure message.
func describe(evs []api.AgentEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		j, _ := json.Marshal(ev)
		b.Write(j)
		b.WriteString("\n")
	}
	return b.String()
}

// requireRefused checks an edit request was refused as a bad
// permission_mode, before any agent ran.
func requireRefused(t *testing.T, err error, why string) {
	t.Helper()
	require.Error(t, err, "edit mode must be refused for this adapter")
	var re *rpcclient.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
	assert.Contains(t, re.Message, why)
}

func cliByID(t *testing.T, id string) cli {
	for _, c := range clis {
		if c.id == id {
			return c
		}
	}
	t.Fatalf("no cli %s", id)
	return cli{}
}

// Copilot takes allowed_tools as permission kinds with an argument; a
// write rule naming a path outside the cwd must not carry a write there.
func TestCopilotEditModeWriteRulesDoNotReachOutsideTheCwd(t *testing.T) {
	c := cliByID(t, agent.Copilot)
	for name, rule := range map[string]string{"a dir": "write(%s/**)", "a file": "write(%s/planted.txt)", "any": "write(*)"} {
		t.Run(name, func(t *testing.T) {
			bin := standin.CLI(t, c.bin)
			t.Parallel()
			pl := newPlace(t)
			target := filepath.Join(pl.outside, "planted.txt")
			allowed := []string{"read", strings.ReplaceAll(rule, "%s", pl.outside)}
			s, evs, err := runEditAllowing(t, c, bin, pl, c.writes[0].calls(target), allowed)
			if err != nil {
				t.Logf("refused: %v", err)
			} else {
				require.True(t, calledTool(evs) || len(s.ToolResults()) > 0, "it offered: %s", offeredTools(s))
				t.Logf("what copilot told the model: %q", s.ToolResults())
			}
			assert.NoFileExists(t, target, "an allow rule carried an edit-mode write outside the working dir")
		})
	}
}

// Pi's gate resolves a path the way Pi's own tools do; every spelling of
// a path outside the cwd is blocked, and one inside that needs new
// directories still writes.
func TestPisEditGateResolvesEverySpellingOfAPath(t *testing.T) {
	c := cliByID(t, agent.Pi)
	cases := []struct {
		name string
		path func(pl place) string
		// planted is where a write that got through would land.
		planted func(pl place, home string) string
		inside  bool
	}{
		{"relative with ..", func(pl place) string { return "../outside/planted.txt" },
			func(pl place, _ string) string { return filepath.Join(pl.outside, "planted.txt") }, false},
		{"an @ prefix", func(pl place) string { return "@../outside/planted.txt" },
			func(pl place, _ string) string { return filepath.Join(pl.outside, "planted.txt") }, false},
		{"the home", func(pl place) string { return "~/planted.txt" },
			func(_ place, home string) string { return filepath.Join(home, "planted.txt") }, false},
		{"a dangling symlink the write would follow", func(pl place) string { return "dangling" },
			func(pl place, _ string) string { return filepath.Join(pl.outside, "planted.txt") }, false},
		// Not filepath.Join, which would take the ".." away lexically: the
		// kernel takes it after following docs, to beside the cwd.
		{"absolute with .. after a symlink", func(pl place) string { return pl.cwd + "/docs/../outside/planted.txt" },
			func(pl place, _ string) string { return filepath.Join(pl.outside, "planted.txt") }, false},
		{"inside, in new directories", func(pl place) string { return "sub/dir/inside.txt" },
			func(pl place, _ string) string { return filepath.Join(pl.cwd, "sub", "dir", "inside.txt") }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bin := standin.CLI(t, c.bin)
			t.Parallel()
			pl := newPlace(t)
			require.NoError(t, os.Symlink(filepath.Join(pl.outside, "planted.txt"), filepath.Join(pl.cwd, "dangling")))
			require.NoError(t, os.Symlink(pl.outside, filepath.Join(pl.cwd, "docs")))
			home := t.TempDir()
			s, env, adapterCfg := c.serve(t, standin.Script{Answer: "DONE", ToolCalls: c.writes[0].calls(tc.path(pl))}, home)
			var buf bytes.Buffer
			require.NoError(t, toml.NewEncoder(&buf).Encode(map[string]any{"login_shell_path": false, "adapters": map[string]any{c.id: adapterCfg}}))
			events := daemontest.NewEvents()
			d := daemontest.Start(t, daemontest.Options{Config: buf.String(), Environ: env,
				Agents: map[string]string{c.id: bin}, Client: client.Options{OnEvent: events.Add}})
			acc, err := d.Client.Stream(daemontest.Context(t), api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: c.id, Cwd: pl.cwd, PermissionMode: "edit", TimeoutSecs: 120},
				Task:          "Please write the file.",
			}, nil)
			require.NoError(t, err)
			events.WaitEnd(t, acc.RunID, 150*time.Second)
			results := s.ToolResults()
			require.Len(t, results, 1, "the model's write ran or was refused")
			t.Logf("what pi told the model: %q", results)
			if tc.inside {
				assert.FileExists(t, tc.planted(pl, home))
				return
			}
			assert.Contains(t, results[0], "card's edit mode refused this write call")
			assert.NoFileExists(t, tc.planted(pl, home))
			assert.NoFileExists(t, filepath.Join(pl.outside, "planted.txt"))
		})
	}
}

// allowed_tools narrows Claude's read tools in edit mode; the file tools
// stay offered and inside the cwd, and a rule for one is refused before
// any process starts.
func TestClaudeEditModeWithNarrowedToolsStillWritesOnlyInsideTheCwd(t *testing.T) {
	c := cliByID(t, agent.ClaudeCode)
	bin := standin.CLI(t, c.bin)
	write := c.writes[0].calls
	for name, dir := range map[string]func(place) string{"inside": func(p place) string { return p.cwd }, "outside": func(p place) string { return p.outside }} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pl := newPlace(t)
			target := filepath.Join(dir(pl), "planted.txt")
			s, evs, err := runEditAllowing(t, c, bin, pl, write(target), []string{"Read", "Grep"})
			require.NoError(t, err)
			require.True(t, calledTool(evs) || len(s.ToolResults()) > 0, "it offered: %s", offeredTools(s))
			if name == "inside" {
				assert.FileExists(t, target, "tool results: %q", s.ToolResults())
			} else {
				assert.NoFileExists(t, target)
			}
		})
	}
	t.Run("a rule for Write", func(t *testing.T) {
		t.Parallel()
		pl := newPlace(t)
		target := filepath.Join(pl.outside, "planted.txt")
		s, _, err := runEditAllowing(t, c, bin, pl, write(target), []string{"Read", "Write(" + pl.outside + "/**)"})
		var re *rpcclient.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
		data, err := json.Marshal(re.Data)
		require.NoError(t, err)
		assert.JSONEq(t, `{"field":"allowed_tools[1]"}`, string(data))
		assert.Empty(t, s.ModelCalls(), "refused before Claude ran")
		assert.NoFileExists(t, target)
	})
}
