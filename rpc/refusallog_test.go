package rpc

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// gatedServer is a server whose gate refuses everything without the token,
// logging to an observer, with the refusal log's window as given.
func gatedServer(t *testing.T, burst int, window time.Duration) (*Server, *observer.ObservedLogs, string) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	srv := NewServer(ServerConfig{
		Registry: NewRegistry(),
		Gate: &Gate{
			Token: func() ([]byte, error) { return []byte(strings.Repeat("k", 64)), nil },
		},
		Logger:           zap.New(core),
		RefusalLogBurst:  burst,
		RefusalLogWindow: window,
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv, logs, hs.URL
}

func refuseMe(t *testing.T, url string, header http.Header) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestAFloodOfRefusedUpgradesLogsAFewLinesPerReasonAndCountsTheRest(t *testing.T) {
	srv, logs, url := gatedServer(t, 3, time.Hour)
	for i := 0; i < 200; i++ {
		assert.Equal(t, 401, refuseMe(t, url, nil), "no token")
		assert.Equal(t, 403, refuseMe(t, url, http.Header{"Origin": {"https://evil.example"}}))
	}
	lines := logs.FilterMessage("refused websocket upgrade").All()
	require.Len(t, lines, 6, "3 lines for each of the two reasons, however many refusals")
	assert.Empty(t, logs.FilterMessage("refused websocket upgrades not logged one by one").All(), "the summary waits for the window's end")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
	sum := logs.FilterMessage("refused websocket upgrades not logged one by one").All()
	require.Len(t, sum, 1, "shutting down writes what is still counted")
	m := sum[0].ContextMap()
	assert.EqualValues(t, 394, m["suppressed"])
	byReason, ok := m["by_reason"].(map[string]int)
	require.True(t, ok, "by_reason: %T", m["by_reason"])
	assert.Len(t, byReason, 2)
	for reason, n := range byReason {
		assert.Equal(t, 197, n, reason)
	}
}

func TestTheSummaryIsWrittenWhenTheWindowEndsAndANewWindowLogsAgain(t *testing.T) {
	_, logs, url := gatedServer(t, 2, 300*time.Millisecond)
	for i := 0; i < 10; i++ {
		refuseMe(t, url, nil)
	}
	require.Eventually(t, func() bool {
		return logs.FilterMessage("refused websocket upgrades not logged one by one").Len() == 1
	}, 5*time.Second, 20*time.Millisecond, "the window's end writes the count without waiting for another refusal")
	sum := logs.FilterMessage("refused websocket upgrades not logged one by one").All()[0].ContextMap()
	assert.EqualValues(t, 8, sum["suppressed"])

	refuseMe(t, url, nil)
	assert.Equal(t, 3, logs.FilterMessage("refused websocket upgrade").Len(), "a new window logs its first refusals again")
}

func TestAttackerSuppliedStringsAreCutShortAndEscapedInTheLog(t *testing.T) {
	_, logs, url := gatedServer(t, 10, time.Hour)
	long := strings.Repeat("A", 60<<10)
	refuseMe(t, url, http.Header{"Origin": {long}})
	// Go's HTTP client will not send bytes outside ASCII in a header, and
	// an attacker's will: this one is written by hand.
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://x.example\"fake\" \xff\xfe\r\n\r\n"))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 403, resp.StatusCode)

	lines := logs.FilterMessage("refused websocket upgrade").All()
	require.Len(t, lines, 2)
	o := lines[0].ContextMap()["origin"].(string)
	assert.Equal(t, strings.Repeat("A", maxLoggedField)+"…(cut)", o)
	assert.Equal(t, `https://x.example\"fake\" \xff\xfe`, lines[1].ContextMap()["origin"])
}

func TestLoggableLeavesPlainValuesAsTheyAre(t *testing.T) {
	cases := []struct{ in, want string }{
		{"127.0.0.1:4242", "127.0.0.1:4242"},
		{"http://localhost:3000", "http://localhost:3000"},
		{"", ""},
		{"a\nb", `a\nb`},
		{"é", `\u00e9`},
		{`back\slash`, `back\\slash`},
		{strings.Repeat("é", 100), strings.Repeat(`\u00e9`, 64) + "…(cut)"},
		{strings.Repeat("x", 127) + "é", strings.Repeat("x", 127) + `\xc3…(cut)`},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, loggable(c.in), "%q", c.in)
	}
}
