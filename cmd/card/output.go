package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSON writes v as indented JSON and returns the exit code.
func printJSON(w io.Writer, v any) int {
	if writeJSON(w, v) != nil {
		return exitFailure
	}
	return exitOK
}

// tableWidth is what a table and its notes fit in: a terminal's usual
// width, and what a pasted bug report shows without wrapping.
const tableWidth = 100

// A table is rows of cells under a header; a row may carry notes, printed
// under it, indented and wrapped, so a long reason never widens the table.
// The last column is cut from the left ("…/bin/claude": a path's end names
// the file) when a row would be wider than tableWidth, or, with wrapLast,
// wrapped under itself.
type table struct {
	header   []string
	rows     []tableRow
	wrapLast bool
}

type tableRow struct {
	cells []string
	notes []string
}

func (t *table) add(cells []string, notes ...string) {
	t.rows = append(t.rows, tableRow{cells, notes})
}

func (t *table) write(w io.Writer) {
	n := len(t.header)
	widths := make([]int, n)
	for i, h := range t.header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.rows {
		for i, c := range r.cells {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	used := 0
	for _, w := range widths[:n-1] {
		used += w + 2
	}
	last := max(tableWidth-used, 16)
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i == n-1 && t.wrapLast {
				text := wrap(c, strings.Repeat(" ", used), used+last)
				b.WriteString(strings.TrimLeft(strings.TrimSuffix(text, "\n"), " "))
				break
			}
			if i == n-1 {
				b.WriteString(clipLeft(c, last))
				break
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.header)
	for _, r := range t.rows {
		line(r.cells)
		for _, note := range r.notes {
			fmt.Fprint(w, wrap(note, "    ", tableWidth))
		}
	}
}

// clipLeft keeps the end of s (a path's end names the file) within n
// runes.
func clipLeft(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}

// wrap breaks s into lines of at most width runes, each starting with
// indent; a word longer than a line (a deep path) is broken where it must.
func wrap(s, indent string, width int) string {
	var b strings.Builder
	cur := indent
	room := max(width-utf8.RuneCountInString(indent), 8)
	var words []string
	for _, word := range strings.Fields(s) {
		for r := []rune(word); ; r = r[room:] {
			if len(r) <= room {
				words = append(words, string(r))
				break
			}
			words = append(words, string(r[:room]))
		}
	}
	for _, word := range words {
		if cur != indent && utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(word) > width {
			b.WriteString(cur + "\n")
			cur = indent
		}
		if cur != indent {
			cur += " "
		}
		cur += word
	}
	if cur != indent {
		b.WriteString(cur + "\n")
	}
	return b.String()
}
