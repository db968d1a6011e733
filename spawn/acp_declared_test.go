package spawn

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
)

func TestCardAnswersADeclaredAgentsQuestionByTheSessionsMode(t *testing.T) {
	cwd := t.TempDir()
	out := t.TempDir()
	require.NoError(t, os.Symlink(out, filepath.Join(cwd, "escape")))
	require.NoError(t, os.Symlink(filepath.Join(out, "nowhere"), filepath.Join(cwd, "dangling")))
	in := filepath.Join(cwd, "a.txt")
	for _, tc := range []struct {
		name          string
		mode          Mode
		kind          acp.ToolKind
		paths         []string
		allow, decide bool
	}{
		{"read_only reads", ModeReadOnly, acp.ToolRead, nil, true, true},
		{"read_only refuses an edit inside", ModeReadOnly, acp.ToolEdit, []string{in}, false, true},
		{"read_only refuses a command", ModeReadOnly, acp.ToolExecute, nil, false, true},
		{"read_only refuses a delete", ModeReadOnly, acp.ToolDelete, []string{in}, false, true},
		{"read_only refuses a move", ModeReadOnly, acp.ToolMove, []string{in}, false, true},
		{"read_only refuses an unnamed kind", ModeReadOnly, acp.ToolOther, []string{in}, false, true},
		{"edit allows an edit inside", ModeEdit, acp.ToolEdit, []string{in}, true, true},
		{"edit allows a relative path inside", ModeEdit, acp.ToolEdit, []string{"sub/b.txt"}, true, true},
		{"edit refuses an edit outside", ModeEdit, acp.ToolEdit, []string{filepath.Join(out, "x")}, false, true},
		{"edit refuses one of two outside", ModeEdit, acp.ToolMove, []string{in, filepath.Join(out, "x")}, false, true},
		{"edit refuses a symlink out", ModeEdit, acp.ToolEdit, []string{filepath.Join(cwd, "escape", "x")}, false, true},
		{"edit refuses a dangling symlink", ModeEdit, acp.ToolEdit, []string{filepath.Join(cwd, "dangling")}, false, true},
		{"edit refuses a dot-dot", ModeEdit, acp.ToolEdit, []string{cwd + "/../" + filepath.Base(cwd) + "/a.txt"}, false, true},
		{"edit refuses an edit naming no file", ModeEdit, acp.ToolEdit, nil, false, true},
		{"edit refuses a command", ModeEdit, acp.ToolExecute, nil, false, true},
		{"edit refuses the kind other (a directory outside)", ModeEdit, acp.ToolOther, []string{in}, false, true},
		{"edit refuses a fetch", ModeEdit, acp.ToolFetch, nil, false, true},
		{"ask asks about an edit", ModeAsk, acp.ToolEdit, []string{in}, false, false},
		{"ask asks about a command", ModeAsk, acp.ToolExecute, nil, false, false},
		{"ask lets a read through", ModeAsk, acp.ToolSearch, nil, true, true},
		{"bypass allows a command", ModeBypass, acp.ToolExecute, nil, true, true},
		{"bypass allows an edit outside", ModeBypass, acp.ToolEdit, []string{filepath.Join(out, "x")}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allow, decided, why := acpModeAnswer(tc.mode, cwd, tc.kind, tc.paths)
			assert.Equal(t, tc.decide, decided)
			assert.Equal(t, tc.allow, allow, why)
			if decided && !allow {
				assert.NotEmpty(t, why, "a refusal says why")
			}
		})
	}
}
