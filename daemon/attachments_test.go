package daemon_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// testPNG and testJPEG are real 4×4 images, encoded by the standard
// library, in one colour.
func testPNG(t testing.TB, c color.Color) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, solid(c)))
	return b.Bytes()
}

func testJPEG(t testing.TB, c color.Color) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, jpeg.Encode(&b, solid(c), nil))
	return b.Bytes()
}

func solid(c color.Color) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for x := range 4 {
		for y := range 4 {
			img.Set(x, y, c)
		}
	}
	return img
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// An image sent inline and one named by its path both reach Claude Code in
// the one stream-json message on its stdin, byte for byte, and the run's
// record keeps their names, types, sizes and digests, never their bytes.
func TestImagesReachTheAgentAndTheRunRecordsTheirDigestsNotTheirBytes(t *testing.T) {
	rd := startRunsDaemon(t, "")
	red, blue := testPNG(t, color.RGBA{R: 255, A: 255}), testJPEG(t, color.RGBA{B: 255, A: 255})
	path := filepath.Join(t.TempDir(), "blue photo.jpeg")
	require.NoError(t, os.WriteFile(path, blue, 0o600))

	p := rd.params("claude-code", "What colours are these?")
	p.Attachments = []api.Attachment{{DataB64: b64(red), MimeType: "image/png", Name: "red.png"}, {Path: path}}
	res := rd.finished(t, p)
	require.Equal(t, api.StatusSucceeded, res.Status, "%+v", res.Error)
	assert.Empty(t, res.DroppedAttachments)

	args, stdin := rd.agents["claude-code"].Received(t, res.RunID)
	assert.Contains(t, strings.Join(args, " "), "--input-format stream-json")
	var msg struct {
		Message struct {
			Content []struct {
				Type   string `json:"type"`
				Text   string `json:"text"`
				Source struct {
					MediaType string `json:"media_type"`
					Data      []byte `json:"data"`
				} `json:"source"`
			} `json:"content"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdin), &msg), stdin)
	require.Len(t, msg.Message.Content, 3)
	assert.Equal(t, "image/png", msg.Message.Content[0].Source.MediaType)
	assert.Equal(t, red, msg.Message.Content[0].Source.Data)
	assert.Equal(t, "image/jpeg", msg.Message.Content[1].Source.MediaType)
	assert.Equal(t, blue, msg.Message.Content[1].Source.Data)
	assert.Equal(t, "What colours are these?", msg.Message.Content[2].Text)

	rec, err := rd.Client.Run(daemontest.Context(t), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, []api.AttachmentRecord{
		{Index: 0, Name: "red.png", MimeType: "image/png", Size: int64(len(red)), SHA256: sha(red)},
		{Index: 1, Name: "blue photo.jpeg", MimeType: "image/jpeg", Size: int64(len(blue)), SHA256: sha(blue)},
	}, rec.Attachments)
	wire, err := json.Marshal(rec)
	require.NoError(t, err)
	assert.NotContains(t, string(wire), b64(red)[:40], "the record never holds the image")
	assert.NotContains(t, string(wire), b64(blue)[:40])
}

// Codex gets each image as --image= a private copy with the type's
// extension, which exists while it runs and is gone after.
func TestCodexGetsPrivateCopiesThatAreGoneAfterTheRun(t *testing.T) {
	rd := startRunsDaemon(t, "")
	red := testPNG(t, color.RGBA{R: 255, A: 255})
	p := rd.params("codex", "What colour is this?")
	p.Attachments = []api.Attachment{{DataB64: b64(red), MimeType: "image/png"}}
	res := rd.finished(t, p)
	require.Equal(t, api.StatusSucceeded, res.Status, "%+v", res.Error)

	args, stdin := rd.agents["codex"].Received(t, res.RunID)
	assert.Equal(t, "What colour is this?", stdin, "the prompt is still the whole of stdin")
	var image string
	for _, a := range args {
		if strings.HasPrefix(a, "--image=") {
			image = strings.TrimPrefix(a, "--image=")
		}
	}
	require.NotEmpty(t, image, "no --image in %q", args)
	assert.Equal(t, "image-1.png", filepath.Base(image))
	assert.Equal(t, "-", args[len(args)-1], "the stdin marker stays last")
	assert.Equal(t, red, rd.agents["codex"].PrivateFile(t, res.RunID, "image-1.png"))
	_, err := os.Stat(filepath.Dir(image))
	assert.True(t, os.IsNotExist(err), "the private directory %s outlived the run", filepath.Dir(image))
}

// startWithDroid is startRunsDaemon with a replaying Droid too: the one
// adapter that takes no images.
func startWithDroid(t *testing.T) (*runsDaemon, daemontest.Replay) {
	t.Helper()
	droid := daemontest.ReplayAgent(t, "droid", "0.225.2", daemontest.RepoFile(t, "e2e/fixtures/cli/droid-exec-stream-json-success.jsonl"))
	agents, pins := replayAgents(t)
	pins["droid"] = droid.Path
	rd := &runsDaemon{agents: agents, cwd: t.TempDir(), events: daemontest.NewEvents()}
	rd.Daemon = daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Agents: pins})
	return rd, droid
}

// Droid takes no images: its attachments are listed as dropped, with why,
// in the answer, the terminal event and the record; with
// require_attachments the request is refused instead and nothing runs.
func TestAnAdapterWithoutImagesDropsThemOrRefusesWhenTheyAreRequired(t *testing.T) {
	rd, droid := startWithDroid(t)
	red := testPNG(t, color.RGBA{R: 255, A: 255})
	p := rd.params("droid", "say pong")
	p.Attachments = []api.Attachment{{DataB64: b64(red), MimeType: "image/png", Name: "red.png"}}

	res := rd.finished(t, p)
	require.Equal(t, api.StatusSucceeded, res.Status, "%+v", res.Error)
	require.Len(t, res.DroppedAttachments, 1)
	assert.Equal(t, 0, res.DroppedAttachments[0].Index)
	assert.Contains(t, res.DroppedAttachments[0].Reason, "stream-jsonrpc")
	args, stdin := droid.Received(t, res.RunID)
	assert.Equal(t, "say pong", stdin)
	assert.NotContains(t, strings.Join(args, " "), "card-run-", "nothing of the image reached droid")
	rec, err := rd.Client.Run(daemontest.Context(t), res.RunID)
	require.NoError(t, err)
	require.Len(t, rec.Attachments, 1)
	assert.Equal(t, res.DroppedAttachments[0].Reason, rec.Attachments[0].Dropped)
	assert.Equal(t, sha(red), rec.Attachments[0].SHA256)

	_, evs, acc := rd.stream(t, p)
	assert.Equal(t, res.DroppedAttachments, acc.DroppedAttachments, "a streaming client hears it in the first answer")
	got := evs.WaitEnd(t, acc.RunID, 10*time.Second)
	assert.Equal(t, res.DroppedAttachments, got[len(got)-1].Result.DroppedAttachments)

	before, err := rd.Client.Runs(daemontest.Context(t), api.ListParams{})
	require.NoError(t, err)
	p.RequireAttachments = true
	_, err = rd.Client.Invoke(daemontest.Context(t), p)
	re := rpcCode(t, err)
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
	assert.Equal(t, "attachments", errData(t, re)["field"])
	assert.Contains(t, re.Message, "require_attachments")
	after, err := rd.Client.Runs(daemontest.Context(t), api.ListParams{})
	require.NoError(t, err)
	assert.Len(t, after, len(before), "a refused request is not a run")
}

// Every bad attachment is -32602 naming its index and field, and nothing is
// started or recorded for it.
func TestEveryBadAttachmentIsRefusedNamingItsIndexAndField(t *testing.T) {
	rd := startRunsDaemon(t, "[attachments]\nmax_count = 3\nmax_bytes = 2048\n")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	png := testPNG(t, color.RGBA{G: 255, A: 255})
	okPNG := api.Attachment{DataB64: b64(png), MimeType: "image/png"}
	big := append(append([]byte{}, png...), make([]byte, 4096)...)
	fifo := filepath.Join(dir, "pipe.png")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	noRead := write("secret.png", png)
	require.NoError(t, os.Chmod(noRead, 0))

	cases := []struct {
		name  string
		atts  []api.Attachment
		field string
		says  string
	}{
		{"neither path nor data", []api.Attachment{{Name: "x"}}, "attachments[0]", "give path"},
		{"both path and data", []api.Attachment{okPNG, {Path: write("a.png", png), DataB64: b64(png), MimeType: "image/png"}}, "attachments[1]", "not both"},
		{"a relative path", []api.Attachment{{Path: "shots/a.png"}}, "attachments[0].path", "not an absolute path"},
		{"a missing file", []api.Attachment{{Path: filepath.Join(dir, "gone.png")}}, "attachments[0].path", "no such file"},
		{"a directory", []api.Attachment{{Path: dir}}, "attachments[0].path", "not a regular file"},
		{"a FIFO, which would block a read", []api.Attachment{{Path: fifo}}, "attachments[0].path", "not a regular file"},
		{"a text file named .png", []api.Attachment{{Path: write("notes.png", []byte("just some text"))}}, "attachments[0].path", "is not a PNG, JPEG, GIF or WebP image"},
		{"a file too big", []api.Attachment{{Path: write("big.png", big)}}, "attachments[0].path", "max_bytes"},
		{"inline data too big", []api.Attachment{okPNG, okPNG, {DataB64: b64(big), MimeType: "image/png"}}, "attachments[2].data_b64", "max_bytes"},
		{"bad base64", []api.Attachment{okPNG, okPNG, {DataB64: "iVBOR w0K!!", MimeType: "image/png"}}, "attachments[2].data_b64", "base64"},
		{"a data: URL", []api.Attachment{{DataB64: "data:image/png;base64," + b64(png), MimeType: "image/png"}}, "attachments[0].data_b64", "data: URL"},
		{"inline data that is not an image", []api.Attachment{{DataB64: b64([]byte("%PDF-1.7 ...")), MimeType: "image/png"}}, "attachments[0].data_b64", "not a PNG"},
		{"empty inline data", []api.Attachment{{DataB64: "", MimeType: "image/png"}}, "attachments[0]", "give path"},
		{"inline data without a type", []api.Attachment{{DataB64: b64(png)}}, "attachments[0].mime_type", "required with data_b64"},
		{"a type card does not take", []api.Attachment{{DataB64: b64(png), MimeType: "image/svg+xml"}}, "attachments[0].mime_type", "not one of"},
		{"a type the bytes are not", []api.Attachment{{DataB64: b64(png), MimeType: "image/jpeg"}}, "attachments[0].mime_type", "the bytes are a PNG"},
		{"a path whose claimed type the bytes are not", []api.Attachment{{Path: write("b.png", png), MimeType: "image/gif"}}, "attachments[0].mime_type", "the bytes are a PNG"},
		{"a name with a control character", []api.Attachment{{DataB64: b64(png), MimeType: "image/png", Name: "a\nb"}}, "attachments[0].name", "printable"},
		{"more than max_count", []api.Attachment{okPNG, okPNG, okPNG, okPNG}, "attachments", "max_count"},
	}
	if os.Geteuid() != 0 { // root reads a file whatever its mode
		cases = append(cases, struct {
			name  string
			atts  []api.Attachment
			field string
			says  string
		}{"a file card may not read", []api.Attachment{{Path: noRead}}, "attachments[0].path", "permission denied"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := rd.params("claude-code", "look")
			p.Attachments = c.atts
			start := time.Now()
			_, err := rd.Client.Invoke(daemontest.Context(t), p)
			re := rpcCode(t, err)
			assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
			assert.Equal(t, c.field, errData(t, re)["field"], re.Message)
			assert.Contains(t, re.Message, c.says)
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
	runs, err := rd.Client.Runs(daemontest.Context(t), api.ListParams{})
	require.NoError(t, err)
	assert.Empty(t, runs, "a refused attachment starts and records nothing")
	ran, err := filepath.Glob(filepath.Join(rd.agents["claude-code"].Dir, "env-run_*"))
	require.NoError(t, err)
	assert.Empty(t, ran, "the agent never ran")
}

// A claimed type of image/jpg is JPEG's common misspelling, not a mismatch.
func TestImageJpgIsReadAsJPEG(t *testing.T) {
	rd := startRunsDaemon(t, "")
	p := rd.params("claude-code", "look")
	p.Attachments = []api.Attachment{{DataB64: b64(testJPEG(t, color.White)), MimeType: "image/jpg"}}
	res := rd.finished(t, p)
	require.Equal(t, api.StatusSucceeded, res.Status)
	rec, err := rd.Client.Run(daemontest.Context(t), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, "image/jpeg", rec.Attachments[0].MimeType)
}

// A web page the operator allowed may send image bytes, but may not make
// card read a file of the user's by naming its path; a native client may.
func TestABrowserOriginMaySendImageBytesButNotNameAFile(t *testing.T) {
	rd := startRunsDaemon(t, "allowed_origins = [\"https://app.example\"]\n")
	png := testPNG(t, color.Black)
	path := filepath.Join(t.TempDir(), "screenshot.png")
	require.NoError(t, os.WriteFile(path, png, 0o600))
	page := rd.RPC(t, rpcclient.ClientOptions{Header: http.Header{"Origin": {"https://app.example"}}})

	p := rd.params("claude-code", "look")
	p.Attachments = []api.Attachment{{DataB64: b64(png), MimeType: "image/png"}, {Path: path}}
	err := page.Call(daemontest.Context(t), "agents.invoke", p, nil)
	re := rpcCode(t, err)
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
	assert.Equal(t, "attachments[1].path", errData(t, re)["field"])
	assert.Contains(t, re.Message, "https://app.example")
	assert.Contains(t, re.Message, "data_b64")

	p.Attachments = p.Attachments[:1]
	var res api.InvokeResult
	require.NoError(t, page.Call(daemontest.Context(t), "agents.invoke", p, &res))
	assert.Equal(t, api.StatusSucceeded, res.Status)

	p.Attachments = []api.Attachment{{Path: path}}
	native := rd.finished(t, p)
	assert.Equal(t, api.StatusSucceeded, native.Status)
}

// agents.detect tells a client which adapters take images, and it is
// exactly the set whose request with require_attachments is not refused.
func TestDetectSaysWhichAdaptersTakeImages(t *testing.T) {
	rd, _ := startWithDroid(t)
	var list []struct {
		ID           string `json:"id"`
		Capabilities struct {
			Images *bool `json:"images"`
		} `json:"capabilities"`
	}
	require.NoError(t, rd.Client.Call(daemontest.Context(t), "agents.detect", nil, &list))
	require.Len(t, list, 4, "the installed fakes: claude, codex, gemini and droid")
	png := testPNG(t, color.White)
	takes := 0
	for _, a := range list {
		require.NotNil(t, a.Capabilities.Images, "%s: images is always reported", a.ID)
		p := rd.params(a.ID, "look")
		p.Attachments = []api.Attachment{{DataB64: b64(png), MimeType: "image/png"}}
		p.RequireAttachments, p.TimeoutSecs = true, 5
		_, err := rd.Client.Invoke(daemontest.Context(t), p)
		refused := false
		if err != nil {
			re := rpcCode(t, err)
			refused = re.Code == rpcclient.CodeInvalidParams && errData(t, re)["field"] == "attachments"
		}
		assert.Equal(t, *a.Capabilities.Images, !refused, "%s: detect says images=%v, invoke answered %v", a.ID, *a.Capabilities.Images, err)
		if *a.Capabilities.Images {
			takes++
		}
	}
	assert.Equal(t, 3, takes, "both answers occur")
}

// With record_tasks = false an attachment's name, which can say as much as
// a task, is not kept; its type, size and digest still are.
func TestWithoutRecordedTasksAttachmentNamesAreNotKept(t *testing.T) {
	rd := startRunsDaemon(t, "record_tasks = false\n")
	png := testPNG(t, color.White)
	p := rd.params("claude-code", "look")
	p.Attachments = []api.Attachment{{DataB64: b64(png), MimeType: "image/png", Name: "passport.png"}}
	res := rd.finished(t, p)
	rec, err := rd.Client.Run(daemontest.Context(t), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, []api.AttachmentRecord{{Index: 0, MimeType: "image/png", Size: int64(len(png)), SHA256: sha(png)}}, rec.Attachments)
}

// A file that is not an image is refused without its bytes in the answer:
// an error must not become a way to read the start of any file.
func TestARefusedFileIsNotQuoted(t *testing.T) {
	rd := startRunsDaemon(t, "")
	secret := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(secret, []byte("-----BEGIN OPENSSH PRIVATE KEY-----"), 0o600))
	p := rd.params("claude-code", "look")
	p.Attachments = []api.Attachment{{Path: secret}}
	_, err := rd.Client.Invoke(daemontest.Context(t), p)
	re := rpcCode(t, err)
	assert.Equal(t, "attachments[0].path", errData(t, re)["field"])
	assert.NotContains(t, re.Message, hex.EncodeToString([]byte("-----BEGIN")))
	assert.NotContains(t, re.Message, "BEGIN")

	p.Attachments = []api.Attachment{{DataB64: b64([]byte("%PDF-1.7")), MimeType: "image/png"}}
	_, err = rd.Client.Invoke(daemontest.Context(t), p)
	assert.Contains(t, rpcCode(t, err).Message, hex.EncodeToString([]byte("%PDF-1.7")), "the client's own bytes help it see what it sent")
}
