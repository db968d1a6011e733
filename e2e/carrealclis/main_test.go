// Package carrealclis_test holds card to the meaning CAR's published daemon protocol
// gives the methods card serves under CAR's names, with the real agent CLIs
// behind a real daemon over its WebSocket: what a CAR client asks for, it
// gets. Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1, which turns a missing CLI into a failure).
package carrealclis_test

import (
	"bytes"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/daemontest"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// startDaemon runs a daemon with environ and, for adapter, a card.toml
// [adapters.<id>] table; the login shell is not asked, so only what the
// test puts on PATH, pins and the well-known dirs are searched.
func startDaemon(t *testing.T, environ []string, adapter string, adapterCfg map[string]any) *daemontest.Daemon {
	t.Helper()
	// Generous probe deadlines: these tests hold what the answers mean, and
	// a Node CLI on a loaded two-core machine can take seconds to start.
	cfg := map[string]any{"login_shell_path": false, "probe_timeout_secs": 60}
	if adapterCfg != nil {
		cfg["adapters"] = map[string]any{adapter: adapterCfg}
	}
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	return daemontest.Start(t, daemontest.Options{Config: buf.String(), Environ: environ})
}
