// Package plan turns what a client asked for (an agent, its settings, a
// task, attachments) into a turn: the run request the run subsystem starts
// and the spawn request its argv was built from. Every bad-params answer is
// decided here, once, before anything is recorded, so a request the chosen
// agent's CLI cannot honour is never a run; what depends on the daemon's
// state (the guard, bypass allowed, the binary, the caps) is the run
// subsystem's gate, after this.
//
// agents.invoke, CAR's agents.invoke_external and every turn of a session
// come here; Check judges a session's settings without reading or staging
// anything, for sessions.start and sessions.configure.
package plan

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/spawn"
)

// Config is the part of card.toml and of the daemon's start the planner
// reads.
type Config struct {
	Attachments AttachmentLimits
	// MaxAPIRetries, StallSecs and StallKillSecs are the defaults of a
	// request that names none.
	MaxAPIRetries, StallSecs, StallKillSecs int
	// ApprovalTimeoutSecs is the default wait for an ask-mode question.
	ApprovalTimeoutSecs int
	// Extras are the operator's [adapters.<id>] args and env.
	Extras map[string]spawn.Extras
	// Home is card's home: the CLIs' sessions card names live under it.
	Home string
	// Env is the environment read at start: HOME (a read_only run's
	// default cwd) and the temp dir attachments are staged in.
	Env map[string]string
}

// Agents is what the planner asks detection: the search path the agents
// get, and the binaries card runs for each adapter (an edit run in their
// directories could change what runs as that agent).
type Agents interface {
	SearchDirs() []string
	Binaries() map[string][]string
}

// Planner plans turns. It is safe for concurrent use.
type Planner struct {
	cfg    Config
	cwd    CwdPolicy
	agents Agents
}

// New returns a planner judging cwds with cwd and asking agents what
// detection found.
func New(cfg Config, cwd CwdPolicy, agents Agents) *Planner {
	return &Planner{cfg: cfg, cwd: cwd, agents: agents}
}

// Turn is one planned turn: the run request, and the argv request it was
// built from (a session's warm agent is built from the same request, so it
// runs against the same configuration).
type Turn struct {
	Run   runs.Request
	Spawn spawn.Request
}

// Continue is how a session's turn continues the CLI's own session: Resume
// the id an earlier turn reported (or card chose), or, for a first turn, a
// new SessionID card chooses for the adapters whose CLI takes one, so even
// a first turn cut short by a crash leaves an id the next turn resumes.
type Continue struct {
	Resume    string
	SessionID string
	// UsageBase, with Resume, is the CLI session's running total as the
	// last turn that reported one left it: a CLI whose usage is that total
	// has the turn charged only what it added.
	UsageBase api.Usage
	// Isolated is the session's own worktree, for an isolated session.
	Isolated Isolated
}

// Isolated is an isolated session's (or run's) own git worktree: its turns
// run in Dir, the directory of the worktree at Top that matches the cwd
// the client gave. The worktrees live in card's home, which the cwd policy
// refuses to every writing run; Isolated lets one run use exactly its own
// worktree, and nothing else there. Only the daemon sets it, from the
// worktree it made: no client param reaches it, so a client cannot point a
// run at another session's worktree or at the directory that holds them.
type Isolated struct {
	Top, Dir string
}

func (i Isolated) set() bool { return i.Dir != "" }

// errNotIsolated refuses a run whose params ask for isolation the caller
// did not set up: it would otherwise run in the user's checkout, the one
// place isolation promises not to write.
var errNotIsolated = api.InvalidField("isolation", "card could not set up the worktree this run asks for, so it does not run")

// Invoke plans agents.invoke: the first bad attachment refuses the
// request.
func (p *Planner) Invoke(ip api.InvokeParams) (Turn, error) {
	if ip.Isolation != "" {
		return Turn{}, errNotIsolated
	}
	return p.plan(ip, nil, Isolated{})
}

// InvokeIsolated plans an isolated agents.invoke: the run goes in iso's
// worktree, which the daemon made for it.
func (p *Planner) InvokeIsolated(ip api.InvokeParams, iso Isolated) (Turn, error) {
	if !iso.set() {
		return Turn{}, errNotIsolated
	}
	return p.plan(ip, nil, iso)
}

// InvokeCAR plans agents.invoke_external, with CAR's attachment policy: a
// bad attachment is skipped, recorded as dropped with why, and the agent
// runs with the rest.
func (p *Planner) InvokeCAR(ip api.InvokeParams, car []api.ExternalAttachment) (Turn, error) {
	if field := placeholderIn(reflect.ValueOf(car), "attachments"); field != "" {
		return Turn{}, api.InvalidField(field, "holds card's private-file placeholder %q, which only card itself may write", spawn.FilePlaceholderPrefix)
	}
	if car == nil {
		car = []api.ExternalAttachment{}
	}
	if ip.Isolation != "" {
		return Turn{}, errNotIsolated
	}
	return p.plan(ip, car, Isolated{})
}

// SessionTurn plans a turn of a session: its settings, as they are now
// (caps lowered to what the session has left), with the prompt, continuing
// the CLI's session as c says. A turn's images reach a warm agent with its
// prompt, never when the agent starts, so the spawn request carries none.
func (p *Planner) SessionTurn(s api.SessionStartParams, task string, atts []api.Attachment, c Continue) (Turn, error) {
	if s.Isolation != "" && !c.Isolated.set() {
		return Turn{}, errNotIsolated
	}
	t, err := p.plan(invokeOf(s, task, atts, c), nil, c.Isolated)
	if err != nil {
		return Turn{}, err
	}
	t.Spawn.Images = nil
	if c.Resume != "" {
		// What the CLI's session had used: the turn's plan, cold or warm,
		// takes the turn's part of a running total from it.
		t.Spawn.UsageBase, t.Run.Plan.UsageBase = c.UsageBase, c.UsageBase
	}
	return t, nil
}

// Checked is what judging a session's settings resolved.
type Checked struct {
	// Cwd is where its turns run: the checked directory, links followed.
	Cwd string
	// Mode is its permission mode, the default filled in.
	Mode spawn.Mode
}

// checkTask is the task a session's settings are judged with when there
// is no prompt (sessions.start, sessions.configure): the same checks a
// turn's params get, so a session whose turns could never run is refused
// at once.
const checkTask = "(card checks the session's settings: no prompt yet)"

// Check judges a session's settings, and a prompt's attachments when given,
// exactly as a turn's would be, continuing as c says, and holds nothing:
// an attachment read to check it is let go at once. An isolated session's
// settings are judged in the cwd the client gave (sessions.apply writes
// there) until c names its worktree, and then in the worktree.
func (p *Planner) Check(s api.SessionStartParams, task string, atts []api.Attachment, c Continue) (Checked, error) {
	if task == "" {
		task = checkTask
	}
	t, err := p.plan(invokeOf(s, task, atts, c), nil, c.Isolated)
	if err != nil {
		return Checked{}, err
	}
	t.Run.Release()
	return Checked{Cwd: t.Run.Cwd, Mode: t.Run.Mode}, nil
}

// invokeOf is a session turn's agents.invoke params: the session's
// settings with the prompt.
func invokeOf(s api.SessionStartParams, task string, atts []api.Attachment, c Continue) api.InvokeParams {
	return api.InvokeParams{
		AgentSettings: s.AgentSettings,
		Task:          task,
		Attachments:   atts,
		Resume:        c.Resume,
		SessionID:     c.SessionID,
	}
}

// plan is the one params step. car, when not nil, is CAR's attachments
// (and CAR's policy for them); nil takes ip.Attachments with card's. iso,
// when set, is the worktree the run goes in instead of ip.Cwd.
func (p *Planner) plan(ip api.InvokeParams, car []api.ExternalAttachment, iso Isolated) (_ Turn, err error) {
	if strings.TrimSpace(ip.ID) == "" {
		return Turn{}, api.InvalidField("id", "required: the adapter to run, one of %s", strings.Join(spawn.IDs(), ", "))
	}
	if _, ok := spawn.Lookup(ip.ID); !ok {
		return Turn{}, &detect.UnknownAdapterError{ID: ip.ID, Known: spawn.IDs()}
	}
	if field := placeholderIn(reflect.ValueOf(ip), ""); field != "" {
		return Turn{}, api.InvalidField(field, "holds card's private-file placeholder %q, which only card itself may write", spawn.FilePlaceholderPrefix)
	}
	if err := ip.CheckIsolation(); err != nil {
		return Turn{}, err
	}
	if iso.set() {
		ip.Cwd = iso.Dir
	}
	if err := checkParams(&ip); err != nil {
		return Turn{}, err
	}
	var (
		checked []attachment
		skipped []api.AttachmentRecord
	)
	if car != nil {
		checked, skipped = readCARAttachments(car, p.cfg.Attachments)
	} else if checked, err = readAttachments(ip.Attachments, p.cfg.Attachments); err != nil {
		return Turn{}, err
	}
	defer func() {
		if err != nil {
			closeAttachments(checked)
		}
	}()
	// sent are the records of checked, one each and in its order, as the
	// stage step fills them in; the skipped join them in request order.
	images, sent, err := attach(ip.ID, checked, ip.RequireAttachments)
	if err != nil {
		return Turn{}, err
	}
	req := spawnRequestOf(&ip)
	req.Images = images
	if req.Cwd, err = p.runCwd(ip.ID, ip.Cwd, req.EffectiveMode(), iso.Top); err != nil {
		return Turn{}, err
	}
	p.withDefaults(&req, ip.ApprovalTimeoutSecs)
	// The plan's Program is the binary the gate resolves; nothing in the
	// argv depends on it.
	plan, err := spawn.Build("", req)
	if err != nil {
		return Turn{}, err
	}
	run := runs.Request{
		Adapter: ip.ID, InvokedBy: ip.InvokedBy, Task: ip.Task, Mode: req.EffectiveMode(), Plan: plan, Model: ip.Model,
		Cwd: req.Cwd, Timeout: ip.Timeout(), AcknowledgeUnenforcedReadOnly: ip.AcknowledgeUnenforcedReadOnly,
		AcknowledgeUnenforcedEdit: ip.AcknowledgeUnenforcedEdit,
		ApprovalTimeout:           req.ApprovalTimeout, Attachments: withSkipped(sent, skipped),
	}
	if len(checked) > 0 {
		run.Stage = func(context.Context) ([]api.AttachmentRecord, func(), error) {
			staged, done, err := p.stage(checked, sent, len(images) > 0)
			if err != nil {
				return nil, nil, err
			}
			return withSkipped(staged, skipped), done, nil
		}
		run.Discard = func() { closeAttachments(checked) }
	}
	return Turn{Run: run, Spawn: req}, nil
}

// withDefaults fills in what card.toml decides for a request that does not
// say: the retry and stall bounds, the operator's args and env, where the
// CLIs' sessions card names live, the approval timeout.
func (p *Planner) withDefaults(req *spawn.Request, approvalSecs int) {
	if req.MaxAPIRetries == nil {
		n := p.cfg.MaxAPIRetries
		req.MaxAPIRetries = &n
	}
	if req.StallSecs == nil {
		n := p.cfg.StallSecs
		req.StallSecs = &n
	}
	if req.StallKillSecs == nil {
		n := p.cfg.StallKillSecs
		req.StallKillSecs = &n
	}
	req.Extras = p.cfg.Extras[req.Adapter]
	req.AgentSessionDir = filepath.Join(p.cfg.Home, home.AgentSessionsDirName)
	// Bypass is the gate's to refuse (after the guard, with its own code),
	// so the plan is built as if it were allowed.
	req.AllowBypass = true
	req.ApprovalTimeout = p.ApprovalTimeout(approvalSecs)
}

// ApprovalTimeout is a request's approval timeout, clamped, or card.toml's.
func (p *Planner) ApprovalTimeout(secs int) time.Duration {
	if secs == 0 {
		secs = p.cfg.ApprovalTimeoutSecs
	}
	return time.Duration(min(max(secs, 1), api.MaxApprovalTimeoutSecs)) * time.Second
}

// stage reads the checked attachments into a private directory of card's,
// when the run takes them (keep), or only digests them.
func (p *Planner) stage(checked []attachment, records []api.AttachmentRecord, keep bool) ([]api.AttachmentRecord, func(), error) {
	records = slices.Clone(records)
	if !keep {
		return records, func() {}, stage(checked, records, "", p.cfg.Attachments.MaxBytes)
	}
	dir, err := spawn.NewPrivateDir(proc.TempDir(p.cfg.Env))
	if err != nil {
		closeAttachments(checked)
		return nil, nil, fmt.Errorf("could not make a private directory for the attachments: %w", err)
	}
	if err := stage(checked, records, dir.Path, p.cfg.Attachments.MaxBytes); err != nil {
		dir.Remove()
		return nil, nil, err
	}
	return records, dir.Remove, nil
}
