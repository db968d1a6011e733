package spawn

import (
	"reflect"
	"testing"

	"github.com/card-dev/card/api"
)

// The parser's Event carries hints the wire form leaves out; everything
// else must be api.Event's field for field, or Wire would drop what a
// client is meant to see.
func TestTheParsersEventHasExactlyTheWireEventsExportedFields(t *testing.T) {
	exported := func(t reflect.Type) []reflect.StructField {
		var out []reflect.StructField
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.IsExported() {
				// Only the json tag matters on the wire; the schema
				// annotations live on api.Event alone.
				f.Index, f.Offset = nil, 0
				f.Tag = reflect.StructTag(`json:"` + f.Tag.Get("json") + `"`)
				out = append(out, f)
			}
		}
		return out
	}
	got, want := exported(reflect.TypeFor[Event]()), exported(reflect.TypeFor[api.Event]())
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("spawn.Event's exported fields drifted from api.Event's:\n got %v\nwant %v", got, want)
	}
}

func TestWireCopiesEveryExportedField(t *testing.T) {
	e := Event{Kind: api.EventRetry, SessionID: "s", Model: "m", Commands: []api.SlashCommand{{Name: "c"}}, Text: "t", Delta: true, Tool: &api.Tool{Name: "n"},
		Output: "o", IsError: true, Attempt: 1, MaxAttempts: 2, DelayMs: 3, QuietMs: 5, KillAfterMs: 6, Usage: &api.Usage{InputTokens: 4},
		RateLimits: []api.RateLimitWindow{{Window: "five_hour"}},
		Error:      "e", Type: "ty", Raw: []byte(`{}`), cause: api.KindAuth, unbounded: true}
	w := reflect.ValueOf(e.Wire())
	v := reflect.ValueOf(e)
	for i := 0; i < w.NumField(); i++ {
		name := w.Type().Field(i).Name
		if w.Field(i).IsZero() {
			t.Errorf("Wire left %s out", name)
		}
		if !reflect.DeepEqual(w.Field(i).Interface(), v.FieldByName(name).Interface()) {
			t.Errorf("Wire changed %s", name)
		}
	}
}
