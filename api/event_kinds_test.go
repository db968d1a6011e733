package api

import (
	"reflect"
	"strings"
	"testing"
)

// kindTags returns the values of key in a field's jsonschema_extras tag.
func kindTags(f reflect.StructField, key string) []string {
	var out []string
	for _, kv := range strings.Split(f.Tag.Get("jsonschema_extras"), ",") {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// Clients are generated with one type per event kind from rpc.discover's
// x-enum and x-kinds: a field added without saying which kinds carry it
// would fail that generation (or, worse, land on every kind).
func TestEveryOptionalEventFieldNamesTheKindsThatCarryIt(t *testing.T) {
	kind, ok := reflect.TypeOf(Event{}).FieldByName("Kind")
	if !ok {
		t.Fatal("Event has no Kind")
	}
	kinds := map[string]bool{}
	for _, k := range kindTags(kind, "x-enum") {
		kinds[k] = true
	}
	for _, k := range []string{EventSession, EventText, EventThinking, EventToolUse, EventToolResult, EventRetry, EventUsage,
		EventWarning, EventStalled, EventOther, EventAgentError, EventApprovalRequested, EventApprovalDecided, EventPromptQueued,
		EventSessionConfigured, EventDone, EventRunError} {
		if !kinds[k] {
			t.Errorf("kind %q is not in Event.Kind's x-enum", k)
		}
	}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "kind" || !strings.Contains(opts, "omitempty") {
				continue
			}
			tags := kindTags(f, "x-kinds")
			if len(tags) == 0 {
				t.Errorf("%s.%s (%s) is optional but names no kinds: add jsonschema_extras:\"x-kinds=<kind>,…\"", typ.Name(), f.Name, name)
			}
			for _, k := range tags {
				if !kinds[k] {
					t.Errorf("%s.%s names kind %q, which Event.Kind's x-enum does not list", typ.Name(), f.Name, k)
				}
			}
		}
	}
	walk(reflect.TypeOf(AgentEvent{}))
}
