package plan

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// A read that never answers (a stalled network or FUSE mount; here a pipe
// nobody writes) ends at its deadline with errTooSlow, and the descriptor
// is closed, not left to the read.
func TestAReadThatNeverAnswersEndsAtItsDeadlineAndClosesTheFile(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer w.Close()
	start := time.Now()
	_, err = readWithin(r, 100*time.Millisecond, func() (int, error) {
		return r.Read(make([]byte, 16))
	})
	assert.ErrorIs(t, err, errTooSlow)
	assert.Less(t, time.Since(start), 2*time.Second)
	_, err = r.Stat()
	assert.ErrorIs(t, err, os.ErrClosed, "the descriptor is closed")
}

// A file that changes between its check and its read (grown, shrunk, or
// rewritten as something else) is refused naming its field, not sent as
// what it has become; the client's descriptor is closed either way.
func TestAFileThatChangesBetweenItsCheckAndItsReadIsRefused(t *testing.T) {
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 1000)...)
	cases := map[string]func(path string){
		"grown":     func(p string) { require.NoError(t, os.WriteFile(p, append(png, 1, 2, 3), 0o600)) },
		"shrunk":    func(p string) { require.NoError(t, os.Truncate(p, 100)) },
		"rewritten": func(p string) { require.NoError(t, os.WriteFile(p, append([]byte("GIF89a"), png[6:]...), 0o600)) },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.png")
			require.NoError(t, os.WriteFile(path, png, 0o600))
			lim := AttachmentLimits{MaxCount: 1, MaxBytes: 4096}
			checked, err := readAttachments([]api.Attachment{{Path: path}}, lim)
			require.NoError(t, err)
			f := checked[0].file
			change(path)
			_, records, err := attach("claude-code", checked, false)
			require.NoError(t, err)
			err = stage(checked, records, t.TempDir(), lim.MaxBytes)
			var fe *api.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, "attachments[0].path", fe.Field)
			assert.Contains(t, fe.Message, "changed while card read it")
			_, err = f.Stat()
			assert.ErrorIs(t, err, os.ErrClosed)
		})
	}
}
