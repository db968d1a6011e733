package attachments_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/testskip"
)

// TestCaptureAttachmentExamples runs the real Claude Code and the real
// Droid with attachments over a bare WebSocket and writes the frames as
// marked examples to $CARD_DOCS_CAPTURE, for docs/protocol.md.
func TestCaptureAttachmentExamples(t *testing.T) {
	out := os.Getenv("CARD_DOCS_CAPTURE")
	if out == "" {
		testskip.Skip(t, testskip.DocsCapture, "set CARD_DOCS_CAPTURE=FILE (and CARD_E2E=1) to capture the attachment examples")
	}
	var buf bytes.Buffer
	// A 1×1 PNG keeps the example's base64 short.
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var dot bytes.Buffer
	require.NoError(t, png.Encode(&dot, img))
	_, blue := images(t)

	for _, cli := range []agentCLI{clis[0], clis[5]} {
		s := start(t, cli, standin.CLI(t, cli.bin), nil)
		photo := filepath.Join(s.cwd, "photo.jpg")
		require.NoError(t, os.WriteFile(photo, blue, 0o600))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		ws := s.d.Raw(t)
		ws.SetReadLimit(4 << 20)
		home := filepath.Dir(s.cwd)
		call := func(id int, method string, params map[string]any) {
			frame, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
			require.NoError(t, err)
			emit(t, &buf, home, method, "request", frame)
			require.NoError(t, ws.Write(ctx, websocket.MessageText, frame))
			for {
				_, msg, err := ws.Read(ctx)
				require.NoError(t, err)
				if bytes.HasPrefix(msg, []byte(fmt.Sprintf(`{"id":%d,`, id))) || bytes.Contains(msg, []byte(fmt.Sprintf(`"id":%d,"result"`, id))) ||
					bytes.Contains(msg, []byte(fmt.Sprintf(`"id":%d,"error"`, id))) {
					emit(t, &buf, home, method, "response", msg)
					return
				}
			}
		}
		atts := []map[string]any{
			{"data_b64": base64.StdEncoding.EncodeToString(dot.Bytes()), "mime_type": "image/png", "name": "red-dot.png"},
			{"path": photo},
		}
		invoke := map[string]any{"id": cli.id, "task": "What colours are these images?", "cwd": s.cwd, "attachments": atts}
		if cli.form == "" {
			invoke["stream"] = true
			call(1, "agents.invoke", invoke)
			for { // the streamed run's end, before the next request
				_, msg, err := ws.Read(ctx)
				require.NoError(t, err)
				if bytes.Contains(msg, []byte(`"kind":"done"`)) || bytes.Contains(msg, []byte(`"kind":"error"`)) {
					break
				}
			}
			invoke["require_attachments"] = true
			delete(invoke, "stream")
			call(2, "agents.invoke", invoke)
			continue
		}
		call(1, "agents.invoke", invoke)
		var res struct {
			Result struct {
				RunID string `json:"run_id"`
			} `json:"result"`
		}
		last := lastResponse(t, buf.String())
		require.NoError(t, json.Unmarshal([]byte(last), &res))
		call(2, "runs.get", map[string]any{"run_id": res.Result.RunID})
		invoke["attachments"] = []map[string]any{{"data_b64": base64.StdEncoding.EncodeToString(dot.Bytes()), "mime_type": "image/jpeg"}}
		call(3, "agents.invoke", invoke)
		invoke["attachments"] = []map[string]any{{"path": photo}, {"data_b64": "iVBORw0KGgo=garbage", "mime_type": "image/png"}}
		call(4, "agents.invoke", invoke)
	}
	require.NoError(t, os.WriteFile(out, buf.Bytes(), 0o644))
}

// emit writes one frame as a marked example, with the test's temporary
// home shown as /tmp/card-example-home.
func emit(t *testing.T, buf *bytes.Buffer, home, method, kind string, raw []byte) {
	var b bytes.Buffer
	require.NoError(t, json.Indent(&b, raw, "", "  "))
	text := strings.ReplaceAll(b.String(), home, "/tmp/card-example-home")
	fmt.Fprintf(buf, "<!-- example: %s %s -->\n```json\n%s\n```\n\n", method, kind, text)
}

// lastResponse is the JSON of the last example written.
func lastResponse(t *testing.T, doc string) string {
	i := strings.LastIndex(doc, "```json\n")
	require.GreaterOrEqual(t, i, 0)
	body := doc[i+len("```json\n"):]
	return body[:strings.Index(body, "\n```")]
}
