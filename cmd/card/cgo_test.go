package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// card needs no C: its SQLite is a Go translation, and nothing else it
// links calls into C. A build with cgo (the go command's default where a C
// compiler exists, so the README's `go run`) links libc and its loader only
// because the standard library's net and runtime packages can use them; a
// build without cgo (the release binaries) is the same program. A
// dependency that needed cgo would make the release builds fail or lose a
// feature, and bring C's faults into a daemon that runs for months: this
// test refuses one.
func TestCardNeedsNoCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	list := exec.Command("go", "list", "-deps", "-f", "{{if .CgoFiles}}{{.ImportPath}} {{.Standard}}{{end}}", "github.com/card-dev/card/cmd/card")
	list.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := list.CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	// The standard library's packages that can use cgo but need not: the
	// resolver in net, and runtime/cgo itself.
	optional := map[string]bool{"net": true, "runtime/cgo": true, "os/user": true}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		pkg, std, _ := strings.Cut(line, " ")
		assert.True(t, std == "true" && optional[pkg], "%s uses cgo: card must build and work with CGO_ENABLED=0", pkg)
	}

	build := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "card"), "github.com/card-dev/card/cmd/card")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "card builds without cgo: %s", out)
}
