package client

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/card-dev/card/api"
)

// StartSession is sessions.start: a conversation with one adapter; nothing
// runs until its first prompt (unless p.Warm).
func (c *Client) StartSession(ctx context.Context, p api.SessionStartParams) (api.Session, error) {
	return call[api.Session](ctx, c, "sessions.start", p)
}

// PromptSession is sessions.prompt: one turn, started at once or queued
// behind the running one (the answer says which). Its events come to a
// SubscribeSession of the session.
func (c *Client) PromptSession(ctx context.Context, p api.SessionPromptParams) (api.SessionPromptResult, error) {
	return call[api.SessionPromptResult](ctx, c, "sessions.prompt", p)
}

// SteerSession is sessions.steer: more input for the running turn, where
// the agent's CLI takes it.
func (c *Client) SteerSession(ctx context.Context, p api.SessionSteerParams) (api.SessionSteerResult, error) {
	return call[api.SessionSteerResult](ctx, c, "sessions.steer", p)
}

// CancelTurn is sessions.cancel: it ends the running turn (and with
// p.ClearQueue the queued prompts) and answers once the turn has ended.
func (c *Client) CancelTurn(ctx context.Context, p api.SessionCancelParams) (api.SessionCancelResult, error) {
	return call[api.SessionCancelResult](ctx, c, "sessions.cancel", p)
}

// CloseSession is sessions.close.
func (c *Client) CloseSession(ctx context.Context, id string) (api.Session, error) {
	return call[api.Session](ctx, c, "sessions.close", api.SessionIDParams{SessionID: id})
}

// ReleaseSession is sessions.release: the session's warm agent ends, the
// session stays open.
func (c *Client) ReleaseSession(ctx context.Context, id string) (api.SessionReleaseResult, error) {
	return call[api.SessionReleaseResult](ctx, c, "sessions.release", api.SessionIDParams{SessionID: id})
}

// Sessions is sessions.list.
func (c *Client) Sessions(ctx context.Context, p api.SessionListParams) (api.SessionList, error) {
	return call[api.SessionList](ctx, c, "sessions.list", p)
}

// Session is sessions.get.
func (c *Client) Session(ctx context.Context, id string) (api.Session, error) {
	return call[api.Session](ctx, c, "sessions.get", api.SessionIDParams{SessionID: id})
}

// SubscribeSession is sessions.subscribe: onEvent (when not nil) gets the
// session's events after p.AfterSeq in seq order, each once, replayed and
// then live across turns, on the connection's read goroutine (keep it
// quick; never call the client from it). Events that arrive before the
// answer are delivered too. A subscription the daemon cuts off for falling
// too far behind a turn is taken up again from the last seq delivered, so
// a slow handler still gets every event once.
func (c *Client) SubscribeSession(ctx context.Context, p api.SessionSubscribeParams, onEvent func(api.SessionEvent)) (api.SessionSubscribeResult, error) {
	var rt *sessionRoute
	if onEvent != nil {
		rt = c.events.sessions.add(p.SessionID, p.AfterSeq, onEvent)
	}
	res, err := call[api.SessionSubscribeResult](ctx, c, "sessions.subscribe", p)
	if err != nil && rt != nil {
		c.events.sessions.remove(p.SessionID, rt)
	}
	return res, err
}

// SubscribeSessionText is SubscribeSession for a follower that writes an
// event's text into JSON of its own, as the ACP front door does: a text or
// thinking event comes to onEvent with its Text empty and text holding it
// as the JSON string the daemon wrote (quotes and escapes included), to be
// spliced in as it is rather than unquoted here and quoted again there.
// Every other event, and any text event in another form, comes decoded,
// with text nil; a turn's terminal event may come without its result's
// answer, which is the turn's text once more (the follower had it piece by
// piece). text belongs to the call: copy what is kept.
func (c *Client) SubscribeSessionText(ctx context.Context, p api.SessionSubscribeParams, onEvent func(ev api.SessionEvent, text json.RawMessage)) (api.SessionSubscribeResult, error) {
	rt := &sessionRoute{text: onEvent}
	rt.last.Store(p.AfterSeq)
	rt = c.events.sessions.addRoute(p.SessionID, rt)
	res, err := call[api.SessionSubscribeResult](ctx, c, "sessions.subscribe", p)
	if err != nil {
		c.events.sessions.remove(p.SessionID, rt)
	}
	return res, err
}

// sessionRouter hands each sessions.event to its session's handlers, each
// seq once.
type sessionRouter struct {
	mu     sync.Mutex
	routes map[string][]*sessionRoute
	// decoded counts the routes that take events decoded whole; while
	// there are none, a terminal event is decoded without its answer.
	decoded int
}

// sessionRoute is one follower: fn takes events decoded, text (when set
// instead) takes text events with their text still JSON.
type sessionRoute struct {
	mu   sync.Mutex
	fn   func(api.SessionEvent)
	text func(api.SessionEvent, json.RawMessage)
	// last is the last seq handed to the route, written with mu held and
	// read without it: a handler may wait with mu held (the ACP front
	// door's, while its editor catches up), and the read goroutine must
	// not wait behind it to learn where a cut-off subscription goes on.
	last atomic.Int64
}

func (r *sessionRouter) add(id string, after int64, fn func(api.SessionEvent)) *sessionRoute {
	rt := &sessionRoute{fn: fn}
	rt.last.Store(after)
	return r.addRoute(id, rt)
}

func (r *sessionRouter) addRoute(id string, rt *sessionRoute) *sessionRoute {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rt.text == nil {
		r.decoded++
	}
	if r.routes == nil {
		r.routes = map[string][]*sessionRoute{}
	}
	r.routes[id] = append(r.routes[id], rt)
	return rt
}

// lastOf is the lowest last seq of session id's followers: where a
// subscription of it that was cut off is taken up again. ok is false when
// the session has no follower here.
func (r *sessionRouter) lastOf(id string) (last int64, ok bool) {
	r.mu.Lock()
	routes := slices.Clone(r.routes[id])
	r.mu.Unlock()
	for _, rt := range routes {
		if l := rt.last.Load(); !ok || l < last {
			last, ok = l, true
		}
	}
	return last, ok
}

func (r *sessionRouter) remove(id string, rt *sessionRoute) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.routes[id])
	routes := slices.DeleteFunc(r.routes[id], func(have *sessionRoute) bool { return have == rt })
	if len(routes) < n && rt.text == nil {
		r.decoded--
	}
	if len(routes) == 0 {
		delete(r.routes, id)
	} else {
		r.routes[id] = routes
	}
}

func (r *sessionRouter) notify(params json.RawMessage) {
	// An event of the text shape is read without its text; it is decoded
	// whole only for a follower that wants it so.
	ev, text, split := splitTextEvent(params)
	decoded := !split
	if decoded {
		r.mu.Lock()
		anyDecoded := r.decoded > 0
		r.mu.Unlock()
		decode := decodeWithoutAnswer
		if anyDecoded {
			decode = decodeEvent
		}
		if decode(params, &ev) != nil {
			return
		}
	}
	r.mu.Lock()
	routes := slices.Clone(r.routes[ev.SessionID])
	r.mu.Unlock()
	var whole *api.SessionEvent
	var bad bool
	for _, rt := range routes {
		rt.mu.Lock()
		if ev.Seq > rt.last.Load() {
			rt.last.Store(ev.Seq)
			switch {
			case rt.text != nil:
				rt.text(ev, text)
			case decoded:
				rt.fn(ev)
			default:
				if whole == nil {
					whole = new(api.SessionEvent)
					bad = decodeEvent(params, whole) != nil
				}
				if !bad {
					rt.fn(*whole)
				}
			}
		}
		rt.mu.Unlock()
	}
}

// ConfigureSession is sessions.configure: a new permission mode, model or
// effort for the session's next turns (the running turn keeps its own),
// and before the first turn a new adapter (p.ID) or isolation: p.Isolation
// api.IsolationWorktree makes the session's worktree (from p.Base), which
// the answer's Session.Worktree then names, and api.IsolationOff removes it.
func (c *Client) ConfigureSession(ctx context.Context, p api.SessionConfigureParams) (api.SessionConfigureResult, error) {
	return call[api.SessionConfigureResult](ctx, c, "sessions.configure", p)
}

// SessionDiff is sessions.diff: an isolated session's changes, the whole
// session's (p.Turn 0) or one turn's, as a unified diff with per-file stats.
func (c *Client) SessionDiff(ctx context.Context, p api.SessionDiffParams) (api.SessionDiff, error) {
	return call[api.SessionDiff](ctx, c, "sessions.diff", p)
}

// ApplySession is sessions.apply: the isolated session's changes into the
// user's checkout as uncommitted changes, all or nothing (refused with
// apply_conflict, naming the files, when any conflicts).
func (c *Client) ApplySession(ctx context.Context, id string) (api.SessionApplyResult, error) {
	return call[api.SessionApplyResult](ctx, c, "sessions.apply", api.SessionIDParams{SessionID: id})
}

// RewindSession is sessions.rewind: the isolated session's worktree back
// to the state after turn (0: the state it started from).
func (c *Client) RewindSession(ctx context.Context, id string, turn int) (api.SessionRewindResult, error) {
	return call[api.SessionRewindResult](ctx, c, "sessions.rewind", api.SessionRewindParams{SessionID: id, Turn: &turn})
}

// DiscardSession is sessions.discard: the isolated session's worktree and
// branch are removed, and the session closed if it was open.
func (c *Client) DiscardSession(ctx context.Context, id string) (api.SessionDiscardResult, error) {
	return call[api.SessionDiscardResult](ctx, c, "sessions.discard", api.SessionIDParams{SessionID: id})
}
