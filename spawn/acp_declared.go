package spawn

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// An agent declared in card.toml ([agents.<id>]) speaks ACP on its stdio
// and card has no code of its own for it: every run, ask run and warm
// agent is the declared command over acp_client.go, in every permission
// mode. card is the ACP client, so a mode is held where ACP lets a client
// hold it, in the answers to the agent's session/request_permission
// (acpModeAnswer); what the agent does without asking, no answer of
// card's can stop, which is why a declared agent's read-only mode is
// disclosed as not enforced.

// CheckDeclaration refuses a declaration card would not run as it says:
// its own checks (agent.Declaration.Check), then every argument of its
// command against the flags that turn an agent's protection off, which
// card never passes on any agent's command line.
func CheckDeclaration(d agent.Declaration) error {
	if err := d.Check(); err != nil {
		return err
	}
	for i, a := range d.Command {
		where := fmt.Sprintf("[agents.%s] command[%d]", d.ID, i)
		if strings.Contains(a, filePrefix) {
			return fmt.Errorf("%s: %q uses card's private file placeholder; remove it", where, a)
		}
		for _, tok := range argTokens(a) {
			if slices.Contains(ForbiddenFlags, tok) {
				return fmt.Errorf("%s: %q turns off the agent's protection (%s), a flag card owns; remove it — bypass is a per-request mode the operator enables with allow_bypass = true", where, a, tok)
			}
		}
	}
	return nil
}

// declaredDriver is the driver of a declared agent: every plan is ACP.
func declaredDriver(a agent.Adapter) Driver {
	d := a.Declared
	build := func(bin string, req Request) (Plan, error) { return buildDeclared(d, bin, req) }
	dialect := declaredACP
	return Driver{
		For:   a.ID,
		Build: build,
		// Never read: every plan of a declared agent runs over ACP.
		NewParser:     func() Parser { return nil },
		CheckExtraArg: noExtraArgCheck,
		MCP:           MCPHandover{Refused: "card hands a declared ACP agent no MCP server of a client's (its session/new carries none)"},
		Protocols:     map[Protocol]func(Plan) protocol{ProtocolACP: acpClientOf(dialect)},
		Caps: CapsDriver{
			NoCost:     "a declared ACP agent's cost is what it reports, if anything; card holds no cost cap for it",
			TokensWhen: TokensTurnEnd,
		},
		Warm: WarmDriver{Build: func(bin string, req Request) (Plan, error) {
			if req.SessionID != "" {
				return Plan{}, errUnsupported("session_id", req.Adapter, "over ACP the agent names the session (session/new) and reports it in the session event")
			}
			return buildDeclared(d, bin, req)
		}},
		Channels: Channels{
			OneShot: ArgChannel{Name: d.Command[0] + " over ACP (one-shot runs)"},
			Session: ArgChannel{Name: d.Command[0] + " over ACP (sessions and ask runs)"},
		},
	}
}

// buildDeclared is the plan of a declared agent in any mode: its command
// as declared (the rest of its argv after the program), its env under the
// operator's, and the session over ACP. The session to continue goes
// inside the protocol, never on argv.
func buildDeclared(d *agent.Declaration, bin string, req Request) (Plan, error) {
	why := "a declared ACP agent is run as card.toml declares it; ACP has no field for this"
	if err := refuse(req.Adapter,
		refusal{req.AllowedTools != nil, "allowed_tools", why},
		refusal{req.MaxTurns > 0, "max_turns", why + "; use timeout_secs"},
		refusal{req.Model != "", "model", why + " (set the model in the agent's own configuration or its env in [agents." + req.Adapter + "])"},
		refusal{req.Effort != "", "effort", why},
		refusal{req.SystemPrompt != "", "system_prompt", why},
		refusal{req.NoSession, "session_id", "an ACP agent keeps its sessions itself; card cannot discard one"},
		refusal{req.SessionID != "", "session_id", "over ACP the agent names the session (session/new) and reports it in the session event"},
	); err != nil {
		return Plan{}, err
	}
	env := make(map[string]string, len(d.Env)+len(req.Extras.Env))
	for k, v := range d.Env {
		env[k] = v
	}
	// [adapters.<id>] env, if the operator gave one too, goes over it.
	for k, v := range req.Extras.Env {
		env[k] = v
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: env}
	p.Args = append(append([]string{}, req.Extras.Args...), d.Command[1:]...)
	mode := req.EffectiveMode()
	if mode == ModeAsk {
		p.Ask = &AskPlan{Channel: AskViaSession}
	}
	p.Input = Input{Images: req.Images}
	p.Session = &SessionPlan{Protocol: ProtocolACP, Adapter: req.Adapter, resume: req.Resume, mode: mode}
	return p, nil
}

// declaredACP is the dialect of an agent card knows nothing more about
// than ACP: a call is named by its kind, as Copilot's are, and card
// answers its questions by the session's mode.
var declaredACP = acpDialect{
	toolName:    func(c acp.ToolCallUpdate) string { return string(c.Kind) },
	exitFailure: func(ExitInfo) *api.RunError { return nil },
	authHint:    "sign the agent in as its own documentation says (card offers its authMethods to nobody), then retry",
	byMode:      true,
	// Every ACP agent serves session/cancel, and one that started a
	// command in a session of its own ends it on cancel, not on the kill
	// of its group.
	cancelFirst: true,
}

// acpModeAnswer decides one of the agent's permission requests by the
// session's permission mode, without a person: decided is false only in
// ask mode for a call that reading does not cover, which goes to the
// client. kind is the call's (or, when the request leaves it out, the one
// its tool_call announced); paths are its locations.
//
//   - bypass: allowed.
//   - read, search and think: allowed in every mode; they change nothing.
//   - read_only: everything else refused (edit, delete, move, execute,
//     fetch, switch_mode and the kinds ACP calls other).
//   - edit: edit, delete and move allowed when they name at least one
//     location and every one resolves, symlinks and all, under the cwd;
//     everything else refused, every execute among it.
//   - ask: what edit would not have to judge is asked.
func acpModeAnswer(mode Mode, cwd string, kind acp.ToolKind, paths []string) (allow, decided bool, why string) {
	switch kind {
	case acp.ToolRead, acp.ToolSearch, acp.ToolThink:
		return true, true, ""
	}
	switch mode {
	case ModeBypass:
		return true, true, ""
	case ModeAsk:
		return false, false, ""
	case ModeEdit:
		switch kind {
		case acp.ToolEdit, acp.ToolDelete, acp.ToolMove:
			if len(paths) == 0 {
				return false, true, fmt.Sprintf("card's edit mode refused this %s call: it names no file, so card cannot tell it stays under the working dir", kind)
			}
			for _, p := range paths {
				if err := underDir(cwd, p); err != nil {
					return false, true, "card's edit mode refused this " + string(kind) + " call: " + err.Error()
				}
			}
			return true, true, ""
		}
		return false, true, fmt.Sprintf("card's edit mode refused this %s call: edit mode changes files under the working dir and runs nothing", kindWord(kind))
	}
	return false, true, fmt.Sprintf("card's read_only mode refused this %s call", kindWord(kind))
}

func kindWord(k acp.ToolKind) string {
	if k == "" {
		return "unnamed"
	}
	return string(k)
}

// underDir says whether path, resolved as the agent would write it
// (relative to root when not absolute) and with every symlink of the part
// that exists followed, is root or under it. A path that ends in a
// symlink pointing nowhere (a write would create its target wherever it
// points) or holds a ".." once made absolute is refused outright, as
// card's other edit gates refuse them.
func underDir(root, path string) error {
	if path == "" {
		return errors.New("an empty path")
	}
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(root, abs)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "..") {
		return fmt.Errorf("%s holds a '..', which the system takes after following links", path)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("the working dir %s cannot be resolved: %v", root, err)
	}
	real, err := resolveExisting(filepath.Clean(abs))
	if err != nil {
		return fmt.Errorf("%s cannot be resolved safely (%v)", path, err)
	}
	if real != realRoot && !strings.HasPrefix(real, strings.TrimSuffix(realRoot, string(filepath.Separator))+string(filepath.Separator)) {
		return fmt.Errorf("%s is outside the working dir %s; edit mode changes files under it only", path, realRoot)
	}
	return nil
}

// resolveExisting follows the symlinks of the longest part of p that
// exists and keeps the rest as it is.
func resolveExisting(p string) (string, error) {
	var rest []string
	cur := p
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(append([]string{real}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if fi, lerr := os.Lstat(cur); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", errors.New("a symbolic link that points nowhere")
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", errors.New("no part of it exists")
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}

// byMode answers a question by the session's mode when the mode decides
// it, with the event that says so; false leaves it to the client (ask).
func (c *acpClient) byMode(t *turn, name string, call acp.ToolCallUpdate, opts []acp.PermissionOption) (acp.RequestPermissionResponse, bool) {
	kind := call.Kind
	if kind == "" {
		kind = acp.ToolKind(name)
	}
	paths := make([]string, 0, len(call.Locations))
	for _, l := range call.Locations {
		paths = append(paths, l.Path)
	}
	allow, decided, why := acpModeAnswer(c.mode, c.a.plan.Dir, kind, paths)
	if !decided {
		return acp.RequestPermissionResponse{}, false
	}
	if !allow {
		t.emit(Event{Kind: api.EventOther, Text: why})
	}
	return acpAnswer(opts, allow), true
}
