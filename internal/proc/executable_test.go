package proc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Scripts written while other goroutines fork all the time run at once:
// no fork ever holds a descriptor open for writing on one, so none is
// refused as a text file busy. (Written with os.WriteFile instead, some
// of these runs fail with ETXTBSY.)
func TestAScriptWrittenWhileOthersForkRunsWithoutTextFileBusy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var forks sync.WaitGroup
	for range 2 {
		forks.Go(func() {
			for ctx.Err() == nil {
				_ = exec.Command("/bin/true").Run()
			}
		})
	}
	defer forks.Wait()
	defer cancel()
	dir := t.TempDir()
	for i := range 100 {
		p := filepath.Join(dir, "agent"+strconv.Itoa(i%4))
		require.NoError(t, WriteExecutable(p, []byte("#!/bin/sh\necho "+strconv.Itoa(i)+"\n")))
		out, err := exec.Command(p).Output()
		require.NoError(t, err, "run %d", i)
		assert.Equal(t, strconv.Itoa(i)+"\n", string(out))
	}
	st, err := os.Stat(filepath.Join(dir, "agent0"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	left, err := filepath.Glob(filepath.Join(dir, "*.tmp.*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary file is left behind")
}
