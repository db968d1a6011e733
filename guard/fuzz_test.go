package guard

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParseAncestry holds ParseAncestry to the properties the rest of card
// relies on: whatever a host puts in CAR_INVOKED_BY, parsing never panics and
// yields ids that are non-empty, trimmed, lowercase and comma-free, and
// formatting then re-parsing gives the same chain (so a child's env says what
// its parent meant).
func FuzzParseAncestry(f *testing.F) {
	for _, s := range []string{"", ",", " Claude-Code , ,codex ", "a,b,c", "\t\n", "İ,K,ß", "\xff,\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		chain := ParseAncestry(raw)
		for _, id := range chain {
			if id == "" {
				t.Fatalf("empty id from %q", raw)
			}
			if id != strings.TrimSpace(id) {
				t.Fatalf("untrimmed id %q from %q", id, raw)
			}
			if id != strings.ToLower(id) {
				t.Fatalf("id %q from %q is not lowercase", id, raw)
			}
			if strings.Contains(id, ",") {
				t.Fatalf("id %q from %q holds a comma", id, raw)
			}
		}
		if again := ParseAncestry(Format(chain)); !slices.Equal(again, chain) {
			t.Fatalf("round trip of %q: %q became %q", raw, chain, again)
		}
		if len(chain) > strings.Count(raw, ",")+1 {
			t.Fatalf("%d ids from %d items", len(chain), strings.Count(raw, ",")+1)
		}
	})
}
