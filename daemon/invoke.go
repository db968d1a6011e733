package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// agents.invoke's params and timeout bounds live in package api; these
// aliases keep the daemon's code under the old names.
type InvokeParams = api.InvokeParams

const (
	DefaultInvokeTimeout = api.DefaultInvokeTimeout
	MinInvokeTimeoutSecs = api.MinInvokeTimeoutSecs
	MaxInvokeTimeoutSecs = api.MaxInvokeTimeoutSecs
)

// invokeAccessRules are the classes agents.invoke (and its CAR name) needs
// beyond agents, by what the run may do. The invariant they keep: a
// connection holding only read and agents (a web page's default grants)
// starts no run that can write a file or run a command outside a read-only
// boundary, and answers no question. So a run that writes or asks needs
// write (answering its questions is approve, on their own); bypass, which
// turns the agent's protections off, needs host, which allow_bypass alone
// never gives a web page; read_only on an adapter that does not enforce it
// is only a request to the model, so acknowledging that is write; and an
// MCP server handed to the agent acts through its own tools, which no
// permission mode bounds.
var invokeAccessRules = []rpc.AccessRule{
	{Param: "permission_mode", Value: string(spawn.ModeEdit), Access: rpc.AccessWrite},
	{Param: "permission_mode", Value: string(spawn.ModeAsk), Access: rpc.AccessWrite},
	{Param: "permission_mode", Value: string(spawn.ModeBypass), Access: rpc.AccessHost},
	{Param: "acknowledge_unenforced_read_only", Value: true, Access: rpc.AccessWrite},
	{Param: "mcp_endpoint", Access: rpc.AccessWrite},
}

// prepare is agents.invoke's one params step: it decides every bad-params
// answer (-32602 naming the field; an unknown id lists the known ones) and
// builds the run's plan once, before anything is recorded, so a request the
// chosen agent's CLI cannot honour is never a run. What depends on the
// daemon's state (the guard, bypass allowed, the binary, the cap) is the
// run subsystem's gate, after this.
func (d *Daemon) prepare(p InvokeParams) (runs.Request, error) {
	return d.prepareWith(p, nil)
}

// prepareWith is prepare with a choice of attachment policy: nil is
// agents.invoke's (the first bad attachment refuses the request); car is
// CAR's, for agents.invoke_external (a bad one is skipped, recorded as
// dropped with why, and the agent runs with the rest).
func (d *Daemon) prepareWith(p InvokeParams, car []ExternalAttachment) (runs.Request, error) {
	r, _, err := d.prepareBoth(p, car)
	return r, err
}

// prepareBoth is prepareWith that also gives the spawn request the plan was
// built from, with everything the daemon adds to the params (the operator's
// args and env, the defaults of card.toml, the checked cwd): a session's
// warm agent is built from the same request as its one-shot turn, so it
// runs against the same configuration.
func (d *Daemon) prepareBoth(p InvokeParams, car []ExternalAttachment) (_ runs.Request, _ spawn.Request, err error) {
	if strings.TrimSpace(p.ID) == "" {
		return runs.Request{}, spawn.Request{}, rpc.InvalidField("id", "required: the adapter to run, one of %s", strings.Join(spawn.IDs(), ", "))
	}
	if _, ok := spawn.Lookup(p.ID); !ok {
		return runs.Request{}, spawn.Request{}, &detect.UnknownAdapterError{ID: p.ID, Known: spawn.IDs()}
	}
	if field := placeholderIn(reflect.ValueOf(p), ""); field != "" {
		return runs.Request{}, spawn.Request{}, rpc.InvalidField(field, "holds card's private-file placeholder %q, which only card itself may write", spawn.FilePlaceholderPrefix)
	}
	if err := checkInvoke(&p); err != nil {
		return runs.Request{}, spawn.Request{}, err
	}
	var (
		checked []attachment
		skipped []store.Attachment
	)
	if car != nil {
		checked, skipped = readCARAttachments(car, d.cfg.Attachments)
	} else if checked, err = readAttachments(p.Attachments, d.cfg.Attachments); err != nil {
		return runs.Request{}, spawn.Request{}, err
	}
	defer func() {
		if err != nil {
			closeAttachments(checked)
		}
	}()
	// sent are the records of checked, one each and in its order, as the
	// stage step fills them in; the skipped join them in request order.
	images, sent, err := attach(p.ID, checked, p.RequireAttachments)
	if err != nil {
		return runs.Request{}, spawn.Request{}, err
	}
	records := withSkipped(sent, skipped)
	req := spawnRequestOf(&p)
	req.Images = images
	cwd, err := d.runCwd(p.ID, p.Cwd, req.EffectiveMode())
	if err != nil {
		return runs.Request{}, spawn.Request{}, err
	}
	req.Cwd = cwd
	if req.MaxAPIRetries == nil {
		n := d.cfg.MaxAPIRetries
		req.MaxAPIRetries = &n
	}
	if req.StallSecs == nil {
		n := d.cfg.StallSecs
		req.StallSecs = &n
	}
	if req.StallKillSecs == nil {
		n := d.cfg.StallKillSecs
		req.StallKillSecs = &n
	}
	a := d.cfg.Adapters[p.ID]
	req.Extras = spawn.Extras{Args: a.Args, Env: a.Env}
	req.AgentSessionDir = filepath.Join(d.home, home.AgentSessionsDirName)
	// Bypass is the gate's to refuse (after the guard, with its own code),
	// so the plan is built as if it were allowed.
	req.AllowBypass = true
	req.ApprovalTimeout = d.approvalTimeout(p.ApprovalTimeoutSecs)
	// The plan's Program is the binary the gate resolves; nothing in the
	// argv depends on it.
	plan, err := spawn.Build("", req)
	if err != nil {
		return runs.Request{}, spawn.Request{}, err
	}
	var stageFn func(context.Context) ([]store.Attachment, func(), error)
	var discard func()
	if len(checked) > 0 {
		stageFn = func(context.Context) ([]store.Attachment, func(), error) {
			staged, done, err := d.stage(checked, sent, len(images) > 0)
			if err != nil {
				return nil, nil, err
			}
			return withSkipped(staged, skipped), done, nil
		}
		discard = func() { closeAttachments(checked) }
	}
	return runs.Request{
		Adapter:                       p.ID,
		InvokedBy:                     p.InvokedBy,
		Task:                          p.Task,
		Mode:                          req.EffectiveMode(),
		Plan:                          plan,
		Model:                         p.Model,
		Cwd:                           req.Cwd,
		Timeout:                       p.Timeout(),
		AcknowledgeUnenforcedReadOnly: p.AcknowledgeUnenforcedReadOnly,
		ApprovalTimeout:               req.ApprovalTimeout,
		Attachments:                   records,
		Stage:                         stageFn,
		Discard:                       discard,
	}, req, nil
}

// stage reads the checked attachments into a private directory of card's,
// when the run takes them (keep), or only digests them; see stage.
func (d *Daemon) stage(checked []attachment, records []store.Attachment, keep bool) ([]store.Attachment, func(), error) {
	records = slices.Clone(records)
	if !keep {
		return records, func() {}, stage(checked, records, "", d.cfg.Attachments.MaxBytes)
	}
	dir, err := spawn.NewPrivateDir(proc.TempDir(d.env))
	if err != nil {
		closeAttachments(checked)
		return nil, nil, fmt.Errorf("could not make a private directory for the attachments: %w", err)
	}
	if err := stage(checked, records, dir.Path, d.cfg.Attachments.MaxBytes); err != nil {
		dir.Remove()
		return nil, nil, err
	}
	return records, dir.Remove, nil
}

// runCwd is where a run goes: asked (the user's home when empty, allowed in
// read_only only), with every symlink followed, so the agent runs in, and
// the run records, the directory that was judged, not a name that could
// point elsewhere by the time the agent starts (the runner holds that
// directory open and starts the agent in it only if it is still there). A
// mode that writes is refused a directory the cwd policy refuses.
func (d *Daemon) runCwd(adapter, asked string, mode spawn.Mode) (string, error) {
	dir := asked
	if dir == "" {
		dir = d.env["HOME"]
	}
	if !writesUnderCwd(mode) {
		resolved, err := resolveDir(dir)
		if err != nil {
			if asked == "" {
				return dir, nil // a home that is gone: the runner says so
			}
			return "", rpc.InvalidField("cwd", "%q cannot be resolved: %v", asked, err)
		}
		return resolved, nil
	}
	resolved, rule, why, err := d.cwdPolicy.withPath(d.agentPathDirs(adapter)).withInstalls(d.agentBinaries()).judge(osPaths{}, dir)
	if err != nil {
		return "", rpc.InvalidField("cwd", "%q cannot be resolved: %v", asked, err)
	}
	if why != "" {
		return "", cwdRefused(asked, resolved, mode, rule, why)
	}
	return resolved, nil
}

// agentPathDirs is the PATH adapter's agent gets: the search path the
// daemon resolved, or the operator's own PATH for that adapter, which the
// plan's environment puts over it.
func (d *Daemon) agentPathDirs(adapter string) []string {
	var dirs []string
	if d.detector != nil {
		dirs = d.detector.SearchPath().Dirs
	}
	if p, ok := d.cfg.Adapters[adapter].Env["PATH"]; ok {
		dirs = append(slices.Clip(dirs), filepath.SplitList(p)...)
	}
	return dirs
}

// agentBinaries are the binaries card runs for each adapter: the one
// detection found (cached; the first call waits for a detection, which the
// run needs anyway), and the operator's bin = pin, whether or not it was
// found usable. An edit run in the directory of any of them could change
// what runs as that agent, so every adapter's count, not only the run's.
func (d *Daemon) agentBinaries() map[string][]string {
	out := map[string][]string{}
	for id, a := range d.cfg.Adapters {
		if a.Bin != "" {
			out[id] = append(out[id], a.Bin)
		}
	}
	if d.detector != nil {
		for _, s := range d.detector.Detect(d.ctx, false) {
			if s.BinaryPath != "" {
				out[s.ID] = append(out[s.ID], s.BinaryPath)
			}
		}
	}
	return out
}

// checkInvoke judges the fields spawn does not: the task, the mode's need for a
// cwd, the cwd itself, the caller's id.
func checkInvoke(p *InvokeParams) error {
	if strings.TrimSpace(p.Task) == "" {
		return rpc.InvalidField("task", "required: the task for the agent must not be empty")
	}
	if strings.ContainsRune(p.Task, 0) {
		return rpc.InvalidField("task", "contains a NUL byte")
	}
	mode := spawn.Mode(p.PermissionMode)
	switch mode {
	case "", spawn.ModeReadOnly, spawn.ModeEdit, spawn.ModeBypass, spawn.ModeAsk:
	default:
		return rpc.InvalidField("permission_mode", "unknown mode %q; use read_only (default), edit, ask or bypass", p.PermissionMode)
	}
	if err := checkApprovalTimeout(p.PermissionMode, p.ApprovalTimeoutSecs); err != nil {
		return err
	}
	// Refused, not clamped: a client that asked for -1 or a year would
	// otherwise get a deadline it never asked for, and never hear so.
	if s := p.TimeoutSecs; s < 0 || s > api.MaxInvokeTimeoutSecs {
		return rpc.InvalidField("timeout_secs", "must be between %d and %d seconds (or absent for the default of %d), not %d",
			api.MinInvokeTimeoutSecs, api.MaxInvokeTimeoutSecs, int(api.DefaultInvokeTimeout.Seconds()), s)
	}
	if p.Cwd == "" {
		if mode == spawn.ModeEdit || mode == spawn.ModeBypass || mode == spawn.ModeAsk {
			return rpc.InvalidField("cwd", "required when permission_mode is %s: say which directory the agent may change", mode)
		}
	} else {
		if !filepath.IsAbs(p.Cwd) {
			return rpc.InvalidField("cwd", "%q is not an absolute path", p.Cwd)
		}
		st, err := os.Stat(p.Cwd)
		if err != nil {
			return rpc.InvalidField("cwd", "%q does not exist or cannot be read", p.Cwd)
		}
		if !st.IsDir() {
			return rpc.InvalidField("cwd", "%q is not a directory", p.Cwd)
		}
	}
	if p.InvokedBy != "" && strings.ContainsAny(p.InvokedBy, ",\x00\n\r") {
		return rpc.InvalidField("invoked_by", "%q is not one adapter id (no commas)", p.InvokedBy)
	}
	return nil
}

// spawnRequestOf is the argv-shaping part of the params.
func spawnRequestOf(p *InvokeParams) spawn.Request {
	return spawn.Request{
		Adapter:            p.ID,
		Mode:               spawn.Mode(p.PermissionMode),
		AllowedTools:       p.AllowedTools,
		Model:              p.Model,
		MaxTurns:           p.MaxTurns,
		Effort:             p.Effort,
		SystemPrompt:       p.SystemPrompt,
		SystemPromptAppend: p.SystemPromptAppend,
		SessionID:          p.SessionID,
		Resume:             p.Resume,
		NoSession:          p.DiscardSession,
		Cwd:                p.Cwd,
		MCPEndpoint:        p.MCPEndpoint,
		MaxAPIRetries:      p.MaxAPIRetries,
		StallSecs:          p.StallSecs,
		StallKillSecs:      p.StallKillSecs,
		MaxCostUSD:         p.MaxCostUSD,
		MaxTokens:          p.MaxTokens,
	}
}

// contentFields are the params that are text for the agent to read, not
// values that reach its argv or environment: the task goes on stdin and the
// system prompt into a private file's content, and neither is ever searched
// for placeholders. A task may well quote card's own syntax.
var contentFields = map[string]bool{"task": true, "system_prompt": true}

// placeholderIn returns the wire name of the first string in v (params,
// walked by their JSON names, nested ones as a.b[0].c) holding card's
// private-file placeholder, or "". It walks every field rather than a list,
// so a param added later is covered without anyone remembering to add it.
func placeholderIn(v reflect.Value, path string) string {
	switch v.Kind() {
	case reflect.String:
		if strings.Contains(v.String(), spawn.FilePlaceholderPrefix) {
			return path
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return placeholderIn(v.Elem(), path)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if f := placeholderIn(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); f != "" {
				return f
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			key := fmt.Sprint(iter.Key().Interface())
			if f := placeholderIn(iter.Key(), path+"."+key); f != "" {
				return f
			}
			if f := placeholderIn(iter.Value(), path+"."+key); f != "" {
				return f
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			name := strings.Split(sf.Tag.Get("json"), ",")[0]
			if name == "-" || (path == "" && contentFields[name]) {
				continue
			}
			if name == "" && sf.Anonymous {
				// An embedded struct's fields are the params' own.
				if f := placeholderIn(v.Field(i), path); f != "" {
					return f
				}
				continue
			}
			if name == "" {
				name = sf.Name
			}
			sub := name
			if path != "" {
				sub = path + "." + name
			}
			if f := placeholderIn(v.Field(i), sub); f != "" {
				return f
			}
		}
	}
	return ""
}
