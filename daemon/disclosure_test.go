package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/spawn"
)

// How an adapter's read_only mode is enforced is decided by its argv builder
// (spawn) and disclosed by detection (detect). The two must say the same, or
// a host would show a person one boundary while card runs another.
func TestDetectionDisclosesTheBoundaryTheBuilderEnforces(t *testing.T) {
	require.ElementsMatch(t, detect.Known(), spawn.IDs(), "every detected adapter can be spawned, and the reverse")
	for _, id := range spawn.IDs() {
		a, _ := spawn.Lookup(id)
		d, ok := detect.Lookup(id)
		require.True(t, ok, id)
		assert.Equal(t, string(a.ReadOnly), string(d.ReadOnly), id)
	}
}
