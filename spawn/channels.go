package spawn

import (
	"fmt"
	"strings"
)

// ArgChannel is one way card runs an agent CLI, as the operator's args
// meet it. Each adapter has two: its one-shot mode (a prompt, an answer,
// an exit) and the protocol it speaks over stdio for a conversation
// (ask-mode runs, and the warm agents that sessions and ACP sessions go
// over). They are often different commands of the CLI (Codex's exec and
// app-server) or different modes of its parser, and an operator's args,
// given to both, must suit both: a flag only one of them takes fails
// every run of the other, and that failure surfaced mid-conversation
// ("codex exited with status 2 before it finished initialize") rather
// than at config load, where the flag was written.
type ArgChannel struct {
	// Name is the channel as a refusal names it, with what runs over it:
	// "codex app-server (ask runs, sessions and ACP sessions)".
	Name string
	// Refused are the flags the channel does not take, or that break the
	// protocol card speaks over it, each with why. Each was seen against
	// the real CLI (its --help, or a run of the channel with the flag).
	Refused map[string]string
}

// Channels are an adapter's two channels, as its operator args are judged
// against each. A setting one channel takes under another flag is the
// builder's to spell (codexModelArgs), so the refusals list only what no
// spelling saves.
type Channels struct {
	OneShot, Session ArgChannel
}

// refusal says why ch does not take args[i], or "".
func (a ArgChannel) refusal(args []string, i int) (flag, why string) {
	for f, why := range a.Refused {
		if argIsFlag(args[i], f) {
			return f, why
		}
	}
	return "", ""
}

// argIsFlag reports whether arg is flag: alone, as flag=value, or, for a
// one-letter flag, with its value joined to it (-mgpt-5, as the CLIs'
// option parsers read it).
func argIsFlag(arg, flag string) bool {
	if arg == flag || strings.HasPrefix(arg, flag+"=") {
		return true
	}
	short := len(flag) == 2 && flag[0] == '-' && flag[1] != '-'
	return short && len(arg) > 2 && strings.HasPrefix(arg, flag)
}

// checkChannels refuses args[i] when a channel of ad does not take it,
// naming each channel that does not.
func checkChannels(ad Adapter, where string, args []string, i int) error {
	var not []string
	for _, ch := range []ArgChannel{ad.Channels.OneShot, ad.Channels.Session} {
		if f, why := ch.refusal(args, i); f != "" {
			not = append(not, fmt.Sprintf("%s (%s)", ch.Name, why))
		}
	}
	if len(not) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %q is not taken by %s: every run over it would fail; remove it", where, args[i], strings.Join(not, ", nor by "))
}

// tomlString quotes s as a TOML basic string, the form Codex's -c reads a
// string value in.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
