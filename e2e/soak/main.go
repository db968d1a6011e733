// Command soak runs card's soak and fault phases against a live daemon and
// prints one table per phase:
//
//	go run ./e2e/soak -phases load,churn,hostile,agents,crash,store,sessions
//	go run ./e2e/soak -phases startup,burst,restart   # the performance figures
//	go run ./e2e/soak -phases sessions -session-rounds 16 -seed N
//
// It builds ./cmd/card into a temp dir, starts `card serve --home <tmp>` on a
// loopback port, and drives it over real WebSockets. Every loop is bounded,
// every socket is loopback, and the daemon it started is stopped (its whole
// process group) when it returns. It is a separate main, not a test, so the
// default `go test ./...` stays fast; the figures it prints are what
// docs/reliability.md and docs/performance.md record.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

type options struct {
	phases    []string
	bin       string
	conns     int
	reqs      int
	churn     int
	pipelined int
	invokes   int
	keep      bool
	// sessions phase
	sessionRounds int
	sessions      int
	seed          uint64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == storeWriterArg {
		os.Exit(storeWriter(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == fakeAgentArg {
		os.Exit(fakeAgent(os.Args[2:]))
	}
	var o options
	phases := flag.String("phases", "load,churn,hostile,agents,crash,store,sessions", "comma-separated phases to run, in order")
	flag.StringVar(&o.bin, "bin", "", "a built card binary to use instead of building ./cmd/card")
	flag.IntVar(&o.conns, "conns", 200, "load: concurrent connections")
	flag.IntVar(&o.reqs, "reqs", 1000, "load: requests per connection")
	flag.IntVar(&o.churn, "churn", 10000, "churn: connect/disconnect cycles")
	flag.IntVar(&o.pipelined, "pipelined", 10000, "hostile: requests pipelined on one socket")
	flag.IntVar(&o.invokes, "invokes", 50, "agents: invokes of fake agents")
	flag.IntVar(&o.sessionRounds, "session-rounds", 8, "sessions: daemons stopped or killed under the sessions (each about 8-14 s of traffic)")
	flag.IntVar(&o.sessions, "sessions", 6, "sessions: sessions at once, two connections each")
	flag.Uint64Var(&o.seed, "seed", 0, "sessions: the random plan's seed (0: from the clock; the phase prints it)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (daemon logs, homes) for inspection")
	flag.Parse()
	for _, p := range strings.Split(*phases, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.phases = append(o.phases, p)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A hard ceiling: the soak stops by itself even if a phase wedges.
	ctx, cancel := context.WithTimeout(ctx, 45*time.Minute)
	defer cancel()
	os.Exit(run(ctx, o))
}

func run(ctx context.Context, o options) int {
	tmp, err := os.MkdirTemp("", "card-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	if o.keep {
		fmt.Printf("temp dir kept: %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	bin := o.bin
	if bin == "" {
		bin = filepath.Join(tmp, "card")
		start := time.Now()
		if err := buildCard(ctx, bin); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			return 1
		}
		fmt.Printf("built card in %s\n", time.Since(start).Round(time.Millisecond))
	} else if err := syncFile(bin); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	printMachine()

	h := &harness{bin: bin, tmp: tmp, opts: o}
	failed := 0
	for _, p := range o.phases {
		f, ok := phaseFuncs[p]
		if !ok {
			fmt.Fprintf(os.Stderr, "soak: unknown phase %q (known: load, churn, hostile, agents, crash, store, startup, burst, restart, sessions)\n", p)
			return 2
		}
		fmt.Printf("\n== phase %s ==\n", p)
		start := time.Now()
		res := f(ctx, h)
		res.print(os.Stdout)
		fmt.Printf("phase %s: %s in %s\n", p, res.verdict(), time.Since(start).Round(time.Millisecond))
		if res.failed() {
			failed++
		}
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "soak: stopped:", ctx.Err())
			return 1
		}
	}
	if failed > 0 {
		fmt.Printf("\n%d phase(s) missed a goal\n", failed)
		return 1
	}
	return 0
}

var phaseFuncs = map[string]func(context.Context, *harness) *result{
	"load":     phaseLoad,
	"churn":    phaseChurn,
	"hostile":  phaseHostile,
	"agents":   phaseAgents,
	"crash":    phaseCrash,
	"store":    phaseStore,
	"startup":  phaseStartup,
	"burst":    phaseBurst,
	"restart":  phaseRestart,
	"sessions": phaseSessions,
}

func printMachine() {
	host, _ := os.Hostname()
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	}
	fmt.Printf("machine: %s %s/%s, %d CPUs (nproc), %s, %s\n", host, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), mem, runtime.Version())
}
