package rpc

import (
	"encoding/json"
	"reflect"
)

// OneOf is implemented by a result type that is exactly one of several
// shapes, which one decided by the params (one record or a list of them; a
// finished run or the acceptance of a streamed one). rpc.discover describes
// it as a JSON Schema oneOf of those shapes rather than as "anything", so a
// client's generated types know both.
type OneOf interface {
	OneOf() []reflect.Type
}

// Either is a result that is an A or a B. It encodes as whichever it holds;
// build it with First or Second.
type Either[A, B any] struct {
	a *A
	b *B
}

// First is an Either holding an A.
func First[A, B any](a A) Either[A, B] { return Either[A, B]{a: &a} }

// Second is an Either holding a B.
func Second[A, B any](b B) Either[A, B] { return Either[A, B]{b: &b} }

// First returns the A it holds, if it holds one.
func (e Either[A, B]) First() (A, bool) {
	if e.a == nil {
		var zero A
		return zero, false
	}
	return *e.a, true
}

// Second returns the B it holds, if it holds one.
func (e Either[A, B]) Second() (B, bool) {
	if e.b == nil {
		var zero B
		return zero, false
	}
	return *e.b, true
}

// MarshalJSON encodes the value it holds (null when empty).
func (e Either[A, B]) MarshalJSON() ([]byte, error) {
	switch {
	case e.a != nil:
		return json.Marshal(e.a)
	case e.b != nil:
		return json.Marshal(e.b)
	}
	return []byte("null"), nil
}

// OneOf is A and B, for rpc.discover.
func (Either[A, B]) OneOf() []reflect.Type {
	return []reflect.Type{reflect.TypeFor[A](), reflect.TypeFor[B]()}
}

// Alternatives are the shapes a result of type t may take: t's OneOf when it
// has one, else t alone.
func Alternatives(t reflect.Type) []reflect.Type {
	if o, ok := reflect.Zero(t).Interface().(OneOf); ok {
		return o.OneOf()
	}
	return []reflect.Type{t}
}
