package runs

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// The book keeps each adapter's latest report of each window, in adapter
// then window order, and no more windows per adapter than its bound
// however many names an agent prints.
func TestTheRateLimitBookKeepsTheLatestOfEachWindowAndABoundedNumber(t *testing.T) {
	var b rateLimitBook
	assert.Equal(t, []api.RateLimitSeen{}, b.list(""), "empty, never nil")
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	b.note("codex", "run_a", []api.RateLimitWindow{{Window: "primary", WindowMinutes: 300}, {Window: "secondary"}}, t0)
	b.note("claude-code", "run_b", []api.RateLimitWindow{{Window: "five_hour", Status: "allowed"}}, t0)
	b.note("claude-code", "run_c", []api.RateLimitWindow{{Window: "five_hour", Status: "rejected"}}, t0.Add(time.Minute))

	all := b.list("")
	require.Len(t, all, 3)
	assert.Equal(t, []string{"claude-code", "codex", "codex"}, []string{all[0].Adapter, all[1].Adapter, all[2].Adapter})
	assert.Equal(t, "rejected", all[0].Status, "the later report of a window replaces the earlier")
	assert.Equal(t, "run_c", all[0].RunID)
	assert.Equal(t, t0.Add(time.Minute), all[0].SeenAt)
	assert.Len(t, b.list("codex"), 2)
	assert.Empty(t, b.list("gemini"))

	var many []api.RateLimitWindow
	for i := range 3 * maxWindowsPerAdapter {
		many = append(many, api.RateLimitWindow{Window: "w" + strconv.Itoa(i)})
	}
	b.note("pi", "run_d", many, t0)
	assert.Len(t, b.list("pi"), maxWindowsPerAdapter)
}
