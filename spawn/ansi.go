package spawn

import "strings"

// stripANSI removes terminal escape sequences from s: CSI (colours, cursor
// moves: ESC [ … final byte), OSC (titles, links: ESC ] … BEL or ESC \),
// the other two-byte escapes, and a lone ESC. A CLI that believes it has a
// terminal, or ignores NO_COLOR, writes them into stderr, and a message or
// an excerpt shown to a person must not carry them.
func stripANSI(s string) string {
	if strings.IndexByte(s, 0x1b) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != 0x1b {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			break
		}
		switch s[i+1] {
		case '[': // CSI: parameters and intermediates, then one final byte
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
		case ']', 'P', '_', '^': // OSC, DCS, APC, PM: up to BEL or ST (ESC \)
			j := i + 2
			for j < len(s) && s[j] != 0x07 && !(s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\') {
				j++
			}
			if j < len(s) && s[j] == 0x1b {
				j++
			}
			i = j
		default: // a two-byte escape (ESC c, ESC (B's first half, ...)
			i++
			if s[i] == '(' || s[i] == ')' {
				i++ // charset designation takes one more byte
			}
		}
	}
	return b.String()
}
