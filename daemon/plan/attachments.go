package plan

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

// maxAttachmentName bounds a name kept in the run history.
const maxAttachmentName = 255

// AttachmentLimits is the [attachments] table.
type AttachmentLimits struct {
	// MaxCount is how many attachments one request may carry; 0 refuses
	// every attachment.
	MaxCount int `toml:"max_count"`
	// MaxBytes bounds each attachment's size, decoded.
	MaxBytes int64 `toml:"max_bytes"`
	// MaxBytesInFlight bounds the attachment bytes the daemon holds in
	// memory at once, across every run: an image is streamed from card's
	// private copy on disk, except where a session protocol (ACP, Codex's
	// app server) carries it whole in one message; such a run waits for
	// room first.
	MaxBytesInFlight int64 `toml:"max_bytes_in_flight"`
}

// attachment is one checked attachment: the image the plan refers to,
// what the run's record keeps of it, and where its bytes are to be read
// from once the run's slot is taken.
type attachment struct {
	image  spawn.Image
	record api.AttachmentRecord
	// file is the client's file, open since it was checked (path); b64 the
	// client's base64 (data_b64), already in memory as the request.
	file *os.File
	b64  string
	// field names it in an error: attachments[i].path or .data_b64.
	field string
}

// MayNameFiles refuses a path attachment from a browser page. With a path,
// card itself reads a file of the user's and hands it to an agent whose
// vendor, and whose answer, the page then sees: a page the operator allowed
// for running agents would otherwise be able to pick any image-typed file
// on the machine. A page sends the bytes it has (data_b64) instead. A
// native client holding the token is the user's own program and may name
// files.
func MayNameFiles(origin string, list []api.Attachment) error {
	if origin == "" {
		return nil
	}
	for i, a := range list {
		if a.Path != "" {
			return api.InvalidField(fmt.Sprintf("attachments[%d].path", i),
				"a connection from a web page (Origin %s) may not make card read files on this machine; send the image's bytes as data_b64 with mime_type", origin)
		}
	}
	return nil
}

// Reading a file is bounded in time: a file on a stalled network or FUSE
// mount, or a kernel file that waits for data, would otherwise hold the
// request, and its descriptor, for ever.
var (
	attachmentHeadTimeout = 5 * time.Second
	attachmentReadTimeout = 60 * time.Second
)

// sniffLen is enough of an image's first bytes to tell its type.
const sniffLen = 16

// readAttachments checks every attachment, in order, from what is cheap to
// know: its fields, its size, and its type from its first bytes. The first
// bad one is a -32602 naming its index and field; nothing is started for a
// request with one. The bytes themselves are read later, by stage, once
// the run has its slot: a request the gate refuses costs no more than
// this. The caller closes what it gets (closeAttachments) unless stage
// does.
func readAttachments(list []api.Attachment, lim AttachmentLimits) ([]attachment, error) {
	if len(list) == 0 {
		return nil, nil
	}
	if len(list) > lim.MaxCount {
		return nil, api.InvalidField("attachments", "%d attachments; at most %d per run ([attachments] max_count in card.toml)", len(list), lim.MaxCount)
	}
	out := make([]attachment, 0, len(list))
	for i, a := range list {
		at, err := readAttachment(i, a, lim.MaxBytes)
		if err != nil {
			closeAttachments(out)
			return nil, err
		}
		out = append(out, at)
	}
	return out, nil
}

// closeAttachments lets go of every client file still open.
func closeAttachments(list []attachment) {
	for i := range list {
		if list[i].file != nil {
			list[i].file.Close()
			list[i].file = nil
		}
	}
}

func readAttachment(i int, a api.Attachment, maxBytes int64) (attachment, error) {
	field := func(name string) string {
		if name == "" {
			return fmt.Sprintf("attachments[%d]", i)
		}
		return fmt.Sprintf("attachments[%d].%s", i, name)
	}
	switch {
	case a.Path == "" && a.DataB64 == "":
		return attachment{}, api.InvalidField(field(""), "give path (an absolute path to an image file) or data_b64 with mime_type")
	case a.Path != "" && a.DataB64 != "":
		return attachment{}, api.InvalidField(field(""), "give path or data_b64, not both")
	}
	if len(a.Name) > maxAttachmentName || !utf8.ValidString(a.Name) || strings.ContainsFunc(a.Name, unicode.IsControl) {
		return attachment{}, api.InvalidField(field("name"), "must be printable text of at most %d bytes", maxAttachmentName)
	}
	var (
		head   []byte
		size   int64
		digest string
		source string
		at     attachment
	)
	if a.Path != "" {
		source = "path"
		f, n, h, err := openImageFile(a.Path, maxBytes)
		if err != nil {
			return attachment{}, api.InvalidField(field(source), "%v", err)
		}
		at.file, size, head = f, n, h
		if a.Name == "" {
			a.Name = filepath.Base(a.Path)
		}
	} else {
		source = "data_b64"
		if a.MimeType == "" {
			return attachment{}, api.InvalidField(field("mime_type"), "required with data_b64: one of %s", imageMIMEs())
		}
		n, h, sum, err := checkBase64(a.DataB64, maxBytes)
		if err != nil {
			return attachment{}, api.InvalidField(field(source), "%v", err)
		}
		at.b64, size, head, digest = a.DataB64, n, h, sum
	}
	at.field = field(source)
	fail := func(err error) (attachment, error) {
		closeAttachments([]attachment{at})
		return attachment{}, err
	}
	typ, ok := spawn.SniffImage(head)
	if !ok {
		msg := fmt.Sprintf("is not a %s image", spawn.ImageLabels())
		if source == "data_b64" {
			// The client's own bytes; a file's are not echoed, so an error
			// is never a way to read the start of any file on the machine.
			msg += " (its first bytes are " + leadingBytes(head) + ")"
		}
		return fail(api.InvalidField(field(source), "%s", msg))
	}
	if a.MimeType != "" {
		// A claimed type that is not what the bytes are means the client
		// sent something other than it thinks: refused, so it hears now,
		// rather than card quietly sending an image it did not mean.
		claimed := strings.ToLower(strings.TrimSpace(a.MimeType))
		if claimed == "image/jpg" {
			claimed = "image/jpeg"
		}
		if _, known := spawn.ImageTypeOf(claimed); !known {
			return fail(api.InvalidField(field("mime_type"), "%q is not one of %s", a.MimeType, imageMIMEs()))
		}
		if claimed != typ.MIME {
			return fail(api.InvalidField(field("mime_type"), "says %s but the bytes are a %s image (%s); send the type the bytes are", a.MimeType, typ.Label, typ.MIME))
		}
	}
	at.image = spawn.Image{Name: a.Name, MIME: typ.MIME, File: &spawn.ImageFile{Size: size}}
	// A file's digest waits for its read, after the gate: a refused run's
	// record has the type and size of a file it names, not its digest.
	at.record = api.AttachmentRecord{Index: i, Name: a.Name, MimeType: typ.MIME, Size: size, SHA256: digest}
	return at, nil
}

// openImageFile opens a regular file of at most maxBytes and reads its
// first bytes, leaving it open for stage to copy. It opens first and judges
// the open file, so a name swapped for a FIFO or a device after a check can
// neither block the request nor be read.
func openImageFile(path string, maxBytes int64) (*os.File, int64, []byte, error) {
	if !filepath.IsAbs(path) {
		return nil, 0, nil, fmt.Errorf("%q is not an absolute path", path)
	}
	if strings.ContainsRune(path, 0) {
		return nil, 0, nil, errors.New("contains a NUL byte")
	}
	// O_NONBLOCK: opening a FIFO with no writer would otherwise wait for
	// one, and a kernel file that waits for data answers "not yet" instead
	// of waiting. It changes nothing for a regular file. O_NOCTTY: a
	// terminal named here must not become the daemon's.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("cannot be read: %v", errors.Unwrap(err))
	}
	fail := func(err error) (*os.File, int64, []byte, error) {
		f.Close()
		return nil, 0, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("cannot be read: %v", err))
	}
	if !st.Mode().IsRegular() {
		return fail(fmt.Errorf("%q is not a regular file", path))
	}
	if fsName := kernelFS(f); fsName != "" {
		// /proc, /sys and their kind call their files regular, and a read
		// of one (/proc/kmsg) can wait for ever: they hold no image.
		return fail(fmt.Errorf("%q is on %s, a kernel file system, not a stored file", path, fsName))
	}
	if st.Size() > maxBytes {
		return fail(tooBig(st.Size(), maxBytes))
	}
	head := make([]byte, sniffLen)
	n, err := readWithin(f, attachmentHeadTimeout, func() (int, error) { return io.ReadFull(f, head) })
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		if errors.Is(err, errTooSlow) {
			// readWithin closed f (or will, once the read lets go of it).
			return nil, 0, nil, fmt.Errorf("%q gave no bytes within %s (a stalled network or FUSE mount?)", path, attachmentHeadTimeout)
		}
		return fail(fmt.Errorf("cannot be read: %v", err))
	}
	return f, st.Size(), head[:n], nil
}

// errTooSlow is readWithin's answer when fn outlived its time.
var errTooSlow = errors.New("took too long")

// readWithin runs fn, a read of f, for at most d. When d passes first it closes
// f and answers errTooSlow at once: a read the poller can interrupt ends
// there and then; one blocked in the kernel (a hung FUSE server) lets go of
// the descriptor when the kernel lets go of the read. Either way the
// request does not wait, and f is closed by the time fn is done.
func readWithin(f *os.File, d time.Duration, fn func() (int, error)) (int, error) {
	type answer struct {
		n   int
		err error
	}
	done := make(chan answer, 1)
	go func() {
		n, err := fn()
		done <- answer{n, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case a := <-done:
		return a.n, a.err
	case <-t.C:
		f.Close()
		return 0, errTooSlow
	}
}

// checkBase64 judges standard base64 of at most maxBytes without decoding
// it into memory: the size from the encoded length, then the whole of it
// decoded into nothing but its digest, keeping only its first bytes.
func checkBase64(s string, maxBytes int64) (int64, []byte, string, error) {
	if strings.HasPrefix(s, "data:") {
		return 0, nil, "", errors.New("holds a data: URL; send only the base64 after its comma, and the type in mime_type")
	}
	if n := int64(base64.StdEncoding.DecodedLen(len(s))); n > maxBytes+2 {
		return 0, nil, "", tooBig(n, maxBytes)
	}
	h, sum := &headWriter{max: sniffLen}, sha256.New()
	n, err := io.Copy(io.MultiWriter(h, sum), base64.NewDecoder(base64.StdEncoding, strings.NewReader(s)))
	if err != nil {
		return 0, nil, "", fmt.Errorf("is not valid standard base64: %v", err)
	}
	if n > maxBytes {
		return 0, nil, "", tooBig(n, maxBytes)
	}
	return n, h.b, hex.EncodeToString(sum.Sum(nil)), nil
}

// headWriter keeps the first max bytes written to it and counts the rest.
type headWriter struct {
	b   []byte
	max int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// stage reads every checked attachment once, after the gate: each image the
// run takes is copied, through a bound and a digest, into a file of dir
// (card's private directory for the run) and never held in memory; each it
// drops is only digested. The copy's first bytes must still be the type
// that was checked and its length the size that was: a file changed in
// between is refused rather than sent as something else. It fills in the
// digests of records (attach's, one per attachment) and closes every client
// file, whatever happens. dir is "" when the run takes no images.
func stage(list []attachment, records []api.AttachmentRecord, dir string, maxBytes int64) error {
	defer closeAttachments(list)
	for i := range list {
		at := &list[i]
		var dst *os.File
		if dir != "" {
			t, _ := spawn.ImageTypeOf(at.image.MIME)
			path := filepath.Join(dir, "attachment-"+strconv.Itoa(i+1)+t.Ext)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("could not write card's private copy of attachments[%d]: %w", i, err)
			}
			dst = f
			at.image.File.Path = path
		}
		sum, n, head, err := copyAttachment(at, dst, maxBytes)
		if err != nil {
			return err
		}
		if typ, ok := spawn.SniffImage(head); !ok || typ.MIME != at.image.MIME || n != at.record.Size {
			return api.InvalidField(at.field, "changed while card read it (it was a %s image of %s); send it again once it is complete", at.image.MIME, byteSize(at.record.Size))
		}
		records[i].SHA256 = sum
	}
	return nil
}

// copyAttachment copies one attachment's bytes into dst (nil: nowhere),
// bounded by maxBytes and, for a file, by attachmentReadTimeout, and
// returns their digest, length and first bytes. dst is closed either way.
func copyAttachment(at *attachment, dst *os.File, maxBytes int64) (string, int64, []byte, error) {
	h := sha256.New()
	head := &headWriter{max: sniffLen}
	w := io.MultiWriter(h, head)
	if dst != nil {
		w = io.MultiWriter(h, head, dst)
	}
	var n int64
	var err error
	if at.file != nil {
		f := at.file
		var got int
		got, err = readWithin(f, attachmentReadTimeout, func() (int, error) {
			defer closeFile(dst)
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return 0, err
			}
			c, err := io.Copy(w, io.LimitReader(f, maxBytes+1))
			return int(c), err
		})
		n = int64(got)
		if errors.Is(err, errTooSlow) {
			at.file = nil // readWithin closed it
			return "", 0, nil, api.InvalidField(at.field, "could not be read within %s (a stalled network or FUSE mount?)", attachmentReadTimeout)
		}
	} else {
		n, err = io.Copy(w, base64.NewDecoder(base64.StdEncoding, strings.NewReader(at.b64)))
		closeFile(dst)
	}
	if err != nil {
		return "", 0, nil, api.InvalidField(at.field, "cannot be read: %v", err)
	}
	if n > maxBytes { // it grew since it was checked
		return "", 0, nil, api.InvalidField(at.field, "%v", tooBig(n, maxBytes))
	}
	return hex.EncodeToString(h.Sum(nil)), n, head.b, nil
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}

func tooBig(size, maxBytes int64) error {
	return fmt.Errorf("is %s; an attachment may be at most %s ([attachments] max_bytes in card.toml)", byteSize(size), byteSize(maxBytes))
}

func byteSize(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// leadingBytes shows the first bytes of a non-image for the message, as
// hex: enough to tell text or a PDF from a truncated image.
func leadingBytes(b []byte) string {
	if len(b) == 0 {
		return "none: it is empty"
	}
	return hex.EncodeToString(b[:min(len(b), 8)])
}

func imageMIMEs() string {
	mimes := make([]string, len(spawn.ImageTypes))
	for i, t := range spawn.ImageTypes {
		mimes[i] = t.MIME
	}
	return strings.Join(mimes, ", ")
}

// attach decides what the run gets of its checked attachments: all of
// them, when the adapter takes images; none otherwise, each listed as
// dropped with the adapter's reason, or the request refused when it said
// require_attachments.
func attach(adapter string, list []attachment, require bool) ([]spawn.Image, []api.AttachmentRecord, error) {
	if len(list) == 0 {
		return nil, nil, nil
	}
	a, _ := spawn.Lookup(adapter)
	records := make([]api.AttachmentRecord, len(list))
	var images []spawn.Image
	for i, at := range list {
		records[i] = at.record
		if a.Capabilities.Images {
			images = append(images, at.image)
		} else {
			records[i].Dropped = a.NoImages
		}
	}
	if !a.Capabilities.Images && require {
		return nil, nil, api.InvalidField("attachments", "%s takes no images (capabilities.images is false): %s; "+
			"require_attachments is set, so the run was not started", adapter, a.NoImages)
	}
	return images, records, nil
}
