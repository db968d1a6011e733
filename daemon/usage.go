package daemon

import (
	"context"
	"strings"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// registerUsage registers usage.summary.
func (d *Daemon) registerUsage() {
	rpc.Register(d.registry, "usage.summary", rpc.Doc{
		Access:  rpc.AccessRead,
		Summary: "What the runs used: per adapter per day, runs, turns, refused runs, input/output/cached tokens and cost, with totals and every budget's spent and left.",
		Description: "from and to are dates (YYYY-MM-DD, both included, each defaulting to today) in the daemon's local time zone, " +
			"named in timezone; at most 366 days. A run counts on the day it was asked for. cost_usd is null where no run reported a cost. " +
			"budgets lists each configured budget ([budget] in card.toml) as of now, with what runs in flight reserve. " +
			"rate_limits is the latest report of each agent's subscription rate-limit windows since the daemon started, whatever the range.",
	}, d.usageSummary)
}

// usageSummary sums the history day by day over the asked range.
func (d *Daemon) usageSummary(ctx context.Context, p api.UsageParams) (api.UsageSummary, error) {
	if p.Adapter != "" {
		if _, ok := spawn.Lookup(p.Adapter); !ok {
			return api.UsageSummary{}, api.InvalidField("adapter", "unknown agent %q: known agents are %s", p.Adapter, strings.Join(spawn.IDs(), ", "))
		}
	}
	loc := d.runs.BudgetLocation()
	now := nowIn(loc)
	from, end, err := p.Range(now)
	if err != nil {
		return api.UsageSummary{}, err
	}
	out := api.UsageSummary{From: from.Format(api.UsageDateLayout), To: end.AddDate(0, 0, -1).Format(api.UsageDateLayout),
		Timezone: zoneName(now), Rows: []api.UsageRow{}}
	for day := from; day.Before(end); day = day.AddDate(0, 0, 1) {
		rows, err := d.runs.Usage(ctx, day, day.AddDate(0, 0, 1), p.Adapter)
		if err != nil {
			return api.UsageSummary{}, err
		}
		for _, r := range rows {
			r.Date = day.Format(api.UsageDateLayout)
			out.Rows = append(out.Rows, r)
			addUsage(&out.Totals, r)
		}
	}
	if out.Budgets, err = d.runs.BudgetStatus(ctx, p.Adapter); err != nil {
		return api.UsageSummary{}, err
	}
	out.RateLimits = d.runs.RateLimits(p.Adapter)
	return out, nil
}

// addUsage adds r into t; t's cost stays null until a row has one.
func addUsage(t *api.UsageRow, r api.UsageRow) {
	t.Runs += r.Runs
	t.Turns += r.Turns
	t.Refused += r.Refused
	t.InputTokens += r.InputTokens
	t.OutputTokens += r.OutputTokens
	t.CachedTokens += r.CachedTokens
	if r.CostUSD != nil {
		c := *r.CostUSD
		if t.CostUSD != nil {
			c += *t.CostUSD
		}
		t.CostUSD = &c
	}
}

func nowIn(loc *time.Location) time.Time { return time.Now().In(loc) }

// zoneName names now's zone by its abbreviation and offset ("CET+01:00"):
// the daemon's local zone has no other name Go can tell, and the offset is
// what a client needs to read the dates.
func zoneName(now time.Time) string { return now.Format("MST-07:00") }
