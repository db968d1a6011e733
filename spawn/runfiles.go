package spawn

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The plan's private files and environment: what a run writes and sets for
// the agent besides its argv.

// PrivateDirPrefix starts the name of every private directory card makes
// in a temporary directory.
const PrivateDirPrefix = "card-run-"

// ownerFile, in a private directory, names the process that made it; the
// directory itself is flock'ed by that process while it is in use, so a
// sweep after a crash can tell a dead daemon's leftovers from a live one's.
const ownerFile = ".card-owner"

// PrivateDir is a 0700 directory of card's under a temporary directory,
// locked while it is open.
type PrivateDir struct {
	Path string
	lock *os.File
}

// NewPrivateDir makes a private directory under parent, which must be a
// temporary directory no other user can rename things in: one others can
// write without the sticky bit would let another user swap card's
// directory, between its creation and the agent's read, for one of theirs.
func NewPrivateDir(parent string) (*PrivateDir, error) {
	if err := checkTempParent(parent); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, PrivateDirPrefix)
	if err != nil {
		return nil, err
	}
	d := &PrivateDir{Path: dir}
	if err := os.Chmod(dir, 0o700); err != nil {
		d.Remove()
		return nil, err
	}
	// A quote or backslash would break a -c value that names a file, a
	// comma would split Codex's --image path, and braces would read as
	// a placeholder.
	if strings.ContainsAny(dir, "\"\\\n{},") {
		d.Remove()
		return nil, fmt.Errorf("temporary directory %q has characters that cannot be quoted safely; set TMPDIR to a plain path", dir)
	}
	lock, err := os.Open(dir)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			lock.Close()
		}
	}
	if err != nil {
		d.Remove()
		return nil, fmt.Errorf("lock the run's private directory: %w", err)
	}
	d.lock = lock
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		d.Remove()
		return nil, err
	}
	return d, nil
}

// Remove deletes the directory and lets go of its lock.
func (d *PrivateDir) Remove() {
	if d == nil {
		return
	}
	_ = os.RemoveAll(d.Path)
	if d.lock != nil {
		d.lock.Close()
	}
}

// checkTempParent refuses a temporary directory another user could rename
// card's entries in: one owned by another user (not root), or writable by
// group or others without the sticky bit.
func checkTempParent(parent string) error {
	st, err := os.Stat(parent)
	if err != nil {
		return fmt.Errorf("temporary directory %q: %w", parent, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("temporary directory %q is not a directory; set TMPDIR to one", parent)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if uid := int(sys.Uid); uid != 0 && uid != os.Geteuid() {
			return fmt.Errorf("temporary directory %q belongs to another user (uid %d), who could swap card's private files; set TMPDIR to a directory of your own", parent, uid)
		}
	}
	if st.Mode().Perm()&0o022 != 0 && st.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("temporary directory %q can be written by other users and has no sticky bit, so another user could swap card's private files; set TMPDIR to a directory only you can write (or chmod +t it)", parent)
	}
	return nil
}

// staleUnlocked is how old a private directory with no owner file (one an
// earlier card made) must be before a sweep takes it: older than the
// longest run.
const staleUnlocked = 24 * time.Hour

// lockGrace is how long a fresh directory is left alone: between its
// creation and its lock there is an instant a sweep must not take it in.
const lockGrace = time.Minute

// SweepPrivateDirs removes the private directories under parent that a
// crashed card left behind: only this user's, and only those no live
// process holds — one with an owner file whose lock is free (older than a
// minute), or one without (an earlier card's) older than a day. It returns
// what it removed.
func SweepPrivateDirs(parent string, now time.Time) ([]string, error) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), PrivateDirPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if sweepable(dir, now) {
			if err := os.RemoveAll(dir); err == nil {
				removed = append(removed, dir)
			}
		}
	}
	return removed, nil
}

func sweepable(dir string, now time.Time) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || int(sys.Uid) != os.Geteuid() {
		return false
	}
	age := now.Sub(st.ModTime())
	if _, err := os.Lstat(filepath.Join(dir, ownerFile)); err != nil {
		return errors.Is(err, fs.ErrNotExist) && age > staleUnlocked
	}
	if age < lockGrace {
		return false
	}
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	// Held by a live process: its run is still going. The lock taken here
	// is let go when f closes, after the removal.
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// writePrivateFiles creates a 0700 directory holding each file at 0600 (or
// narrower). A system prompt in argv is readable by every local user via
// ps; in this file it is readable by the daemon's user only.
func writePrivateFiles(parent string, files []PlanFile) (*PrivateDir, error) {
	d, err := NewPrivateDir(parent)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		mode := f.Mode
		if mode == 0 {
			mode = 0o600
		}
		if mode&0o077 != 0 || f.Path == "" || filepath.Base(f.Path) != f.Path || f.Path == "." || f.Path == ".." || f.Path == ownerFile {
			d.Remove()
			return nil, fmt.Errorf("plan file %q: must be a plain name with mode 0600 or narrower", f.Path)
		}
		if err := writePlanFile(filepath.Join(d.Path, f.Path), f, mode); err != nil {
			d.Remove()
			return nil, err
		}
	}
	return d, nil
}

// writePlanFile writes one file: Content, or From's bytes linked (the
// same private inode, so no copy in memory or on disk) or streamed.
func writePlanFile(path string, f PlanFile, mode os.FileMode) error {
	if f.From != nil {
		if err := os.Link(f.From.Path, path); err == nil {
			return os.Chmod(path, mode)
		}
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if f.From != nil {
		var src *os.File
		if src, err = os.Open(f.From.Path); err == nil {
			_, err = io.Copy(fh, src)
			src.Close()
		}
	} else {
		_, err = fh.Write(f.Content)
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// substituteFiles replaces each placeholder of a file the plan writes with
// that file's path. Only those: a placeholder naming anything else (a path
// out of the directory, a file the plan never wrote) came from somewhere
// other than the builder, and is left for Run to refuse rather than turned
// into a path.
func substituteFiles(args []string, env map[string]string, dir string, files []PlanFile) ([]string, map[string]string) {
	refs := make(map[string]string, len(files)+1)
	refs[DirRef()] = dir
	for _, f := range files {
		refs[FileRef(f.Path)] = filepath.Join(dir, f.Path)
	}
	sub := func(s string) string {
		if !strings.Contains(s, filePrefix) {
			return s
		}
		for ref, path := range refs {
			s = strings.ReplaceAll(s, ref, path)
		}
		return s
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = sub(a)
	}
	outEnv := make(map[string]string, len(env))
	for k, v := range env {
		outEnv[k] = sub(v)
	}
	return out, outEnv
}

// mergeEnv is base with add applied on top (same key replaced), in a stable
// order.
func mergeEnv(base []string, add map[string]string) []string {
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := add[k]; over {
			continue
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+add[k])
	}
	return out
}
