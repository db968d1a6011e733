package spawn

import (
	"fmt"
	"math"
	"strconv"

	"github.com/card-dev/card/api"
)

// Bounds of a request's caps. Above them a value is a client's mistake (a
// cost in cents, a token count with extra zeros), not a limit anyone means:
// refusing it is better than a cap that never bites.
const (
	MaxCostUSDLimit = 10_000.0
	MaxTokensLimit  = 1_000_000_000
)

// When a CLI reports the tokens it used, which is when card can hold a run
// to max_tokens (CapsDriver.TokensWhen).
const (
	// TokensPerCall: after each model call, while the run goes on; card
	// ends the run as soon as the total passes the cap.
	TokensPerCall = "after each model call"
	// TokensTurnEnd: only with the turn's result; card ends the run there,
	// so the answer is kept and the run ends budget.
	TokensTurnEnd = "at the end of the turn"
)

// CapsDriver is how one CLI is held to a request's caps. The token cap is
// card's own, from the usage the CLI reports (none of the CLIs has a token
// cap of its own); the cost cap is one of three things, exactly one set.
type CapsDriver struct {
	// CostFlag hands max_cost_usd to the CLI's own spending cap, which
	// stops the CLI before its next model call once it is passed.
	CostFlag func(p *Plan, usd float64)
	// CostReported: the CLI reports each model call's cost with its usage
	// (the parser's usage events carry it), and card adds it up.
	CostReported bool
	// NoCost says why max_cost_usd is refused: the CLI neither caps nor
	// reports what it spends.
	NoCost string
	// TokensWhen is when the CLI reports its tokens: TokensPerCall or
	// TokensTurnEnd; "" for a CLI that reports none, with NoTokens saying
	// so (max_tokens is then refused: a cap card cannot hold is not one).
	TokensWhen string
	NoTokens   string
}

// PlanCaps are a run's caps as the runner enforces them.
type PlanCaps struct {
	// MaxCostUSD and MaxTokens are 0 for no cap.
	MaxCostUSD float64
	MaxTokens  int64
	// CostByCLI: the CLI enforces MaxCostUSD itself (CostFlag); card only
	// words its ending.
	CostByCLI bool
	// Program is the CLI's name, for messages.
	Program string
}

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// checkCaps refuses a cap that is not a positive, finite, plausible limit.
// Zero is refused rather than read as "none": a client that sends 0 means
// something, and neither "unlimited" nor "stop at once" is safe to guess.
func checkCaps(cost *float64, tokens *int64) error {
	if cost != nil {
		c := *cost
		if math.IsNaN(c) || math.IsInf(c, 0) || c <= 0 || c > MaxCostUSDLimit {
			return &api.FieldError{Field: "max_cost_usd", Message: fmt.Sprintf("must be a number of US dollars above 0 and at most %g (or omitted for no cap)", MaxCostUSDLimit)}
		}
	}
	if tokens != nil && (*tokens <= 0 || *tokens > MaxTokensLimit) {
		return &api.FieldError{Field: "max_tokens", Message: fmt.Sprintf("must be a whole number of tokens from 1 to %d (or omitted for no cap)", MaxTokensLimit)}
	}
	return nil
}

// withCaps puts the request's caps on the plan: the CLI's own cost flag
// where it has one, the rest for the runner. A cost cap the adapter can
// neither pass on nor count is refused naming why, never dropped.
func withCaps(p *Plan, a Adapter, req Request) error {
	if req.MaxCostUSD == nil && req.MaxTokens == nil {
		return nil
	}
	c := &PlanCaps{Program: a.ID}
	if req.MaxTokens != nil {
		if a.Caps.NoTokens != "" {
			return errUnsupported("max_tokens", req.Adapter, a.Caps.NoTokens)
		}
		c.MaxTokens = *req.MaxTokens
	}
	if req.MaxCostUSD != nil {
		c.MaxCostUSD = *req.MaxCostUSD
		switch {
		case a.Caps.CostFlag != nil:
			a.Caps.CostFlag(p, c.MaxCostUSD)
			c.CostByCLI = true
		case a.Caps.CostReported:
		default:
			return errUnsupported("max_cost_usd", req.Adapter, a.Caps.NoCost)
		}
	}
	p.Caps = c
	return nil
}

// capGuard adds up a run's reported usage and says when it passes a cap.
// It is pure: the emitter feeds it the events and ends the run.
type capGuard struct {
	caps  PlanCaps
	usage api.Usage
	cost  float64
	// passed is set once a cap is passed, so the run ends only once.
	passed bool
}

func newCapGuard(c *PlanCaps) *capGuard {
	if c == nil {
		return nil
	}
	return &capGuard{caps: *c}
}

// observe reads one event and returns the failure that ends the run when
// the usage so far passes a cap, else nil.
func (g *capGuard) observe(ev *Event) *api.RunError {
	if g == nil || ev.Kind != api.EventUsage || ev.Usage == nil || g.passed {
		return nil
	}
	if ev.perCall {
		g.usage.InputTokens += ev.Usage.InputTokens
		g.usage.OutputTokens += ev.Usage.OutputTokens
		g.usage.CachedInputTokens += ev.Usage.CachedInputTokens
		g.cost += ev.costUSD
	} else {
		g.usage = *ev.Usage
		if ev.costUSD > 0 {
			g.cost = ev.costUSD
		}
	}
	if m := g.caps.MaxTokens; m > 0 && tokens(g.usage) > m {
		g.passed = true
		return failure(api.KindBudget, tokensPassed(m, g.usage))
	}
	if m := g.caps.MaxCostUSD; m > 0 && !g.caps.CostByCLI && g.cost > m {
		g.passed = true
		return failure(api.KindBudget, costPassed(m, g.cost, g.usage, g.caps.Program))
	}
	return nil
}

// tokens is what max_tokens counts: the input and output tokens the agent
// reported (cached input is part of input where the CLI counts it there).
func tokens(u api.Usage) int64 { return u.InputTokens + u.OutputTokens }

func tokensPassed(limit int64, u api.Usage) string {
	return fmt.Sprintf("max_tokens %d passed: the agent reported %s tokens (input %s, output %s)",
		limit, thousands(int(tokens(u))), thousands(int(u.InputTokens)), thousands(int(u.OutputTokens)))
}

func costPassed(limit, spent float64, u api.Usage, program string) string {
	return fmt.Sprintf("max_cost_usd %s passed: %s reported $%.4f spent (input %s, output %s tokens)",
		usd(limit), program, spent, thousands(int(u.InputTokens)), thousands(int(u.OutputTokens)))
}

// capMessage words a budget ending the CLI itself chose (its own spending
// flag), from the result it reported.
func (c *PlanCaps) capMessage(res api.Result) string {
	var spent float64
	if res.CostUSD != nil {
		spent = *res.CostUSD
	}
	msg := costPassed(c.MaxCostUSD, spent, res.Usage, c.Program)
	if res.Error != nil && res.Error.Message != "" {
		msg += "; " + c.Program + " said: " + res.Error.Message
	}
	return msg
}

func usd(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// reported is the usage added up so far (zero for no guard).
func (g *capGuard) reported() api.Usage {
	if g == nil {
		return api.Usage{}
	}
	return g.usage
}
