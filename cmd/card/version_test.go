package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/card-dev/card/daemon"
)

func TestCardVersionSaysWhichBuildItIs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stamp daemon.BuildStamp
		want  string
	}{
		{"a release", daemon.BuildStamp{Version: "1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-07-01T12:00:00Z"},
			"card 1.2.3 (protocol " + daemon.ProtocolVersion + ")\ncommit 0123456789abcdef0123456789abcdef01234567, committed 2026-07-01T12:00:00Z\n"},
		{"a clone's build", daemon.BuildStamp{Version: "0.1.0-dev", Commit: "abc123", Date: "2026-06-30T08:00:00Z", Dev: true},
			"card 0.1.0-dev (protocol " + daemon.ProtocolVersion + ")\na dev build, not a release: commit abc123, committed 2026-06-30T08:00:00Z\n"},
		{"a clone with changes", daemon.BuildStamp{Version: "0.1.0-dev", Commit: "abc123", Dev: true, Modified: true},
			"card 0.1.0-dev (protocol " + daemon.ProtocolVersion + ")\na dev build, not a release: commit abc123 with uncommitted changes\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, versionText(tc.stamp))
		})
	}
	// go run records no commit.
	assert.Contains(t, versionText(daemon.BuildStamp{Version: "0.1.0-dev", Dev: true}), "a dev build, not a release: no commit recorded")
}

// The test binary is built by go test, which stamps no release: what it
// prints is the dev build's form.
func TestCardVersionOfThisBinaryIsADevBuild(t *testing.T) {
	code, out, errOut := runCLI("version")
	assert.Equal(t, exitOK, code)
	assert.Empty(t, errOut)
	assert.Regexp(t, `^card 0\.1\.0-dev \(protocol \d+\.\d+\)\na dev build, not a release: `, out)
}
