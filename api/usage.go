package api

import "time"

// UsageDateLayout is how usage.summary names a day: the daemon's local
// calendar date.
const UsageDateLayout = "2006-01-02"

// MaxUsageDays bounds a usage.summary range, so one request cannot make the
// daemon walk years of history day by day.
const MaxUsageDays = 366

// UsageParams are usage.summary's params. From and To are local dates
// (YYYY-MM-DD), both included; each defaults to today, and From to To when
// only To is given.
type UsageParams struct {
	From    string `json:"from,omitempty"`
	To      string `json:"to,omitempty"`
	Adapter string `json:"adapter,omitempty"`
}

// Validate checks the dates' form and order and the range's length; the
// daemon checks the adapter id.
func (p *UsageParams) Validate() error {
	_, _, err := p.Range(time.Now())
	return err
}

// Range is the params' days as local midnights: from, and the day after
// to. now fills in today.
func (p *UsageParams) Range(now time.Time) (from, end time.Time, err error) {
	day := func(field, s string) (time.Time, error) {
		t, err := time.ParseInLocation(UsageDateLayout, s, now.Location())
		if err != nil {
			return time.Time{}, InvalidField(field, "%q is not a date like 2026-01-31", s)
		}
		return t, nil
	}
	y, m, d := now.Date()
	to := time.Date(y, m, d, 0, 0, 0, 0, now.Location())
	if p.To != "" {
		if to, err = day("to", p.To); err != nil {
			return from, end, err
		}
	}
	from = to
	if p.From != "" {
		if from, err = day("from", p.From); err != nil {
			return from, end, err
		}
	}
	if from.After(to) {
		return from, end, InvalidField("from", "%s is after to (%s)", from.Format(UsageDateLayout), to.Format(UsageDateLayout))
	}
	end = to.AddDate(0, 0, 1)
	if from.AddDate(0, 0, MaxUsageDays).Before(end) {
		return from, end, InvalidField("from", "the range is longer than %d days; ask for it in parts", MaxUsageDays)
	}
	return from, end, nil
}

// UsageRow is one adapter's runs of one day (Date and Adapter empty in a
// total). Runs counts the runs that started (one per prompt); Turns the
// model's round trips over them, as the agents count their turns, which is
// not a count of prompts; Refused the runs a gate refused, which never
// started. CostUSD is null when no run of the row reported a
// cost (some CLIs never do).
type UsageRow struct {
	Date         string   `json:"date,omitempty"`
	Adapter      string   `json:"adapter,omitempty"`
	Runs         int64    `json:"runs"`
	Turns        int64    `json:"turns"`
	Refused      int64    `json:"refused"`
	InputTokens  int64    `json:"input_tokens"`
	OutputTokens int64    `json:"output_tokens"`
	CachedTokens int64    `json:"cached_tokens"`
	CostUSD      *float64 `json:"cost_usd"`
}

// BudgetStatus is one configured budget as it stands now: the budget's
// card.toml key (daily_usd, monthly_usd, daily_tokens), its scope (an
// adapter id, or "all"), its period (day or month), what was spent in the
// period so far, what the runs in flight reserve, what is left, and when
// the period ends.
type BudgetStatus struct {
	Budget   string    `json:"budget"`
	Scope    string    `json:"scope"`
	Period   string    `json:"period"`
	Limit    float64   `json:"limit"`
	Spent    float64   `json:"spent"`
	InFlight float64   `json:"in_flight"`
	Left     float64   `json:"left"`
	ResetsAt time.Time `json:"resets_at"`
}

// UsageSummary is usage.summary's answer: a row per adapter per day with
// runs (days without runs left out), the range's total, and every
// configured budget. Timezone names the zone the days are counted in.
type UsageSummary struct {
	From     string         `json:"from"`
	To       string         `json:"to"`
	Timezone string         `json:"timezone"`
	Rows     []UsageRow     `json:"rows"`
	Totals   UsageRow       `json:"totals"`
	Budgets  []BudgetStatus `json:"budgets"`
	// RateLimits is the latest report of each adapter's rate-limit windows
	// (one entry per adapter and window), whatever the range: a window is
	// the account's state now, not a sum over days. Empty until a run of
	// an agent that reports them has done so since the daemon started.
	RateLimits []RateLimitSeen `json:"rate_limits"`
}

// RateLimitWindow is one window of a subscription's rate limit as an
// agent CLI reported it: Claude Code's rate_limit_event (on a claude.ai
// sign-in), Codex's account/rateLimits/updated (its app-server).
type RateLimitWindow struct {
	// Window is the CLI's own name for it: Claude Code's rateLimitType
	// (five_hour, seven_day, seven_day_opus, seven_day_sonnet, overage),
	// Codex's primary or secondary.
	Window string `json:"window"`
	// Status is Claude Code's verdict on the window: allowed,
	// allowed_warning (near its limit) or rejected (over it). Codex says
	// none.
	Status string `json:"status,omitempty" jsonschema_extras:"x-enum=allowed,x-enum=allowed_warning,x-enum=rejected"`
	// UsedPercent is how much of the window is used, 0 to 100, where the
	// CLI said (Claude Code says only once a window nears its limit).
	UsedPercent *float64 `json:"used_percent,omitempty"`
	// WindowMinutes is the window's length, where known.
	WindowMinutes int `json:"window_minutes,omitempty"`
	// ResetsAt is when the window starts again, where the CLI said.
	ResetsAt *time.Time `json:"resets_at,omitempty"`
}

// RateLimitSeen is a window as the daemon last saw it reported: by which
// adapter, in which run, and when.
type RateLimitSeen struct {
	Adapter string `json:"adapter"`
	RateLimitWindow
	RunID  string    `json:"run_id"`
	SeenAt time.Time `json:"seen_at"`
}
