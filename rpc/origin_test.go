package rpc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/rpc/rpcclient"
)

// A handler can tell a web page from a program on the machine: the Peer
// carries the Origin an allowed page's upgrade sent, and nothing for a
// native client.
func TestThePeerCarriesTheOriginOfAnAllowedPageAndNoneForANativeClient(t *testing.T) {
	r := NewRegistry()
	Register(r, "peer.origin", Doc{Access: AccessRead, Summary: "The connection's Origin."}, func(ctx context.Context, _ struct{}) (string, error) {
		return PeerFrom(ctx).Origin(), nil
	})
	srv := NewServer(ServerConfig{Registry: r, Gate: &Gate{
		Token:          func() ([]byte, error) { return []byte(fuzzToken), nil },
		AllowedOrigins: []string{"https://app.example"},
	}})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/rpc"
	for _, c := range []struct {
		name   string
		header http.Header
		want   string
	}{
		{"native", nil, ""},
		{"page", http.Header{"Origin": {"https://app.example"}}, "https://app.example"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := dialTest(t, url, rpcclient.ClientOptions{Header: c.header})
			var got string
			require.NoError(t, cl.Call(context.Background(), "peer.origin", nil, &got))
			assert.Equal(t, c.want, got)
		})
	}
}
