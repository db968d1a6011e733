package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// lineOptions decode a CLI's line leniently: a stray invalid UTF-8 byte or
// a repeated key in one event must not cost the event.
var lineOptions = jsonv2.JoinOptions(jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))

// decodeLine decodes one stdout line into v. It uses the json/v2
// implementation (the stdlib's own encoding/json/v2 when built with
// GOEXPERIMENT=jsonv2) because the stream is the daemon's hottest path:
// v1's validate-then-decode ran at a fifth of the speed on 100 MB of
// stream-json (docs/performance.md).
func decodeLine(line []byte, v any) error {
	return jsonv2.Unmarshal(line, v, lineOptions)
}

// isTypeError is a field of an unexpected JSON type (a string where blocks
// were expected). The other fields are still usable, and a CLI that
// changes one field's shape must not cost the whole line.
func isTypeError(err error) bool {
	var se *jsonv2.SemanticError
	return errors.As(err, &se)
}

// The helpers below are shared by every adapter's parser and session
// protocol: what they read of a CLI's JSON and of its stderr.

// validRaw keeps raw only if it is valid and bounded JSON, so an Event always
// marshals.
func validRaw(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || len(raw) > maxRaw || !json.Valid(raw) {
		return nil
	}
	return append(json.RawMessage(nil), raw...)
}

// decodeParams reads a message's params leniently (a field of an
// unexpected type costs that field, not the message).
func decodeParams(raw json.RawMessage, v any) bool {
	err := decodeLine(raw, v)
	return err == nil || isTypeError(err)
}

// lenientResult reads a call's result as decodeParams reads params: an
// agent's answer with one field of an unexpected type (there are many in
// ACP's results) costs that field, not the turn.
type lenientResult struct{ v any }

func (r *lenientResult) UnmarshalJSON(b []byte) error {
	if !decodeParams(b, r.v) {
		return fmt.Errorf("the agent's result is not a JSON object of the expected shape: %.200s", b)
	}
	return nil
}

// lastLine is the last non-empty line of s with ANSI colour codes removed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(stripANSI(lines[i]))
		if l != "" {
			return l
		}
	}
	return ""
}

// lineWith returns the first line of s containing marker, trimmed.
func lineWith(s, marker string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, marker) {
			return strings.TrimSpace(stripANSI(l))
		}
	}
	return marker
}
