package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Doc describes a method or notification. A method cannot be registered
// without a summary: rpc.discover and docs/protocol.md are built from these,
// and an undocumented method is one no client author can use correctly.
type Doc struct {
	Summary     string
	Description string
	// Errors lists the application codes (from the registry's Codes) the
	// method may answer with, beyond the standard ones every method can
	// return.
	Errors []int64
	// Access is the method's class (read, agents or host): which
	// connections may call it. It is required: a method registered without
	// one would be callable by whoever connects, however they connected.
	Access Access
}

// Validator is implemented by params types that check themselves after
// decoding. Returning a *FieldError names the field in the -32602 answer.
type Validator interface {
	Validate() error
}

// MethodInfo is what the registry knows about one method, for discovery.
type MethodInfo struct {
	Name    string
	Doc     Doc
	Params  reflect.Type
	Result  reflect.Type
	AliasOf string
}

// NotificationInfo documents a server-to-client notification.
type NotificationInfo struct {
	Name   string
	Doc    Doc
	Params reflect.Type
}

type method struct {
	info MethodInfo
	call func(ctx context.Context, params json.RawMessage) (any, Then, error)
}

// Then is what a handler goes on to do once its answer is on the wire: the
// server sends the answer first and then calls it, so anything it sends
// (notifications of a stream the answer announced) reaches the client after
// the answer, never before. ctx is the connection's context (Peer.Context):
// it ends when the client goes away. The request no longer counts against
// the connection's in-flight cap while Then runs, so a long stream does not
// hold a request slot.
type Then func(ctx context.Context)

// Registry maps method names to typed handlers. Params are decoded and
// validated here, once, so no handler parses JSON or invents its own error
// shape for bad input.
type Registry struct {
	mu            sync.RWMutex
	methods       map[string]*method
	notifications []NotificationInfo
	// serverRequests documents what the server asks clients (call.go).
	serverRequests []ServerRequestInfo
	codes          []CodeInfo
	common         []int64
	mapErr         func(error) error
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{methods: map[string]*method{}}
}

// Register adds a method with typed params P and result R. It panics on a
// missing summary or a duplicate name: both are programming errors that must
// fail at startup, not at the first call.
func Register[P, R any](r *Registry, name string, doc Doc, fn func(ctx context.Context, params P) (R, error)) {
	RegisterThen(r, name, doc, func(ctx context.Context, p P) (R, Then, error) {
		res, err := fn(ctx, p)
		return res, nil, err
	})
}

// RegisterThen adds a method whose handler answers and then goes on: it
// returns its result and, optionally, a Then the server runs once the answer
// has been sent. A method that starts a stream of notifications answers with
// what the stream is about and sends the stream from its Then, so the client
// always hears the answer first. On an error the Then is not run.
func RegisterThen[P, R any](r *Registry, name string, doc Doc, fn func(ctx context.Context, params P) (R, Then, error)) {
	if strings.TrimSpace(doc.Summary) == "" {
		panic(fmt.Sprintf("rpc: method %q registered without a summary", name))
	}
	if !doc.Access.Valid() {
		panic(fmt.Sprintf("rpc: method %q registered without an access class (Doc.Access %q; one of %s)", name, doc.Access, joinClasses(AccessClasses)))
	}
	pt := reflect.TypeFor[P]()
	m := &method{
		info: MethodInfo{Name: name, Doc: doc, Params: pt, Result: reflect.TypeFor[R]()},
		call: func(ctx context.Context, raw json.RawMessage) (any, Then, error) {
			var p P
			if err := decodeParams(raw, pt, &p); err != nil {
				return nil, nil, err
			}
			if v, ok := any(&p).(Validator); ok {
				if err := v.Validate(); err != nil {
					return nil, nil, err
				}
			}
			res, then, err := fn(ctx, p)
			if err != nil {
				return nil, nil, err
			}
			return res, then, nil
		},
	}
	r.add(name, m)
}

// Alias registers another name for an existing method, with the same shapes.
// A name kept for compatibility with another protocol is best an alias: it
// cannot drift from the method it stands for.
func (r *Registry) Alias(alias, target string) {
	r.mu.RLock()
	m, ok := r.methods[target]
	r.mu.RUnlock()
	if !ok {
		panic(fmt.Sprintf("rpc: alias %q for unknown method %q", alias, target))
	}
	a := &method{info: m.info, call: m.call}
	a.info.Name = alias
	a.info.AliasOf = target
	r.add(alias, a)
}

func (r *Registry) add(name string, m *method) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.methods[name]; dup {
		panic(fmt.Sprintf("rpc: method %q registered twice", name))
	}
	r.methods[name] = m
}

// Notification documents a server-to-client notification whose params are P.
func Notification[P any](r *Registry, name string, doc Doc) {
	if strings.TrimSpace(doc.Summary) == "" {
		panic(fmt.Sprintf("rpc: notification %q registered without a summary", name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notifications = append(r.notifications, NotificationInfo{Name: name, Doc: doc, Params: reflect.TypeFor[P]()})
}

// RegisterCodes adds the application's error codes to the table rpc.discover
// publishes. It panics on a code or name already in the table, rpc's own
// included: two meanings for one code is a programming error that must fail
// at startup.
func (r *Registry) RegisterCodes(codes ...CodeInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range codes {
		for _, have := range append(Codes(), r.codes...) {
			if have.Code == c.Code || have.Name == c.Name {
				panic(fmt.Sprintf("rpc: error code %d %q registered twice (the table has %d %q)", c.Code, c.Name, have.Code, have.Name))
			}
		}
		r.codes = append(r.codes, c)
	}
}

// CommonErrors names application codes (registered with RegisterCodes)
// that any method may answer with, such as the refusal of a method the
// connection's grants do not cover: rpc.discover lists them under every
// method, beside rpc's standard ones.
func (r *Registry) CommonErrors(codes ...int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.common = append(r.common, codes...)
}

// CommonErrorCodes are the codes CommonErrors named.
func (r *Registry) CommonErrorCodes() []int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]int64(nil), r.common...)
}

// Codes is every error code the registry's methods answer with: rpc's own
// first, then the application's in the order it registered them.
func (r *Registry) Codes() []CodeInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append(Codes(), r.codes...)
}

// MapErrors sets how a handler's (or a Validate method's) error is mapped
// before ToError's defaults apply. The application maps its domain errors
// onto its codes there, in one place, so handlers return them as they are.
// f returns its argument when it has nothing to say about an error.
func (r *Registry) MapErrors(f func(error) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mapErr = f
}

// Methods lists every registered method, sorted by name.
func (r *Registry) Methods() []MethodInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]MethodInfo, 0, len(r.methods))
	for _, m := range r.methods {
		out = append(out, m.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Notifications lists the documented server-to-client notifications.
func (r *Registry) Notifications() []NotificationInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]NotificationInfo(nil), r.notifications...)
}

// Dispatch runs a method and returns its answer, plus the work the handler
// asked to do once that answer is sent (nil when none; see Then): the caller
// sends the answer, then runs it. It never panics: a handler panic becomes
// -32603 and is logged with its stack, so one bad request cannot take the
// daemon down.
func (r *Registry) Dispatch(ctx context.Context, name string, params json.RawMessage) (result any, then Then, err *Error) {
	r.mu.RLock()
	m, ok := r.methods[name]
	mapErr := r.mapErr
	r.mu.RUnlock()
	if !ok {
		return nil, nil, &Error{Code: CodeMethodNotFound, Message: fmt.Sprintf("method not found: %q (rpc.discover lists the methods)", name), Data: map[string]any{"method": name}}
	}
	defer func() {
		if p := recover(); p != nil {
			result, then = nil, nil
			err = &Error{Code: CodeInternalError, Message: fmt.Sprintf("internal error in %s: %v", name, p)}
			if peer := PeerFrom(ctx); peer != nil && peer.onPanic != nil {
				peer.onPanic(name, p, debug.Stack())
			}
		}
	}()
	herr := authorize(ctx, &m.info)
	if herr == nil {
		result, then, herr = m.call(ctx, params)
	}
	if herr != nil {
		if mapErr != nil {
			herr = mapErr(herr)
		}
		return nil, nil, ToError(herr)
	}
	return result, then, nil
}

// ToError maps a handler's error onto the wire error.
func ToError(err error) *Error {
	var re *Error
	if errors.As(err, &re) {
		return re
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		data := map[string]any{}
		if fe.Field != "" {
			data["field"] = fe.Field
		}
		return &Error{Code: CodeInvalidParams, Message: "invalid params: " + fe.Error(), Data: data}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Code: CodeInternalError, Message: "the request was cancelled: the connection closed or the daemon is shutting down"}
	}
	return &Error{Code: CodeInternalError, Message: err.Error()}
}

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
// *FieldError naming the member, nested ones as path.to[0].member.
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
		return &FieldError{Message: "params must be an object of named parameters"}
	}
	err := jsonv2.Unmarshal(raw, dst, paramsOptions)
	if err == nil {
		return nil
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		if errors.Is(err, jsontext.ErrDuplicateName) {
			return &FieldError{Field: pointerField(syn.JSONPointer), Message: duplicateMessage}
		}
		return &FieldError{Message: "params are not valid JSON: " + syn.Err.Error()}
	}
	var sem *jsonv2.SemanticError
	if !errors.As(err, &sem) {
		return &FieldError{Message: err.Error()}
	}
	field := pointerField(sem.JSONPointer)
	if errors.Is(err, jsonv2.ErrUnknownName) {
		return &FieldError{Field: field, Message: "unknown field" + knownFields(t, sem.JSONPointer)}
	}
	if sem.GoType == nil {
		return &FieldError{Field: field, Message: sem.Error()}
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
		return &FieldError{Message: "params " + what}
	}
	return &FieldError{Field: field, Message: what}
}

// duplicateParam reports the first name given twice in one object of
// params, at any depth, as the field name decodeParams would give it. The
// JSON-RPC layer between the frame and the registry re-encodes params from
// a map, which keeps only the last of two equal names, so the frame is
// checked for them first, while both are still there.
func duplicateParam(raw []byte) (field string, dup bool) {
	// The common case, no duplicate, is one validating pass without a
	// decoder; only a refusal pays for finding where.
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
