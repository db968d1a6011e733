package detect

import (
	"debug/elf"
	"debug/macho"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// npmPackage says how an adapter's npm package lays out its command, so
// that detection can read the version the command would print from the
// package's own package.json instead of starting it. Most of these CLIs are
// Node programs: six Node start-ups at once on a two-core machine take
// several times as long as the slowest one alone, and a daemon that has just
// started should not spend seconds of CPU learning what a file says.
type npmPackage struct {
	// Name is the package's name in its package.json. Its "bin" entry for
	// the adapter's binary must be the command detection resolved, so a
	// package.json that merely sits nearby is never taken for the CLI's.
	Name string
	// Native: the bin entry is the native program itself, put there by the
	// package's install script over a placeholder (Claude Code). It must be
	// an executable for this machine; a placeholder left by a skipped
	// install script says nothing about a version.
	Native bool
	// VersionsDir: the CLI also has a native installer that links the
	// command to .../versions/<version> (Claude Code's), so a command
	// resolving there is named for the version it is.
	VersionsDir bool
	// Platform lists, for a launcher that runs a native binary from another
	// package, where that binary may be, in the order the launcher looks.
	// The first one present is the one it runs; when none is, the launcher
	// fails, and only running it says how. Nil: the launcher is the program.
	Platform func(goos, goarch string) []platformBinary
}

// platformBinary is one place a launcher may find its native binary.
type platformBinary struct {
	// Package is the directory under node_modules, found the way Node's
	// require.resolve finds it from the launcher; "" is the launcher's own
	// package. (An npm alias's directory is not its package.json name.)
	Package string
	// Binary is the program's path inside it.
	Binary string
	// Version: the CLI prints this package's version, not the launcher's
	// (Droid publishes its launcher and its binaries separately, and the
	// two need not match).
	Version bool
}

// installFacts is what detection can tell about an install from its files,
// without running it.
type installFacts struct {
	// files are the files an answer about the install depends on: the
	// resolved command, and the manifests and native binary its package
	// layout names. An answer learned by running the command holds while
	// every one of them is unchanged.
	files []string
	// version is the version read from the files; empty when they do not
	// say it with confidence (no known layout, or the layout is incomplete
	// so the command would fail), and only running the command tells.
	version string
}

// nodePlatform and nodeArch map Go's names onto Node's process.platform and
// process.arch, which npm platform packages are named after.
var (
	nodePlatform = map[string]string{"linux": "linux", "darwin": "darwin", "windows": "win32", "freebsd": "freebsd"}
	nodeArch     = map[string]string{"amd64": "x64", "arm64": "arm64", "386": "ia32", "arm": "arm"}
)

// manifestLimit bounds what detection reads of a package.json.
const manifestLimit = 1 << 20

// readInstall finds what the install at path says about itself. pathValue
// is the PATH the command would run with (a `#!/usr/bin/env node` script
// needs node on it).
func readInstall(desc Descriptor, path, pathValue, goos, goarch string) installFacts {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return installFacts{files: []string{path}}
	}
	facts := installFacts{files: []string{real}}
	if v, ok := versionsDirVersion(desc.Package, real); ok {
		if nativeFor(real, goos, goarch) {
			facts.version = v
		}
		return facts
	}
	pkg := desc.Package
	if pkg == nil {
		return facts
	}
	dir, m, ok := findPackage(real, pkg.Name, desc.Binary)
	if !ok {
		return facts
	}
	facts.files = append(facts.files, filepath.Join(dir, "package.json"))
	if !startable(real, pkg.Native, pathValue, goos, goarch) {
		return facts
	}
	version := m.Version
	if pkg.Platform != nil {
		found := false
		for _, pb := range pkg.Platform(goos, goarch) {
			pdir := dir
			if pb.Package != "" {
				if pdir = resolveNodeModule(filepath.Dir(real), pb.Package); pdir == "" {
					continue
				}
			}
			bin := filepath.Join(pdir, filepath.FromSlash(pb.Binary))
			if !executable(bin) || !nativeFor(bin, goos, goarch) {
				continue
			}
			facts.files = append(facts.files, bin)
			if pb.Version {
				pm, err := readManifest(filepath.Join(pdir, "package.json"))
				if err != nil {
					return facts
				}
				facts.files = append(facts.files, filepath.Join(pdir, "package.json"))
				version = pm.Version
			}
			found = true
			break
		}
		if !found {
			return facts
		}
	}
	facts.version = ParseVersion(version)
	return facts
}

// versionsDirVersion reads a native installer's layout (Claude Code's),
// where the command is a link to ~/.local/share/claude/versions/<version>:
// the file is named for the version it is.
func versionsDirVersion(pkg *npmPackage, real string) (string, bool) {
	if pkg == nil || !pkg.VersionsDir || filepath.Base(filepath.Dir(real)) != "versions" {
		return "", false
	}
	name := filepath.Base(real)
	v := ParseVersion(name)
	if v == "" || v != strings.TrimPrefix(name, "v") {
		return "", false
	}
	return v, true
}

// manifest is the part of a package.json detection reads.
type manifest struct {
	Name    string          `json:"name"`
	Version string          `json:"version"`
	Bin     json.RawMessage `json:"bin"`
}

func readManifest(path string) (manifest, error) {
	var m manifest
	f, err := os.Open(path)
	if err != nil {
		return m, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, manifestLimit))
	if err != nil {
		return m, err
	}
	err = json.Unmarshal(b, &m)
	return m, err
}

// binPath is the file a manifest's bin names for command, relative to the
// package; "" when it names none.
func (m manifest) binPath(command string) string {
	var one string
	if json.Unmarshal(m.Bin, &one) == nil {
		// A lone string is the command named after the package.
		if name := m.Name[strings.LastIndexByte(m.Name, '/')+1:]; name == command {
			return one
		}
		return ""
	}
	var many map[string]string
	if json.Unmarshal(m.Bin, &many) == nil {
		return many[command]
	}
	return ""
}

// findPackage walks up from the command to the package named name whose bin
// entry for command is that very file. A package.json of another name on
// the way (a build's {"type": "module"}) is passed over; the walk stops at
// node_modules, above which no file belongs to the package.
func findPackage(real, name, command string) (dir string, m manifest, ok bool) {
	dir = filepath.Dir(real)
	for i := 0; i < 6; i++ {
		if filepath.Base(dir) == "node_modules" {
			return "", manifest{}, false
		}
		if pm, err := readManifest(filepath.Join(dir, "package.json")); err == nil && pm.Name == name {
			bin := pm.binPath(command)
			if bin == "" {
				return "", manifest{}, false
			}
			target, err := filepath.EvalSymlinks(filepath.Join(dir, filepath.FromSlash(bin)))
			if err != nil || target != real {
				return "", manifest{}, false
			}
			return dir, pm, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", manifest{}, false
}

// resolveNodeModule finds package pkg from dir the way Node's module
// resolution does: dir/node_modules/pkg, then each parent's, skipping
// directories that are themselves node_modules. "" when it is nowhere.
func resolveNodeModule(dir, pkg string) string {
	for i := 0; i < 32; i++ {
		if filepath.Base(dir) != "node_modules" {
			cand := filepath.Join(dir, "node_modules", filepath.FromSlash(pkg))
			if fi, err := os.Stat(cand); err == nil && fi.IsDir() {
				return cand
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ""
}

// startable says whether the command would start: an executable file that
// is either a native program for this machine or a script whose interpreter
// is there (for `#!/usr/bin/env node`, node on pathValue). native demands
// the former.
func startable(path string, native bool, pathValue, goos, goarch string) bool {
	if !executable(path) {
		return false
	}
	words := readShebang(path)
	if len(words) == 0 {
		return nativeFor(path, goos, goarch)
	}
	if native {
		return false
	}
	if interp, ok := envInterpreter(path); ok {
		return onPath(interp, pathValue)
	}
	return filepath.IsAbs(words[0]) && executable(words[0])
}

// executable: a regular file this process may execute (mode bits, ACLs and
// a noexec mount all count).
func executable(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	return unix.Access(path, unix.X_OK) == nil
}

// nativeFor says whether path is a program for this OS and architecture,
// from its header: a binary for another architecture would fail to start
// with "exec format error", which only a probe would otherwise reveal.
func nativeFor(path, goos, goarch string) bool {
	switch goos {
	case "linux", "freebsd":
		f, err := elf.Open(path)
		if err != nil {
			return false
		}
		defer f.Close()
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM}[goarch]
		return want != 0 && f.Machine == want
	case "darwin":
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f, err := macho.Open(path); err == nil {
			defer f.Close()
			return want != 0 && f.Cpu == want
		}
		ff, err := macho.OpenFat(path)
		if err != nil {
			return false
		}
		defer ff.Close()
		for _, a := range ff.Arches {
			if a.Cpu == want {
				return true
			}
		}
	}
	return false
}
