package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/card-dev/card/rpc/rpcclient"
)

// OpenRPCVersion is the OpenRPC specification version rpc.discover's
// document follows.
const OpenRPCVersion = "1.3.2"

// Every named Go type's schema lives once in components.schemas, so a type
// used by ten methods is described once; errors live in components.errors.
const (
	schemaRefPrefix = "#/components/schemas/"
	errorRefPrefix  = "#/components/errors/"
)

// standardErrors are the codes any method can answer with, whatever its
// Doc says: the request can fail to decode (-32602) before the handler
// runs, be cut short by the transport (-32001, -32002), or be withdrawn by
// the client (-32800).
var standardErrors = []int64{rpcclient.CodeInvalidParams, rpcclient.CodeInternalError, rpcclient.CodeTooManyRequests, rpcclient.CodeShuttingDown,

	// ServiceInfo is what the registry cannot know about the service it serves:
	// the document's info object and its one server.
	rpcclient.CodeRequestCancelled}

type ServiceInfo struct {
	Title           string
	Version         string
	ProtocolVersion string
	Description     string
	// URL is the endpoint clients reach (ws://127.0.0.1:PORT/rpc); empty
	// before the daemon listens.
	URL string
}

// RegisterDiscover registers rpc.discover on r. info is called per request,
// so the document carries the address the daemon ended up listening on.
func RegisterDiscover(r *Registry, info func() ServiceInfo) {
	Register(r, rpcclient.DiscoverMethod, Doc{
		Access:      AccessRead,
		Summary:     "This API described as an OpenRPC 1.x document, generated from the method registry.",
		Description: "Takes no params. Every method with its params (by name) and result as JSON Schema derived from the Go types, the errors each may answer with (components.errors is the whole code table), alias names marked with x-alias-of, and the server-to-client notifications in x-notifications and requests (which the client answers) in x-server-requests.",
	}, func(ctx context.Context, _ struct{}) (*rpcclient.OpenRPCDocument, error) {
		return r.OpenRPC(info())
	})
}

// OpenRPC builds the document for every method and notification registered
// now. It is built from the same reflect.Types the dispatcher decodes into,
// so the description cannot drift from what the server accepts.
func (r *Registry) OpenRPC(info ServiceInfo) (*rpcclient.OpenRPCDocument, error) {
	sb := newSchemaBuilder()
	doc := &rpcclient.OpenRPCDocument{
		OpenRPC: OpenRPCVersion,
		Info: rpcclient.OpenRPCInfo{
			Title:           info.Title,
			Version:         info.Version,
			Description:     info.Description,
			ProtocolVersion: info.ProtocolVersion,
		},
		Methods:    []rpcclient.OpenRPCMethod{},
		Components: rpcclient.OpenRPCComponents{Errors: map[string]rpcclient.OpenRPCError{}},
	}
	if doc.Info.Title == "" {
		doc.Info.Title = "card"
	}
	if doc.Info.Version == "" {
		doc.Info.Version = "0"
	}
	if info.URL != "" {
		doc.Servers = []rpcclient.OpenRPCServer{{Name: "card daemon", URL: info.URL}}
	}
	common := r.CommonErrorCodes()
	names := map[int64]string{}
	for _, c := range r.Codes() {
		names[c.Code] = c.Name
		doc.Components.Errors[c.Name] = rpcclient.OpenRPCError{Code: c.Code, Message: c.Meaning}
	}
	for _, m := range r.Methods() {
		params, err := sb.params(m.Params, false)
		if err != nil {
			return nil, fmt.Errorf("rpc.discover: params of %s: %w", m.Name, err)
		}
		r.describe(m.Name, params)
		result, err := sb.result(m.Result)
		if err != nil {
			return nil, fmt.Errorf("rpc.discover: result of %s: %w", m.Name, err)
		}
		om := rpcclient.OpenRPCMethod{
			Name:           m.Name,
			Summary:        m.Doc.Summary,
			Description:    m.Doc.Description,
			ParamStructure: "by-name",
			Params:         params,
			Result:         rpcclient.ContentDescriptor{Name: "result", Schema: result},
			AliasOf:        m.AliasOf,
			Access:         string(m.Doc.Access),
			AccessRules:    wireRules(m.Doc.AccessRules),
		}
		if m.AliasOf != "" {
			om.Description = strings.TrimSpace(fmt.Sprintf("Alias of %s, with the same params, result and errors. %s", m.AliasOf, om.Description))
		}
		for _, code := range methodErrors(m.Doc.Errors, common) {
			name, ok := names[code]
			if !ok {
				return nil, fmt.Errorf("rpc.discover: %s lists error code %d, which is not in the registry's code table: register it with RegisterCodes", m.Name, code)
			}
			om.Errors = append(om.Errors, rpcclient.OpenRPCReference{Ref: errorRefPrefix + name})
		}
		doc.Methods = append(doc.Methods, om)
	}
	for _, n := range r.Notifications() {
		params, err := sb.params(n.Params, true)
		if err != nil {
			return nil, fmt.Errorf("rpc.discover: params of notification %s: %w", n.Name, err)
		}
		r.describe(n.Name, params)
		doc.Notifications = append(doc.Notifications, rpcclient.OpenRPCNotification{
			Name: n.Name, Summary: n.Doc.Summary, Description: n.Doc.Description,
			ParamStructure: "by-name", Params: params,
		})
	}
	reqs, err := sb.serverRequestsDoc(r.ServerRequests())
	if err != nil {
		return nil, err
	}
	for i := range reqs {
		r.describe(reqs[i].Name, reqs[i].Params)
	}
	doc.ServerRequests = reqs
	doc.Components.Schemas = sb.defs
	return doc, nil
}

// methodErrors is the method's own codes followed by the standard ones and
// the application's common ones, each once, in that order.
func methodErrors(own, common []int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	all := append(append(append([]int64{}, own...), standardErrors...), common...)
	for _, c := range all {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// schemaBuilder reflects Go types into JSON Schema and collects every named
// type into one shared set of definitions.
//
// Params and results are reflected differently. Params are decoded
// strictly (an unknown field is refused), so their schemas say
// additionalProperties: false. Results and notifications grow additive
// fields under the same protocol version, and clients are told to ignore
// fields they do not know, so their schemas must not forbid them: a client
// that validated with a closed schema would break on the next release.
type schemaBuilder struct {
	strict *jsonschema.Reflector
	open   *jsonschema.Reflector
	defs   map[string]any
	// owner remembers which Go type a definition name stands for, so two
	// types that would share a name are an error rather than one silently
	// describing the other.
	owner map[string]reflect.Type
	// enums are the definitions of the enumerated string types the
	// reflectors have met (see enumSchema), added to defs with the rest.
	enums map[string]any
}

func newSchemaBuilder() *schemaBuilder {
	// A field without omitempty is always written by the server, so it is
	// required in results; params mark optional fields with omitempty
	// throughout.
	b := &schemaBuilder{
		defs:  map[string]any{},
		owner: map[string]reflect.Type{},
		enums: map[string]any{},
	}
	b.strict = &jsonschema.Reflector{Anonymous: true, Namer: schemaName, Mapper: b.enumSchema}
	b.open = &jsonschema.Reflector{Anonymous: true, Namer: schemaName, AllowAdditionalProperties: true, Mapper: b.enumSchema}
	return b
}

// Enumerated is a named string type that lists every value it takes on
// the wire. Its schema is a definition of its own, {"type": "string",
// "enum": [...]}, referenced wherever it is used, so a client generated
// from the document gets a union of the values by the type's name instead
// of a bare string.
type Enumerated interface{ EnumValues() []string }

// OpenEnumerated is a named string type whose values the protocol may add
// to without a new major version: its definition lists today's in
// x-enum, not enum, so that a client checking the schema still takes a
// value it does not know (and a generated one leaves room for it).
type OpenEnumerated interface{ KnownValues() []string }

// enumSchema is the reflectors' Mapper: a reference to the definition of
// an enumerated string type, which it records; nil for any other type.
func (b *schemaBuilder) enumSchema(t reflect.Type) *jsonschema.Schema {
	name := schemaName(t)
	if t.Kind() != reflect.String || name == "" {
		return nil
	}
	v := reflect.Zero(t).Interface()
	switch e := v.(type) {
	case Enumerated:
		b.enums[name] = map[string]any{"type": "string", "enum": toAny(e.EnumValues())}
	case OpenEnumerated:
		b.enums[name] = map[string]any{"type": "string", "x-enum": toAny(e.KnownValues())}
	default:
		return nil
	}
	return &jsonschema.Schema{Ref: "#/$defs/" + name}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// aliased is the type invopop/jsonschema describes in t's place (a type
// whose JSON is not its fields says what it is on the wire).
func aliased(t reflect.Type) (reflect.Type, bool) {
	a, ok := reflect.New(t).Interface().(interface{ JSONSchemaAlias() any })
	if !ok {
		return nil, false
	}
	return reflect.TypeOf(a.JSONSchemaAlias()), true
}

// schemaName is a type's name alone ("InvokeResult"): the published
// schemas are what clients in other languages are generated from, so a
// name must not change when a type moves between Go packages. Two types
// that want the same name are refused when the document is built
// (noteOwners), never silently merged.
func schemaName(t reflect.Type) string {
	if t.Name() == "" || t.PkgPath() == "" {
		return ""
	}
	return t.Name()
}

// reflect returns the root schema of t, as a plain JSON value with
// references pointing into components.schemas, and collects its
// definitions.
func (b *schemaBuilder) reflect(r *jsonschema.Reflector, t reflect.Type) (map[string]any, error) {
	if alts := Alternatives(t); len(alts) > 1 || alts[0] != t {
		var oneOf []any
		for _, alt := range alts {
			s, err := b.reflect(r, alt)
			if err != nil {
				return nil, err
			}
			oneOf = append(oneOf, s)
		}
		return map[string]any{"oneOf": oneOf}, nil
	}
	if t.Kind() == reflect.Interface {
		// any: nothing can be said of its shape.
		return map[string]any{}, nil
	}
	s := r.ReflectFromType(t)
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	rewriteRefs(v)
	defs, _ := v["$defs"].(map[string]any)
	delete(v, "$defs")
	delete(v, "$schema")
	delete(v, "$id")
	if err := b.noteOwners(t, map[reflect.Type]bool{}); err != nil {
		return nil, err
	}
	for name, def := range b.enums {
		if defs == nil {
			defs = map[string]any{}
		}
		defs[name] = def
	}
	for name, def := range defs {
		if _, ok := b.owner[name]; !ok {
			return nil, fmt.Errorf("definition %q has no Go type", name)
		}
		if have, ok := b.defs[name]; ok && !reflect.DeepEqual(have, def) {
			return nil, fmt.Errorf("type %s is used both in params (closed to unknown fields) and in results or notifications (open to them); give one side its own type", name)
		}
		b.defs[name] = def
	}
	return v, nil
}

// noteOwners walks t's named types and refuses a name used by two types:
// schema names carry no Go package, so two packages' Info would otherwise
// describe one another.
func (b *schemaBuilder) noteOwners(t reflect.Type, seen map[reflect.Type]bool) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if seen[t] {
		return nil
	}
	seen[t] = true
	if name := schemaName(t); name != "" {
		if prev, ok := b.owner[name]; ok && prev != t {
			return fmt.Errorf("types %v (%s) and %v (%s) both want the schema name %q; rename one", prev, prev.PkgPath(), t, t.PkgPath(), name)
		}
		b.owner[name] = t
	}
	if a, ok := aliased(t); ok {
		// Described by its alias: the alias's names are the document's.
		return b.noteOwners(a, seen)
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		return b.noteOwners(t.Elem(), seen)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).IsExported() || t.Field(i).Anonymous {
				if err := b.noteOwners(t.Field(i).Type, seen); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// result is the schema of a method's result: open to additive fields.
func (b *schemaBuilder) result(t reflect.Type) (any, error) {
	return b.reflect(b.open, t)
}

// params turns a params struct into by-name content descriptors, one per
// field, in field order; a non-struct params type is one descriptor. open
// is for a notification's params, which the server writes and may grow.
func (b *schemaBuilder) params(t reflect.Type, open bool) ([]rpcclient.ContentDescriptor, error) {
	refl := b.strict
	if open {
		refl = b.open
	}
	st := t
	for st.Kind() == reflect.Pointer {
		st = st.Elem()
	}
	if st.Kind() != reflect.Struct {
		s, err := b.reflect(refl, t)
		if err != nil {
			return nil, err
		}
		return []rpcclient.ContentDescriptor{{Name: "params", Required: true, Schema: s}}, nil
	}
	// Reflect the struct expanded, with the same reflector settings, so the
	// fields come out in declaration order.
	r := *refl
	r.ExpandedStruct = true
	s := r.ReflectFromType(st)
	out := []rpcclient.ContentDescriptor{}
	required := map[string]bool{}
	for _, n := range s.Required {
		required[n] = true
	}
	// The nested definitions still need collecting.
	if _, err := b.reflect(refl, st); err != nil {
		return nil, err
	}
	if s.Properties == nil {
		return out, nil
	}
	for p := s.Properties.Oldest(); p != nil; p = p.Next() {
		raw, err := json.Marshal(p.Value)
		if err != nil {
			return nil, err
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, err
		}
		rewriteRefs(v)
		var desc string
		if m, ok := v.(map[string]any); ok {
			desc, _ = m["description"].(string)
		}
		out = append(out, rpcclient.ContentDescriptor{Name: p.Key, Description: desc, Required: required[p.Key], Schema: v})
	}
	return out, nil
}

// rewriteRefs points the reflector's local "#/$defs/X" references at the
// document's shared components.
func rewriteRefs(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" {
				if name, ok := strings.CutPrefix(s, "#/$defs/"); ok {
					x[k] = schemaRefPrefix + name
				}
				continue
			}
			rewriteRefs(e)
		}
	case []any:
		for _, e := range x {
			rewriteRefs(e)
		}
	}
}

// wireRules is rules as the document carries them.
func wireRules(rules []AccessRule) []rpcclient.AccessRule {
	if len(rules) == 0 {
		return nil
	}
	out := make([]rpcclient.AccessRule, len(rules))
	for i, r := range rules {
		out[i] = rpcclient.AccessRule{Param: r.Param, Value: r.Value, Access: string(r.Access)}
	}
	return out
}
