// Command split turns the one-file protocol document into pages by reader:
// the client contract under docs/protocol/, one page per agent under
// docs/agents/, and docs/protocol.md as the index that links them. It is a
// program rather than a hand edit so that it can be run again on a
// protocol.md that others have edited in the meantime: the mapping lives in
// rules.go, a section it does not know lands on protocol/other.md with a
// warning, and no line is written unless every line of the input is on
// exactly one page (Verify).
//
// From the module root, with docs/protocol.md the one-file document again
// (say a branch that edited it was merged: take that side's file):
//
//	git show MERGE_HEAD:docs/protocol.md > docs/protocol.md   # or the side that has every edit
//	go run ./docs/internal/split                              # -n: print the pages, write nothing
//	CARD_DOCS_UPDATE_PARAMS=1 go test -count=1 -run TestTheParamsTables ./docs/
//	go test -count=1 ./docs/...
//
// It replaces only the pages that carry its marker, and rewrites links to
// protocol.md#anchor elsewhere in the repository to the page holding the
// anchor. Once the pages are edited by hand, a branch that still edits the
// one-file document needs a three-way merge of that document
// (git merge-file ours base theirs, with ours the document the pages were
// last split from) before the split is run again.
package main

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
)

// Marker is the first line after the title of every page this program
// writes; it is how a later run knows which files are its own to replace.
const Marker = "<!-- Written by `go run ./docs/internal/split`, which replaces this page when it splits a one-file docs/protocol.md again. -->"

// line is one output line; Src is the input line it came from, -1 when the
// split wrote it (a page's title, a link to another page).
type line struct {
	Src  int
	Text string
}

// Result is every page's lines by path (relative to docs/), the anchors
// each heading now lives under, and the warnings to print.
type Result struct {
	Pages    map[string][]line
	Anchors  map[string]string // slug → page path
	Warnings []string
}

type heading struct {
	level int
	text  string
	page  string
	shift int
}

var headingRE = regexp.MustCompile(`^(#{1,6}) +(.*?)\s*$`)

// Slug is GitHub's anchor for a heading's text.
func Slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// adapterOf tells which adapter a paragraph or list item opens with.
func adapterOf(l string) (adapter, bool) {
	var rest string
	switch {
	case strings.HasPrefix(l, "**"):
		rest = l[2:]
	case strings.HasPrefix(l, "- **"):
		rest = l[4:]
	default:
		return adapter{}, false
	}
	for _, a := range adapters {
		for _, n := range a.Names {
			if strings.HasPrefix(rest, n) {
				after := rest[len(n):]
				if after == "" || !unicode.IsLetter(rune(after[0])) {
					return a, true
				}
			}
		}
	}
	return adapter{}, false
}

func agentPage(id string) string { return "agents/" + id + ".md" }

// Split maps every input line onto a page. It does not touch the disk.
func Split(text string) (*Result, error) {
	in := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(in) == 0 || !strings.HasPrefix(in[0], "# ") {
		return nil, errors.New("the document does not start with its `# ` title")
	}
	for _, l := range in {
		if isOurs([]byte(l)) {
			return nil, errors.New("this protocol.md is already the split's index; put the one-file document back first (e.g. `git show REV:docs/protocol.md > docs/protocol.md`)")
		}
	}
	known := map[string]bool{}
	for _, p := range pages {
		known[p.Path] = true
	}
	for _, a := range adapters {
		known[agentPage(a.ID)] = true
	}
	for h, p := range sectionRules {
		if !known[p] {
			return nil, fmt.Errorf("rule for %q names page %s, which is not in the page list", h, p)
		}
	}

	res := &Result{Pages: map[string][]line{}, Anchors: map[string]string{}}
	titleOf := map[string]string{}
	for _, p := range pages {
		titleOf[p.Path] = p.Title
	}
	seenPage, ownTitle := map[string]bool{}, map[string]bool{}
	movedTo := map[int][2]string{}   // a subsection's heading line → the contract page it left, its heading
	dest := make([]string, len(in))  // page of each line
	group := make([]string, len(in)) // for a moved block: its heading on the agent page
	shift := make([]int, len(in))    // heading levels to take off
	var stack []heading
	var headingsSeen []string
	fence := false
	var blockAd *adapter
	blockList := false
	perSection := map[int][]adapter{} // first removed line → adapters moved from that section
	firstRemoved := -1
	for i, l := range in {
		if i == 0 {
			dest[i] = indexPage
			continue
		}
		trim := strings.TrimSpace(l)
		isFence := strings.HasPrefix(trim, "```")
		if !fence {
			if m := headingRE.FindStringSubmatch(l); m != nil {
				lvl, txt := len(m[1]), m[2]
				for len(stack) > 0 && stack[len(stack)-1].level >= lvl {
					stack = stack[:len(stack)-1]
				}
				parent := heading{page: indexPage}
				if len(stack) > 0 {
					parent = stack[len(stack)-1]
				}
				h := heading{level: lvl, text: txt, page: parent.page, shift: parent.shift}
				if p, ok := sectionRules[txt]; ok {
					h.page = p
				} else if len(stack) == 0 {
					h.page = otherPage
					res.Warnings = append(res.Warnings, fmt.Sprintf("line %d: no rule for section %q; it goes to docs/%s", i+1, txt, otherPage))
				}
				if h.page != parent.page && strings.HasPrefix(h.page, "agents/") && parent.page != indexPage && !strings.HasPrefix(parent.page, "agents/") {
					movedTo[i] = [2]string{parent.page, txt}
				}
				if h.page != parent.page {
					h.shift = lvl - 2
					// A page whose first section is named as the page is
					// titled by that heading itself, not by a copy of it.
					if !seenPage[h.page] && titleOf[h.page] == txt {
						h.shift = lvl - 1
						ownTitle[h.page] = true
					}
				}
				seenPage[h.page] = true
				stack = append(stack, h)
				headingsSeen = append(headingsSeen, txt)
				slug := Slug(txt)
				if prev, dup := res.Anchors[slug]; dup && prev != h.page {
					res.Warnings = append(res.Warnings, fmt.Sprintf("line %d: heading %q is on %s and %s; links to it go to the first", i+1, txt, prev, h.page))
				} else if !dup {
					res.Anchors[slug] = h.page
				}
				blockAd, firstRemoved = nil, -1
				dest[i], shift[i] = h.page, h.shift
				continue
			}
		}
		cur := heading{page: indexPage}
		if len(stack) > 0 {
			cur = stack[len(stack)-1]
		}
		if g, ok := blockRules[cur.text]; ok && !fence {
			paraStart := i > 0 && strings.TrimSpace(in[i-1]) == ""
			switch {
			case blockAd != nil && blockList && (strings.HasPrefix(l, "- ") || trim == ""):
				blockAd = nil
			case blockAd != nil && !blockList && paraStart && strings.HasPrefix(l, "**"):
				blockAd = nil
			}
			if blockAd == nil && (paraStart || strings.HasPrefix(l, "- ")) {
				if a, ok := adapterOf(l); ok {
					blockAd, blockList = &a, strings.HasPrefix(l, "- ")
					// A new run of moved blocks when the last line with
					// text stayed in the contract: each run leaves its own
					// pointer where it was.
					last := i - 1
					for last > 0 && strings.TrimSpace(in[last]) == "" {
						last--
					}
					if firstRemoved < 0 || group[last] == "" {
						firstRemoved = i
					}
					have := false
					for _, x := range perSection[firstRemoved] {
						have = have || x.ID == a.ID
					}
					if !have {
						perSection[firstRemoved] = append(perSection[firstRemoved], a)
					}
				}
			}
			if blockAd != nil {
				dest[i], group[i] = agentPage(blockAd.ID), g
				if isFence {
					fence = !fence
				}
				continue
			}
		}
		if isFence {
			fence = !fence
		}
		dest[i] = cur.page
	}
	if fence {
		return nil, errors.New("a code block is never closed")
	}
	// A rule no heading matched is most likely a heading someone renamed:
	// its section then stays with its parent, which the reader should know.
	used := map[string]bool{}
	for _, h := range headingsSeen {
		used[h] = true
	}
	for _, rules := range []map[string]string{sectionRules, blockRules} {
		for h := range rules {
			if !used[h] {
				res.Warnings = append(res.Warnings, fmt.Sprintf("no section is headed %q, so its rule moved nothing: was it renamed? (docs/internal/split/rules.go)", h))
			}
		}
	}
	sort.Strings(res.Warnings)

	// Emit: pages in input order, each opening with its title.
	titles := map[string]string{}
	abouts := map[string]string{}
	for _, p := range pages {
		titles[p.Path], abouts[p.Path] = p.Title, p.About
	}
	for _, a := range adapters {
		titles[agentPage(a.ID)] = a.Title + " (`" + a.ID + "`)"
		abouts[agentPage(a.ID)] = "What card does with " + a.Title + ": its flags, sign-in, ask channel and its row in each table that compares the agents."
	}
	gen := func(p string, s ...string) {
		for _, t := range s {
			res.Pages[p] = append(res.Pages[p], line{-1, t})
		}
	}
	adapterByPage := map[string]adapter{}
	for _, a := range adapters {
		adapterByPage[agentPage(a.ID)] = a
	}
	about := func(p string) string {
		return abouts[p] + " Part of the [card protocol](" + relLink(p, indexPage) + ")."
	}
	open := func(p string) {
		if _, ok := res.Pages[p]; ok || p == indexPage {
			return
		}
		if ownTitle[p] {
			res.Pages[p] = []line{} // the title is the section's heading; the rest follows it
			return
		}
		gen(p, "# "+titles[p], "", Marker, "", about(p), "")
		if a, ok := adapterByPage[p]; ok {
			gen(p, glanceLines(a, p, res)...)
		}
	}
	lastGroup := map[string]string{}
	for i, l := range in {
		p := dest[i]
		if i == 0 {
			gen(p) // the index opens with the input's own title
			res.Pages[p] = append(res.Pages[p], line{i, l})
			gen(p, "", Marker)
			continue
		}
		open(p)
		if ads, ok := perSection[i]; ok {
			var links []string
			for _, a := range ads {
				links = append(links, "["+a.Title+"]("+relLink(dest[i-1], agentPage(a.ID))+"#"+Slug(group[i])+")")
			}
			gen(dest[i-1], "Each adapter's part is on its own page: "+strings.Join(links, ", ")+".", "")
		}
		if from, ok := movedTo[i]; ok {
			name := titles[p]
			if j := strings.Index(name, " (`"); j > 0 {
				name = name[:j]
			}
			gen(from[0], "", "["+from[1]+"]("+relLink(from[0], p)+"#"+Slug(from[1])+") is on the "+name+" page.", "")
		}
		if group[i] != "" && lastGroup[p] != group[i] {
			gen(p, "", "## "+group[i], "")
			lastGroup[p] = group[i]
		} else if group[i] == "" {
			lastGroup[p] = ""
		}
		text := l
		if shift[i] > 0 {
			if m := headingRE.FindStringSubmatch(l); m != nil {
				text = strings.Repeat("#", len(m[1])-shift[i]) + " " + m[2]
			}
		}
		res.Pages[p] = append(res.Pages[p], line{i, text})
		if ownTitle[p] && len(res.Pages[p]) == 1 {
			gen(p, "", Marker, "", about(p), "")
		}
	}

	// Every agent has a page, whether or not a section moved to it.
	for _, a := range adapters {
		open(agentPage(a.ID))
	}
	// The agents' index lists their pages.
	if _, ok := res.Pages["agents/README.md"]; ok {
		gen("agents/README.md", "", "## One page per agent", "")
		for _, a := range adapters {
			gen("agents/README.md", "- ["+a.Title+"]("+a.ID+".md) (`"+a.ID+"`)")
		}
	}
	// The index: every page, then every agent.
	gen(indexPage, "", "## Pages", "")
	for _, pg := range pages {
		if _, ok := res.Pages[pg.Path]; ok && pg.Path != indexPage {
			gen(indexPage, "- ["+pg.Title+"]("+pg.Path+"): "+pg.About)
		}
	}
	gen(indexPage, "", "One page per agent:", "")
	for _, a := range adapters {
		gen(indexPage, "- ["+a.Title+"]("+agentPage(a.ID)+")")
	}

	for p, ls := range res.Pages {
		res.Pages[p] = tidy(rewriteLinks(p, ls, res))
	}
	return res, nil
}

// relLink is the link from page from to page to, both relative to docs/.
func relLink(from, to string) string {
	depth := strings.Count(from, "/")
	return strings.Repeat("../", depth) + to
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]*)\)`)

// rewriteLinks points each in-document anchor at the page that now holds
// it, and each relative link at the same file from the page's folder.
func rewriteLinks(p string, ls []line, res *Result) []line {
	fence := false
	for i, l := range ls {
		if strings.HasPrefix(strings.TrimSpace(l.Text), "```") {
			fence = !fence
		}
		if fence || l.Src < 0 {
			continue
		}
		ls[i].Text = linkRE.ReplaceAllStringFunc(l.Text, func(m string) string {
			target := m[2 : len(m)-1]
			switch {
			case strings.HasPrefix(target, "#"):
				slug := target[1:]
				tp, ok := res.Anchors[slug]
				if !ok {
					res.Warnings = append(res.Warnings, fmt.Sprintf("docs/%s: link to #%s, which no heading has", p, slug))
					return m
				}
				if tp == p {
					return m
				}
				return "](" + relLink(p, tp) + target + ")"
			case strings.Contains(target, "://"), strings.HasPrefix(target, "/"), strings.HasPrefix(target, "mailto:"):
				return m
			default:
				return "](" + relLink(p, path.Clean(target)) + ")"
			}
		})
	}
	return ls
}

// tidy leaves at most one blank line in a row outside code blocks and none
// at the end.
func tidy(ls []line) []line {
	var out []line
	fence := false
	for _, l := range ls {
		if strings.HasPrefix(strings.TrimSpace(l.Text), "```") {
			fence = !fence
		}
		if !fence && strings.TrimSpace(l.Text) == "" && (len(out) == 0 || strings.TrimSpace(out[len(out)-1].Text) == "") {
			continue
		}
		// A heading gets a blank line before it, whatever page its
		// neighbours came from.
		if !fence && headingRE.MatchString(l.Text) && len(out) > 0 && strings.TrimSpace(out[len(out)-1].Text) != "" {
			out = append(out, line{-1, ""})
		}
		out = append(out, l)
	}
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1].Text) == "" {
		out = out[:len(out)-1]
	}
	return out
}

// normal is a line as Verify compares it: headings without their level,
// links without the page their anchor is on, relative links without the
// climb out of a page's folder.
func normal(s string) string {
	s = strings.TrimRight(s, " \t\r")
	if m := headingRE.FindStringSubmatch(s); m != nil {
		s = m[2]
	}
	return linkRE.ReplaceAllStringFunc(s, func(m string) string {
		t := m[2 : len(m)-1]
		if i := strings.Index(t, "#"); i >= 0 && !strings.Contains(t, "://") {
			t = t[i:]
		}
		for strings.HasPrefix(t, "../") {
			t = t[3:]
		}
		return "](" + t + ")"
	})
}

// Verify checks that every non-blank line of the input is on exactly one
// page, the same text up to rewritten links and heading levels, and that
// the pages hold no other line than the split's own.
func Verify(text string, pages map[string][]line) error {
	want := map[string]int{}
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) != "" {
			want[normal(l)]++
		}
	}
	got := map[string]int{}
	for _, ls := range pages {
		for _, l := range ls {
			if l.Src >= 0 && strings.TrimSpace(l.Text) != "" {
				got[normal(l.Text)]++
			}
		}
	}
	var bad []string
	for l, n := range want {
		if got[l] != n {
			bad = append(bad, fmt.Sprintf("%d× in the input, %d× in the pages: %.100q", n, got[l], l))
		}
	}
	for l, n := range got {
		if _, ok := want[l]; !ok {
			bad = append(bad, fmt.Sprintf("%d× in the pages, not in the input: %.100q", n, l))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("the split does not keep the document whole (%d lines):\n%s", len(bad), strings.Join(bad, "\n"))
	}
	return nil
}

// Render is a page's text.
func Render(ls []line) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// glanceLines is an agent page's list of the tables, in the client
// contract, that have a row for it.
func glanceLines(a adapter, p string, res *Result) []string {
	var at []string
	for _, g := range glance {
		if g.Named && !names(g.Heading, a) {
			continue
		}
		if tp, ok := res.Anchors[Slug(g.Heading)]; ok {
			at = append(at, "- "+g.What+": [its row in "+g.Heading+"]("+relLink(p, tp)+"#"+Slug(g.Heading)+")")
		}
	}
	for _, s := range a.SeeAlso {
		if tp, ok := res.Anchors[Slug(s)]; ok {
			at = append(at, "- ["+s+"]("+relLink(p, tp)+"#"+Slug(s)+")")
		}
	}
	if len(at) == 0 {
		return nil
	}
	return append([]string{"## At a glance", ""}, append(at, "")...)
}

// names tells whether a heading names the adapter, as a whole word.
func names(heading string, a adapter) bool {
	words := strings.FieldsFunc(heading, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for _, n := range a.Names {
		if slices.Contains(words, n) {
			return true
		}
	}
	return false
}
