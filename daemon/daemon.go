// Package daemon is the running service: startup, config, lifecycle and
// graceful shutdown, and the methods that join the domain packages to the
// wire. It is the one place where rpc/ meets detect/, guard/, spawn/ and
// substrate/.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/sessions"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	homedir "github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/rpc"
)

// Version, Commit and Date (the commit's) say which build this is. A
// release build stamps all three (-ldflags "-X github.com/card-dev/card/daemon.Version=…",
// as .goreleaser.yaml does); a build from a clone leaves Commit empty, and
// Build then reads what the Go toolchain recorded instead, so a bug report
// from a clone still names its commit.
var (
	Version = "0.1.0-dev"
	Commit  = ""
	Date    = ""
)

// ProtocolVersion is the wire protocol's version. Additive changes (a new
// method, a new optional field) keep the major number; anything a current
// client could misread bumps it. See docs/protocol/versioning.md#versioning.
const ProtocolVersion = "1.0"

// passwdFile is the passwd database the homes of the machine's other users
// are read from; tests point it at their own.
var passwdFile = "/etc/passwd"

// Options are what the caller of New decides; everything else comes from
// card.toml and the embedded defaults.
type Options struct {
	// Home is the state directory; empty means CARD_HOME or the default.
	Home string
	// Addr and LogLevel override card.toml when set (the --addr and
	// --log-level flags).
	Addr     string
	LogLevel string
	// Logger, when set, is used as is (tests); otherwise one is built for
	// LogOutput (default stderr).
	Logger    *zap.Logger
	LogOutput io.Writer
	// Environ is the environment read once at startup; nil means
	// os.Environ(). Nothing after startup reads the process environment, so
	// what a request is judged by cannot change under it.
	Environ []string
	// CaptureCrashes sends the Go runtime's crash output to a log under
	// <home>/crashes as well as stderr, which a later start reports. It is
	// the process's one crash output, so only `card serve` sets it, not
	// the tests that run several daemons in one process.
	CaptureCrashes bool
	// Agents are declared as card.toml's [agents.<id>] tables are, beside
	// them (card serve --fake-agents); an id card.toml declares too is
	// refused rather than one silently replacing the other.
	Agents map[string]AgentDeclConfig
}

// Daemon is one running card service bound to one home directory.
type Daemon struct {
	cfg       Config
	home      string
	log       *zap.Logger
	env       map[string]string
	startedAt time.Time
	pid       int
	// probeTag marks this daemon's probes (see endLeftoverProbes).
	probeTag string

	lock      *homedir.Lock
	crash     *crashLog
	lastCrash *api.CrashReport
	guard     guard.Snapshot
	planner   *plan.Planner
	detector  *detect.Detector
	substrate *lazySubstrate
	runs      *runs.Manager
	sessions  *sessions.Manager
	// warmer starts sessions' warm agents.
	warmer    sessions.Warmer
	subs      subscriptions
	carRoutes carRoutes
	tokens    *tokenFile
	registry  *rpc.Registry
	rpcSrv    *rpc.Server
	httpSrv   *http.Server
	// acp tracks the ACP front door's connections, which the rpc server
	// does not: a shutdown ends them before the sessions they use.
	acp      acpConns
	ln       net.Listener
	url      string
	serveErr chan error

	// ctx lives as long as the daemon; background work hangs off it.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup

	// closers run at shutdown in reverse order, after connections close.
	closers []func(context.Context)

	shutdownOnce sync.Once
	shutdownErr  error

	infoOnce sync.Once
	infoJSON rpc.Encoded[api.Info]
	infoErr  error
	// detectJSON is agents.detect's answer, encoded once per detection.
	detectJSON encodedDetections
}

// New prepares a daemon: home, config, token and the home lock. It does not
// listen yet; Start does.
func New(opts Options) (*Daemon, error) {
	inherited := closeInheritedOnExec()
	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	env := envMap(environ)
	getenv := func(k string) string { return env[k] }

	home, cfg, err := homeAndConfig(opts, getenv)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		out := opts.LogOutput
		if out == nil {
			out = os.Stderr
		}
		if log, err = NewLogger(out, cfg.LogLevel); err != nil {
			return nil, err
		}
	}

	if inherited > 0 {
		log.Info("marked descriptors inherited from card's launcher close-on-exec, so no agent gets them", zap.Int("count", inherited))
	}

	policy, err := plan.NewCwdPolicy(cfg.AllowedEditDirs, env["HOME"], home, plan.ReadOtherHomes(env["HOME"], passwdFile))
	if err != nil {
		return nil, err
	}
	lock, err := lockHome(home)
	if err != nil {
		return nil, err
	}
	// Whatever daemon.json is here was left by a daemon that died (we hold
	// the lock). It goes before the new token is written: a client that
	// read the dead daemon's URL must not then read the new token and send
	// it to whoever listens on the dead port.
	if err := os.Remove(filepath.Join(home, homedir.DiscoveryFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		lock.Release()
		return nil, fmt.Errorf("remove the stale %s: %w", filepath.Join(home, homedir.DiscoveryFileName), err)
	}
	if _, err := NewToken(home); err != nil {
		lock.Release()
		return nil, err
	}
	sweepPrivateDirs(env, log)
	started := time.Now().UTC()
	// With the lock held, every crash log here is of a daemon that ended.
	lastCrash := noticeLastCrash(home, started, log)
	var crash *crashLog
	if opts.CaptureCrashes {
		if crash, err = openCrashLog(home, os.Getpid(), started); err != nil {
			log.Warn("could not open a crash log; a crash will reach stderr only", zap.Error(err))
		}
	}
	tag := probeTag(home, os.Getpid(), started)
	endLeftoverProbes(home, tag, log)
	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{
		cfg:       cfg,
		home:      home,
		log:       log,
		env:       env,
		probeTag:  tag,
		startedAt: started,
		pid:       os.Getpid(),
		lock:      lock,
		crash:     crash,
		lastCrash: lastCrash,
		tokens:    &tokenFile{home: home},
		registry:  rpc.NewRegistry(),
		ctx:       ctx,
		cancel:    cancel,
	}
	d.planner = d.newPlanner(policy)
	if err := d.setup(); err != nil {
		d.closeAll(context.Background())
		crash.close()
		lock.Release()
		cancel()
		return nil, err
	}
	return d, nil
}

// homeAndConfig is the daemon's home (made if need be) and its card.toml,
// with the flags over it, checked.
func homeAndConfig(opts Options, getenv func(string) string) (string, Config, error) {
	home := opts.Home
	var err error
	if home == "" {
		if home, err = DefaultHome(getenv); err != nil {
			return "", Config{}, err
		}
	}
	if home, err = filepath.Abs(home); err != nil {
		return "", Config{}, err
	}
	if err := EnsureHome(home); err != nil {
		return "", Config{}, err
	}
	cfg, err := LoadConfig(filepath.Join(home, ConfigFileName))
	if err != nil {
		return "", Config{}, err
	}
	if opts.Addr != "" {
		cfg.Addr = opts.Addr
	}
	if opts.LogLevel != "" {
		cfg.LogLevel = opts.LogLevel
	}
	for id, a := range opts.Agents {
		if _, dup := cfg.Agents[id]; dup {
			return home, cfg, fmt.Errorf("[agents.%s]: card.toml declares it, and card serve adds an agent of that id (--fake-agents); rename one", id)
		}
		if cfg.Agents == nil {
			cfg.Agents = map[string]AgentDeclConfig{}
		}
		cfg.Agents[id] = a
	}
	if err := cfg.Validate(); err != nil {
		return home, cfg, err
	}
	return home, cfg, cfg.declareAgents()
}

// onClose registers cleanup to run at shutdown, last registered first.
func (d *Daemon) onClose(f func(context.Context)) { d.closers = append(d.closers, f) }

func (d *Daemon) closeAll(ctx context.Context) {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i](ctx)
	}
	d.closers = nil
}

// Start listens, writes daemon.json and tells systemd it is ready.
func (d *Daemon) Start() error {
	ln, err := net.Listen("tcp", d.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pick another with --addr or addr in card.toml)", d.cfg.Addr, err)
	}
	d.ln = ln
	port := ln.Addr().(*net.TCPAddr).Port
	d.url = fmt.Sprintf("ws://%s/rpc", hostForURL(ln.Addr().(*net.TCPAddr)))

	d.rpcSrv = rpc.NewServer(rpc.ServerConfig{
		Registry: d.registry,
		Gate: &rpc.Gate{
			Token:          d.tokens.current,
			AllowedOrigins: d.cfg.AllowedOrigins,
			OriginGrants:   d.cfg.originGrants(),
			AllowedHosts:   hostsFor(d.cfg.AllowedHosts, ln.Addr().(*net.TCPAddr)),
			Port:           port,
			Hints: rpc.GateHints{
				TokenFile:      "<home>/token",
				RotateToken:    "`card token rotate`",
				OriginsSetting: "allowed_origins in " + ConfigFileName,
			},
		},
		ReadLimit:         d.cfg.MaxMessageBytes,
		MaxConns:          d.cfg.MaxConnections,
		MaxConnsPerOrigin: d.cfg.MaxConnectionsPerOrigin,
		MaxPending:        d.cfg.MaxPendingConnections,
		MaxInFlight:       d.cfg.MaxInFlight,
		Logger:            d.log.Named("rpc"),
	})
	mux := http.NewServeMux()
	mux.Handle("/rpc", d.rpcSrv)
	mux.Handle(ACPPath, d.acpHandler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found: card serves WebSocket JSON-RPC at /rpc (and ACP at /acp)", http.StatusNotFound)
	})
	d.httpSrv = &http.Server{
		Handler:        mux,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       zap.NewStdLog(d.log.Named("http")),
		// Connections that have not finished their upgrade are bounded
		// in number (the oldest closed past max_pending_connections) and
		// in time: a slow-loris upgrade, or a refused one left open, holds
		// neither a slot nor a descriptor for long.
		ConnState: d.rpcSrv.ConnState,
	}
	rpc.HandshakeTimeouts(d.httpSrv, rpc.DefaultHandshakeTimeout)
	d.serveErr = make(chan error, 1)
	go func() { d.serveErr <- d.httpSrv.Serve(ln) }()

	exe, _ := os.Executable()
	disc := homedir.Discovery{URL: d.url, PID: d.pid, Exe: exe, Version: Version, ProtocolVersion: ProtocolVersion, StartedAt: d.startedAt.Format(time.RFC3339)}
	if err := writeDiscovery(d.home, disc); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(d.home, homedir.DiscoveryFileName), err)
	}
	if err := sdNotify(d.env["NOTIFY_SOCKET"], "READY=1\nMAINPID="+fmt.Sprint(d.pid)); err != nil {
		d.log.Warn("could not notify systemd", zap.Error(err))
	}
	d.log.Info("card is listening", zap.String("url", d.url), zap.String("home", d.home),
		zap.String("version", Version), zap.Int("pid", d.pid))
	d.detectInBackground()
	d.trimAfterStart()
	return nil
}

// URL is the WebSocket endpoint, once started.
func (d *Daemon) URL() string { return d.url }

// Home is the daemon's state directory.
func (d *Daemon) Home() string { return d.home }

// Run starts the daemon and serves until ctx is done (SIGTERM or SIGINT in
// `card serve`), then shuts down gracefully.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.Start(); err != nil {
		d.Shutdown(context.Background())
		return err
	}
	return d.Serve(ctx)
}

// Serve, after Start, serves until ctx is done, then shuts down gracefully.
// A failed Start is the caller's to Shutdown.
func (d *Daemon) Serve(ctx context.Context) error {
	select {
	case <-ctx.Done():
		d.log.Info("shutting down", zap.Duration("grace", d.cfg.ShutdownGrace()))
	case err := <-d.serveErr:
		d.log.Error("listener failed", zap.Error(err))
		d.Shutdown(context.Background())
		return err
	}
	gctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownGrace())
	defer cancel()
	return d.Shutdown(gctx)
}

// Shutdown removes daemon.json, stops accepting, closes every connection
// with 1001, ends or records in-flight work within ctx, removes the token
// and releases the home. It always finishes all of that; it returns an error when ctx ran
// out before the clients closed their connections and they were closed
// hard, so `card serve` can tell a supervisor the stop was not graceful.
// It is safe to call more than once and returns the same answer each time.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.shutdownOnce.Do(func() {
		_ = sdNotify(d.env["NOTIFY_SOCKET"], "STOPPING=1")
		// daemon.json goes while the port is still ours: once the listener
		// closes another user may bind the port, and a client must not find
		// it named by a file it trusts.
		removeDiscovery(d.home, d.pid)
		if d.httpSrv != nil {
			// Stop accepting first; hijacked WebSocket connections are the
			// rpc server's to close.
			_ = d.ln.Close()
		}
		d.acp.close(ctx)
		if d.rpcSrv != nil {
			if err := d.rpcSrv.Shutdown(ctx); err != nil {
				d.log.Warn("connections did not close within the grace period; closed them hard", zap.Error(err))
				d.shutdownErr = fmt.Errorf("shut down, but the clients' connections did not close within the grace period and were closed hard: %w", err)
			}
		}
		if d.httpSrv != nil {
			_ = d.httpSrv.Shutdown(ctx)
		}
		d.closeAll(ctx)
		d.cancel()
		d.bg.Wait()
		// The token dies with the daemon; the next start makes its own.
		_ = os.Remove(filepath.Join(d.home, homedir.TokenFileName))
		// Last before the lock goes: a daemon killed while it shut down
		// leaves its log, and the next start says so.
		d.crash.close()
		d.lock.Release()
		if d.ln != nil {
			// A daemon that never listened did not start, so it does not
			// say it stopped either.
			d.log.Info("card stopped")
		}
		_ = d.log.Sync()
	})
	return d.shutdownErr
}

// setup builds the pieces and registers the methods.
func (d *Daemon) setup() error {
	d.registry.RegisterCodes(codes...)
	d.registry.CommonErrors(CodeAccessDenied)
	d.registry.MapErrors(wireError)
	d.registerInfo()
	for _, step := range []func() error{d.setupAgents, d.setupRuns, d.setupSessions, d.setupSubstrate, d.setupDiscover} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// hostsFor adds the address the daemon listens on to the Host names its
// gate accepts, so the URL it publishes is one its own gate lets through
// (--addr 127.0.0.2:0 would otherwise start a daemon that refuses every
// client). An IP literal is safe to accept: DNS rebinding sends a name, not
// the address. A wildcard listener publishes 127.0.0.1, which is accepted
// anyway.
func hostsFor(allowed []string, a *net.TCPAddr) []string {
	hosts := slices.Clone(allowed)
	if !a.IP.IsUnspecified() {
		hosts = append(hosts, a.IP.String())
	}
	return hosts
}

func hostForURL(a *net.TCPAddr) string {
	if a.IP.IsUnspecified() {
		return fmt.Sprintf("127.0.0.1:%d", a.Port)
	}
	if a.IP.To4() == nil {
		return fmt.Sprintf("[%s]:%d", a.IP, a.Port)
	}
	return fmt.Sprintf("%s:%d", a.IP, a.Port)
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// tokenFile serves the current token to the gate, re-reading the file only
// when it changed, so a rotation takes effect for the next connection.
type tokenFile struct {
	home string
	mu   sync.Mutex
	mod  time.Time
	size int64
	ino  uint64
	tok  []byte
}

func (t *tokenFile) current() ([]byte, error) {
	path := filepath.Join(t.home, homedir.TokenFileName)
	// Lstat: a link put in the token's place changes what is compared, and
	// ReadToken then refuses it.
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	ino := inode(st)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok != nil && st.ModTime().Equal(t.mod) && st.Size() == t.size && ino == t.ino {
		return t.tok, nil
	}
	tok, err := ReadToken(t.home)
	if err != nil {
		return nil, err
	}
	t.tok, t.mod, t.size, t.ino = []byte(tok), st.ModTime(), st.Size(), ino
	return t.tok, nil
}

// ActiveConnections is the number of open client connections.
func (d *Daemon) ActiveConnections() int {
	if d.rpcSrv == nil {
		return 0
	}
	return d.rpcSrv.ActiveConnections()
}
