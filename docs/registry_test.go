package docs

import (
	"encoding/json"
	"encoding/xml"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
)

// registryEntry is an ACP registry entry as the registry's agent schema
// (agent.schema.json in agentclientprotocol/registry) and its FORMAT.md
// describe it. Decoding refuses a member the schema does not know.
type registryEntry struct {
	ID           string         `json:"id"`
	Name         string         `json:"name"`
	Version      string         `json:"version"`
	Description  string         `json:"description"`
	Repository   string         `json:"repository"`
	Authors      []string       `json:"authors"`
	License      string         `json:"license"`
	Icon         string         `json:"icon"`
	Distribution map[string]any `json:"distribution"`
}

type registryPackage struct {
	Package string            `json:"package"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
}

// The registry entry card keeps for editors that install agents from the
// ACP Registry follows the registry's rules: the required members and
// their forms, an npx distribution of the package card publishes running
// `card acp` with no adapter (one agent for every CLI installed), the
// version card is, and a 16×16 monochrome SVG icon. The rules are the
// registry's published schema's, written out here: a clone carries no copy
// of it, and a test of a copy would be as old as the copy.
func TestTheACPRegistryEntryFollowsTheRegistrysRules(t *testing.T) {
	dir := filepath.Join(repoRootOf(t), "acp-registry")
	raw, err := os.ReadFile(filepath.Join(dir, "agent.json"))
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var e registryEntry
	require.NoError(t, dec.Decode(&e), "agent.json has only the members the registry's schema has")

	assert.Regexp(t, `^[a-z][a-z0-9-]*$`, e.ID)
	assert.NotEmpty(t, e.Name)
	assert.Regexp(t, `^[0-9]+\.[0-9]+\.[0-9]+`, e.Version)
	assert.Equal(t, strings.TrimSuffix(daemon.Version, "-dev"), e.Version, "the entry names the version card is")
	assert.NotEmpty(t, e.Description)
	u, err := url.Parse(e.Repository)
	require.NoError(t, err)
	assert.True(t, u.IsAbs(), "repository is a URI")

	require.NotEmpty(t, e.Distribution, "at least one distribution")
	for kind := range e.Distribution {
		assert.Contains(t, []string{"binary", "npx", "uvx"}, kind)
	}
	npxRaw, err := json.Marshal(e.Distribution["npx"])
	require.NoError(t, err)
	pd := json.NewDecoder(strings.NewReader(string(npxRaw)))
	pd.DisallowUnknownFields()
	var npx registryPackage
	require.NoError(t, pd.Decode(&npx))
	assert.Equal(t, "@card-dev/card", npx.Package, "the package npm/build.mjs makes")
	assert.Equal(t, []string{"acp"}, npx.Args, "one agent for every CLI: no adapter fixed")

	require.NotEmpty(t, e.Icon)
	svg, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(e.Icon, "./"))))
	require.NoError(t, err, "the icon is in the repository beside the entry")
	checkIcon(t, svg)
}

// checkIcon holds an icon to the registry's advice: SVG, 16×16, and one
// colour, the editor's (currentColor), so it shows in light and dark
// themes alike.
func checkIcon(t *testing.T, svg []byte) {
	var root struct {
		XMLName xml.Name
		Width   string `xml:"width,attr"`
		Height  string `xml:"height,attr"`
		ViewBox string `xml:"viewBox,attr"`
	}
	require.NoError(t, xml.Unmarshal(svg, &root))
	assert.Equal(t, "svg", root.XMLName.Local)
	assert.Equal(t, "16", root.Width)
	assert.Equal(t, "16", root.Height)
	assert.Equal(t, "0 0 16 16", root.ViewBox)
	colours := regexp.MustCompile(`(?i)(fill|stroke|stop-color|color)\s*[=:]\s*"?([^";>\s]+)`).FindAllStringSubmatch(string(svg), -1)
	var used []string
	for _, c := range colours {
		if v := strings.ToLower(c[2]); v != "none" && !slices.Contains(used, v) {
			used = append(used, v)
		}
	}
	assert.Equal(t, []string{"currentcolor"}, used, "monochrome: every fill and stroke is currentColor")
	assert.NotContains(t, string(svg), "<image", "no embedded raster")
	assert.NotContains(t, string(svg), "<script", "no script")
}

func repoRootOf(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return filepath.Dir(wd)
}
