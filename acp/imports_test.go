package acp

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The package is the protocol for both sides, so it must not drag either
// side's dependencies in: it imports the standard library only (a path
// whose first element has no dot). Tests may import more.
func TestThePackageImportsOnlyTheStandardLibrary(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err, f)
		for _, im := range pf.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			assert.NotContains(t, strings.SplitN(path, "/", 2)[0], ".", "%s imports %s, outside the standard library", f, path)
		}
	}
	assert.Positive(t, n)
}
