package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxPromptBytes bounds the prompt kept in a turn's commit message; the
// history keeps the whole prompt, the commit says where it was cut.
const MaxPromptBytes = 4 << 10

// maxSubjectRunes bounds the part of the prompt in the commit's subject.
const maxSubjectRunes = 60

// Turn is one turn's commit on the session's branch.
type Turn struct {
	Number int       `json:"number"`
	Commit string    `json:"commit"`
	Time   time.Time `json:"time"`
}

// Committed is what Commit did. Commit is empty when the turn changed
// nothing, and then there is no commit for it.
type Committed struct {
	Turn    int
	Commit  string
	Changes Changes
}

// Commit records what turn changed, after the turn ended: everything in
// the worktree (changed, deleted and new files; what .gitignore ignores
// stays out) becomes one commit on the session's branch, by card's
// identity, its message naming the turn and quoting the prompt. A turn that
// changed nothing makes no commit. Commits the agent made itself on the
// branch during the turn stay in the history below the turn's commit and
// count as the turn's; the agent's own branch switches are undone (HEAD is
// put back on the session's branch, the worktree's files kept as they are).
//
// Committing a turn again that is already the last one committed, with
// nothing changed since, answers that commit: a caller that did not
// record the answer before a restart may ask again. A turn number at or
// below the last one otherwise is refused (ErrTurnOrder).
//
// No hook runs (the commit is made with plumbing, and hooks are off for
// every call); nothing is signed.
func (m *Manager) Commit(ctx context.Context, wt Worktree, turn int, prompt string) (Committed, error) {
	if turn < 1 {
		return Committed{}, fmt.Errorf("turn %d: turns are numbered from 1: %w", turn, ErrTurnOrder)
	}
	unlock, config, err := m.begin(ctx, wt)
	if err != nil {
		return Committed{}, err
	}
	defer unlock()
	turns, err := m.turns(ctx, wt, config)
	if err != nil {
		return Committed{}, err
	}
	prev, prevTurn := wt.Base, 0
	if len(turns) > 0 {
		prev, prevTurn = turns[len(turns)-1].Commit, turns[len(turns)-1].Number
	}
	if turn < prevTurn {
		return Committed{}, fmt.Errorf("turn %d: turn %d is already committed: %w", turn, prevTurn, ErrTurnOrder)
	}
	if _, err := m.output(ctx, wt.call(config, "add", "--all")); err != nil {
		return Committed{}, err
	}
	tree, err := m.hash(ctx, wt.call(config, "write-tree"))
	if err != nil {
		return Committed{}, err
	}
	tip, err := m.hash(ctx, wt.call(config, "rev-parse", "--verify", "--end-of-options", wt.ref()+"^{commit}"))
	if err != nil {
		return Committed{}, err
	}
	prevTree, err := m.hash(ctx, wt.call(config, "rev-parse", "--verify", "--end-of-options", prev+"^{tree}"))
	if err != nil {
		return Committed{}, err
	}
	if tree == prevTree && tip == prev {
		if err := m.attachHead(ctx, wt, config); err != nil {
			return Committed{}, err
		}
		if turn == prevTurn {
			// Asked again for the turn just committed: its answer.
			from := wt.Base
			if len(turns) > 1 {
				from = turns[len(turns)-2].Commit
			}
			changes, err := m.changes(ctx, wt, config, from, prev)
			return Committed{Turn: turn, Commit: prev, Changes: changes}, err
		}
		return Committed{Turn: turn}, nil
	}
	if turn == prevTurn {
		return Committed{}, fmt.Errorf("turn %d is already committed and the worktree changed since: %w", turn, ErrTurnOrder)
	}
	c := wt.call(config, "commit-tree", "--no-gpg-sign", "-p", tip, tree)
	c.stdin = message(wt.SessionID, turn, prompt)
	commit, err := m.hash(ctx, c)
	if err != nil {
		return Committed{}, err
	}
	// The old value makes this a compare-and-swap: a branch that moved
	// under card fails the update rather than lose a commit.
	if _, err := m.output(ctx, wt.call(config, "update-ref", "-m", "card: turn "+strconv.Itoa(turn), wt.ref(), commit, tip)); err != nil {
		return Committed{}, err
	}
	if err := m.attachHead(ctx, wt, config); err != nil {
		return Committed{}, err
	}
	changes, err := m.changes(ctx, wt, config, prev, commit)
	if err != nil {
		return Committed{}, err
	}
	return Committed{Turn: turn, Commit: commit, Changes: changes}, nil
}

// attachHead puts the worktree's HEAD back on the session's branch when
// the agent moved it (a checkout of another branch, a detached HEAD). The
// index and files stay: the caller has just made the branch hold them.
func (m *Manager) attachHead(ctx context.Context, wt Worktree, config []kv) error {
	out, err := m.output(ctx, wt.call(config, "symbolic-ref", "--quiet", "HEAD"))
	if err == nil && strings.TrimSpace(string(out)) == wt.ref() {
		return nil
	}
	if err != nil && exitCode(err) != 1 {
		return err
	}
	_, err = m.output(ctx, wt.call(config, "symbolic-ref", "-m", "card: back on the session's branch", "HEAD", wt.ref()))
	return err
}

// Turns lists the session's turns that made a commit, oldest first, as git
// holds them: the commits on the session's branch since its base that card
// made, each naming its turn.
func (m *Manager) Turns(ctx context.Context, wt Worktree) ([]Turn, error) {
	unlock, config, err := m.begin(ctx, wt)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return m.turns(ctx, wt, config)
}

// begin takes the session's lock, checks wt and reads the repository's
// overrides.
func (m *Manager) begin(ctx context.Context, wt Worktree) (func(), []kv, error) {
	if err := m.checkShape(wt); err != nil {
		return nil, nil, err
	}
	unlock, err := m.locks.lock(ctx, "session\x00"+wt.SessionID)
	if err != nil {
		return nil, nil, err
	}
	if err := m.check(wt); err != nil {
		unlock()
		return nil, nil, err
	}
	config, err := m.repoConfig(ctx, wt.Path, wt.GitDir, wt.Path)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return unlock, config, nil
}

// turnSubject is the subject of a turn's commit: "card turn N" and, after a
// colon, the start of the prompt.
var turnSubject = regexp.MustCompile(`^card turn ([1-9][0-9]{0,8})(:|$)`)

// turns reads the turns from the branch: first parents from its tip down to
// the base, keeping the commits card made (its committer address and its
// subject); commits the agent made itself are part of the next card commit's
// turn.
func (m *Manager) turns(ctx context.Context, wt Worktree, config []kv) ([]Turn, error) {
	c := wt.call(config, "log", "--first-parent", "--no-show-signature", "--no-color", "-z",
		"--format=%H%x1f%ce%x1f%ct%x1f%s", "--end-of-options", wt.Base+".."+wt.ref(), "--")
	c.max = maxListOutput
	out, err := m.output(ctx, c)
	if err != nil {
		if exitCode(err) == 128 {
			if ok, _ := m.refExists(ctx, wt.call(config), wt.ref()); !ok {
				return nil, fmt.Errorf("session %s: its branch %s is gone: %w", wt.SessionID, wt.Branch, ErrNotFound)
			}
		}
		return nil, err
	}
	var turns []Turn
	for _, rec := range strings.Split(string(out), "\x00") {
		f := strings.SplitN(strings.TrimPrefix(rec, "\n"), "\x1f", 4)
		if len(f) != 4 || f[1] != m.cfg.Identity.Email {
			continue
		}
		sm := turnSubject.FindStringSubmatch(f[3])
		if sm == nil || !isHash(f[0]) {
			continue
		}
		n, _ := strconv.Atoi(sm[1])
		secs, _ := strconv.ParseInt(f[2], 10, 64)
		turns = append(turns, Turn{Number: n, Commit: f[0], Time: time.Unix(secs, 0).UTC()})
	}
	for i, j := 0, len(turns)-1; i < j; i, j = i+1, j-1 {
		turns[i], turns[j] = turns[j], turns[i]
	}
	return turns, nil
}

// Rewound is what Rewind did.
type Rewound struct {
	// Turn is the turn asked for; Commit what the worktree holds now: the
	// commit of that turn or of the last turn before it that changed
	// something, or the base.
	Turn   int
	Commit string
	// Dropped are the later turns' commits, no longer on the branch. They
	// stay in the branch's reflog (`git reflog card/<id>`) until the
	// session is discarded or a gc expires them (30 days by default,
	// gc.reflogExpireUnreachable); card itself no longer shows them.
	Dropped []Turn
}

// Rewind resets the worktree and the session's branch to the state after
// turn (0: the base): the branch points at that turn's commit again, every
// tracked file is as that commit has it, and files the later turns created
// are removed (untracked ones included). Files .gitignore ignores are left
// alone: no turn's commit holds them, so no turn's state says what they
// were (a dependency directory a turn installed stays). The caller makes
// sure no turn is running.
func (m *Manager) Rewind(ctx context.Context, wt Worktree, turn int) (Rewound, error) {
	if turn < 0 {
		return Rewound{}, fmt.Errorf("turn %d: %w", turn, ErrNoTurn)
	}
	unlock, config, err := m.begin(ctx, wt)
	if err != nil {
		return Rewound{}, err
	}
	defer unlock()
	turns, err := m.turns(ctx, wt, config)
	if err != nil {
		return Rewound{}, err
	}
	target, keep := wt.Base, 0
	for i, t := range turns {
		if t.Number <= turn {
			target, keep = t.Commit, i+1
		}
	}
	if err := m.attachHead(ctx, wt, config); err != nil {
		return Rewound{}, err
	}
	if _, err := m.output(ctx, wt.call(config, "reset", "--hard", "--quiet", "--no-recurse-submodules", target)); err != nil {
		return Rewound{}, err
	}
	// -ff: a directory holding a repository the agent made goes too.
	if _, err := m.output(ctx, wt.call(config, "clean", "-ffd", "--quiet")); err != nil {
		return Rewound{}, err
	}
	return Rewound{Turn: turn, Commit: target, Dropped: append([]Turn(nil), turns[keep:]...)}, nil
}

// hash runs c and returns the one object name it prints.
func (m *Manager) hash(ctx context.Context, c call) (string, error) {
	out, err := m.output(ctx, c)
	if err != nil {
		return "", err
	}
	h := strings.TrimSpace(string(out))
	if !isHash(h) {
		return "", &GitError{Args: c.args, Dir: c.dir, ExitCode: 0, Stderr: fmt.Sprintf("printed %q, not an object name", h),
			Err: errors.New("unexpected output")}
	}
	return h, nil
}

// message is a turn's commit message: a subject naming the turn with the
// start of the prompt, the prompt (at most MaxPromptBytes, control
// characters dropped), and trailers naming the session and the turn.
func message(session string, turn int, prompt string) []byte {
	prompt = cleanText(prompt)
	var b bytes.Buffer
	fmt.Fprintf(&b, "card turn %d", turn)
	if first := strings.TrimSpace(strings.SplitN(prompt, "\n", 2)[0]); first != "" {
		if utf8.RuneCountInString(first) > maxSubjectRunes {
			first = string([]rune(first)[:maxSubjectRunes-1]) + "…"
		}
		b.WriteString(": " + first)
	}
	b.WriteString("\n\n")
	if body := strings.TrimSpace(prompt); body != "" {
		if len(body) > MaxPromptBytes {
			cut := MaxPromptBytes
			for cut > 0 && !utf8.RuneStart(body[cut]) {
				cut--
			}
			body = fmt.Sprintf("%s\n[prompt cut at %d of its %d bytes]", body[:cut], cut, len(body))
		}
		b.WriteString(body + "\n\n")
	}
	fmt.Fprintf(&b, "Card-Session: %s\nCard-Turn: %d\n", session, turn)
	return b.Bytes()
}

// cleanText is s as valid UTF-8 with only newlines and tabs for control
// characters: a commit message is read in terminals.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return '\n'
		case unicode.IsControl(r):
			return -1
		}
		return r
	}, s)
}
