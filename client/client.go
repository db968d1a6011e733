// Package client is the typed Go client of the card daemon: one method per
// wire method, with the params and results the daemon itself defines, so a
// Go program never names a method by string or builds params as a map.
//
//	c, err := client.Dial(ctx, client.Options{})  // the daemon of $CARD_HOME or the default home
//	info, err := c.Info(ctx)
//	res, err := c.Invoke(ctx, daemon.InvokeParams{ID: "codex", Task: "explain main.go", Cwd: dir})
//
// It finds the daemon the way every client must: the URL in
// <home>/daemon.json, the token in <home>/token. A call whose context ends
// is withdrawn with $/cancelRequest. rpc.Client stays the low-level client
// for what no typed method sends (malformed params in tests, raw frames).
package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/rpc"
)

// Options say which daemon to reach and how.
type Options struct {
	// Home is the daemon's state directory, where daemon.json and token
	// are; empty means $CARD_HOME or the platform default, as for the
	// daemon itself.
	Home string
	// URL and Token, when URL is set, reach that daemon directly instead of
	// reading them from Home (a test harness knows both).
	URL, Token string
	// OnEvent is called with every agents.event this connection receives,
	// whichever run it belongs to, in order, on the connection's read
	// goroutine: keep it quick or hand off. Stream and Subscribe take a
	// handler for one run's events as well.
	OnEvent func(daemon.AgentEvent)
	// RPC tunes the transport (headers, the token as a subprotocol, the read
	// limit, a logger, serving the daemon's requests). Its OnNotification is
	// the client's own and is ignored.
	RPC rpc.ClientOptions
}

// Client is one connection to the daemon. Its methods may be called from
// several goroutines at once.
type Client struct {
	rpc    *rpc.Client
	events *router
}

// NoDaemonError says no daemon answers for a home: none was started, or the
// one daemon.json names is gone.
type NoDaemonError struct {
	Home string
	// PID is the process daemon.json names when it names one that does not
	// answer; 0 when there is no daemon.json.
	PID   int
	Cause error
}

func (e *NoDaemonError) Error() string {
	what := "no daemon running for home " + e.Home
	if e.PID != 0 {
		what = fmt.Sprintf("no daemon answering for home %s (daemon.json names pid %d, which does not answer: %v)", e.Home, e.PID, e.Cause)
	}
	return what + ": start it with `card serve`"
}

func (e *NoDaemonError) Unwrap() error { return e.Cause }

// ResolveHome is the home a client of flagHome talks to: flagHome itself,
// else $CARD_HOME, else the platform default — the daemon's own rule.
func ResolveHome(flagHome string) (string, error) {
	if flagHome != "" {
		return flagHome, nil
	}
	return daemon.DefaultHome(os.Getenv)
}

// Dial connects to the daemon opts name. When no daemon runs for the home,
// the error is a *NoDaemonError.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	url, token := opts.URL, opts.Token
	home := opts.Home
	pid := 0
	if url == "" {
		var err error
		if home, err = ResolveHome(home); err != nil {
			return nil, err
		}
		disc, err := daemon.ReadDiscovery(home)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &NoDaemonError{Home: home, Cause: err}
		}
		if err != nil {
			return nil, err
		}
		if token, err = daemon.ReadToken(home); err != nil {
			return nil, fmt.Errorf("read the token of home %s: %w", home, err)
		}
		url, pid = disc.URL, disc.PID
	}
	r := &router{all: opts.OnEvent, runs: map[string][]*route{}, early: map[string][]daemon.AgentEvent{}}
	ro := opts.RPC
	ro.OnNotification = r.notify
	rc, err := rpc.Dial(ctx, url, token, ro)
	if err != nil {
		var de *rpc.DialError
		if pid != 0 && errors.As(err, &de) && de.Status == 0 {
			return nil, &NoDaemonError{Home: home, PID: pid, Cause: err}
		}
		return nil, err
	}
	c := &Client{rpc: rc, events: r}
	r.resubscribe = func(runID string, afterSeq int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.rpc.Call(ctx, "runs.subscribe", daemon.SubscribeParams{RunID: runID, AfterSeq: afterSeq}, nil)
	}
	return c, nil
}

// Call sends method with params as they are and decodes the answer into
// result: for what no typed method sends, such as params a test makes
// malformed on purpose. A JSON-RPC error answer is an *rpc.Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.rpc.Call(ctx, method, params, result)
}

// Done is closed when the connection ends.
func (c *Client) Done() <-chan struct{} { return c.rpc.Done() }

// Close closes the connection. Runs it started go on unless the daemon is
// configured to cancel them on disconnect.
func (c *Client) Close() error { return c.rpc.Close() }

// call is every typed method: one request, its answer decoded into R.
func call[R any](ctx context.Context, c *Client, method string, params any) (R, error) {
	var r R
	err := c.rpc.Call(ctx, method, params, &r)
	return r, err
}
