package daemon

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Letting go of the executable's read-only pages shrinks what is resident
// of the file and loses nothing: the code runs on, from pages mapped again.
func TestLettingGoOfTheBinarysPagesShrinksItsResidentPartAndTheCodeRunsOn(t *testing.T) {
	before := statusKB(t, "RssFile")
	n, err := dropExecutablePages()
	require.NoError(t, err)
	assert.Positive(t, n, "the executable's code and read-only data are mappings of their own")
	after := statusKB(t, "RssFile")
	assert.Less(t, after, before, "resident file pages before %d kB, after %d kB", before, after)
	// Code and tables not run since are read from the file again.
	b, err := strconv.ParseBool("true")
	require.NoError(t, err)
	assert.True(t, b)
	assert.Equal(t, "a-b", strings.Join([]string{"a", "b"}, "-"))
}

func statusKB(t *testing.T, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
