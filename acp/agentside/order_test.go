package agentside

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
)

// Prompts an editor sends one session back to back reach card in the
// order they were sent, even when the first takes longer to be taken than
// the ones after it: each request is handled on its own goroutine, and
// without the session's order the fast one overtook the slow one.
func TestPromptsOfOneSessionReachCardInTheOrderTheEditorSentThem(t *testing.T) {
	be := newFake()
	be.promptDelay = func(task string) time.Duration {
		if strings.HasSuffix(task, " 0") {
			return 150 * time.Millisecond
		}
		return 0
	}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	var done []chan acp.Message
	for i := range 4 {
		done = append(done, e.start(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock(fmt.Sprintf("prompt %d", i))}}))
	}
	for _, ch := range done {
		m := <-ch
		require.Nil(t, m.Error)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	var got []string
	for _, p := range be.prompts {
		got = append(got, p.Task)
	}
	assert.Equal(t, []string{"prompt 0", "prompt 1", "prompt 2", "prompt 3"}, got)
}

// A session/cancel that comes while the prompt before it is still being
// set up (card has not yet answered that it took the prompt) ends that
// prompt's turn: the prompt is answered cancelled, and card was asked to
// cancel only once it had taken the prompt.
func TestACancelWhileThePromptIsStillBeingSetUpEndsItsTurn(t *testing.T) {
	be := newFake()
	be.hold = make(chan struct{})
	be.promptDelay = func(string) time.Duration { return 200 * time.Millisecond }
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	done := e.start(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("a slow start")}})
	e.notify(acp.MethodSessionCancel, acp.CancelNotification{SessionID: id})
	select {
	case m := <-done:
		require.Nil(t, m.Error)
		var r acp.PromptResponse
		require.NoError(t, json.Unmarshal(m.Result, &r))
		assert.Equal(t, acp.StopCancelled, r.StopReason)
	case <-time.After(10 * time.Second):
		t.Fatal("the prompt was never answered: the cancel was lost")
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	require.Len(t, be.cancels, 1)
	require.Len(t, be.prompts, 1, "the cancel reached card after the prompt it cancels")
}

// An editor on a web origin may load or resume only the sessions its
// origin started; an editor of a native client (card acp) any.
func TestAWebEditorLoadsOnlyTheSessionsItsOriginStarted(t *testing.T) {
	be := newFake()
	native := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(native)
	id := newSession(native, "")
	be.mu.Lock()
	be.sessions[id].sess.Origin = "https://a.example"
	be.mu.Unlock()

	other := newEditor(t, Config{Adapter: "claude-code", Origin: "https://b.example"}, be)
	initialize(other)
	for _, method := range []string{acp.MethodSessionLoad, acp.MethodSessionResume} {
		var params any = acp.LoadSessionRequest{SessionID: id, Cwd: "/w"}
		if method == acp.MethodSessionResume {
			params = acp.ResumeSessionRequest{SessionID: id, Cwd: "/w"}
		}
		err := other.fail(method, params)
		assert.Equal(t, CodeNotSessionOwner, err.Code, method)
		assert.Contains(t, err.Message, "another client", method)
	}
	owner := newEditor(t, Config{Adapter: "claude-code", Origin: "https://a.example"}, be)
	initialize(owner)
	owner.ok(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: id, Cwd: "/w"}, nil)
	again := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(again)
	again.ok(acp.MethodSessionResume, acp.ResumeSessionRequest{SessionID: id, Cwd: "/w"}, nil)
}
