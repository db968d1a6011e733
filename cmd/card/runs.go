package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
)

var runsDoc = doc{
	name:  "runs",
	usage: "runs [--limit N] [--json] [--home DIR]",
	about: "Lists the run history, newest first: each run's id, status, agent, start, duration,\ninvocation chain and task.",
	more: `Subcommands:
  show RUN_ID     one run as JSON, with its answer, error and usage
  follow RUN_ID   replay a run's events and follow it live to its end
  prune           delete finished runs past the retention`,
	examples: []string{
		"card runs",
		"card runs --limit 100 --json",
		"card runs show run_06H2Z15BV3X8J0Y0ZEA1S76AKR",
		"card runs follow run_06H2Z15BV3X8J0Y0ZEA1S76AKR",
		"card help runs prune",
	},
}

var runsShowDoc = doc{
	name:     "runs show",
	usage:    "runs show RUN_ID [--home DIR]",
	about:    "Prints one recorded run as JSON: status, timing, exit code, answer, error (with the\nagent's stderr excerpt), usage and cost.",
	examples: []string{"card runs show run_06H2Z15BV3X8J0Y0ZEA1S76AKR"},
}

var runsFollowDoc = doc{
	name:  "runs follow",
	usage: "runs follow RUN_ID [--home DIR]",
	about: "Replays a run's events from its start and follows it live to its end, as card invoke\nshows them. Ctrl-C stops following; the run goes on.",
	more:  "Exit codes: as for card invoke, by how the run ended.",
	examples: []string{
		"card runs follow run_06H2Z15BV3X8J0Y0ZEA1S76AKR",
	},
}

var runsPruneDoc = doc{
	name:  "runs prune",
	usage: "runs prune [--dry-run] [--max-runs N] [--max-age-days D] [--json] [--home DIR]",
	about: `Deletes finished runs past the retention, with their events: card.toml's max_runs and
max_age_days, or the flags' (0 is no bound). A running run is never pruned.`,
	examples: []string{
		"card runs prune --dry-run  # count what would go",
		"card runs prune --max-runs 1000",
	},
}

func (e env) runs(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "show":
			return e.runsShow(args[1:])
		case "follow":
			return e.runsFollow(args[1:])
		case "prune":
			return e.runsPrune(args[1:])
		case "help":
			args = []string{"--help"}
		}
	}
	fs, home := e.newFlags(runsDoc)
	limit := fs.Int("limit", 20, "how many runs to list, at most 500")
	asJSON := fs.Bool("json", false, "print the runs as JSON")
	pos, code, done := e.parse(runsDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(runsDoc, fmt.Sprintf("unknown subcommand %q (show, follow or prune)", pos[0]))
	}
	var runs []api.Run
	code = e.call("runs", *home, func(ctx context.Context, c *client.Client) (err error) {
		runs, err = c.Runs(ctx, api.ListParams{Limit: *limit})
		return err
	})
	if code != exitOK {
		return code
	}
	if *asJSON {
		return printJSON(e.stdout, runs)
	}
	if len(runs) == 0 {
		fmt.Fprintln(e.stdout, "No runs recorded yet; `card invoke ID TASK` starts one.")
		return exitOK
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

// oneRunID parses the args of a command that takes one run id; done is
// true with the exit code when the command is over (help, bad usage).
func (e env) oneRunID(d doc, args []string) (id string, home *string, code int, done bool) {
	fs, home := e.newFlags(d)
	pos, code, done := e.parse(d, fs, args)
	if done {
		return "", nil, code, done
	}
	if len(pos) != 1 {
		return "", nil, e.usageError(d, "one RUN_ID (card runs lists them)"), true
	}
	return pos[0], home, exitOK, false
}

func (e env) runsShow(args []string) int {
	id, home, code, done := e.oneRunID(runsShowDoc, args)
	if done {
		return code
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
	id, home, code, done := e.oneRunID(runsFollowDoc, args)
	if done {
		return code
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
	fs, home := e.newFlags(runsPruneDoc)
	dry := fs.Bool("dry-run", false, "count what would be deleted, delete nothing")
	maxRuns := fs.Int("max-runs", 0, "keep the newest `n` runs (instead of card.toml's max_runs; 0: no bound)")
	maxAge := fs.Int("max-age-days", 0, "keep runs younger than `days` (instead of card.toml's max_age_days; 0: no bound)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, code, done := e.parse(runsPruneDoc, fs, args)
	if done {
		return code
	}
	if len(pos) > 0 {
		return e.usageError(runsPruneDoc, fmt.Sprintf("unexpected argument %q", pos[0]))
	}
	p := api.PruneParams{DryRun: *dry}
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
