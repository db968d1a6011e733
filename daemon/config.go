package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
	"github.com/card-dev/card/substrate"
)

// ConfigFileName is the optional config file inside the home directory.
const ConfigFileName = "card.toml"

// Config is everything card.toml can set. Every field has a working default,
// so a daemon with no file at all is fully usable; flags override the file.
type Config struct {
	// Addr is the listen address. Port 0 picks a free port; clients find it
	// in daemon.json. A non-loopback host needs AllowNonLoopback.
	Addr             string `toml:"addr"`
	AllowNonLoopback bool   `toml:"allow_non_loopback"`
	LogLevel         string `toml:"log_level"`

	// AllowedOrigins are browser origins allowed to connect. Empty: none.
	AllowedOrigins []string `toml:"allowed_origins"`
	// AllowedHosts are extra Host header names, for a non-loopback listener.
	AllowedHosts []string `toml:"allowed_hosts"`
	// Origins grants an allowed browser origin other access classes than
	// the default read and agents (read-only runs): [origins."https://app.example"]
	// grants = ["read", "agents", "write", "approve"] lets its pages start
	// runs that write or ask and answer their questions; "host" adds the
	// host itself and bypass runs.
	Origins map[string]OriginConfig `toml:"origins"`

	MaxMessageBytes  int64 `toml:"max_message_bytes"`
	MaxConnections   int   `toml:"max_connections"`
	MaxInFlight      int   `toml:"max_inflight_per_connection"`
	ShutdownGraceSec int   `toml:"shutdown_grace_secs"`

	// MaxConnectionsPerOrigin caps one allowed web origin's connections (0:
	// a quarter of max_connections); MaxPendingConnections caps the
	// connections that have not finished their upgrade, the oldest closed
	// past it (0: 256 or max_connections, whichever is larger).
	MaxConnectionsPerOrigin int `toml:"max_connections_per_origin"`
	MaxPendingConnections   int `toml:"max_pending_connections"`

	// AllowBypass lets a request use permission_mode = "bypass", which turns
	// off the agent's own protections. Off by default.
	AllowBypass bool `toml:"allow_bypass"`
	// AllowedEditDirs are directories (each with everything under it) a
	// run that writes may use as its cwd where card refuses one by default:
	// the filesystem's root, the user's home itself, system directories.
	AllowedEditDirs []string `toml:"allowed_edit_dirs"`
	// RecordTasks keeps the task text in the run history, at most its
	// first MaxTaskRecordBytes; when false only its length and SHA-256 are
	// kept.
	RecordTasks        *bool `toml:"record_tasks"`
	MaxTaskRecordBytes int   `toml:"max_task_record_bytes"`
	// MaxRuns and MaxAgeDays bound the run history: older runs are pruned,
	// never a running one. Zero means no bound of that kind.
	MaxRuns    int `toml:"max_runs"`
	MaxAgeDays int `toml:"max_age_days"`
	// MaxSubscriptionsPerConn caps the runs one connection follows at once
	// with runs.subscribe; MaxSubscriberQueueBytes caps the events a
	// subscriber may have yet to be sent before it is cut off.
	MaxSubscriptionsPerConn int   `toml:"max_subscriptions_per_connection"`
	MaxSubscriberQueueBytes int64 `toml:"max_subscriber_queue_bytes"`
	// CancelOnDisconnect ends a client's runs when its connection closes.
	// By default a run belongs to the daemon and outlives the socket.
	CancelOnDisconnect bool  `toml:"cancel_on_disconnect"`
	MaxConcurrentRuns  int   `toml:"max_concurrent_runs"`
	MaxEventsPerRun    int   `toml:"max_events_per_run"`
	MaxOutputBytes     int64 `toml:"max_output_bytes"`
	// ApprovalTimeoutSecs is how long a question of an ask-mode run waits
	// for a client's answer when the request does not say; then it is
	// denied.
	ApprovalTimeoutSecs int   `toml:"approval_timeout_secs"`
	ProbeTimeoutSec     int   `toml:"probe_timeout_secs"`
	LoginShellPath      *bool `toml:"login_shell_path"`

	// Attachments bounds the images one agents.invoke may attach.
	Attachments plan.AttachmentLimits `toml:"attachments"`

	// MaxAPIRetries is a run's bound on the agent's own retries of a failed
	// model call when the request names none.
	MaxAPIRetries int `toml:"max_api_retries"`

	// StallSecs and StallKillSecs are a run's watchdog when the request
	// names none: the silence after which it is marked stalled, and the
	// silence after which it is ended (0: never). See spawn's watchdog for
	// how the defaults were chosen.
	StallSecs     int `toml:"stall_secs"`
	StallKillSecs int `toml:"stall_kill_secs"`

	// Adapters holds per-adapter operator settings, keyed by adapter id.
	Adapters map[string]AdapterConfig `toml:"adapters"`
	// Agents declares agents that speak ACP on stdio, keyed by the id
	// they are invoked by (config_agents.go).
	Agents map[string]AgentDeclConfig `toml:"agents"`

	// Budget is the [budget] table: daily and monthly spending limits,
	// overall and per adapter ([budget.adapters.<id>]), counted from the
	// run history in the daemon's local time zone.
	Budget BudgetConfig `toml:"budget"`

	// Substrate is the [substrate] table: read_only, and an optional MCP
	// bridge ([substrate.mcp] command or url).
	Substrate substrate.Config `toml:"substrate"`

	// Sessions is the [sessions] table: conversations across turns.
	Sessions SessionsConfig `toml:"sessions"`
}

// SessionsConfig is the [sessions] table.
type SessionsConfig struct {
	// MaxQueue bounds the prompts one session holds waiting behind its
	// running turn; one more is refused, never dropped.
	MaxQueue int `toml:"max_queue"`
	// IdleSecs ends a session's warm agent after this long without a turn;
	// the next turn resumes the CLI's session cold.
	IdleSecs int `toml:"idle_secs"`
	// MaxWarm bounds the warm agents alive at once, across sessions; past
	// it the least recently used one is ended.
	MaxWarm int `toml:"max_warm"`
	// MaxOpen bounds the sessions open at once; MaxOpenPerOrigin those
	// one web origin started (native clients count as one origin). One
	// more sessions.start is refused.
	MaxOpen          int `toml:"max_open"`
	MaxOpenPerOrigin int `toml:"max_open_per_origin"`
	// MaxWorktreesPerOrigin bounds the worktrees of isolated sessions one
	// web origin holds (native clients count as one origin): open and
	// closed sessions' alike, until discarded or pruned. A page with the
	// default grants can start read-only isolated sessions, and closing
	// one keeps its worktree, so max_open_per_origin alone would not
	// bound what it leaves on the disk. One more isolated start is
	// refused.
	MaxWorktreesPerOrigin int `toml:"max_worktrees_per_origin"`
	// CloseIdleHours closes a session with no turn and no change for this
	// long; 0 never does. Closed sessions are deleted with the run
	// history's max_age_days (their turns are runs).
	CloseIdleHours int `toml:"close_idle_hours"`
	// WorktreeMaxAgeDays discards the worktree (and branch) of a closed
	// isolated session that changed nothing for this long; 0 never does.
	// An open session's worktree is kept, and sessions.discard removes
	// one at once.
	WorktreeMaxAgeDays int `toml:"worktree_max_age_days"`
}

// BudgetLimits are one scope's budgets; an unset key is no budget of that
// kind. Pointers, so that a zero written in the file is refused rather than
// read as "no budget": a budget of nothing is a typo, and a daemon that
// refuses every run is the wrong way to find out.
type BudgetLimits struct {
	DailyUSD    *float64 `toml:"daily_usd"`
	MonthlyUSD  *float64 `toml:"monthly_usd"`
	DailyTokens *float64 `toml:"daily_tokens"`
}

// BudgetConfig is the [budget] table: the overall limits, and each
// adapter's under [budget.adapters.<id>].
type BudgetConfig struct {
	BudgetLimits
	Adapters map[string]BudgetLimits `toml:"adapters"`
}

// The largest budgets card.toml takes: past them a figure is a typo (an
// extra digit or two), not a plan.
const (
	MaxBudgetUSD    = 1_000_000
	MaxBudgetTokens = 1e12
)

// budgetKeys are the keys of a budget table, for "did you mean".
var budgetKeys = []string{"daily_usd", "monthly_usd", "daily_tokens"}

func (l BudgetLimits) limits() runs.Limits {
	v := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return runs.Limits{DailyUSD: v(l.DailyUSD), MonthlyUSD: v(l.MonthlyUSD), DailyTokens: v(l.DailyTokens)}
}

// budgets is the run subsystem's view of [budget].
func (c Config) budgets() runs.Budgets {
	b := runs.Budgets{All: c.Budget.limits(), Adapters: map[string]runs.Limits{}}
	for id, l := range c.Budget.Adapters {
		b.Adapters[id] = l.limits()
	}
	return b
}

// validate checks each budget is a positive, finite, bounded figure and
// each adapter table names a known adapter.
func (b BudgetConfig) validate(declared func(string) bool) error {
	check := func(table string, l BudgetLimits) error {
		for _, f := range []struct {
			key string
			v   *float64
			max float64
		}{{"daily_usd", l.DailyUSD, MaxBudgetUSD}, {"monthly_usd", l.MonthlyUSD, MaxBudgetUSD}, {"daily_tokens", l.DailyTokens, MaxBudgetTokens}} {
			if f.v == nil {
				continue
			}
			v := *f.v
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
				return fmt.Errorf("%s %s = %v is not a number; give a positive figure", table, f.key, v)
			case v <= 0:
				return fmt.Errorf("%s %s = %v must be above zero; remove the key for no budget", table, f.key, v)
			case v > f.max:
				return fmt.Errorf("%s %s = %v is above the maximum of %g", table, f.key, v, f.max)
			}
		}
		return nil
	}
	if err := check("[budget]", b.BudgetLimits); err != nil {
		return err
	}
	ids := make([]string, 0, len(b.Adapters))
	for id := range b.Adapters {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if _, ok := spawn.Lookup(id); !ok && !declared(id) {
			msg := fmt.Sprintf("[budget.adapters.%s]: unknown agent %q", id, id)
			if near := didYouMean(id, spawn.IDs()); near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			}
			return fmt.Errorf("%s: known agents are %s", msg, strings.Join(spawn.IDs(), ", "))
		}
		if err := check(fmt.Sprintf("[budget.adapters.%s]", id), b.Adapters[id]); err != nil {
			return err
		}
	}
	return nil
}

// unknownBudgetKey is the message for an unknown key under [budget], with
// the known key its wrong part is most likely a typo of.
func unknownBudgetKey(key []string) string {
	msg := strings.Join(key, ".")
	top := append(slices.Clone(budgetKeys), "adapters")
	wrong, known := key[1], top
	if slices.Contains(top, key[1]) && len(key) == 4 {
		wrong, known = key[3], budgetKeys
	}
	if near := didYouMean(wrong, known); near != "" && near != wrong {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return msg
}

// didYouMean is the candidate nearest to s by edit distance, if it is near
// enough to be a typo of it.
func didYouMean(s string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		if d := editDistance(s, c); best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > max(2, len(best)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// OriginConfig is an operator's [origins."<origin>"] table.
type OriginConfig struct {
	// Grants are the access classes connections from the origin hold.
	Grants []string `toml:"grants"`
}

// OriginGrantsKey is the card.toml key that grants origin its access
// classes, for the messages that name it.
func OriginGrantsKey(origin string) string {
	return fmt.Sprintf("[origins.%q] grants", origin)
}

// originGrants is the gate's table of per-origin grants, from [origins].
// Validate has checked every entry.
func (c Config) originGrants() map[string]rpc.Grants {
	out := make(map[string]rpc.Grants, len(c.Origins))
	for o, oc := range c.Origins {
		out[o], _ = rpc.ParseGrants(oc.Grants)
	}
	return out
}

// retention is the run history's bound from max_runs and max_age_days.
func (c Config) retention() store.Retention {
	return store.Retention{MaxRuns: c.MaxRuns, MaxAge: time.Duration(c.MaxAgeDays) * 24 * time.Hour}
}

// AdapterConfig is an operator's [adapters.<id>] table.
type AdapterConfig struct {
	// Bin pins the binary, like CAR_<ID>_BIN; the environment wins over it.
	Bin string `toml:"bin"`
	// Args are appended to every invocation (e.g. a Codex
	// `-c model_providers.<name>={…}` provider). Forbidden flags that remove
	// the agent's boundary are refused at load.
	Args []string `toml:"args"`
	// Env is added to the agent's environment.
	Env map[string]string `toml:"env"`
}

// DefaultConfig is the embedded default: what runs with no card.toml.
func DefaultConfig() Config {
	// Each pointer gets its own bool: sharing one would let
	// `login_shell_path = false` switch record_tasks off too.
	recordTasks, loginShellPath := true, true
	return Config{
		Addr:                    "127.0.0.1:0",
		LogLevel:                "info",
		MaxMessageBytes:         4 << 20,
		MaxConnections:          128,
		MaxInFlight:             64,
		ShutdownGraceSec:        10,
		RecordTasks:             &recordTasks,
		MaxTaskRecordBytes:      4096,
		MaxRuns:                 10000,
		MaxAgeDays:              30,
		MaxSubscriptionsPerConn: 64,
		MaxSubscriberQueueBytes: 16 << 20,
		MaxConcurrentRuns:       8,
		MaxEventsPerRun:         10000,
		MaxOutputBytes:          64 << 20,
		ApprovalTimeoutSecs:     api.DefaultApprovalTimeoutSecs,
		ProbeTimeoutSec:         5,
		LoginShellPath:          &loginShellPath,
		MaxAPIRetries:           spawn.DefaultMaxAPIRetries,
		StallSecs:               spawn.DefaultStallSecs,
		Attachments:             plan.AttachmentLimits{MaxCount: 10, MaxBytes: 20 << 20, MaxBytesInFlight: 256 << 20},
		Sessions:                SessionsConfig{MaxQueue: 8, IdleSecs: 300, MaxWarm: 4, MaxOpen: 64, MaxOpenPerOrigin: 16, MaxWorktreesPerOrigin: 32, CloseIdleHours: 168, WorktreeMaxAgeDays: 30},
	}
}

// maxSecsSetting bounds card.toml's durations in seconds: a day.
const maxSecsSetting = 86400

// ShutdownGrace is how long a graceful shutdown waits for work to end.
func (c Config) ShutdownGrace() time.Duration {
	return time.Duration(c.ShutdownGraceSec) * time.Second
}

// LoadConfig reads path over the defaults. A missing file is the defaults;
// an unknown key is an error naming it, so a typo is never silently ignored.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read config %s: %w", path, err)
	}
	return ParseConfig(path, string(b))
}

// ParseConfig parses card.toml text over the defaults; path is for messages.
func ParseConfig(path, text string) (Config, error) {
	cfg := DefaultConfig()
	md, err := toml.Decode(text, &cfg)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
			if len(k) >= 2 && k[0] == "budget" {
				keys[i] = unknownBudgetKey(k)
			}
		}
		sort.Strings(keys)
		return cfg, fmt.Errorf("config %s: unknown key(s) %s; see docs/config.md for the keys card.toml takes", path, strings.Join(keys, ", "))
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate checks values that decode but make no sense.
func (c Config) Validate() error {
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("addr %q: %v (want host:port, e.g. 127.0.0.1:0)", c.Addr, err)
	}
	if !c.AllowNonLoopback && !isLoopbackHost(host) {
		return fmt.Errorf("addr %q is not loopback; set allow_non_loopback = true if you really mean to expose card beyond this machine", c.Addr)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	for _, o := range c.AllowedOrigins {
		if o == "null" || o == "*" || !strings.Contains(o, "://") {
			return fmt.Errorf("allowed_origins: %q is not an exact origin like \"https://app.example\" (\"null\" and \"*\" are never allowed)", o)
		}
	}
	for _, dir := range c.AllowedEditDirs {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("%s: %q is not an absolute path", plan.AllowedEditDirsKey, dir)
		}
	}
	for o, oc := range c.Origins {
		key := OriginGrantsKey(o)
		allowed := false
		for _, a := range c.AllowedOrigins {
			allowed = allowed || strings.EqualFold(strings.TrimSuffix(a, "/"), strings.TrimSuffix(o, "/"))
		}
		if !allowed {
			return fmt.Errorf("%s: %q is not in allowed_origins, so its pages cannot connect at all; add it there too", key, o)
		}
		if len(oc.Grants) == 0 {
			return fmt.Errorf("%s is empty: an origin allowed to connect that may call nothing should be removed from allowed_origins instead", key)
		}
		if _, err := rpc.ParseGrants(oc.Grants); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if err := c.validateNumbers(); err != nil {
		return err
	}
	if err := c.validateRelations(); err != nil {
		return err
	}
	if err := c.validateAgents(); err != nil {
		return err
	}
	for id, a := range c.Adapters {
		if _, ok := spawn.Lookup(id); !ok && !c.declared(id) {
			return fmt.Errorf("[adapters.%s]: unknown agent %q: known agents are %s", id, id, strings.Join(spawn.IDs(), ", "))
		}
		if err := spawn.CheckExtras(id, spawn.Extras{Args: a.Args, Env: a.Env}); err != nil {
			return fmt.Errorf("[adapters.%s]: %w", id, err)
		}
	}
	if err := c.Budget.validate(c.declared); err != nil {
		return err
	}
	if m := c.Substrate.MCP; m != nil {
		if (len(m.Command) == 0) == (m.URL == "") {
			return errors.New("substrate.mcp: set exactly one of command (a stdio bridge) or url (a streamable-HTTP bridge)")
		}
	}
	return nil
}

// validateNumbers holds every numeric key to its range.
func (c Config) validateNumbers() error {
	checks := []struct {
		name string
		v    int64
		min  int64
	}{
		{"max_message_bytes", c.MaxMessageBytes, 1024},
		{"max_connections", int64(c.MaxConnections), 1},
		{"max_connections_per_origin", int64(c.MaxConnectionsPerOrigin), 0},
		{"max_pending_connections", int64(c.MaxPendingConnections), 0},
		{"max_inflight_per_connection", int64(c.MaxInFlight), 1},
		{"shutdown_grace_secs", int64(c.ShutdownGraceSec), 1},
		{"max_concurrent_runs", int64(c.MaxConcurrentRuns), 1},
		{"max_events_per_run", int64(c.MaxEventsPerRun), 10},
		{"max_output_bytes", c.MaxOutputBytes, 4096},
		{"probe_timeout_secs", int64(c.ProbeTimeoutSec), 1},
		{"approval_timeout_secs", int64(c.ApprovalTimeoutSecs), 1},
		{"max_task_record_bytes", int64(c.MaxTaskRecordBytes), 64},
		{"max_runs", int64(c.MaxRuns), 0},
		{"max_age_days", int64(c.MaxAgeDays), 0},
		{"max_subscriptions_per_connection", int64(c.MaxSubscriptionsPerConn), 1},
		{"max_subscriber_queue_bytes", c.MaxSubscriberQueueBytes, 64 << 10},
		{"attachments.max_count", int64(c.Attachments.MaxCount), 0},
		{"attachments.max_bytes", c.Attachments.MaxBytes, 1},
		{"attachments.max_bytes_in_flight", c.Attachments.MaxBytesInFlight, 1},
		{"sessions.max_queue", int64(c.Sessions.MaxQueue), 0},
		{"sessions.idle_secs", int64(c.Sessions.IdleSecs), 1},
		{"sessions.max_warm", int64(c.Sessions.MaxWarm), 0},
		{"sessions.max_open", int64(c.Sessions.MaxOpen), 1},
		{"sessions.max_open_per_origin", int64(c.Sessions.MaxOpenPerOrigin), 1},
		{"sessions.max_worktrees_per_origin", int64(c.Sessions.MaxWorktreesPerOrigin), 1},
		{"sessions.close_idle_hours", int64(c.Sessions.CloseIdleHours), 0},
		{"sessions.worktree_max_age_days", int64(c.Sessions.WorktreeMaxAgeDays), 0},
	}
	for _, ch := range checks {
		if ch.v < ch.min {
			return fmt.Errorf("%s = %d is below the minimum of %d", ch.name, ch.v, ch.min)
		}
	}
	// Values that become a time.Duration are bounded above too: past the
	// int64 nanoseconds a Duration holds they wrap, and a wrapped
	// max_age_days prunes every finished run.
	for _, ch := range []struct {
		name string
		v    int
		max  int
	}{
		{"max_age_days", c.MaxAgeDays, api.MaxAgeDaysLimit},
		{"shutdown_grace_secs", c.ShutdownGraceSec, maxSecsSetting},
		{"probe_timeout_secs", c.ProbeTimeoutSec, maxSecsSetting},
		{"sessions.idle_secs", c.Sessions.IdleSecs, maxSecsSetting},
		{"sessions.max_queue", c.Sessions.MaxQueue, 1000},
		{"sessions.close_idle_hours", c.Sessions.CloseIdleHours, api.MaxAgeDaysLimit * 24},
		{"sessions.worktree_max_age_days", c.Sessions.WorktreeMaxAgeDays, api.MaxAgeDaysLimit},
	} {
		if ch.v > ch.max {
			return fmt.Errorf("%s = %d is above the maximum of %d", ch.name, ch.v, ch.max)
		}
	}
	return nil
}

// validateRelations holds the keys that bound each other, and those spawn
// and the approvals bound.
func (c Config) validateRelations() error {
	if c.MaxConnectionsPerOrigin > c.MaxConnections {
		return fmt.Errorf("max_connections_per_origin = %d is above max_connections = %d", c.MaxConnectionsPerOrigin, c.MaxConnections)
	}
	if c.Attachments.MaxBytesInFlight < c.Attachments.MaxBytes {
		return fmt.Errorf("attachments.max_bytes_in_flight = %d is below attachments.max_bytes = %d: one image must fit", c.Attachments.MaxBytesInFlight, c.Attachments.MaxBytes)
	}
	if c.MaxAPIRetries < 0 || c.MaxAPIRetries > spawn.MaxAPIRetriesLimit {
		return fmt.Errorf("max_api_retries = %d is outside 0..%d", c.MaxAPIRetries, spawn.MaxAPIRetriesLimit)
	}
	if c.StallSecs < 1 || c.StallSecs > api.MaxInvokeTimeoutSecs {
		return fmt.Errorf("stall_secs = %d is outside 1..%d (seconds of silence before a run is marked stalled)", c.StallSecs, api.MaxInvokeTimeoutSecs)
	}
	if k := c.StallKillSecs; k != 0 && (k <= c.StallSecs || k > api.MaxInvokeTimeoutSecs) {
		return fmt.Errorf("stall_kill_secs = %d must be 0 (never end a run for its silence) or more than stall_secs = %d and at most %d", k, c.StallSecs, api.MaxInvokeTimeoutSecs)
	}
	if c.ApprovalTimeoutSecs > api.MaxApprovalTimeoutSecs {
		return fmt.Errorf("approval_timeout_secs = %d is above the maximum of %d", c.ApprovalTimeoutSecs, api.MaxApprovalTimeoutSecs)
	}
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
