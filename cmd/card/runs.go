package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/store"
)

const runsUsage = `usage: card runs [--limit N] [--json] [--home DIR]
       card runs show RUN_ID [--home DIR]
       card runs follow RUN_ID [--home DIR]
       card runs prune [--dry-run] [--max-runs N] [--max-age-days D] [--json] [--home DIR]

runs lists the run history, newest first. show prints one run as JSON. follow replays a
run's events and follows it live to its end (exit code as for card invoke). prune deletes
finished runs past the retention (card.toml's max_runs and max_age_days, or the flags'; 0 is
no bound) with their events; --dry-run only counts them. A running run is never pruned.
`

func (e env) runs(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "show":
			return e.runsShow(args[1:])
		case "follow":
			return e.runsFollow(args[1:])
		case "prune":
			return e.runsPrune(args[1:])
		case "help", "-h", "--help":
			fmt.Fprint(e.stdout, runsUsage)
			return exitOK
		}
	}
	fs, home := e.flags("runs")
	fs.Usage = func() { fmt.Fprint(e.stderr, runsUsage) }
	limit := fs.Int("limit", 20, "how many runs to list (at most 500)")
	asJSON := fs.Bool("json", false, "print the runs as JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprint(e.stderr, runsUsage)
		return exitUsage
	}
	var runs []store.Run
	code := e.call("runs", *home, func(ctx context.Context, c *client.Client) (err error) {
		runs, err = c.Runs(ctx, daemon.ListParams{Limit: *limit})
		return err
	})
	if code != exitOK {
		return code
	}
	if *asJSON {
		return printJSON(e.stdout, runs)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RUN\tSTATUS\tAGENT\tSTARTED\tTOOK\tCHAIN\tTASK")
	for _, r := range runs {
		took := "-"
		if r.DurationMs != nil {
			took = (time.Duration(*r.DurationMs) * time.Millisecond).Round(100 * time.Millisecond).String()
		}
		task := clipText(r.Task, 40)
		if task == "" {
			task = fmt.Sprintf("(%d bytes, not recorded)", r.TaskLen)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.RunID, r.Status, r.Adapter,
			r.CreatedAt.Local().Format("2006-01-02 15:04:05"), took, strings.Join(append(append([]string{}, r.Ancestry...), r.Adapter), "→"), task)
	}
	_ = w.Flush()
	return exitOK
}

func (e env) oneRunID(name string, args []string) (string, *string, bool) {
	fs, home := e.flags("runs " + name)
	fs.Usage = func() { fmt.Fprint(e.stderr, runsUsage) }
	pos, err := permute(fs, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprint(e.stderr, runsUsage)
		return "", nil, false
	}
	return pos[0], home, true
}

func (e env) runsShow(args []string) int {
	id, home, ok := e.oneRunID("show", args)
	if !ok {
		return exitUsage
	}
	return e.call("runs show", *home, func(ctx context.Context, c *client.Client) error {
		run, err := c.Run(ctx, id)
		if err != nil {
			return err
		}
		return writeJSON(e.stdout, run)
	})
}

func (e env) runsFollow(args []string) int {
	id, home, ok := e.oneRunID("follow", args)
	if !ok {
		return exitUsage
	}
	f := newFollower(e, false, id)
	c, err := dial(*home)
	if err != nil {
		return e.fail("runs follow", err)
	}
	defer c.Close()
	if _, err := c.Subscribe(context.Background(), id, 0, f.push); err != nil {
		return e.fail("runs follow", err)
	}
	return f.follow(c, id, false)
}

func (e env) runsPrune(args []string) int {
	fs, home := e.flags("runs prune")
	fs.Usage = func() { fmt.Fprint(e.stderr, runsUsage) }
	dry := fs.Bool("dry-run", false, "count what would be deleted, delete nothing")
	maxRuns := fs.Int("max-runs", 0, "keep the newest N runs (instead of card.toml's max_runs; 0: no bound)")
	maxAge := fs.Int("max-age-days", 0, "keep runs younger than D days (instead of card.toml's max_age_days; 0: no bound)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprint(e.stderr, runsUsage)
		return exitUsage
	}
	p := daemon.PruneParams{DryRun: *dry}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "max-runs":
			p.MaxRuns = maxRuns
		case "max-age-days":
			p.MaxAgeDays = maxAge
		}
	})
	c, err := dial(*home)
	if err != nil {
		return e.fail("runs prune", err)
	}
	defer c.Close()
	// A first prune of a long history deletes in many transactions.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := c.Prune(ctx, p)
	if err != nil {
		return e.fail("runs prune", err)
	}
	if *asJSON {
		return printJSON(e.stdout, res)
	}
	verb := "pruned"
	if res.DryRun {
		verb = "would prune"
	}
	fmt.Fprintf(e.stdout, "%s %d runs (%d events); %d kept (max_runs %s, max_age_days %s)\n", verb, res.Runs, res.Events, res.Kept,
		bound(res.MaxRuns), bound(res.MaxAgeDays))
	return exitOK
}

func bound(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}
