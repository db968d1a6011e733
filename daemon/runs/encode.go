package runs

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// encodeEvent is ev's JSON, byte for byte what encoding/json writes for it.
// Each event is encoded once, here, and those bytes are what every
// subscriber is sent and what the store keeps; a chatty agent's run is
// thousands of them, nearly all text with no nested value, and the
// reflection encoder cost more per line than reading and parsing it. Those
// are appended field by field; an event with a nested value (a tool, usage,
// a result, an approval, a raw line) goes to encoding/json.
func encodeEvent(ev *AgentEvent) ([]byte, error) {
	if ev.Tool != nil || ev.Usage != nil || ev.Raw != nil || ev.Result != nil || ev.Approval != nil {
		return json.Marshal(ev)
	}
	b := make([]byte, 0, 64+len(ev.RunID)+len(ev.Text)+len(ev.Output)+len(ev.Error)+len(ev.SessionID)+len(ev.Model))
	b = append(b, `{"run_id":`...)
	b = appendString(b, ev.RunID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, `,"kind":`...)
	b = appendString(b, ev.Kind)
	b = appendStringField(b, `,"session_id":`, ev.SessionID)
	b = appendStringField(b, `,"model":`, ev.Model)
	b = appendStringField(b, `,"text":`, ev.Text)
	if ev.Delta {
		b = append(b, `,"delta":true`...)
	}
	b = appendStringField(b, `,"output":`, ev.Output)
	if ev.IsError {
		b = append(b, `,"is_error":true`...)
	}
	b = appendIntField(b, `,"attempt":`, int64(ev.Attempt))
	b = appendIntField(b, `,"max_attempts":`, int64(ev.MaxAttempts))
	b = appendIntField(b, `,"delay_ms":`, ev.DelayMs)
	b = appendIntField(b, `,"quiet_ms":`, ev.QuietMs)
	b = appendIntField(b, `,"kill_after_ms":`, ev.KillAfterMs)
	b = appendStringField(b, `,"error":`, ev.Error)
	b = appendStringField(b, `,"type":`, ev.Type)
	b = appendStringField(b, `,"status":`, string(ev.Status))
	return append(b, '}'), nil
}

func appendStringField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(append(b, name...), v)
}

func appendIntField(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, name...), v, 10)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json does: <, >
// and & escaped as \u003c and so on, invalid UTF-8 as \ufffd, U+2028 and
// U+2029 escaped, control characters as \n or \u00XX.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
