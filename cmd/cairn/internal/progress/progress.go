// Package progress draws a one-line progress bar on a terminal: counts, bytes
// and rate, redrawn at most ten times a second. It is written by hand because
// it is forty lines and the libraries for it pull in terminal stacks cairn does
// not otherwise need. On anything but a terminal it draws nothing.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Bar is a progress bar; the zero of a nil *Bar does nothing.
type Bar struct {
	w     io.Writer
	label string
	total int64
	start time.Time

	mu   sync.Mutex
	last time.Time
	done int64

	counter bool  // counts items; done is items, bytes alongside
	bytes   int64 // with counter: bytes so far
}

// NewCounter returns a bar on w counting items out of total (0 if unknown),
// with bytes and rate alongside, or nil if w is not a terminal.
func NewCounter(w io.Writer, label string, total int64) *Bar {
	b := New(w, label, total)
	if b != nil {
		b.counter = true
	}
	return b
}

// SetCount records n items and their bytes done, and redraws if it is time.
func (b *Bar) SetCount(n, bytes int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.bytes = n, bytes
	if time.Since(b.last) < 100*time.Millisecond && n != b.total {
		return
	}
	b.last = time.Now()
	b.draw()
}

// New returns a bar on w for total bytes (0 if unknown), or nil if w is not a
// terminal.
func New(w io.Writer, label string, total int64) *Bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &Bar{w: w, label: label, total: total, start: time.Now()}
}

// Set records that n bytes are done and redraws if it is time.
func (b *Bar) Set(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = n
	if time.Since(b.last) < 100*time.Millisecond && n != b.total {
		return
	}
	b.last = time.Now()
	b.draw()
}

func (b *Bar) draw() {
	secs := max(time.Since(b.start).Seconds(), 1e-3)
	if b.counter {
		of := ""
		if b.total > 0 {
			of = fmt.Sprintf(" / %d (%3.0f%%)", b.total, 100*float64(b.done)/float64(b.total))
		}
		fmt.Fprintf(b.w, "\r%-9s %d%s objects, %s, %.0f objects/s, %s/s ", b.label, b.done, of, Bytes(b.bytes), float64(b.done)/secs, Bytes(int64(float64(b.bytes)/secs)))
		return
	}
	rate := float64(b.done) / secs
	if b.total > 0 {
		pct := float64(b.done) / float64(b.total)
		filled := int(pct * 30)
		fmt.Fprintf(b.w, "\r%s [%s%s] %3.0f%% %s / %s %s/s ", b.label, strings.Repeat("=", filled), strings.Repeat(" ", 30-filled),
			pct*100, Bytes(b.done), Bytes(b.total), Bytes(int64(rate)))
		return
	}
	fmt.Fprintf(b.w, "\r%s %s %s/s ", b.label, Bytes(b.done), Bytes(int64(rate)))
}

// Done ends the line.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw()
	fmt.Fprintln(b.w)
}

// Bytes formats n bytes for people.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
