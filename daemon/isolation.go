package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/worktree"
	"github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
)

// gitDirs are where git is looked for after the daemon's PATH: a daemon a
// supervisor started may have a PATH that leaves out where the package
// manager put git.
var gitDirs = []string{"/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"}

// setupWorktrees makes the manager of isolated sessions' worktrees, under
// <home>/worktrees (private, 0700). Without a usable git the daemon runs
// on, and every request for isolation is refused saying why.
//
// The worktrees are in card's home, which the cwd policy refuses to every
// writing run: each isolated run is let into its own worktree, and only
// that one, by the planner (plan.Isolated), so no client can name a path
// there, and one session's agent cannot be pointed at another's.
func (d *Daemon) setupWorktrees() (*worktree.Manager, string) {
	path := d.env["PATH"] + string(filepath.ListSeparator) + strings.Join(gitDirs, string(filepath.ListSeparator))
	git, err := proc.LookPath("git", path)
	if err != nil {
		d.log.Warn("git was not found: sessions cannot be isolated in worktrees", zap.Strings("looked_in", filepath.SplitList(path)))
		return nil, "git was not found on the daemon's PATH (nor in " + strings.Join(gitDirs, ", ") + ")"
	}
	m, err := worktree.New(d.ctx, worktree.Config{Root: filepath.Join(d.home, home.WorktreesDirName), Git: git, Env: d.env})
	if err != nil {
		d.log.Warn("sessions cannot be isolated in worktrees", zap.String("git", git), zap.Error(err))
		return nil, err.Error()
	}
	return m, ""
}

// registerReview registers the review methods of isolated sessions.
func (d *Daemon) registerReview() {
	r := d.registry
	rpc.Register(r, "sessions.diff", rpc.Doc{
		Access:  rpc.AccessRead,
		Summary: "An isolated session's changes as a unified diff: the whole session's (base to its last turn), or one turn's, with per-file stats.",
		Description: "Only committed turns are shown: a turn running is not in it until it ends. Every changed file is listed with its " +
			"status and line counts (binary files named, no counts); the patch is cut at max_bytes (default 1 MiB, at most 64 MiB) after " +
			"the last whole file that fits, and truncated says so. A turn that changed nothing, or was rewound away, has an empty diff; a turn " +
			"the session never took is refused (-32602 naming turn). turns lists the committed turns. A session without isolation is refused " +
			"(-32602 naming session_id); one whose worktree was discarded answers worktree_gone.",
		Errors: []int64{CodeSessionNotFound, CodeWorktreeGone},
	}, func(ctx context.Context, p api.SessionDiffParams) (api.SessionDiff, error) {
		return d.sessions.Diff(ctx, p)
	})
	rpc.Register(r, "sessions.apply", rpc.Doc{
		Access:  rpc.AccessWrite,
		Summary: "Bring an isolated session's changes into the user's checkout as uncommitted changes, all or nothing.",
		Description: "The whole session's committed changes (base to its last turn) are written to the checkout's files: changed and deleted " +
			"files in the work tree, new files untracked; the index, HEAD and every branch stay as they are. When any file conflicts with " +
			"the checkout (changed there where the session changed it, a file the session adds already there, a file it changes gone) " +
			"nothing is written and the answer is apply_conflict (-32053) with data.files, each {path, reason}. No hook, filter or other " +
			"program of the repository runs. Only the client that started the session (or a native client) may apply it.",
		Errors: []int64{CodeSessionNotFound, CodeNotSessionOwner, CodeApplyConflict, CodeWorktreeGone},
	}, func(ctx context.Context, p api.SessionIDParams) (api.SessionApplyResult, error) {
		if err := d.mayAct(ctx, "sessions.apply", p.SessionID); err != nil {
			return api.SessionApplyResult{}, err
		}
		return d.sessions.Apply(ctx, p.SessionID)
	})
	rpc.Register(r, "sessions.rewind", rpc.Doc{
		Access:  rpc.AccessWrite,
		Summary: "Put an isolated session's worktree back to the state after a turn (0: the state it started from); the conversation goes on.",
		Description: "The session's branch points at that turn's commit again and the worktree's files are as it left them (files later turns " +
			"made are removed; ignored files stay). The agent's own memory is not rewound: it still remembers the later turns, so tell it " +
			"in the next prompt that their changes are gone. The next turn is numbered after every turn taken. Refused while a turn runs or " +
			"prompts wait (session_busy). A rewound event in the session's stream says what was dropped. Only the session's owner (or a native client).",
		Errors: []int64{CodeSessionNotFound, CodeNotSessionOwner, CodeSessionBusy, CodeWorktreeGone},
	}, func(ctx context.Context, p api.SessionRewindParams) (api.SessionRewindResult, error) {
		if err := d.mayAct(ctx, "sessions.rewind", p.SessionID); err != nil {
			return api.SessionRewindResult{}, err
		}
		return d.sessions.Rewind(ctx, p.SessionID, *p.Turn)
	})
	rpc.Register(r, "sessions.discard", rpc.Doc{
		Access:  rpc.AccessWrite,
		Summary: "Remove an isolated session's worktree and its branch, with every turn's commit; an open session is closed.",
		Description: "git worktree list and git branch no longer show them; the user's checkout is not touched. Refused while a turn runs or " +
			"prompts wait (session_busy). Discarding a discarded session answers it as it is. A closed session keeps its worktree until " +
			"discarded, or until it has changed nothing for [sessions] worktree_max_age_days. Only the session's owner (or a native client).",
		Errors: []int64{CodeSessionNotFound, CodeNotSessionOwner, CodeSessionBusy},
	}, func(ctx context.Context, p api.SessionIDParams) (api.SessionDiscardResult, error) {
		if err := d.mayAct(ctx, "sessions.discard", p.SessionID); err != nil {
			return api.SessionDiscardResult{}, err
		}
		return d.sessions.Discard(ctx, p.SessionID)
	})
	for _, m := range []string{"sessions.apply", "sessions.rewind", "sessions.discard"} {
		rpc.Ordered(r, m, "session_id")
	}
}

// invokeIsolated is agents.invoke with isolation: the run's params are
// judged in the cwd given, as any run's; then a worktree of the cwd's
// repository is made for it, and the run goes there as the one turn of a
// closed session that holds the worktree for review.
func (d *Daemon) invokeIsolated(ctx context.Context, p api.InvokeParams, peer *rpc.Peer) (InvokeAnswer, rpc.Then, error) {
	probe := p
	probe.Isolation, probe.Base, probe.Attachments = "", "", nil
	if err := p.CheckIsolation(); err != nil {
		return InvokeAnswer{}, nil, err
	}
	judged, err := d.planner.Invoke(probe)
	if err != nil {
		return InvokeAnswer{}, nil, err
	}
	judged.Run.Release()
	p.Cwd = judged.Run.Cwd
	if err := d.checkIsolatedCwd(p.Cwd); err != nil {
		return InvokeAnswer{}, nil, err
	}
	owner := ""
	if peer != nil {
		owner = peer.Origin()
	}
	one, err := d.sessions.IsolateRun(ctx, p, owner)
	if err != nil {
		return InvokeAnswer{}, nil, err
	}
	t, err := d.planner.InvokeIsolated(p, one.Isolated)
	if err != nil {
		d.sessions.Abandoned(one, err)
		return InvokeAnswer{}, nil, err
	}
	req := t.Run
	req.CardSessionID, req.SessionTurn = one.SessionID, 1
	req.Exec = d.sessions.Exec(one, p.Task)
	if peer != nil {
		req.Conn = peer.Context()
		req.Asker = approverOf(peer)
	}
	run, err := d.runs.Start(ctx, req)
	if err != nil {
		d.sessions.Abandoned(one, err)
		return InvokeAnswer{}, nil, err
	}
	d.sessions.Started(one, run)
	return d.answerRun(ctx, p, peer, run, func(accepted *api.InvokeAccepted, res *api.InvokeResult) {
		if accepted != nil {
			accepted.CardSessionID, accepted.Worktree = one.SessionID, one.Worktree
		}
		if res != nil {
			res.CardSessionID, res.Worktree = one.SessionID, one.Worktree
		}
	})
}

// checkIsolatedCwd refuses isolation for a cwd inside card's home: a
// session's worktree (or anything else there) is card's, not a checkout of
// the user's to isolate, and a worktree made from another session's would
// let this session's apply write into that one.
func (d *Daemon) checkIsolatedCwd(cwd string) error {
	home, err := filepath.EvalSymlinks(d.home)
	if err != nil {
		home = d.home
	}
	if rel, err := filepath.Rel(home, cwd); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return api.InvalidField("isolation", "cwd %s is inside card's home (%s), which holds no project of yours to isolate; "+
			"start the session in the repository itself", cwd, d.home)
	}
	return nil
}

// isolationError maps what making or reviewing a worktree refused onto the
// wire, or nil for another error.
func isolationError(err error) error {
	var conflict *worktree.ConflictError
	switch {
	case errors.As(err, &conflict):
		files := make([]map[string]string, 0, len(conflict.Files))
		for _, f := range conflict.Files {
			files = append(files, map[string]string{"path": f.Path, "reason": f.Reason})
		}
		return &rpcclient.Error{Code: CodeApplyConflict, Message: conflict.Error(), Data: map[string]any{"repo": conflict.Repo, "files": files}}
	case errors.Is(err, worktree.ErrNotRepository), errors.Is(err, worktree.ErrNoCommit), errors.Is(err, worktree.ErrUnsafeRoot):
		return api.InvalidField("isolation", "%v; isolation \"worktree\" needs a cwd inside a git repository with a commit, outside card's home", err)
	case errors.Is(err, worktree.ErrBadBase):
		return api.InvalidField("base", "%v", err)
	}
	return nil
}
