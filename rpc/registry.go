package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"
	"sync"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/rpc/rpcclient"
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
	// Access is the method's class (one of AccessClasses): which
	// connections may call it. It is required: a method registered without
	// one would be callable by whoever connects, however they connected.
	// For a server-to-client request it is the class a connection must
	// hold to be sent the request at all (and so to answer it).
	Access Access
	// AccessRules raise the class for calls whose params carry a value
	// (AccessRule); such a call needs Access and every matching rule's
	// class. They are checked once the params are decoded, before the
	// params' own Validate and the handler.
	AccessRules []AccessRule
}

// Validator is implemented by params types that check themselves after
// decoding. Returning an *api.FieldError names the field in the -32602 answer.
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
	call func(ctx context.Context, info *MethodInfo, params json.RawMessage) (any, Then, error)
	// fast, when set, is tried first on the connection's read goroutine
	// (see Fast); ok false sends the request on to call.
	fast func(ctx context.Context, info *MethodInfo, params json.RawMessage) (res any, ok bool, err error)
	// orderBy, when set, is the param whose value puts the method's
	// requests of one connection in one lane (see Ordered).
	orderBy string
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
	// paramDocs: method or server request → param → what it does for a
	// client (DescribeParams).
	paramDocs map[string]map[string]string
}

// DescribeParams gives rpc.discover each param's description, by method (or
// server request) and param name. The descriptions are kept apart from the
// Go types on purpose: a struct's doc comment speaks to the Go reader ("ID
// is the adapter…"), a published description to a client in any language.
// An alias takes its target's. Later calls add to and replace earlier ones.
func (r *Registry) DescribeParams(docs map[string]map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paramDocs == nil {
		r.paramDocs = map[string]map[string]string{}
	}
	for m, ps := range docs {
		if r.paramDocs[m] == nil {
			r.paramDocs[m] = map[string]string{}
		}
		for p, d := range ps {
			r.paramDocs[m][p] = d
		}
	}
}

// ParamDoc is the description DescribeParams gave a param of a method or a
// server request ("" when none).
func (r *Registry) ParamDoc(method, param string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if m, ok := r.methods[method]; ok && m.info.AliasOf != "" {
		if d := r.paramDocs[method][param]; d != "" {
			return d
		}
		method = m.info.AliasOf
	}
	return r.paramDocs[method][param]
}

// describe fills in each param's published description.
func (r *Registry) describe(method string, params []rpcclient.ContentDescriptor) {
	for i := range params {
		if d := r.ParamDoc(method, params[i].Name); d != "" {
			params[i].Description = d
		}
	}
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
	rules := bindRules(name, pt, doc.AccessRules)
	m := &method{
		info: MethodInfo{Name: name, Doc: doc, Params: pt, Result: resultType(reflect.TypeFor[R]())},
		call: func(ctx context.Context, info *MethodInfo, raw json.RawMessage) (any, Then, error) {
			var p P
			if err := decodeParams(raw, pt, &p); err != nil {
				return nil, nil, err
			}
			if err := authorizeParams(ctx, info, rules, &p); err != nil {
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

// Fast gives a registered method an answer the server tries first, on the
// connection's read goroutine, before giving the request a goroutine of its
// own: fast returns ok false when it cannot answer without waiting, and the
// method's handler then runs as usual. fast must never block: no I/O, no
// child process, no lock held by anything that does. For a method answered
// from memory (a cached list, a fixed description) the goroutine, its
// context and the handoff to it were a good part of a request's cost, and
// the answer now leaves the way an echo server's would. Params are decoded
// and validated as for the handler. Aliases registered afterwards share it.
func Fast[P, R any](r *Registry, name string, fast func(ctx context.Context, params P) (R, bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.methods[name]
	if !ok {
		panic(fmt.Sprintf("rpc: Fast for unknown method %q", name))
	}
	if m.info.Params != reflect.TypeFor[P]() || m.info.Result != resultType(reflect.TypeFor[R]()) {
		panic(fmt.Sprintf("rpc: Fast for %q with other params or result types than its handler's", name))
	}
	pt := m.info.Params
	rules := bindRules(name, pt, m.info.Doc.AccessRules)
	m.fast = func(ctx context.Context, info *MethodInfo, raw json.RawMessage) (any, bool, error) {
		var p P
		if err := decodeParams(raw, pt, &p); err != nil {
			return nil, true, err
		}
		if err := authorizeParams(ctx, info, rules, &p); err != nil {
			return nil, true, err
		}
		if v, ok := any(&p).(Validator); ok {
			if err := v.Validate(); err != nil {
				return nil, true, err
			}
		}
		res, ok := fast(ctx, p)
		if !ok {
			return nil, false, nil
		}
		return res, true, nil
	}
}

// Ordered makes a registered method's requests from one connection run in
// the order the connection sent them, among every ordered request of that
// connection whose param of the given name has the same value: each waits
// for the handlers of the ones before it to return (not for their answers
// to be written, nor for their Then). Requests are otherwise handled
// concurrently, and a client that sends a session three prompts back to
// back, or a prompt and then its cancel, must find them taken in that
// order, not in whichever order their goroutines reached the session. The
// param must be a string of the params' top-level object; a request
// without it runs unordered. Aliases registered afterwards share it.
func Ordered(r *Registry, name, param string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.methods[name]
	if !ok {
		panic(fmt.Sprintf("rpc: Ordered for unknown method %q", name))
	}
	m.orderBy = param
}

// orderKey is the lane a request of method name takes (see Ordered), and
// false when it takes none.
func (r *Registry) orderKey(name string, params json.RawMessage) (string, bool) {
	r.mu.RLock()
	m := r.methods[name]
	r.mu.RUnlock()
	if m == nil || m.orderBy == "" {
		return "", false
	}
	v, ok := topLevelString(params, m.orderBy)
	if !ok {
		return "", false
	}
	return m.orderBy + "\x00" + v, true
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
	a := &method{info: m.info, call: m.call, fast: m.fast, orderBy: m.orderBy}
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
func (r *Registry) Dispatch(ctx context.Context, name string, params json.RawMessage) (result any, then Then, err *rpcclient.Error) {
	r.mu.RLock()
	m, ok := r.methods[name]
	mapErr := r.mapErr
	r.mu.RUnlock()
	if !ok {
		return nil, nil, &rpcclient.Error{Code: rpcclient.CodeMethodNotFound, Message: fmt.Sprintf("method not found: %q (rpc.discover lists the methods)", name), Data: map[string]any{"method": name}}
	}
	defer func() {
		if p := recover(); p != nil {
			result, then = nil, nil
			err = &rpcclient.Error{Code: rpcclient.CodeInternalError, Message: fmt.Sprintf("internal error in %s: %v", name, p)}
			if peer := PeerFrom(ctx); peer != nil && peer.onPanic != nil {
				peer.onPanic(name, p, debug.Stack())
			}
		}
	}()
	herr := authorize(ctx, &m.info)
	if herr == nil {
		result, then, herr = m.call(ctx, &m.info, params)
	}
	if herr != nil {
		var closing *closeAfterError
		errors.As(herr, &closing)
		if mapErr != nil {
			herr = mapErr(herr)
		}
		e := ToError(herr)
		if closing != nil {
			c := *e
			c.CloseConn = closing.reason
			e = &c
		}
		return nil, nil, e
	}
	return result, then, nil
}

// dispatchFast tries a method's Fast answer; ok is false when the method
// has none or it could not answer at once, and the request must go to
// Dispatch. A panic is answered like Dispatch answers one.
func (r *Registry) dispatchFast(ctx context.Context, name string, params json.RawMessage) (result any, ok bool, err *rpcclient.Error) {
	r.mu.RLock()
	m := r.methods[name]
	mapErr := r.mapErr
	r.mu.RUnlock()
	if m == nil || m.fast == nil {
		return nil, false, nil
	}
	defer func() {
		if p := recover(); p != nil {
			result, ok = nil, true
			err = &rpcclient.Error{Code: rpcclient.CodeInternalError, Message: fmt.Sprintf("internal error in %s: %v", name, p)}
			if peer := PeerFrom(ctx); peer != nil && peer.onPanic != nil {
				peer.onPanic(name, p, debug.Stack())
			}
		}
	}()
	// The access check comes first here too: a fast answer is an answer,
	// and a method outside the connection's grants gets none.
	ferr := authorize(ctx, &m.info)
	var res any
	if ferr == nil {
		res, ok, ferr = m.fast(ctx, &m.info, params)
	}
	if ferr != nil {
		if mapErr != nil {
			ferr = mapErr(ferr)
		}
		return nil, true, ToError(ferr)
	}
	return res, ok, nil
}

// ToError maps a handler's error onto the wire error.
func ToError(err error) *rpcclient.Error {
	var re *rpcclient.Error
	if errors.As(err, &re) {
		return re
	}
	var fe *api.FieldError
	if errors.As(err, &fe) {
		data := map[string]any{}
		if fe.Field != "" {
			data["field"] = fe.Field
		}
		return &rpcclient.Error{Code: rpcclient.CodeInvalidParams, Message: "invalid params: " + fe.Error(), Data: data}
	}
	if errors.Is(err, context.Canceled) {
		return &rpcclient.Error{Code: rpcclient.CodeInternalError, Message: "the request was cancelled: the connection closed or the daemon is shutting down"}
	}
	return &rpcclient.Error{Code: rpcclient.CodeInternalError, Message: err.Error()}
}
