package rpc

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Access is the class of what a method can do, declared where the method is
// registered. A connection holds a set of classes (Grants) decided once, at
// the upgrade, from how it connected; a method outside that set is refused
// before its params are read. A token alone proves only that the caller
// could read a file, and a web page the operator allowed is not the person
// at the keyboard: the page may read and run agents that change nothing,
// but an agent that may write a file or run a command, the answer to an
// agent's question, and a shell on the host are each a right of its own.
type Access string

const (
	// AccessRead is the daemon's own state: who it is, which agents are
	// installed and healthy, the run history and a run's events.
	AccessRead Access = "read"
	// AccessAgents starts and ends agent runs that change nothing on the
	// host: read-only runs of an agent whose read-only mode is enforced.
	AccessAgents Access = "agents"
	// AccessWrite starts agent runs that may write files or, once a
	// question is answered, run commands: a run's permission mode decides,
	// so the method declares it with AccessRules on its params.
	AccessWrite Access = "write"
	// AccessApprove answers an agent's questions (ask mode): allowing a
	// tool call is running it, so a connection without this class is
	// never asked, and an answer from it decides nothing.
	AccessApprove Access = "approve"
	// AccessHost touches the host directly, outside any agent's boundary:
	// shell commands, reading and writing files, terminals, and deleting
	// the daemon's history.
	AccessHost Access = "host"
	// AccessACP opens the daemon's /acp endpoint, where the Agent Client
	// Protocol is spoken. It is a class of the connection, not of a
	// method: an ACP session's calls are judged by the classes above like
	// any other, so acp lets a page speak ACP without letting it do more.
	AccessACP Access = "acp"
)

// AccessClasses lists every class, in the order the docs walk them.
var AccessClasses = []Access{AccessRead, AccessAgents, AccessWrite, AccessApprove, AccessHost, AccessACP}

func (a Access) bit() Grants {
	switch a {
	case AccessRead:
		return 1
	case AccessAgents:
		return 2
	case AccessHost:
		return 4
	case AccessWrite:
		return 8
	case AccessApprove:
		return 16
	case AccessACP:
		return 32
	}
	return 0
}

// Valid reports whether a is one of AccessClasses.
func (a Access) Valid() bool { return a.bit() != 0 }

// Grants is a set of access classes. The zero value grants nothing.
type Grants uint8

// GrantAll is every class: what a native client (no Origin) holds.
const GrantAll Grants = 63

// DefaultOriginGrants is what a connection from an allowed browser origin
// holds unless the application grants that origin more (or less): reading
// and running agents that change nothing; never a run that writes or asks,
// never an answer to a question, never the host.
const DefaultOriginGrants Grants = 3

// GrantsOf is the set of the given classes; an unknown one adds nothing.
func GrantsOf(classes ...Access) Grants {
	var g Grants
	for _, a := range classes {
		g |= a.bit()
	}
	return g
}

// ParseGrants turns class names (from a config file) into a set. An unknown
// name is an error naming it and the known ones.
func ParseGrants(names []string) (Grants, error) {
	var g Grants
	for _, n := range names {
		a := Access(n)
		if !a.Valid() {
			return 0, fmt.Errorf("unknown access class %q; the classes are %s", n, joinClasses(AccessClasses))
		}
		g |= a.bit()
	}
	return g, nil
}

// Has reports whether g holds a.
func (g Grants) Has(a Access) bool { b := a.bit(); return b != 0 && g&b == b }

// List is the classes g holds, in AccessClasses order (never nil).
func (g Grants) List() []Access {
	out := []Access{}
	for _, a := range AccessClasses {
		if g.Has(a) {
			out = append(out, a)
		}
	}
	return out
}

func (g Grants) String() string { return joinClasses(g.List()) }

func joinClasses(as []Access) string {
	if len(as) == 0 {
		return "none"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

// AccessDeniedError refuses a call to a method whose class the connection
// was not granted. rpc has no code for it: the application maps it (with
// Registry.MapErrors) onto its own code, naming where an operator grants
// more.
type AccessDeniedError struct {
	Method string
	// Need is the class refused; Have what the connection holds.
	Need Access
	Have Grants
	// Origin is the browser origin the connection came from ("" for a
	// native client).
	Origin string
	// Param and Value name the param that needed Need beyond the method's
	// own class (an AccessRule's), with the value the call gave it; ""
	// when the method's class itself was refused.
	Param string
	Value any
}

func (e *AccessDeniedError) Error() string {
	from := "this connection"
	if e.Origin != "" {
		from = "connections from " + e.Origin
	}
	what := e.Method
	if e.Param != "" {
		what = fmt.Sprintf("%s with %s %s", e.Method, e.Param, ruleValue(e.Value))
	}
	return fmt.Sprintf("%s needs the %q access class, which %s are not granted (granted: %s)", what, e.Need, from, e.Have)
}

// AccessRule raises a method's class for the calls whose params carry a
// value: agents.invoke is agents, but with permission_mode "edit" it is
// write. A class that depends on the params is declared here, beside the
// method's own, rather than checked in its handler, so rpc.discover
// publishes it, it is checked before the handler runs, and a test can walk
// every method's rules from the registry.
type AccessRule struct {
	// Param is the wire name of a top-level param.
	Param string `json:"param"`
	// Value is the value (a string or a bool) that needs Access; nil
	// means any value but the param's zero (absent, "", false, empty).
	Value any `json:"value,omitempty"`
	// Access is the class the call then needs too.
	Access Access `json:"access"`
}

func ruleValue(v any) string {
	if v == nil {
		return "set"
	}
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// paramRule is an AccessRule bound to the params type's field.
type paramRule struct {
	AccessRule
	index []int
}

// bindRules finds each rule's field in the params type t, and panics on a
// rule that names no field or a value of another type than the field's: a
// rule that can never match would leave the method open by mistake.
func bindRules(method string, t reflect.Type, rules []AccessRule) []paramRule {
	if len(rules) == 0 {
		return nil
	}
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("rpc: method %q has access rules but its params are not a struct", method))
	}
	var out []paramRule
	for _, r := range rules {
		if !r.Access.Valid() {
			panic(fmt.Sprintf("rpc: method %q: access rule on %q has no valid class (%q)", method, r.Param, r.Access))
		}
		f, ok := fieldByWireName(t, r.Param)
		if !ok {
			panic(fmt.Sprintf("rpc: method %q: access rule names param %q, which its params do not have", method, r.Param))
		}
		if r.Value != nil && reflect.TypeOf(r.Value) != f.Type {
			panic(fmt.Sprintf("rpc: method %q: access rule on %q has a %T value for a %s param", method, r.Param, r.Value, f.Type))
		}
		out = append(out, paramRule{AccessRule: r, index: f.Index})
	}
	return out
}

func fieldByWireName(t reflect.Type, name string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if n == "" {
			n = f.Name
		}
		if n == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// matches reports whether decoded params v (the struct) carry the rule's
// value.
func (r paramRule) matches(v reflect.Value) (any, bool) {
	fv, err := v.FieldByIndexErr(r.index)
	if err != nil {
		return nil, false // a field of a nil embedded struct: absent
	}
	if r.Value == nil {
		if fv.IsZero() || (fv.Kind() == reflect.Slice || fv.Kind() == reflect.Map) && fv.Len() == 0 {
			return nil, false
		}
		return fv.Interface(), true
	}
	return fv.Interface(), fv.Interface() == r.Value
}

// authorizeParams refuses a call whose decoded params need a class, by one
// of the method's rules, that the connection was not granted. The first
// rule refused is named.
func authorizeParams(ctx context.Context, info *MethodInfo, rules []paramRule, params any) error {
	p := PeerFrom(ctx)
	if p == nil || len(rules) == 0 {
		return nil
	}
	v := reflect.ValueOf(params)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	for _, r := range rules {
		if p.grants.Has(r.Access) {
			continue
		}
		if got, ok := r.matches(v); ok {
			return &AccessDeniedError{Method: info.Name, Need: r.Access, Have: p.grants, Origin: p.origin, Param: r.Param, Value: got}
		}
	}
	return nil
}

// authorize refuses a method the caller's connection may not call. A call
// with no Peer did not come over a connection (a test calling Dispatch
// directly) and has nothing to be judged by.
func authorize(ctx context.Context, info *MethodInfo) error {
	p := PeerFrom(ctx)
	if p == nil || p.grants.Has(info.Doc.Access) {
		return nil
	}
	return &AccessDeniedError{Method: info.Name, Need: info.Doc.Access, Have: p.grants, Origin: p.origin}
}
