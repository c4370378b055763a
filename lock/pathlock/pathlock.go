// Package pathlock is an in-process hierarchical lock over pseudo-folder paths
// ("/a/b"), for operations on key prefixes: a write of a path conflicts with any
// read or write of its lineage (its ancestors, itself, its descendants); reads
// share.
//
// It is multiple-granularity locking (Gray et al.) with the five modes IS, IX,
// S, SIX and X. A request is a set of read paths and a set of write paths; a
// read path needs S on itself and IS on each ancestor, a write path X on itself
// and IX on each ancestor; a node needed in several modes by one request takes
// their least upper bound. The four-mode scheme of the article this package
// started from (read-ancestor, write-ancestor, read, write) has no mode for a
// node that one request both reads and writes below ("read /a, write /a/b" needs
// S and IX on /a: SIX); picking either mode admits conflicting requests, as
// the exhaustive test in this package shows for every such pair.
//
// # Guarantees
//
//   - Two requests hold their locks at the same time only if no read or write
//     path of one is in the lineage of a write path of the other (checked
//     exhaustively against that rule for every pair of requests of up to two
//     read and two write paths over a small tree).
//   - Deadlock-free: a request takes its nodes one at a time in one global order
//     (ancestors first, then by path components), and waits in FIFO order per
//     node, so writers do not starve behind a stream of readers.
//   - A cancelled context withdraws the waiting request, releases what it held,
//     and lets the requests queued behind it proceed.
//   - Memory is proportional to the nodes held or waited on; an acquisition costs
//     O(depth × paths), whatever else is locked.
//
// These locks are in-process and cooperative: they order cairn's own
// operations; a writer that bypasses them is not stopped.
package pathlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Mode is a lock mode.
type Mode uint8

// The modes, weakest first.
const (
	IS  Mode = iota + 1 // intention to read below
	IX                  // intention to write below
	S                   // read this subtree
	SIX                 // read this subtree, and write below it
	X                   // write this subtree
)

func (m Mode) String() string { return [...]string{"none", "IS", "IX", "S", "SIX", "X"}[m] }

// compatible[a][b]: a holder in mode a admits another in mode b.
var compatible = [6][6]bool{
	IS:  {IS: true, IX: true, S: true, SIX: true},
	IX:  {IS: true, IX: true},
	S:   {IS: true, S: true},
	SIX: {IS: true},
}

// lub is the least upper bound of two modes in the lattice
// IS < IX, IS < S, IX < SIX, S < SIX, SIX < X.
func lub(a, b Mode) Mode {
	switch {
	case a == 0 || a == b:
		return b
	case b == 0:
		return a
	case a == X || b == X:
		return X
	case a == IS:
		return b
	case b == IS:
		return a
	}
	return SIX // the remaining pairs are {IX, S}, {IX, SIX}, {S, SIX}
}

// Request names the paths an operation reads and writes.
type Request struct {
	Read, Write []string
}

// ErrBadPath: a path is not absolute or has empty, "." or ".." components.
var ErrBadPath = errors.New("pathlock: invalid path")

// clean validates a path and returns its components ("/" has none).
func clean(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%w %q: paths are absolute, like /a/b", ErrBadPath, p)
	}
	if p == "/" {
		return nil, nil
	}
	parts := strings.Split(strings.TrimSuffix(p[1:], "/"), "/")
	for _, c := range parts {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("%w %q: empty, . or .. component", ErrBadPath, p)
		}
	}
	return parts, nil
}

type step struct {
	path string // "/", "/a", "/a/b": a prefix of the request's path string
	mode Mode
}

// cmpPath orders paths ancestors first, then by components: comparing with "/"
// as the smallest byte does exactly that ("/a" < "/a/b" < "/a-b").
func cmpPath(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			return -1
		}
		if cb == '/' {
			return 1
		}
		if ca < cb {
			return -1
		}
		return 1
	}
	return len(a) - len(b)
}

// plan computes the node modes of a request in acquisition order, without
// maps: requests name a handful of paths.
func plan(r Request) ([]step, error) {
	steps := make([]step, 0, 8*(len(r.Read)+len(r.Write)))
	add := func(p string, self, above Mode) error {
		if _, err := clean(p); err != nil {
			return err
		}
		p = strings.TrimSuffix(p, "/")
		if p == "" {
			p = "/"
		}
		merge := func(path string, m Mode) {
			for i := range steps {
				if steps[i].path == path {
					steps[i].mode = lubFn(steps[i].mode, m)
					return
				}
			}
			steps = append(steps, step{path, m})
		}
		if p == "/" {
			merge("/", self)
			return nil
		}
		merge("/", above)
		for i := 1; i < len(p); i++ {
			if p[i] == '/' {
				merge(p[:i], above)
			}
		}
		merge(p, self)
		return nil
	}
	for _, p := range r.Read {
		if err := add(p, S, IS); err != nil {
			return nil, err
		}
	}
	for _, p := range r.Write {
		if err := add(p, X, IX); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(steps, func(a, b step) int { return cmpPath(a.path, b.path) })
	return steps, nil
}

type waiter struct {
	mode    Mode
	ready   chan struct{}
	granted bool
}

type node struct {
	held  [6]int
	queue []*waiter
}

func (n *node) admits(m Mode) bool {
	for h := IS; h <= X; h++ {
		if n.held[h] > 0 && !compatible[h][m] {
			return false
		}
	}
	return true
}

// grant wakes waiters from the head of the queue while they are compatible.
func (n *node) grant() {
	for len(n.queue) > 0 && n.admits(n.queue[0].mode) {
		w := n.queue[0]
		n.queue = n.queue[1:]
		n.held[w.mode]++
		w.granted = true
		close(w.ready)
	}
}

// Locker is a hierarchical lock table. The zero value is ready to use.
type Locker struct {
	mu    sync.Mutex
	nodes map[string]*node
}

// Held is an acquired request; Release it once.
type Held struct {
	l     *Locker
	steps []step
	once  sync.Once
}

// Acquire blocks until every path of r is locked, or ctx is done.
func (l *Locker) Acquire(ctx context.Context, r Request) (*Held, error) {
	return l.acquire(ctx, r, true)
}

// TryAcquire locks r only if that is possible without waiting; ok reports it.
func (l *Locker) TryAcquire(r Request) (h *Held, ok bool, err error) {
	h, err = l.acquire(context.Background(), r, false)
	if errors.Is(err, errWouldBlock) {
		return nil, false, nil
	}
	return h, err == nil, err
}

var errWouldBlock = errors.New("would block")

func (l *Locker) acquire(ctx context.Context, r Request, wait bool) (*Held, error) {
	steps, err := plan(r)
	if err != nil {
		return nil, err
	}
	h := &Held{l: l, steps: steps}
	// Fast path: take every node that is free now under one hold of the mutex.
	l.mu.Lock()
	got := 0
	for got < len(steps) && l.tryNode(steps[got]) {
		got++
	}
	l.mu.Unlock()
	for ; got < len(steps); got++ {
		if err := l.lockNode(ctx, steps[got], wait); err != nil {
			l.release(steps[:got])
			return nil, err
		}
	}
	return h, nil
}

var nodePool = sync.Pool{New: func() any { return &node{} }}

// tryNode grants s if its node admits it without waiting; the caller holds l.mu.
func (l *Locker) tryNode(s step) bool {
	if l.nodes == nil {
		l.nodes = map[string]*node{}
	}
	n := l.nodes[s.path]
	if n == nil {
		n = nodePool.Get().(*node)
		l.nodes[s.path] = n
	}
	if len(n.queue) == 0 && n.admits(s.mode) {
		n.held[s.mode]++
		return true
	}
	l.gc(s.path, n)
	return false
}

func (l *Locker) lockNode(ctx context.Context, s step, wait bool) error {
	l.mu.Lock()
	if l.tryNode(s) {
		l.mu.Unlock()
		return nil
	}
	if !wait {
		l.mu.Unlock()
		return errWouldBlock
	}
	n := l.nodes[s.path]
	if n == nil {
		n = nodePool.Get().(*node)
		l.nodes[s.path] = n
	}
	w := &waiter{mode: s.mode, ready: make(chan struct{})}
	n.queue = append(n.queue, w)
	l.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted { // granted while we were giving up: give it back
		n.held[s.mode]--
	} else {
		n.queue = slices.DeleteFunc(n.queue, func(x *waiter) bool { return x == w })
	}
	n.grant() // whoever queued behind us may go now
	l.gc(s.path, n)
	return ctx.Err()
}

// gc drops a node nobody holds or waits on; the caller holds l.mu.
func (l *Locker) gc(path string, n *node) {
	if len(n.queue) > 0 {
		return
	}
	for _, c := range n.held {
		if c > 0 {
			return
		}
	}
	delete(l.nodes, path)
	*n = node{queue: n.queue[:0]}
	nodePool.Put(n)
}

func (l *Locker) release(steps []step) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		n := l.nodes[s.path]
		n.held[s.mode]--
		n.grant()
		l.gc(s.path, n)
	}
}

// Release unlocks everything h holds. Calling it again does nothing.
func (h *Held) Release() {
	h.once.Do(func() { h.l.release(h.steps) })
}

// Modes returns the mode taken on each node, in acquisition order (for
// diagnostics and tests).
func (h *Held) Modes() map[string]Mode {
	out := make(map[string]Mode, len(h.steps))
	for _, s := range h.steps {
		out[s.path] = s.mode
	}
	return out
}

// Nodes reports how many nodes the table holds (zero when nothing is locked).
func (l *Locker) Nodes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.nodes)
}

// lubFn is lub; a variable so a test can show that four modes are not enough.
var lubFn = lub

// Step is one node of a request's plan: the path and the mode it needs.
type Step struct {
	Path string
	Mode Mode
}

// Plan returns the nodes a request locks, with their modes, in the global
// acquisition order (ancestors first, then by components). The distributed
// tree lock uses the same plan.
func Plan(r Request) ([]Step, error) {
	steps, err := plan(r)
	if err != nil {
		return nil, err
	}
	out := make([]Step, len(steps))
	for i, s := range steps {
		out[i] = Step{s.path, s.mode}
	}
	return out, nil
}

// Compatible reports whether a holder in mode a admits another in mode b.
func Compatible(a, b Mode) bool { return compatible[a][b] }
