package rpc

import (
	"encoding/json"
	"reflect"
)

// Encoded is a result already encoded as JSON, for an answer that many
// requests share (a cached list, a fixed description): the handler encodes
// it once, when it changes, and the server writes its bytes as they are on
// every call instead of encoding the same value again. T is the type the
// bytes encode; rpc.discover describes the result as a T.
type Encoded[T any] struct {
	json []byte
}

// Encode encodes v once, for answering with it many times.
func Encode[T any](v T) (Encoded[T], error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Encoded[T]{}, err
	}
	return Encoded[T]{json: b}, nil
}

// MarshalJSON returns the encoded bytes (null when empty), so an Encoded
// marshalled anywhere else means what it says.
func (e Encoded[T]) MarshalJSON() ([]byte, error) {
	if e.json == nil {
		return []byte("null"), nil
	}
	return e.json, nil
}

func (e Encoded[T]) encodedJSON() []byte {
	if e.json == nil {
		return []byte("null")
	}
	return e.json
}

func (Encoded[T]) encodedType() reflect.Type { return reflect.TypeFor[T]() }

// encodedResult is what the server looks for to skip encoding a result.
type encodedResult interface {
	encodedJSON() []byte
	encodedType() reflect.Type
}

// resultType is the type a result of type t is described as: T for an
// Encoded[T], else t itself.
func resultType(t reflect.Type) reflect.Type {
	if e, ok := reflect.Zero(t).Interface().(encodedResult); ok {
		return e.encodedType()
	}
	return t
}
