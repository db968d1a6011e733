package spawn

import (
	"fmt"
	"time"

	"github.com/card-dev/card/api"
)

// Bounds of a request's max_api_retries: how many times an agent may retry
// a failed model call (rate limit, overload, network) before the run ends.
// The agents' own defaults run to minutes of backoff (Claude Code retries
// ten times over about three minutes), which a person waiting on a desktop
// app reads as a hang.
const (
	DefaultMaxAPIRetries = 3
	MaxAPIRetriesLimit   = 10
)

// NetworkGrace is how long an agent may go on retrying an API it cannot
// reach at all before the run ends with kind network. A refused connection
// is seldom cured by backing off, unlike a rate limit, and the agents back
// off for half a minute (Gemini) or wait for the network without end
// (Codex); a short grace still lets a run ride out a blip.
const NetworkGrace = 5 * time.Second

// retryGuard decides, from a run's events as they pass, when the agent's
// own retrying has to stop: when the credentials are refused a second time
// in a row, when the retries since the last progress exceed the request's
// bound, or when the agent says it will wait without end. It is pure: the
// runner owns the clock and the process.
//
// A refused credential gets one retry, not ten and not none: a CLI on a
// subscription login (Claude Code's, Codex's ChatGPT sign-in) holds a token
// that expires, and its answer to a 401 can be a refresh and a retry that
// succeeds; a bad key is refused again a moment later, and no further retry
// brings it back. (The refresh itself needs a real login and was not
// observed; the bad-key case was, with every CLI that retries.)
type retryGuard struct {
	max     int
	streak  int // retries since the last event that showed progress
	refused int // of those, retries after a refused credential
}

// verdict is why the guard ends a run, and whether the API has just been
// found unreachable (the runner then starts the network grace) or reached
// again (it stops it).
type verdict struct {
	end         *api.RunError
	unreachable bool
	progress    bool
}

func newRetryGuard(max int) *retryGuard { return &retryGuard{max: max} }

// observe looks at one event on its way to the client. A retry gets its
// attempt (when the agent gave none) and the bound it runs under. A retry
// that ends the run is not sent on (the emitter drops it): it would count
// past its own bound, and the run's error says why it ended.
func (g *retryGuard) observe(ev *Event) verdict {
	if g == nil {
		return verdict{}
	}
	switch ev.Kind {
	case api.EventText, api.EventThinking, api.EventToolUse, api.EventToolResult, api.EventUsage:
		g.streak, g.refused = 0, 0
		return verdict{progress: true}
	case api.EventRetry:
	default:
		return verdict{}
	}
	g.streak++
	n := max(ev.Attempt, g.streak)
	ev.Attempt = n
	if ev.MaxAttempts == 0 || ev.MaxAttempts > g.max {
		ev.MaxAttempts = g.max
	}
	msg := ev.Error
	if msg == "" {
		msg = "the agent's model call failed"
	}
	if ev.cause == api.KindAuth {
		// A refused credential runs under its own bound of one retry, so
		// the event counts against that bound, not max_api_retries: "attempt
		// 1 of 1", never "2 of 3" for a run that ends at the next refusal.
		g.refused++
		ev.Attempt, ev.MaxAttempts = g.refused, 1
	}
	switch {
	case ev.cause == api.KindAuth && g.refused > 1:
		return verdict{end: failure(api.KindAuth, clip(msg+" — the API refused the agent's credentials again after a retry; card ended the run "+
			"instead of waiting out the agent's other retries. Check the API key or sign-in the agent uses", 2048))}
	case ev.unbounded:
		return verdict{end: failure(api.KindNetwork, clip(msg+" — the agent has used up its own retries and would wait for the network without end; card ended the run", 2048))}
	case n > g.max:
		kind := ev.cause
		if kind == "" {
			kind = api.KindAPI
		}
		return verdict{end: failure(kind, clip(fmt.Sprintf("%s — card ended the run after %d retries (max_api_retries)", msg, g.max), 2048))}
	}
	return verdict{unreachable: ev.cause == api.KindNetwork}
}

// unreachableFailure is the end of a run whose API stayed out of reach for
// the whole grace period; msg is the agent's own word for it.
func unreachableFailure(msg string, grace time.Duration) *api.RunError {
	if msg == "" {
		msg = "the agent could not reach its API"
	}
	return failure(api.KindNetwork, clip(fmt.Sprintf("%s — the API could not be reached for %s; card ended the run", msg, grace), 2048))
}
