package store

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

func openTest(t *testing.T, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "home", "runs.db")
	s, err := Open(context.Background(), path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func ptr[T any](v T) *T { return &v }

func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	var v int
	require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&v))
	return v
}

func TestMigrationsAreIdempotentAcrossReopen(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	require.NoError(t, s.Close())

	for range 3 {
		s, err := Open(ctx, path, Options{})
		require.NoError(t, err)
		got, err := s.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "codex", got.Adapter)
		require.NoError(t, s.Close())
	}
	assert.Equal(t, SchemaVersion(), userVersion(t, path))
}

// A history written before runs recorded their attachments opens, gains
// the column, and its runs read back with none.
func TestAHistoryFromBeforeAttachmentsIsMigratedAndKeepsItsRuns(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "runs.db")
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	for _, stmt := range migrations[0] {
		_, err := db.Exec(stmt)
		require.NoError(t, err)
	}
	_, err = db.Exec(`PRAGMA user_version = 1`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO runs (id, adapter, status, created_at) VALUES ('run_old', 'codex', 'succeeded', 1)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, SchemaVersion(), userVersion(t, path))
	old, err := s.Get(ctx, "run_old")
	require.NoError(t, err)
	assert.Equal(t, "codex", old.Adapter)
	assert.Nil(t, old.Attachments)
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex", Attachments: []api.AttachmentRecord{{MimeType: "image/gif", Size: 1, SHA256: "x"}}}))
	got, err := s.Get(ctx, id)
	require.NoError(t, err)
	assert.Len(t, got.Attachments, 1)
}

func TestTheDatabaseIsPrivateAndInWALMode(t *testing.T) {
	s, path := openTest(t, Options{})
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "run history holds task text")
	dir, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), dir.Mode().Perm())
	var mode string
	require.NoError(t, s.db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	assert.Equal(t, "wal", mode)
	var fk int
	require.NoError(t, s.db.QueryRow("PRAGMA foreign_keys").Scan(&fk))
	assert.Equal(t, 1, fk)
}

func TestADatabaseFromANewerCardIsRefusedNotDowngraded(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t, Options{})
	_, err := s.db.Exec("PRAGMA user_version = 99")
	require.NoError(t, err)
	require.NoError(t, s.Close())

	_, err = Open(ctx, path, Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrSchemaTooNew)
	assert.Contains(t, err.Error(), "99")
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "upgrade card")
	assert.Equal(t, 99, userVersion(t, path), "the newer schema is left alone")
}

func TestAPathThatSQLiteWouldReadAsParametersIsRefused(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "runs.db?mode=ro"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plain file path")
}

func TestEveryFieldSurvivesCreateFinishAndGet(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	s, _ := openTest(t, Options{Now: clock.Now})
	id := s.NewRunID()
	created := clock.Now()
	in := api.Run{
		RunID: id, Adapter: "claude-code", InvokedBy: "gemini", Ancestry: []string{"gemini", "claude-code"},
		Cwd: "/work/project", PermissionMode: "read_only", Model: "sonnet", Task: "fix the bug", TaskLen: 11,
		TaskSHA256: "abc",
		Attachments: []api.AttachmentRecord{{Index: 0, Name: "shot.png", MimeType: "image/png", Size: 1234, SHA256: "e3b0"},
			{Index: 1, MimeType: "image/jpeg", Size: 99, SHA256: "a1b2", Dropped: "no images here"}},
	}
	require.NoError(t, s.Create(ctx, in))

	clock.Advance(250 * time.Millisecond)
	require.NoError(t, s.SetPgid(ctx, id, 4242))
	started := clock.Now()
	clock.Advance(1500 * time.Millisecond)
	require.NoError(t, s.Finish(ctx, id, Finish{
		Status: api.StatusFailed, ExitCode: ptr(3), SessionID: "sess-1", Answer: "partial answer",
		Error:        &api.RunError{Kind: "rate_limit", Message: "429 from the API", ExitCode: ptr(3), StderrExcerpt: "too many"},
		Usage:        &api.Usage{InputTokens: 100, OutputTokens: 20, CachedInputTokens: 80},
		TotalCostUSD: ptr(0.0123), Turns: 2, ToolCalls: 5,
	}))
	require.NoError(t, s.AppendEvent(ctx, id, 1, "text", nil))
	require.NoError(t, s.AppendEvent(ctx, id, 2, "text", nil))

	got, err := s.Get(ctx, id)
	require.NoError(t, err)
	want := api.Run{
		RunID: id, Adapter: "claude-code", Status: api.StatusFailed, InvokedBy: "gemini",
		Ancestry: []string{"gemini", "claude-code"}, Cwd: "/work/project", PermissionMode: "read_only", Model: "sonnet",
		CreatedAt: created, StartedAt: &started, EndedAt: ptr(clock.Now()), DurationMs: ptr(int64(1500)),
		ExitCode: ptr(3), SessionID: "sess-1", Answer: "partial answer",
		Error:        &api.RunError{Kind: "rate_limit", Message: "429 from the API", ExitCode: ptr(3), StderrExcerpt: "too many"},
		Usage:        &api.Usage{InputTokens: 100, OutputTokens: 20, CachedInputTokens: 80},
		TotalCostUSD: ptr(0.0123), Turns: 2, ToolCalls: 5,
		Task: "fix the bug", TaskLen: 11, TaskSHA256: "abc", Pgid: 4242, Attachments: in.Attachments,
	}
	assert.Equal(t, want, got)
}

func TestARunningRowReadsBackWithItsOptionalFieldsAbsent(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "pi"}))
	got, err := s.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, api.StatusRunning, got.Status)
	assert.Equal(t, []string{}, got.Ancestry, "never null on the wire")
	assert.Nil(t, got.EndedAt)
	assert.Nil(t, got.DurationMs)
	assert.Nil(t, got.ExitCode)
	assert.Nil(t, got.Error)
	assert.Nil(t, got.Usage)
	assert.Nil(t, got.TotalCostUSD)

	wire, err := json.Marshal(got)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(wire, &m))
	assert.Equal(t, id, m["run_id"])
	assert.Equal(t, "running", m["status"])
	assert.Equal(t, []any{}, m["ancestry"])
	for _, absent := range []string{"ended_at", "duration_ms", "exit_code", "error", "usage", "total_cost_usd", "task", "pgid", "attachments"} {
		assert.NotContains(t, m, absent)
	}
}

func TestARefusedInvokeIsRecordedInOneStep(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{
		RunID: id, Adapter: "claude-code", Status: api.StatusRefused, InvokedBy: "claude-code",
		Ancestry: []string{"claude-code"}, RefusalReason: "cycle",
	}))
	got, err := s.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, api.StatusRefused, got.Status)
	assert.Equal(t, "cycle", got.RefusalReason)
	require.NotNil(t, got.EndedAt)
	assert.Equal(t, got.CreatedAt, *got.EndedAt)
	assert.Equal(t, ptr(int64(0)), got.DurationMs)
	assert.ErrorIs(t, s.Finish(ctx, id, Finish{Status: api.StatusSucceeded}), ErrFinished)
}

func TestCreateRefusesRowsItCouldNotListOrFinish(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	cases := []struct {
		name string
		run  api.Run
		want string
	}{
		{"no id", api.Run{Adapter: "codex"}, "NewRunID"},
		{"no adapter", api.Run{RunID: id}, "no adapter"},
		{"unknown status", api.Run{RunID: id, Adapter: "codex", Status: "paused"}, "unknown status"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.Create(ctx, c.run)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	err := s.Create(ctx, api.Run{RunID: id, Adapter: "codex"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "already exists")
}

func TestFinishingAFinishedRunIsRefusedAndKeepsTheFirstOutcome(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	require.NoError(t, s.Finish(ctx, id, Finish{Status: api.StatusCancelled, Answer: "first"}))

	err := s.Finish(ctx, id, Finish{Status: api.StatusSucceeded, Answer: "second"})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrFinished)
	assert.Contains(t, err.Error(), id)
	assert.Contains(t, err.Error(), "cancelled")
	assert.ErrorIs(t, s.SetPgid(ctx, id, 1), ErrFinished, "a finished run takes no late pgid either")

	got, err := s.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, api.StatusCancelled, got.Status)
	assert.Equal(t, "first", got.Answer)
}

func TestFinishNeedsAStatusThatEndsARun(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	for _, st := range []api.Status{"", api.StatusRunning, "paused"} {
		assert.Error(t, s.Finish(ctx, id, Finish{Status: st}), "%q", st)
	}
}

func TestAnUnknownRunIsNotFoundEverywhere(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	const id = "run_NOPE"
	_, err := s.Get(ctx, id)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorIs(t, s.SetPgid(ctx, id, 1), ErrNotFound)
	assert.ErrorIs(t, s.Finish(ctx, id, Finish{Status: api.StatusSucceeded}), ErrNotFound)
	assert.ErrorIs(t, s.AppendEvent(ctx, id, 1, "text", nil), ErrNotFound)
	_, err = s.Events(ctx, id, 0, 0)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), id)
}

func TestListFiltersPagesNewestFirstAndClampsItsLimit(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	s, _ := openTest(t, Options{Now: clock.Now})
	type made struct {
		id      string
		adapter string
		status  api.Status
	}
	var all []made
	adapters := []string{"codex", "claude-code", "gemini"}
	for i := range 120 {
		m := made{id: s.NewRunID(), adapter: adapters[i%3], status: api.StatusRunning}
		require.NoError(t, s.Create(ctx, api.Run{RunID: m.id, Adapter: m.adapter}))
		if i%2 == 0 {
			require.NoError(t, s.Finish(ctx, m.id, Finish{Status: api.StatusSucceeded}))
			m.status = api.StatusSucceeded
		}
		all = append(all, m)
		if i%7 == 0 {
			clock.Advance(time.Millisecond) // most share a millisecond: ids must still order
		}
	}
	newest := func(keep func(made) bool, before string, n int) []string {
		var ids []string
		for i := len(all) - 1; i >= 0 && len(ids) < n; i-- {
			if (before == "" || all[i].id < before) && keep(all[i]) {
				ids = append(ids, all[i].id)
			}
		}
		return ids
	}
	any := func(made) bool { return true }
	cases := []struct {
		name string
		q    ListQuery
		want []string
	}{
		{"default limit is 50", ListQuery{}, newest(any, "", 50)},
		{"a small limit", ListQuery{Limit: 3}, newest(any, "", 3)},
		{"by adapter", ListQuery{Adapter: "gemini", Limit: 500}, newest(func(m made) bool { return m.adapter == "gemini" }, "", 500)},
		{"by status", ListQuery{Status: api.StatusRunning, Limit: 20}, newest(func(m made) bool { return m.status == api.StatusRunning }, "", 20)},
		{"both", ListQuery{Adapter: "codex", Status: api.StatusSucceeded, Limit: 500},
			newest(func(m made) bool { return m.adapter == "codex" && m.status == api.StatusSucceeded }, "", 500)},
		{"before a cursor", ListQuery{Before: all[100].id, Limit: 500}, newest(any, all[100].id, 500)},
		{"before the oldest is empty", ListQuery{Before: all[0].id}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runs, err := s.List(ctx, c.q)
			require.NoError(t, err)
			ids := []string{}
			for _, r := range runs {
				ids = append(ids, r.RunID)
			}
			if c.want == nil {
				c.want = []string{}
			}
			assert.Equal(t, c.want, ids)
		})
	}

	t.Run("paging with the cursor visits every run once", func(t *testing.T) {
		seen := map[string]bool{}
		before := ""
		for {
			page, err := s.List(ctx, ListQuery{Before: before, Limit: 77})
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			for _, r := range page {
				require.False(t, seen[r.RunID], "run %s listed twice", r.RunID)
				seen[r.RunID] = true
			}
			before = page[len(page)-1].RunID
		}
		assert.Len(t, seen, len(all))
	})

	t.Run("the limit is clamped to 500", func(t *testing.T) {
		// Bulk rows in one statement: 500 Creates would make this test slow.
		_, err := s.db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 520)
			INSERT INTO runs (id, adapter, status, created_at) SELECT printf('run_0%05d', i), 'bulk', 'running', 0 FROM n`)
		require.NoError(t, err)
		runs, err := s.List(ctx, ListQuery{Limit: 10000, Adapter: "bulk"})
		require.NoError(t, err)
		require.Len(t, runs, api.MaxListLimit)
		assert.Equal(t, "run_000520", runs[0].RunID)
	})

	t.Run("an unknown status is an error, not an empty list", func(t *testing.T) {
		_, err := s.List(ctx, ListQuery{Status: "paused"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "paused")
	})
}

func TestTheDropCountIsRecordedWithTheOutcome(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	for _, seq := range []int64{1, 2, 9} { // the writer kept 1, 2 and the terminal 9
		require.NoError(t, s.AppendEvent(ctx, id, seq, "text", json.RawMessage(fmt.Sprintf(`{"n":%d}`, seq))))
	}
	got, err := s.Get(ctx, id)
	require.NoError(t, err)
	assert.Zero(t, got.EventsDropped, "nothing is counted while the run is going")

	require.NoError(t, s.Finish(ctx, id, Finish{Status: api.StatusSucceeded, EventsDropped: 6}))
	got, err = s.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, int64(6), got.EventsDropped)
	events, err := s.Events(ctx, id, 0, 0)
	require.NoError(t, err)
	assert.Len(t, events, 3, "the store keeps what it is given")
}

func TestEventsOfAnUnknownRunAreRefused(t *testing.T) {
	s, _ := openTest(t, Options{})
	err := s.AppendEvent(context.Background(), "run_nope", 1, "text", json.RawMessage(`{}`))
	require.ErrorIs(t, err, ErrNotFound)
}

func TestEventsReplayInSeqOrderAfterACursor(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	for _, seq := range []int64{3, 1, 2, 5, 4} { // stored out of order, read in order
		require.NoError(t, s.AppendEvent(ctx, id, seq, "text", json.RawMessage(fmt.Sprintf(`{"n":%d}`, seq))))
	}
	cases := []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 0, []int64{1, 2, 3, 4, 5}},
		{2, 0, []int64{3, 4, 5}},
		{2, 2, []int64{3, 4}},
		{5, 0, nil},
	}
	for _, c := range cases {
		events, err := s.Events(ctx, id, c.after, c.limit)
		require.NoError(t, err)
		var seqs []int64
		for _, e := range events {
			seqs = append(seqs, e.Seq)
			assert.JSONEq(t, fmt.Sprintf(`{"n":%d}`, e.Seq), string(e.Payload))
		}
		assert.Equal(t, c.want, seqs, "after %d limit %d", c.after, c.limit)
	}

	err := s.AppendEvent(ctx, id, 3, "text", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "seq 3 is already recorded")
	err = s.AppendEvent(ctx, id, 6, "text", json.RawMessage(`{not json`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not valid JSON")
}

func TestInterruptRunningConvertsOnlyRunningRows(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	s, _ := openTest(t, Options{Now: clock.Now})
	running := map[string]int{}
	finished := map[string]api.Status{}
	for i, st := range []api.Status{api.StatusRunning, api.StatusSucceeded, api.StatusRunning, api.StatusFailed, api.StatusCancelled, api.StatusRunning} {
		id := s.NewRunID()
		require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
		if st == api.StatusRunning {
			if i > 0 {
				require.NoError(t, s.SetPgid(ctx, id, 1000+i))
			}
			running[id] = 1000 + i
			if i == 0 {
				running[id] = 0 // never got a process group
			}
			continue
		}
		require.NoError(t, s.Finish(ctx, id, Finish{Status: st, Answer: "kept"}))
		finished[id] = st
	}
	refusedID := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: refusedID, Adapter: "codex", Status: api.StatusRefused}))
	finished[refusedID] = api.StatusRefused
	clock.Advance(time.Minute)

	got, err := s.InterruptRunning(ctx, "card was killed")
	require.NoError(t, err)
	require.Len(t, got, len(running))
	for _, r := range got {
		pgid, ok := running[r.RunID]
		require.True(t, ok, "run %s was not running", r.RunID)
		assert.Equal(t, pgid, r.Pgid, "the caller needs the group to clean up")
		assert.Equal(t, api.StatusInterrupted, r.Status)
		assert.Equal(t, &api.RunError{Kind: "interrupted", Message: "card was killed"}, r.Error)
		require.NotNil(t, r.EndedAt)
		assert.Equal(t, clock.Now(), *r.EndedAt)
	}
	for id, st := range finished {
		r, err := s.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, st, r.Status)
		assert.Nil(t, r.Error)
	}

	again, err := s.InterruptRunning(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, again, "a second call finds nothing left running")
}

func TestConcurrentWritersAllLand(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	const writers, perWriter, events = 8, 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	ids := make(chan string, writers*perWriter)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWriter {
				id := s.NewRunID()
				if err := s.Create(ctx, api.Run{RunID: id, Adapter: fmt.Sprintf("a%d", w)}); err != nil {
					errs <- err
					return
				}
				for seq := int64(1); seq <= events; seq++ {
					if err := s.AppendEvent(ctx, id, seq, "text", nil); err != nil {
						errs <- err
						return
					}
				}
				if err := s.Finish(ctx, id, Finish{Status: api.StatusSucceeded}); err != nil {
					errs <- err
					return
				}
				ids <- id
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(ids)
	for err := range errs {
		require.NoError(t, err)
	}
	var made []string
	for id := range ids {
		made = append(made, id)
	}
	require.Len(t, made, writers*perWriter)
	runs, err := s.List(ctx, ListQuery{Limit: api.MaxListLimit, Status: api.StatusSucceeded})
	require.NoError(t, err)
	assert.Len(t, runs, writers*perWriter)
	for _, id := range made {
		ev, err := s.Events(ctx, id, 0, 0)
		require.NoError(t, err)
		assert.Len(t, ev, events)
	}
	require.NoError(t, s.IntegrityCheck(ctx))
}

func TestAStoreKilledMidWriteReopensIntact(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a writer process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "runs.db")

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), crashWriterEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	// Let it commit a good number of runs, then kill it wherever it is.
	var committed []string
	lines := bufio.NewScanner(out)
	for len(committed) < 100 && lines.Scan() {
		committed = append(committed, lines.Text())
	}
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
	for lines.Scan() { // ids it committed between our read and the kill
		committed = append(committed, lines.Text())
	}
	err = cmd.Wait()
	require.Len(t, committed, max(100, len(committed)), "writer stopped early: %v\n%s", err, stderr.String())
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "the writer was killed, not finished: %v", err)

	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.IntegrityCheck(ctx))
	for _, id := range committed {
		r, err := s.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, api.StatusSucceeded, r.Status)
		assert.Equal(t, "done "+id, r.Answer)
		ev, err := s.Events(ctx, id, 0, 0)
		require.NoError(t, err)
		assert.Len(t, ev, 5)
	}
	// The run it was in the middle of, if any, is still running and is what
	// InterruptRunning exists for.
	left, err := s.InterruptRunning(ctx, "writer killed")
	require.NoError(t, err)
	assert.LessOrEqual(t, len(left), 1)
}

func TestRunIDsAreUniqueAndSortByCreation(t *testing.T) {
	clock := newFakeClock()
	s, _ := openTest(t, Options{Now: clock.Now})
	var ids []string
	seen := map[string]bool{}
	for i := range 2000 {
		if i%500 == 0 {
			clock.Advance(time.Second)
		}
		id := s.NewRunID()
		require.Len(t, id, len("run_")+26)
		require.False(t, seen[id], "duplicate id %s", id)
		seen[id] = true
		ids = append(ids, id)
	}
	assert.True(t, sort.StringsAreSorted(ids), "ids made in order sort in order, even within a millisecond")

	clock.Advance(-time.Hour) // a clock stepping back must not make ids go back
	assert.Greater(t, s.NewRunID(), ids[len(ids)-1])
}

func TestSetTaskKeepsAtMostAPrefixOfTheTextButAlwaysItsDigest(t *testing.T) {
	var r api.Run
	r.SetTask("hello", 0)
	assert.Empty(t, r.Task)
	assert.False(t, r.TaskTruncated, "a task not kept at all is not a truncated one")
	assert.Equal(t, 5, r.TaskLen)
	assert.Equal(t, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", r.TaskSHA256)
	r.SetTask("hello", 4096)
	assert.Equal(t, "hello", r.Task)
	assert.False(t, r.TaskTruncated)
	r.SetTask("hello", 5)
	assert.Equal(t, "hello", r.Task)
	r.SetTask("héllo", 2) // é is two bytes: the cut moves back, never splits it
	assert.Equal(t, "h", r.Task)
	assert.True(t, r.TaskTruncated)
	assert.Equal(t, 6, r.TaskLen)

	// The flag is not stored: it is read back from the lengths.
	s, _ := openTest(t, Options{})
	ctx := context.Background()
	big := strings.Repeat("x", 100<<10)
	r = api.Run{RunID: s.NewRunID(), Adapter: "claude-code", Status: api.StatusRefused}
	r.SetTask(big, 4096)
	require.NoError(t, s.Create(ctx, r))
	got, err := s.Get(ctx, r.RunID)
	require.NoError(t, err)
	assert.Len(t, got.Task, 4096)
	assert.True(t, got.TaskTruncated)
	assert.Equal(t, 100<<10, got.TaskLen)
	n, sum := TaskDigest("")
	assert.Equal(t, 0, n)
	assert.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", sum)
}

func TestIntegrityCheckReportsACorruptFile(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t, Options{})
	for range 200 {
		require.NoError(t, s.Create(ctx, api.Run{RunID: s.NewRunID(), Adapter: "codex", Task: strings.Repeat("x", 500)}))
	}
	require.NoError(t, s.IntegrityCheck(ctx))
	require.NoError(t, s.Close())

	// Scribble over the middle of the file, past the header and schema.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	info, err := f.Stat()
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(strings.Repeat("\xde\xad", 2048)), info.Size()/2)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	s2, err := Open(ctx, path, Options{})
	if err != nil {
		return // refusing to open at all is also an honest answer
	}
	defer s2.Close()
	err = s2.IntegrityCheck(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "move the file aside")
	assert.Less(t, len(err.Error()), 1000, "bounded, whatever the damage")
}

func TestABatchOfEventsIsStoredWholeOrNotAtAll(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	batch := func(seqs ...int64) []NewEvent {
		var out []NewEvent
		for _, q := range seqs {
			out = append(out, NewEvent{Seq: q, Kind: "text", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, q))})
		}
		return out
	}
	require.NoError(t, s.AppendEvents(ctx, id, batch(1, 2, 3)))
	err := s.AppendEvents(ctx, id, batch(4, 2))
	require.Error(t, err, "a repeated seq refuses the batch")
	assert.Contains(t, err.Error(), "seq 2 is already recorded")
	events, err := s.Events(ctx, id, 0, 0)
	require.NoError(t, err)
	assert.Len(t, events, 3, "seq 4 was rolled back with the rest of its batch")

	require.NoError(t, s.AppendEvents(ctx, id, batch(4, 5)))
	events, err = s.Events(ctx, id, 0, 0)
	require.NoError(t, err)
	var seqs []int64
	for _, e := range events {
		seqs = append(seqs, e.Seq)
	}
	assert.Equal(t, []int64{1, 2, 3, 4, 5}, seqs)
}

func TestEventsOfKindsReadsOnlyThoseKindsInSeqOrder(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "claude-code"}))
	kinds := []string{"text", "approval_requested", "tool_use", "approval_decided", "text", "approval_decided"}
	var batch []NewEvent
	for i, k := range kinds {
		batch = append(batch, NewEvent{Seq: int64(i + 1), Kind: k, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i+1))})
	}
	require.NoError(t, s.AppendEvents(ctx, id, batch))
	evs, err := s.EventsOfKinds(ctx, id, "approval_requested", "approval_decided")
	require.NoError(t, err)
	var seqs []int64
	for _, e := range evs {
		seqs = append(seqs, e.Seq)
	}
	assert.Equal(t, []int64{2, 4, 6}, seqs)
	none, err := s.EventsOfKinds(ctx, id)
	require.NoError(t, err)
	assert.Empty(t, none)
	other, err := s.EventsOfKinds(ctx, "no-such-run", "text")
	require.NoError(t, err)
	assert.Empty(t, other)
}

// A seq given twice inside a batch long enough to be written many rows to
// a statement is named exactly, and none of the batch is stored.
func TestASeqGivenTwiceInALongBatchIsNamedAndNoneOfItIsStored(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	var batch []NewEvent
	for q := int64(1); q <= 200; q++ {
		seq := q
		if q == 150 {
			seq = 90
		}
		batch = append(batch, NewEvent{Seq: seq, Kind: "text", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, q))})
	}
	err := s.AppendEvents(ctx, id, batch)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "seq 90 is already recorded")
	events, err := s.Events(ctx, id, 0, 0)
	require.NoError(t, err)
	assert.Empty(t, events)
	require.NoError(t, s.AppendEvents(ctx, id, batch[:149]))
	events, err = s.Events(ctx, id, 0, 0)
	require.NoError(t, err)
	assert.Len(t, events, 149)
}

func TestDurationMsIsTheRecordedDurationOfAnEndedRunOnly(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	id := s.NewRunID()
	created := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex", CreatedAt: created}))
	_, err := s.DurationMs(ctx, id)
	assert.ErrorContains(t, err, "has not ended")

	require.NoError(t, s.Finish(ctx, id, Finish{Status: api.StatusSucceeded, EndedAt: created.Add(1500 * time.Millisecond)}))
	d, err := s.DurationMs(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, int64(1500), d)
	got, err := s.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, got.DurationMs, &d, "the figure runs.get shows")

	_, err = s.DurationMs(ctx, "run_nope")
	assert.ErrorIs(t, err, ErrNotFound)
}
