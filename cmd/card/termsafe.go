package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal: only then does what card
// prints there need the escaping of termSafe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// termSafe is s as text that shows itself on a terminal instead of acting
// on it. A model's answer is text from outside: an ESC in it starts a
// sequence the terminal obeys (OSC 52 writes the clipboard, CSI 2J clears
// the screen, others move the cursor to rewrite what was printed, or set
// the window title), and a carriage return or a backspace overprints what
// came before. Every C0 control but newline and tab (and a carriage return
// just before a newline), DEL, and the C1 controls, which some terminals
// obey as ESC sequences, are written as visible escapes (\x1b, \u009b).
// Piped output is left as the agent wrote it: a program reading it gets
// the bytes.
func termSafe(s string) string {
	i := strings.IndexFunc(s, needsTermEscape)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for j, r := range s[i:] {
		switch {
		case r == '\r' && strings.HasPrefix(s[i+j+1:], "\n"):
			b.WriteRune(r)
		case r < 0x80 && needsTermEscape(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsTermEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsTermEscape(r rune) bool {
	return (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0)
}
