package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/detect"
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

// prepare is agents.invoke's one params step: it decides every bad-params
// answer (-32602 naming the field; an unknown id lists the known ones) and
// builds the run's plan once, before anything is recorded, so a request the
// chosen agent's CLI cannot honour is never a run. What depends on the
// daemon's state (the guard, bypass allowed, the binary, the cap) is the
// run subsystem's gate, after this.
func (d *Daemon) prepare(p InvokeParams) (runs.Request, error) {
	if strings.TrimSpace(p.ID) == "" {
		return runs.Request{}, rpc.InvalidField("id", "required: the adapter to run, one of %s", strings.Join(spawn.IDs(), ", "))
	}
	if _, ok := spawn.Lookup(p.ID); !ok {
		return runs.Request{}, &detect.UnknownAdapterError{ID: p.ID, Known: spawn.IDs()}
	}
	if field := placeholderIn(reflect.ValueOf(p), ""); field != "" {
		return runs.Request{}, rpc.InvalidField(field, "holds card's private-file placeholder %q, which only card itself may write", spawn.FilePlaceholderPrefix)
	}
	if err := checkInvoke(&p); err != nil {
		return runs.Request{}, err
	}
	checked, err := readAttachments(p.Attachments, d.cfg.Attachments)
	if err != nil {
		return runs.Request{}, err
	}
	images, records, err := attach(p.ID, checked, p.RequireAttachments)
	if err != nil {
		return runs.Request{}, err
	}
	req := spawnRequestOf(&p)
	req.Images = images
	cwd, err := d.runCwd(p.Cwd, req.EffectiveMode())
	if err != nil {
		return runs.Request{}, err
	}
	req.Cwd = cwd
	if req.MaxAPIRetries == nil {
		n := d.cfg.MaxAPIRetries
		req.MaxAPIRetries = &n
	}
	a := d.cfg.Adapters[p.ID]
	req.Extras = spawn.Extras{Args: a.Args, Env: a.Env}
	// Bypass is the gate's to refuse (after the guard, with its own code),
	// so the plan is built as if it were allowed.
	req.AllowBypass = true
	req.ApprovalTimeout = d.approvalTimeout(p.ApprovalTimeoutSecs)
	// The plan's Program is the binary the gate resolves; nothing in the
	// argv depends on it.
	plan, err := spawn.Build("", req)
	if err != nil {
		return runs.Request{}, err
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
	}, nil
}

// runCwd is where a run goes: asked (the user's home when empty, allowed in
// read_only only), with every symlink followed, so the agent runs in, and
// the run records, the directory that was judged, not a name that could
// point elsewhere by the time the agent starts. A mode that writes is
// refused a directory the cwd policy refuses.
func (d *Daemon) runCwd(asked string, mode spawn.Mode) (string, error) {
	dir := asked
	if dir == "" {
		dir = d.env["HOME"]
	}
	resolved, err := resolveDir(dir)
	if err != nil {
		if asked == "" {
			return dir, nil // a home that is gone: the runner says so
		}
		return "", rpc.InvalidField("cwd", "%q cannot be resolved: %v", asked, err)
	}
	if writesUnderCwd(mode) {
		if why := d.cwdPolicy.refusal(resolved); why != "" {
			return "", cwdRefused(asked, resolved, mode, why)
		}
	}
	return resolved, nil
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
