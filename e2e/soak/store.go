package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/internal/proc"
)

// storeWriterArg re-executes the soak binary as a process that does nothing
// but write runs as fast as it can, so it can be SIGKILLed mid-transaction.
const storeWriterArg = "__card_soak_store_writer"

// storeWriter opens the store and writes runs (create, 20 events, finish)
// from four goroutines until killed, printing "done <run_id>" after each
// run's Finish returned: the parent checks every printed run survived.
func storeWriter(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: soak "+storeWriterArg+" DB")
		return 2
	}
	ctx := context.Background()
	s, err := store.Open(ctx, args[0], store.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	payload, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 1024)})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				id := s.NewRunID()
				if err := s.Create(ctx, api.Run{RunID: id, Adapter: "claude", Task: "soak"}); err != nil {
					fmt.Fprintln(os.Stderr, "create:", err)
					return
				}
				for seq := int64(1); seq <= 20; seq++ {
					if err := s.AppendEvent(ctx, id, seq, "text", payload); err != nil {
						fmt.Fprintln(os.Stderr, "event:", err)
						return
					}
				}
				code := 0
				if err := s.Finish(ctx, id, store.Finish{Status: api.StatusSucceeded, ExitCode: &code, Answer: "ok"}); err != nil {
					fmt.Fprintln(os.Stderr, "finish:", err)
					return
				}
				mu.Lock()
				fmt.Println("done " + id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return 1
}

func phaseStore(ctx context.Context, h *harness) *result {
	r := &result{}
	self, err := os.Executable()
	if err != nil {
		r.fail("find own binary", err)
		return r
	}
	db := filepath.Join(h.tmp, "store-soak", "runs.db")
	const rounds = 10
	var confirmed []string
	integrityFails, missing, unfinished := 0, 0, 0
	for round := 1; round <= rounds && ctx.Err() == nil; round++ {
		cmd := exec.Command(self, storeWriterArg, db)
		cmd.Dir = h.tmp
		cmd.SysProcAttr = proc.NewGroup()
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			r.fail("writer pipe", err)
			return r
		}
		if err := cmd.Start(); err != nil {
			r.fail("start writer", err)
			return r
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill at a random moment after the writer is busy.
		killAt := time.After(time.Duration(300+rand.IntN(700)) * time.Millisecond)
		var got []string
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				if id, ok := strings.CutPrefix(l, "done "); ok {
					got = append(got, id)
				}
			case <-killAt:
				proc.EndGroup(ctx, cmd.Process.Pid, 0, nil) // SIGKILL, no grace: a crash
				killAt = nil
			}
		}
		_ = cmd.Wait()
		confirmed = append(confirmed, got...)

		s, err := store.Open(ctx, db, store.Options{})
		if err != nil {
			r.fail(fmt.Sprintf("round %d: reopen", round), err)
			return r
		}
		if err := s.IntegrityCheck(ctx); err != nil {
			integrityFails++
			r.info(fmt.Sprintf("round %d integrity", round), err.Error())
		}
		for _, id := range confirmed {
			run, err := s.Get(ctx, id)
			switch {
			case err != nil:
				missing++
			case run.Status != api.StatusSucceeded:
				unfinished++
			}
		}
		_ = s.Close()
	}
	r.add("kill -9 during heavy writes, then reopen", fmt.Sprintf("%d rounds, %d runs confirmed written before the kills", rounds, len(confirmed)), "", true)
	r.add("PRAGMA integrity_check failures", fmt.Sprint(integrityFails), "0", integrityFails == 0)
	r.add("confirmed runs missing or changed after reopen (checked every round)", fmt.Sprintf("%d missing, %d not succeeded", missing, unfinished), "0", missing == 0 && unfinished == 0 && len(confirmed) > 0)
	storeBounds(ctx, h, r)
	subscribeFlood(ctx, h, r, 3000)
	return r
}
