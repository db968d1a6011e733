package permtool

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// config is the part of the --mcp-config document a client reads.
type config struct {
	MCPServers map[string]struct {
		Type    string            `json:"type"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
		Timeout int64             `json:"timeout"`
	} `json:"mcpServers"`
}

type headerRT struct {
	h    http.Header
	next http.RoundTripper
}

func (t headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.next.RoundTrip(r)
}

// connect is what Claude does with the config: connect with the headers it
// names and call the tool.
func connect(t *testing.T, s *Server, header http.Header) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: s.URL(), MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headerRT{h: header, next: http.DefaultTransport}}}
	return c.Connect(ctx, tr, nil)
}

func claudeHeader(t *testing.T, s *Server) http.Header {
	var cfg config
	require.NoError(t, json.Unmarshal(s.Config(0), &cfg))
	h := http.Header{}
	for k, v := range cfg.MCPServers[ServerName].Headers {
		h.Set(k, v)
	}
	return h
}

func ask(t *testing.T, cs *mcp.ClientSession, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: args})
	require.NoError(t, err)
	require.Len(t, res.Content, 1)
	return res.Content[0].(*mcp.TextContent).Text
}

func TestTheToolAnswersInClaudesFormatWithTheInputAsReceived(t *testing.T) {
	var got struct {
		tool, id string
		input    json.RawMessage
	}
	s, err := Start(func(ctx context.Context, tool string, input json.RawMessage, id string) (bool, string) {
		got.tool, got.id, got.input = tool, id, input
		if tool == "Bash" {
			return true, ""
		}
		return false, "the person said no"
	})
	require.NoError(t, err)
	defer s.Close()
	cs, err := connect(t, s, claudeHeader(t, s))
	require.NoError(t, err)
	defer cs.Close()

	input := map[string]any{"command": "echo hi > f.txt", "description": "Write a file"}
	assert.JSONEq(t, `{"behavior":"allow","updatedInput":{"command":"echo hi > f.txt","description":"Write a file"}}`,
		ask(t, cs, map[string]any{"tool_name": "Bash", "input": input, "tool_use_id": "toolu_1"}))
	assert.Equal(t, "Bash", got.tool)
	assert.Equal(t, "toolu_1", got.id)
	assert.JSONEq(t, `{"command":"echo hi > f.txt","description":"Write a file"}`, string(got.input))

	assert.JSONEq(t, `{"behavior":"deny","message":"the person said no"}`,
		ask(t, cs, map[string]any{"tool_name": "Write", "input": map[string]any{"file_path": "/x"}}))
}

func TestAQuestionWithoutAToolNameIsDeniedWithoutAsking(t *testing.T) {
	var asked atomic.Int32
	s, err := Start(func(context.Context, string, json.RawMessage, string) (bool, string) { asked.Add(1); return true, "" })
	require.NoError(t, err)
	defer s.Close()
	cs, err := connect(t, s, claudeHeader(t, s))
	require.NoError(t, err)
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"tool_name": "", "input": map[string]any{}}})
	require.NoError(t, err)
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, `"behavior":"deny"`)
	assert.Zero(t, asked.Load())
}

// Only this run's Claude gets through: the secret, no Origin, the loopback
// Host, the one path.
func TestTheEndpointRefusesEveryoneButTheRunsOwnClaude(t *testing.T) {
	s, err := Start(func(context.Context, string, json.RawMessage, string) (bool, string) { return true, "" })
	require.NoError(t, err)
	defer s.Close()
	good := claudeHeader(t, s)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	post := func(url string, h http.Header, host string) int {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header = h.Clone()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	wrong := http.Header{"Authorization": {"Bearer " + strings.Repeat("0", 64)}}
	withOrigin := good.Clone()
	withOrigin.Set("Origin", "https://evil.example")
	assert.Equal(t, http.StatusUnauthorized, post(s.URL(), http.Header{}, ""), "no secret")
	assert.Equal(t, http.StatusUnauthorized, post(s.URL(), wrong, ""), "another secret")
	assert.Equal(t, http.StatusForbidden, post(s.URL(), withOrigin, ""), "a browser")
	assert.Equal(t, http.StatusForbidden, post(s.URL(), good, "evil.example"), "a rebound DNS name")
	assert.Equal(t, http.StatusNotFound, post(strings.TrimSuffix(s.URL(), "/mcp")+"/other", good, ""), "another path")
	assert.Equal(t, http.StatusOK, post(s.URL(), good, ""), "the run's Claude")

	other, err := Start(func(context.Context, string, json.RawMessage, string) (bool, string) { return true, "" })
	require.NoError(t, err)
	defer other.Close()
	assert.NotEqual(t, claudeHeader(t, other), good, "each run has its own secret")
	assert.Equal(t, http.StatusUnauthorized, post(other.URL(), good, ""), "one run's secret opens no other run's endpoint")
}

func TestTheConfigNamesTheServerWithItsSecretAndABackstopOfAtLeastASecond(t *testing.T) {
	s, err := Start(func(context.Context, string, json.RawMessage, string) (bool, string) { return true, "" })
	require.NoError(t, err)
	defer s.Close()
	var cfg config
	require.NoError(t, json.Unmarshal(s.Config(150*time.Second), &cfg))
	e := cfg.MCPServers["card"]
	assert.Equal(t, "http", e.Type)
	assert.Equal(t, s.URL(), e.URL)
	assert.True(t, strings.HasPrefix(e.URL, "http://127.0.0.1:"), e.URL)
	assert.Regexp(t, `^Bearer [0-9a-f]{64}$`, e.Headers["Authorization"])
	assert.EqualValues(t, 150000, e.Timeout)
	require.NoError(t, json.Unmarshal(s.Config(10*time.Millisecond), &cfg))
	assert.EqualValues(t, 1000, cfg.MCPServers["card"].Timeout)
	assert.Equal(t, "mcp__card__approve", PromptTool)
}

// Closing the server ends a question still waiting, so nothing outlives
// the run.
func TestClosingTheServerEndsAPendingQuestion(t *testing.T) {
	waiting := make(chan struct{})
	ended := make(chan struct{})
	s, err := Start(func(ctx context.Context, _ string, _ json.RawMessage, _ string) (bool, string) {
		close(waiting)
		<-ctx.Done()
		close(ended)
		return false, "gone"
	})
	require.NoError(t, err)
	cs, err := connect(t, s, claudeHeader(t, s))
	require.NoError(t, err)
	defer cs.Close()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"tool_name": "Bash", "input": map[string]any{}}})
	}()
	<-waiting
	s.Close()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the pending question outlived the server")
	}
}
