package spawn

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
)

// An operator arg one of an adapter's channels does not take is refused at
// config load, naming the card.toml key, the arg and the channel, for every
// adapter whose channels differ in what they take; each was seen to fail
// that channel with the real CLI (or is missing from its --help).
func TestAnOperatorArgOneChannelDoesNotTakeIsRefusedNamingTheChannel(t *testing.T) {
	for _, c := range []struct {
		adapter string
		args    []string
		channel string
	}{
		{agent.ClaudeCode, []string{"--input-format", "text"}, "claude -p --input-format stream-json (sessions and ACP sessions)"},
		{agent.ClaudeCode, []string{"--input-format=stream-json"}, "claude -p with the prompt as text on stdin"},
		{agent.ClaudeCode, []string{"--replay-user-messages"}, "claude -p with the prompt as text on stdin (one-shot and ask runs)"},
		{agent.Codex, []string{"--oss"}, "codex app-server (ask runs, sessions and ACP sessions)"},
		{agent.Codex, []string{"-C", "/srv/project"}, "codex app-server"},
		{agent.Codex, []string{"-C/srv/project"}, "codex app-server"},
		{agent.Codex, []string{"--output-schema=/s.json"}, "codex app-server"},
		{agent.Codex, []string{"--analytics-default-enabled"}, "codex exec (one-shot runs)"},
		{agent.Gemini, []string{"--resume", "latest"}, "gemini --acp (ask runs, sessions and ACP sessions)"},
		{agent.Gemini, []string{"-r", "3"}, "gemini --acp"},
		{agent.Copilot, []string{"--attachment", "/tmp/a.png"}, "copilot --acp (ask runs, sessions and ACP sessions)"},
		{agent.Pi, []string{"-p"}, "pi --mode rpc (ask runs, sessions and ACP sessions)"},
		{agent.Pi, []string{"--print"}, "pi --mode rpc"},
	} {
		t.Run(c.adapter+" "+strings.Join(c.args, " "), func(t *testing.T) {
			err := CheckExtras(c.adapter, Extras{Args: c.args})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "card.toml [adapters."+c.adapter+"] args[0]")
			assert.Contains(t, err.Error(), c.channel)
			assert.Contains(t, err.Error(), "remove it")
		})
	}
	// What both channels take stays: a provider, a model, a trust flag.
	for _, c := range []struct {
		adapter string
		args    []string
	}{
		{agent.Codex, []string{"-c", `model_provider="x"`, "--enable", "web_search", "-m", "gpt-x"}},
		{agent.Gemini, []string{"--skip-trust", "-m", "gemini-2.5-flash"}},
		{agent.Copilot, []string{"--model", "m", "--log-level", "none"}},
		{agent.Droid, []string{"-m", "custom:x", "-r", "high"}},
		{agent.Pi, []string{"--provider", "p", "--model", "m"}},
		{agent.ClaudeCode, []string{"--model", "sonnet", "--fallback-model", "haiku"}},
	} {
		assert.NoError(t, CheckExtras(c.adapter, Extras{Args: c.args}), "%s %q", c.adapter, c.args)
	}
}

// Codex's -m is an option of codex exec only: codex app-server stops at it
// with status 2, so a card.toml that picked the model with -m broke every
// ask run, session and ACP session. In every channel it becomes the -c
// model override both commands take, in each of the spellings Codex's
// parser reads; in exec a request's own model is then the only --model
// on the line (Codex refuses two) and wins, and in app-server the
// request's -c model comes later and wins.
func TestCodexsModelFromTheOperatorReachesExecAndTheAppServerAsAConfigOverride(t *testing.T) {
	cwd := t.TempDir()
	for _, spelling := range [][]string{{"-m", "gpt-x"}, {"--model", "gpt-x"}, {"--model=gpt-x"}, {"-mgpt-x"}, {"-m=gpt-x"}} {
		extras := Extras{Args: append([]string{"-c", `model_provider="p"`}, spelling...)}
		require.NoError(t, CheckExtras(agent.Codex, extras), "%q", spelling)
		plans := map[string]Plan{}
		for name, build := range map[string]func() (Plan, error){
			"exec": func() (Plan, error) {
				return Build("/bin/codex", Request{Adapter: agent.Codex, Cwd: cwd, Extras: extras})
			},
			"ask": func() (Plan, error) {
				return Build("/bin/codex", Request{Adapter: agent.Codex, Cwd: cwd, Mode: ModeAsk, Extras: extras})
			},
			"warm edit": func() (Plan, error) {
				return BuildWarm("/bin/codex", Request{Adapter: agent.Codex, Cwd: cwd, Mode: ModeEdit, Extras: extras})
			},
			"warm ask": func() (Plan, error) {
				return BuildWarm("/bin/codex", Request{Adapter: agent.Codex, Cwd: cwd, Mode: ModeAsk, Extras: extras})
			},
			"warm readonly": func() (Plan, error) {
				return BuildWarm("/bin/codex", Request{Adapter: agent.Codex, Cwd: cwd, Extras: extras})
			},
		} {
			p, err := build()
			require.NoError(t, err, "%s %q", name, spelling)
			plans[name] = p
		}
		for name, p := range plans {
			args := strings.Join(p.Args, " ")
			assert.Contains(t, args, `-c model_provider="p" -c model="gpt-x"`, "%s %q: %s", name, spelling, args)
			for _, a := range p.Args {
				assert.False(t, a == "-m" || strings.HasPrefix(a, "-mgpt") || strings.HasPrefix(a, "-m=") || strings.HasPrefix(a, "--model"),
					"%s %q: codex app-server takes no -m/--model, and exec no second one: %s", name, spelling, args)
			}
		}
		assert.Equal(t, "exec", plans["exec"].Args[0])
		assert.Equal(t, "app-server", plans["ask"].Args[0])
		assert.Equal(t, "app-server", plans["warm edit"].Args[0])
	}

	// The request's model comes after the operator's and wins.
	extras := Extras{Args: []string{"-m", "gpt-x"}}
	p, err := Build("/bin/codex", Request{Adapter: agent.Codex, Cwd: cwd, Model: "gpt-y", Extras: extras})
	require.NoError(t, err)
	assert.Equal(t, 1, countOf(p.Args, "--model"), "one --model only: %q", p.Args)
	assert.Greater(t, slices.Index(p.Args, "gpt-y"), slices.Index(p.Args, `model="gpt-x"`))
	p, err = Build("/bin/codex", Request{Adapter: agent.Codex, Cwd: cwd, Model: "gpt-y", Mode: ModeAsk, Extras: extras})
	require.NoError(t, err)
	assert.Greater(t, slices.Index(p.Args, `model="gpt-y"`), slices.Index(p.Args, `model="gpt-x"`), "%q", p.Args)

	// A -c value that looks like -m is a -c value, and a model with a
	// quote in it stays one TOML string.
	assert.Equal(t, []string{"-c", "-m", "-c", `model="a\"b"`}, codexModelArgs([]string{"-c", "-m", "--model", `a"b`}))
}

func countOf(args []string, s string) int {
	n := 0
	for _, a := range args {
		if a == s {
			n++
		}
	}
	return n
}

// Droid's stream-jsonrpc ignores -m and -r on argv ("CLI flags do not
// configure JSON-RPC sessions"): an operator's reasoning effort, as its
// model already was, is carried into droid.initialize_session for ask runs
// and warm agents, and a request's own effort still wins.
func TestDroidsEffortFromTheOperatorReachesItsSessionProtocol(t *testing.T) {
	cwd := t.TempDir()
	for _, args := range [][]string{{"-r", "high"}, {"--reasoning-effort=high"}} {
		extras := Extras{Args: append([]string{"-m", "custom:x"}, args...)}
		require.NoError(t, CheckExtras(agent.Droid, extras))
		ask, err := Build("/bin/droid", Request{Adapter: agent.Droid, Cwd: cwd, Mode: ModeAsk, Extras: extras})
		require.NoError(t, err)
		require.NotNil(t, ask.Session)
		assert.Equal(t, "custom:x", ask.Session.Model)
		assert.Equal(t, "high", ask.Session.Effort, "%q", args)
		warm, err := BuildWarm("/bin/droid", Request{Adapter: agent.Droid, Cwd: cwd, Extras: extras})
		require.NoError(t, err)
		assert.Equal(t, "high", warm.Session.Effort, "%q", args)
		own, err := BuildWarm("/bin/droid", Request{Adapter: agent.Droid, Cwd: cwd, Effort: "low", Extras: extras})
		require.NoError(t, err)
		assert.Equal(t, "low", own.Session.Effort)
	}
}
