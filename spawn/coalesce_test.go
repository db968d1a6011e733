package spawn

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// prefixParser reads lines of the form "t:TEXT" (a text delta), "k:TEXT"
// (a thinking delta), "w:TEXT" (a whole text, not a delta) and "u:NAME" (a
// tool call), so a shell script can print exactly the events a test needs.
type prefixParser struct{ answer strings.Builder }

func (p *prefixParser) Feed(line []byte) []Event {
	kind, text, _ := strings.Cut(string(line), ":")
	switch kind {
	case "t":
		p.answer.WriteString(text)
		return []Event{{Kind: api.EventText, Text: text, Delta: true}}
	case "k":
		return []Event{{Kind: api.EventThinking, Text: text, Delta: true}}
	case "w":
		return []Event{{Kind: api.EventText, Text: text}}
	case "u":
		return []Event{{Kind: api.EventToolUse, Tool: &api.Tool{Name: text}}}
	}
	return nil
}

func (p *prefixParser) Finish(ExitInfo) api.Result { return api.Result{Answer: p.answer.String()} }

// brief is an event as these tests compare it: its kind, its text or its
// tool's name, and whether it is a delta.
type brief struct {
	Kind, Text string
	Delta      bool
}

func briefs(evs []Event) []brief {
	out := make([]brief, 0, len(evs))
	for _, ev := range evs {
		b := brief{Kind: ev.Kind, Text: ev.Text, Delta: ev.Delta}
		if ev.Tool != nil {
			b.Text = ev.Tool.Name
		}
		out = append(out, b)
	}
	return out
}

func runPrefixed(t *testing.T, script string, onEvent func(Event)) api.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, RunSpec{Plan: shPlan(t, script), Parser: &prefixParser{}, OnEvent: onEvent})
	require.NoError(t, err)
	return res
}

func TestDeltasReadTogetherGoOutAsOneEventEachRunOfAKind(t *testing.T) {
	cases := []struct {
		name   string
		output string // printed by one printf: one write, read at once
		want   []brief
	}{
		{
			name:   "text deltas in a row are one text delta with all their text in order",
			output: `t:one \nt:two \nt:three\n`,
			want:   []brief{{api.EventText, "one two three", true}},
		},
		{
			name:   "an event that is not a delta keeps its place between the merged runs",
			output: `t:a\nt:b\nu:Read\nt:c\nt:d\n`,
			want:   []brief{{api.EventText, "ab", true}, {api.EventToolUse, "Read", false}, {api.EventText, "cd", true}},
		},
		{
			name:   "thinking and text are never merged into each other",
			output: `k:hm\nk:m\nt:yes\nk:but\n`,
			want:   []brief{{api.EventThinking, "hmm", true}, {api.EventText, "yes", true}, {api.EventThinking, "but", true}},
		},
		{
			name:   "a whole text (not a delta) stands alone",
			output: `t:x\nw:whole\nt:y\n`,
			want:   []brief{{api.EventText, "x", true}, {api.EventText, "whole", false}, {api.EventText, "y", true}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var evs []Event
			runPrefixed(t, "printf '"+tc.output+"'", func(ev Event) { evs = append(evs, ev) })
			assert.Equal(t, tc.want, briefs(evs))
		})
	}
}

func TestADeltaThatArrivesAloneGoesOutBeforeTheAgentPrintsAgain(t *testing.T) {
	// The agent prints one delta, then waits until the test has received it
	// as an event: a runner that held the delta for more would never let
	// the agent go on, and the run would hit the test's deadline.
	dir := t.TempDir()
	gate := filepath.Join(dir, "seen")
	var mu sync.Mutex
	var evs []Event
	res := runPrefixed(t, `echo t:first; while [ ! -e `+gate+` ]; do sleep 0.01; done; echo t:second`, func(ev Event) {
		mu.Lock()
		evs = append(evs, ev)
		mu.Unlock()
		if ev.Text == "first" {
			require.NoError(t, os.WriteFile(gate, nil, 0o600))
		}
	})
	assert.Equal(t, "firstsecond", res.Answer)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []brief{{api.EventText, "first", true}, {api.EventText, "second", true}}, briefs(evs))
}

func TestAMergedDeltaCarriesAtMostMaxHeldTextAndLosesNothing(t *testing.T) {
	// 48 lines of 1 KiB of text: more than one merged delta can carry.
	line := strings.Repeat("x", 1023) + "."
	var evs []Event
	res := runPrefixed(t, `i=0; while [ $i -lt 48 ]; do echo "t:`+line+`"; i=$((i+1)); done`, func(ev Event) { evs = append(evs, ev) })
	var all strings.Builder
	for _, ev := range evs {
		require.Equal(t, api.EventText, ev.Kind)
		assert.LessOrEqual(t, len(ev.Text), maxHeldText)
		all.WriteString(ev.Text)
	}
	assert.Equal(t, strings.Repeat(line, 48), all.String())
	assert.Equal(t, all.String(), res.Answer)
	assert.GreaterOrEqual(t, len(evs), 2, "48 KiB of text cannot be one merged delta")
}
