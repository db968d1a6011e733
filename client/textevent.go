package client

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/card-dev/card/api"
)

// splitTextEvent reads a sessions.event of the one shape nearly every event
// of a talkative turn has, a text or thinking piece exactly as the daemon
// writes it:
//
//	{"session_id":S,"seq":N,"turn":T,"event":{"run_id":R,"seq":M,"kind":"text","text":X[,"delta":true]}}
//
// It returns the event with its Text left empty and X, the text as the JSON
// string the daemon wrote (quotes and escapes included), so a follower that
// writes the text into JSON of its own (the ACP front door) splices it in
// rather than having it unquoted here and quoted again there: for a turn
// of many KiB of text those two passes were most of what following it
// cost. Anything else, another member, another order, a space, an escape
// in an id, a string that is not valid JSON (or UTF-8), is not read here
// (ok false) and goes to the decoder as before, so ok means the decoder
// would have read the same event (FuzzSplitTextEvent holds it to that).
func splitTextEvent(p []byte) (ev api.SessionEvent, text []byte, ok bool) {
	r := shapeReader{b: p}
	if !r.lit(`{"session_id":`) {
		return ev, nil, false
	}
	ev.SessionID, ok = r.id()
	ok = ok && r.lit(`,"seq":`)
	if ok {
		ev.Seq, ok = r.int()
	}
	ok = ok && r.lit(`,"turn":`)
	var turn int64
	if ok {
		turn, ok = r.int()
		ev.Turn = int(turn)
		ok = ok && int64(ev.Turn) == turn
	}
	ok = ok && r.lit(`,"event":{"run_id":`)
	if ok {
		ev.Event.RunID, ok = r.id()
	}
	ok = ok && r.lit(`,"seq":`)
	if ok {
		ev.Event.Seq, ok = r.int()
	}
	if !ok || !r.lit(`,"kind":"`) {
		return api.SessionEvent{}, nil, false
	}
	switch {
	case r.lit(api.EventText + `","text":`):
		ev.Event.Kind = api.EventText
	case r.lit(api.EventThinking + `","text":`):
		ev.Event.Kind = api.EventThinking
	default:
		return api.SessionEvent{}, nil, false
	}
	if text, ok = r.str(); !ok {
		return api.SessionEvent{}, nil, false
	}
	ev.Event.Delta = r.lit(`,"delta":true`)
	if !r.lit("}}") || r.i != len(r.b) {
		return api.SessionEvent{}, nil, false
	}
	return ev, text, true
}

// decodeWithoutAnswer is decodeEvent for a follower of the text form: an
// InvokeResult (a terminal event's) is read without its answer, the
// turn's whole text, which the follower had piece by piece and which
// would otherwise be unquoted and copied at the end of every turn, where
// the follower waits for it. Every other member is decoded as before.
//
// The answer is found first by skimming the event's JSON for where each
// answer string starts and ends, without reading the strings' insides,
// and the event with those strings emptied is decoded as any other: for a
// 120 KB answer 0.03 ms where the decoder passing over it took 0.19 ms
// (BenchmarkDecodeWithoutAnswer).
// Bytes the skim cannot place (an escaped member name, an answer that is
// not a string, anything the decoder refuses afterwards) go the decoder's
// way, so the two agree on every event the decoder reads
// (FuzzDecodeWithoutAnswer).
func decodeWithoutAnswer(params json.RawMessage, v any) error {
	if ev, ok := v.(*api.SessionEvent); ok {
		if blanked, ok := blankAnswers(params); ok {
			var got api.SessionEvent
			if decodeEvent(blanked, &got) == nil {
				*ev = got
				return nil
			}
		}
	}
	return jsonv2.Unmarshal(params, v, jsonv1.DefaultOptionsV1(), withoutAnswer)
}

// blankAnswers returns a sessions.event's JSON with the answer of its
// event's result, each one if a name is given twice, written as "" (p
// itself when there is none). Names match as the decoder matches them, in
// any case. ok is false where p is not of a form this can place.
func blankAnswers(p []byte) (blanked []byte, ok bool) {
	s := skimmer{b: p}
	var spans [][2]int
	ok = s.object(func(name []byte) bool {
		if !bytes.EqualFold(name, []byte("event")) || !s.at('{') {
			return s.skip()
		}
		return s.object(func(name []byte) bool {
			if !bytes.EqualFold(name, []byte("result")) || !s.at('{') {
				return s.skip()
			}
			return s.object(func(name []byte) bool {
				if !bytes.EqualFold(name, []byte("answer")) {
					return s.skip()
				}
				if !s.at('"') {
					return false // not a string: the decoder says what it is
				}
				start := s.i
				if !s.str() {
					return false
				}
				spans = append(spans, [2]int{start, s.i})
				return true
			})
		})
	})
	s.space()
	if !ok || s.i != len(p) {
		return nil, false
	}
	if len(spans) == 0 {
		return p, true
	}
	out := make([]byte, 0, len(p)-(spans[0][1]-spans[0][0]))
	last := 0
	for _, sp := range spans {
		out = append(append(out, p[last:sp[0]]...), `""`...)
		last = sp[1]
	}
	return append(out, p[last:]...), true
}

// skimmer finds the ends of JSON values without reading inside strings
// (closingQuote). It checks no more than it must to place them: what it
// passes is for the decoder to judge.
type skimmer struct {
	b []byte
	i int
}

func (s *skimmer) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// at says whether the next value starts with c.
func (s *skimmer) at(c byte) bool {
	s.space()
	return s.i < len(s.b) && s.b[s.i] == c
}

// str passes the string at i.
func (s *skimmer) str() bool {
	end, ok := closingQuote(s.b, s.i)
	if ok {
		s.i = end + 1
	}
	return ok
}

// closingQuote is where the JSON string opening at b[start] ends: the first
// quote after it that follows an even run of backslashes. ok is false when
// b holds no such quote.
func closingQuote(b []byte, start int) (end int, ok bool) {
	end = start + 1
	for {
		j := bytes.IndexByte(b[end:], '"')
		if j < 0 {
			return 0, false
		}
		end += j
		k := end
		for b[k-1] == '\\' {
			k--
		}
		if (end-k)%2 == 0 {
			return end, true
		}
		end++
	}
}

// skip passes one value: a string, an object or array whole (its brackets
// counted outside strings), or a number or literal.
func (s *skimmer) skip() bool {
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		return s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.str() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	}
	start := s.i
	for s.i < len(s.b) && strings.IndexByte(",}] \t\n\r", s.b[s.i]) < 0 {
		s.i++
	}
	return s.i > start
}

// object passes an object, calling member with each member's name when
// i is at its value; member passes the value.
func (s *skimmer) object(member func(name []byte) bool) bool {
	if !s.at('{') {
		return false
	}
	s.i++
	if s.at('}') {
		s.i++
		return true
	}
	for {
		if !s.at('"') {
			return false
		}
		start := s.i
		if !s.str() {
			return false
		}
		name := s.b[start+1 : s.i-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			return false // an escaped name: the decoder unescapes it
		}
		if !s.at(':') {
			return false
		}
		s.i++
		if !member(name) {
			return false
		}
		switch {
		case s.at(','):
			s.i++
		case s.at('}'):
			s.i++
			return true
		default:
			return false
		}
	}
}

var withoutAnswer = jsonv2.WithUnmarshalers(jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, r *api.InvokeResult) error {
	if dec.PeekKind() != '{' {
		return errors.ErrUnsupported // null, or not an object: as the decoder has it
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	kept := []byte{'{'}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		name := tok.String() // the token is void after the next read
		// As encoding/json's rules match names: any case.
		if strings.EqualFold(name, "answer") {
			if err := dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		val, err := dec.ReadValue()
		if err != nil {
			return err
		}
		if len(kept) > 1 {
			kept = append(kept, ',')
		}
		kept, _ = jsontext.AppendQuote(kept, name)
		kept = append(append(kept, ':'), val...)
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	return jsonv1.Unmarshal(append(kept, '}'), r)
}))

// shapeReader walks fixed JSON bytes, declining at the first surprise.
type shapeReader struct {
	b []byte
	i int
}

func (r *shapeReader) lit(s string) bool {
	if !bytes.HasPrefix(r.b[r.i:], []byte(s)) {
		return false
	}
	r.i += len(s)
	return true
}

// int reads a JSON integer: no fraction, exponent or leading zero.
func (r *shapeReader) int() (int64, bool) {
	start := r.i
	if r.i < len(r.b) && r.b[r.i] == '-' {
		r.i++
	}
	digits := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	if r.i == digits || (r.b[digits] == '0' && r.i > digits+1) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(r.b[start:r.i]), 10, 64)
	return n, err == nil
}

// id reads a string with nothing to unescape (card's ids never have).
func (r *shapeReader) id() (string, bool) {
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		return "", false
	}
	end := bytes.IndexByte(r.b[r.i+1:], '"')
	if end < 0 {
		return "", false
	}
	s := r.b[r.i+1 : r.i+1+end]
	for _, c := range s {
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return "", false
		}
	}
	r.i += end + 2
	return string(s), true
}

// str reads a JSON string whole, quotes included. Its end is the first
// quote after an even run of backslashes. A string of printable ASCII with
// no escape is valid as it stands (plainASCII); any other is checked by
// json/v2's validator (UTF-8, escapes, no raw control character).
func (r *shapeReader) str() ([]byte, bool) {
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		return nil, false
	}
	start := r.i
	end, ok := closingQuote(r.b, start)
	if !ok {
		return nil, false
	}
	s := r.b[start : end+1]
	if !plainASCII(s[1:len(s)-1]) && !jsontext.Value(s).IsValid() {
		return nil, false
	}
	r.i = end + 1
	return s, true
}

// plainASCII says whether b is printable ASCII (0x20 to 0x7f) without a
// quote or a backslash: the inside of a JSON string that needs no
// further look. It reads eight bytes at a time, so most of an agent's
// text is passed over five times faster than the validator reads it.
func plainASCII(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// hasByteBelow is set where a byte of x is below n (x's bytes all
	// below 0x80).
	hasByteBelow := func(x, n uint64) bool { return (x-ones*n)&^x&highs != 0 }
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		if x&highs != 0 || hasByteBelow(x, 0x20) || hasByteBelow(x^(ones*'"'), 1) || hasByteBelow(x^(ones*'\\'), 1) {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
