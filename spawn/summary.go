package spawn

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// oneLine is s as one line a person can trust before allowing it: runs of
// whitespace become one space; every character that would act on the
// terminal or the text around it instead of showing itself (C0 and C1
// controls, ESC and with it every CSI and OSC sequence, DEL, and the
// Unicode format characters: bidi overrides, embeddings, isolates and
// marks, zero-width and tag characters) is written as a visible escape,
// \x1b or \u202e; a byte that is not UTF-8 is written \xNN, so the line is
// always valid UTF-8. A right-to-left override can otherwise show
// `rm -rf ~` as something harmless, and an escape sequence can rewrite the
// dialog it is shown in.
//
// A line longer than summaryMax bytes keeps its head and its tail around
// a marker that says how many bytes it left out ("… [cut 1,234 bytes] …"):
// the end of a command (`… && curl … | sh`) is exactly what a plain cut
// would hide.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	total := 0
	clean := true
	for rest := s; rest != ""; {
		u, n := displayUnit(rest)
		total += len(u)
		clean = clean && len(u) == n
		rest = rest[n:]
	}
	if clean && total <= summaryMax {
		return s
	}
	if total <= summaryMax {
		var b strings.Builder
		b.Grow(total)
		for rest := s; rest != ""; {
			u, n := displayUnit(rest)
			b.WriteString(u)
			rest = rest[n:]
		}
		return b.String()
	}
	// The marker's length depends on the count it states, and the count on
	// what the marker leaves room for: size the marker for the largest
	// count it could state (the whole line), which is never shorter.
	budget := summaryMax - len(cutMarker(total))
	var head strings.Builder
	rest := s
	for rest != "" {
		u, n := displayUnit(rest)
		if head.Len()+len(u) > budget/2 {
			break
		}
		head.WriteString(u)
		rest = rest[n:]
	}
	var tail []string
	tailLen := 0
	for rest != "" {
		u, n := lastDisplayUnit(rest)
		if head.Len()+tailLen+len(u) > budget {
			break
		}
		tail = append(tail, u)
		tailLen += len(u)
		rest = rest[:len(rest)-n]
	}
	var b strings.Builder
	b.WriteString(head.String())
	b.WriteString(cutMarker(total - head.Len() - tailLen))
	for i := len(tail) - 1; i >= 0; i-- {
		b.WriteString(tail[i])
	}
	return b.String()
}

// cutMarker stands where oneLine left n bytes of the line out.
func cutMarker(n int) string { return " … [cut " + thousands(n) + " bytes] … " }

// thousands writes n with a comma between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// displayUnit is how the first character of s is shown, and how many bytes
// of s it takes.
func displayUnit(s string) (string, int) {
	r, n := utf8.DecodeRuneInString(s)
	return displayRune(r, n, s[0]), n
}

// lastDisplayUnit is displayUnit of the last character of s.
func lastDisplayUnit(s string) (string, int) {
	r, n := utf8.DecodeLastRuneInString(s)
	return displayRune(r, n, s[len(s)-n]), n
}

func displayRune(r rune, n int, first byte) string {
	switch {
	case r == utf8.RuneError && n == 1:
		return fmt.Sprintf(`\x%02x`, first)
	case r < 0x20 || r == 0x7f:
		return fmt.Sprintf(`\x%02x`, r)
	case (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029':
		if r > 0xffff {
			return fmt.Sprintf(`\U%08x`, r)
		}
		return fmt.Sprintf(`\u%04x`, r)
	}
	if n == 1 {
		return asciiUnits[first]
	}
	return string(r)
}

// asciiUnits are the printable ASCII characters as strings, so the common
// case allocates nothing.
var asciiUnits = func() (t [128]string) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = string(rune(c))
	}
	return t
}()
