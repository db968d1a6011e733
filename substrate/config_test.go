package substrate_test

import (
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/card-dev/card/substrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheSubstrateTableOfCardTomlDecodesIntoConfig(t *testing.T) {
	var file struct {
		Substrate substrate.Config `toml:"substrate"`
	}
	_, err := toml.Decode(`
[substrate]
read_only = true

[substrate.mcp]
name = "vm"
command = ["vm-bridge", "--stdio"]
env = { VM_PROFILE = "dev" }
timeout = "90s"
`, &file)
	require.NoError(t, err)
	assert.Equal(t, substrate.Config{
		ReadOnly: true,
		MCP: &substrate.MCPConfig{
			Name:    "vm",
			Command: []string{"vm-bridge", "--stdio"},
			Env:     map[string]string{"VM_PROFILE": "dev"},
			Timeout: 90 * time.Second,
		},
	}, file.Substrate)
}
