package proc

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCappedKeepsTheBoundedHeadAndTail(t *testing.T) {
	cases := []struct {
		name       string
		head, tail int
		writes     []string
		want       string
		dropped    int64
	}{
		{"under the bounds keeps everything", 4, 4, []string{"ab", "cd", "ef"}, "abcdef", 0},
		{"head only keeps the start", 3, 0, []string{"ab", "cdef"}, "abc", 3},
		{"tail only keeps the end", 0, 3, []string{"ab", "cd", "ef"}, "def", 3},
		{"one large write fills the tail from its end", 0, 3, []string{"abcdefgh"}, "fgh", 5},
		{"a large write after a kept tail replaces it", 0, 3, []string{"xy", "abcdefgh"}, "fgh", 7},
		{"head and tail drop the middle", 2, 2, []string{"ab", "cdefg", "hi"}, "abhi", 5},
		{"zero bounds keep nothing", 0, 0, []string{"abc"}, "", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Capped{Head: tc.head, Tail: tc.tail}
			total := 0
			for _, w := range tc.writes {
				n, err := c.Write([]byte(w))
				assert.NoError(t, err)
				assert.Equal(t, len(w), n, "a write is never short")
				total += n
			}
			assert.Equal(t, tc.want, c.String())
			assert.Equal(t, tc.dropped, c.Dropped())
			assert.Equal(t, int64(total), int64(len(c.Bytes()))+c.Dropped(), "every byte is kept or counted")
		})
	}
}

func TestCappedBytesIsACopy(t *testing.T) {
	c := &Capped{Head: 8}
	_, _ = c.Write([]byte("abc"))
	b := c.Bytes()
	b[0] = 'X'
	assert.Equal(t, "abc", c.String())
}

func TestCappedTakesConcurrentWritersWithinItsBound(t *testing.T) {
	c := &Capped{Head: 100, Tail: 100}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				_, _ = c.Write([]byte("0123456789"))
			}
		})
	}
	wg.Wait()
	assert.Len(t, c.Bytes(), 200)
	assert.Equal(t, int64(8*1000*10-200), c.Dropped())
	assert.True(t, strings.HasPrefix(c.String(), "0123456789"))
}
