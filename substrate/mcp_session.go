package substrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMCPTimeout is the session's default wait for a bridge call that
// brings no timeout of its own.
const DefaultMCPTimeout = 60 * time.Second

// TransportFactory makes a fresh transport for each (re)connection: a stdio
// bridge that died is restarted by the next call rather than leaving the
// substrate dead until the daemon restarts.
type TransportFactory func() (mcp.Transport, error)

// ErrClosed is wrapped by calls made after the substrate's closer ran.
var ErrClosed = errors.New("the substrate is closed")

// connectError is a failure to (re)connect to the bridge. The request was
// never sent, so the call is safe to retry like a connection drop.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// sdkCaller is the ToolCaller over the official SDK's client session.
type sdkCaller struct {
	bridge         string
	newTransport   TransportFactory
	defaultTimeout time.Duration
	client         *mcp.Client

	// mu guards cs, tr and closed. It is held while dialing (every caller
	// needs that session anyway, and the dial is bounded by the default
	// timeout) but never while a tool call is in flight or a retry waits.
	mu     sync.Mutex
	cs     *mcp.ClientSession
	tr     mcp.Transport // the transport cs was dialed over
	closed bool
}

// ConnectMCP connects to a bridge through transports made by newTransport
// and returns the substrate and the closer of its session. timeout is the
// default wait of a call (zero: DefaultMCPTimeout). The first connection is
// made now, so a misconfigured bridge fails at startup with its name.
func ConnectMCP(ctx context.Context, name string, newTransport TransportFactory, timeout time.Duration) (*MCP, io.Closer, error) {
	if timeout <= 0 {
		timeout = DefaultMCPTimeout
	}
	c := &sdkCaller{
		bridge:         name,
		newTransport:   newTransport,
		defaultTimeout: timeout,
		client:         mcp.NewClient(&mcp.Implementation{Name: "card", Version: "substrate"}, nil),
	}
	cs, err := c.session(ctx)
	if err != nil {
		return nil, nil, err
	}
	m := NewMCP(name, c)
	// The tool list says whether the bridge has a terminal; a bridge that
	// cannot list its tools is still usable, so a failure keeps the default.
	listCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hasPTY, listed := false, true
	for t, err := range cs.Tools(listCtx, nil) {
		if err != nil {
			listed = false
			break
		}
		hasPTY = hasPTY || t.Name == "pty_start"
	}
	if listed {
		m.pty = hasPTY
	}
	return m, c, nil
}

// session returns the live session, dialing one if there is none.
func (c *sdkCaller) session(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("bridge %q: %w", c.bridge, ErrClosed)
	}
	if c.cs != nil {
		return c.cs, nil
	}
	t, err := c.newTransport()
	if err != nil {
		return nil, &connectError{fmt.Errorf("bridge %q: %w", c.bridge, err)}
	}
	dialCtx, cancel := context.WithTimeout(ctx, c.defaultTimeout)
	defer cancel()
	cs, err := c.client.Connect(dialCtx, t, nil)
	if err != nil {
		cleanupTransport(t)
		return nil, &connectError{fmt.Errorf("connect to bridge %q: %w%s", c.bridge, err, describeTransport(t))}
	}
	c.cs, c.tr = cs, t
	return cs, nil
}

// forget drops a session whose connection closed, so the next call redials.
func (c *sdkCaller) forget(cs *mcp.ClientSession) {
	c.mu.Lock()
	stale := c.cs == cs
	tr := c.tr
	if stale {
		c.cs, c.tr = nil, nil
	}
	c.mu.Unlock()
	if stale {
		_ = cs.Close()
		cleanupTransport(tr)
	}
}

// transportCleaner is implemented by transports that leave something to tidy
// after their session closed (a stdio bridge's process group).
type transportCleaner interface{ cleanup() }

func cleanupTransport(t mcp.Transport) {
	if tc, ok := t.(transportCleaner); ok {
		tc.cleanup()
	}
}

func (c *sdkCaller) CallTool(ctx context.Context, tool string, args map[string]any, timeout time.Duration) (any, error) {
	cs, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = c.defaultTimeout
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		// A dropped connection (the SDK reports a dead stdio bridge first as
		// a bare EOF, then as ErrConnectionClosed) will not come back: drop
		// the session so the retry dials a fresh one.
		if classify(err) == faultDrop {
			c.forget(cs)
		}
		if ctx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer within %s: %w", timeout, context.DeadlineExceeded)
		}
		return nil, err
	}
	return flatten(tool, res)
}

// flatten turns a tool result into the value MCP parses: the structured
// content if present, else the text blocks joined by newlines.
func flatten(tool string, res *mcp.CallToolResult) (any, error) {
	var texts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	text := strings.Join(texts, "\n")
	if res.IsError {
		if text == "" {
			text = "the tool reported an error without a message"
		}
		return nil, &ToolError{Tool: tool, Message: text}
	}
	if res.StructuredContent != nil {
		return res.StructuredContent, nil
	}
	return text, nil
}

// Close ends the session (for a stdio bridge: closes its stdin, waits, then
// terminates it).
func (c *sdkCaller) Close() error {
	c.mu.Lock()
	cs, tr := c.cs, c.tr
	c.cs, c.tr = nil, nil
	c.closed = true
	c.mu.Unlock()
	if cs == nil {
		return nil
	}
	err := cs.Close()
	cleanupTransport(tr)
	if err != nil && !errors.Is(err, mcp.ErrConnectionClosed) {
		return fmt.Errorf("close bridge %q: %w", c.bridge, err)
	}
	return nil
}

// stderrTeller is implemented by transports that can say what a failed
// bridge printed.
type stderrTeller interface{ stderrTail() string }

func describeTransport(t mcp.Transport) string {
	if st, ok := t.(stderrTeller); ok {
		if tail := strings.TrimSpace(st.stderrTail()); tail != "" {
			return "; the bridge printed: " + tail
		}
	}
	return ""
}
