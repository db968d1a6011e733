package spawn

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/internal/testskip"
)

// realCLI finds an agent CLI installed by e2e/agents/install.sh (or in
// CARD_E2E_BIN_DIR). Missing is a loud skip, or a failure when CI says the
// CLIs must be there.
func realCLI(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("CARD_E2E_BIN_DIR")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "e2e", "agents", "node_modules", ".bin")
	}
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err != nil {
		testskip.Skip(t, testskip.RealCLIsMissing, "REAL CLI MISSING: "+bin+"; the check against the real CLI is NOT running")
	}
	return bin
}

func cliOutput(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	home := t.TempDir()
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "HOME="+home, "NO_COLOR=1")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// flagsOf lists the flags card passes for an adapter across every mode and
// every request option.
func flagsOf(t *testing.T, adapter string, reqs ...Request) map[string]bool {
	flags := map[string]bool{}
	a, _ := Lookup(adapter)
	for _, mode := range Modes {
		if mode == ModeAsk && !a.Capabilities.Ask {
			continue // refused by design: see TestAskIsBuiltExactlyForTheAdaptersThatCanAsk
		}
		if mode == ModeAsk && adapter == agent.Codex {
			continue // another subcommand (app-server), checked against its own help
		}
		for _, r := range reqs {
			r.Adapter, r.Mode, r.Cwd, r.AllowBypass = adapter, mode, "/tmp", true
			p, err := Build("/bin/"+adapter, r)
			require.NoError(t, err)
			for _, a := range p.Args {
				if strings.HasPrefix(a, "-") && a != "-" {
					name, _, _ := strings.Cut(a, "=") // --image=FILE
					flags[name] = true
				}
			}
		}
	}
	return flags
}

func inHelp(help, flag string) bool {
	return regexp.MustCompile(`(^|[\s,])` + regexp.QuoteMeta(flag) + `([\s,=]|$)`).MatchString(help)
}

// Every flag card passes exists in the installed CLI: a flag the CLI does
// not know is a spawn failure on every run, found here instead.
func TestEveryFlagCardPassesExistsInTheRealCLI(t *testing.T) {
	if testing.Short() {
		testskip.Skip(t, testskip.RealCLIsShort, "starts the real CLIs (about 8 s); skipped in -short")
	}
	const id = "123e4567-e89b-12d3-a456-426614174000"
	t.Run("claude", func(t *testing.T) {
		t.Parallel()
		bin := realCLI(t, "claude")
		help := cliOutput(t, bin, "--help")
		// Hidden flags (not in --help, but used by the Agent SDK): the CLI
		// parses options in order, so an unknown-option error naming the
		// probe that follows proves the hidden flag before it was accepted.
		hidden := map[string]string{"--system-prompt-file": "/nonexistent/p", "--append-system-prompt-file": "/nonexistent/p", "--max-turns": "2",
			"--permission-prompt-tool": "mcp__card__approve"}
		for f := range flagsOf(t, "claude-code", Request{Model: "m", MaxTurns: 2, Effort: "low", SessionID: id, SystemPrompt: "s"},
			Request{Resume: "r1", SystemPrompt: "s", SystemPromptAppend: true}, Request{NoSession: true}, Request{Images: testImages()}) {
			if _, ok := hidden[f]; ok {
				continue
			}
			assert.True(t, inHelp(help, f), "claude --help has no %s", f)
		}
		for f, v := range hidden {
			out := cliOutput(t, bin, "-p", f, v, "--card-unknown-probe")
			assert.Contains(t, out, "unknown option '--card-unknown-probe'", "%s is not accepted by claude: %s", f, out)
		}
	})
	t.Run("codex", func(t *testing.T) {
		t.Parallel()
		bin := realCLI(t, "codex")
		help := cliOutput(t, bin, "exec", "--help")
		for f := range flagsOf(t, "codex", Request{Model: "m", Effort: "low", SystemPrompt: "s"}, Request{NoSession: true}, Request{Images: testImages()}) {
			assert.True(t, inHelp(help, f), "codex exec --help has no %s", f)
		}
		resume := cliOutput(t, bin, "exec", "--json", "--sandbox", "read-only", "--color", "never", "resume", "--help")
		assert.Contains(t, resume, "SESSION_ID", "exec-level flags before `resume` must parse")
		// Ask mode runs `codex app-server`, whose flags are its own.
		appHelp := cliOutput(t, bin, "app-server", "--help")
		for _, r := range []Request{{Model: "m", Effort: "low", SystemPrompt: "s"}, {Images: testImages()}} {
			r.Adapter, r.Mode, r.Cwd = agent.Codex, ModeAsk, "/tmp"
			p, err := Build("/bin/codex", r)
			require.NoError(t, err)
			require.Equal(t, "app-server", p.Args[0])
			for _, a := range p.Args[1:] {
				if strings.HasPrefix(a, "-") {
					assert.True(t, inHelp(appHelp, a), "codex app-server --help has no %s", a)
				}
			}
		}
	})
	t.Run("gemini", func(t *testing.T) {
		t.Parallel()
		bin := realCLI(t, "gemini")
		help := cliOutput(t, bin, "--help")
		for f := range buildableFlagsOf(t, "gemini", Request{Model: "m", SessionID: id}, Request{Resume: "latest"}, Request{Model: "m"}, Request{Images: testImages()}) {
			assert.True(t, inHelp(help, f), "gemini --help has no %s", f)
		}
		for _, m := range []string{"plan", "auto_edit", "yolo"} {
			assert.Contains(t, help, `"`+m+`"`, "gemini --approval-mode has no %s", m)
		}
	})
	// The later three: a mode or field an adapter refuses by design (Droid
	// edit, Copilot system prompts) is skipped, everything it builds checked.
	for _, c := range []struct {
		adapter, bin string
		helpArgs     []string
		reqs         []Request
	}{
		{"copilot", "copilot", []string{"--help"}, []Request{{Model: "m", Effort: "low"}, {Resume: id}, {Images: testImages()}}},
		{"droid", "droid", []string{"exec", "--help"}, []Request{{Model: "m", Effort: "low"}, {SystemPrompt: "s", SystemPromptAppend: true}, {Resume: id}}},
		{"pi", "pi", []string{"--help"}, []Request{{Model: "m", SystemPrompt: "s"}, {SystemPrompt: "s", SystemPromptAppend: true}}},
	} {
		t.Run(c.adapter, func(t *testing.T) {
			t.Parallel()
			help := cliOutput(t, realCLI(t, c.bin), c.helpArgs...)
			flags := buildableFlagsOf(t, c.adapter, c.reqs...)
			require.NotEmpty(t, flags)
			for f := range flags {
				assert.True(t, inHelp(help, f), "%s %s has no %s", c.bin, strings.Join(c.helpArgs, " "), f)
			}
		})
	}
}

// buildableFlagsOf is flagsOf for adapters that refuse some mode or field by
// design: a *api.FieldError is skipped, any other error fails the test.
func buildableFlagsOf(t *testing.T, adapter string, reqs ...Request) map[string]bool {
	flags := map[string]bool{}
	for _, mode := range Modes {
		for _, r := range append([]Request{{}}, reqs...) {
			r.Adapter, r.Mode, r.Cwd, r.AllowBypass = adapter, mode, "/tmp", true
			p, err := Build("/bin/"+adapter, r)
			var fe *api.FieldError
			if errors.As(err, &fe) {
				continue
			}
			require.NoError(t, err)
			for _, a := range p.Args {
				if strings.HasPrefix(a, "-") && a != "-" {
					name, _, _ := strings.Cut(a, "=") // --resume=ID
					flags[name] = true
				}
			}
		}
	}
	return flags
}

// The whole chain against the real CLIs, signed out in an empty HOME (no
// network needed): Build, Run and the parser must turn each CLI's own
// not-signed-in signal into error kind "auth" with what to do next.
func TestRealCLIsSignedOutAreReportedAsAuth(t *testing.T) {
	if testing.Short() {
		testskip.Skip(t, testskip.RealCLIsShort, "starts the real CLIs; skipped in -short")
	}
	for _, c := range []struct {
		adapter, bin string
		mode         Mode
		says         string
	}{
		{"claude-code", "claude", ModeReadOnly, "claude auth login"},
		{"gemini", "gemini", ModeReadOnly, "GEMINI_API_KEY"},
		// Over ACP both answer session/new with error -32000.
		{"gemini", "gemini", ModeAsk, "GEMINI_API_KEY"},
		{"copilot", "copilot", ModeAsk, "COPILOT_GITHUB_TOKEN"},
	} {
		t.Run(c.adapter+"/"+string(c.mode), func(t *testing.T) {
			t.Parallel()
			bin := realCLI(t, c.bin)
			home, work := t.TempDir(), t.TempDir()
			plan, err := Build(bin, Request{Adapter: c.adapter, Cwd: work, Mode: c.mode})
			require.NoError(t, err)
			a, _ := Lookup(c.adapter)
			env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "CAR_INVOKED_BY=card", "NO_COLOR=1"}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var evs []Event
			res, err := Run(ctx, RunSpec{Plan: plan, Prompt: "say pong", BaseEnv: env, Parser: a.NewParser(),
				Approver: approverFunc(func(context.Context, Question) Decision { return Decision{} }),
				OnEvent:  func(ev Event) { evs = append(evs, ev) }})
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, api.KindAuth, e.Kind, "%v", err)
			require.NotNil(t, res.Error)
			assert.Equal(t, api.KindAuth, res.Error.Kind)
			assert.Contains(t, res.Error.Message, c.says)
			assert.NotContains(t, e.Command, "say pong")
		})
	}
}

// Codex's two channels are two commands with options of their own: every
// option one of them lists that the other lacks is refused in the other's
// channel (or, -m/--model, spelled as the -c override both take), unless
// card refuses it on other grounds. A new Codex that adds one to a single
// command fails here, not in a person's session.
func TestCodexsChannelsRefuseEveryOptionOnlyOneOfThemTakes(t *testing.T) {
	bin := realCLI(t, "codex")
	options := func(help string) map[string]bool {
		out := map[string]bool{}
		re := regexp.MustCompile(`(?m)^\s+(-[A-Za-z])?(?:, )?(--[a-z0-9][a-z0-9-]*)?`)
		for _, m := range re.FindAllStringSubmatch(help, -1) {
			for _, f := range m[1:] {
				if f != "" {
					out[f] = true
				}
			}
		}
		return out
	}
	exec, app := options(cliOutput(t, bin, "exec", "--help")), options(cliOutput(t, bin, "app-server", "--help"))
	require.True(t, exec["--model"] && exec["-c"] && app["-c"] && app["--listen"], "the help was not read: exec %v, app-server %v", exec, app)
	a, _ := Lookup(agent.Codex)
	otherwise := func(f string) bool {
		return slices.Contains(a.OwnedFlags, f) || slices.Contains(ForbiddenFlags, f) || f == "-h" || f == "--help"
	}
	for f := range exec {
		if app[f] || otherwise(f) || f == "-m" || f == "--model" {
			continue
		}
		assert.Contains(t, a.Channels.Session.Refused, f, "codex exec takes %s and codex app-server does not", f)
	}
	for f := range app {
		if exec[f] || otherwise(f) {
			continue
		}
		assert.Contains(t, a.Channels.OneShot.Refused, f, "codex app-server takes %s and codex exec does not", f)
	}
}
