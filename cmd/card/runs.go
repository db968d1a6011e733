package main

import (
	"context"
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

runs lists the run history, newest first. show prints one run as JSON. follow replays a
run's events and follows it live to its end (exit code as for card invoke).
`

func (e env) runs(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "show":
			return e.runsShow(args[1:])
		case "follow":
			return e.runsFollow(args[1:])
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
