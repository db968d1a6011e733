package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

func TestASessionAndItsTurnsRoundTripThroughTheStore(t *testing.T) {
	s, _ := openTest(t, Options{})
	ctx := context.Background()
	id := s.NewSessionID()
	assert.Regexp(t, `^ses_[0-9A-Z]{26}$`, id)
	created := time.UnixMilli(1_800_000_000_000).UTC()
	require.NoError(t, s.CreateSession(ctx, Session{ID: id, Adapter: "codex", Cwd: "/w", PermissionMode: "edit", Model: "m",
		Effort: "high", Params: json.RawMessage(`{"id":"codex"}`), Ancestry: []string{"claude-code"}, CreatedAt: created}))
	got, err := s.GetSession(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "idle", got.State)
	assert.Equal(t, []string{"claude-code"}, got.Ancestry)
	assert.EqualValues(t, 1, got.NextSeq)
	assert.JSONEq(t, `[]`, string(got.Queue))

	got.State, got.AgentSessionID, got.Turns, got.NextSeq = "running", "cli-1", 2, 9
	got.Queue = json.RawMessage(`[{"turn":3}]`)
	got.UpdatedAt = time.Time{}
	require.NoError(t, s.UpdateSession(ctx, got))
	require.NoError(t, s.SetSessionWarmPgid(ctx, id, 4242))
	again, err := s.GetSession(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "cli-1", again.AgentSessionID)
	assert.EqualValues(t, 9, again.NextSeq)
	assert.Equal(t, 4242, again.WarmPgid)
	assert.JSONEq(t, `[{"turn":3}]`, string(again.Queue))
	// A state update leaves the warm pgid alone: only the agent's start
	// and end change it.
	require.NoError(t, s.UpdateSession(ctx, again))
	again, err = s.GetSession(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, 4242, again.WarmPgid)

	for turn := 1; turn <= 2; turn++ {
		require.NoError(t, s.Create(ctx, api.Run{RunID: s.NewRunID(), Adapter: "codex", CardSessionID: id, SessionTurn: turn, SessionSeqBase: int64(turn * 4)}))
	}
	turns, err := s.SessionRuns(ctx, id)
	require.NoError(t, err)
	require.Len(t, turns, 2)
	assert.Equal(t, 2, turns[1].SessionTurn)
	assert.EqualValues(t, 8, turns[1].SessionSeqBase)
	assert.Equal(t, id, turns[0].CardSessionID)
	open, err := s.OpenSessions(ctx)
	require.NoError(t, err)
	assert.Len(t, open, 1)

	now := time.Now().UTC()
	again.State, again.ClosedAt, again.CloseReason = "closed", &now, "done"
	require.NoError(t, s.UpdateSession(ctx, again))
	list, err := s.ListSessions(ctx, SessionQuery{})
	require.NoError(t, err)
	assert.Empty(t, list, "closed sessions are left out unless asked for")
	list, err = s.ListSessions(ctx, SessionQuery{IncludeClosed: true, Adapter: "codex"})
	require.NoError(t, err)
	assert.Len(t, list, 1)
	_, err = s.GetSession(ctx, "ses_nope")
	assert.ErrorIs(t, err, ErrSessionNotFound)
}

func TestAConfiguredSessionKeepsItsNewModeModelAndParamsInTheStore(t *testing.T) {
	s, _ := openTest(t, Options{})
	ctx := context.Background()
	id := s.NewSessionID()
	require.NoError(t, s.CreateSession(ctx, Session{ID: id, Adapter: "claude-code", Cwd: "/w", PermissionMode: "read_only",
		Params: json.RawMessage(`{"id":"claude-code","permission_mode":"read_only"}`)}))
	got, err := s.GetSession(ctx, id)
	require.NoError(t, err)
	got.PermissionMode, got.Model, got.Effort = "edit", "opus", "high"
	got.Params = json.RawMessage(`{"id":"claude-code","permission_mode":"edit","model":"opus","effort":"high"}`)
	require.NoError(t, s.UpdateSession(ctx, got))
	again, err := s.GetSession(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "edit", again.PermissionMode)
	assert.Equal(t, "opus", again.Model)
	assert.Equal(t, "high", again.Effort)
	assert.JSONEq(t, string(got.Params), string(again.Params))
}

func TestAnIsolatedSessionsWorktreeRecordSurvivesStateUpdatesAndChangesOnlyWhenSet(t *testing.T) {
	s, _ := openTest(t, Options{})
	ctx := context.Background()
	id, plain := s.NewSessionID(), s.NewSessionID()
	rec := json.RawMessage(`{"worktree":{"path":"/root/x/repo"}}`)
	require.NoError(t, s.CreateSession(ctx, Session{ID: id, Adapter: "codex", Worktree: rec}))
	require.NoError(t, s.CreateSession(ctx, Session{ID: plain, Adapter: "codex"}))
	got, err := s.GetSession(ctx, id)
	require.NoError(t, err)
	assert.JSONEq(t, string(rec), string(got.Worktree))
	none, err := s.GetSession(ctx, plain)
	require.NoError(t, err)
	assert.Nil(t, none.Worktree, "a session that runs in its cwd has no record")

	got.State, got.Worktree = "running", json.RawMessage(`{"other":true}`)
	require.NoError(t, s.UpdateSession(ctx, got))
	again, err := s.GetSession(ctx, id)
	require.NoError(t, err)
	assert.JSONEq(t, string(rec), string(again.Worktree), "a state update leaves the worktree record alone")

	discarded := json.RawMessage(`{"worktree":{"path":"/root/x/repo"},"discarded_at":"2026-01-02T03:04:05Z"}`)
	require.NoError(t, s.SetSessionWorktree(ctx, id, discarded))
	open, err := s.OpenSessions(ctx)
	require.NoError(t, err)
	require.Len(t, open, 2)
	for _, o := range open {
		if o.ID == id {
			assert.JSONEq(t, string(discarded), string(o.Worktree), "the list of open sessions carries it")
		}
	}
	assert.Error(t, s.SetSessionWorktree(ctx, id, json.RawMessage(`{`)))
	assert.ErrorIs(t, s.SetSessionWorktree(ctx, "ses_NOSUCH", discarded), ErrSessionNotFound)
}

func TestHasEventTellsWhetherARunRecordedAKind(t *testing.T) {
	s, _ := openTest(t, Options{})
	ctx := context.Background()
	id := s.NewRunID()
	require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: "codex"}))
	require.NoError(t, s.AppendEvent(ctx, id, 1, "text", json.RawMessage(`{"text":"hi"}`)))
	has, err := s.HasEvent(ctx, id, "changes")
	require.NoError(t, err)
	assert.False(t, has)
	require.NoError(t, s.AppendEvent(ctx, id, 2, "changes", json.RawMessage(`{"changes":{"turn":1}}`)))
	has, err = s.HasEvent(ctx, id, "changes")
	require.NoError(t, err)
	assert.True(t, has)
}
