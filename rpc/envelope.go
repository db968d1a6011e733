package rpc

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// envelope is a request object's members, each as the client wrote it.
type envelope struct {
	JSONRPC, ID, Method, Params []byte
	// Result and Error make a response to one of the server's own
	// requests (call.go).
	Result, Error []byte

	// dupParams is set when params is an object that gives a name twice,
	// at any depth; dupField names it as decodeParams would. Such params
	// are refused before anything else reads them: two parsers of one
	// object could otherwise read two requests.
	dupParams bool
	dupField  string
	// dupMember names a member of the message itself given twice
	// ("method", "result", or any other name). Such a message is refused
	// whole: which of two methods, or of two answers to a question, a
	// reader takes is exactly what two readers can disagree on.
	dupMember string
}

// envelopeDecoders are reused: a decoder per request was a third of the
// envelope's cost.
var envelopeDecoders = sync.Pool{New: func() any {
	return &envelopeDecoder{dec: jsontext.NewDecoder(bytes.NewReader(nil))}
}}

type envelopeDecoder struct {
	r   bytes.Reader
	dec *jsontext.Decoder
}

// decodeEnvelope reads a request object's members in one pass with the
// json/v2 implementation's tokenizer. Member names match exactly, as a map's
// keys did (encoding/json's struct decoding would take "ID" for "id"). Each
// value is a slice of raw, not a copy: a 3 MiB params member is not copied
// again.
//
// The pass refuses names given twice, at every depth, so a frame without
// one (every frame a client means to send) pays nothing for the check: the
// tokenizer checks while it reads. Only a frame with a repeated name,
// anywhere, is read again, leniently, to find which: a repeated member of
// the envelope itself sets dupMember, and a repeated name in params sets
// dupParams.
func decodeEnvelope(raw []byte) (envelope, error) {
	env, err := readEnvelope(raw, false)
	if err == nil || !errors.Is(err, jsontext.ErrDuplicateName) {
		return env, err
	}
	if env, err = readEnvelope(raw, true); err != nil {
		return env, err
	}
	if env.dupMember != "" {
		return env, nil
	}
	if p := env.Params; len(p) > 0 && p[0] == '{' {
		env.dupField, env.dupParams = duplicateParam(p)
	}
	return env, nil
}

func readEnvelope(raw []byte, allowDuplicates bool) (env envelope, err error) {
	ed := envelopeDecoders.Get().(*envelopeDecoder)
	defer envelopeDecoders.Put(ed)
	ed.r.Reset(raw)
	d := ed.dec
	d.Reset(&ed.r, jsontext.AllowDuplicateNames(allowDuplicates))
	defer d.Reset(bytes.NewReader(nil)) // the pool must not keep raw alive
	if tok, err := d.ReadToken(); err != nil {
		return env, err
	} else if tok.Kind() != '{' {
		return env, errors.New("not an object")
	}
	// seen is only kept on the lenient pass, the one that looks for a
	// repeated member; a message has a handful of members.
	var seen []string
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			return env, err
		}
		name := tok.String()
		if allowDuplicates && env.dupMember == "" {
			// Only copies are kept: keeping name itself would move every
			// member's name to the heap on the strict pass too.
			if i := slices.Index(seen, name); i >= 0 {
				env.dupMember = seen[i]
			} else {
				seen = append(seen, strings.Clone(name))
			}
		}
		v, err := d.ReadValue()
		if err != nil {
			return env, err
		}
		end := int(d.InputOffset())
		value := raw[end-len(v) : end : end]
		switch name {
		case "jsonrpc":
			env.JSONRPC = value
		case "id":
			env.ID = value
		case "method":
			env.Method = value
		case "params":
			env.Params = value
		case "result":
			env.Result = value
		case "error":
			env.Error = value
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return env, err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return env, errors.New("data after the object")
	}
	return env, nil
}

// topLevelString is the string value of member name of params, a JSON
// object, and false when params is not an object, has no such member, or
// its value is not a string. It reads the tokens and skips the other
// members' values without decoding them.
func topLevelString(params []byte, name string) (string, bool) {
	if len(params) == 0 || params[0] != '{' {
		return "", false
	}
	ed := envelopeDecoders.Get().(*envelopeDecoder)
	defer envelopeDecoders.Put(ed)
	ed.r.Reset(params)
	d := ed.dec
	d.Reset(&ed.r, jsontext.AllowDuplicateNames(true))
	defer d.Reset(bytes.NewReader(nil))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", false
	}
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			return "", false
		}
		if tok.String() != name {
			if err := d.SkipValue(); err != nil {
				return "", false
			}
			continue
		}
		v, err := d.ReadToken()
		if err != nil || v.Kind() != '"' {
			return "", false
		}
		return v.String(), true
	}
	return "", false
}
