package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/internal/atomicfile"
)

// StepKind says what a Step does.
type StepKind string

const (
	// MkdirStep creates a directory and its parents; existing ones are left as they are.
	MkdirStep StepKind = "mkdir"
	// WriteStep replaces a file atomically.
	WriteStep StepKind = "write"
	// RemoveStep deletes a file; a file already gone is not an error.
	RemoveStep StepKind = "remove"
	// RunStep runs a command.
	RunStep StepKind = "run"
)

// Step is one thing `card service` does to the machine.
type Step struct {
	Kind    StepKind
	Path    string      // MkdirStep, WriteStep, RemoveStep
	Mode    fs.FileMode // MkdirStep, WriteStep
	Content []byte      // WriteStep
	Command Command     // RunStep
	// IgnoreFailure, when set, says why a failed RunStep is expected and harmless (for example
	// "not loaded yet" when stopping a service before replacing it); the plan goes on.
	IgnoreFailure string
}

// Steps is a plan: everything one action will do, in order, plus what to tell the person after.
type Steps struct {
	Action     Action
	Supervisor Supervisor
	Steps      []Step
	// Notes are what the person should know afterwards: where logs go, what was not possible.
	Notes []string
	root  string
}

// Plan decides, from the target alone, every file and command an action needs. It touches
// nothing, so a dry run shows exactly what Apply would do.
func Plan(t Target, a Action) (Steps, error) {
	if err := t.validate(); err != nil {
		return Steps{}, err
	}
	if _, err := ParseAction(string(a)); err != nil {
		return Steps{}, err
	}
	s := Steps{Action: a, Supervisor: t.supervisor(), root: t.Root}
	switch s.Supervisor {
	case Systemd:
		return s, planSystemd(t, a, &s)
	case Autostart:
		return s, planAutostart(t, a, &s)
	default:
		return s, planLaunchd(t, a, &s)
	}
}

func systemctl(args ...string) Step {
	return Step{Kind: RunStep, Command: Command{Name: "systemctl", Args: append([]string{"--user"}, args...)}}
}

func planSystemd(t Target, a Action, s *Steps) error {
	unit := t.UnitPath()
	if a == Uninstall {
		stop := systemctl("disable", "--now", UnitName)
		stop.IgnoreFailure = "the unit may not be installed"
		s.Steps = []Step{
			stop,
			{Kind: RemoveStep, Path: unit},
			// An earlier install may have fallen back to autostart; leave no login item behind.
			{Kind: RemoveStep, Path: t.AutostartPath()},
			systemctl("daemon-reload"),
		}
		s.Notes = []string{"card is stopped and will not start at login; its home and logs in the journal are kept"}
		return nil
	}
	content, err := RenderUnit(t)
	if err != nil {
		return err
	}
	s.Steps = []Step{
		{Kind: MkdirStep, Path: filepath.Dir(unit), Mode: 0o755},
		{Kind: WriteStep, Path: unit, Mode: 0o644, Content: content},
		systemctl("daemon-reload"),
		systemctl("enable", "--now", UnitName),
	}
	s.Notes = []string{
		"logs: journalctl --user -u " + UnitName,
		"card runs while you are logged in; to keep it running after you log out: loginctl enable-linger",
		"after upgrading the binary in place, restart it: systemctl --user restart " + UnitName,
	}
	return nil
}

func planAutostart(t Target, a Action, s *Steps) error {
	entry := t.AutostartPath()
	if a == Uninstall {
		s.Steps = []Step{{Kind: RemoveStep, Path: entry}, {Kind: RemoveStep, Path: t.UnitPath()}}
		s.Notes = []string{"card will not start at your next login; a card serve already running keeps running until you log out"}
		return nil
	}
	content, err := RenderDesktop(t)
	if err != nil {
		return err
	}
	s.Steps = []Step{
		{Kind: MkdirStep, Path: filepath.Dir(entry), Mode: 0o755},
		{Kind: WriteStep, Path: entry, Mode: 0o644, Content: content},
	}
	reason := t.FallbackReason
	if reason == "" {
		reason = "autostart was chosen"
	}
	s.Notes = []string{
		"no systemd user service (" + reason + "), so card starts from an XDG autostart entry",
		"your desktop session starts card at your next login (a session without a desktop never does); to start it now: " +
			shellQuote(t.Binary) + " serve --home " + shellQuote(t.CardHome),
	}
	return nil
}

func planLaunchd(t Target, a Action, s *Steps) error {
	plist := t.PlistPath()
	bootout := Step{Kind: RunStep, Command: Command{Name: "launchctl", Args: []string{"bootout", t.launchdService()}}}
	if a == Uninstall {
		bootout.IgnoreFailure = "the agent may not be loaded"
		s.Steps = []Step{bootout, {Kind: RemoveStep, Path: plist}}
		s.Notes = []string{"card is stopped and will not start at login; its home and logs in " + t.LogDir() + " are kept"}
		return nil
	}
	content, err := RenderPlist(t)
	if err != nil {
		return err
	}
	// Bootstrapping a label that is already loaded fails, so a reinstall (new binary, new home)
	// first unloads the old job; on a first install there is nothing to unload.
	bootout.IgnoreFailure = "nothing to replace on a first install"
	s.Steps = []Step{
		{Kind: MkdirStep, Path: filepath.Dir(plist), Mode: 0o755},
		// launchd opens the log files but does not create their directory; without it the job
		// fails to start with no hint why.
		{Kind: MkdirStep, Path: t.LogDir(), Mode: 0o700},
		{Kind: WriteStep, Path: plist, Mode: 0o644, Content: content},
		bootout,
		{Kind: RunStep, Command: Command{Name: "launchctl", Args: []string{"bootstrap", t.launchdDomain(), plist}}},
	}
	s.Notes = []string{"logs: " + t.LogDir()}
	return nil
}

// DryRun prints every directory, file (path, mode and full content) and command the plan would
// create or run, in order, without doing any of it.
func (s Steps) DryRun(w io.Writer) error {
	p := &printer{w: w}
	p.printf("# card service %s (dry run, %s): nothing below has been done\n", s.Action, s.Supervisor)
	for _, st := range s.Steps {
		switch st.Kind {
		case MkdirStep:
			p.printf("mkdir -p -m %04o %s\n", st.Mode.Perm(), shellQuote(st.Path))
		case RemoveStep:
			p.printf("rm -f %s\n", shellQuote(st.Path))
		case RunStep:
			p.printf("%s", st.Command)
			if st.IgnoreFailure != "" {
				p.printf("  # a failure is ignored: %s", st.IgnoreFailure)
			}
			p.printf("\n")
		case WriteStep:
			p.printf("write %s (mode %04o, %d bytes):\n", shellQuote(st.Path), st.Mode.Perm(), len(st.Content))
			p.printf("----- begin %s -----\n", st.Path)
			p.printf("%s", st.Content)
			if len(st.Content) > 0 && st.Content[len(st.Content)-1] != '\n' {
				p.printf("\n")
			}
			p.printf("----- end %s -----\n", st.Path)
		}
	}
	// The notes describe the machine after the plan is done, which a dry
	// run is not.
	if len(s.Notes) > 0 {
		p.printf("# once done:\n")
	}
	for _, n := range s.Notes {
		p.printf("#   %s\n", n)
	}
	return p.err
}

// Apply does the plan's steps in order and stops at the first failure, which names the step, the
// command and its output. progress, when not nil, gets one line per step and the notes at the end.
func (s Steps) Apply(ctx context.Context, r Runner, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	p := &printer{w: progress}
	for _, st := range s.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		full := filepath.Join(s.root, st.Path)
		switch st.Kind {
		case MkdirStep:
			if err := os.MkdirAll(full, st.Mode.Perm()); err != nil {
				return fmt.Errorf("create directory %s: %w", st.Path, err)
			}
		case WriteStep:
			if err := atomicfile.Write(full, st.Content, st.Mode.Perm()); err != nil {
				return fmt.Errorf("write %s: %w", st.Path, err)
			}
			p.printf("wrote %s\n", st.Path)
		case RemoveStep:
			err := os.Remove(full)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove %s: %w", st.Path, err)
			}
			if err == nil {
				p.printf("removed %s\n", st.Path)
			}
		case RunStep:
			if _, err := r.Run(ctx, st.Command); err != nil {
				if st.IgnoreFailure != "" && ctx.Err() == nil {
					p.printf("ran %s (failed, ignored: %s)\n", st.Command, st.IgnoreFailure)
					continue
				}
				return fmt.Errorf("card service %s: %w", s.Action, err)
			}
			p.printf("ran %s\n", st.Command)
		default:
			return fmt.Errorf("unknown step kind %q", st.Kind)
		}
	}
	for _, n := range s.Notes {
		p.printf("%s\n", n)
	}
	return nil
}

// printer remembers the first write error so the print loops stay readable.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// String summarises the plan in one line, for logs.
func (s Steps) String() string {
	var parts []string
	for _, st := range s.Steps {
		if st.Kind == RunStep {
			parts = append(parts, st.Command.String())
		} else {
			parts = append(parts, string(st.Kind)+" "+st.Path)
		}
	}
	return fmt.Sprintf("%s via %s: %s", s.Action, s.Supervisor, strings.Join(parts, "; "))
}
