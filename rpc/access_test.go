package rpc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			return &Error{Code: codeTestDenied, Message: ad.Error(), Data: map[string]any{"access": ad.Need, "origin": ad.Origin}}
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
	dial := func(origin string) *Client {
		opts := ClientOptions{}
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
		{"native client", "", []Access{AccessRead, AccessAgents, AccessHost}},
		{"allowed origin, default grants", "https://app.example", []Access{AccessRead, AccessAgents}},
		{"allowed origin granted every class", "https://trusted.example", []Access{AccessRead, AccessAgents, AccessHost}},
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
					var re *Error
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
	assert.Contains(t, err.Error(), "read, agents, host")
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
		assert.Contains(t, m.Errors, OpenRPCReference{Ref: errorRefPrefix + "test_denied"}, "%s", m.Name)
	}
	assert.Equal(t, map[string]Access{"host.thing": AccessHost, "host.alias": AccessHost, DiscoverMethod: AccessRead}, got)
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
