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
	rate := float64(b.done) / max(time.Since(b.start).Seconds(), 1e-3)
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
