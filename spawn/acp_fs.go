package spawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/atomicfile"
)

// The file system card serves an ACP agent whose dialect declares it
// (acpDialect.fs): the agent reads and writes through card instead of on
// its own, so card holds the session's mode on every write, asked about
// or not. Reads go through in every mode, as read_only's reads do for
// the other adapters (a read changes nothing, inside the cwd or not);
// writes are held by the mode:
//
//   - read_only: refused.
//   - edit: allowed when the path resolves, symlinks followed, under the
//     cwd (underDir, the rule the permission answers use).
//   - ask: put to the client (agents.approve), as a question, unless the
//     client allowed this turn the agent's edit of that same path and the
//     agent now writes it: that write is the edit already answered.
//   - bypass: allowed.
//
// A write replaces the file whole through a temp file (a reader never
// sees half of it), into the resolved path, so a link checked is the link
// written through.

// Bounds of what card reads or writes for the agent in one call: a text
// file past these is not one an agent edits whole.
const (
	maxFSRead  = 16 << 20
	maxFSWrite = 16 << 20
)

// fsReply answers one of the agent's fs requests: the result, or the
// error it gets instead.
type fsReply struct {
	result any
	err    *jsonrpc2.Error
}

// serveFS serves an fs/* request off the reader (a write in ask mode
// waits for a person); once the turn is over it is refused.
func (c *acpClient) serveFS(t *turn, req *jsonrpc2.Request, params json.RawMessage) {
	closed := fsReply{err: &jsonrpc2.Error{Code: int64(acp.CodeInternalError), Message: "card refused: the turn is over"}}
	reply := func(answer any) {
		r, _ := answer.(fsReply)
		if r.err != nil {
			_ = c.conn.ReplyWithError(context.Background(), req.ID, r.err)
			return
		}
		_ = c.conn.Reply(context.Background(), req.ID, r.result)
	}
	t.question(closed, reply, func(ctx context.Context) any {
		switch req.Method {
		case acp.MethodFSReadTextFile:
			var p acp.ReadTextFileRequest
			if params == nil || !decodeParams(params, &p) {
				return fsInvalid("card could not read the fs/read_text_file params")
			}
			return c.readFile(t, p)
		default:
			var p acp.WriteTextFileRequest
			if params == nil || !decodeParams(params, &p) {
				return fsInvalid("card could not read the fs/write_text_file params")
			}
			return c.writeFile(ctx, t, p)
		}
	})
}

func fsInvalid(msg string) fsReply {
	return fsReply{err: &jsonrpc2.Error{Code: int64(acp.CodeInvalidParams), Message: msg}}
}

func fsRefused(msg string) fsReply {
	return fsReply{err: &jsonrpc2.Error{Code: int64(acp.CodeInternalError), Message: msg}}
}

// readFile reads a text file for the agent, from its 1-based line and
// for its limit of lines when it gives them. A file that does not exist
// is ACP's resource-not-found, which agents read as "no such file".
func (c *acpClient) readFile(t *turn, p acp.ReadTextFileRequest) fsReply {
	if !filepath.IsAbs(p.Path) {
		return fsInvalid(fmt.Sprintf("path: %q is not absolute (ACP's file paths are)", p.Path))
	}
	f, err := os.Open(p.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return fsReply{err: &jsonrpc2.Error{Code: int64(acp.CodeResourceNotFound), Message: "no such file: " + p.Path}}
	}
	if err != nil {
		return fsRefused(err.Error())
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fsRefused(p.Path + " is not a regular file")
	} else if fi.Size() > maxFSRead {
		return fsRefused(fmt.Sprintf("%s is %d bytes; card reads at most %d for an agent", p.Path, fi.Size(), maxFSRead))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFSRead+1))
	if err != nil {
		return fsRefused(err.Error())
	}
	n := len(b)
	if n > maxFSRead {
		return fsRefused(fmt.Sprintf("%s grew past %d bytes while card read it", p.Path, maxFSRead))
	}
	text := string(b[:n])
	if p.Line != nil || p.Limit != nil {
		text = lineWindow(text, p.Line, p.Limit)
	}
	return fsReply{result: acp.ReadTextFileResponse{Content: text}}
}

// lineWindow is text from its 1-based line for limit lines (nil: to the
// end).
func lineWindow(text string, line, limit *uint32) string {
	lines := strings.SplitAfter(text, "\n")
	from := 0
	if line != nil && *line > 1 {
		from = int(*line) - 1
	}
	if from >= len(lines) {
		return ""
	}
	lines = lines[from:]
	if limit != nil && int(*limit) < len(lines) {
		lines = lines[:*limit]
	}
	return strings.Join(lines, "")
}

// writeFile writes a text file for the agent if the session's mode lets
// it, and says in the run's events what it did or why it refused.
func (c *acpClient) writeFile(ctx context.Context, t *turn, p acp.WriteTextFileRequest) fsReply {
	if !filepath.IsAbs(p.Path) {
		return fsInvalid(fmt.Sprintf("path: %q is not absolute (ACP's file paths are)", p.Path))
	}
	if len(p.Content) > maxFSWrite {
		return fsRefused(fmt.Sprintf("card writes at most %d bytes for an agent; this write of %s is %d", maxFSWrite, p.Path, len(p.Content)))
	}
	refuse := func(why string) fsReply {
		t.emit(Event{Kind: api.EventOther, Text: why})
		return fsRefused(why)
	}
	switch c.mode {
	case ModeBypass:
	case ModeEdit:
		if err := underDir(c.a.plan.Dir, p.Path); err != nil {
			return refuse("card's edit mode refused the agent's write: " + err.Error())
		}
	case ModeAsk:
		if c.takeAllowedWrite(t, p.Path) {
			break
		}
		in, _ := json.Marshal(map[string]any{"file_path": p.Path, "content": clip(p.Content, maxRaw)})
		d := t.approve(ctx, Question{Tool: "write_text_file", Input: in, Summary: "write_text_file: " + p.Path})
		if !d.Allow {
			why := "the client denied the agent's write of " + p.Path
			if d.Message != "" {
				why += ": " + d.Message
			}
			return refuse(why)
		}
	default:
		return refuse(fmt.Sprintf("card's %s mode refused the agent's write of %s", kindWordMode(c.mode), p.Path))
	}
	real, err := resolveExisting(filepath.Clean(p.Path))
	if err != nil {
		return refuse(fmt.Sprintf("card refused the agent's write of %s: it cannot be resolved safely (%v)", p.Path, err))
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(real); err == nil {
		if !fi.Mode().IsRegular() {
			return refuse(p.Path + " is not a regular file; card writes only files")
		}
		mode = fi.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		return refuse("card could not write " + p.Path + ": " + err.Error())
	}
	if err := atomicfile.Write(real, []byte(p.Content), mode); err != nil {
		return refuse("card could not write " + p.Path + ": " + err.Error())
	}
	t.emit(Event{Kind: api.EventOther, Text: fmt.Sprintf("card wrote %s for the agent (%d bytes)", p.Path, len(p.Content))})
	return fsReply{result: map[string]any{}}
}

func kindWordMode(m Mode) string {
	if m == "" {
		return "default"
	}
	return string(m)
}
