package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Discard removes the session's worktree (uncommitted changes in it too),
// its branch (and with it the turns' commits, and the reflog that held
// rewound ones), and its directory under the root. git worktree list and
// git branch no longer show it. Discarding what is already gone succeeds.
func (m *Manager) Discard(ctx context.Context, wt Worktree) error {
	if err := m.checkShape(wt); err != nil {
		return err
	}
	unlock, err := m.locks.lock(ctx, "session\x00"+wt.SessionID)
	if err != nil {
		return err
	}
	defer unlock()
	return m.discard(ctx, wt)
}

func (m *Manager) discard(ctx context.Context, wt Worktree) error {
	sessionDir := filepath.Dir(wt.Path)
	if _, err := os.Stat(wt.CommonDir); err == nil {
		c := call{dir: wt.CommonDir, gitDir: wt.CommonDir}
		config, err := m.repoConfig(ctx, c.dir, c.gitDir, "")
		if err != nil {
			return err
		}
		c.config = config
		// git finds the worktree by its path among those it registered;
		// two --force remove one with changes and one that is locked.
		rc := c
		rc.args = []string{"worktree", "remove", "--force", "--force", wt.Path}
		if _, err := m.output(ctx, rc); err != nil {
			// The worktree's own .git file may be gone or rewritten
			// (an agent can write anything in its worktree): remove
			// the directory, then git's metadata when it is the one
			// that points at it.
			if err := os.RemoveAll(wt.Path); err != nil {
				return fmt.Errorf("worktree: %w", err)
			}
			if wt.GitDir != "" {
				if data, err := os.ReadFile(filepath.Join(wt.GitDir, "gitdir")); err == nil &&
					filepath.Clean(strings.TrimSpace(string(data))) == filepath.Join(wt.Path, ".git") {
					if err := os.RemoveAll(wt.GitDir); err != nil {
						return fmt.Errorf("worktree: %w", err)
					}
				}
			}
		}
		if ok, err := m.refExists(ctx, c, wt.ref()); err != nil {
			return err
		} else if ok {
			// update-ref rather than branch -D, which rewrites
			// (or creates) packed-refs even when the ref is loose.
			bc := c
			bc.args = []string{"update-ref", "-m", "card: discard the session", "-d", wt.ref()}
			if _, err := m.output(ctx, bc); err != nil {
				return err
			}
		}
	}
	if err := os.RemoveAll(sessionDir); err != nil {
		return fmt.Errorf("worktree: %w", err)
	}
	return nil
}

// List reads every session's record under the root. A directory there
// without a readable record (a Create the daemon died in before writing
// one) is returned in orphans by its session id.
func (m *Manager) List() (wts []Worktree, orphans []string, err error) {
	entries, err := os.ReadDir(m.cfg.Root)
	if err != nil {
		return nil, nil, fmt.Errorf("worktree: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || !validSessionID(e.Name()) {
			continue
		}
		wt, err := m.readRecord(e.Name())
		if err != nil || m.checkShape(wt) != nil {
			orphans = append(orphans, e.Name())
			continue
		}
		wts = append(wts, wt)
	}
	return wts, orphans, nil
}

// Prune discards the worktrees whose last activity (their last turn's
// commit, or their creation) is older than maxAge, except those keep
// says to keep (a session still open). An orphaned directory (no record)
// older than maxAge is removed too. It returns the session ids it removed.
func (m *Manager) Prune(ctx context.Context, maxAge time.Duration, keep func(Worktree) bool) ([]string, error) {
	wts, orphans, err := m.List()
	if err != nil {
		return nil, err
	}
	cutoff := m.now().Add(-maxAge)
	var removed []string
	var errs []error
	for _, wt := range wts {
		if keep != nil && keep(wt) {
			continue
		}
		if m.lastActivity(ctx, wt).After(cutoff) {
			continue
		}
		if err := m.Discard(ctx, wt); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", wt.SessionID, err))
			continue
		}
		removed = append(removed, wt.SessionID)
	}
	for _, id := range orphans {
		dir := filepath.Join(m.cfg.Root, id)
		st, err := os.Lstat(dir)
		if err != nil || st.ModTime().After(cutoff) {
			continue
		}
		if keep != nil && keep(Worktree{SessionID: id}) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", id, err))
			continue
		}
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

// lastActivity is when the session last changed anything: its newest
// turn's commit, else its creation.
func (m *Manager) lastActivity(ctx context.Context, wt Worktree) time.Time {
	last := wt.Created
	if m.check(wt) != nil {
		return last
	}
	turns, err := m.turns(ctx, wt, nil)
	if err == nil && len(turns) > 0 && turns[len(turns)-1].Time.After(last) {
		last = turns[len(turns)-1].Time
	}
	return last
}
