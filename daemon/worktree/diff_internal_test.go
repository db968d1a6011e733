package worktree

import (
	"reflect"
	"testing"
)

func TestApplysComplaintsAreReadAsTheFilesTheyName(t *testing.T) {
	files := []FileChange{{Path: "a.txt"}, {Path: "a.txt.orig"}, {Path: "dir/we: ird.txt"}, {Path: "link/x"}, {Path: "fine.txt"}}
	stderr := "error: patch failed: a.txt.orig:1\n" +
		"error: a.txt.orig: patch does not apply\n" +
		"error: dir/we: ird.txt: already exists in working directory\n" +
		"error: affected file 'link/x' is beyond a symbolic link\n" +
		"warning: fine.txt has type 100644, expected 100755\n" +
		"error: a.txt.orig: patch does not apply\n"
	want := []Conflict{
		{Path: "a.txt.orig", Reason: "patch does not apply"},
		{Path: "dir/we: ird.txt", Reason: "already exists in working directory"},
		{Path: "link/x", Reason: "affected file 'link/x' is beyond a symbolic link"},
	}
	if got := conflicts(stderr, files); !reflect.DeepEqual(got, want) {
		t.Errorf("conflicts = %+v\nwant %+v", got, want)
	}
	if got := conflicts("fatal: corrupt patch at line 3\n", files); got != nil {
		t.Errorf("a complaint about no file gave %+v", got)
	}
}
