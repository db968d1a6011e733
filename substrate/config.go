package substrate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/card-dev/card/internal/proc"
)

// Config is the `[substrate]` table of card.toml.
//
//	[substrate]
//	read_only = true              # refuse commands, writes and PTY input
//
//	[substrate.mcp]               # absent: the local host
//	name = "vm"
//	command = ["vm-bridge", "--stdio"]   # or: url = "http://127.0.0.1:7010/mcp"
//	env = { VM_PROFILE = "dev" }
//	timeout = "60s"
type Config struct {
	// ReadOnly makes the substrate refuse exec, writes and PTY start/input.
	ReadOnly bool `toml:"read_only" json:"read_only"`
	// MCP selects a bridge; nil means Local.
	MCP *MCPConfig `toml:"mcp" json:"mcp,omitempty"`
}

// MCPConfig names the bridge: exactly one of Command (a stdio server the
// daemon starts) or URL (a streamable-HTTP endpoint).
type MCPConfig struct {
	// Name labels the environment for users (default "mcp").
	Name string `toml:"name" json:"name,omitempty"`
	// Command is the argv of a stdio bridge; it runs in the user's home
	// directory, in its own process group.
	Command []string `toml:"command" json:"command,omitempty"`
	// Env is added to the daemon's environment for a stdio bridge.
	Env map[string]string `toml:"env" json:"env,omitempty"`
	// URL is a streamable-HTTP MCP endpoint.
	URL string `toml:"url" json:"url,omitempty"`
	// Timeout is the default wait of a bridge call (default 60 s). TOML
	// accepts a duration string such as "90s".
	Timeout time.Duration `toml:"timeout" json:"timeout,omitempty"`
}

// Open builds the substrate cfg describes and returns it with the closer
// that releases it (PTY sessions, the bridge session and process). Close it
// when the daemon shuts down. env is the daemon's environment as read at
// startup: the base of every command, terminal and stdio bridge it starts.
func Open(ctx context.Context, cfg Config, env map[string]string) (Substrate, io.Closer, error) {
	var (
		s      Substrate
		closer io.Closer
	)
	if cfg.MCP == nil {
		l := NewLocal(env)
		s, closer = l, l
	} else {
		m, c, err := OpenMCP(ctx, *cfg.MCP, env)
		if err != nil {
			return nil, nil, err
		}
		s, closer = m, c
	}
	if cfg.ReadOnly {
		s = ReadOnly(s)
	}
	return s, closer, nil
}

// OpenMCP connects to the bridge cfg names. A stdio bridge is looked up on
// env's PATH and runs with env minus the variables no child inherits, plus
// cfg.Env.
func OpenMCP(ctx context.Context, cfg MCPConfig, env map[string]string) (*MCP, io.Closer, error) {
	name := cfg.Name
	if name == "" {
		name = "mcp"
	}
	var factory TransportFactory
	switch {
	case len(cfg.Command) > 0 && cfg.URL != "":
		return nil, nil, fmt.Errorf("[substrate.mcp] %q sets both command and url; keep one", name)
	case len(cfg.Command) > 0:
		if cfg.Command[0] == "" {
			return nil, nil, fmt.Errorf("[substrate.mcp] %q: command[0] is empty; give the bridge executable", name)
		}
		bin, err := proc.LookPath(cfg.Command[0], env["PATH"])
		if err != nil {
			return nil, nil, fmt.Errorf("[substrate.mcp] %q: bridge command %q not found: %w; fix command in card.toml", name, cfg.Command[0], err)
		}
		argv := append([]string(nil), cfg.Command...)
		childEnv := proc.NewEnv(env).SetAll(cfg.Env).List()
		dir := homeDir(env)
		factory = func() (mcp.Transport, error) { return newStdioTransport(bin, argv, childEnv, dir), nil }
	case cfg.URL != "":
		u, err := url.Parse(cfg.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, nil, fmt.Errorf("[substrate.mcp] %q: url %q is not an http(s) URL", name, cfg.URL)
		}
		hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		factory = func() (mcp.Transport, error) {
			return &httpTransport{StreamableClientTransport: mcp.StreamableClientTransport{Endpoint: cfg.URL, HTTPClient: hc, DisableStandaloneSSE: true}, hc: hc}, nil
		}
	default:
		return nil, nil, fmt.Errorf("[substrate.mcp] %q sets neither command nor url; give one", name)
	}
	return ConnectMCP(ctx, name, factory, cfg.Timeout)
}

// stdioTransport is the SDK's CommandTransport with what a long-lived daemon
// needs around it: an explicit working directory, its own process group
// (killed whole once the session closes, so a bridge's helpers die with it),
// and the tail of its stderr for error messages.
type stdioTransport struct {
	mcp.CommandTransport
	stderr *proc.Capped
}

// newStdioTransport runs bin (argv[0] as found on the startup PATH) with
// argv's arguments.
func newStdioTransport(bin string, argv, env []string, dir string) *stdioTransport {
	c := exec.Command(bin, argv[1:]...)
	c.Args[0] = argv[0]
	c.Dir = dir
	c.Env = env
	c.SysProcAttr = proc.NewGroup()
	tail := &proc.Capped{Tail: 4 << 10}
	c.Stderr = tail
	return &stdioTransport{CommandTransport: mcp.CommandTransport{Command: c, TerminateDuration: 2 * time.Second}, stderr: tail}
}

// cleanup runs after the SDK has ended the bridge process itself: whatever
// the bridge started in its group goes with it, and cleanup returns once the
// group is gone.
func (t *stdioTransport) cleanup() {
	if p := t.Command.Process; p != nil {
		proc.EndGroup(context.Background(), p.Pid, 0, nil)
	}
}

func (t *stdioTransport) stderrTail() string { return t.stderr.String() }

// httpTransport owns its HTTP client so closing the session frees its
// connections.
type httpTransport struct {
	mcp.StreamableClientTransport
	hc *http.Client
}

func (t *httpTransport) cleanup() { t.hc.CloseIdleConnections() }
