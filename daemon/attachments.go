package daemon

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// Attachment is one image attached to agents.invoke (api.Attachment),
// aliased so the daemon's code keeps its old name.
type Attachment = api.Attachment

// maxAttachmentName bounds a name kept in the run history.
const maxAttachmentName = 255

// attachment is one checked attachment: the bytes the agent will get and
// what the run's record keeps of them.
type attachment struct {
	image  spawn.Image
	record store.Attachment
}

// mayNameFiles refuses a path attachment from a browser page. With a path,
// card itself reads a file of the user's and hands it to an agent whose
// vendor, and whose answer, the page then sees: a page the operator allowed
// for running agents would otherwise be able to pick any image-typed file
// on the machine. A page sends the bytes it has (data_b64) instead. A
// native client holding the token is the user's own program and may name
// files.
func mayNameFiles(origin string, list []Attachment) error {
	if origin == "" {
		return nil
	}
	for i, a := range list {
		if a.Path != "" {
			return rpc.InvalidField(fmt.Sprintf("attachments[%d].path", i),
				"a connection from a web page (Origin %s) may not make card read files on this machine; send the image's bytes as data_b64 with mime_type", origin)
		}
	}
	return nil
}

// readAttachments checks every attachment and reads its bytes, in order.
// The first bad one is a -32602 naming its index and field; nothing is
// started for a request with one.
func readAttachments(list []Attachment, lim AttachmentLimits) ([]attachment, error) {
	if len(list) == 0 {
		return nil, nil
	}
	if len(list) > lim.MaxCount {
		return nil, rpc.InvalidField("attachments", "%d attachments; at most %d per run ([attachments] max_count in card.toml)", len(list), lim.MaxCount)
	}
	out := make([]attachment, len(list))
	for i, a := range list {
		at, err := readAttachment(i, a, lim.MaxBytes)
		if err != nil {
			return nil, err
		}
		out[i] = at
	}
	return out, nil
}

func readAttachment(i int, a Attachment, maxBytes int64) (attachment, error) {
	field := func(name string) string {
		if name == "" {
			return fmt.Sprintf("attachments[%d]", i)
		}
		return fmt.Sprintf("attachments[%d].%s", i, name)
	}
	switch {
	case a.Path == "" && a.DataB64 == "":
		return attachment{}, rpc.InvalidField(field(""), "give path (an absolute path to an image file) or data_b64 with mime_type")
	case a.Path != "" && a.DataB64 != "":
		return attachment{}, rpc.InvalidField(field(""), "give path or data_b64, not both")
	}
	if len(a.Name) > maxAttachmentName || !utf8.ValidString(a.Name) || strings.ContainsFunc(a.Name, unicode.IsControl) {
		return attachment{}, rpc.InvalidField(field("name"), "must be printable text of at most %d bytes", maxAttachmentName)
	}
	var (
		data   []byte
		err    error
		source string
	)
	if a.Path != "" {
		source = "path"
		data, err = readImageFile(a.Path, maxBytes)
		if err != nil {
			return attachment{}, rpc.InvalidField(field(source), "%v", err)
		}
		if a.Name == "" {
			a.Name = filepath.Base(a.Path)
		}
	} else {
		source = "data_b64"
		if a.MimeType == "" {
			return attachment{}, rpc.InvalidField(field("mime_type"), "required with data_b64: one of %s", imageMIMEs())
		}
		data, err = decodeImage(a.DataB64, maxBytes)
		if err != nil {
			return attachment{}, rpc.InvalidField(field(source), "%v", err)
		}
	}
	typ, ok := spawn.SniffImage(data)
	if !ok {
		msg := fmt.Sprintf("is not a %s image", spawn.ImageLabels())
		if source == "data_b64" {
			// The client's own bytes; a file's are not echoed, so an error
			// is never a way to read the start of any file on the machine.
			msg += " (its first bytes are " + leadingBytes(data) + ")"
		}
		return attachment{}, rpc.InvalidField(field(source), "%s", msg)
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
			return attachment{}, rpc.InvalidField(field("mime_type"), "%q is not one of %s", a.MimeType, imageMIMEs())
		}
		if claimed != typ.MIME {
			return attachment{}, rpc.InvalidField(field("mime_type"), "says %s but the bytes are a %s image (%s); send the type the bytes are", a.MimeType, typ.Label, typ.MIME)
		}
	}
	sum := sha256.Sum256(data)
	return attachment{
		image: spawn.Image{Name: a.Name, MIME: typ.MIME, Data: data},
		record: store.Attachment{Index: i, Name: a.Name, MimeType: typ.MIME, Size: int64(len(data)),
			SHA256: hex.EncodeToString(sum[:])},
	}, nil
}

// readImageFile reads a regular file of at most maxBytes. It opens first
// and judges the open file, so a name swapped for a FIFO or a device after
// a check can neither block the request nor be read.
func readImageFile(path string, maxBytes int64) ([]byte, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%q is not an absolute path", path)
	}
	if strings.ContainsRune(path, 0) {
		return nil, errors.New("contains a NUL byte")
	}
	// O_NONBLOCK: opening a FIFO with no writer would otherwise wait for
	// one. It changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %v", errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %v", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%q is not a regular file", path)
	}
	if st.Size() > maxBytes {
		return nil, tooBig(st.Size(), maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %v", err)
	}
	if int64(len(data)) > maxBytes { // it grew since the stat
		return nil, tooBig(int64(len(data)), maxBytes)
	}
	return data, nil
}

// decodeImage decodes standard base64 of at most maxBytes, judging the size
// from the encoded length before decoding anything.
func decodeImage(s string, maxBytes int64) ([]byte, error) {
	if strings.HasPrefix(s, "data:") {
		return nil, errors.New("holds a data: URL; send only the base64 after its comma, and the type in mime_type")
	}
	if n := int64(base64.StdEncoding.DecodedLen(len(s))); n > maxBytes+2 {
		return nil, tooBig(n, maxBytes)
	}
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("is not valid standard base64: %v", err)
	}
	if int64(len(data)) > maxBytes {
		return nil, tooBig(int64(len(data)), maxBytes)
	}
	return data, nil
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
func attach(adapter string, list []attachment, require bool) ([]spawn.Image, []store.Attachment, error) {
	if len(list) == 0 {
		return nil, nil, nil
	}
	a, _ := spawn.Lookup(adapter)
	records := make([]store.Attachment, len(list))
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
		return nil, nil, rpc.InvalidField("attachments", "%s takes no images (capabilities.images is false): %s; "+
			"require_attachments is set, so the run was not started", adapter, a.NoImages)
	}
	return images, records, nil
}
