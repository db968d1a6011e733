package acpclient

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

// recorder keeps every frame of a connection as checkFrames reads them:
// who sent it, and for an answer the method it answers.
type recorder struct {
	mu      sync.Mutex
	methods map[string]string // request id → method, by sender
	lines   []string
}

func (r *recorder) note(from string, frame []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	_ = json.Unmarshal(frame, &m)
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := map[string]any{"from": from, "frame": string(frame)}
	switch {
	case m.Method != "" && len(m.ID) > 0:
		r.methods[from+string(m.ID)] = m.Method
	case m.Method == "" && len(m.ID) > 0:
		other := "client"
		if from == "client" {
			other = "card"
		}
		if method, ok := r.methods[other+string(m.ID)]; ok {
			rec["answers"] = method
		}
	}
	b, _ := json.Marshal(rec)
	r.lines = append(r.lines, string(b))
}

// recorded wraps the SDK's streams so every frame is noted.
func (r *recorder) recorded(w io.Writer, rd io.Reader) (io.Writer, io.Reader) {
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 0, 64<<10)
		chunk := make([]byte, 32<<10)
		for {
			n, err := rd.Read(chunk)
			buf = append(buf, chunk[:n]...)
			for {
				i := indexNL(buf)
				if i < 0 {
					break
				}
				r.note("card", buf[:i])
				if _, werr := pw.Write(append(append([]byte(nil), buf[:i]...), '\n')); werr != nil {
					return
				}
				buf = buf[i+1:]
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return writerFunc(func(p []byte) (int, error) {
		for _, line := range splitLines(p) {
			r.note("client", line)
		}
		return w.Write(p)
	}), pr
}

func indexNL(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

func splitLines(p []byte) [][]byte {
	var out [][]byte
	for len(p) > 0 {
		i := indexNL(p)
		if i < 0 {
			return append(out, p)
		}
		if i > 0 {
			out = append(out, p[:i])
		}
		p = p[i+1:]
	}
	return out
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// save writes the frames to path, for checkFrames (and, under
// CARD_ACP_CAPTURE=DIR, for the docs' examples).
func (r *recorder) save(t *testing.T, path string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := []byte{}
	for _, l := range r.lines {
		b = append(append(b, l...), '\n')
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

func worktreeOf(t *testing.T, meta map[string]any) *api.SessionWorktree {
	t.Helper()
	raw, err := json.Marshal(meta)
	require.NoError(t, err)
	var m struct {
		Card struct {
			Worktree *api.SessionWorktree `json:"worktree"`
		} `json:"card"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	return m.Card.Worktree
}

// TestAnEditorChoosesAWorktreeWithTheIsolationOption: an editor that sends
// no _meta.card.isolation (Zed sends none) picks the session's worktree
// with the isolation config option before its first prompt; the turn's
// file is in the worktree, not in the checkout the editor shows; after the
// turn the option cannot change; session/load names the worktree too.
func TestAnEditorChoosesAWorktreeWithTheIsolationOption(t *testing.T) {
	repo := daemontest.GitRepo(t, "project")
	d := daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)}})
	ctx := daemontest.Context(t)
	rec := &recorder{methods: map[string]string{}}
	ws, _, err := dialACP(t, acpURL(d.URL), d.Token, "")
	require.NoError(t, err)
	w, r := rec.recorded(framed(ctx, ws))
	cl := &sdkClient{}
	conn := acpsdk.NewClientSideConnection(cl, w, r)
	_, err = conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber})
	require.NoError(t, err)

	sess, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: repo, McpServers: []acpsdk.McpServer{},
		Meta: map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode}}})
	require.NoError(t, err)
	assert.Nil(t, worktreeOf(t, sess.Meta))
	set := func(value string) (acpsdk.SetSessionConfigOptionResponse, error) {
		return conn.SetSessionConfigOption(ctx, acpsdk.SetSessionConfigOptionRequest{ValueId: &acpsdk.SetSessionConfigOptionValueId{
			SessionId: sess.SessionId, ConfigId: "isolation", Value: acpsdk.SessionConfigValueId(value)}})
	}
	on, err := set("worktree")
	require.NoError(t, err)
	wt := worktreeOf(t, on.Meta)
	require.NotNil(t, wt, "the answer names the worktree")
	assert.DirExists(t, wt.Dir)
	var current string
	for _, o := range on.ConfigOptions {
		if o.Select != nil && o.Select.Id == "isolation" {
			current = string(o.Select.CurrentValue)
		}
	}
	assert.Equal(t, "worktree", current)

	before := daemontest.Snapshot(t, repo)
	res, err := conn.Prompt(ctx, acpsdk.PromptRequest{SessionId: sess.SessionId,
		Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock(`TOOL Bash {"command":"echo hi > ws.txt"}`)}})
	require.NoError(t, err)
	assert.Equal(t, acpsdk.StopReasonEndTurn, res.StopReason)
	assert.FileExists(t, filepath.Join(wt.Dir, "ws.txt"), "the agent worked in the worktree")
	assert.Equal(t, before, daemontest.Snapshot(t, repo), "the checkout the editor shows is untouched")
	d2, err := d.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: string(sess.SessionId)})
	require.NoError(t, err)
	require.Len(t, d2.Files, 1)
	assert.Equal(t, "ws.txt", d2.Files[0].Path)

	_, err = set("off")
	var re *acpsdk.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, -32602, re.Code, "after the first prompt: %v", err)
	assert.DirExists(t, wt.Dir)

	// Another editor loading the session is told where it works.
	other, _ := connectACP(t, ctx, acpURL(d.URL), d.Token, "", &sdkClient{})
	loaded, err := other.LoadSession(ctx, acpsdk.LoadSessionRequest{SessionId: sess.SessionId, Cwd: repo, McpServers: []acpsdk.McpServer{}})
	require.NoError(t, err)
	assert.Equal(t, wt, worktreeOf(t, loaded.Meta))

	frames := filepath.Join(t.TempDir(), "frames.jsonl")
	rec.save(t, frames)
	t.Logf("%d frames card sent, each valid by the ACP v1 schema", checkFrames(t, frames))
	if dir := os.Getenv("CARD_ACP_CAPTURE"); dir != "" {
		rec.save(t, filepath.Join(dir, "isolation.jsonl"))
	}
	_, err = d.Client.DiscardSession(ctx, string(sess.SessionId))
	require.NoError(t, err)
}
