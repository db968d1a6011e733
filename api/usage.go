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
			return time.Time{}, invalidField(field, "%q is not a date like 2026-01-31", s)
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
		return from, end, invalidField("from", "%s is after to (%s)", from.Format(UsageDateLayout), to.Format(UsageDateLayout))
	}
	end = to.AddDate(0, 0, 1)
	if from.AddDate(0, 0, MaxUsageDays).Before(end) {
		return from, end, invalidField("from", "the range is longer than %d days; ask for it in parts", MaxUsageDays)
	}
	return from, end, nil
}

// UsageRow is one adapter's runs of one day (Date and Adapter empty in a
// total). Runs counts the runs that started; Refused those a gate refused,
// which never started. CostUSD is null when no run of the row reported a
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
}
