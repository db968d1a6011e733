package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/rpc/rpcclient"
)

type discoverTestParams struct {
	ID    string   `json:"id"`
	Force bool     `json:"force,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

type discoverTestItem struct {
	Name string `json:"name"`
}

type discoverTestResult struct {
	Items []discoverTestItem `json:"items"`
	Note  *discoverTestItem  `json:"note,omitempty"`
}

type discoverTestEvent struct {
	RunID string          `json:"run_id"`
	Seq   int64           `json:"seq"`
	Event json.RawMessage `json:"event"`
}

// codeThingMissing is an application code the test registry registers.
const codeThingMissing int64 = -32050

func discoverTestRegistry() *Registry {
	r := NewRegistry()
	r.RegisterCodes(CodeInfo{Code: codeThingMissing, Name: "thing_missing", Meaning: "No such thing."})
	Register(r, "things.list", Doc{Access: AccessRead, Summary: "List things.", Errors: []int64{codeThingMissing}},
		func(ctx context.Context, p discoverTestParams) (discoverTestResult, error) {
			return discoverTestResult{}, nil
		})
	Register(r, "things.one_or_all", Doc{Access: AccessRead, Summary: "Answer one thing, or every thing."},
		func(ctx context.Context, p discoverTestParams) (Either[discoverTestItem, []discoverTestItem], error) {
			if p.ID != "" {
				return First[discoverTestItem, []discoverTestItem](discoverTestItem{Name: p.ID}), nil
			}
			return Second[discoverTestItem]([]discoverTestItem{{Name: "a"}}), nil
		})
	r.Alias("things.list_external", "things.list")
	Notification[discoverTestEvent](r, "things.event", Doc{Summary: "A thing happened."})
	RegisterDiscover(r, func() ServiceInfo {
		return ServiceInfo{Title: "card", Version: "9.9", ProtocolVersion: "1.0", URL: "ws://127.0.0.1:1/rpc"}
	})
	return r
}

// discover calls rpc.discover the way a client does and returns the
// document as generic JSON, so the test sees exactly what goes on the wire.
func discover(t *testing.T, r *Registry) map[string]any {
	t.Helper()
	res, _, rerr := r.Dispatch(context.Background(), rpcclient.DiscoverMethod, json.RawMessage(`{}`))
	require.Nil(t, rerr)
	raw, err := json.Marshal(res)
	require.NoError(t, err)
	require.True(t, json.Valid(raw))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	return doc
}

func methodByName(t *testing.T, doc map[string]any, name string) map[string]any {
	t.Helper()
	for _, m := range doc["methods"].([]any) {
		if mm := m.(map[string]any); mm["name"] == name {
			return mm
		}
	}
	t.Fatalf("method %s is not in rpc.discover's output", name)
	return nil
}

func TestDiscoverListsEveryRegisteredMethodInAnOpenRPC1Document(t *testing.T) {
	r := discoverTestRegistry()
	doc := discover(t, r)
	assert.True(t, strings.HasPrefix(doc["openrpc"].(string), "1."), "openrpc is %v", doc["openrpc"])
	var listed []string
	for _, m := range doc["methods"].([]any) {
		listed = append(listed, m.(map[string]any)["name"].(string))
	}
	var registered []string
	for _, m := range r.Methods() {
		registered = append(registered, m.Name)
	}
	assert.ElementsMatch(t, registered, listed)
	assert.Contains(t, listed, rpcclient.DiscoverMethod, "rpc.discover describes itself")
	assert.Equal(t, "ws://127.0.0.1:1/rpc", doc["servers"].([]any)[0].(map[string]any)["url"])
}

func TestDiscoverDescribesParamsByNameWithRequiredFromOmitempty(t *testing.T) {
	m := methodByName(t, discover(t, discoverTestRegistry()), "things.list")
	assert.Equal(t, "by-name", m["paramStructure"])
	params := m["params"].([]any)
	require.Len(t, params, 3)
	id := params[0].(map[string]any)
	assert.Equal(t, "id", id["name"])
	assert.Equal(t, true, id["required"])
	assert.Equal(t, "string", id["schema"].(map[string]any)["type"])
	force := params[1].(map[string]any)
	assert.Equal(t, "force", force["name"])
	assert.Nil(t, force["required"], "an omitempty field is optional")
	assert.Equal(t, "array", params[2].(map[string]any)["schema"].(map[string]any)["type"])
}

func TestDiscoverReferencesResolveInsideTheDocument(t *testing.T) {
	doc := discover(t, discoverTestRegistry())
	comps := doc["components"].(map[string]any)
	schemas := comps["schemas"].(map[string]any)
	errs := comps["errors"].(map[string]any)
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				// A schema property may itself be named $ref (the
				// OpenRPCReference type); only string values are references.
				if s, ok := e.(string); ok && k == "$ref" {
					refs = append(refs, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	require.NotEmpty(t, refs)
	for _, ref := range refs {
		switch {
		case strings.HasPrefix(ref, "#/components/schemas/"):
			assert.Contains(t, schemas, strings.TrimPrefix(ref, "#/components/schemas/"), ref)
		case strings.HasPrefix(ref, "#/components/errors/"):
			assert.Contains(t, errs, strings.TrimPrefix(ref, "#/components/errors/"), ref)
		default:
			t.Errorf("reference %s points outside the document", ref)
		}
	}
	assert.Contains(t, schemas, "discoverTestItem")
}

func TestDiscoverListsTheMethodsOwnErrorsThenTheStandardOnesAndTheWholeCodeTable(t *testing.T) {
	doc := discover(t, discoverTestRegistry())
	m := methodByName(t, doc, "things.list")
	var refs []string
	for _, e := range m["errors"].([]any) {
		refs = append(refs, e.(map[string]any)["$ref"].(string))
	}
	assert.Equal(t, []string{
		"#/components/errors/thing_missing",
		"#/components/errors/invalid_params",
		"#/components/errors/internal_error",
		"#/components/errors/too_many_requests",
		"#/components/errors/shutting_down",
		"#/components/errors/request_cancelled",
	}, refs)
	errs := doc["components"].(map[string]any)["errors"].(map[string]any)
	r := discoverTestRegistry()
	assert.Len(t, errs, len(Codes())+1, "rpc's own codes and the application's")
	for _, c := range r.Codes() {
		require.Contains(t, errs, c.Name)
		assert.EqualValues(t, c.Code, errs[c.Name].(map[string]any)["code"])
	}
}

func TestDiscoverMarksAliasesWithTheirTarget(t *testing.T) {
	doc := discover(t, discoverTestRegistry())
	a := methodByName(t, doc, "things.list_external")
	assert.Equal(t, "things.list", a["x-alias-of"])
	assert.Contains(t, a["description"], "Alias of things.list")
	assert.Equal(t, methodByName(t, doc, "things.list")["params"], a["params"])
	assert.Nil(t, methodByName(t, doc, "things.list")["x-alias-of"])
}

func TestDiscoverListsNotificationsInTheExtension(t *testing.T) {
	doc := discover(t, discoverTestRegistry())
	notes := doc["x-notifications"].([]any)
	require.Len(t, notes, 1)
	n := notes[0].(map[string]any)
	assert.Equal(t, "things.event", n["name"])
	var names []string
	for _, p := range n["params"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	assert.Equal(t, []string{"run_id", "seq", "event"}, names)
}

func TestDiscoverRefusesAnErrorCodeMissingFromTheTable(t *testing.T) {
	r := NewRegistry()
	Register(r, "bad.codes", Doc{Access: AccessRead, Summary: "Lists a code nobody documented.", Errors: []int64{-32999}},
		func(ctx context.Context, p struct{}) (struct{}, error) { return struct{}{}, nil })
	_, err := r.OpenRPC(ServiceInfo{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-32999")
	assert.Contains(t, err.Error(), "bad.codes")
}

func TestAnApplicationCodeCannotReuseACodeOrNameAlreadyInTheTable(t *testing.T) {
	r := NewRegistry()
	r.RegisterCodes(CodeInfo{Code: -32050, Name: "thing_missing", Meaning: "x"})
	assert.Panics(t, func() { r.RegisterCodes(CodeInfo{Code: rpcclient.CodeShuttingDown, Name: "stopping", Meaning: "x"}) }, "rpc's own code")
	assert.Panics(t, func() { r.RegisterCodes(CodeInfo{Code: -32051, Name: "thing_missing", Meaning: "x"}) }, "a name twice")
	assert.Panics(t, func() { r.RegisterCodes(CodeInfo{Code: -32050, Name: "other", Meaning: "x"}) }, "a code twice")
	assert.Len(t, r.Codes(), len(Codes())+1)
}

func TestAMethodOrNotificationCannotBeRegisteredWithoutASummary(t *testing.T) {
	r := NewRegistry()
	assert.Panics(t, func() {
		Register(r, "no.doc", Doc{Access: AccessRead, Description: "only a description"},
			func(ctx context.Context, p struct{}) (struct{}, error) { return struct{}{}, nil })
	})
	assert.Panics(t, func() { Notification[struct{}](r, "no.doc", Doc{Summary: "  "}) })
	assert.Empty(t, r.Methods())
}

func TestAnErrorIsAnotherWithTheSameCodeWhateverItsMessage(t *testing.T) {
	err := fmt.Errorf("calling: %w", &rpcclient.Error{Code: codeThingMissing, Message: "no thing 7", Data: map[string]any{"id": 7}})
	assert.ErrorIs(t, err, &rpcclient.Error{Code: codeThingMissing})
	assert.NotErrorIs(t, err, &rpcclient.Error{Code: rpcclient.CodeInternalError})
	assert.NotErrorIs(t, err, errors.New("no thing 7"))
}

type thingMissing struct{ id int }

func (e *thingMissing) Error() string { return fmt.Sprintf("no thing %d", e.id) }

func TestTheRegistrysErrorMapperTurnsDomainErrorsIntoItsCodes(t *testing.T) {
	r := discoverTestRegistry()
	r.MapErrors(func(err error) error {
		var tm *thingMissing
		if errors.As(err, &tm) {
			return &rpcclient.Error{Code: codeThingMissing, Message: tm.Error(), Data: map[string]any{"id": tm.id}}
		}
		return err
	})
	Register(r, "things.get", Doc{Access: AccessRead, Summary: "One thing.", Errors: []int64{codeThingMissing}},
		func(ctx context.Context, p struct{}) (struct{}, error) {
			return struct{}{}, fmt.Errorf("get: %w", &thingMissing{7})
		})
	Register(r, "things.fail", Doc{Access: AccessRead, Summary: "Fails plainly."},
		func(ctx context.Context, p struct{}) (struct{}, error) { return struct{}{}, errors.New("disk on fire") })
	_, _, rerr := r.Dispatch(context.Background(), "things.get", nil)
	require.NotNil(t, rerr)
	assert.Equal(t, codeThingMissing, rerr.Code)
	assert.Equal(t, "no thing 7", rerr.Message)
	_, _, rerr = r.Dispatch(context.Background(), "things.fail", nil)
	require.NotNil(t, rerr)
	assert.Equal(t, rpcclient.CodeInternalError, rerr.Code, "what the mapper does not know stays -32603")
	assert.Equal(t, "disk on fire", rerr.Message)
}

// A result that takes one of two shapes is described as both, not as "any".
func TestDiscoverDescribesAOneOfResultAsEachOfItsShapes(t *testing.T) {
	m := methodByName(t, discover(t, discoverTestRegistry()), "things.one_or_all")
	schema := m["result"].(map[string]any)["schema"].(map[string]any)
	assert.Equal(t, []any{
		map[string]any{"$ref": "#/components/schemas/discoverTestItem"},
		map[string]any{"type": "array", "items": map[string]any{"$ref": "#/components/schemas/discoverTestItem"}},
	}, schema["oneOf"])

	r := discoverTestRegistry()
	one, _, rerr := r.Dispatch(context.Background(), "things.one_or_all", json.RawMessage(`{"id":"x"}`))
	require.Nil(t, rerr)
	b, err := json.Marshal(one)
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"x"}`, string(b), "it encodes as the shape it holds")
	all, _, rerr := r.Dispatch(context.Background(), "things.one_or_all", nil)
	require.Nil(t, rerr)
	b, err = json.Marshal(all)
	require.NoError(t, err)
	assert.JSONEq(t, `[{"name":"a"}]`, string(b))
}

// Params are decoded strictly, so their schema is closed; results and
// notifications gain fields under the same protocol version, so theirs
// must not forbid unknown ones.
func TestDiscoverClosesParamsButLeavesResultsAndNotificationsOpen(t *testing.T) {
	doc := discover(t, discoverTestRegistry())
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	closed := func(name string) bool {
		s, ok := schemas[name].(map[string]any)
		require.True(t, ok, "no schema %s", name)
		return s["additionalProperties"] == false
	}
	assert.True(t, closed("discoverTestParams"), "params refuse unknown fields")
	for _, name := range []string{"discoverTestResult", "discoverTestItem", "discoverTestEvent", "OpenRPCDocument"} {
		assert.False(t, closed(name), "%s must allow additive fields", name)
	}
}

type sharedThing struct {
	Name string `json:"name"`
}

type sharedParams struct {
	Thing sharedThing `json:"thing"`
}

// One Go type cannot be both a closed params shape and an open result shape
// under one name; the document says so instead of describing one wrongly.
func TestDiscoverRefusesATypeSharedByParamsAndResults(t *testing.T) {
	r := NewRegistry()
	Register(r, "shared.echo", Doc{Access: AccessRead, Summary: "Echo a thing."},
		func(ctx context.Context, p sharedParams) (sharedThing, error) { return p.Thing, nil })
	_, err := r.OpenRPC(ServiceInfo{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "type sharedThing")
}

// A request the server sends is listed in x-server-requests with its params
// (open: the server may add fields) and the result the client must answer
// with (closed: the server reads exactly these fields).
func TestDiscoverListsServerRequestsWithTheirParamsAndTheAnswerTheyExpect(t *testing.T) {
	r := discoverTestRegistry()
	ServerRequest[askParams, askAnswer](r, "things.ask", Doc{Summary: "Ask the client about a thing.", Description: "Answer yes or no.", Access: AccessRead})
	doc := discover(t, r)
	reqs := doc["x-server-requests"].([]any)
	require.Len(t, reqs, 1)
	q := reqs[0].(map[string]any)
	assert.Equal(t, "things.ask", q["name"])
	assert.Equal(t, "Ask the client about a thing.", q["summary"])
	assert.Equal(t, "Answer yes or no.", q["description"])
	var names []string
	for _, p := range q["params"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	assert.Equal(t, []string{"n", "within_ms"}, names)
	result := q["result"].(map[string]any)["schema"].(map[string]any)
	ref := strings.TrimPrefix(result["$ref"].(string), "#/components/schemas/")
	def := doc["components"].(map[string]any)["schemas"].(map[string]any)[ref].(map[string]any)
	assert.Equal(t, false, def["additionalProperties"], "the client's answer is closed to unknown fields")
	assert.Contains(t, def["properties"].(map[string]any), "say")

	assert.PanicsWithValue(t, `rpc: server request "things.ask" registered twice`, func() {
		ServerRequest[askParams, askAnswer](r, "things.ask", Doc{Summary: "again", Access: AccessRead})
	})
	assert.Panics(t, func() { ServerRequest[askParams, askAnswer](r, "things.other", Doc{}) })
}

func TestDiscoverPublishesTheParamDescriptionsGivenItAndAnAliasTakesItsTargets(t *testing.T) {
	r := discoverTestRegistry()
	r.DescribeParams(map[string]map[string]string{"things.list": {"id": "The thing to list."}})
	doc := discover(t, r)
	for _, name := range []string{"things.list", "things.list_external"} {
		id := methodByName(t, doc, name)["params"].([]any)[0].(map[string]any)
		assert.Equal(t, "The thing to list.", id["description"], name)
	}
	force := methodByName(t, doc, "things.list")["params"].([]any)[1].(map[string]any)
	assert.Nil(t, force["description"], "a param given none has none")
	assert.Equal(t, "The thing to list.", r.ParamDoc("things.list_external", "id"))
	assert.Empty(t, r.ParamDoc("things.one_or_all", "id"), "descriptions are per method")
}

// clashingName and the function-local type of the same name below stand for
// two packages that each define, say, an Info.
type clashingName struct {
	A int `json:"a"`
}

func TestDiscoverNamesSchemasByTheTypeAloneAndRefusesTwoTypesOfOneName(t *testing.T) {
	type clashingName struct {
		B string `json:"b"`
	}
	type bothParams struct{}
	type bothResult struct {
		First  outerClash   `json:"first"`
		Second clashingName `json:"second"`
	}
	r := NewRegistry()
	Register(r, "x.both", Doc{Summary: "s", Access: AccessRead}, func(context.Context, bothParams) (bothResult, error) { return bothResult{}, nil })
	_, err := r.OpenRPC(ServiceInfo{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `both want the schema name "clashingName"`)

	// One of each is fine, and named without its package.
	r = NewRegistry()
	Register(r, "x.one", Doc{Summary: "s", Access: AccessRead}, func(context.Context, bothParams) (outerClash, error) { return outerClash{}, nil })
	doc, err := r.OpenRPC(ServiceInfo{})
	require.NoError(t, err)
	assert.Contains(t, doc.Components.Schemas, "clashingName")
	for name := range doc.Components.Schemas {
		assert.NotContains(t, name, ".", "schema names carry no Go package")
	}
}

// outerClash is the package-level clashingName under a name the test can
// use inside the function that shadows it.
type outerClash = clashingName

type discoverColor string

func (discoverColor) EnumValues() []string { return []string{"red", "green"} }

type discoverMood string

func (discoverMood) KnownValues() []string { return []string{"calm", "cross"} }

// discoverSecret's JSON is not its fields (it has none the reflector
// sees): it says so with an alias.
type discoverSecret struct{}

type discoverSecretWire struct {
	Shown string `json:"shown"`
}

func (discoverSecret) JSONSchemaAlias() any { return discoverSecretWire{} }

type discoverEnumResult struct {
	Color  discoverColor   `json:"color"`
	Moods  []discoverMood  `json:"moods"`
	Secret discoverSecret  `json:"secret"`
	Filter *discoverColor  `json:"filter,omitempty"`
	Plain  string          `json:"plain"`
	Others []discoverColor `json:"others,omitempty"`
}

// A named string type that lists its values is a definition with an enum
// (closed) or x-enum (open to values a later version adds), referenced
// where it is used, so a generated client gets a union by its name; a type
// described by an alias is described by the alias.
func TestDiscoverDescribesEnumeratedStringsAndAliasedTypesByName(t *testing.T) {
	r := NewRegistry()
	Register(r, "colors.get", Doc{Access: AccessRead, Summary: "Get colors."},
		func(ctx context.Context, p struct {
			Color discoverColor `json:"color,omitempty"`
		}) (discoverEnumResult, error) {
			return discoverEnumResult{}, nil
		})
	doc, err := r.OpenRPC(ServiceInfo{})
	require.NoError(t, err)
	raw, err := json.Marshal(doc)
	require.NoError(t, err)
	var d struct {
		Methods []struct {
			Params []struct {
				Schema map[string]any `json:"schema"`
			} `json:"params"`
			Result struct {
				Schema map[string]any `json:"schema"`
			} `json:"result"`
		} `json:"methods"`
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	schemas := d.Components.Schemas
	assert.Equal(t, map[string]any{"type": "string", "enum": []any{"red", "green"}}, schemas["discoverColor"])
	assert.Equal(t, map[string]any{"type": "string", "x-enum": []any{"calm", "cross"}}, schemas["discoverMood"])
	assert.Contains(t, schemas, "discoverSecretWire")
	assert.NotContains(t, schemas, "discoverSecret")

	res := schemas["discoverEnumResult"]["properties"].(map[string]any)
	ref := func(v any) any { return v.(map[string]any)["$ref"] }
	assert.Equal(t, "#/components/schemas/discoverColor", ref(res["color"]))
	assert.Equal(t, "#/components/schemas/discoverMood", ref(res["moods"].(map[string]any)["items"]))
	assert.Equal(t, "#/components/schemas/discoverSecretWire", ref(res["secret"]))
	assert.Equal(t, map[string]any{"type": "string"}, res["plain"])
	require.Len(t, d.Methods, 1)
	require.Len(t, d.Methods[0].Params, 1)
	assert.Equal(t, "#/components/schemas/discoverColor", ref(d.Methods[0].Params[0].Schema), "params refer to it too")
}
