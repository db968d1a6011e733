package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/rpc/rpcclient"
)

// Info is daemon.info: who the daemon is.
func (c *Client) Info(ctx context.Context) (api.Info, error) {
	return call[api.Info](ctx, c, "daemon.info", nil)
}

// Discover is rpc.discover: the OpenRPC document of every method.
func (c *Client) Discover(ctx context.Context) (rpcclient.OpenRPCDocument, error) {
	return call[rpcclient.OpenRPCDocument](ctx, c, rpcclient.DiscoverMethod, nil)
}

// Detect is agents.detect: the installed agent CLIs, from the daemon's cache
// unless p.Refresh.
func (c *Client) Detect(ctx context.Context, p api.DetectParams) ([]api.ExternalAgentSpec, error) {
	return call[[]api.ExternalAgentSpec](ctx, c, "agents.detect", p)
}

// ListExternal is agents.list_external, CAR's name for Detect.
func (c *Client) ListExternal(ctx context.Context, p api.DetectParams) ([]api.ExternalAgentSpec, error) {
	return call[[]api.ExternalAgentSpec](ctx, c, "agents.list_external", p)
}

// DetectExternal is agents.detect_external, CAR's name for a Detect that
// always re-detects.
func (c *Client) DetectExternal(ctx context.Context, p api.DetectParams) ([]api.ExternalAgentSpec, error) {
	return call[[]api.ExternalAgentSpec](ctx, c, "agents.detect_external", p)
}

// Health is agents.health_external for one adapter; force bypasses the
// daemon's 30 s cache.
func (c *Client) Health(ctx context.Context, id string, force bool) (api.ExternalAgentHealth, error) {
	if id == "" {
		// Without an id the daemon answers for every detected adapter.
		return api.ExternalAgentHealth{}, errors.New("client: Health needs an adapter id; HealthAll answers for every detected adapter")
	}
	return call[api.ExternalAgentHealth](ctx, c, "agents.health_external", api.HealthParams{ID: id, Force: force})
}

// HealthAll is agents.health_external without an id: every detected
// (installed) adapter, as CAR defines it.
func (c *Client) HealthAll(ctx context.Context, force bool) ([]api.ExternalAgentHealth, error) {
	return call[[]api.ExternalAgentHealth](ctx, c, "agents.health_external", api.HealthParams{Force: force})
}

// Invoke is agents.invoke without stream: it answers when the run has
// ended. A run that failed is a result with IsError, not an error; an error
// is a refusal (*rpcclient.Error with the daemon's code) or a lost connection.
// p.Stream is ignored; Stream streams.
func (c *Client) Invoke(ctx context.Context, p api.InvokeParams) (api.InvokeResult, error) {
	p.Stream = false
	return call[api.InvokeResult](ctx, c, "agents.invoke", p)
}

// Stream is agents.invoke with stream: it answers as soon as the run has
// started, and onEvent (when not nil) gets the run's events in order, the
// last one terminal, on the connection's read goroutine — keep it quick,
// and never call the client from it. Events that arrive before Stream has
// returned are kept and delivered first, so none is lost.
func (c *Client) Stream(ctx context.Context, p api.InvokeParams, onEvent func(api.AgentEvent)) (api.InvokeAccepted, error) {
	p.Stream = true
	c.events.beginStream()
	defer c.events.endStream()
	acc, err := call[api.InvokeAccepted](ctx, c, "agents.invoke", p)
	if err == nil && onEvent != nil {
		c.events.add(acc.RunID, 0, onEvent)
	}
	return acc, err
}

// InvokeExternal is CAR's agents.invoke_external without stream: the run in
// CAR's dialect (session_id the host's routing id, bad attachments skipped
// and counted). p.Stream is ignored: a streamed CAR run speaks
// agents.chat.event, which this client does not route; Stream follows a run.
func (c *Client) InvokeExternal(ctx context.Context, p api.ExternalInvokeParams) (api.ExternalInvokeResult, error) {
	p.Stream = false
	return call[api.ExternalInvokeResult](ctx, c, "agents.invoke_external", p)
}

// ChatCancel is CAR's agents.chat.cancel: it ends this connection's running
// agents.invoke_external under sessionID, once the run has ended.
func (c *Client) ChatCancel(ctx context.Context, sessionID string) (api.ChatCancelResult, error) {
	return call[api.ChatCancelResult](ctx, c, "agents.chat.cancel", api.ChatCancelParams{SessionID: sessionID})
}

// SessionAuth is CAR's session.auth on this already authenticated
// connection: a token other than the daemon's is refused and the daemon
// closes the connection.
func (c *Client) SessionAuth(ctx context.Context, token string) (api.SessionAuthResult, error) {
	return call[api.SessionAuthResult](ctx, c, "session.auth", api.SessionAuthParams{Token: token})
}

// Handshake is CAR's server.handshake: the daemon's protocol version and
// build.
func (c *Client) Handshake(ctx context.Context, p api.HandshakeParams) (api.HandshakeResult, error) {
	return call[api.HandshakeResult](ctx, c, "server.handshake", p)
}

// Cancel is agents.cancel: it answers once the run has ended.
func (c *Client) Cancel(ctx context.Context, runID string) (api.CancelResult, error) {
	return call[api.CancelResult](ctx, c, "agents.cancel", api.CancelParams{RunID: runID})
}

// Runs is runs.list: the run history, newest first.
func (c *Client) Runs(ctx context.Context, p api.ListParams) ([]api.Run, error) {
	return call[[]api.Run](ctx, c, "runs.list", p)
}

// UsageSummary is usage.summary: what the runs used per adapter per day
// over p's dates, with totals and the budgets' standing.
func (c *Client) UsageSummary(ctx context.Context, p api.UsageParams) (api.UsageSummary, error) {
	return call[api.UsageSummary](ctx, c, "usage.summary", p)
}

// Run is runs.get: one recorded run, with its approvals when it ran in ask
// mode.
func (c *Client) Run(ctx context.Context, runID string) (api.RunRecord, error) {
	return call[api.RunRecord](ctx, c, "runs.get", api.GetParams{RunID: runID})
}

// Prune is runs.prune: it deletes finished runs past the retention (with
// p.DryRun it only counts them).
func (c *Client) Prune(ctx context.Context, p api.PruneParams) (api.PruneResult, error) {
	return call[api.PruneResult](ctx, c, "runs.prune", p)
}

// ApprovalDecide is agents.approval_decide: the answer to a question of an
// ask-mode run given as a request, so a refused answer comes back as an
// error (*rpcclient.Error with the daemon's code). Options.OnApprove answers
// agents.approve directly instead.
func (c *Client) ApprovalDecide(ctx context.Context, p api.DecideParams) (api.DecideResult, error) {
	return call[api.DecideResult](ctx, c, "agents.approval_decide", p)
}

// Subscribe is runs.subscribe: onEvent (when not nil) gets the run's events
// after afterSeq in order, replayed and then live, the last one terminal,
// on the connection's read goroutine (as for Stream).
func (c *Client) Subscribe(ctx context.Context, runID string, afterSeq int64, onEvent func(api.AgentEvent)) (api.SubscribeResult, error) {
	var rt *route
	if onEvent != nil {
		rt = c.events.add(runID, afterSeq, onEvent)
	}
	res, err := call[api.SubscribeResult](ctx, c, "runs.subscribe", api.SubscribeParams{RunID: runID, AfterSeq: afterSeq})
	if err != nil && rt != nil {
		c.events.remove(runID, rt)
	}
	return res, err
}

// SubstrateInfo is substrate.info: which environment the substrate methods
// act on.
func (c *Client) SubstrateInfo(ctx context.Context) (api.SubstrateInfo, error) {
	return call[api.SubstrateInfo](ctx, c, "substrate.info", nil)
}

// SubstrateRunCommand is substrate.run_command. A command that ran and
// failed is a result with a nonzero exit code.
func (c *Client) SubstrateRunCommand(ctx context.Context, command string, timeout time.Duration) (api.CommandResult, error) {
	secs := int((timeout + time.Second - 1) / time.Second)
	return call[api.CommandResult](ctx, c, "substrate.run_command", api.RunCommandParams{Command: command, TimeoutSecs: secs})
}

// SubstrateReadText is substrate.read_text: a whole UTF-8 file.
func (c *Client) SubstrateReadText(ctx context.Context, path string) (string, error) {
	r, err := call[api.ReadTextResult](ctx, c, "substrate.read_text", api.PathParams{Path: path})
	return r.Content, err
}

// SubstrateWriteText is substrate.write_text.
func (c *Client) SubstrateWriteText(ctx context.Context, p api.WriteTextParams) (api.WriteResult, error) {
	return call[api.WriteResult](ctx, c, "substrate.write_text", p)
}

// SubstrateReadBytes is substrate.read_bytes, decoded: the window of the
// file p names.
func (c *Client) SubstrateReadBytes(ctx context.Context, p api.ReadBytesParams) ([]byte, error) {
	r, err := call[api.BytesResult](ctx, c, "substrate.read_bytes", p)
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(r.ContentB64)
	if err != nil {
		return nil, fmt.Errorf("substrate.read_bytes answered content_b64 that is not base64: %w", err)
	}
	return b, nil
}

// SubstrateWriteBytes is substrate.write_bytes.
func (c *Client) SubstrateWriteBytes(ctx context.Context, path string, data []byte) (api.WriteResult, error) {
	return call[api.WriteResult](ctx, c, "substrate.write_bytes",
		api.WriteBytesParams{Path: path, ContentB64: base64.StdEncoding.EncodeToString(data)})
}

// SubstratePathState is substrate.path_state: missing, exists, or unknown
// with a reason.
func (c *Client) SubstratePathState(ctx context.Context, path string) (api.PathState, error) {
	return call[api.PathState](ctx, c, "substrate.path_state", api.PathParams{Path: path})
}

// SubstratePTYStart is substrate.pty_start; it answers the PTY's pid.
func (c *Client) SubstratePTYStart(ctx context.Context, command string) (int, error) {
	r, err := call[api.PTYResult](ctx, c, "substrate.pty_start", api.PTYStartParams{Command: command})
	return r.PID, err
}

// SubstratePTYInput is substrate.pty_input.
func (c *Client) SubstratePTYInput(ctx context.Context, pid int, data string) error {
	_, err := call[api.OKResult](ctx, c, "substrate.pty_input", api.PTYInputParams{PID: pid, Data: data})
	return err
}

// SubstratePTYRead is substrate.pty_read: what the PTY printed since the
// last read.
func (c *Client) SubstratePTYRead(ctx context.Context, pid int) (string, error) {
	r, err := call[api.PTYReadResult](ctx, c, "substrate.pty_read", api.PTYPIDParams{PID: pid})
	return r.Data, err
}

// SubstratePTYResize is substrate.pty_resize.
func (c *Client) SubstratePTYResize(ctx context.Context, pid int, rows, cols uint16) error {
	_, err := call[api.OKResult](ctx, c, "substrate.pty_resize", api.PTYResizeParams{PID: pid, Rows: rows, Cols: cols})
	return err
}

// SubstratePTYKill is substrate.pty_kill.
func (c *Client) SubstratePTYKill(ctx context.Context, pid int) error {
	_, err := call[api.OKResult](ctx, c, "substrate.pty_kill", api.PTYPIDParams{PID: pid})
	return err
}
