// Package bridgetest is an MCP bridge for tests, built on the official SDK:
// it serves the canonical substrate tools (run_command, read_text, ...) over
// any SDK transport, backed by a real substrate (usually Local), and records
// the raw arguments of every call it accepted.
//
// Its input schemas are inferred from the argument structs below, so they
// require the canonical names and reject any other (additionalProperties
// false): a client that drifts to `cmd`, `len`, `id` or a string pid is
// refused exactly as a real bridge would refuse it.
package bridgetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/card-dev/card/substrate"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Call is one accepted tool call as it arrived on the wire.
type Call struct {
	Tool string
	Args json.RawMessage
}

// Keys returns the argument names of the call.
func (c Call) Keys() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(c.Args, &m)
	return m
}

// Bridge is the test server.
type Bridge struct {
	Server *mcp.Server
	env    substrate.Substrate

	// BeforeCall, if set, runs before each tool with its 1-based call
	// number; tests use it to inject faults such as the bridge dying.
	BeforeCall func(n int, tool string)

	mu    sync.Mutex
	calls []Call
}

// Calls returns the calls accepted so far, in order.
func (b *Bridge) Calls() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Call(nil), b.calls...)
}

func (b *Bridge) record(tool string, req *mcp.CallToolRequest) {
	b.mu.Lock()
	b.calls = append(b.calls, Call{Tool: tool, Args: append(json.RawMessage(nil), req.Params.Arguments...)})
	n := len(b.calls)
	b.mu.Unlock()
	if b.BeforeCall != nil {
		b.BeforeCall(n, tool)
	}
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// The canonical argument shapes. Fields without omitempty are required.
type (
	runCommandIn struct {
		Command string  `json:"command"`
		Timeout float64 `json:"timeout,omitempty"`
	}
	runCommandOut struct {
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		ExitCode int    `json:"exit_code"`
	}
	pathIn struct {
		Path string `json:"path"`
	}
	writeTextIn struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	readBytesIn struct {
		Path   string `json:"path"`
		Offset *int64 `json:"offset,omitempty"`
		Length *int64 `json:"length,omitempty"`
	}
	writeBytesIn struct {
		Path       string `json:"path"`
		ContentB64 string `json:"content_b64"`
	}
	ptyStartIn struct {
		Command string `json:"command"`
	}
	ptyInputIn struct {
		PID  int    `json:"pid"`
		Data string `json:"data"`
	}
	pidIn struct {
		PID int `json:"pid"`
	}
	ptyResizeIn struct {
		PID  int    `json:"pid"`
		Rows uint16 `json:"rows"`
		Cols uint16 `json:"cols"`
	}
)

// New returns a bridge serving env.
func New(env substrate.Substrate) *Bridge {
	b := &Bridge{env: env, Server: mcp.NewServer(&mcp.Implementation{Name: "card-test-bridge", Version: "test"}, nil)}
	s := b.Server

	mcp.AddTool(s, &mcp.Tool{Name: "run_command", Description: "run a shell command"},
		func(ctx context.Context, req *mcp.CallToolRequest, in runCommandIn) (*mcp.CallToolResult, runCommandOut, error) {
			b.record("run_command", req)
			res, err := env.RunCommand(ctx, in.Command, time.Duration(in.Timeout*float64(time.Second)))
			if err != nil {
				return nil, runCommandOut{}, err
			}
			return nil, runCommandOut{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "read_text", Description: "read a text file"},
		func(ctx context.Context, req *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, any, error) {
			b.record("read_text", req)
			out, err := env.ReadText(ctx, in.Path)
			if err != nil {
				return nil, nil, err
			}
			return text(out), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "write_text", Description: "write a text file"},
		func(ctx context.Context, req *mcp.CallToolRequest, in writeTextIn) (*mcp.CallToolResult, any, error) {
			b.record("write_text", req)
			if err := env.WriteText(ctx, in.Path, in.Content); err != nil {
				return nil, nil, err
			}
			return text("ok"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "read_bytes", Description: "read a byte window as base64"},
		func(ctx context.Context, req *mcp.CallToolRequest, in readBytesIn) (*mcp.CallToolResult, any, error) {
			b.record("read_bytes", req)
			var off, n int64 = 0, substrate.ToEnd
			if in.Offset != nil {
				off = *in.Offset
			}
			if in.Length != nil {
				n = *in.Length
			}
			out, err := env.ReadBytes(ctx, in.Path, off, n)
			if err != nil {
				return nil, nil, err
			}
			return text(base64.StdEncoding.EncodeToString(out)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "write_bytes", Description: "write bytes given as base64"},
		func(ctx context.Context, req *mcp.CallToolRequest, in writeBytesIn) (*mcp.CallToolResult, any, error) {
			b.record("write_bytes", req)
			data, err := base64.StdEncoding.DecodeString(in.ContentB64)
			if err != nil {
				return nil, nil, fmt.Errorf("content_b64: %w", err)
			}
			if err := env.WriteBytes(ctx, in.Path, data); err != nil {
				return nil, nil, err
			}
			return text("ok"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pty_start", Description: "start a command on a pty"},
		func(ctx context.Context, req *mcp.CallToolRequest, in ptyStartIn) (*mcp.CallToolResult, any, error) {
			b.record("pty_start", req)
			pid, err := env.PTYStart(ctx, in.Command)
			if err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("pid: %d\ncols: 80\nrows: 24", pid)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pty_input", Description: "type into a pty"},
		func(ctx context.Context, req *mcp.CallToolRequest, in ptyInputIn) (*mcp.CallToolResult, any, error) {
			b.record("pty_input", req)
			if err := env.PTYInput(ctx, in.PID, in.Data); err != nil {
				return nil, nil, err
			}
			return text("ok"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pty_read", Description: "read buffered pty output"},
		func(ctx context.Context, req *mcp.CallToolRequest, in pidIn) (*mcp.CallToolResult, any, error) {
			b.record("pty_read", req)
			out, err := env.PTYRead(ctx, in.PID)
			if err != nil {
				return nil, nil, err
			}
			return text(out), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pty_resize", Description: "resize a pty"},
		func(ctx context.Context, req *mcp.CallToolRequest, in ptyResizeIn) (*mcp.CallToolResult, any, error) {
			b.record("pty_resize", req)
			if err := env.PTYResize(ctx, in.PID, in.Rows, in.Cols); err != nil {
				return nil, nil, err
			}
			return text("ok"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pty_kill", Description: "kill a pty"},
		func(ctx context.Context, req *mcp.CallToolRequest, in pidIn) (*mcp.CallToolResult, any, error) {
			b.record("pty_kill", req)
			if err := env.PTYKill(ctx, in.PID); err != nil {
				return nil, nil, err
			}
			return text("ok"), nil, nil
		})
	return b
}
