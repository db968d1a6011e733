package daemon

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAReleaseBuildIsStampedWithItsVersionCommitAndDate(t *testing.T) {
	// The toolchain's own record is there too (goreleaser builds from a
	// checkout), but the stamp is what the release says.
	info := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "feedface"}, {Key: "vcs.modified", Value: "true"}}}
	got := stampOf("1.2.3", "0123456789abcdef0123456789abcdef01234567", "2026-07-01T12:00:00Z", info)
	assert.Equal(t, BuildStamp{Version: "1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-07-01T12:00:00Z"}, got)
}

func TestABuildFromACloneIsADevBuildNamingTheCommitGoRecorded(t *testing.T) {
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want BuildStamp
	}{
		{"a clean checkout", &debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-06-30T08:00:00Z"}, {Key: "vcs.modified", Value: "false"},
		}}, BuildStamp{Version: "0.1.0-dev", Commit: "abc123", Date: "2026-06-30T08:00:00Z", Dev: true}},
		{"uncommitted changes", &debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"},
		}}, BuildStamp{Version: "0.1.0-dev", Commit: "abc123", Dev: true, Modified: true}},
		{"no version control recorded (go run, -buildvcs=false)", &debug.BuildInfo{}, BuildStamp{Version: "0.1.0-dev", Dev: true}},
		{"no build info at all", nil, BuildStamp{Version: "0.1.0-dev", Dev: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, stampOf("0.1.0-dev", "", "", tc.info))
		})
	}
}
