package detect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseVersionFindsTheFirstVersionToken(t *testing.T) {
	cases := []struct{ in, want string }{
		{"2.1.197 (Claude Code)\n", "2.1.197"},
		{"codex-cli 0.171.0\n", "0.171.0"},
		{"0.61.0\n", "0.61.0"},
		{"GitHub Copilot CLI 1.0.102.\nRun 'copilot update' to check for updates.\n", "1.0.102"},
		{"0.73.1\n", "0.73.1"},
		{"droid 0.22.3", "0.22.3"},
		{"v20.11.1", "20.11.1"},
		{"tool 1.2.3-beta.1+build.5 (x)", "1.2.3-beta.1+build.5"},
		{"warning: something\nversion 3.4\n", "3.4"},
		{"no version here", ""},
		{"", ""},
		{"build 42", ""},
		{"\x00\xff garbage", ""},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, ParseVersion(c.in), "input %q", c.in)
	}
}

// The real captured `--version` outputs of all six CLIs must all parse.
func TestParseVersionReadsEveryCapturedCLIVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "versions.txt"))
	require.NoError(t, err)
	want := map[string]string{"claude": "2.1.197", "codex": "0.171.0", "gemini": "0.61.0", "copilot": "1.0.102", "pi": "0.73.1"}
	blocks := strings.Split(string(b), "$ ")
	seen := 0
	for _, blk := range blocks[1:] {
		cmd, out, _ := strings.Cut(blk, "\n")
		cli := strings.Fields(cmd)[0]
		if w, ok := want[cli]; ok {
			assert.Equal(t, w, ParseVersion(out), cli)
			seen++
		}
	}
	assert.Equal(t, len(want), seen)
}
