package spawn

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
)

// Adapter is one agent CLI: how to build its argv and how to read its
// output. Each adapter is one builder file and one parser file that register
// themselves, so adding an agent touches nothing else in this package.
type Adapter struct {
	// ID is the wire id (claude-code, codex, gemini, ...).
	ID string
	// Build turns a validated request into a plan for the binary at bin.
	// It returns *FieldError for a request field the CLI cannot honour.
	Build func(bin string, req Request) (Plan, error)
	// NewParser returns a fresh parser for one run's stdout.
	NewParser func() Parser
	// ReadOnly says how read_only is enforced, for disclosure to clients:
	// ReadOnlyOSSandbox, ReadOnlyAllowlist, ReadOnlyAgentDefault or
	// ReadOnlyNotEnforced.
	ReadOnly string
	// OwnedFlags are flags the builder sets from the mode; operator extras
	// may not set them (CheckExtras).
	OwnedFlags []string
	// CheckExtraArg, when set, refuses an adapter-specific widening in
	// args[i] (Codex's `-c sandbox_mode=...`); it returns the reason.
	CheckExtraArg func(args []string, i int) string
}

// How an adapter's read_only mode is enforced (issue 9's disclosure).
const (
	ReadOnlyOSSandbox    = "os_sandbox"
	ReadOnlyAllowlist    = "allowlist"
	ReadOnlyAgentDefault = "agent_default"
	ReadOnlyNotEnforced  = "not_enforced"
)

var (
	registryMu sync.RWMutex
	registry   = map[string]Adapter{}
)

// Register adds an adapter. It panics on a duplicate or incomplete adapter:
// both are programming errors found by the first test run.
func Register(a Adapter) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if a.ID == "" || a.Build == nil || a.NewParser == nil {
		panic("spawn: incomplete adapter " + a.ID)
	}
	if _, dup := registry[a.ID]; dup {
		panic("spawn: adapter registered twice: " + a.ID)
	}
	registry[a.ID] = a
}

// Lookup finds a registered adapter by wire id.
func Lookup(id string) (Adapter, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	a, ok := registry[id]
	return a, ok
}

// IDs lists the registered adapter ids, sorted.
func IDs() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	ids := make([]string, 0, len(registry))
	for id := range registry {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Build validates req and builds the plan with the adapter req names. It is
// the one entry point the daemon needs: validation and the adapter-specific
// refusals come back as *FieldError / *BypassRefusedError.
func Build(bin string, req Request) (Plan, error) {
	a, ok := Lookup(req.Adapter)
	if !ok {
		return Plan{}, &FieldError{"id", fmt.Sprintf("unknown adapter %q; known: %s", req.Adapter, strings.Join(IDs(), ", "))}
	}
	if err := req.Validate(); err != nil {
		return Plan{}, err
	}
	if err := CheckExtras(req.Adapter, req.Extras); err != nil {
		return Plan{}, err
	}
	return a.Build(bin, req)
}

// Plan is everything needed to start one agent run, decided before any
// process exists, so tests can pin it whole.
type Plan struct {
	// Program is the binary to execute (absolute path, as detection found it).
	Program string
	// Args excludes Program. An element may hold FileRef placeholders that
	// the runner replaces with the path of the file it wrote.
	Args []string
	// Env holds additions to the daemon's environment (operator env first,
	// then the adapter's own, which win). Values may hold FileRef placeholders.
	Env map[string]string
	// Dir is the working directory: absolute and existing, checked by Run.
	Dir string
	// Files are written by the runner, 0600, into a private 0700 directory it
	// creates for the run and removes afterwards.
	Files []PlanFile
}

// PlanFile is a private file a run needs, such as a system prompt.
type PlanFile struct {
	// Path is relative to the run's private directory (a plain file name).
	Path    string
	Content []byte
	// Mode is the file mode; 0 means 0600. Anything wider is refused.
	Mode os.FileMode
}

const filePrefix = "{{card-file:"

// FileRef is the placeholder for the absolute path of the PlanFile at path.
// The runner substitutes it; it only ever stands for a path, never content.
func FileRef(path string) string { return filePrefix + path + "}}" }

// Command is the argv for error messages and logs: program and args, with
// placeholders left as they are. The prompt is never part of it.
func (p Plan) Command() string {
	return strings.Join(append([]string{p.Program}, p.Args...), " ")
}

// modeTable returns the value for mode, for builders mapping each mode.
func modeValue[T any](m Mode, readOnly, edit, bypass T) T {
	switch m {
	case ModeEdit:
		return edit
	case ModeBypass:
		return bypass
	default:
		return readOnly
	}
}

// extraEnv copies the operator's env into a fresh map the builder may add to.
func extraEnv(e Extras) map[string]string {
	env := make(map[string]string, len(e.Env)+1)
	for k, v := range e.Env {
		env[k] = v
	}
	return env
}
