package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestAProbeIsLeftOverOnlyWhenItsTagNamesThisHomeAndAnotherStart(t *testing.T) {
	at := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	home := "/home/u/my card|dir"
	own := probeTag(home, 4242, at)
	cases := []struct {
		name string
		tag  string
		want bool
	}{
		{"another start of this home", probeTag(home, 4242, at.Add(-time.Hour)), true},
		{"another pid of this home", probeTag(home, 17, at), true},
		{"this start", own, false},
		{"another home", probeTag("/home/v/.card", 17, at), false},
		{"a home this one's path begins", probeTag("/home/u/my card", 17, at), false},
		{"a home that begins with this one's path", probeTag(home+"/x", 17, at), false},
		{"no home at all", "17.abc", false},
		{"empty", "", false},
	}
	leftover := leftoverProbe(home, own)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, leftover(tc.tag), "%q", tc.tag)
		})
	}
}
