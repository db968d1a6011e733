package spawn

import (
	"bytes"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/card-dev/card/api"
)

// A Claude Code run with partial messages prints one stream_event line per
// token of text or thinking: thousands of lines a turn, nearly all of one
// shape. The event inside is the Messages API's, printed again in the order
// its members arrived in, which is the API's own (a gateway that reorders
// them gets the decoder, as any other line does):
//
//	{"type":"stream_event","event":{"type":"content_block_delta","index":0,
//	 "delta":{"type":"text_delta","text":"…"}},"session_id":"…",
//	 "parent_tool_use_id":null,"uuid":"…"}
//
// Decoding such a line into claudeLine by reflection took 1.2 µs on a 2-core
// EPYC, most of what card added to a chatty run; even validating it with the
// json/v2 validator took 0.39 µs, the cost of setting one up per line.
// delta reads that one shape from its bytes instead. The shape is fixed
// bytes, an index and strings, so the line is valid JSON exactly when the
// index is a JSON integer and each string is a valid JSON string, which
// jsontext checks as it unquotes them. A line that differs in any of the
// fixed bytes (another key order, spaces, one more member, an escaped key)
// is not this shape, and Feed decodes it as before: the fast path may only
// decline, never read a line otherwise than the decoder would.
// TestTheDeltaFastPathReadsALineAsTheDecoderDoes and FuzzClaudeDelta hold it
// to that.

var (
	deltaHead = []byte(`{"type":"stream_event","event":{"type":"content_block_delta","index":`)
	// After the index: the delta's kind and its one text member, by kind.
	deltaText     = []byte(`,"delta":{"type":"text_delta","text":`)
	deltaThinking = []byte(`,"delta":{"type":"thinking_delta","thinking":`)
	deltaSession  = []byte(`}},"session_id":`)
	deltaParent   = []byte(`,"parent_tool_use_id":`)
	deltaUUID     = []byte(`,"uuid":`)
)

// delta reads a text or thinking delta line of the shape above as Feed
// would, and says false for every other line, which Feed then decodes in
// full.
func (p *claudeParser) delta(line []byte) ([]Event, bool) {
	rest, found := bytes.CutPrefix(line, deltaHead)
	if !found {
		return nil, false
	}
	// The index: a JSON integer of digits only (no sign, fraction or
	// exponent; no leading zero).
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || i > 1 && rest[0] == '0' {
		return nil, false
	}
	rest = rest[i:]
	thinking := false
	if r, found := bytes.CutPrefix(rest, deltaText); found {
		rest = r
	} else if r, found := bytes.CutPrefix(rest, deltaThinking); found {
		rest, thinking = r, true
	} else {
		return nil, false
	}
	text, rest, found := cutString(rest)
	if !found {
		return nil, false
	}
	if rest, found = bytes.CutPrefix(rest, deltaSession); !found {
		return nil, false
	}
	session, rest, found := cutString(rest)
	if !found {
		return nil, false
	}
	if rest, found = bytes.CutPrefix(rest, deltaParent); !found {
		return nil, false
	}
	// parent_tool_use_id and uuid are not read (claudeLine has no such
	// fields), only checked: parent_tool_use_id is null, or the id of the
	// tool call a subagent's line belongs to.
	var parent, uuid []byte
	if r, found := bytes.CutPrefix(rest, []byte("null")); found {
		rest = r
	} else if parent, rest, found = cutString(rest); !found {
		return nil, false
	}
	if rest, found = bytes.CutPrefix(rest, deltaUUID); !found {
		return nil, false
	}
	if uuid, rest, found = cutString(rest); !found || string(rest) != "}" {
		return nil, false
	}
	// Unquoting checks each string, and fails also on what the decoder
	// would have mangled (invalid UTF-8, which it replaces with U+FFFD):
	// such a line is left to it. The session id is the same on every line
	// of a run, so it is checked and unquoted only when its bytes change.
	for _, q := range [][]byte{parent, uuid} {
		if q == nil {
			continue
		}
		u, err := jsontext.AppendUnquote(p.unquoted[:0], q)
		if err != nil {
			return nil, false
		}
		p.unquoted = u
	}
	t, err := jsontext.AppendUnquote(p.unquoted[:0], text)
	if err != nil {
		return nil, false
	}
	p.unquoted = t
	txt := string(t)
	if !bytes.Equal(session, p.quotedSession) {
		s, err := jsontext.AppendUnquote(p.unquoted[:0], session)
		if err != nil {
			return nil, false
		}
		p.unquoted = s
		p.quotedSession = append(p.quotedSession[:0], session...)
		if len(s) > 0 {
			p.sessionID = string(s)
		}
	}
	// From here on the line is read: what follows is streamEvent's.
	if txt == "" {
		return nil, true
	}
	if thinking {
		p.streamedThinking = true
		p.one[0] = Event{Kind: api.EventThinking, Text: txt, Delta: true}
	} else {
		p.streamedText = true
		p.one[0] = Event{Kind: api.EventText, Text: txt, Delta: true}
	}
	return p.one[:], true
}

// cutString splits b, which starts with a quote, after the JSON string it
// starts: at its first quote not escaped by a backslash, each backslash
// escaping the byte after it, as in every valid JSON string. Whether the
// string is valid is for jsontext.AppendUnquote to say.
func cutString(b []byte) (quoted, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return b[:i+1], b[i+1:], true
		}
	}
	return nil, nil, false
}
