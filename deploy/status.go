package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DaemonInfo is what a running daemon writes to <home>/daemon.json.
type DaemonInfo struct {
	URL             string    `json:"url"`
	PID             int       `json:"pid"`
	Version         string    `json:"version"`
	ProtocolVersion string    `json:"protocol_version"`
	StartedAt       time.Time `json:"started_at"`
}

// StatusReport is what `card service status` shows: the supervisor's view of the service and the
// daemon's own view from daemon.json, side by side, because either can be wrong alone (a service
// that crashed leaves a stale daemon.json; a `card serve` started by hand has no service).
type StatusReport struct {
	Supervisor  Supervisor `json:"supervisor"`
	ServiceFile string     `json:"service_file"`
	// Installed is whether ServiceFile exists.
	Installed bool `json:"installed"`
	// Loaded is whether the supervisor knows the service (always false for Autostart, which has
	// no manager to ask).
	Loaded bool `json:"loaded"`
	// State is the supervisor's word for it: "active (running)", "running", "inactive (dead)".
	State string `json:"state,omitempty"`
	// PID is the service's main process according to the supervisor; 0 when not running.
	PID int `json:"pid,omitempty"`
	// DaemonFile is the daemon.json that was read.
	DaemonFile string `json:"daemon_file,omitempty"`
	// Daemon is its content; nil when it is absent or unreadable (see DaemonProblem).
	Daemon *DaemonInfo `json:"daemon,omitempty"`
	// DaemonProblem says why Daemon is nil or does not match the service.
	DaemonProblem string `json:"daemon_problem,omitempty"`
}

// Status asks the supervisor about the service and reads daemon.json from t.CardHome. A
// supervisor that cannot be asked is an error naming the command; a service that is simply not
// installed or not running is a report, not an error.
func Status(ctx context.Context, t Target, r Runner) (StatusReport, error) {
	if err := t.validate(); err != nil {
		return StatusReport{}, err
	}
	rep := StatusReport{Supervisor: t.supervisor(), ServiceFile: t.ServiceFile()}
	if _, err := os.Stat(filepath.Join(t.Root, rep.ServiceFile)); err == nil {
		rep.Installed = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return rep, fmt.Errorf("check %s: %w", rep.ServiceFile, err)
	}

	switch rep.Supervisor {
	case Systemd:
		cmd := Command{Name: "systemctl", Args: []string{"--user", "show", "--property=LoadState,ActiveState,SubState,MainPID", UnitName}}
		out, err := r.Run(ctx, cmd)
		if err != nil {
			return rep, fmt.Errorf("ask systemd about %s: %w", UnitName, err)
		}
		rep.Loaded, rep.State, rep.PID = parseSystemctlShow(out)
	case Launchd:
		out, err := r.Run(ctx, Command{Name: "launchctl", Args: []string{"print", t.launchdService()}})
		var ce *CommandError
		switch {
		case err == nil:
			rep.Loaded = true
			rep.State, rep.PID = parseLaunchctlPrint(out)
		case errors.As(err, &ce) && launchctlNotFound(ce):
			rep.State = "not loaded"
		default:
			return rep, fmt.Errorf("ask launchd about %s: %w", Label, err)
		}
	case Autostart:
		if rep.Installed {
			rep.State = "starts at desktop login"
		} else {
			rep.State = "not installed"
		}
	}

	if t.CardHome == "" {
		rep.DaemonProblem = "no card home given, daemon.json not read"
		return rep, nil
	}
	rep.DaemonFile = filepath.Join(t.CardHome, "daemon.json")
	data, err := os.ReadFile(filepath.Join(t.Root, rep.DaemonFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rep.DaemonProblem = "no daemon.json: no daemon is running for home " + t.CardHome
	case err != nil:
		rep.DaemonProblem = "cannot read daemon.json: " + err.Error()
	default:
		var info DaemonInfo
		if err := json.Unmarshal(data, &info); err != nil {
			rep.DaemonProblem = "daemon.json is not valid JSON (" + err.Error() + "): the daemon may be writing it, try again"
		} else {
			rep.Daemon = &info
			if rep.PID != 0 && info.PID != rep.PID {
				rep.DaemonProblem = fmt.Sprintf("daemon.json names pid %d but the service runs pid %d: another card serve owns this home, or daemon.json is stale", info.PID, rep.PID)
			}
		}
	}
	return rep, nil
}

// parseSystemctlShow reads `systemctl show --property=…` output (KEY=VALUE lines). A unit that
// does not exist is reported by systemd as LoadState=not-found with exit status 0.
func parseSystemctlShow(out []byte) (loaded bool, state string, pid int) {
	props := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			props[k] = v
		}
	}
	loaded = props["LoadState"] == "loaded"
	state = props["ActiveState"]
	if sub := props["SubState"]; sub != "" && state != "" {
		state += " (" + sub + ")"
	}
	if !loaded && props["LoadState"] != "" {
		state = props["LoadState"]
	}
	pid, _ = strconv.Atoi(props["MainPID"])
	return loaded, state, pid
}

// parseLaunchctlPrint picks the job's own "state = …" and "pid = …" lines out of `launchctl
// print`, which indents the job's properties by one tab and nested blocks deeper.
func parseLaunchctlPrint(out []byte) (state string, pid int) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "\t\t") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), " = ")
		if !ok {
			continue
		}
		switch k {
		case "state":
			if state == "" {
				state = v
			}
		case "pid":
			if pid == 0 {
				pid, _ = strconv.Atoi(v)
			}
		}
	}
	return state, pid
}

// launchctlNotFound recognises "this job is not loaded": launchctl exits 113 and says it could
// not find the service.
func launchctlNotFound(e *CommandError) bool {
	return e.ExitCode == 113 || strings.Contains(e.Output, "Could not find service")
}

// WriteText prints the report for a person.
func (r StatusReport) WriteText(w io.Writer) error {
	p := &printer{w: w}
	installed := "not installed"
	if r.Installed {
		installed = "installed"
	}
	p.printf("service:   %s, %s (%s)\n", r.Supervisor, installed, r.ServiceFile)
	if r.Supervisor != Autostart {
		loaded := "not loaded"
		if r.Loaded {
			loaded = "loaded"
		}
		p.printf("state:     %s, %s\n", loaded, r.State)
	} else {
		p.printf("state:     %s\n", r.State)
	}
	if r.PID != 0 {
		p.printf("pid:       %d\n", r.PID)
	}
	if r.Daemon != nil {
		d := r.Daemon
		p.printf("daemon:    %s pid %d, version %s, protocol %s, started %s\n",
			d.URL, d.PID, d.Version, d.ProtocolVersion, d.StartedAt.Format(time.RFC3339))
	}
	if r.DaemonProblem != "" {
		p.printf("note:      %s\n", r.DaemonProblem)
	}
	return p.err
}
