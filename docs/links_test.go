package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	mdLinkRE  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeadRE  = regexp.MustCompile(`(?m)^#{1,6} +(.*?)\s*$`)
	mdFenceRE = regexp.MustCompile("(?ms)^```.*?^```")
)

// anchor is GitHub's slug of a heading.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The document is many pages that link one another: a link to a page or a
// heading that is not there is a reader sent nowhere.
func TestEveryLinkBetweenTheProtocolPagesLandsOnAHeading(t *testing.T) {
	headings := map[string]map[string]bool{}
	read := func(f string) string {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		return mdFenceRE.ReplaceAllString(string(b), "")
	}
	slugs := func(f string) map[string]bool {
		f = filepath.Clean(f)
		if h, ok := headings[f]; ok {
			return h
		}
		h := map[string]bool{}
		for _, m := range mdHeadRE.FindAllStringSubmatch(read(f), -1) {
			h[anchor(m[1])] = true
		}
		headings[f] = h
		return h
	}
	others, err := filepath.Glob("*.md")
	require.NoError(t, err)
	pages := append(append(protocolPages(t), "../README.md", "examples/node-client/README.md"), others...)
	links := 0
	for _, f := range pages {
		for _, m := range mdLinkRE.FindAllStringSubmatch(read(f), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := f
			if file != "" {
				dest = filepath.Join(filepath.Dir(f), file)
			}
			links++
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s: link %s: no file %s", f, target, dest)
				continue
			}
			if frag != "" && strings.HasSuffix(dest, ".md") {
				assert.True(t, slugs(dest)[frag], "%s: link %s: %s has no heading #%s", f, target, dest, frag)
			}
		}
	}
	assert.Greater(t, links, 100, "the pages link one another")
}
