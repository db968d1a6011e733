package deploy

import (
	"bytes"
	"embed"
	"encoding/xml"
	"fmt"
	"strings"
	"text/template"
)

// The templates ship inside the binary, so `card service install` works from a lone binary with
// no source tree next to it.
//
//go:embed systemd/card.service launchd/dev.card.daemon.plist autostart/card.desktop
var templates embed.FS

// Each format gets only its own quoting function, so a template cannot quote a value for the
// wrong syntax: a path is safe in a unit, a plist and a .desktop file for different reasons.
var (
	unitTemplate = template.Must(template.New("card.service").Option("missingkey=error").
			Funcs(template.FuncMap{"systemdExec": systemdExec, "systemdArg": systemdArg, "systemdEnv": systemdEnv}).
			ParseFS(templates, "systemd/card.service"))
	plistTemplate = template.Must(template.New(Label+".plist").Option("missingkey=error").
			Funcs(template.FuncMap{"xmlText": xmlText}).
			ParseFS(templates, "launchd/dev.card.daemon.plist"))
	desktopTemplate = template.Must(template.New("card.desktop").Option("missingkey=error").
			Funcs(template.FuncMap{"desktopArg": desktopArg, "desktopString": desktopString}).
			ParseFS(templates, "autostart/card.desktop"))
)

// templateData is what the three templates are filled with.
type templateData struct {
	Label     string
	Binary    string
	Args      []string
	Home      string
	PathList  string // the PATH value
	PathEnv   string // "PATH=" + PathList, one argument for env(1) or Environment=
	StdoutLog string
	StderrLog string
}

func (t Target) templateData() templateData {
	path := strings.Join(t.ServicePATH(), ":")
	return templateData{
		Label:     Label,
		Binary:    t.Binary,
		Args:      t.ServeArgs(),
		Home:      t.Home,
		PathList:  path,
		PathEnv:   "PATH=" + path,
		StdoutLog: t.LogDir() + "/card.out.log",
		StderrLog: t.LogDir() + "/card.err.log",
	}
}

// RenderUnit is the systemd user unit for the target.
func RenderUnit(t Target) ([]byte, error) { return render(t, unitTemplate) }

// RenderPlist is the launchd LaunchAgent property list for the target.
func RenderPlist(t Target) ([]byte, error) { return render(t, plistTemplate) }

// RenderDesktop is the XDG autostart entry for the target.
func RenderDesktop(t Target) ([]byte, error) { return render(t, desktopTemplate) }

func render(t Target, tmpl *template.Template) ([]byte, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, t.templateData()); err != nil {
		return nil, fmt.Errorf("render %s: %w", tmpl.Name(), err)
	}
	return buf.Bytes(), nil
}

// systemdExec writes the executable of a unit-file command line. systemd expands % specifiers
// there but, unlike in the arguments, not $VAR, so only % is doubled. It refuses executables with
// quotes or backslashes outright; validate rejects those paths first with advice.
func systemdExec(s string) string {
	return systemdQuote(s)
}

// systemdArg writes one word of a unit-file command line. systemd expands % specifiers and $VAR
// there, so both are doubled to stay literal; words with blanks, quotes, backslashes or a `;` (the
// command separator) are double-quoted with C escapes.
func systemdArg(s string) string {
	return systemdQuote(strings.ReplaceAll(s, "$", "$$"))
}

// systemdEnv writes one Environment= assignment. Specifiers are expanded there too, but $ has no
// meaning, so doubling it would put a literal "$$" into the variable.
func systemdEnv(s string) string {
	return systemdQuote(s)
}

func systemdQuote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	if s != "" && !strings.ContainsAny(s, " \t\"'\\;") {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// desktopArg writes one argument of a Desktop Entry Exec key. The spec quotes arguments that hold
// any reserved shell character, escapes ", `, $ and \ inside the quotes, doubles % (field codes),
// and then applies the string-value escaping on top, which doubles every backslash again.
func desktopArg(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\><~|&;$*?#()`") {
		return s
	}
	quoted := `"` + strings.NewReplacer(`"`, `\"`, "`", "\\`", `$`, `\$`, `\`, `\\`).Replace(s) + `"`
	return desktopString(quoted)
}

// desktopString escapes a Desktop Entry string value, where a backslash starts an escape.
func desktopString(s string) string {
	return strings.ReplaceAll(s, `\`, `\\`)
}

// xmlText escapes character data for the property list.
func xmlText(s string) (string, error) {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return "", err
	}
	return b.String(), nil
}
