package daemon_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc"
)

const (
	appOrigin = "https://app.example"
	opsOrigin = "https://ops.example"
)

// accessConfig allows two browser origins: app with the default grants, ops
// granted read and host but not agents.
const accessConfig = `allowed_origins = ["` + appOrigin + `", "` + opsOrigin + `"]

[origins."` + opsOrigin + `"]
grants = ["read", "host"]
`

func dialFrom(t *testing.T, d *daemontest.Daemon, origin string) *client.Client {
	t.Helper()
	opts := client.Options{}
	if origin != "" {
		opts.RPC.Header = http.Header{"Origin": {origin}}
	}
	return d.Dial(t, opts)
}

// A page on an allowed origin may read and run agents but never reach a
// shell, a file or a terminal on the host; a native client (no Origin) may;
// card.toml grants an origin other classes. Each refusal is the
// access_denied code naming the class and the card.toml key, over real
// WebSockets, and a refused command never runs.
func TestABrowserOriginGetsReadAndAgentsAndANativeClientGetsEverything(t *testing.T) {
	rd := startRunsDaemon(t, accessConfig)
	ctx := daemontest.Context(t)
	marker := filepath.Join(t.TempDir(), "ran")
	touch := "touch " + marker

	native := rd.Client
	app := dialFrom(t, rd.Daemon, appOrigin)
	ops := dialFrom(t, rd.Daemon, opsOrigin)

	for name, c := range map[string]*client.Client{"native": native, "app": app, "ops": ops} {
		_, err := c.Info(ctx)
		require.NoError(t, err, "%s reads", name)
		_, err = c.Runs(ctx, api.ListParams{})
		require.NoError(t, err, "%s reads the run history", name)
	}

	// app: no host.
	_, err := app.SubstrateRunCommand(ctx, touch, 0)
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeAccessDenied, re.Code)
	assert.Contains(t, re.Message, `"host"`)
	assert.Contains(t, re.Message, `[origins."https://app.example"] grants`)
	data := errData(t, re)
	assert.Equal(t, "substrate.run_command", data["method"])
	assert.Equal(t, "host", data["access"])
	assert.Equal(t, []any{"read", "agents"}, data["grants"])
	assert.Equal(t, appOrigin, data["origin"])
	assert.Equal(t, `[origins."https://app.example"] grants`, data["config_key"])
	_, statErr := os.Stat(marker)
	assert.True(t, os.IsNotExist(statErr), "the refused command ran")
	for _, call := range []func() error{
		func() error { _, err := app.SubstrateReadText(ctx, "/etc/hostname"); return err },
		func() error { _, err := app.SubstratePathState(ctx, "/etc/hostname"); return err },
		func() error { _, err := app.SubstratePTYStart(ctx, touch); return err },
		func() error {
			_, err := app.SubstrateWriteText(ctx, api.WriteTextParams{Path: marker, Content: "x"})
			return err
		},
	} {
		assert.Equal(t, daemon.CodeAccessDenied, rpcCode(t, call()).Code)
	}
	_, statErr = os.Stat(marker)
	assert.True(t, os.IsNotExist(statErr), "a refused write or terminal ran")
	res, err := app.Invoke(ctx, rd.params("claude-code", "hello"))
	require.NoError(t, err, "an allowed origin runs agents")
	assert.False(t, res.IsError)
	// What the daemon sends a connection is not subject to its grants: a
	// page's streamed run reaches it event by event.
	ended := make(chan api.AgentEvent, 1)
	_, err = app.Stream(ctx, rd.params("claude-code", "hello"), func(ev api.AgentEvent) {
		if client.Terminal(ev) {
			ended <- ev
		}
	})
	require.NoError(t, err)
	select {
	case ev := <-ended:
		assert.Equal(t, api.EventDone, ev.Kind)
	case <-ctx.Done():
		t.Fatal("the page's streamed run never reached it")
	}

	// ops: host but no agents.
	out, err := ops.SubstrateRunCommand(ctx, "echo granted", 0)
	require.NoError(t, err)
	assert.Equal(t, "granted\n", out.Stdout)
	before, err := native.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	_, err = ops.Invoke(ctx, rd.params("claude-code", "hello"))
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeAccessDenied, re.Code)
	assert.Contains(t, re.Message, `"agents"`)
	after, err := native.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	assert.Len(t, after, len(before), "a refused invoke is not even a refused run")

	// native: everything.
	_, err = native.SubstrateRunCommand(ctx, touch, 0)
	require.NoError(t, err)
	_, err = os.Stat(marker)
	assert.NoError(t, err, "a native client runs commands")
}

// Every method the daemon registers declares its class, and the ones that
// touch the host outside any agent's boundary are host: a method added
// later cannot slip through as read by omission.
func TestEveryMethodHasAnAccessClassAndTheHostOnesAreHost(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	doc, err := d.Client.Discover(daemontest.Context(t))
	require.NoError(t, err)
	got := map[string]rpc.Access{}
	for _, m := range doc.Methods {
		require.True(t, rpc.Access(m.Access).Valid(), "%s has no access class", m.Name)
		got[m.Name] = rpc.Access(m.Access)
	}
	for name, a := range got {
		switch {
		case name == "substrate.info":
			assert.Equal(t, rpc.AccessRead, a, name)
		case strings.HasPrefix(name, "substrate."):
			assert.Equal(t, rpc.AccessHost, a, "%s touches the host", name)
		case name == "agents.invoke", name == "agents.invoke_external", name == "agents.cancel", name == "agents.chat.cancel":
			assert.Equal(t, rpc.AccessAgents, a, name)
		case name == "session.auth", name == "server.handshake":
			assert.Equal(t, rpc.AccessRead, a, "%s only answers what the connection already is", name)
		}
	}
	assert.Equal(t, rpc.AccessRead, got["daemon.info"])
	assert.Equal(t, rpc.AccessRead, got["runs.subscribe"])
	assert.Equal(t, rpc.AccessApprove, got["agents.approval_decide"], "answering a question is a right of its own")
	// What a run may do raises agents.invoke's class, under both names.
	for _, m := range doc.Methods {
		if m.Name != "agents.invoke" && m.Name != "agents.invoke_external" {
			continue
		}
		need := map[string]rpc.Access{}
		for _, r := range m.AccessRules {
			if r.Param == "permission_mode" {
				need[r.Value.(string)] = rpc.Access(r.Access)
			}
		}
		assert.Equal(t, map[string]rpc.Access{"edit": rpc.AccessWrite, "ask": rpc.AccessWrite, "bypass": rpc.AccessHost}, need, m.Name)
	}
	for _, q := range doc.ServerRequests {
		if q.Name == api.ApproveMethod {
			assert.Equal(t, rpc.AccessApprove, rpc.Access(q.Access), "agents.approve goes only to connections that may approve")
		}
	}
	assert.Equal(t, rpc.AccessAgents, got["agents.chat.cancel"])
	assert.Equal(t, rpc.AccessRead, got["session.auth"])
}

func TestOriginGrantsInCardTomlAreValidated(t *testing.T) {
	cases := []struct{ name, toml, want string }{
		{"unknown class", `allowed_origins = ["https://a.example"]
[origins."https://a.example"]
grants = ["read", "admin"]`, `[origins."https://a.example"] grants: unknown access class "admin"; the classes are read, agents, write, approve, host, acp`},
		{"origin not allowed", `[origins."https://a.example"]
grants = ["read"]`, `"https://a.example" is not in allowed_origins`},
		{"no grants", `allowed_origins = ["https://a.example"]
[origins."https://a.example"]
grants = []`, `[origins."https://a.example"] grants is empty`},
		{"unknown key", `allowed_origins = ["https://a.example"]
[origins."https://a.example"]
grant = ["read"]`, `unknown key(s) origins."https://a.example".grant`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := daemon.ParseConfig("card.toml", tc.toml)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	cfg, err := daemon.ParseConfig("card.toml", `allowed_origins = ["https://a.example/"]
[origins."https://A.example"]
grants = ["read", "agents", "host"]`)
	require.NoError(t, err, "origins compare as the gate compares them")
	assert.Equal(t, []string{"read", "agents", "host"}, cfg.Origins["https://A.example"].Grants)
}
