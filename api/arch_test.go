package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/card-dev/card"

// deps lists the packages outside the standard library that pkg builds
// with (itself included), as `go list -deps` sees them.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the imports with")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// The wire types are what every side of the protocol shares: they must
// not pull the daemon's insides (or anything else) in with them.
func TestTheWireTypesImportOnlyTheStandardLibrary(t *testing.T) {
	for _, d := range deps(t, module+"/api") {
		if d != module+"/api" {
			t.Errorf("package api builds with %s; it may import only the standard library", d)
		}
	}
}

// A program that only talks to the daemon must not build the daemon: no
// SQLite, no MCP SDK, no logger, no agent runner, and few packages at all.
func TestTheGoClientBuildsWithoutTheDaemonAndWithFewDependencies(t *testing.T) {
	// 16: the WebSocket library and jsonrpc2 with their internals, the
	// json/v2 engine (json, its v1 rules, jsontext and four internal
	// packages) the client decodes events with, and card's own api,
	// rpcclient and two internal helpers.
	const limit = 16
	all := deps(t, module+"/client")
	forbidden := []string{
		module + "/daemon", module + "/spawn", module + "/detect", module + "/substrate",
		module + "/guard", "go.uber.org/zap", "sqlite", "modelcontextprotocol",
	}
	var outside []string
	for _, d := range all {
		if d == module+"/client" {
			continue
		}
		outside = append(outside, d)
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") || (!strings.Contains(f, "/") && strings.Contains(d, f)) {
				t.Errorf("package client builds with %s, which it must not", d)
			}
		}
	}
	if len(outside) > limit {
		t.Errorf("package client builds with %d packages outside the standard library, more than %d:\n%s", len(outside), limit, strings.Join(outside, "\n"))
	}
}
