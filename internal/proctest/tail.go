package proctest

import (
	"bytes"
	"strings"
	"sync"
)

// tailBuffer keeps the last max bytes written to it (amortised O(1) per
// byte: it compacts when it holds twice as much).
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	b       []byte
	dropped bool // older output was discarded
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) writeLine(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, line...)
	t.b = append(t.b, '\n')
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
		t.dropped = true
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	if t.dropped || len(b) < len(t.b) {
		// Start at a line boundary, unless one line fills everything.
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i+1 < len(b) {
			b = b[i+1:]
		}
	}
	return string(b)
}

// tail returns the last n lines, without the final newline.
func (t *tailBuffer) tail(n int) string {
	s := strings.TrimSuffix(t.String(), "\n")
	if n <= 0 || s == "" {
		return ""
	}
	end := len(s)
	for i := 0; i < n; i++ {
		j := strings.LastIndexByte(s[:end], '\n')
		if j < 0 {
			return s
		}
		end = j
	}
	return s[end+1:]
}
