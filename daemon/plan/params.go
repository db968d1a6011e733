package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

// checkParams judges the fields spawn does not: the task, the mode and its
// need for a cwd, the cwd itself, the timeouts, the caller's id.
func checkParams(p *api.InvokeParams) error {
	if strings.TrimSpace(p.Task) == "" {
		return api.InvalidField("task", "required: the task for the agent must not be empty")
	}
	if strings.ContainsRune(p.Task, 0) {
		return api.InvalidField("task", "contains a NUL byte")
	}
	mode := spawn.Mode(p.PermissionMode)
	switch mode {
	case "", spawn.ModeReadOnly, spawn.ModeEdit, spawn.ModeBypass, spawn.ModeAsk:
	default:
		return api.InvalidField("permission_mode", "unknown mode %q; use read_only (default), edit, ask or bypass", p.PermissionMode)
	}
	if err := checkApprovalTimeout(p.PermissionMode, p.ApprovalTimeoutSecs); err != nil {
		return err
	}
	// Refused, not clamped: a client that asked for -1 or a year would
	// otherwise get a deadline it never asked for, and never hear so.
	if s := p.TimeoutSecs; s < 0 || s > api.MaxInvokeTimeoutSecs {
		return api.InvalidField("timeout_secs", "must be between %d and %d seconds (or absent for the default of %d), not %d",
			api.MinInvokeTimeoutSecs, api.MaxInvokeTimeoutSecs, int(api.DefaultInvokeTimeout.Seconds()), s)
	}
	if p.Cwd == "" {
		if mode == spawn.ModeEdit || mode == spawn.ModeBypass || mode == spawn.ModeAsk {
			return api.InvalidField("cwd", "required when permission_mode is %s: say which directory the agent may change", mode)
		}
	} else {
		if !filepath.IsAbs(p.Cwd) {
			return api.InvalidField("cwd", "%q is not an absolute path", p.Cwd)
		}
		st, err := os.Stat(p.Cwd)
		if err != nil {
			return api.InvalidField("cwd", "%q does not exist or cannot be read", p.Cwd)
		}
		if !st.IsDir() {
			return api.InvalidField("cwd", "%q is not a directory", p.Cwd)
		}
	}
	if p.InvokedBy != "" && strings.ContainsAny(p.InvokedBy, ",\x00\n\r") {
		return api.InvalidField("invoked_by", "%q is not one adapter id (no commas)", p.InvokedBy)
	}
	return nil
}

// checkApprovalTimeout refuses approval_timeout_secs outside ask mode
// (a client that set it expects questions it would never get) and out of
// range.
func checkApprovalTimeout(mode string, secs int) error {
	if secs == 0 {
		return nil
	}
	if mode != "ask" {
		m := mode
		if m == "" {
			m = "read_only"
		}
		return api.InvalidField("approval_timeout_secs", "applies only to permission_mode ask (this run's mode is %s)", m)
	}
	if secs < 1 || secs > api.MaxApprovalTimeoutSecs {
		return api.InvalidField("approval_timeout_secs", "must be between 1 and %d seconds", api.MaxApprovalTimeoutSecs)
	}
	return nil
}

// spawnRequestOf is the argv-shaping part of the params.
func spawnRequestOf(p *api.InvokeParams) spawn.Request {
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

// runCwd is where a run goes: asked (the user's home when empty, allowed in
// read_only only), with every symlink followed, so the agent runs in, and
// the run records, the directory that was judged, not a name that could
// point elsewhere by the time the agent starts (the runner holds that
// directory open and starts the agent in it only if it is still there). A
// mode that writes is refused a directory the cwd policy refuses, but for
// own: the run's own worktree, which it may use whatever the policy says of
// the directory that holds it.
func (p *Planner) runCwd(adapter, asked string, mode spawn.Mode, own string) (string, error) {
	dir := asked
	if dir == "" {
		dir = p.cfg.Env["HOME"]
	}
	if !WritesUnderCwd(mode) {
		resolved, err := resolveDir(dir)
		if err != nil {
			if asked == "" {
				return dir, nil // a home that is gone: the runner says so
			}
			return "", api.InvalidField("cwd", "%q cannot be resolved: %v", asked, err)
		}
		return resolved, nil
	}
	resolved, rule, why, err := p.cwd.withPath(p.agentPathDirs(adapter)).withInstalls(p.agentBinaries()).withOwn(own).judge(osPaths{}, dir)
	if err != nil {
		return "", api.InvalidField("cwd", "%q cannot be resolved: %v", asked, err)
	}
	if why != "" {
		return "", &CwdRefusedError{Asked: asked, Resolved: resolved, Mode: mode, Rule: rule, Why: why}
	}
	return resolved, nil
}

// agentPathDirs is the PATH adapter's agent gets: the search path the
// daemon resolved, or the operator's own PATH for that adapter, which the
// plan's environment puts over it.
func (p *Planner) agentPathDirs(adapter string) []string {
	var dirs []string
	if p.agents != nil {
		dirs = p.agents.SearchDirs()
	}
	if path, ok := p.cfg.Extras[adapter].Env["PATH"]; ok {
		dirs = append(slices.Clip(dirs), filepath.SplitList(path)...)
	}
	return dirs
}

// agentBinaries are the binaries card runs for each adapter.
func (p *Planner) agentBinaries() map[string][]string {
	if p.agents == nil {
		return nil
	}
	return p.agents.Binaries()
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
		return placeholderInStruct(v, path)
	}
	return ""
}

// placeholderInStruct is placeholderIn for a struct, by its fields' JSON
// names; an embedded struct's fields are the params' own.
func placeholderInStruct(v reflect.Value, path string) string {
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
	return ""
}
