package daemon_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/card-dev/card/daemon/daemontest"
)

// The daemon once advised away pages of its own binary's mappings to make
// its RSS smaller, and so dropped the dynamic loader's relocated, then
// protected, data: the next thread start died with SIGFPE. Memory card did
// not allocate is the kernel's; no product code advises on it. The Go
// runtime returns the heap (debug.FreeOSMemory), which is all card needs.
func TestNoProductCodeAdvisesAwayPagesOfItsMappings(t *testing.T) {
	root := filepath.Dir(daemontest.RepoFile(t, "go.mod"))
	advise := regexp.MustCompile(`MADV_[A-Z]+|SYS_MADVISE|\.Madvise\(`)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := advise.Find(b); m != nil {
			rel, _ := filepath.Rel(root, path)
			found = append(found, rel+": "+string(m))
		}
		return nil
	})
	assert.NoError(t, err)
	assert.Empty(t, found, "product code that advises the kernel about pages")
}
