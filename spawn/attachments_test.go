package spawn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Synthetic images: SniffImage reads only the first bytes, and no test here
// hands them to a decoder.
var (
	pngBytes  = append([]byte("\x89PNG\r\n\x1a\n"), []byte("\x00\x00\x00\rIHDR-png-body")...)
	jpegBytes = append([]byte{0xFF, 0xD8, 0xFF, 0xE0}, []byte("jpeg-body")...)
)

func testImages() []Image {
	return []Image{{Name: "shot.png", MIME: "image/png", Data: pngBytes}, {Name: "photo", MIME: "image/jpeg", Data: jpegBytes}}
}

func TestImagesAreRecognisedByTheirFirstBytesOnly(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"png", pngBytes, "image/png"},
		{"jpeg", jpegBytes, "image/jpeg"},
		{"gif87a", []byte("GIF87a\x01\x00"), "image/gif"},
		{"gif89a", []byte("GIF89a\x01\x00"), "image/gif"},
		{"webp", []byte("RIFF\x24\x00\x00\x00WEBPVP8 "), "image/webp"},
		{"a wave file is RIFF but not WebP", []byte("RIFF\x24\x00\x00\x00WAVEfmt "), ""},
		{"a truncated RIFF header", []byte("RIFF\x24\x00"), ""},
		{"text named like an image", []byte("just text, saved as cat.png"), ""},
		{"a PNG signature cut short", []byte("\x89PNG\r\n"), ""},
		{"empty", nil, ""},
		{"svg, which can carry script", []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := SniffImage(c.data)
			assert.Equal(t, c.want != "", ok)
			assert.Equal(t, c.want, got.MIME)
		})
	}
	assert.Equal(t, "PNG, JPEG, GIF or WebP", ImageLabels())
}

// capabilities.images is what a client is told; it must be exactly the set
// of adapters whose plans carry every image. Build refuses a builder that
// drops one, so a plan that builds is a plan that delivers.
func TestCapabilitiesImagesIsExactlyWhatTheBuildersDeliver(t *testing.T) {
	for _, a := range agent.All() {
		t.Run(a.ID, func(t *testing.T) {
			for _, mode := range Modes {
				imgs := testImages()
				p, err := Build("/bin/"+a.ID, Request{Adapter: a.ID, Mode: mode, Cwd: cwd, AllowBypass: true, Images: imgs})
				var refused *api.FieldError
				if errors.As(err, &refused) && refused.Field == "permission_mode" {
					continue // a mode the adapter refuses whatever the images (Droid edit, ask)
				}
				if !a.Capabilities.Images {
					var fe *api.FieldError
					require.ErrorAs(t, err, &fe)
					assert.Equal(t, "attachments", fe.Field)
					assert.Contains(t, fe.Message, a.NoImages)
					continue
				}
				require.NoError(t, err, mode)
				require.NoError(t, p.delivers(imgs))
				for i, img := range imgs {
					n := 0
					for _, f := range p.Files {
						if sameBytes(f.Content, img.Data) {
							n++
							assert.EqualValues(t, 0o600, f.Mode)
							assert.NotContains(t, f.Path, img.Name, "a client's name never becomes a path")
						}
					}
					for _, in := range p.Input.Images {
						if sameBytes(in.Data, img.Data) {
							n++
						}
					}
					assert.Equal(t, 1, n, "image %d travels exactly once", i)
				}
			}
		})
	}
}

// How each CLI is handed two images, whole: the flags are part of the
// boundary review reads, and each form was checked against the real CLI.
func TestTheImageArgvIsPinnedPerAdapter(t *testing.T) {
	const piBase = `-p --mode json --no-session -nc --no-extensions --no-skills --no-prompt-templates --no-themes --offline --tools read,grep,find,ls`
	cases := []struct {
		adapter string
		args    string
		input   Input
	}{
		{"claude-code", `-p --output-format stream-json --verbose --include-partial-messages --permission-mode dontAsk --disallowedTools Task --setting-sources  --strict-mcp-config --input-format stream-json --tools Read,Grep,Glob --allowedTools Read Grep Glob`,
			Input{Format: InputClaudeMessage, Images: testImages()}},
		{"codex", `exec --json --ignore-user-config --ignore-rules --color never --skip-git-repo-check --sandbox read-only -c approval_policy="never" --image={{card-file:image-1.png}} --image={{card-file:image-2.jpg}} -`, Input{}},
		{"gemini", `--output-format stream-json --approval-mode plan --include-directories {{card-file:}}`,
			Input{Format: InputAtFiles, Files: []string{"{{card-file:image-1.png}}", "{{card-file:image-2.jpg}}"}}},
		{"copilot", `--output-format json --no-ask-user --no-auto-update --no-custom-instructions --disable-builtin-mcps --disallow-temp-dir --no-color --deny-tool write --deny-tool shell --allow-tool read --attachment {{card-file:image-1.png}} --attachment {{card-file:image-2.jpg}}`, Input{}},
		{"pi", piBase + ` @{{card-file:image-1.png}} @{{card-file:image-2.jpg}}`, Input{}},
	}
	for _, c := range cases {
		t.Run(c.adapter, func(t *testing.T) {
			p, err := Build("/bin/x", Request{Adapter: c.adapter, Cwd: cwd, Images: testImages()})
			require.NoError(t, err)
			assert.Equal(t, c.args, strings.Join(p.Args, " "))
			assert.Equal(t, c.input, p.Input)
		})
	}
}

func TestCodexResumeStillTakesTheImages(t *testing.T) {
	p, err := Build("/bin/codex", Request{Adapter: "codex", Cwd: cwd, Resume: "01a22933-78e1-7402-8487-514b5febcff9", Images: testImages()[:1]})
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(strings.Join(p.Args, " "), `--image={{card-file:image-1.png}} -c sandbox_mode="read-only" resume 01a22933-78e1-7402-8487-514b5febcff9 -`),
		strings.Join(p.Args, " "))
}

// A CLI that prints its input back gets that much more output before the
// run is ended as output_limit; one that prints nothing back gets nothing.
func TestTheEchoOfTheImagesIsAllowedForOnTopOfTheOutputLimit(t *testing.T) {
	big := []Image{{MIME: "image/png", Data: append(append([]byte{}, pngBytes...), make([]byte, 3000)...)}}
	b64 := int64(base64.StdEncoding.EncodedLen(len(big[0].Data)))
	for id, times := range map[string]int64{"copilot": 1, "pi": 3, "claude-code": 0, "codex": 0, "gemini": 0} {
		p, err := Build("/bin/x", Request{Adapter: id, Cwd: cwd, Images: big})
		require.NoError(t, err)
		assert.GreaterOrEqual(t, p.OutputAllowance, times*b64, id)
		assert.LessOrEqual(t, p.OutputAllowance, times*(b64+1024), id)
	}

	// The runner applies it: 3000 bytes over a 2000-byte limit pass with
	// an allowance of 1500.
	plan := shPlan(t, `head -c 3000 /dev/zero | tr '\0' 'x'; echo`)
	_, err := Run(context.Background(), RunSpec{Plan: plan, Parser: &rawParser{}, Limits: Limits{MaxOutput: 2000}})
	assert.Equal(t, api.KindOutputLimit, runErr(t, err).Kind)
	plan.OutputAllowance = 1500
	_, err = Run(context.Background(), RunSpec{Plan: plan, Parser: &rawParser{}, Limits: Limits{MaxOutput: 2000}})
	require.NoError(t, err)
}

// A builder that drops an image, or carries a copy rather than the image
// it was given, is caught before any process exists.
func TestAPlanThatDropsAnImageIsCaught(t *testing.T) {
	imgs := testImages()
	var p Plan
	refs := p.imageFiles(imgs)
	p.Args = []string{"--image=" + refs[0]}
	assert.EqualError(t, p.delivers(imgs), "attachments[1] is in no part of the plan")
	p.Args = append(p.Args, "--image="+refs[1])
	assert.NoError(t, p.delivers(imgs))

	copied := Plan{Input: Input{Format: InputClaudeMessage, Images: []Image{{MIME: "image/png", Data: append([]byte{}, pngBytes...)}}}}
	assert.Error(t, copied.delivers(imgs[:1]), "equal bytes in another slice are not the image the request carried")

	// A file written but named nowhere is not delivered either.
	unnamed := Plan{}
	unnamed.imageFiles(imgs[:1])
	assert.Error(t, unnamed.delivers(imgs[:1]))
}

func TestAnImageWhoseBytesAreNotItsTypeIsRefused(t *testing.T) {
	for _, img := range []Image{
		{MIME: "image/png", Data: jpegBytes},
		{MIME: "image/png", Data: []byte("not an image")},
		{MIME: "image/svg+xml", Data: []byte("<svg/>")},
	} {
		_, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Images: []Image{img}})
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, "attachments[0]", fe.Field)
	}
}

// Claude Code reads one stream-json user message per line. The images go
// first as base64 blocks with their sniffed type, the prompt last, and the
// line ends so Claude starts; the runner then closes stdin.
func TestTheClaudeMessageOnStdinIsOneLineWithTheImagesThenThePrompt(t *testing.T) {
	p := &rawParser{}
	prompt := "What is in these images?\nTwo lines, \"quoted\", and ünïcode."
	plan := Plan{Program: tool(t, "cat"), Dir: t.TempDir(), Input: Input{Format: InputClaudeMessage, Images: testImages()}}
	_, err := Run(context.Background(), RunSpec{Plan: plan, Prompt: prompt, Parser: p})
	require.NoError(t, err)
	out := p.b.String()
	require.Equal(t, 1, strings.Count(out, "\n"), "one message, one line")
	var msg struct {
		Type    string `json:"type"`
		Message struct {
			Role    string `json:"role"`
			Content []struct {
				Type   string `json:"type"`
				Text   string `json:"text"`
				Source struct {
					Type      string `json:"type"`
					MediaType string `json:"media_type"`
					Data      string `json:"data"`
				} `json:"source"`
			} `json:"content"`
		} `json:"message"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&msg))
	assert.Equal(t, "user", msg.Type)
	assert.Equal(t, "user", msg.Message.Role)
	require.Len(t, msg.Message.Content, 3)
	for i, img := range testImages() {
		c := msg.Message.Content[i]
		assert.Equal(t, "image", c.Type)
		assert.Equal(t, "base64", c.Source.Type)
		assert.Equal(t, img.MIME, c.Source.MediaType)
		data, err := base64.StdEncoding.DecodeString(c.Source.Data)
		require.NoError(t, err)
		assert.Equal(t, img.Data, data)
	}
	assert.Equal(t, "text", msg.Message.Content[2].Type)
	assert.Equal(t, prompt, msg.Message.Content[2].Text)
}

// Gemini attaches a file named by an @path in the prompt. The runner writes
// each private copy's real path there, escaped so that a temporary
// directory with spaces or brackets is still one reference, and the files
// exist, 0600, while the agent runs.
func TestGeminiAtReferencesNameThePrivateCopiesWhileTheAgentRuns(t *testing.T) {
	tmp := filepath.Join(t.TempDir(), "tmp dir (1)")
	require.NoError(t, os.Mkdir(tmp, 0o700))
	p := &rawParser{}
	// Print stdin, then the mode and content of each file the references
	// name (unescaped as Gemini does: a backslash quotes the next byte).
	plan := shPlan(t, `cat; echo; for f in "$@"; do stat -c '%a %s' "$f"; done`)
	var req Plan
	refs := req.imageFiles(testImages())
	plan.Files = req.Files
	plan.Args = append(plan.Args, "sh", refs[0], refs[1])
	plan.Input = Input{Format: InputAtFiles, Files: refs}
	_, err := Run(context.Background(), RunSpec{Plan: plan, Prompt: "Describe", Parser: p, TempDir: tmp})
	require.NoError(t, err)
	// The runner hands the parser non-blank lines only.
	lines := strings.Split(p.b.String(), "\n")
	require.Len(t, lines, 5, p.b.String())
	assert.Equal(t, "Describe", lines[0])
	fields := strings.Split(lines[1], " @")
	require.Len(t, fields, 2, lines[1])
	for i, f := range fields {
		path := unescapeGemini(strings.TrimPrefix(f, "@"))
		assert.True(t, strings.HasPrefix(path, tmp+string(filepath.Separator)+"card-run-"), path)
		assert.Equal(t, []string{"image-1.png", "image-2.jpg"}[i], filepath.Base(path))
		assert.NotContains(t, strings.ReplaceAll(f, `\ `, ""), " ", "a space inside a path is escaped")
	}
	assert.Equal(t, []string{fmt.Sprintf("600 %d", len(pngBytes)), fmt.Sprintf("600 %d", len(jpegBytes)), ""}, lines[2:])
}

// unescapeGemini undoes geminiAtPath as Gemini CLI 0.61.0 does
// (unescapePath: `\x` → `x`).
func unescapeGemini(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func TestGeminiAtPathsEscapeEveryCharacterItsGrammarStopsAt(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"/tmp/card-run-1/image-1.png", `@/tmp/card-run-1/image-1\.png`},
		{"/tmp/my dir/(x)[y]{z}!?,;/a.png", `@/tmp/my\ dir/\(x\)\[y\]\{z\}\!\?\,\;/a\.png`},
		{"/tmp/ünï/b.gif", `@/tmp/ünï/b\.gif`},
	} {
		got := geminiAtPath(c.path)
		assert.Equal(t, c.want, got)
		assert.Equal(t, c.path, unescapeGemini(strings.TrimPrefix(got, "@")))
	}
}

// Codex splits an --image path at commas, so a private directory with one
// in its path is refused before the agent starts (as are the characters
// that cannot be quoted).
func TestAPrivateDirectoryWithACommaIsRefused(t *testing.T) {
	tmp := filepath.Join(t.TempDir(), "a,b")
	require.NoError(t, os.Mkdir(tmp, 0o700))
	plan := shPlan(t, `true`)
	plan.Files = []PlanFile{{Path: "image-1.png", Content: pngBytes}}
	_, err := Run(context.Background(), RunSpec{Plan: plan, TempDir: tmp})
	e := runErr(t, err)
	assert.Equal(t, api.KindSpawn, e.Kind)
	assert.Contains(t, e.Message, "set TMPDIR to a plain path")
}

func TestAnAtReferenceToAFileThePlanDoesNotWriteIsRefused(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	plan := shPlan(t, `touch "$0"; cat`)
	plan.Args = append(plan.Args, marker)
	plan.Input = Input{Format: InputAtFiles, Files: []string{FileRef("image-1.png")}}
	_, err := Run(context.Background(), RunSpec{Plan: plan, Prompt: "x"})
	e := runErr(t, err)
	assert.Equal(t, api.KindSpawn, e.Kind)
	assert.Contains(t, e.Message, "refers to a file the plan does not write")
	_, statErr := os.Stat(marker)
	assert.True(t, os.IsNotExist(statErr), "the child started")
}
