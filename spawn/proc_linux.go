//go:build linux

package spawn

import "github.com/card-dev/card/internal/proc"

// GroupMembers lists the live (not zombie) processes of process group pgid;
// ok is false when /proc cannot be read.
//
// Deprecated: use proc.GroupMembers; this remains until the daemon's
// leftover cleanup calls proc.EndTaggedGroup itself.
func GroupMembers(pgid int) (pids []int, ok bool) { return proc.GroupMembers(pgid) }
