package plan

import (
	"os"

	"golang.org/x/sys/unix"
)

// kernelFSNames are the Linux file systems whose "regular" files are made
// up by the kernel as they are read: none holds an image, and a read of
// one can wait for ever.
var kernelFSNames = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "procfs",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroupfs",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	unix.DEVPTS_SUPER_MAGIC:  "devpts",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.BPF_FS_MAGIC:        "bpf",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.FUTEXFS_SUPER_MAGIC: "futexfs",
	unix.SELINUX_MAGIC:       "selinuxfs",
	unix.SMACK_MAGIC:         "smackfs",
	unix.HUGETLBFS_MAGIC:     "hugetlbfs",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
	unix.NSFS_MAGIC:          "nsfs",
	unix.DEVMEM_MAGIC:        "devmem",
	unix.ANON_INODE_FS_MAGIC: "anon_inodefs",
	unix.SOCKFS_MAGIC:        "sockfs",
	unix.PIPEFS_MAGIC:        "pipefs",
	unix.AUTOFS_SUPER_MAGIC:  "autofs",
}

// kernelFS names the kernel file system f is on, or "".
func kernelFS(f *os.File) string {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return ""
	}
	return kernelFSNames[int64(st.Type)]
}
