package spawn

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Adapter is one agent CLI as spawn drives it: the agent's static facts
// (package agent, including the read-only enforcement and the flags card
// owns) joined with its Driver.
type Adapter struct {
	agent.Adapter
	Driver
}

// Driver is everything spawn does differently per adapter, in one value
// declared in the adapter's own file (spawn/<binary>.go) and listed in
// drivers. Every field is set: a hook an adapter does not need says so with
// a named no-op or a stated reason, so a driver that forgot one stops the
// program at start-up instead of failing a person's run.
type Driver struct {
	// For is the agent id the driver is for (an agent constant).
	For string
	// Build turns a validated request into a plan for the binary at bin.
	// It returns *api.FieldError for a request field the CLI cannot honour.
	Build func(bin string, req Request) (Plan, error)
	// NewParser returns a fresh parser for one run's stdout.
	NewParser func() Parser
	// CheckExtraArg refuses an adapter-specific widening in the operator's
	// args[i] (Codex's `-c sandbox_mode=...`) and returns the reason, or
	// "" to let it through; noExtraArgCheck for a CLI with none.
	CheckExtraArg func(args []string, i int) string
	// BypassValues are words that, anywhere in an operator's arg, turn the
	// CLI's own protection off (Gemini's yolo approval mode), each with what
	// it is; nil for a CLI whose bypass is only the ForbiddenFlags.
	BypassValues map[string]string
	// MCP is how a client's MCP server reaches the agent for one run.
	MCP MCPHandover
	// Protocols are what the CLI speaks over its stdio where it is not
	// run one-shot (its ask runs, its warm agents), each with card's side
	// of it; a plan names the one it speaks (Plan.Session). None for a CLI
	// that only runs one-shot: Claude Code asks through card's permission
	// tool, on its command line.
	Protocols map[Protocol]func(Plan) protocol
	// StdoutToFile gives a one-shot run's child a file for stdout instead
	// of a pipe (Plan.StdoutToFile): for a CLI that exits as soon as it
	// has answered and, with a pipe, loses the part of its stream the
	// kernel's buffer had not taken. Gemini, Copilot and Droid print the
	// prompt back in their stream, so with a big prompt the answer is in
	// that part (checked against the real CLIs with a stdout pipe read
	// late: each wrote about 64 KB of a 300–500 KB stream; Claude Code,
	// Codex and Pi do not echo the prompt, and Pi waits for its pipe).
	StdoutToFile bool
	// CardNamesSession says card names the CLI's session itself, before
	// any turn: the CLI keeps its conversation in a file at a path card
	// chooses (Pi), so a session's id is card's from sessions.start and
	// every turn, warm or cold, resumes that file.
	CardNamesSession bool
	// Caps is how the CLI's run is held to a request's max_cost_usd and
	// max_tokens.
	Caps CapsDriver
	// Warm is the CLI's channel that keeps one process across the turns of
	// a conversation (warm.go).
	Warm WarmDriver
	// Channels are the CLI's one-shot mode and its session protocol as
	// the operator's args meet them (channels.go): what each refuses, and
	// how each spells a setting the other takes under another flag.
	Channels Channels
}

// WarmDriver is how an adapter's CLI is kept warm: Build, or None with why
// not. Set only once the channel was proved against the real CLI (two
// turns in one process, a cancelled turn, each mode's boundary). The warm
// agent speaks one of the driver's Protocols, as its plan names it.
type WarmDriver struct {
	// Build is BuildWarm's plan for the adapter, from a validated request.
	Build func(bin string, req Request) (Plan, error)
	// None says why the adapter is not kept warm.
	None string
}

// MCPHandover is how a CLI is handed one HTTP MCP server for one run:
// exactly one of Add and Refused is set.
type MCPHandover struct {
	// Add puts the server at endpoint (already checked) on the plan, in
	// the way the CLI takes one without touching the person's settings.
	Add func(p *Plan, endpoint string)
	// Refused says why the CLI cannot be handed one; the refusal carries
	// it to the client.
	Refused string
}

// noExtraArgCheck is CheckExtraArg for a CLI whose widenings are all
// flags card already refuses (ForbiddenFlags and the adapter's owned flags).
func noExtraArgCheck([]string, int) string { return "" }

// drivers is every adapter's driver, one line each; the order does not
// matter (agent's list orders the adapters).
var drivers = []Driver{claudeDriver, codexDriver, geminiDriver, copilotDriver, droidDriver, piDriver, openCodeDriver, qwenDriver}

// registry is every adapter with its driver, by id. It is built once, when
// the package is initialised, and only read after.
var registry = mustJoin(agent.BuiltIn(), drivers)

// mustJoin pairs each adapter with its driver. It panics, when the package
// is initialised, on an adapter without a driver or with one missing a
// field, and on a driver for an id no adapter has: an adapter card detects
// but cannot run, or one it runs but never detects, is a programming error
// that must not wait for a test, or a person's run, to be noticed.
func mustJoin(adapters []agent.Adapter, drivers []Driver) map[string]Adapter {
	byID := make(map[string]Driver, len(drivers))
	for _, d := range drivers {
		if _, dup := byID[d.For]; dup {
			panic(fmt.Sprintf("spawn: two drivers for %q", d.For))
		}
		byID[d.For] = d
	}
	out := make(map[string]Adapter, len(adapters))
	for _, a := range adapters {
		d, ok := byID[a.ID]
		if !ok {
			panic(fmt.Sprintf("spawn: adapter %q has no driver in drivers", a.ID))
		}
		if err := d.check(); err != nil {
			panic("spawn: " + err.Error())
		}
		out[a.ID] = Adapter{Adapter: a, Driver: d}
	}
	for id := range byID {
		if _, ok := out[id]; !ok {
			panic(fmt.Sprintf("spawn: driver for %q, which is not an agent adapter", id))
		}
	}
	return out
}

// check reports the first field of d left unset.
func (d Driver) check() error {
	for _, f := range []struct {
		name  string
		unset bool
	}{
		{"Build", d.Build == nil},
		{"NewParser", d.NewParser == nil},
		{"CheckExtraArg (noExtraArgCheck when it has none)", d.CheckExtraArg == nil},
	} {
		if f.unset {
			return fmt.Errorf("the driver for %q has no %s", d.For, f.name)
		}
	}
	if countTrue(d.Caps.CostFlag != nil, d.Caps.CostReported, d.Caps.NoCost != "") != 1 || (d.Caps.TokensWhen == "") == (d.Caps.NoTokens == "") {
		return fmt.Errorf("the driver for %q must say how it holds max_cost_usd (Caps.CostFlag, Caps.CostReported or Caps.NoCost, one of them) and max_tokens (Caps.TokensWhen, or Caps.NoTokens with why not)", d.For)
	}
	if (d.MCP.Add == nil) == (d.MCP.Refused == "") {
		return fmt.Errorf("the driver for %q must either hand over an MCP server (MCP.Add) or say why it cannot (MCP.Refused), not both or neither", d.For)
	}
	if (d.Warm.Build == nil) == (d.Warm.None == "") || (d.Warm.Build != nil && len(d.Protocols) == 0) {
		return fmt.Errorf("the driver for %q must either keep its CLI warm (Warm.Build, speaking one of its Protocols) or say why not (Warm.None), not both or neither", d.For)
	}
	if d.Channels.OneShot.Name == "" || d.Channels.Session.Name == "" {
		return fmt.Errorf("the driver for %q must name both its channels (Channels.OneShot and Channels.Session), as a refusal of an operator arg names them", d.For)
	}
	for p, side := range d.Protocols {
		if p == "" || side == nil {
			return fmt.Errorf("the driver for %q has a protocol without its name or its side (Protocols)", d.For)
		}
	}
	return nil
}

// Lookup finds an adapter by wire id: a built-in one, or an agent
// card.toml declares, whose driver is the generic ACP one.
func Lookup(id string) (Adapter, bool) {
	if a, ok := registry[id]; ok {
		return a, true
	}
	if a, ok := agent.Lookup(id); ok && a.Declared != nil {
		return Adapter{Adapter: a, Driver: declaredDriver(a)}, true
	}
	return Adapter{}, false
}

// CardNamesSession says whether card names the adapter's CLI session
// itself (Driver.CardNamesSession); false for an unknown adapter.
func CardNamesSession(id string) bool {
	a, ok := registry[id]
	return ok && a.CardNamesSession
}

// IDs lists the adapter ids, sorted.
func IDs() []string {
	ids := agent.IDs()
	sort.Strings(ids)
	return ids
}

// Build validates req and builds the plan with the adapter req names. It is
// the one entry point the daemon needs: validation and the adapter-specific
// refusals come back as *api.FieldError / *BypassRefusedError.
func Build(bin string, req Request) (Plan, error) {
	a, ok := Lookup(req.Adapter)
	if !ok {
		return Plan{}, &api.FieldError{Field: "id", Message: fmt.Sprintf("unknown agent %q: known agents are %s", req.Adapter, strings.Join(IDs(), ", "))}
	}
	if err := req.Validate(); err != nil {
		return Plan{}, err
	}
	if err := CheckExtras(req.Adapter, req.Extras); err != nil {
		return Plan{}, err
	}
	if len(req.Images) > 0 && !a.Capabilities.Images {
		return Plan{}, errUnsupported("attachments", req.Adapter, a.NoImages)
	}
	ask := req.EffectiveMode() == ModeAsk
	if ask && !a.Capabilities.Ask {
		return Plan{}, errUnsupported("permission_mode", req.Adapter, "ask: "+a.NoAsk)
	}
	p, err := a.Build(bin, req)
	if err != nil {
		return Plan{}, err
	}
	if ask != (p.Ask != nil) {
		// A builder that ignored ask would run the agent in some other
		// mode the client never chose; one that asks unasked would hang.
		what := "no ask channel"
		if p.Ask != nil {
			what = "an ask channel"
		}
		return Plan{}, fmt.Errorf("spawn: the %s builder gave permission_mode %s a plan with %s", req.Adapter, req.EffectiveMode(), what)
	}
	if err := withMCP(&p, a.MCP, req); err != nil {
		return Plan{}, err
	}
	if err := p.delivers(req.Images); err != nil {
		// Capabilities.Images is what clients are told; a builder that
		// dropped an image would make it a lie.
		return Plan{}, fmt.Errorf("spawn: the %s builder dropped an image: %v", req.Adapter, err)
	}
	p.MaxAPIRetries = req.APIRetries()
	if req.Resume != "" {
		// Only a resumed session has a total from before the run.
		p.UsageBase = req.UsageBase
	}
	// A conversation's child does not exit by itself after its answer
	// (card ends it once the turn is over), so it keeps its pipe.
	p.StdoutToFile = a.StdoutToFile && p.Session == nil
	p.Stall = req.Watchdog()
	if err := withCaps(&p, a, req); err != nil {
		return Plan{}, err
	}
	return p, nil
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
	// Dir is the working directory: absolute, existing and its real name
	// (no symlink on the way), checked by Run, which starts the child in the
	// directory held open by descriptor, not by the name again.
	Dir string
	// Files are written by the runner, 0600, into a private 0700 directory it
	// creates for the run and removes afterwards.
	Files []PlanFile
	// Ask is how the agent asks about tool calls; set in ask mode only.
	Ask *AskPlan
	// Session, when set, runs the child in that protocol (agent.go)
	// instead of one-shot: the prompt travels inside the protocol and the
	// protocol reads stdout.
	Session *SessionPlan
	// Input is how the prompt reaches stdin when the plan adds to it (the
	// request's images); the zero value writes the prompt as it is. A
	// plan with a Session hands Input.Images to its protocol instead.
	Input Input
	// OutputAllowance is added to the run's output limit: what the CLI is
	// known to print back of its own input (the images it was given).
	OutputAllowance int64
	// MaxAPIRetries is how many retries of a failed model call the runner
	// lets the agent make in a row before it ends the run (see retryGuard).
	// Build sets it from the request, and also hands it to the CLI's own
	// retry setting where the CLI has one; 0 allows none.
	MaxAPIRetries int
	// StdoutToFile makes the child's stdout a file in the run's private
	// directory (0600, unlinked once open) that the runner reads as it
	// grows, instead of a pipe: Node writes to a file synchronously, so a
	// CLI that calls process.exit right after a big write still has all of
	// it read. The output limit holds on the file's size as well.
	StdoutToFile bool
	// Stall is the run's watchdog; the zero value watches nothing.
	Stall Watchdog
	// Caps are the request's max_cost_usd and max_tokens as the runner
	// enforces them; nil when the request set neither.
	Caps *PlanCaps
	// SessionID, when set, is the id card named the run's conversation by
	// (Driver.CardNamesSession): the run reports it as its session id,
	// in its result and its session event, whatever id the CLI prints for
	// itself, since card's id is the one that finds the conversation again.
	SessionID string
	// NoSessionID says the run keeps no session (Pi's --no-session): it
	// reports no session id and no session event, since the id the CLI
	// prints for itself would only invite a resume that finds nothing.
	NoSessionID bool
	// UsageBase is the request's UsageBase when it resumes a session: the
	// CLI session's running total before the run, which a CLI reporting
	// that total has the run's part taken from.
	UsageBase api.Usage
}

// PlanFile is a private file a run needs, such as a system prompt.
type PlanFile struct {
	// Path is relative to the run's private directory (a plain file name).
	Path    string
	Content []byte
	// From, when set, is a private file of card's whose bytes the file gets
	// instead of Content: linked when it can be, copied otherwise, never
	// read into memory.
	From *ImageFile
	// Mode is the file mode; 0 means 0600. Anything wider is refused.
	Mode os.FileMode
}

// FilePlaceholderPrefix starts card's private-file placeholder (FileRef).
// Only builders write it; a client's value holding it is refused.
const FilePlaceholderPrefix = filePrefix

const filePrefix = "{{card-file:"

// privateFile adds a 0600 file holding content to the plan and returns the
// placeholder of its path, for text (a system prompt) that must reach the
// agent without being on its argv, where every local user can read it.
func (p *Plan) privateFile(name, content string) string {
	p.Files = append(p.Files, PlanFile{Path: name, Content: []byte(content), Mode: 0o600})
	return FileRef(name)
}

// systemPromptFlag is, for a CLI that takes its system prompt as a file
// named by one of two flags, the flag (appendFlag when the request appends,
// replaceFlag otherwise) and the file; nothing when there is no prompt.
func (p *Plan) systemPromptFlag(req Request, name, replaceFlag, appendFlag string) []string {
	if req.SystemPrompt == "" {
		return nil
	}
	flag := replaceFlag
	if req.SystemPromptAppend {
		flag = appendFlag
	}
	return []string{flag, p.privateFile(name, req.SystemPrompt)}
}

// FileRef is the placeholder for the absolute path of the PlanFile at path.
// The runner substitutes it; it only ever stands for a path, never content.
func FileRef(path string) string { return filePrefix + path + "}}" }

// DirRef is the placeholder for the run's private directory itself (the
// file name left empty), for a CLI that must be told where the plan's files
// are (Gemini's --include-directories).
func DirRef() string { return FileRef("") }

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

// withValue is args with flag and value added when value is set: a request
// field left empty leaves the CLI its own choice.
func withValue(args []string, flag, value string) []string {
	if value == "" {
		return args
	}
	return append(args, flag, value)
}

// extraEnv copies the operator's env into a fresh map the builder may add to.
func extraEnv(e Extras) map[string]string {
	env := make(map[string]string, len(e.Env)+1)
	for k, v := range e.Env {
		env[k] = v
	}
	return env
}
