package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
)

var usageDoc = doc{
	name:  "usage",
	usage: "usage [--from DATE] [--to DATE] [--adapter ID] [--json] [--home DIR]",
	about: `Prints what the runs used, per agent per day: runs (one per prompt), model calls (the
agents' round trips to their model: a prompt that calls three tools makes about four; the wire's
"turns"), refused runs, input, output and cached tokens, and cost where the agent reports one
("-" where it does not), with the total;
then the latest rate-limit window each agent reported since the daemon started (Claude Code on a
claude.ai sign-in, Codex in ask mode), how much of it is used and when it resets; then each
budget of card.toml's [budget] with what is spent, left and when it resets. Days are
the daemon's local dates (YYYY-MM-DD, both ends included, each defaulting to today).`,
	examples: []string{
		"card usage                                  # today",
		"card usage --from 2026-11-01 --to 2026-11-30 --adapter codex",
		"card usage --json",
	},
}

func (e env) usage(args []string) int {
	fs, home := e.newFlags(usageDoc)
	from := fs.String("from", "", "the first day, YYYY-MM-DD (default: --to)")
	to := fs.String("to", "", "the last day, YYYY-MM-DD (default: today)")
	adapter := fs.String("adapter", "", "only this agent's runs and budgets")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	pos, code, done := e.parse(usageDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(usageDoc, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	var sum api.UsageSummary
	code = e.call("usage", *home, func(ctx context.Context, c *client.Client) (err error) {
		sum, err = c.UsageSummary(ctx, api.UsageParams{From: *from, To: *to, Adapter: *adapter})
		return err
	})
	if code != exitOK {
		return code
	}
	if *asJSON {
		return printJSON(e.stdout, sum)
	}
	writeUsage(e, sum)
	return exitOK
}

// writeUsage prints the summary as two tables: the days, then the budgets.
func writeUsage(e env, sum api.UsageSummary) {
	fmt.Fprintf(e.stdout, "Usage %s to %s (%s)\n", sum.From, sum.To, sum.Timezone)
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	// The wire calls them turns, as the CLIs do; next to RUNS that reads as
	// prompts, which runs are. They are the model's round trips.
	fmt.Fprintln(w, "DATE\tAGENT\tRUNS\tMODEL CALLS\tREFUSED\tINPUT\tOUTPUT\tCACHED\tCOST USD\t")
	row := func(date, adapter string, r api.UsageRow) {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", date, adapter, r.Runs, r.Turns, r.Refused,
			r.InputTokens, r.OutputTokens, r.CachedTokens, costText(r.CostUSD))
	}
	for _, r := range sum.Rows {
		row(r.Date, r.Adapter, r)
	}
	row("total", "", sum.Totals)
	_ = w.Flush()
	writeRateLimits(e, sum.RateLimits)
	if len(sum.Budgets) == 0 {
		fmt.Fprintln(e.stdout, "\nNo budgets set ([budget] in card.toml).")
		return
	}
	fmt.Fprintln(e.stdout)
	w = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "BUDGET\tSCOPE\tLIMIT\tSPENT\tIN FLIGHT\tLEFT\tRESETS")
	for _, b := range sum.Budgets {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Budget, b.Scope, num(b.Limit), num(b.Spent), num(b.InFlight), num(b.Left),
			b.ResetsAt.Local().Format(time.DateTime))
	}
	_ = w.Flush()
}

// writeRateLimits prints the agents' latest rate-limit windows, if any
// agent reported one since the daemon started.
func writeRateLimits(e env, rl []api.RateLimitSeen) {
	if len(rl) == 0 {
		return
	}
	fmt.Fprintln(e.stdout)
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RATE LIMIT\tAGENT\tSTATUS\tUSED\tRESETS\tSEEN")
	for _, r := range rl {
		used, resets, status := "-", "-", r.Status
		if r.UsedPercent != nil {
			used = strconv.FormatFloat(*r.UsedPercent, 'f', -1, 64) + "%"
		}
		if r.ResetsAt != nil {
			resets = r.ResetsAt.Local().Format(time.DateTime)
		}
		if status == "" {
			status = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Window, r.Adapter, status, used, resets, r.SeenAt.Local().Format(time.DateTime))
	}
	_ = w.Flush()
}

func costText(c *float64) string {
	if c == nil {
		return "-"
	}
	return strconv.FormatFloat(*c, 'f', 6, 64)
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
