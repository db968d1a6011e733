package daemon

import (
	"context"
	"encoding/base64"

	"io"
	"sync"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/substrate"
)

// lazySubstrate opens the configured substrate on first use, so a bridge
// that is down does not stop the daemon from starting, and a failed open is
// tried again by the next call.
type lazySubstrate struct {
	cfg substrate.Config
	// env is the daemon's environment as read at startup.
	env    map[string]string
	mu     sync.Mutex
	s      substrate.Substrate
	closer io.Closer
}

func (l *lazySubstrate) get(ctx context.Context) (substrate.Substrate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		return l.s, nil
	}
	s, c, err := substrate.Open(ctx, l.cfg, l.env)
	if err != nil {
		return nil, err
	}
	l.s, l.closer = s, c
	return s, nil
}

func (l *lazySubstrate) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closer != nil {
		_ = l.closer.Close()
	}
	l.s, l.closer = nil, nil
}

// subMethod registers one substrate method whose handler gets the opened
// substrate; every error goes through substrateError.
func subMethod[P, R any](d *Daemon, name string, doc rpc.Doc, fn func(ctx context.Context, s substrate.Substrate, p P) (R, error)) {
	doc.Errors = append(doc.Errors, CodeSubstrateReadOnly, CodeSubstrateFailed, CodeSubstrateTransport, CodeSubstrateNotSupport)
	rpc.Register(d.registry, name, doc, func(ctx context.Context, p P) (R, error) {
		var zero R
		s, err := d.substrate.get(ctx)
		if err != nil {
			return zero, substrateError(err)
		}
		r, err := fn(ctx, s, p)
		if err != nil {
			return zero, substrateError(err)
		}
		return r, nil
	})
}

func (d *Daemon) setupSubstrate() error {
	d.substrate = &lazySubstrate{cfg: d.cfg.Substrate, env: d.env}
	d.onClose(func(context.Context) { d.substrate.close() })

	subMethod(d, "substrate.info", rpc.Doc{Access: rpc.AccessRead, Summary: "Which environment the substrate methods act on: its name, whether it is the local host, whether it has a PTY, whether it is read-only."},
		func(ctx context.Context, s substrate.Substrate, _ api.SubstrateInfoParams) (api.SubstrateInfo, error) {
			return substrate.Describe(s), nil
		})
	subMethod(d, "substrate.run_command", rpc.Doc{Access: rpc.AccessHost, Summary: "Run a shell command (sh -c) in the substrate and return its stdout, stderr and exit code.",
		Description: "Locally the command runs in the user's home directory in its own process group; a timeout ends the whole group and is an error, not a result. A command that ran and failed is a result with a nonzero exit_code."},
		func(ctx context.Context, s substrate.Substrate, p api.RunCommandParams) (api.CommandResult, error) {
			return s.RunCommand(ctx, p.Command, time.Duration(p.TimeoutSecs)*time.Second)
		})
	subMethod(d, "substrate.read_text", rpc.Doc{Access: rpc.AccessHost, Summary: "Read a whole UTF-8 text file (absolute path)."},
		func(ctx context.Context, s substrate.Substrate, p api.PathParams) (api.ReadTextResult, error) {
			c, err := s.ReadText(ctx, p.Path)
			return api.ReadTextResult{Content: c}, err
		})
	subMethod(d, "substrate.write_text", rpc.Doc{Access: rpc.AccessHost, Summary: "Write a text file, truncating it and creating parent directories; with create_only, only where the path is confirmed missing."},
		func(ctx context.Context, s substrate.Substrate, p api.WriteTextParams) (api.WriteResult, error) {
			var err error
			if p.CreateOnly {
				err = substrate.WriteTextCreateOnly(ctx, s, p.Path, p.Content)
			} else {
				err = s.WriteText(ctx, p.Path, p.Content)
			}
			return api.WriteResult{Path: p.Path, Bytes: len(p.Content)}, err
		})
	subMethod(d, "substrate.read_bytes", rpc.Doc{Access: rpc.AccessHost, Summary: "Read a window of a file as base64: offset (default 0) and length (default: to the end), clipped to the file's size."},
		func(ctx context.Context, s substrate.Substrate, p api.ReadBytesParams) (api.BytesResult, error) {
			length := substrate.ToEnd
			if p.Length != nil {
				length = *p.Length
			}
			b, err := s.ReadBytes(ctx, p.Path, p.Offset, length)
			return api.BytesResult{ContentB64: base64.StdEncoding.EncodeToString(b)}, err
		})
	subMethod(d, "substrate.write_bytes", rpc.Doc{Access: rpc.AccessHost, Summary: "Write a file from base64 content, truncating it and creating parent directories."},
		func(ctx context.Context, s substrate.Substrate, p api.WriteBytesParams) (api.WriteResult, error) {
			b, err := base64.StdEncoding.DecodeString(p.ContentB64)
			if err != nil {
				return api.WriteResult{}, api.InvalidField("content_b64", "is not standard base64: %v", err)
			}
			return api.WriteResult{Path: p.Path, Bytes: len(b)}, s.WriteBytes(ctx, p.Path, b)
		})
	subMethod(d, "substrate.path_state", rpc.Doc{Access: rpc.AccessHost, Summary: "Whether something is at a path: missing, exists (a dangling symlink exists), or unknown with a reason (an unreadable parent is unknown, not missing)."},
		func(ctx context.Context, s substrate.Substrate, p api.PathParams) (api.PathState, error) {
			return s.PathState(ctx, p.Path), nil
		})
	subMethod(d, "substrate.pty_start", rpc.Doc{Access: rpc.AccessHost, Summary: "Start a command in a pseudo-terminal; answers its numeric pid."},
		func(ctx context.Context, s substrate.Substrate, p api.PTYStartParams) (api.PTYResult, error) {
			pid, err := s.PTYStart(ctx, p.Command)
			return api.PTYResult{PID: pid}, err
		})
	subMethod(d, "substrate.pty_input", rpc.Doc{Access: rpc.AccessHost, Summary: "Type data into a PTY."},
		func(ctx context.Context, s substrate.Substrate, p api.PTYInputParams) (api.OKResult, error) {
			return api.OKResult{OK: true}, s.PTYInput(ctx, p.PID, p.Data)
		})
	subMethod(d, "substrate.pty_read", rpc.Doc{Access: rpc.AccessHost, Summary: "What a PTY printed since the last read (waits only briefly when nothing is buffered)."},
		func(ctx context.Context, s substrate.Substrate, p api.PTYPIDParams) (api.PTYReadResult, error) {
			data, err := s.PTYRead(ctx, p.PID)
			return api.PTYReadResult{Data: data}, err
		})
	subMethod(d, "substrate.pty_resize", rpc.Doc{Access: rpc.AccessHost, Summary: "Resize a PTY to rows × cols."},
		func(ctx context.Context, s substrate.Substrate, p api.PTYResizeParams) (api.OKResult, error) {
			return api.OKResult{OK: true}, s.PTYResize(ctx, p.PID, p.Rows, p.Cols)
		})
	subMethod(d, "substrate.pty_kill", rpc.Doc{Access: rpc.AccessHost, Summary: "End a PTY's process group and free it."},
		func(ctx context.Context, s substrate.Substrate, p api.PTYPIDParams) (api.OKResult, error) {
			return api.OKResult{OK: true}, s.PTYKill(ctx, p.PID)
		})
	return nil
}
