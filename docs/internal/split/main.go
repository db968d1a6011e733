package main

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the module root: docs/protocol.md is read from it, and links into it are rewritten under it")
	dry := flag.Bool("n", false, "print the pages and their line counts; write nothing")
	flag.Parse()
	if err := run(*root, *dry); err != nil {
		fmt.Fprintln(os.Stderr, "split:", err)
		os.Exit(1)
	}
}

func run(root string, dry bool) error {
	docs := filepath.Join(root, "docs")
	src, err := os.ReadFile(filepath.Join(docs, "protocol.md"))
	if err != nil {
		return err
	}
	res, err := Split(string(src))
	if err != nil {
		return err
	}
	if err := Verify(string(src), res.Pages); err != nil {
		return err
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(os.Stderr, "split: warning:", w)
	}
	paths := make([]string, 0, len(res.Pages))
	for p := range res.Pages {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Printf("%5d docs/%s\n", len(res.Pages[p]), p)
	}
	if dry {
		return nil
	}
	// Replace the split's own pages, and nothing a person wrote.
	for _, dir := range []string{"protocol", "agents"} {
		ents, err := os.ReadDir(filepath.Join(docs, dir))
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		for _, e := range ents {
			f := filepath.Join(docs, dir, e.Name())
			b, err := os.ReadFile(f)
			if err == nil && isOurs(b) {
				if err := os.Remove(f); err != nil {
					return err
				}
			}
		}
	}
	for _, p := range paths {
		f := filepath.Join(docs, p)
		if p != "protocol.md" {
			if _, err := os.Stat(f); err == nil {
				return fmt.Errorf("%s exists and is not the split's; move it out of the way", f)
			}
		}
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, []byte(Render(res.Pages[p])), 0o644); err != nil {
			return err
		}
	}
	return rewriteOutside(root, res)
}

var outsideRE = regexp.MustCompile(`protocol\.md#([A-Za-z0-9_-]+)`)

// rewriteOutside points links into the old one-file document (README's,
// the other docs', comments and messages in the Go code) at the page that
// now holds the anchor. The path before protocol.md names the docs folder
// and stays as it is.
func rewriteOutside(root string, res *Result) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case d.Name() == "node_modules", d.Name() == ".git", d.Name() == "testdata",
				rel == "docs/protocol", rel == "docs/agents", rel == "docs/internal/split":
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 || rel == "docs/protocol.md" || !(strings.HasSuffix(p, ".md") || strings.HasSuffix(p, ".go")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out := outsideRE.ReplaceAllFunc(b, func(m []byte) []byte {
			slug := string(outsideRE.FindSubmatch(m)[1])
			pg, ok := res.Anchors[slug]
			if !ok || pg == "protocol.md" {
				return m
			}
			return []byte(pg + "#" + slug)
		})
		if bytes.Equal(out, b) {
			return nil
		}
		fmt.Printf("      %s: links point at the pages\n", rel)
		return os.WriteFile(p, out, 0o644)
	})
}

// isOurs tells the split's pages from a person's: they carry its marker (in
// any wording it has had) in their first lines.
func isOurs(b []byte) bool {
	head, _, _ := bytes.Cut(b, []byte("\n\n\n"))
	for _, l := range bytes.SplitN(head, []byte("\n"), 6) {
		if bytes.HasPrefix(l, []byte("<!--")) && bytes.Contains(l, []byte("`go run ./docs/internal/split`")) {
			return true
		}
	}
	return false
}
