package rpc

import (
	"context"
	"fmt"
	"strings"
)

// Access is the class of what a method can do, declared where the method is
// registered. A connection holds a set of classes (Grants) decided once, at
// the upgrade, from how it connected; a method outside that set is refused
// before its params are read. A token alone proves only that the caller
// could read a file, and a web page the operator allowed is not the person
// at the keyboard: the page may run agents within their permission modes,
// but a shell on the host is another matter.
type Access string

const (
	// AccessRead is the daemon's own state: who it is, which agents are
	// installed and healthy, the run history and a run's events.
	AccessRead Access = "read"
	// AccessAgents starts and ends agent runs, each inside its permission
	// mode's boundary.
	AccessAgents Access = "agents"
	// AccessHost touches the host directly, outside any agent's boundary:
	// shell commands, reading and writing files, terminals, and deleting
	// the daemon's history.
	AccessHost Access = "host"
)

// AccessClasses lists every class, in the order the docs walk them.
var AccessClasses = []Access{AccessRead, AccessAgents, AccessHost}

func (a Access) bit() Grants {
	switch a {
	case AccessRead:
		return 1
	case AccessAgents:
		return 2
	case AccessHost:
		return 4
	}
	return 0
}

// Valid reports whether a is one of AccessClasses.
func (a Access) Valid() bool { return a.bit() != 0 }

// Grants is a set of access classes. The zero value grants nothing.
type Grants uint8

// GrantAll is every class: what a native client (no Origin) holds.
const GrantAll Grants = 7

// DefaultOriginGrants is what a connection from an allowed browser origin
// holds unless the application grants that origin more (or less): reading
// and running agents, never the host.
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
	// Need is the method's class; Have what the connection holds.
	Need Access
	Have Grants
	// Origin is the browser origin the connection came from ("" for a
	// native client).
	Origin string
}

func (e *AccessDeniedError) Error() string {
	from := "this connection"
	if e.Origin != "" {
		from = "connections from " + e.Origin
	}
	return fmt.Sprintf("%s needs the %q access class, which %s are not granted (granted: %s)", e.Method, e.Need, from, e.Have)
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
