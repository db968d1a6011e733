package proc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
)

// WriteExecutable writes content to path as an executable (0755) without
// this process ever holding a descriptor open for writing on it: a child
// shell writes a temporary file beside it and renames it into place.
//
// A process that writes a script and then runs it races its own forks: a
// fork taken by another goroutine while the file is open for writing holds
// that descriptor until its exec, and the kernel refuses to run a file open
// for writing anywhere (ETXTBSY, "text file busy"). Tests that write fake
// agents while daemons in the same process start agents met exactly that.
func WriteExecutable(path string, content []byte) error {
	cmd := exec.Command("/bin/sh", "-c", `tmp="$1.tmp.$$" && cat > "$tmp" && chmod 755 "$tmp" && mv -f "$tmp" "$1"`, "sh", path)
	cmd.Stdin = bytes.NewReader(content)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("write executable %s: %w: %s", path, err, bytes.TrimSpace(stderr.Bytes()))
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("write executable %s: %w", path, err)
	}
	return nil
}
