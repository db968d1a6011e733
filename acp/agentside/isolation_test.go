package agentside

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// option is the option id of opts.
func option(t *testing.T, opts []acp.SessionConfigOption, id string) acp.SessionConfigOption {
	t.Helper()
	for _, o := range opts {
		if o.ID == id {
			return o
		}
	}
	require.Failf(t, "no such option", "%s in %+v", id, opts)
	return acp.SessionConfigOption{}
}

// metaWorktree is _meta.card.worktree of an answer, nil when absent.
func metaWorktree(t *testing.T, raw acp.Meta) *api.SessionWorktree {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	var m struct {
		Card struct {
			Worktree *api.SessionWorktree `json:"worktree"`
		} `json:"card"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	return m.Card.Worktree
}

// An editor cannot send _meta.card.isolation on session/new (Zed sends no
// _meta), so where the agent works is a config option: set before the
// first prompt, it is sessions.configure with isolation, and every answer
// that names the session carries its worktree.
func TestTheIsolationOptionChoosesTheWorktreeBeforeTheFirstPromptAndTheAnswersCarryIt(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	var r acp.NewSessionResponse
	e.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work/project"}, &r)
	iso := option(t, r.ConfigOptions, "isolation")
	assert.Equal(t, "_isolation", *iso.Category, "a category of card's own")
	assert.Equal(t, "select", iso.Type)
	assert.Equal(t, "off", iso.CurrentValue)
	assert.JSONEq(t, `[{"value":"off","name":"Off","description":"The agent works in the session's directory: your checkout"},`+
		`{"value":"worktree","name":"Worktree","description":"The agent works in a git worktree of the repository, on a branch of its own; your checkout is not written"}]`,
		string(iso.Options))
	assert.Nil(t, metaWorktree(t, r.Meta))
	id := r.SessionID
	set := func(value string, meta json.RawMessage) acp.SetSessionConfigOptionResponse {
		var res acp.SetSessionConfigOptionResponse
		e.ok(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: id, ConfigID: "isolation", Value: value, Meta: meta}, &res)
		return res
	}

	on := set("worktree", nil)
	require.Equal(t, []api.SessionConfigureParams{{SessionID: id, Isolation: "worktree"}}, be.configured)
	assert.Equal(t, "worktree", option(t, on.ConfigOptions, "isolation").CurrentValue)
	wt := metaWorktree(t, on.Meta)
	require.NotNil(t, wt, "the answer says where the agent now works")
	assert.Equal(t, "/card/worktrees/"+id+"/project", wt.Dir)
	require.Eventually(t, func() bool { return len(e.updatesOf(id, acp.UpdateConfigOption)) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, "worktree", option(t, e.updatesOf(id, acp.UpdateConfigOption)[0].ConfigOption.ConfigOptions, "isolation").CurrentValue)
	again := set("worktree", nil)
	assert.Len(t, be.configured, 1, "the value the session has is no change")
	assert.Equal(t, wt, metaWorktree(t, again.Meta))

	// Another editor that loads or resumes the session is told too.
	other := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(other)
	var lr acp.LoadSessionResponse
	other.ok(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: id, Cwd: "/work/project"}, &lr)
	assert.Equal(t, wt, metaWorktree(t, lr.Meta), "session/load's answer carries the worktree")
	assert.Equal(t, "worktree", option(t, lr.ConfigOptions, "isolation").CurrentValue)
	third := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(third)
	var rr acp.ResumeSessionResponse
	third.ok(acp.MethodSessionResume, acp.ResumeSessionRequest{SessionID: id, Cwd: "/work/project"}, &rr)
	assert.Equal(t, wt, metaWorktree(t, rr.Meta), "session/resume's answer carries the worktree")

	// Set back to off, it is gone; a base goes with worktree only.
	off := set("off", nil)
	assert.Equal(t, api.SessionConfigureParams{SessionID: id, Isolation: "off"}, be.configured[1])
	assert.Equal(t, "off", option(t, off.ConfigOptions, "isolation").CurrentValue)
	assert.Nil(t, metaWorktree(t, off.Meta))
	require.Eventually(t, func() bool {
		u := third.updatesOf(id, acp.UpdateConfigOption)
		return len(u) > 0 && option(t, u[len(u)-1].ConfigOption.ConfigOptions, "isolation").CurrentValue == "off"
	}, 5*time.Second, 5*time.Millisecond, "an editor following the session hears the change")
	for _, tc := range []struct {
		value string
		meta  string
		field string
	}{
		{"container", "", "value"},
		{"off", `{"card":{"base":"main"}}`, "_meta.card.base"},
	} {
		var m json.RawMessage
		if tc.meta != "" {
			m = json.RawMessage(tc.meta)
		}
		err := e.fail(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: id, ConfigID: "isolation", Value: tc.value, Meta: m})
		assert.Equal(t, tc.field, errField(t, err), "%+v", tc)
	}
	from := set("worktree", json.RawMessage(`{"card":{"base":"v1"}}`))
	assert.Equal(t, api.SessionConfigureParams{SessionID: id, Isolation: "worktree", Base: "v1"}, be.configured[2])
	assert.Equal(t, "v1", metaWorktree(t, from.Meta).BaseRef)

	// After the first prompt card refuses it, naming the field, and the
	// option stays as it was.
	assert.Equal(t, acp.StopEndTurn, prompt(e, id, "one").StopReason)
	err := e.fail(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: id, ConfigID: "isolation", Value: "off"})
	assert.Equal(t, acp.CodeInvalidParams, err.Code)
	assert.Equal(t, "isolation", errField(t, err))
	var model acp.SetSessionConfigOptionResponse
	e.ok(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: id, ConfigID: "model", Value: "m2"}, &model)
	assert.Equal(t, "worktree", option(t, model.ConfigOptions, "isolation").CurrentValue)
	assert.NotNil(t, metaWorktree(t, model.Meta), "every option's answer names the worktree")
}
