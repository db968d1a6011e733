package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/rpc/rpcclient"
)

const codeTestDenied int64 = -32099

type accessParams struct {
	N int `json:"n"`
}

// accessServer serves one method per access class behind a gate that allows
// two browser origins: one with the default grants and one the application
// granted every class. ran counts the handlers that ran.
func accessServer(t *testing.T) (url string, ran *atomic.Int32) {
	t.Helper()
	ran = &atomic.Int32{}
	r := NewRegistry()
	r.RegisterCodes(CodeInfo{Code: codeTestDenied, Name: "test_denied", Meaning: "not granted"})
	r.CommonErrors(codeTestDenied)
	r.MapErrors(func(err error) error {
		var ad *AccessDeniedError
		if errors.As(err, &ad) {
			return &rpcclient.Error{Code: codeTestDenied, Message: ad.Error(), Data: map[string]any{"access": ad.Need, "origin": ad.Origin}}
		}
		return err
	})
	for _, a := range AccessClasses {
		Register(r, "class."+string(a), Doc{Access: a, Summary: "A method of class " + string(a) + "."},
			func(ctx context.Context, p accessParams) (int, error) { ran.Add(1); return p.N, nil })
		// The same with an answer given on the read goroutine (Fast), which
		// must be judged by the same grants.
		Register(r, "fast."+string(a), Doc{Access: a, Summary: "A method of class " + string(a) + " answered at once."},
			func(ctx context.Context, p accessParams) (int, error) { ran.Add(1); return p.N, nil })
		Fast(r, "fast."+string(a), func(ctx context.Context, p accessParams) (int, bool) { ran.Add(1); return p.N, true })
	}
	srv := NewServer(ServerConfig{Registry: r, Gate: &Gate{
		Token:          func() ([]byte, error) { return []byte(fuzzToken), nil },
		AllowedOrigins: []string{"https://app.example", "https://trusted.example/"},
		OriginGrants:   map[string]Grants{"https://trusted.example/": GrantAll},
	}})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/rpc", ran
}

// A connection's grants follow from how it connected: a native client
// (no Origin) may call every class; a page from an allowed origin may read
// and run agents but not touch the host, unless the application granted
// that origin more. A refused call is answered with the application's code
// naming the class, and its handler never runs, even for bad params; nor
// does a fast answer.
func TestAMethodOutsideTheConnectionsGrantsIsRefusedBeforeItsParamsAreRead(t *testing.T) {
	url, ran := accessServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(origin string) *rpcclient.Client {
		opts := rpcclient.ClientOptions{}
		if origin != "" {
			opts.Header = http.Header{"Origin": {origin}}
		}
		c, err := Dial(ctx, url, fuzzToken, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	cases := []struct {
		name    string
		origin  string
		allowed []Access
	}{
		{"native client", "", AccessClasses},
		{"allowed origin, default grants", "https://app.example", []Access{AccessRead, AccessAgents}},
		{"allowed origin granted every class", "https://trusted.example", AccessClasses},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(tc.origin)
			for _, prefix := range []string{"class.", "fast."} {
				for _, a := range AccessClasses {
					want := false
					for _, ok := range tc.allowed {
						want = want || ok == a
					}
					before := ran.Load()
					var n int
					err := c.Call(ctx, prefix+string(a), map[string]any{"n": 7}, &n)
					if want {
						require.NoError(t, err, "%s", a)
						assert.Equal(t, 7, n)
						assert.Equal(t, before+1, ran.Load())
						continue
					}
					var re *rpcclient.Error
					require.True(t, errors.As(err, &re), "%s: %v", a, err)
					assert.Equal(t, codeTestDenied, re.Code)
					assert.Contains(t, re.Message, `"`+string(a)+`" access class`)
					assert.Contains(t, re.Message, tc.origin)
					// Params the method would refuse: still the access refusal.
					err = c.Call(ctx, prefix+string(a), map[string]any{"n": "seven", "x": 1}, &n)
					require.True(t, errors.As(err, &re))
					assert.Equal(t, codeTestDenied, re.Code, "the access check comes before the params")
					assert.Equal(t, before, ran.Load(), "the handler of a refused method ran")
				}
			}
		})
	}
}

func TestGrantsParseNameTheUnknownClassAndListInOrder(t *testing.T) {
	g, err := ParseGrants([]string{"host", "read"})
	require.NoError(t, err)
	assert.Equal(t, []Access{AccessRead, AccessHost}, g.List())
	assert.True(t, g.Has(AccessHost))
	assert.False(t, g.Has(AccessAgents))
	assert.False(t, g.Has(Access("")), "no class is never held")
	_, err = ParseGrants([]string{"read", "admin"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"admin"`)
	assert.Contains(t, err.Error(), "read, agents, write, approve, host, acp")
	assert.Equal(t, "read, agents", DefaultOriginGrants.String())
	assert.Equal(t, "none", Grants(0).String())
	assert.Equal(t, GrantAll, GrantsOf(AccessClasses...))
}

func TestAMethodCannotBeRegisteredWithoutAnAccessClass(t *testing.T) {
	r := NewRegistry()
	for _, a := range []Access{"", "admin", "Read"} {
		assert.Panics(t, func() {
			Register(r, "no.access", Doc{Access: a, Summary: "A method without a class."},
				func(ctx context.Context, _ struct{}) (bool, error) { return true, nil })
		}, "%q", a)
	}
	assert.Empty(t, r.Methods())
}

func TestRPCDiscoverShowsEachMethodsAccessClassAndTheCommonErrors(t *testing.T) {
	r := NewRegistry()
	r.RegisterCodes(CodeInfo{Code: codeTestDenied, Name: "test_denied", Meaning: "not granted"})
	r.CommonErrors(codeTestDenied)
	Register(r, "host.thing", Doc{Access: AccessHost, Summary: "Touch the host."},
		func(ctx context.Context, _ struct{}) (bool, error) { return true, nil })
	r.Alias("host.alias", "host.thing")
	RegisterDiscover(r, func() ServiceInfo { return ServiceInfo{} })
	doc, err := r.OpenRPC(ServiceInfo{})
	require.NoError(t, err)
	got := map[string]Access{}
	for _, m := range doc.Methods {
		got[m.Name] = Access(m.Access)
		assert.Contains(t, m.Errors, rpcclient.OpenRPCReference{Ref: errorRefPrefix + "test_denied"}, "%s", m.Name)
	}
	assert.Equal(t, map[string]Access{"host.thing": AccessHost, "host.alias": AccessHost, rpcclient.DiscoverMethod: AccessRead}, got)
}

func TestTheGateGrantsANativeClientEverythingAndAnOriginWhatItIsGranted(t *testing.T) {
	g := &Gate{AllowedOrigins: []string{"https://a.example"}, OriginGrants: map[string]Grants{"https://B.example/": GrantsOf(AccessRead)}}
	req := func(origin ...string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/rpc", nil)
		if len(origin) > 0 {
			r.Header["Origin"] = origin
		}
		return r
	}
	gr, o := g.Grants(req())
	assert.Equal(t, GrantAll, gr)
	assert.Empty(t, o)
	gr, o = g.Grants(req("https://a.example"))
	assert.Equal(t, DefaultOriginGrants, gr)
	assert.Equal(t, "https://a.example", o)
	gr, _ = g.Grants(req("https://b.example"))
	assert.Equal(t, GrantsOf(AccessRead), gr, "origins compare without case and trailing slash")
	gr, _ = g.Grants(req(""))
	assert.Equal(t, DefaultOriginGrants, gr, "an empty Origin header is still a browser's, never a native client's")
}

type modeParams struct {
	Mode string `json:"mode,omitempty"`
	Ack  bool   `json:"ack,omitempty"`
	URL  string `json:"url,omitempty"`
	// Bad makes Validate refuse the params.
	Bad bool `json:"bad,omitempty"`
}

var validated atomic.Int32

func (p *modeParams) Validate() error {
	validated.Add(1)
	if p.Bad {
		return api.InvalidField("bad", "refused")
	}
	return nil
}

// paramsServer serves run (class agents, raised by its params' values to
// write or host), its alias, and ask.me (read), which asks the client
// q.approve (class approve) and answers with what Call returned.
func paramsServer(t *testing.T) (url string, ran *atomic.Int32, logs *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	ran = &atomic.Int32{}
	r := NewRegistry()
	r.MapErrors(func(err error) error {
		var ad *AccessDeniedError
		if errors.As(err, &ad) {
			return &rpcclient.Error{Code: codeTestDenied, Message: ad.Error(), Data: map[string]any{"access": ad.Need, "param": ad.Param, "value": ad.Value}}
		}
		return err
	})
	Register(r, "run", Doc{Access: AccessAgents, Summary: "Run something.", AccessRules: []AccessRule{
		{Param: "mode", Value: "edit", Access: AccessWrite},
		{Param: "mode", Value: "bypass", Access: AccessHost},
		{Param: "ack", Value: true, Access: AccessWrite},
		{Param: "url", Access: AccessWrite},
	}}, func(ctx context.Context, p modeParams) (string, error) { ran.Add(1); return "ran " + p.Mode, nil })
	r.Alias("run.other", "run")
	ServerRequest[askParams, askAnswer](r, "q.approve", Doc{Access: AccessApprove, Summary: "May it?"})
	Register(r, "ask.me", Doc{Access: AccessRead, Summary: "Ask the client q.approve."},
		func(ctx context.Context, _ struct{}) (string, error) {
			var a askAnswer
			err := PeerFrom(ctx).Call(ctx, "q.approve", askParams{N: 1}, &a)
			var ad *AccessDeniedError
			if errors.As(err, &ad) {
				return "not asked: " + ad.Error(), nil
			}
			return "answered " + a.Say, err
		})
	srv := NewServer(ServerConfig{Registry: r, Logger: zap.New(core), Gate: &Gate{
		Token:          func() ([]byte, error) { return []byte(fuzzToken), nil },
		AllowedOrigins: []string{"https://app.example", "https://writer.example"},
		OriginGrants:   map[string]Grants{"https://writer.example": GrantsOf(AccessRead, AccessAgents, AccessWrite, AccessApprove)},
	}})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/rpc", ran, logs
}

// A method's class can depend on its params: the call needs the method's
// class and the class of every rule its params match. A call refused by a
// rule is refused before the params' own Validate and the handler, names
// the param and its value, and is judged the same under an alias.
func TestAParamsValueCanNeedAClassTheMethodItselfDoesNot(t *testing.T) {
	url, ran, _ := paramsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(origin string) *rpcclient.Client {
		opts := rpcclient.ClientOptions{OnRequest: func(ctx context.Context, method string, _ json.RawMessage) (any, error) {
			return askAnswer{Say: "yes"}, nil
		}}
		if origin != "" {
			opts.Header = http.Header{"Origin": {origin}}
		}
		c, err := Dial(ctx, url, fuzzToken, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	native, page, writer := dial(""), dial("https://app.example"), dial("https://writer.example")
	cases := []struct {
		params       map[string]any
		page, writer Access // "" when allowed
		param        string
		value        any
	}{
		{map[string]any{}, "", "", "", nil},
		{map[string]any{"mode": "read_only"}, "", "", "", nil},
		{map[string]any{"mode": "edit"}, AccessWrite, "", "mode", "edit"},
		{map[string]any{"mode": "bypass"}, AccessHost, AccessHost, "mode", "bypass"},
		{map[string]any{"ack": true}, AccessWrite, "", "ack", true},
		{map[string]any{"ack": false}, "", "", "", nil},
		{map[string]any{"url": "http://127.0.0.1:1/mcp"}, AccessWrite, "", "url", "http://127.0.0.1:1/mcp"},
		{map[string]any{"url": ""}, "", "", "", nil},
	}
	for _, method := range []string{"run", "run.other"} {
		for _, tc := range cases {
			for _, who := range []struct {
				c    *rpcclient.Client
				need Access
			}{{native, ""}, {page, tc.page}, {writer, tc.writer}} {
				for _, bad := range []bool{false, true} {
					p := map[string]any{"bad": bad}
					for k, v := range tc.params {
						p[k] = v
					}
					beforeRan, beforeValid := ran.Load(), validated.Load()
					var out string
					err := who.c.Call(ctx, method, p, &out)
					if who.need == "" {
						if bad {
							var re *rpcclient.Error
							require.True(t, errors.As(err, &re), "%s %v: %v", method, p, err)
							assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
						} else {
							require.NoError(t, err, "%s %v", method, p)
							assert.Equal(t, beforeRan+1, ran.Load())
						}
						continue
					}
					var re *rpcclient.Error
					require.True(t, errors.As(err, &re), "%s %v: %v", method, p, err)
					assert.Equal(t, codeTestDenied, re.Code, "%s %v", method, p)
					assert.Contains(t, re.Message, method+" with "+tc.param)
					assert.Contains(t, re.Message, `"`+string(who.need)+`" access class`)
					data, _ := re.Data.(json.RawMessage)
					var d map[string]any
					require.NoError(t, json.Unmarshal(data, &d))
					assert.Equal(t, string(who.need), d["access"])
					assert.Equal(t, tc.param, d["param"])
					assert.Equal(t, tc.value, d["value"])
					assert.Equal(t, beforeRan, ran.Load(), "the handler of a refused call ran")
					assert.Equal(t, beforeValid, validated.Load(), "the params of a refused call were validated")
				}
			}
		}
	}
}

// A request the server sends is never sent to a connection without its
// class: Call refuses it at once, and a response that connection sends
// anyway, with an id the server would use, answers nothing.
func TestAServerRequestIsNeverSentToAConnectionWithoutItsClass(t *testing.T) {
	url, _, logs := paramsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var asked atomic.Int32
	dial := func(origin string) *rpcclient.Client {
		opts := rpcclient.ClientOptions{OnRequest: func(ctx context.Context, method string, _ json.RawMessage) (any, error) {
			asked.Add(1)
			return askAnswer{Say: "yes"}, nil
		}}
		if origin != "" {
			opts.Header = http.Header{"Origin": {origin}}
		}
		c, err := Dial(ctx, url, fuzzToken, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var out string
	require.NoError(t, dial("https://writer.example").Call(ctx, "ask.me", nil, &out))
	assert.Equal(t, "answered yes", out)
	require.NoError(t, dial("").Call(ctx, "ask.me", nil, &out))
	assert.Equal(t, "answered yes", out)
	assert.EqualValues(t, 2, asked.Load())

	require.NoError(t, dial("https://app.example").Call(ctx, "ask.me", nil, &out))
	assert.Contains(t, out, `not asked: q.approve needs the "approve" access class`)
	assert.EqualValues(t, 2, asked.Load(), "a connection without the class was sent the request")

	// A page that answers a question it was never asked: nothing waits for
	// it, and the connection goes on serving.
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{
		"Authorization": {"Bearer " + fuzzToken}, "Origin": {"https://app.example"}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	for _, f := range []string{
		`{"jsonrpc":"2.0","id":"card-1","result":{"say":"yes"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ask.me"}`,
	} {
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(f)))
	}
	_, got, err := ws.Read(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(got), "not asked", "the response was taken for an answer: %s", got)
	stray := logs.FilterMessageSnippet("ignoring a response to no waiting request").All()
	require.Len(t, stray, 1)
	assert.Equal(t, zap.InfoLevel, stray[0].Level, "the first stray response of a connection is seen at info")
	assert.Equal(t, "card-1", stray[0].ContextMap()["id"])
}

func TestAnAccessRuleThatCouldNeverMatchIsRefusedAtRegistration(t *testing.T) {
	for name, rule := range map[string]AccessRule{
		"no such param": {Param: "nope", Value: "x", Access: AccessWrite},
		"wrong type":    {Param: "ack", Value: "true", Access: AccessWrite},
		"no class":      {Param: "mode", Value: "edit"},
		"unknown class": {Param: "mode", Value: "edit", Access: "admin"},
	} {
		r := NewRegistry()
		assert.Panics(t, func() {
			Register(r, "run", Doc{Access: AccessAgents, Summary: "Run.", AccessRules: []AccessRule{rule}},
				func(ctx context.Context, p modeParams) (string, error) { return "", nil })
		}, name)
	}
	assert.Panics(t, func() {
		ServerRequest[askParams, askAnswer](NewRegistry(), "q.x", Doc{Summary: "No class."})
	})
}
