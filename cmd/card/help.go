package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// A doc is one command's help, kept beside the command. `card X --help`,
// `card X -h` and `card help X` print it with the command's flags, read from
// its FlagSet, so a flag added to a command is in its help at once.
type doc struct {
	// name is the command as typed after "card": "invoke", "runs show".
	name string
	// usage is the one usage line after "card ".
	usage string
	// about says what the command does.
	about string
	// more follows the flags: exit codes, subcommands.
	more string
	// examples are command lines, each with an optional "# comment".
	examples []string
}

// write prints d's help for fs (nil: a command without flags).
func (d doc) write(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: card %s\n\n%s\n", d.usage, strings.TrimRight(d.about, "\n"))
	if hasFlags(fs) {
		fmt.Fprint(w, "\nFlags:\n")
		writeFlags(w, fs)
	}
	if d.more != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(d.more, "\n"))
	}
	if len(d.examples) > 0 {
		fmt.Fprint(w, "\nExamples:\n")
		writeExamples(w, d.examples)
	}
}

// writeExamples aligns the examples' comments.
func writeExamples(w io.Writer, examples []string) {
	width := 0
	for _, ex := range examples {
		if cmd, _, ok := strings.Cut(ex, " # "); ok {
			width = max(width, len(cmd))
		}
	}
	for _, ex := range examples {
		cmd, comment, ok := strings.Cut(ex, " # ")
		if !ok {
			fmt.Fprintf(w, "  %s\n", cmd)
			continue
		}
		fmt.Fprintf(w, "  %-*s  # %s\n", width, cmd, comment)
	}
}

// writeFlags lists fs's flags as a person types them: --name VALUE, then
// what it does and its default.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	type row struct{ left, right string }
	var rows []row
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if isBool(f) {
			value = ""
		} else if value != "" {
			left += " " + strings.ToUpper(value)
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && !strings.Contains(usage, "default") {
			usage += " (default " + f.DefValue + ")"
		}
		rows = append(rows, row{left, usage})
		width = max(width, len(left))
	})
	for _, r := range rows {
		// What a flag does is wrapped beside it, so help fits the table
		// width too.
		text := wrap(r.right, strings.Repeat(" ", width+4), tableWidth)
		fmt.Fprintf(w, "  %-*s  %s", width, r.left, strings.TrimLeft(text, " "))
	}
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	if fs != nil {
		fs.VisitAll(func(*flag.Flag) { n++ })
	}
	return n > 0
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// newFlags is the FlagSet of command d, with --home, which every command
// that talks to a daemon takes. Parse errors are printed by parse, in the
// CLI's words, not by the flag package.
func (e env) newFlags(d doc) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("card "+d.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	home := fs.String("home", "", "the daemon's state `dir` (default $CARD_HOME, else the platform's)")
	return fs, home
}

// parse parses args for d, with flags before, between or after the
// positional arguments (`card invoke codex "task" --mode edit`), and returns
// the positional ones. done is true when the command is over: help was
// asked for (printed to stdout, exit 0) or the arguments were wrong (said on
// stderr with the usage line, exit 2).
func (e env) parse(d doc, fs *flag.FlagSet, args []string) (pos []string, code int, done bool) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			d.write(e.stdout, fs)
			return nil, exitOK, true
		}
		if err != nil {
			return nil, e.usageError(d, flagError(err)), true
		}
		if fs.NArg() == 0 {
			return pos, exitOK, false
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// usageError says what was wrong and how the command is used; exit 2.
func (e env) usageError(d doc, msg string) int {
	fmt.Fprintf(e.stderr, "card %s: %s\nUsage: card %s\nRun `card %s --help` for its flags and examples.\n", d.name, msg, d.usage, d.name)
	return exitUsage
}

// wantsHelp reports whether args ask for help before any flag parsing, for
// commands that dispatch on a subcommand.
func wantsHelp(args []string) bool {
	return len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help")
}

var singleDashFlag = regexp.MustCompile(`(^|[ :])-([a-z][a-z0-9-]*)`)

// flagError words a flag package error with the flags as they are typed:
// "flag provided but not defined: -bogus" becomes "unknown flag --bogus".
func flagError(err error) string {
	msg := strings.Replace(err.Error(), "flag provided but not defined:", "unknown flag", 1)
	return singleDashFlag.ReplaceAllString(msg, "$1--$2")
}
