package rpc

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A handler that panics is answered -32603 naming the method, logged with
// its stack, and the connection and the server go on.
func TestAHandlerPanicIsAnsweredAndLoggedNotFatal(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	srv := NewServer(ServerConfig{
		Registry: fuzzRegistry(),
		Gate:     &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }},
		Logger:   zap.New(core),
	})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer srv.Shutdown(ctx)
	c, err := Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/rpc", fuzzToken, ClientOptions{})
	require.NoError(t, err)
	defer c.Close()

	err = c.Call(ctx, "fuzz.panic", nil, nil)
	var re *Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, CodeInternalError, re.Code)
	assert.Contains(t, re.Message, "fuzz.panic")

	entries := logs.FilterMessage("handler panicked").All()
	require.Len(t, entries, 1)
	fields := entries[0].ContextMap()
	assert.Equal(t, "fuzz.panic", fields["method"])
	assert.Contains(t, fields["stack"], "goroutine")

	var echoed fuzzEchoParams
	require.NoError(t, c.Call(ctx, "fuzz.echo", fuzzEchoParams{}, &echoed), "the connection survives")
}
