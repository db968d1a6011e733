package spawn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/card-dev/card/api"
)

// Image is one image a run hands the agent: bytes the caller has already
// read, bounded and typed. The agent never reads the client's own file: it
// gets the bytes card checked, in a private copy or on its stdin, so a file
// swapped after the check cannot reach it.
type Image struct {
	// Name is the client's name for it. It is for records and messages
	// only and never becomes part of a path.
	Name string
	// MIME is the type SniffImage found in the bytes.
	MIME string
	// Data is the image in memory; nil when File holds it.
	Data []byte
	// File is card's private copy of the image on disk, for an image too
	// big to keep in memory while the run waits and goes: it is linked into
	// the run's directory or streamed onto the agent's stdin, and read into
	// memory only where a protocol message must carry it whole. The daemon
	// writes it after the run's slot is taken, before Run; a plan built
	// earlier refers to it by this pointer.
	File *ImageFile
}

// ImageFile is where an Image's bytes are on disk and how many there are.
type ImageFile struct {
	// Path is an absolute path in a private (0700) directory of card's.
	Path string
	// Size is the image's length in bytes, known before the file is
	// written.
	Size int64
}

// Size is the image's length in bytes.
func (img Image) Size() int64 {
	if img.File != nil {
		return img.File.Size
	}
	return int64(len(img.Data))
}

// open reads the image's bytes from wherever they are.
func (img Image) open() (io.ReadCloser, error) {
	if img.File != nil {
		return os.Open(img.File.Path)
	}
	return io.NopCloser(bytes.NewReader(img.Data)), nil
}

// sameImage is true when a and b are the very same image (the same memory
// or the same private file), not merely equal bytes.
func sameImage(a, b Image) bool {
	if a.File != nil || b.File != nil {
		return a.File == b.File
	}
	return sameBytes(a.Data, b.Data)
}

// Budget bounds the image bytes the daemon holds in memory at once, across
// runs. Most runs stream their images from disk and take none of it; a
// session protocol (ACP, Codex's app server) must put every image whole
// inside one message, and its run waits here for room first, so a burst of
// such runs cannot take the daemon's memory with it.
type Budget struct {
	mu   sync.Mutex
	max  int64
	used int64
	wake chan struct{} // closed and replaced whenever bytes are given back
}

// NewBudget is a Budget of max bytes; max <= 0 means no bound.
func NewBudget(max int64) *Budget {
	return &Budget{max: max, wake: make(chan struct{})}
}

// Hold waits until n bytes fit (a request for more than the whole budget
// waits for all of it) or ctx ends, and returns the function that gives
// them back.
func (b *Budget) Hold(ctx context.Context, n int64) (func(), error) {
	if b == nil || b.max <= 0 || n <= 0 {
		return func() {}, nil
	}
	n = min(n, b.max)
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					b.mu.Lock()
					b.used -= n
					close(b.wake)
					b.wake = make(chan struct{})
					b.mu.Unlock()
				})
			}, nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// InUse is how many bytes are held now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// inMemory returns images with every file-backed one read into memory, for
// a protocol message that carries them whole.
func inMemory(images []Image) ([]Image, error) {
	out := make([]Image, len(images))
	for i, img := range images {
		out[i] = img
		if img.File == nil {
			continue
		}
		data, err := os.ReadFile(img.File.Path)
		if err != nil {
			return nil, fmt.Errorf("attachments[%d]: card's private copy cannot be read: %w", i, err)
		}
		out[i].Data, out[i].File = data, nil
	}
	return out, nil
}

// ImageType is one image format card recognises, by its first bytes.
type ImageType struct {
	MIME string
	// Ext is the file extension card's private copy gets: Gemini CLI takes an
	// attached file's type from its extension, not its bytes.
	Ext   string
	Label string
	magic func([]byte) bool
}

// ImageTypes are the formats every vision model behind these CLIs accepts.
var ImageTypes = []ImageType{
	{MIME: "image/png", Ext: ".png", Label: "PNG", magic: func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) }},
	{MIME: "image/jpeg", Ext: ".jpg", Label: "JPEG", magic: func(b []byte) bool { return bytes.HasPrefix(b, []byte{0xFF, 0xD8, 0xFF}) }},
	{MIME: "image/gif", Ext: ".gif", Label: "GIF", magic: func(b []byte) bool {
		return bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a"))
	}},
	{MIME: "image/webp", Ext: ".webp", Label: "WebP", magic: func(b []byte) bool {
		return len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP"
	}},
}

// SniffImage returns the type of data from its first bytes, or false when it
// is none of ImageTypes. A name or a claimed type is never consulted: both
// are whatever the sender says.
func SniffImage(data []byte) (ImageType, bool) {
	for _, t := range ImageTypes {
		if t.magic(data) {
			return t, true
		}
	}
	return ImageType{}, false
}

// ImageTypeOf returns the ImageType with the given MIME type.
func ImageTypeOf(mime string) (ImageType, bool) {
	for _, t := range ImageTypes {
		if t.MIME == mime {
			return t, true
		}
	}
	return ImageType{}, false
}

// ImageLabels lists the formats for messages: "PNG, JPEG, GIF or WebP".
func ImageLabels() string {
	labels := make([]string, len(ImageTypes))
	for i, t := range ImageTypes {
		labels[i] = t.Label
	}
	return strings.Join(labels[:len(labels)-1], ", ") + " or " + labels[len(labels)-1]
}

// checkImages refuses an image whose bytes are not the type it claims: the
// caller sniffs, and a mismatch here means a caller skipped that. A
// file-backed image is not written yet when the plan is built; the daemon
// sniffs its bytes as it writes them, and only its type is judged here.
func checkImages(images []Image) error {
	for i, img := range images {
		if img.File != nil {
			if _, known := ImageTypeOf(img.MIME); !known || img.File.Size <= 0 {
				return &api.FieldError{Field: fmt.Sprintf("attachments[%d]", i), Message: fmt.Sprintf("is not a %s image of type %q", ImageLabels(), img.MIME)}
			}
			continue
		}
		t, ok := SniffImage(img.Data)
		if !ok || t.MIME != img.MIME {
			return &api.FieldError{Field: fmt.Sprintf("attachments[%d]", i), Message: fmt.Sprintf("is not a %s image of type %q", ImageLabels(), img.MIME)}
		}
	}
	return nil
}

// InputFormat is what the runner writes on the agent's stdin.
type InputFormat int

const (
	// InputText is the prompt as it is (the zero value).
	InputText InputFormat = iota
	// InputClaudeMessage is one Claude Code stream-json user message: the
	// images as base64 image blocks, then the prompt as a text block.
	InputClaudeMessage
	// InputAtFiles is the prompt followed by an @path reference to each of
	// Input.Files, which is how Gemini CLI attaches a file to a prompt.
	InputAtFiles
)

// Input says how the prompt reaches the agent's stdin when it carries more
// than the prompt's own text.
type Input struct {
	Format InputFormat
	// Images travel inside the message (InputClaudeMessage).
	Images []Image
	// Files are FileRef placeholders of private files the prompt refers to
	// (InputAtFiles); the runner writes their paths, escaped.
	Files []string
}

// imageFiles adds a private 0600 copy of each image to the plan, named by
// its place and its type's extension (never by the client's name), and
// returns the placeholders of their paths.
func (p *Plan) imageFiles(images []Image) []string {
	refs := make([]string, len(images))
	for i, img := range images {
		t, _ := ImageTypeOf(img.MIME)
		name := "image-" + strconv.Itoa(i+1) + t.Ext
		p.Files = append(p.Files, PlanFile{Path: name, Content: img.Data, From: img.File, Mode: 0o600})
		refs[i] = FileRef(name)
	}
	return refs
}

// echoAllowance is the output a CLI spends printing the request's images
// back, times base64's growth: the runner adds it to the run's output limit,
// so a CLI that echoes what it was given (Copilot once, Pi three times) is
// not ended as output_limit for the size of its input.
func echoAllowance(images []Image, times int) int64 {
	var n int64
	for _, img := range images {
		n += (img.Size()+2)/3*4 + 256
	}
	return n * int64(times)
}

// delivers reports whether the plan hands the agent every image: in the
// message on stdin, or as a private file the argv, the environment or the
// prompt names. Build holds every builder to it, so an adapter that says it
// takes images cannot quietly drop one.
func (p Plan) delivers(images []Image) error {
	named := strings.Join(append(p.Args, p.Input.Files...), "\x00")
	for _, v := range p.Env {
		named += "\x00" + v
	}
	for i, img := range images {
		found := false
		for _, in := range p.Input.Images {
			found = found || sameImage(in, img)
		}
		for _, f := range p.Files {
			found = found || (sameImage(Image{Data: f.Content, File: f.From}, img) && strings.Contains(named, FileRef(f.Path)))
		}
		if !found {
			return fmt.Errorf("attachments[%d] is in no part of the plan", i)
		}
	}
	return nil
}

// sameBytes is true when a and b are the same slice (not merely equal
// content): the plan must carry the very image it was given.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// writeInput writes the prompt, with what the plan adds to it, on the
// agent's stdin. paths are the Input.Files placeholders' real paths.
func writeInput(w io.Writer, in Input, prompt string, paths []string) error {
	switch in.Format {
	case InputClaudeMessage:
		return writeClaudeMessage(w, prompt, in.Images)
	case InputAtFiles:
		refs := make([]string, len(paths))
		for i, p := range paths {
			refs[i] = geminiAtPath(p)
		}
		_, err := io.WriteString(w, prompt+"\n\n"+strings.Join(refs, " ")+"\n")
		return err
	}
	_, err := io.WriteString(w, prompt)
	return err
}

// claudeImageBlock is an Anthropic Messages image block; encoding/json
// writes Data as standard base64.
type claudeImageBlock struct {
	Type   string `json:"type"`
	Source struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      []byte `json:"data"`
	} `json:"source"`
}

type claudeTextBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// writeClaudeMessage writes one stream-json user message on one line: the
// images first (Anthropic's advice for vision prompts), then the text. Each
// image is base64-encoded as it is copied from its bytes (card's private
// file, usually) onto stdin, so no image's base64 is ever in memory whole. Claude Code reads one message per
// line and the runner closes stdin after it: with stdin open, Claude prints
// its result and then waits for the next message instead of exiting.
func writeClaudeMessage(w io.Writer, text string, images []Image) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	_, _ = bw.WriteString(`{"type":"user","message":{"role":"user","content":[`)
	for _, img := range images {
		// The same bytes json.Marshal makes of a claudeImageBlock; the MIME
		// is one of ImageTypes', which need no escaping.
		if _, known := ImageTypeOf(img.MIME); !known {
			return fmt.Errorf("image type %q is not one card sends", img.MIME)
		}
		_, _ = bw.WriteString(`{"type":"image","source":{"type":"base64","media_type":"` + img.MIME + `","data":"`)
		src, err := img.open()
		if err != nil {
			return err
		}
		enc := base64.NewEncoder(base64.StdEncoding, bw)
		_, err = io.Copy(enc, src)
		src.Close()
		if err == nil {
			err = enc.Close()
		}
		if err != nil {
			return err
		}
		_, _ = bw.WriteString(`"}},`)
	}
	b, err := json.Marshal(claudeTextBlock{Type: "text", Text: text})
	if err != nil {
		return err
	}
	_, _ = bw.Write(b)
	_, _ = bw.WriteString("]}}\n")
	return bw.Flush()
}

// geminiAtPath is an @ reference Gemini CLI reads as "attach this file":
// every character its reference grammar would stop at, or read as an
// escape, is escaped with a backslash (Gemini unescapes `\x` to `x`).
func geminiAtPath(path string) string {
	var b strings.Builder
	b.WriteByte('@')
	for _, r := range path {
		if r < 0x80 && !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/_-+~%=:", r)) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
