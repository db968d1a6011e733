package spawn

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// A temporary directory another user could rename entries in is refused
// before card makes anything there: writable by others without the sticky
// bit, or another user's own. /tmp's usual 1777 and a private 0700 are
// taken.
func TestAPrivateDirIsRefusedInATempDirOthersCanSwapItsEntriesIn(t *testing.T) {
	cases := []struct {
		name   string
		mode   os.FileMode
		owner  int // -1: this user
		refuse string
	}{
		{"private", 0o700, -1, ""},
		{"shared with the sticky bit", 0o777 | os.ModeSticky, -1, ""},
		{"world-writable without the sticky bit", 0o777, -1, "no sticky bit"},
		{"group-writable without the sticky bit", 0o770, -1, "no sticky bit"},
		{"another user's", 0o755, 4242, "belongs to another user"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "tmp")
			require.NoError(t, os.Mkdir(parent, 0o700))
			require.NoError(t, os.Chmod(parent, c.mode))
			if c.owner >= 0 {
				if os.Geteuid() != 0 {
					t.Skip("only root can give a directory to another user")
				}
				require.NoError(t, os.Chown(parent, c.owner, c.owner))
			}
			d, err := NewPrivateDir(parent)
			if c.refuse == "" {
				require.NoError(t, err)
				st, err := os.Stat(d.Path)
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
				d.Remove()
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.refuse)
			assert.Contains(t, err.Error(), "TMPDIR")
			left, _ := filepath.Glob(filepath.Join(parent, PrivateDirPrefix+"*"))
			assert.Empty(t, left, "nothing was made there")
		})
	}

	// A run with private files in such a directory fails to start, saying why.
	parent := filepath.Join(t.TempDir(), "shared")
	require.NoError(t, os.Mkdir(parent, 0o700))
	require.NoError(t, os.Chmod(parent, 0o777))
	plan := shPlan(t, `true`)
	plan.Files = []PlanFile{{Path: "system-prompt.md", Content: []byte("x")}}
	_, err := Run(context.Background(), RunSpec{Plan: plan, TempDir: parent})
	e := runErr(t, err)
	assert.Equal(t, api.KindSpawn, e.Kind)
	assert.Contains(t, e.Message, "no sticky bit")
}

// The sweep at start takes what a dead card left and nothing a live
// process holds: a locked directory stays however old, a fresh unlocked
// one stays (it may be about to be locked), an earlier card's unmarked one
// stays for a day, and another user's stays always.
func TestTheSweepTakesOnlyWhatNoLiveCardHolds(t *testing.T) {
	parent := t.TempDir()
	now := time.Now()
	age := func(dir string, d time.Duration) {
		require.NoError(t, os.Chtimes(dir, now.Add(-d), now.Add(-d)))
	}
	live, err := NewPrivateDir(parent)
	require.NoError(t, err)
	defer live.Remove()
	age(live.Path, 48*time.Hour)

	dead := func(d time.Duration) string { // a crashed card's: marked, its lock gone with it
		pd, err := NewPrivateDir(parent)
		require.NoError(t, err)
		pd.lock.Close()
		age(pd.Path, d)
		return pd.Path
	}
	deadOld, deadFresh := dead(2*time.Minute), dead(10*time.Second)
	unmarked := func(d time.Duration) string { // an earlier card's
		dir, err := os.MkdirTemp(parent, PrivateDirPrefix)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "system-prompt.md"), []byte("x"), 0o600))
		age(dir, d)
		return dir
	}
	unmarkedHour, unmarkedTwoDays := unmarked(time.Hour), unmarked(48*time.Hour)
	notOurs := filepath.Join(parent, "unrelated-dir")
	require.NoError(t, os.Mkdir(notOurs, 0o700))
	age(notOurs, 48*time.Hour)
	var othersDir string
	if os.Geteuid() == 0 {
		othersDir = dead(time.Hour)
		require.NoError(t, os.Chown(othersDir, 4242, 4242))
	}

	removed, err := SweepPrivateDirs(parent, now)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{deadOld, unmarkedTwoDays}, removed)
	for _, kept := range []string{live.Path, deadFresh, unmarkedHour, notOurs, othersDir} {
		if kept == "" {
			continue
		}
		_, err := os.Stat(kept)
		assert.NoError(t, err, "%s was swept", kept)
	}
	for _, gone := range removed {
		_, err := os.Stat(gone)
		assert.True(t, os.IsNotExist(err), "%s is still there", gone)
	}
	// The live directory's lock is still its owner's.
	f, err := os.Open(live.Path)
	require.NoError(t, err)
	defer f.Close()
	assert.ErrorIs(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK)
}

// A file-backed image reaches Claude's stdin as exactly the bytes
// json.Marshal would have made of it in memory, streamed from the file.
func TestAClaudeImageStreamedFromItsFileIsTheSameMessage(t *testing.T) {
	dir := t.TempDir()
	big := append(append([]byte{}, pngBytes...), bytes.Repeat([]byte("0123456789"), 100_000)...)
	path := filepath.Join(dir, "a.png")
	require.NoError(t, os.WriteFile(path, big, 0o600))
	fromFile := Image{MIME: "image/png", File: &ImageFile{Path: path, Size: int64(len(big))}}
	inMem := Image{MIME: "image/png", Data: big}

	var streamed bytes.Buffer
	require.NoError(t, writeClaudeMessage(&streamed, "what is it?", []Image{fromFile, {MIME: "image/jpeg", Data: jpegBytes}}))
	var want bytes.Buffer
	want.WriteString(`{"type":"user","message":{"role":"user","content":[`)
	for _, img := range []Image{inMem, {MIME: "image/jpeg", Data: jpegBytes}} {
		var block claudeImageBlock
		block.Type, block.Source.Type, block.Source.MediaType, block.Source.Data = "image", "base64", img.MIME, img.Data
		b, err := json.Marshal(block)
		require.NoError(t, err)
		want.Write(b)
		want.WriteByte(',')
	}
	b, err := json.Marshal(claudeTextBlock{Type: "text", Text: "what is it?"})
	require.NoError(t, err)
	want.Write(b)
	want.WriteString("]}}\n")
	assert.Equal(t, want.String(), streamed.String())
}

// Codex, Copilot, Pi and Gemini get a file-backed image as a private file
// of the run: the same bytes, 0600, and the plan counts it as delivered.
func TestAFileBackedImageIsLinkedIntoTheRunsPrivateDirectory(t *testing.T) {
	src := filepath.Join(t.TempDir(), "attachment-1.png")
	require.NoError(t, os.WriteFile(src, pngBytes, 0o600))
	img := Image{MIME: "image/png", File: &ImageFile{Path: src, Size: int64(len(pngBytes))}}
	plan, err := Build("codex", Request{Adapter: "codex", Images: []Image{img}})
	require.NoError(t, err, "the plan delivers the file-backed image")
	require.Len(t, plan.Files, 1)
	assert.Same(t, img.File, plan.Files[0].From)

	pd, err := writePrivateFiles(t.TempDir(), plan.Files)
	require.NoError(t, err)
	defer pd.Remove()
	got, err := os.ReadFile(filepath.Join(pd.Path, plan.Files[0].Path))
	require.NoError(t, err)
	assert.Equal(t, pngBytes, got)
	st, err := os.Stat(filepath.Join(pd.Path, plan.Files[0].Path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

// A run of a session protocol waits for room in the image budget before it
// reads its images into memory, and a wait that outlasts the run's
// deadline ends the run naming the setting.
func TestTheImageBudgetHoldsBackWhatDoesNotFit(t *testing.T) {
	b := NewBudget(100)
	ctx := context.Background()
	r1, err := b.Hold(ctx, 60)
	require.NoError(t, err)
	assert.Equal(t, int64(60), b.InUse())

	got := make(chan struct{})
	go func() {
		r2, err := b.Hold(ctx, 60)
		if err == nil {
			close(got)
			r2()
		}
	}()
	select {
	case <-got:
		t.Fatal("60 + 60 bytes fit in a budget of 100")
	case <-time.After(100 * time.Millisecond):
	}
	r1()
	r1() // twice is once
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was never woken")
	}
	big, err := b.Hold(ctx, 1000)
	require.NoError(t, err, "more than the whole budget waits for all of it")
	assert.Equal(t, int64(100), b.InUse())
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = b.Hold(short, 1)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	big()
	assert.Zero(t, b.InUse())

	// Through Run: a Session plan with an image, the budget full.
	hold, err := b.Hold(ctx, 100)
	require.NoError(t, err)
	defer hold()
	src := filepath.Join(t.TempDir(), "a.png")
	require.NoError(t, os.WriteFile(src, pngBytes, 0o600))
	plan := shPlan(t, `cat`)
	plan.Session = &SessionPlan{Protocol: ProtocolACP, Adapter: "gemini"}
	plan.Input = Input{Images: []Image{{MIME: "image/png", File: &ImageFile{Path: src, Size: int64(len(pngBytes))}}}}
	runCtx, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	_, err = Run(runCtx, RunSpec{Plan: plan, ImageMemory: b})
	e := runErr(t, err)
	assert.Equal(t, api.KindTimeout, e.Kind)
	assert.True(t, strings.Contains(e.Message, "max_bytes_in_flight"), e.Message)
}
