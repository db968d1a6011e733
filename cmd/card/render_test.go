package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/term"

	"github.com/card-dev/card/api"
)

// Streamed pieces make one line of answer on stdout; a warning is a note on
// stderr, never part of the answer and never an error.
func TestFollowRendersPiecesAsOneAnswerAndWarningsAsNotes(t *testing.T) {
	var out, errb bytes.Buffer
	f := newFollower(env{stdout: &out, stderr: &errb}, false, "claude-code")
	for _, ev := range []api.AgentEvent{
		{Event: api.Event{Kind: api.EventWarning, Text: "Model metadata for `gpt-5` not found"}},
		{Event: api.Event{Kind: api.EventThinking, Text: "hmm", Delta: true}},
		{Event: api.Event{Kind: api.EventText, Text: "PO", Delta: true}},
		{Event: api.Event{Kind: api.EventText, Text: "NG", Delta: true}},
	} {
		f.render(ev)
	}
	assert.Equal(t, "PONG", out.String())
	assert.Equal(t, "card: note from the agent: Model metadata for `gpt-5` not found\n", errb.String())
}

// On a terminal, what the agent wrote cannot act on it: an OSC 52
// clipboard write, a clear screen, a cursor move, a bare carriage return
// that overprints, a C1 CSI, are all printed as visible escapes, on stdout
// and in the status lines on stderr; newlines and tabs pass. Piped, the
// text is left as the agent gave it.
func TestOnATerminalTheAgentsEscapesArePrintedVisiblyAndPipedTheyPass(t *testing.T) {
	hostile := "ok\x1b]52;c;Y3VybCB4fHNo\x07\x1b[2J\x1b[H\tdone\rfake\x7f\u009b2J\r\nnext\n"
	want := `ok\x1b]52;c;Y3VybCB4fHNo\x07\x1b[2J\x1b[H` + "\tdone" + `\x0dfake\x7f\u009b2J` + "\r\nnext\n"
	events := []api.AgentEvent{
		{Event: api.Event{Kind: api.EventText, Text: hostile, Delta: true}},
		{Event: api.Event{Kind: api.EventWarning, Text: "see \x1b]0;owned\x07 this"}},
	}

	outPTY, outTTY, err := pty.Open()
	require.NoError(t, err)
	defer outPTY.Close()
	defer outTTY.Close()
	errPTY, errTTY, err := pty.Open()
	require.NoError(t, err)
	defer errPTY.Close()
	defer errTTY.Close()
	for _, tty := range []*os.File{outTTY, errTTY} {
		_, err := term.MakeRaw(int(tty.Fd())) // what is written arrives as written
		require.NoError(t, err)
	}
	f := newFollower(env{stdout: outTTY, stderr: errTTY}, false, "claude-code")
	for _, ev := range events {
		f.render(ev)
	}
	assert.Equal(t, want, readTTY(t, outPTY, len(want)))
	note := `card: note from the agent: see \x1b]0;owned\x07 this` + "\n"
	assert.Contains(t, readTTY(t, errPTY, len(note)), note)

	var out, errb bytes.Buffer
	f = newFollower(env{stdout: &out, stderr: &errb}, false, "claude-code")
	for _, ev := range events {
		f.render(ev)
	}
	assert.Equal(t, hostile, out.String(), "piped, the bytes pass as they are")
	assert.Equal(t, "card: note from the agent: see \x1b]0;owned\x07 this\n", errb.String())
}

// readTTY reads what arrives on a terminal's master side until it has at
// least n bytes or 5 seconds pass (a terminal's master takes no read
// deadline; closing it ends the reader).
func readTTY(t *testing.T, master *os.File, n int) string {
	t.Helper()
	chunks, done := make(chan []byte), make(chan struct{})
	defer close(done)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 4096)
			k, err := master.Read(buf)
			if k > 0 {
				select {
				case chunks <- buf[:k]:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var got []byte
	deadline := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case c, ok := <-chunks:
			if !ok {
				return string(got)
			}
			got = append(got, c...)
		case <-deadline:
			return string(got)
		}
	}
	return string(got)
}

func TestTermSafeLeavesPlainTextAloneAndEscapesEveryControl(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, é and 日本\n\tindented\r\n": "plain text, é and 日本\n\tindented\r\n",
		"\x00\x01\x08\x0b\x0c\x1b\x7f":         `\x00\x01\x08\x0b\x0c\x1b\x7f`,
		"a\rb":                                 `a\x0db`,
		"\u0080\u0085\u009b\u009f\u00a0":       `\u0080\u0085\u009b\u009f` + "\u00a0",
	} {
		assert.Equal(t, want, termSafe(in), "%q", in)
	}
}

// A retry line counts against the bound card holds the agent to, the one
// the run's ending names, never the agent's own larger one; a session id
// the agent reports is labelled as the agent's own.
func TestRetriesCountAgainstCardsBoundAndTheAgentsSessionIDIsLabelled(t *testing.T) {
	var out, errb bytes.Buffer
	f := newFollower(env{stdout: &out, stderr: &errb}, false, "claude-code")
	f.render(api.AgentEvent{Event: api.Event{Kind: api.EventSession, SessionID: "b1955a93"}})
	f.render(api.AgentEvent{Event: api.Event{Kind: api.EventRetry, Attempt: 1, MaxAttempts: 3, Error: "rate_limit (HTTP 429)"}})
	assert.Equal(t, "card: claude-code's own session id: b1955a93\n"+
		"card: the agent is retrying (attempt 1 of 3): rate_limit (HTTP 429)\n", errb.String())
	assert.Empty(t, out.String())
}
