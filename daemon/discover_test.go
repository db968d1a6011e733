package daemon_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/rpc"
)

// The published schemas are what clients in other languages are generated
// from: a name must be the type's alone, so moving a type between Go
// packages cannot rename it, and one name must be one type.
func TestRPCDiscoverNamesEverySchemaByItsTypeAlone(t *testing.T) {
	home := t.TempDir()
	d, err := daemon.New(daemon.Options{Home: home, Environ: []string{"HOME=" + home, "PATH=/usr/bin:/bin"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Shutdown(t.Context()) })
	doc, err := d.Registry().OpenRPC(rpc.ServiceInfo{Title: "card"})
	require.NoError(t, err, "two wire types share a schema name")
	for _, want := range []string{"InvokeParams", "InvokeResult", "AgentEvent", "Run", "RunError", "Usage", "ExternalAgentSpec", "SubstrateInfo", "Info"} {
		assert.Contains(t, doc.Components.Schemas, want)
	}
	for name := range doc.Components.Schemas {
		assert.False(t, strings.ContainsAny(name, ".[/"), "schema %q carries a Go package or type arguments", name)
	}
}
