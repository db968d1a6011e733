package spawn

import (
	"errors"

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
