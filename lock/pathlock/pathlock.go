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

// node is one path in a trie: a lookup walks only the small child maps along
// its own path, so its cost does not grow with how many other paths are held.
type node struct {
	name   string
	parent *node
	// kids holds the children while there are few (a scan beats hashing and
	// keeps the heap small); wide switches to a map past wideAt children.
	kids  []*node
	wide  map[string]*node
	held  [6]int
	queue []*waiter
}

const wideAt = 16

func (n *node) child(name string) *node {
	if n.wide != nil {
		return n.wide[name]
	}
	for _, k := range n.kids {
		if k.name == name {
			return k
		}
	}
	return nil
}

func (n *node) addChild(c *node) {
	if n.wide == nil && len(n.kids) < wideAt {
		n.kids = append(n.kids, c)
		return
	}
	if n.wide == nil {
		n.wide = make(map[string]*node, 2*wideAt)
		for _, k := range n.kids {
			n.wide[k.name] = k
		}
		n.kids = n.kids[:0]
	}
	n.wide[c.name] = c
}

func (n *node) removeChild(c *node) {
	if n.wide != nil {
		delete(n.wide, c.name)
		return
	}
	for i, k := range n.kids {
		if k == c {
			last := len(n.kids) - 1
			n.kids[i], n.kids[last] = n.kids[last], nil
			n.kids = n.kids[:last]
			return
		}
	}
}

func (n *node) hasChildren() bool { return len(n.kids) > 0 || len(n.wide) > 0 }

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
	root  *node
	count int // nodes in the trie besides the root
}

// Held is an acquired request; Release it once.
type Held struct {
	l     *Locker
	steps []step
	nodes []*node // resolved nodes of steps
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
	h := &Held{l: l, steps: steps, nodes: make([]*node, len(steps))}
	// Fast path: take every node that is free now under one hold of the mutex.
	l.mu.Lock()
	got := 0
	for got < len(steps) && l.tryNode(h, got) {
		got++
	}
	l.drop(h, got) // not granted: do not keep a pointer across the unlock
	l.mu.Unlock()
	for ; got < len(steps); got++ {
		if err := l.lockNode(ctx, h, got, wait); err != nil {
			l.release(h, got)
			return nil, err
		}
	}
	return h, nil
}

// drop forgets the node of steps[i], which this request does not hold, and
// collects it if it is unused: once l.mu is released another request may
// collect and recycle it. The caller holds l.mu.
func (l *Locker) drop(h *Held, i int) {
	if i < len(h.nodes) && h.nodes[i] != nil {
		l.gc(h.nodes[i])
		h.nodes[i] = nil
	}
}

// resolve finds or creates the node of steps[i]; its parent is an earlier step
// (plans hold every ancestor, ancestors first). The caller holds l.mu.
func (l *Locker) resolve(h *Held, i int) *node {
	if n := h.nodes[i]; n != nil {
		return n
	}
	p := h.steps[i].path
	if p == "/" {
		if l.root == nil {
			l.root = &node{name: "/"}
		}
		h.nodes[i] = l.root
		return l.root
	}
	cut := strings.LastIndexByte(p, '/')
	parentPath := p[:max(cut, 1)]
	var parent *node
	for j := i - 1; j >= 0; j-- {
		if h.steps[j].path == parentPath {
			parent = l.resolve(h, j)
			break
		}
	}
	name := p[cut+1:]
	n := parent.child(name)
	if n == nil {
		n = nodePool.Get().(*node)
		n.name, n.parent = name, parent
		parent.addChild(n)
		l.count++
	}
	h.nodes[i] = n
	return n
}

var nodePool = sync.Pool{New: func() any { return &node{} }}

// tryNode grants steps[i] if its node admits it without waiting; the caller
// holds l.mu. A node not yet granted is looked up afresh every time.
func (l *Locker) tryNode(h *Held, i int) bool {
	h.nodes[i] = nil
	n := l.resolve(h, i)
	if m := h.steps[i].mode; len(n.queue) == 0 && n.admits(m) {
		n.held[m]++
		return true
	}
	return false
}

func (l *Locker) lockNode(ctx context.Context, h *Held, i int, wait bool) error {
	l.mu.Lock()
	if l.tryNode(h, i) {
		l.mu.Unlock()
		return nil
	}
	if !wait {
		l.drop(h, i)
		l.mu.Unlock()
		return errWouldBlock
	}
	n, mode := h.nodes[i], h.steps[i].mode
	w := &waiter{mode: mode, ready: make(chan struct{})}
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
		n.held[mode]--
	} else {
		n.queue = slices.DeleteFunc(n.queue, func(x *waiter) bool { return x == w })
	}
	n.grant() // whoever queued behind us may go now
	l.drop(h, i)
	return ctx.Err()
}

// gc drops n, and then its ancestors, while nobody holds, waits on, or has a
// child below them; the caller holds l.mu.
func (l *Locker) gc(n *node) {
	for n != nil && n.parent != nil && len(n.queue) == 0 && !n.hasChildren() && n.held == [6]int{} {
		p := n.parent
		p.removeChild(n)
		l.count--
		*n = node{queue: n.queue[:0], kids: n.kids[:0]}
		nodePool.Put(n)
		n = p
	}
}

// release gives back the first k steps of h (the ones it holds), deepest
// first, and collects the nodes left unused.
func (l *Locker) release(h *Held, k int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := k - 1; i >= 0; i-- {
		n := h.nodes[i]
		n.held[h.steps[i].mode]--
		n.grant()
	}
	for i := k - 1; i >= 0; i-- {
		l.gc(h.nodes[i])
	}
}

// Release unlocks everything h holds. Calling it again does nothing.
func (h *Held) Release() {
	h.once.Do(func() { h.l.release(h, len(h.steps)) })
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

// Nodes reports how many nodes the table holds besides the root (zero when
// nothing is locked).
func (l *Locker) Nodes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
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
