// Package client is the typed Go client of the card daemon: one method per
// wire method, with the params and results the daemon itself defines, so a
// Go program never names a method by string or builds params as a map.
//
//	c, err := client.Dial(ctx, client.Options{})  // the daemon of $CARD_HOME or the default home
//	info, err := c.Info(ctx)
//	res, err := c.Invoke(ctx, api.InvokeParams{ID: "codex", Task: "explain main.go", Cwd: dir})
//
// It finds the daemon the way every client must: the URL in
// <home>/daemon.json, the token in <home>/token, and before the token is
// sent, proof from the operating system that what listens there is this
// user's daemon (see docs/protocol.md, "Before you send the token"). A call
// whose context ends
// is withdrawn with $/cancelRequest. rpcclient.Client stays the low-level client
// for what no typed method sends (malformed params in tests, raw frames).
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/card-dev/card/api"
	homedir "github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/rpc/rpcclient"
)

// Options say which daemon to reach and how.
type Options struct {
	// Home is the daemon's state directory, where daemon.json and token
	// are; empty means $CARD_HOME or the platform default, as for the
	// daemon itself.
	Home string
	// URL and Token, when URL is set, reach that daemon directly instead of
	// reading them from Home (a test harness knows both). Nothing is
	// checked then: the caller vouches for what listens at URL.
	URL, Token string
	// OnEvent is called with every agents.event this connection receives,
	// whichever run it belongs to, in order, on the connection's read
	// goroutine: keep it quick or hand off. Stream and Subscribe take a
	// handler for one run's events as well.
	OnEvent func(api.AgentEvent)
	// OnApprove answers the questions of this connection's ask-mode runs
	// (agents.approve): allow, allow_always or deny. It runs on a goroutine
	// of its own per question and may wait for a person; ctx ends when the
	// daemon withdraws the question (answered elsewhere, or expired) or the
	// connection closes, and an answer after that is not sent. Nil answers
	// every question with -32601, which denies it at once.
	OnApprove func(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error)
	// RPC tunes the transport (headers, the token as a subprotocol, the read
	// limit, a logger, serving the daemon's requests). Its OnNotification is
	// the client's own and is ignored.
	RPC rpcclient.ClientOptions
}

// Client is one connection to the daemon. Its methods may be called from
// several goroutines at once.
type Client struct {
	rpc    Conn
	events *router
}

// Conn is what a Client's calls go over: a WebSocket connection to the
// daemon (Dial), or a connection inside the daemon's own process (Open).
// *rpcclient.Client is one.
type Conn interface {
	Call(ctx context.Context, method string, params, result any) error
	Done() <-chan struct{}
	Close() error
}

// Open is a Client over a connection that is not a socket: the daemon's
// own ACP front door calls its methods in process. open is handed what
// takes the connection's notifications (it must not keep params) and what
// answers the daemon's requests (agents.approve, with opts.OnApprove), and
// returns the connection. opts' URL, Home, Token and RPC are not used.
func Open(opts Options, open func(notify func(method string, params json.RawMessage),
	serve func(ctx context.Context, method string, params json.RawMessage) (any, error)) Conn) *Client {
	r := &router{all: opts.OnEvent, runs: map[string][]*route{}, early: map[string][]api.AgentEvent{}}
	serve := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		return nil, &rpcclient.Error{Code: rpcclient.CodeMethodNotFound, Message: "this client serves no " + method}
	}
	if opts.OnApprove != nil {
		serve = approver(opts.OnApprove, nil)
	}
	return newClient(open(r.notify, serve), r)
}

// newClient is a Client over conn, whose notifications go to r.
func newClient(conn Conn, r *router) *Client {
	c := &Client{rpc: conn, events: r}
	r.resubscribe = func(runID string, afterSeq int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.rpc.Call(ctx, "runs.subscribe", api.SubscribeParams{RunID: runID, AfterSeq: afterSeq}, nil)
	}
	r.resubscribeSession = func(sessionID string, afterSeq int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.rpc.Call(ctx, "sessions.subscribe", api.SessionSubscribeParams{SessionID: sessionID, AfterSeq: afterSeq}, nil)
	}
	return c
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
		what = fmt.Sprintf("no daemon answering for home %s (daemon.json names pid %d: %v)", e.Home, e.PID, e.Cause)
	}
	return what + ": start it with `" + ServeCommand(e.Home) + "`"
}

// ServeCommand is the command that starts a daemon for home: `card serve`,
// with --home unless home is the one card serve would pick by itself here
// (CARD_HOME or the platform default).
func ServeCommand(home string) string {
	if def, err := homedir.DefaultHome(os.Getenv); err == nil && def == home {
		return "card serve"
	}
	if !strings.ContainsAny(home, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
		return "card serve --home " + home
	}
	return "card serve --home '" + strings.ReplaceAll(home, "'", `'\''`) + "'"
}

func (e *NoDaemonError) Unwrap() error { return e.Cause }

// ResolveHome is the home a client of flagHome talks to: flagHome itself,
// else $CARD_HOME, else the platform default — the daemon's own rule.
func ResolveHome(flagHome string) (string, error) {
	if flagHome != "" {
		return flagHome, nil
	}
	return homedir.DefaultHome(os.Getenv)
}

// Dial connects to the daemon opts name. When no daemon runs for the home,
// the error is a *NoDaemonError; when something else listens where
// daemon.json says the daemon is, a *ListenerError, and the token is not
// sent.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	url, token := opts.URL, opts.Token
	home := opts.Home
	pid := 0
	if url == "" {
		var err error
		if home, err = ResolveHome(home); err != nil {
			return nil, err
		}
		var disc homedir.Discovery
		if disc, token, err = findDaemon(home); err != nil {
			return nil, err
		}
		url, pid = disc.URL, disc.PID
	}
	r := &router{all: opts.OnEvent, runs: map[string][]*route{}, early: map[string][]api.AgentEvent{}}
	ro := opts.RPC
	ro.OnNotification = r.notify
	if opts.OnApprove != nil {
		ro.OnRequest = approver(opts.OnApprove, ro.OnRequest)
	}
	rc, err := rpcclient.Dial(ctx, url, token, ro)
	if err != nil {
		var de *rpcclient.DialError
		if pid != 0 && errors.As(err, &de) && de.Status == 0 {
			return nil, &NoDaemonError{Home: home, PID: pid, Cause: err}
		}
		return nil, err
	}
	return newClient(rc, r), nil
}

// findDaemon reads the home's daemon.json and token and checks, before the
// token goes anywhere, that the daemon the file names is this user's and is
// the one listening on its port. The file is read again after the token: a
// daemon that starts meanwhile removes a dead one's daemon.json before it
// writes its new token, so a client never pairs a new token with a dead
// daemon's port.
func findDaemon(home string) (homedir.Discovery, string, error) {
	if _, err := homedir.CheckHome(home); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return homedir.Discovery{}, "", &NoDaemonError{Home: home, Cause: err}
		}
		return homedir.Discovery{}, "", err
	}
	for attempt := 0; ; attempt++ {
		disc, err := homedir.ReadDiscovery(home)
		if errors.Is(err, fs.ErrNotExist) {
			return disc, "", &NoDaemonError{Home: home, Cause: err}
		}
		if err != nil {
			return disc, "", err
		}
		token, tokErr := homedir.ReadToken(home)
		again, err := homedir.ReadDiscovery(home)
		if errors.Is(err, fs.ErrNotExist) {
			// Stopped while we read: the token is gone or dead with it.
			return disc, "", &NoDaemonError{Home: home, Cause: err}
		}
		if err != nil {
			return disc, "", err
		}
		if again == disc {
			if tokErr != nil {
				return disc, "", fmt.Errorf("read the token of home %s: %w", home, tokErr)
			}
			t, err := parseTarget(disc)
			if err != nil {
				return disc, "", err
			}
			if err := verifyListener(home, t); err != nil {
				return disc, "", err
			}
			return disc, token, nil
		}
		if attempt == 2 {
			return disc, "", fmt.Errorf("%s keeps changing while it is read (daemons starting and stopping on home %s?); try again",
				filepath.Join(home, homedir.DiscoveryFileName), home)
		}
	}
}

// Call sends method with params as they are and decodes the answer into
// result: for what no typed method sends, such as params a test makes
// malformed on purpose. A JSON-RPC error answer is an *rpcclient.Error.
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

// approver serves agents.approve with onApprove and hands any other request
// of the server's to next.
func approver(onApprove func(context.Context, api.ApproveParams) (api.ApproveAnswer, error),
	next func(context.Context, string, json.RawMessage) (any, error)) func(context.Context, string, json.RawMessage) (any, error) {
	return func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		if method != api.ApproveMethod {
			if next != nil {
				return next(ctx, method, params)
			}
			return nil, &rpcclient.Error{Code: rpcclient.CodeMethodNotFound, Message: "this client serves no " + method}
		}
		var q api.ApproveParams
		if err := json.Unmarshal(params, &q); err != nil {
			return nil, &rpcclient.Error{Code: rpcclient.CodeInvalidParams, Message: "agents.approve params: " + err.Error()}
		}
		return onApprove(ctx, q)
	}
}
