// Package agentside is card as an ACP agent: it answers an editor that
// speaks the Agent Client Protocol (version 1) and does the work through
// card's sessions. One ACP session is one card session; each
// session/prompt is a turn (a run in card's history); the turn's events
// become session/update notifications, its questions
// session/request_permission requests.
//
// The package knows nothing of where the sessions live: a Backend does the
// calls. `card acp` hands it the Go client over the daemon's WebSocket;
// the daemon's /acp endpoint hands it the same client over a connection to
// the daemon's method registry in process, with the grants and Origin of
// the ACP connection, so an ACP client holds exactly the access classes it
// would hold on /rpc and no method is reachable through ACP that was not
// reachable before.
package agentside

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// Backend is the part of card's client the front door uses: sessions,
// detection and health, a run's record (for the prompt of a turn another
// client started), and answering a question. *client.Client is one.
type Backend interface {
	StartSession(ctx context.Context, p api.SessionStartParams) (api.Session, error)
	PromptSession(ctx context.Context, p api.SessionPromptParams) (api.SessionPromptResult, error)
	ConfigureSession(ctx context.Context, p api.SessionConfigureParams) (api.SessionConfigureResult, error)
	CancelTurn(ctx context.Context, p api.SessionCancelParams) (api.SessionCancelResult, error)
	CloseSession(ctx context.Context, id string) (api.Session, error)
	Sessions(ctx context.Context, p api.SessionListParams) (api.SessionList, error)
	Session(ctx context.Context, id string) (api.Session, error)
	SubscribeSession(ctx context.Context, p api.SessionSubscribeParams, onEvent func(api.SessionEvent)) (api.SessionSubscribeResult, error)
	Detect(ctx context.Context, p api.DetectParams) ([]api.ExternalAgentSpec, error)
	Health(ctx context.Context, id string, force bool) (api.ExternalAgentHealth, error)
	Run(ctx context.Context, runID string) (api.RunRecord, error)
	ApprovalDecide(ctx context.Context, p api.DecideParams) (api.DecideResult, error)
}

// TextBackend is a Backend that can hand over a session's text and
// thinking events with their text still as the JSON string the daemon
// wrote (*client.Client is one): a chunk's text is then spliced into its
// session/update as it is, not unquoted by the client and quoted again
// here, which for a talkative turn was most of what following it through
// ACP cost over following it on /rpc. Every other event comes decoded,
// with text nil.
type TextBackend interface {
	SubscribeSessionText(ctx context.Context, p api.SessionSubscribeParams, onEvent func(ev api.SessionEvent, text json.RawMessage)) (api.SessionSubscribeResult, error)
}

// WarmReleaser is a Backend that can end a session's warm agent and keep
// the session (sessions.release; *client.Client is one): the front door
// does so for its sessions once the editor has gone.
type WarmReleaser interface {
	ReleaseSession(ctx context.Context, id string) (api.SessionReleaseResult, error)
}

// Transport carries whole ACP messages, one per Read and Write: a line of
// stdio, or a WebSocket text frame. Write must not keep msg after it
// returns: the server writes a turn's chunks from buffers it reuses.
type Transport interface {
	Read(ctx context.Context) ([]byte, error)
	Write(ctx context.Context, msg []byte) error
}

// Lines is the stdio transport: one message per line each way. Writes are
// serialised, so two goroutines never interleave within a line.
func Lines(r io.Reader, w io.Writer) Transport {
	return &lines{r: acp.NewReader(r, 0), w: w}
}

type lines struct {
	r  *acp.Reader
	mu sync.Mutex
	w  io.Writer

	// One goroutine reads, so a Read whose ctx ends (a signal to `card
	// acp`) returns at once, though stdin stays open: a read of a blocking
	// descriptor cannot be interrupted, and the next Read must not lose
	// the line that read was waiting for.
	start sync.Once
	read  chan lineRead
}

type lineRead struct {
	line []byte
	err  error
}

func (l *lines) Read(ctx context.Context) ([]byte, error) {
	l.start.Do(func() {
		l.read = make(chan lineRead)
		go func() {
			for {
				line, err := l.r.ReadLine()
				if line != nil {
					// The reader's buffer is reused by its next line.
					line = append([]byte(nil), line...)
				}
				l.read <- lineRead{line, err}
				if err != nil && !errors.Is(err, acp.ErrLineTooLong) {
					return
				}
			}
		}()
	})
	select {
	case r := <-l.read:
		return r.line, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *lines) Write(_ context.Context, msg []byte) error {
	b := make([]byte, 0, len(msg)+1)
	b = append(append(b, msg...), '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(b)
	return err
}
