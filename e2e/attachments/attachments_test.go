// Package attachments_test runs each real agent CLI through the real
// daemon with images attached, against the loopback vendor-API stand-ins,
// and checks the only thing that proves an attachment works: the image's
// bytes arrived in the model request (an Anthropic image block, a Responses
// input_image, Gemini inline data). Droid, whose headless mode takes no
// images, must list them as dropped and send none.
//
// Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1); see standin.CLI.
package attachments_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// agentCLI is one real CLI pointed at a stand-in the way an operator would
// point it, and how the stand-in must see the images.
type agentCLI struct {
	id, bin string
	// start starts the stand-in and returns it with the daemon's
	// environment additions and the adapter's card.toml table.
	start func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any)
	// form is how the model request must carry each image ("" for none).
	form string
}

var clis = []agentCLI{
	{id: agent.ClaudeCode, bin: "claude", form: "anthropic_image",
		start: func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
			s := standin.NewAnthropic(t, standin.Script{Answer: answer})
			return s, s.ClaudeEnv(home, path), nil
		}},
	{id: agent.Codex, bin: "codex", form: "input_image",
		start: func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
			s := standin.NewOpenAI(t, standin.Script{Answer: answer})
			args, env := s.CodexExtras()
			return s, []string{"NO_COLOR=1"}, map[string]any{"args": args, "env": env}
		}},
	{id: agent.Gemini, bin: "gemini", form: "inline_data",
		start: func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
			s := standin.NewGemini(t, standin.Script{Answer: answer})
			env, err := s.GeminiSetup(home, path)
			require.NoError(t, err)
			// Workspace trust is the operator's call (spawn never passes it).
			return s, env, map[string]any{"args": []string{"--skip-trust"}}
		}},
	{id: agent.Copilot, bin: "copilot", form: "anthropic_image",
		start: func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
			s := standin.NewAnthropic(t, standin.Script{Answer: answer})
			return s, nil, map[string]any{"env": standin.AdapterEnv(s.CopilotEnv(home, path))}
		}},
	{id: agent.Pi, bin: "pi", form: "anthropic_image",
		start: func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
			s := standin.NewAnthropic(t, standin.Script{Answer: answer})
			env, args, err := s.PiSetup(home, path)
			require.NoError(t, err)
			return s, nil, map[string]any{"args": args, "env": standin.AdapterEnv(env)}
		}},
	{id: agent.Droid, bin: "droid", form: "",
		start: func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
			s := standin.NewAnthropic(t, standin.Script{Answer: answer})
			env, args, err := s.DroidSetup(home, path)
			require.NoError(t, err)
			return s, nil, map[string]any{"args": args, "env": standin.AdapterEnv(env)}
		}},
}

const answer = "Red and blue, says the card stand-in"

// images are a red PNG and a blue JPEG, real images (a CLI may decode
// what it sends), made by the standard library.
func images(t *testing.T) (red, blue []byte) {
	t.Helper()
	solid := func(c color.Color) image.Image {
		img := image.NewRGBA(image.Rect(0, 0, 8, 8))
		for x := range 8 {
			for y := range 8 {
				img.Set(x, y, c)
			}
		}
		return img
	}
	var r, b bytes.Buffer
	require.NoError(t, png.Encode(&r, solid(color.RGBA{R: 255, A: 255})))
	require.NoError(t, jpeg.Encode(&b, solid(color.RGBA{B: 255, A: 255}), nil))
	return r.Bytes(), b.Bytes()
}

// session is one daemon running one real CLI against its stand-in.
type session struct {
	srv    *standin.Server
	d      *daemontest.Daemon
	c      *client.Client
	cwd    string
	events *daemontest.Events
}

func start(t *testing.T, cli agentCLI, binary string, config map[string]any) *session {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node must be on PATH to run the npm-installed CLIs")
	path := strings.Join([]string{filepath.Dir(binary), filepath.Dir(node), "/usr/local/bin", "/usr/bin", "/bin"}, ":")
	home := t.TempDir()
	srv, environ, adapterCfg := cli.start(t, home, path)
	cfg := map[string]any{"login_shell_path": false, "probe_timeout_secs": 90}
	for k, v := range config {
		cfg[k] = v
	}
	if adapterCfg != nil {
		cfg["adapters"] = map[string]any{cli.id: adapterCfg}
	}
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	s := &session{srv: srv, cwd: filepath.Join(home, "project"), events: daemontest.NewEvents()}
	require.NoError(t, os.MkdirAll(s.cwd, 0o755))
	s.d = daemontest.Start(t, daemontest.Options{
		Home:    filepath.Join(t.TempDir(), "card"),
		Config:  buf.String(),
		Environ: append([]string{"HOME=" + home, "PATH=" + path}, environ...),
		Agents:  map[string]string{cli.id: binary},
		Client:  client.Options{OnEvent: s.events.Add},
	})
	s.c = s.d.Client
	return s
}

// The red PNG goes inline, the blue JPEG by path; every CLI that takes
// images must deliver both to the model API byte for byte, and the run
// must succeed with the stand-in's answer, record both attachments, and
// keep their bytes out of its events.
func TestEveryRealCLIThatTakesImagesDeliversTheirBytesToTheModel(t *testing.T) {
	for _, cli := range clis {
		t.Run(cli.id, func(t *testing.T) {
			binary := standin.CLI(t, cli.bin)
			t.Parallel()
			red, blue := images(t)
			s := start(t, cli, binary, nil)
			bluePath := filepath.Join(t.TempDir(), "blue image.jpg")
			require.NoError(t, os.WriteFile(bluePath, blue, 0o600))

			p := api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: cli.id, Cwd: s.cwd, TimeoutSecs: 240, AcknowledgeUnenforcedReadOnly: cli.id == agent.Pi},
				Task:          "What colours are these two images?",
				Stream:        true,
				Attachments: []api.Attachment{
					{DataB64: base64.StdEncoding.EncodeToString(red), MimeType: "image/png", Name: "red.png"},
					{Path: bluePath},
				},
			}
			acc, err := s.c.Stream(daemontest.Context(t), p, nil)
			require.NoError(t, err)
			evs := s.events.WaitEnd(t, acc.RunID, 5*time.Minute)
			last := evs[len(evs)-1]
			require.NotNil(t, last.Result)
			require.Equal(t, api.EventDone, last.Kind, "status %s, error %+v", last.Status, last.Result.Error)
			assert.Equal(t, answer, strings.TrimSpace(last.Result.Answer))

			seen := s.srv.Images()
			if cli.form == "" {
				assert.Empty(t, seen, "%s was given no image, so none may reach the model", cli.id)
				require.Len(t, acc.DroppedAttachments, 2)
				assert.Equal(t, acc.DroppedAttachments, last.Result.DroppedAttachments)
				for i, d := range acc.DroppedAttachments {
					assert.Equal(t, i, d.Index)
					assert.Contains(t, d.Reason, "stream-jsonrpc")
				}
			} else {
				assert.Empty(t, acc.DroppedAttachments)
				require.NotEmpty(t, seen, "no image reached the model")
				first := seen[0].Call
				var got []standin.Image
				for _, img := range seen {
					if img.Call == first {
						got = append(got, img)
					}
				}
				require.Len(t, got, 2, "the first model call carries both images")
				for i, want := range []struct {
					mime string
					data []byte
				}{{"image/png", red}, {"image/jpeg", blue}} {
					assert.Equal(t, cli.form, got[i].Form)
					assert.Equal(t, want.mime, got[i].MIME, "image %d", i)
					assert.True(t, bytes.Equal(want.data, got[i].Data), "image %d arrived changed (%d bytes, sent %d)", i, len(got[i].Data), len(want.data))
				}
			}

			rec, err := s.c.Run(daemontest.Context(t), acc.RunID)
			require.NoError(t, err)
			assert.Equal(t, api.StatusSucceeded, rec.Status)
			require.Len(t, rec.Attachments, 2)
			assert.Equal(t, "red.png", rec.Attachments[0].Name)
			assert.Equal(t, "blue image.jpg", rec.Attachments[1].Name)
			assert.Equal(t, "image/jpeg", rec.Attachments[1].MimeType)
			assert.EqualValues(t, len(blue), rec.Attachments[1].Size)

			wire, err := json.Marshal(evs)
			require.NoError(t, err)
			for _, img := range [][]byte{red, blue} {
				assert.NotContains(t, string(wire), base64.StdEncoding.EncodeToString(img)[:32], "an image's bytes are in the run's events")
			}
			t.Logf("%s: %d model calls, %d images seen, events %s", cli.id, len(s.srv.ModelCalls()), len(seen), daemontest.Kinds(evs))
		})
	}
}

// Pi sends an image only to a model that declares image input. For one
// that does not, it puts a placeholder text in the image's place, and its
// own output says nothing of it: the run succeeds and the model saw no
// image. This is why the protocol document tells Pi users to check the
// model's declared input.
func TestPiReplacesTheImageWithTextForAModelWithoutImageInput(t *testing.T) {
	binary := standin.CLI(t, "pi")
	red, _ := images(t)
	cli := agentCLI{id: agent.Pi, start: func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
		s := standin.NewAnthropic(t, standin.Script{Answer: answer})
		env, args, err := s.PiSetupInput(home, path, "text")
		require.NoError(t, err)
		return s, nil, map[string]any{"args": args, "env": standin.AdapterEnv(env)}
	}}
	s := start(t, cli, binary, nil)
	res, err := s.c.Invoke(daemontest.Context(t), api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: agent.Pi, Cwd: s.cwd, TimeoutSecs: 240, AcknowledgeUnenforcedReadOnly: true},
		Task:          "What colour is this?",
		Attachments:   []api.Attachment{{DataB64: base64.StdEncoding.EncodeToString(red), MimeType: "image/png"}},
	})
	require.NoError(t, err)
	require.Equal(t, api.StatusSucceeded, res.Status, "%+v", res.Error)
	assert.Empty(t, res.DroppedAttachments, "card handed Pi the image")
	assert.Empty(t, s.srv.Images(), "Pi sent no image to a text-only model")
	assert.True(t, s.srv.TextContains("(image omitted: model does not support images)"))
}

// Codex resumes a session with `exec … resume ID -`; the images of the
// resumed turn go with the exec-level --image flags before `resume`, and
// must reach the model as they do in a first turn.
func TestCodexTakesImagesWhenItResumesASession(t *testing.T) {
	binary := standin.CLI(t, "codex")
	red, _ := images(t)
	s := start(t, clis[1], binary, nil)
	ctx := daemontest.Context(t)
	first, err := s.c.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.Codex, Cwd: s.cwd, TimeoutSecs: 240}, Task: "Remember the word kumquat."})
	require.NoError(t, err)
	require.Equal(t, api.StatusSucceeded, first.Status, "%+v", first.Error)
	require.NotEmpty(t, first.SessionID)
	require.Empty(t, s.srv.Images())

	second, err := s.c.Invoke(ctx, api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: agent.Codex, Cwd: s.cwd, TimeoutSecs: 240},
		Task:          "And what colour is this?",
		Resume:        first.SessionID,
		Attachments:   []api.Attachment{{DataB64: base64.StdEncoding.EncodeToString(red), MimeType: "image/png"}},
	})
	require.NoError(t, err)
	require.Equal(t, api.StatusSucceeded, second.Status, "%+v", second.Error)
	assert.Equal(t, first.SessionID, second.SessionID)
	seen := s.srv.Images()
	require.NotEmpty(t, seen, "the resumed turn's image never reached the model")
	assert.Equal(t, red, seen[len(seen)-1].Data)
	assert.True(t, s.srv.TextContains("kumquat"), "the resumed call carries the first turn")
}

// noisePNG is a PNG of random pixels, which does not compress: about
// 4 bytes per pixel.
func noisePNG(t *testing.T, side int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, side, side))
	_, err := rand.Read(img.Pix)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return b.Bytes()
}

// Copilot prints its user message back with every image's base64, and Pi
// prints it three times. With max_output_bytes well below that echo, the
// run must still succeed: the allowance for the echo is what the CLI
// really prints, not a guess that ends the run as output_limit.
func TestACLIThatEchoesAnImageIsNotEndedByTheOutputLimit(t *testing.T) {
	for _, cli := range []agentCLI{clis[3], clis[4]} {
		t.Run(cli.id, func(t *testing.T) {
			binary := standin.CLI(t, cli.bin)
			t.Parallel()
			img := noisePNG(t, 160) // about 100 KiB, 136 KiB as base64
			const limit = 96 << 10
			require.Greater(t, base64.StdEncoding.EncodedLen(len(img)), limit, "the echo alone must pass the limit")
			s := start(t, cli, binary, map[string]any{"max_output_bytes": limit})
			res, err := s.c.Invoke(daemontest.Context(t), api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: cli.id, Cwd: s.cwd, TimeoutSecs: 240, AcknowledgeUnenforcedReadOnly: cli.id == agent.Pi},
				Task:          "Describe this noise.",
				Attachments:   []api.Attachment{{DataB64: base64.StdEncoding.EncodeToString(img), MimeType: "image/png"}},
			})
			require.NoError(t, err)
			require.Equal(t, api.StatusSucceeded, res.Status, "%+v", res.Error)
			seen := s.srv.Images()
			require.NotEmpty(t, seen)
			assert.Equal(t, img, seen[0].Data)
		})
	}
}
