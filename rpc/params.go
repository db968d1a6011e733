package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/card-dev/card/api"
)

// paramsOptions decode params strictly: an unknown member is refused (a
// misspelt option is never silently ignored); a name matches its field
// exactly, case included, so PERMISSION_MODE is not permission_mode; and a
// name given twice is refused rather than the last one silently winning,
// since two parsers of one object could otherwise read two requests (a
// proxy that checked the first "id", a daemon that ran the second). These
// are json/v2's defaults, said here so no one loosens them by accident.
var paramsOptions = jsonv2.JoinOptions(
	jsonv2.RejectUnknownMembers(true),
	jsonv2.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
)

// decodeParams decodes params strictly (paramsOptions), with every refusal a
// *api.FieldError naming the member, nested ones as path.to[0].member.
func decodeParams(raw json.RawMessage, t reflect.Type, dst any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	k := t.Kind()
	if k == reflect.Pointer {
		k = t.Elem().Kind()
	}
	if k == reflect.Struct && raw[0] != '{' {
		return &api.FieldError{Message: "params must be an object of named parameters"}
	}
	err := jsonv2.Unmarshal(raw, dst, paramsOptions)
	if err == nil {
		return nil
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		if errors.Is(err, jsontext.ErrDuplicateName) {
			return &api.FieldError{Field: pointerField(syn.JSONPointer), Message: duplicateMessage}
		}
		return &api.FieldError{Message: "params are not valid JSON: " + syn.Err.Error()}
	}
	var sem *jsonv2.SemanticError
	if !errors.As(err, &sem) {
		return &api.FieldError{Message: err.Error()}
	}
	field := pointerField(sem.JSONPointer)
	if errors.Is(err, jsonv2.ErrUnknownName) {
		return &api.FieldError{Field: field, Message: "unknown field" + knownFields(t, sem.JSONPointer)}
	}
	if sem.GoType == nil {
		return &api.FieldError{Field: field, Message: sem.Error()}
	}
	what := "must be " + jsonKind(sem.GoType)
	if sem.JSONKind != 0 {
		what += ", not " + kindName(sem.JSONKind)
	}
	if sem.JSONKind != 0 && kindMatches(sem.JSONKind, sem.GoType) {
		// The kind was right and the value was not (a fraction or an
		// overflow for an integer): name the value when it is short.
		what = "must be " + jsonKind(sem.GoType)
		if v := sem.JSONValue; len(v) > 0 && len(v) <= 40 {
			what += ", not " + string(v)
		} else if sem.Err != nil {
			what += ": " + sem.Err.Error()
		}
	}
	if field == "" {
		return &api.FieldError{Message: "params " + what}
	}
	return &api.FieldError{Field: field, Message: what}
}

// duplicateParam reports the first name given twice in one object of
// params, at any depth, as the field name decodeParams would give it. The
// frame stream refuses such params before the method is even looked up
// (decodeEnvelope notices the repeat in its own pass and calls this only
// then, to name it), so what the registry decodes never depends on which
// of two equal names a parser keeps.
func duplicateParam(raw []byte) (field string, dup bool) {
	// No duplicate is one validating pass without a decoder; only a
	// refusal pays for finding where.
	if jsontext.Value(raw).IsValid(jsontext.AllowDuplicateNames(false)) {
		return "", false
	}
	_, err := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(false)).ReadValue()
	var syn *jsontext.SyntacticError
	if errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syn) {
		return pointerField(syn.JSONPointer), true
	}
	return "", false
}

// duplicateMessage is the -32602 text for a name given twice.
const duplicateMessage = "given more than once; each name may appear once in an object"

// pointerField turns a JSON Pointer ("/attachments/0/path") into the field
// name clients see ("attachments[0].path").
func pointerField(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return k.String()
}

func kindMatches(k jsontext.Kind, t reflect.Type) bool {
	return kindName(k) == jsonKind(t) || (k == '0' && jsonKind(t) == "an integer")
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
}

// knownFields lists the JSON names the struct at ptr accepts (the unknown
// name's parent), for the message that refuses it, and points at a known
// name that differs only in case.
func knownFields(t reflect.Type, ptr jsontext.Pointer) string {
	toks := slices.Collect(ptr.Tokens())
	if len(toks) == 0 {
		return ""
	}
	unknown := toks[len(toks)-1]
	for _, tok := range toks[:len(toks)-1] {
		t = fieldType(t, tok)
		if t == nil {
			return ""
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return "; this method takes no params"
	}
	for _, n := range names {
		if strings.EqualFold(n, unknown) {
			return fmt.Sprintf("; names are case-sensitive: did you mean %q?", n)
		}
	}
	return "; known fields: " + strings.Join(names, ", ")
}

// fieldType is the Go type of a struct's member named tok (or of a slice's
// or map's element), for walking a JSON Pointer through params types.
func fieldType(t reflect.Type, tok string) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		return t.Elem()
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "" {
				name = f.Name
			}
			if f.IsExported() && name == tok {
				return f.Type
			}
		}
	}
	return nil
}
