package proc

import (
	"io"
	"sync"
)

// Capped is an io.Writer that keeps at most Head bytes from the start of what
// is written to it and at most Tail bytes from the end, and counts the bytes
// it dropped in between. A probe's answer is at its start (Head); an error
// message is at the end of stderr (Tail).
//
// It never fails or shortens a write: a child whose output pipe fails would
// die of SIGPIPE merely for being chatty. It is safe for concurrent use, so a
// child's stdout and stderr may share one.
type Capped struct {
	// Head and Tail are the bounds; set them before the first Write.
	Head, Tail int

	mu      sync.Mutex
	head    []byte
	tail    []byte
	dropped int64
}

var _ io.Writer = (*Capped)(nil)

func (c *Capped) Write(p []byte) (int, error) {
	n := len(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.Head - len(c.head); room > 0 {
		take := min(room, len(p))
		c.head = append(c.head, p[:take]...)
		p = p[take:]
	}
	switch {
	case len(p) == 0:
	case c.Tail <= 0:
		c.dropped += int64(len(p))
	case len(p) >= c.Tail:
		// p alone fills the tail: what was kept there and the start of p go.
		c.dropped += int64(len(c.tail) + len(p) - c.Tail)
		c.tail = append(c.tail[:0], p[len(p)-c.Tail:]...)
	default:
		c.tail = append(c.tail, p...)
		if over := len(c.tail) - c.Tail; over > 0 {
			c.dropped += int64(over)
			c.tail = append(c.tail[:0], c.tail[over:]...)
		}
	}
	return n, nil
}

// Bytes is the kept head followed by the kept tail, as a copy.
func (c *Capped) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]byte, 0, len(c.head)+len(c.tail))
	return append(append(out, c.head...), c.tail...)
}

func (c *Capped) String() string { return string(c.Bytes()) }

// Dropped is how many written bytes were not kept.
func (c *Capped) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}
