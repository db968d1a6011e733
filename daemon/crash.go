package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/atomicfile"
	homedir "github.com/card-dev/card/internal/home"
)

// CrashDirName is the directory under the home where a daemon's crash
// output goes, and where the last crash is remembered.
const CrashDirName = "crashes"

// lastCrashFile remembers the last crash the daemons of this home noticed,
// so daemon.info shows it after later, clean restarts too.
const lastCrashFile = "last.json"

// keepCrashLogs bounds the crash logs kept in the home.
const keepCrashLogs = 10

// crashLogPrefix and crashLogSuffix frame a run's crash log:
// card-<start as unix nanoseconds>-<pid>.log.
const (
	crashLogPrefix = "card-"
	crashLogSuffix = ".log"
)

// crashFirstLines bounds what a report quotes of a crash's output.
const (
	crashFirstLines = 8
	crashLineBytes  = 240
)

// crashLog is this daemon's crash output: the file the Go runtime writes a
// fatal error, an unrecovered panic or a SIGQUIT dump to, besides stderr.
// A supervisor that restarts the daemon at once may keep no stderr at all
// (launchd without StandardErrorPath, an app's login item), and a crash
// whose only trace is a restart cannot be diagnosed.
//
// The file also marks the run as under way: a clean shutdown removes it
// when empty, so an empty one left behind is a daemon that ended without
// any Go code seeing it (SIGKILL, the OOM killer, a fault inside libc, the
// machine losing power).
type crashLog struct {
	path string
	f    *os.File
}

// openCrashLog creates this run's crash log and points the runtime's crash
// output at it.
func openCrashLog(home string, pid int, started time.Time) (*crashLog, error) {
	dir := filepath.Join(home, CrashDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	name := crashLogPrefix + strconv.FormatInt(started.UnixNano(), 10) + "-" + strconv.Itoa(pid) + crashLogSuffix
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := debug.SetCrashOutput(f, debug.CrashOptions{}); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return &crashLog{path: path, f: f}, nil
}

// close ends crash capture for a clean stop: the log goes when nothing was
// written to it (nothing crashed), so its absence says the stop was clean.
func (c *crashLog) close() {
	if c == nil {
		return
	}
	_ = debug.SetCrashOutput(nil, debug.CrashOptions{})
	st, err := c.f.Stat()
	c.f.Close()
	if err == nil && st.Size() == 0 {
		os.Remove(c.path)
	}
}

// noticeLastCrash looks at what earlier daemons of home left in its crash
// directory (their logs, left there because they did not stop cleanly),
// remembers the newest as the home's last crash, prunes old logs, and
// returns the last crash the home knows of (nil when none ever was). It is
// called before this daemon opens its own log.
func noticeLastCrash(home string, now time.Time, log *zap.Logger) *api.CrashReport {
	dir := filepath.Join(home, CrashDirName)
	left, err := leftCrashLogs(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("could not look for what an earlier card daemon left when it ended", zap.String("dir", dir), zap.Error(err))
	}
	var newest *api.CrashReport
	for _, l := range left {
		r := reportOf(home, l, now)
		if newest == nil || r.StartedAt > newest.StartedAt {
			newest = r
		}
		if r.Kind == api.CrashUncleanExit {
			// An empty log says all it had to say in its report.
			os.Remove(l.path)
		}
	}
	pruneCrashLogs(dir)
	if newest != nil {
		if b, err := json.MarshalIndent(newest, "", "  "); err == nil {
			if err := atomicfile.Write(filepath.Join(dir, lastCrashFile), append(b, '\n'), 0o600); err != nil {
				log.Warn("could not remember the last crash", zap.Error(err))
			}
		}
		fields := []zap.Field{zap.String("kind", string(newest.Kind)), zap.Int("pid", newest.PID),
			zap.String("started_at", newest.StartedAt), zap.String("summary", newest.Summary)}
		if newest.File != "" {
			fields = append(fields, zap.String("file", newest.File))
		}
		log.Warn("the previous card daemon of this home did not stop cleanly", fields...)
		return newest
	}
	b, err := os.ReadFile(filepath.Join(dir, lastCrashFile))
	if err != nil {
		return nil
	}
	var r api.CrashReport
	if json.Unmarshal(b, &r) != nil || r.Kind == "" {
		return nil
	}
	return &r
}

// leftLog is a crash log an earlier daemon left.
type leftLog struct {
	path    string
	pid     int
	started time.Time
	size    int64
	mod     time.Time
}

func leftCrashLogs(dir string) ([]leftLog, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []leftLog
	for _, e := range es {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, crashLogPrefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		rest, ok = strings.CutSuffix(rest, crashLogSuffix)
		if !ok {
			continue
		}
		ns, pidS, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		n, err1 := strconv.ParseInt(ns, 10, 64)
		pid, err2 := strconv.Atoi(pidS)
		info, err3 := e.Info()
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, leftLog{path: filepath.Join(dir, name), pid: pid, started: time.Unix(0, n).UTC(), size: info.Size(), mod: info.ModTime().UTC()})
	}
	return out, nil
}

// reportOf describes one log an earlier daemon left. The logs of daemons
// that are known to have ended are the only ones left: the home's lock,
// which this daemon holds, was theirs while they ran.
func reportOf(home string, l leftLog, now time.Time) *api.CrashReport {
	r := &api.CrashReport{PID: l.pid, StartedAt: l.started.Format(time.RFC3339Nano), NoticedAt: now.UTC().Format(time.RFC3339Nano)}
	if l.size == 0 {
		r.Kind = api.CrashUncleanExit
		if t := lastActivity(home); !t.IsZero() && t.After(l.started) {
			r.LastActivityAt = t.Format(time.RFC3339Nano)
		}
		r.Summary = fmt.Sprintf("card daemon pid %d ended without shutting down and without any output: killed by a signal no handler sees "+
			"(SIGKILL, the out-of-memory killer, a fault in C code), or the machine stopped", l.pid)
		return r
	}
	r.Kind, r.File, r.At = api.CrashOutput, l.path, l.mod.Format(time.RFC3339Nano)
	r.FirstLines = firstLines(l.path)
	first := "(unreadable)"
	if len(r.FirstLines) > 0 {
		first = r.FirstLines[0]
	}
	r.Summary = fmt.Sprintf("card daemon pid %d crashed: %s", l.pid, first)
	return r
}

// firstLines are the first non-blank lines of a crash log, each cut short.
func firstLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() && len(out) < crashFirstLines {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if len(line) > crashLineBytes {
			line = line[:crashLineBytes] + "…"
		}
		out = append(out, line)
	}
	return out
}

// lastActivity is when the history was last written: for a daemon that
// died without a word, the nearest the home knows of when it stopped.
func lastActivity(home string) time.Time {
	var t time.Time
	for _, name := range []string{homedir.RunsDBName, homedir.RunsDBName + "-wal"} {
		if st, err := os.Stat(filepath.Join(home, name)); err == nil && st.ModTime().After(t) {
			t = st.ModTime().UTC()
		}
	}
	return t
}

// pruneCrashLogs keeps the newest keepCrashLogs crash logs.
func pruneCrashLogs(dir string) {
	left, err := leftCrashLogs(dir)
	if err != nil || len(left) <= keepCrashLogs {
		return
	}
	sort.Slice(left, func(i, j int) bool { return left[i].started.After(left[j].started) })
	for _, l := range left[keepCrashLogs:] {
		os.Remove(l.path)
	}
}
