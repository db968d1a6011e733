package runs

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

// Limits are one scope's budgets from card.toml; zero is no budget of that
// kind.
type Limits struct {
	DailyUSD    float64
	MonthlyUSD  float64
	DailyTokens float64
}

func (l Limits) any() bool { return l.DailyUSD > 0 || l.MonthlyUSD > 0 || l.DailyTokens > 0 }

// Budgets are card.toml's [budget]: overall, and per adapter. Days and
// months are the calendar of Loc (the daemon's local zone when nil), so a
// person's "today" is the one their budget resets on.
type Budgets struct {
	All      Limits
	Adapters map[string]Limits
	Loc      *time.Location
}

// The reservation of a run in flight, whose cost is unknown until it ends:
// the mean of its adapter's last reserveWindow finished runs, and never
// less than the floors, so a first run on an empty history still holds
// something back and concurrent starts cannot all pass on a budget one of
// them would spend.
const (
	reserveWindow    = 20
	reserveFloorUSD  = 0.01
	reserveFloorToks = 1000
)

// reservation is what one run in flight holds back from its adapter's and
// the overall budgets.
type reservation struct {
	adapter string
	usd     float64
	tokens  float64
}

// budgetKind is one budget key: what it counts and over which period.
type budgetKind struct {
	key    string
	period string // "day" or "month"
	tokens bool
	limit  func(Limits) float64
}

var budgetKinds = []budgetKind{
	{"daily_usd", "day", false, func(l Limits) float64 { return l.DailyUSD }},
	{"monthly_usd", "month", false, func(l Limits) float64 { return l.MonthlyUSD }},
	{"daily_tokens", "day", true, func(l Limits) float64 { return l.DailyTokens }},
}

// period is [start, end) of the day or month holding now.
func period(now time.Time, p string) (time.Time, time.Time) {
	y, m, d := now.Date()
	if p == "month" {
		start := time.Date(y, m, 1, 0, 0, 0, 0, now.Location())
		return start, start.AddDate(0, 1, 0)
	}
	start := time.Date(y, m, d, 0, 0, 0, 0, now.Location())
	return start, start.AddDate(0, 0, 1)
}

// BudgetExceededError refuses a run that would start with a budget reached:
// what was spent in the period plus what the runs in flight reserve is at
// or over the limit.
type BudgetExceededError struct {
	Budget       string // daily_usd, monthly_usd, daily_tokens
	Scope        string // an adapter id, or "all"
	Period       string // day or month
	Limit        float64
	Spent        float64
	InFlight     float64
	InFlightRuns int
	ResetsAt     time.Time
}

// ConfigKey is where card.toml sets the budget.
func (e *BudgetExceededError) ConfigKey() string { return budgetKey(e.Scope, e.Budget) }

func budgetKey(scope, budget string) string {
	if scope == "all" {
		return "[budget] " + budget
	}
	return fmt.Sprintf("[budget.adapters.%s] %s", scope, budget)
}

func (e *BudgetExceededError) Error() string {
	return fmt.Sprintf("the %s budget is reached (%s = %g): %g spent %s and %g reserved by %d run(s) in flight; "+
		"the run was refused; the budget resets at %s, or raise it in card.toml",
		scopeName(e.Scope), e.ConfigKey(), e.Limit, round6(e.Spent), map[string]string{"day": "today", "month": "this month"}[e.Period], round6(e.InFlight), e.InFlightRuns, e.ResetsAt.Format(time.RFC3339))
}

func scopeName(scope string) string {
	if scope == "all" {
		return "overall"
	}
	return scope + "'s"
}

func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// scopedLimits are one scope's limits: an adapter id's, or "all".
type scopedLimits struct {
	scope string
	lim   Limits
}

// scopes are the scopes that bound a run of adapter: the adapter's own,
// then the overall one.
func (b Budgets) scopes(adapter string) []scopedLimits {
	var out []scopedLimits
	if l, ok := b.Adapters[adapter]; ok && l.any() {
		out = append(out, scopedLimits{adapter, l})
	}
	if b.All.any() {
		out = append(out, scopedLimits{"all", b.All})
	}
	return out
}

// active says whether any budget bounds a run of adapter.
func (b Budgets) active(adapter string) bool { return len(b.scopes(adapter)) > 0 }

func (b Budgets) now() time.Time {
	if b.Loc != nil {
		return time.Now().In(b.Loc)
	}
	return time.Now()
}

// spentIn is what the history holds against one budget: the cost or the
// tokens of the scope's runs in the period.
func (m *Manager) spentIn(ctx context.Context, scope string, k budgetKind, now time.Time) (float64, time.Time, error) {
	start, end := period(now, k.period)
	adapter := scope
	if scope == "all" {
		adapter = ""
	}
	rows, err := m.store.Usage(ctx, start, end, adapter)
	if err != nil {
		return 0, end, err
	}
	var spent float64
	for _, r := range rows {
		if k.tokens {
			spent += float64(r.InputTokens + r.OutputTokens)
		} else if r.CostUSD != nil {
			spent += *r.CostUSD
		}
	}
	return spent, end, nil
}

// inFlight is what the runs in flight reserve against one budget, and how
// many they are. Call with budgetMu held.
func (m *Manager) inFlight(scope string, k budgetKind) (float64, int) {
	var sum float64
	n := 0
	for _, r := range m.reserved {
		if scope != "all" && r.adapter != scope {
			continue
		}
		n++
		if k.tokens {
			sum += r.tokens
		} else {
			sum += r.usd
		}
	}
	return sum, n
}

// checkBudgets is the budget gate for a run of adapter: the first budget
// whose spent plus in-flight reservations reaches its limit, and the
// reservation the run holds if it starts. Call with budgetMu held: that,
// and a run's reservation let go only after its outcome (its cost) is in
// the store, is what keeps concurrent starts from all passing on the same
// headroom: every figure is either in the history or reserved, never in
// neither. A run whose request caps its cost or tokens reserves the
// smaller of its cap and the estimate: a cap may lower what a run holds
// back, never raise it. Reserving the cap itself let one request with
// max_cost_usd 10000 hold a whole day's budget for as long as the run
// lasted (up to an hour), refusing every other run while it may have spent
// cents; an uncapped run, which may spend more, holds back only the
// estimate.
func (m *Manager) checkBudgets(ctx context.Context, adapter string, caps *spawn.PlanCaps) (reservation, error) {
	res := reservation{adapter: adapter}
	usd, toks, err := m.store.RecentAverage(ctx, adapter, reserveWindow)
	if err != nil {
		return res, err
	}
	res.usd, res.tokens = max(usd, reserveFloorUSD), max(toks, reserveFloorToks)
	if caps != nil && caps.MaxCostUSD > 0 {
		res.usd = min(res.usd, caps.MaxCostUSD)
	}
	if caps != nil && caps.MaxTokens > 0 {
		res.tokens = min(res.tokens, float64(caps.MaxTokens))
	}
	now := m.cfg.Budgets.now()
	for _, s := range m.cfg.Budgets.scopes(adapter) {
		for _, k := range budgetKinds {
			limit := k.limit(s.lim)
			if limit <= 0 {
				continue
			}
			spent, resets, err := m.spentIn(ctx, s.scope, k, now)
			if err != nil {
				return res, err
			}
			held, n := m.inFlight(s.scope, k)
			if spent+held >= limit {
				return res, &BudgetExceededError{Budget: k.key, Scope: s.scope, Period: k.period, Limit: limit,
					Spent: spent, InFlight: held, InFlightRuns: n, ResetsAt: resets}
			}
		}
	}
	return res, nil
}

// BudgetStatus is every configured budget as it stands now (only those
// bounding adapter's runs when adapter is not empty): spent, reserved by
// runs in flight, left, and when it resets.
func (m *Manager) BudgetStatus(ctx context.Context, adapter string) ([]api.BudgetStatus, error) {
	m.budgetMu.Lock()
	defer m.budgetMu.Unlock()
	now := m.cfg.Budgets.now()
	var scopes []scopedLimits
	for id, l := range m.cfg.Budgets.Adapters {
		if adapter == "" || id == adapter {
			scopes = append(scopes, scopedLimits{id, l})
		}
	}
	sortScopes(scopes, func(s scopedLimits) string { return s.scope })
	scopes = append(scopes, scopedLimits{"all", m.cfg.Budgets.All})
	out := []api.BudgetStatus{}
	for _, s := range scopes {
		for _, k := range budgetKinds {
			limit := k.limit(s.lim)
			if limit <= 0 {
				continue
			}
			spent, resets, err := m.spentIn(ctx, s.scope, k, now)
			if err != nil {
				return nil, err
			}
			held, _ := m.inFlight(s.scope, k)
			out = append(out, api.BudgetStatus{Budget: k.key, Scope: s.scope, Period: k.period, Limit: limit,
				Spent: round6(spent), InFlight: round6(held), Left: round6(max(0, limit-spent-held)), ResetsAt: resets})
		}
	}
	return out, nil
}

// Usage is the history's sums per adapter over [from, to).
func (m *Manager) Usage(ctx context.Context, from, to time.Time, adapter string) ([]api.UsageRow, error) {
	return m.store.Usage(ctx, from, to, adapter)
}

// BudgetLocation is the zone the budgets' days and months are counted in.
func (m *Manager) BudgetLocation() *time.Location {
	if m.cfg.Budgets.Loc != nil {
		return m.cfg.Budgets.Loc
	}
	return time.Local
}

func sortScopes[T any](s []T, key func(T) string) {
	slices.SortFunc(s, func(a, b T) int { return strings.Compare(key(a), key(b)) })
}
