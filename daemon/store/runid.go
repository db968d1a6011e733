package store

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"sync"
	"time"
)

// crockford is Crockford's base32 alphabet. It is in ascending byte order,
// so fixed-length encodings sort like the bytes they encode.
var crockford = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// idGenerator makes ULID-like ids that increase strictly within a process:
// in the same (or an earlier, if the clock stepped back) millisecond, the
// random part of the previous id is incremented instead of redrawn.
type idGenerator struct {
	mu   sync.Mutex
	ms   uint64
	rand [10]byte
}

func (g *idGenerator) next(now time.Time) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := uint64(now.UnixMilli())
	if t > g.ms {
		g.ms = t
		_, _ = rand.Read(g.rand[:]) // never fails since Go 1.24
	} else if !increment(g.rand[:]) {
		g.ms++ // 2^80 ids in one millisecond: borrow the next one
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], g.ms<<16)
	copy(b[6:], g.rand[:])
	return "run_" + crockford.EncodeToString(b[:])
}

// increment adds one to a big-endian number, reporting false on overflow.
func increment(b []byte) bool {
	for i := len(b) - 1; i >= 0; i-- {
		b[i]++
		if b[i] != 0 {
			return true
		}
	}
	return false
}
