package spawn

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The plan's private files and environment: what a run writes and sets for
// the agent besides its argv.

// writePrivateFiles creates a 0700 directory holding each file at 0600 (or
// narrower). A system prompt in argv is readable by every local user via
// ps; in this file it is readable by the daemon's user only.
func writePrivateFiles(parent string, files []PlanFile) (string, error) {
	dir, err := os.MkdirTemp(parent, "card-run-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	// A quote or backslash would break a -c value that names a file, a
	// comma would split Codex's --image path, and braces would read as
	// a placeholder.
	if strings.ContainsAny(dir, "\"\\\n{},") {
		os.RemoveAll(dir)
		return "", fmt.Errorf("temporary directory %q has characters that cannot be quoted safely; set TMPDIR to a plain path", dir)
	}
	for _, f := range files {
		mode := f.Mode
		if mode == 0 {
			mode = 0o600
		}
		if mode&0o077 != 0 || f.Path == "" || filepath.Base(f.Path) != f.Path || f.Path == "." || f.Path == ".." {
			os.RemoveAll(dir)
			return "", fmt.Errorf("plan file %q: must be a plain name with mode 0600 or narrower", f.Path)
		}
		fh, err := os.OpenFile(filepath.Join(dir, f.Path), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err == nil {
			_, err = fh.Write(f.Content)
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// substituteFiles replaces each placeholder of a file the plan writes with
// that file's path. Only those: a placeholder naming anything else (a path
// out of the directory, a file the plan never wrote) came from somewhere
// other than the builder, and is left for Run to refuse rather than turned
// into a path.
func substituteFiles(args []string, env map[string]string, dir string, files []PlanFile) ([]string, map[string]string) {
	refs := make(map[string]string, len(files)+1)
	refs[DirRef()] = dir
	for _, f := range files {
		refs[FileRef(f.Path)] = filepath.Join(dir, f.Path)
	}
	sub := func(s string) string {
		if !strings.Contains(s, filePrefix) {
			return s
		}
		for ref, path := range refs {
			s = strings.ReplaceAll(s, ref, path)
		}
		return s
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = sub(a)
	}
	outEnv := make(map[string]string, len(env))
	for k, v := range env {
		outEnv[k] = sub(v)
	}
	return out, outEnv
}

// mergeEnv is base with add applied on top (same key replaced), in a stable
// order.
func mergeEnv(base []string, add map[string]string) []string {
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := add[k]; over {
			continue
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+add[k])
	}
	return out
}
