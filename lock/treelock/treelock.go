// Package treelock is the hierarchical path lock of package pathlock across
// processes and machines, stored on an objstore.Store that enforces
// conditional writes: the same requests (read and write sets of pseudo-folder
// paths), the same five modes and the same global acquisition order.
//
// # Design
//
// Every path a request touches has a node document (package docs, so every
// change is a compare-and-swap) holding the entries that hold it and a FIFO
// queue of entries waiting. An entry names a session: one document per process,
// renewed every TTL/3, that all of the process's entries reference, so a
// process renews one object however many nodes it holds. A request is granted
// on a node when its mode is compatible with every live holder and no live
// entry is ahead of it in the queue; it takes its nodes one at a time in the
// global order, so no two requests wait on each other in a cycle.
//
// A session is dead when an observer has watched its document keep one
// revision for a whole TTL on the observer's own monotonic clock; its entries
// are then pruned by whoever next updates their nodes. Its owner, for its
// part, stops at its own deadline (TTL after the start of its last successful
// renewal) and never renews again: Done() closes on every Held. So a crashed
// holder's locks are released after one TTL, and no clocks of two machines are
// compared.
//
// # Limits
//
//   - A request costs about two requests to the store (GET and conditional PUT)
//     per node to acquire and again to release; a write of /a/b/c touches four
//     nodes. Node documents stay in the store after use (MinIO does not enforce
//     conditional DELETE, so deleting one could lose a concurrent entry).
//   - Waiters poll (Options.Poll); a grant is seen within one poll interval.
//   - Cooperative: writers that bypass the lock are not stopped, and a holder
//     paused past its TTL can act after losing its locks. Check Held.Done
//     before acting, and fence what you write.
//
// # Late-landing writes
//
// A write the client gave up on (a reset, a timeout, a 502/504) may still be
// applied by the store later. Every write here is a compare-and-swap of a
// document (package docs), so a late one lands only while the ETag it was
// conditional on is current, and never once the document has moved on:
//
//   - A late step (joining a node's holders or queue) could land after the
//     request gave up and withdrew. So a withdrawal always writes the node —
//     creating it if absent — which moves the ETag past every earlier write
//     of the request; one that cannot be confirmed is retried on every
//     renewal while the session lives (after that, others prune the
//     session's entries anyway). A step whose write failed ambiguously is
//     asked again (it finds its own entry if the first landed) a few times
//     before the request gives up.
//   - A late session renewal can only make a session look alive for up to
//     one more TTL (its owner's deadline counts only confirmed renewals), so
//     it delays others and never lets two conflicting holders act.
//   - A late session create whose Acquire failed leaves an unused session
//     document: no entry names it.
package treelock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/docs"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/objstore"
)

// Request is a set of read paths and write paths, as in package pathlock.
type Request = pathlock.Request

// Errors.
var (
	ErrNotAcquired = errors.New("treelock: not acquired")
	ErrSessionLost = errors.New("treelock: session lost (not renewed in time); its locks may be held by others now")
)

// Options configure a Manager. A nil *Options means defaults.
type Options struct {
	// Prefix under which node and session documents live. Default: "cairn-locks/tree/".
	Prefix string
	// TTL of the session. Default: 30s.
	TTL time.Duration
	// Poll is how often a waiter re-reads a node. Default: TTL/30, at least 10ms.
	Poll time.Duration
	// Now is the monotonic clock (tests). Default: time.Now.
	Now func() time.Time
}

type entry struct {
	Session string        `json:"s"`
	Req     string        `json:"r"`
	Mode    pathlock.Mode `json:"m"`
}

type nodeDoc struct {
	Holders []entry `json:"holders,omitempty"`
	Queue   []entry `json:"queue,omitempty"`
	// Seals counts withdrawals: each one writes the node (creating it if
	// absent) so that its ETag moves on, and a late-landing write of the
	// withdrawn request, conditional on an earlier ETag, can never land.
	Seals int64 `json:"seals,omitempty"`
}

type sessionDoc struct {
	Holder   string `json:"holder"`
	TTLms    int64  `json:"ttl_ms"` // judged by the session's own TTL, not the observer's
	Renewals int64  `json:"renewals"`
}

// Manager takes tree locks for one process. Close it to end its session.
type Manager struct {
	opts  Options
	nodes docs.Doc[nodeDoc]
	sess  docs.Doc[sessionDoc]

	mu       sync.Mutex
	session  string // current session id ("" until first use)
	deadline time.Time
	lost     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
	watch    map[string]observation
	// pending are withdrawals not yet confirmed (node key → request ids):
	// retried on every renewal while the session lives, so an entry of ours
	// that a late-landing write put in a node is removed.
	pending map[string]map[string]bool
}

type observation struct {
	rev   int64
	since time.Time
}

// New returns a Manager on s.
func New(s *objstore.Store, opts *Options) *Manager {
	m := &Manager{watch: map[string]observation{}, pending: map[string]map[string]bool{}}
	if opts != nil {
		m.opts = *opts
	}
	if m.opts.Prefix == "" {
		m.opts.Prefix = "cairn-locks/tree/"
	}
	if m.opts.TTL <= 0 {
		m.opts.TTL = 30 * time.Second
	}
	if m.opts.Poll <= 0 {
		m.opts.Poll = max(m.opts.TTL/30, 10*time.Millisecond)
	}
	if m.opts.Now == nil {
		m.opts.Now = time.Now
	}
	d := docs.New(s, &docs.Options{NoGroupCommit: true})
	m.nodes, m.sess = docs.Typed[nodeDoc](d), docs.Typed[sessionDoc](d)
	return m
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (m *Manager) nodeKey(path string) string {
	return m.opts.Prefix + "nodes/" + url.PathEscape(path) // one flat segment per path
}

func (m *Manager) sessionKey(id string) string { return m.opts.Prefix + "sessions/" + id }

// ensureSession starts (or returns) this process's live session.
func (m *Manager) ensureSession(ctx context.Context) (string, <-chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session != "" && m.opts.Now().Before(m.deadline) {
		return m.session, m.lost, nil
	}
	id := randomID()
	start := m.opts.Now()
	host, _ := os.Hostname()
	if _, err := m.sess.Create(ctx, m.sessionKey(id), sessionDoc{Holder: fmt.Sprintf("%s/%d", host, os.Getpid()), TTLms: m.opts.TTL.Milliseconds()}); err != nil {
		return "", nil, err
	}
	m.session, m.deadline = id, start.Add(m.opts.TTL)
	m.lost, m.stop, m.stopped = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go m.renew(id, m.lost, m.stop, m.stopped)
	return id, m.lost, nil
}

func (m *Manager) renew(id string, lost, stop, stopped chan struct{}) {
	defer close(stopped)
	for {
		m.mu.Lock()
		wait := min(m.opts.TTL/3, m.deadline.Sub(m.opts.Now()))
		m.mu.Unlock()
		t := time.NewTimer(max(wait, 0))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		m.mu.Lock()
		expired := !m.opts.Now().Before(m.deadline)
		m.mu.Unlock()
		if expired {
			close(lost) // never renew again: others may already have pruned us
			return
		}
		start := m.opts.Now()
		ctx, cancel := context.WithTimeout(context.Background(), m.opts.TTL/3)
		_, _, err := m.sess.Update(ctx, m.sessionKey(id), func(s *sessionDoc, _ docs.Meta) error { s.Renewals++; return nil })
		cancel()
		if err == nil {
			m.mu.Lock()
			if m.session == id {
				m.deadline = start.Add(m.opts.TTL)
			}
			m.mu.Unlock()
		}
		ctx, cancel = context.WithTimeout(context.Background(), m.opts.TTL/3)
		m.retryWithdrawals(ctx)
		cancel()
	}
}

// retryWithdrawals retries the withdrawals not yet confirmed.
func (m *Manager) retryWithdrawals(ctx context.Context) {
	m.mu.Lock()
	var keys []string
	for k := range m.pending {
		keys = append(keys, k)
	}
	m.mu.Unlock()
	slices.Sort(keys)
	for _, key := range keys {
		m.mu.Lock()
		var reqs []string
		for r := range m.pending[key] {
			reqs = append(reqs, r)
		}
		m.mu.Unlock()
		for _, r := range reqs {
			if ctx.Err() != nil {
				return
			}
			m.withdrawKey(ctx, key, r)
		}
	}
}

// Close ends the session (its entries are pruned by others after one TTL, or
// at once where released first). Release held requests before closing.
func (m *Manager) Close() {
	m.mu.Lock()
	stop, stopped := m.stop, m.stopped
	m.session, m.stop = "", nil
	m.mu.Unlock()
	if stop != nil {
		close(stop)
		<-stopped
	}
}

// dead refreshes the observations of sessions and returns those that kept one
// revision for a whole TTL as watched from here (or no longer exist).
func (m *Manager) dead(ctx context.Context, sessions []string, self string) map[string]bool {
	out := map[string]bool{}
	for _, s := range sessions {
		if s == self || out[s] {
			continue
		}
		doc, meta, err := m.sess.Load(ctx, m.sessionKey(s))
		now := m.opts.Now()
		ttl := time.Duration(doc.TTLms) * time.Millisecond
		if ttl <= 0 {
			ttl = m.opts.TTL
		}
		m.mu.Lock()
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			out[s] = true
		case err != nil:
			// Unknown: treat as alive.
		default:
			o, ok := m.watch[s]
			if !ok || o.rev != meta.Rev {
				m.watch[s] = observation{meta.Rev, now}
			} else if now.Sub(o.since) >= ttl {
				out[s] = true
			}
		}
		m.mu.Unlock()
	}
	return out
}

// Held is an acquired request.
type Held struct {
	m     *Manager
	req   string
	steps []pathlock.Step
	lost  <-chan struct{}
	once  sync.Once
}

// Done is closed if the session behind the held locks is lost.
func (h *Held) Done() <-chan struct{} { return h.lost }

// Acquire waits until every path of r is locked, or ctx is done.
func (m *Manager) Acquire(ctx context.Context, r Request) (*Held, error) {
	return m.acquire(ctx, r, true)
}

// TryAcquire locks r only if no node makes it wait; else ErrNotAcquired.
func (m *Manager) TryAcquire(ctx context.Context, r Request) (*Held, error) {
	return m.acquire(ctx, r, false)
}

func (m *Manager) acquire(ctx context.Context, r Request, wait bool) (*Held, error) {
	steps, err := pathlock.Plan(r)
	if err != nil {
		return nil, err
	}
	sid, lost, err := m.ensureSession(ctx)
	if err != nil {
		return nil, err
	}
	h := &Held{m: m, req: randomID(), steps: steps, lost: lost}
	me := func(mode pathlock.Mode) entry { return entry{Session: sid, Req: h.req, Mode: mode} }
	for i, st := range steps {
		ambiguous := 0
		for {
			granted, err := m.step(ctx, st, me(st.Mode), wait)
			if err == nil && granted {
				break
			}
			// A write of ours to the node may still land: asking again is
			// safe (the step finds our entry if it landed), and better than
			// giving up on a transient fault.
			if err != nil && retryable(err) && ctx.Err() == nil && ambiguous < maxAmbiguous {
				ambiguous++
				err = nil
			}
			if err == nil && !wait {
				err = fmt.Errorf("%w: %s is locked", ErrNotAcquired, st.Path)
			}
			if err == nil {
				t := time.NewTimer(m.opts.Poll)
				select {
				case <-t.C:
					continue
				case <-ctx.Done():
					t.Stop()
					err = fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
				case <-lost:
					t.Stop()
					err = ErrSessionLost
				}
			}
			// Give up: leave the queue and release what we hold.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.TTL)
			m.withdraw(rctx, st, h.req)
			m.release(rctx, h.req, steps[:i])
			cancel()
			return nil, err
		}
	}
	return h, nil
}

// step tries to be granted st on its node, queueing if wait. It reports
// whether the grant is held.
func (m *Manager) step(ctx context.Context, st pathlock.Step, me entry, wait bool) (bool, error) {
	key := m.nodeKey(st.Path)
	cur, _, err := m.nodes.Load(ctx, key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return false, err
	}
	var sessions []string
	for _, e := range append(slices.Clone(cur.Holders), cur.Queue...) {
		sessions = append(sessions, e.Session)
	}
	dead := m.dead(ctx, sessions, me.Session)
	granted := false
	_, _, err = m.nodes.Update(ctx, key, func(n *nodeDoc, _ docs.Meta) error {
		granted = false
		live := func(e entry) bool { return !dead[e.Session] }
		n.Holders = slices.DeleteFunc(n.Holders, func(e entry) bool { return !live(e) })
		n.Queue = slices.DeleteFunc(n.Queue, func(e entry) bool { return !live(e) })
		if slices.ContainsFunc(n.Holders, func(e entry) bool { return e.Req == me.Req }) {
			granted = true
			return nil
		}
		pos := slices.IndexFunc(n.Queue, func(e entry) bool { return e.Req == me.Req })
		ahead := len(n.Queue)
		if pos >= 0 {
			ahead = pos
		}
		ok := ahead == 0
		for _, hd := range n.Holders {
			ok = ok && pathlock.Compatible(hd.Mode, me.Mode)
		}
		switch {
		case ok:
			if pos >= 0 {
				n.Queue = slices.Delete(n.Queue, pos, pos+1)
			}
			n.Holders = append(n.Holders, me)
			granted = true
		case pos < 0 && wait:
			n.Queue = append(n.Queue, me)
		case pos < 0:
			return errNoChange
		}
		return nil
	})
	if errors.Is(err, errNoChange) {
		return false, nil
	}
	return granted, err
}

var errNoChange = errors.New("no change")

// maxAmbiguous bounds how often one step is retried after a failed write.
const maxAmbiguous = 8

// retryable: the step's write failed in a way that asking again may fix.
func retryable(err error) bool {
	return errors.Is(err, objstore.ErrAmbiguous) || errors.Is(err, docs.ErrContention)
}

func (m *Manager) withdraw(ctx context.Context, st pathlock.Step, req string) {
	m.withdrawKey(ctx, m.nodeKey(st.Path), req)
}

// withdrawKey removes req's entries from a node. It always writes the node
// (creating it if absent): a step of req whose write failed ambiguously may
// still land, but only on the ETag it was conditional on, and a confirmed
// withdrawal has moved the ETag past it. An unconfirmed withdrawal is kept
// and retried on every renewal while the session lives; once the session
// ends, others prune its entries anyway.
func (m *Manager) withdrawKey(ctx context.Context, key, req string) {
	_, _, err := m.nodes.Update(ctx, key, func(n *nodeDoc, meta docs.Meta) error {
		n.Queue = slices.DeleteFunc(n.Queue, func(e entry) bool { return e.Req == req })
		n.Holders = slices.DeleteFunc(n.Holders, func(e entry) bool { return e.Req == req })
		n.Seals++
		return nil
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		if p := m.pending[key]; p != nil {
			delete(p, req)
			if len(p) == 0 {
				delete(m.pending, key)
			}
		}
		return
	}
	if m.pending[key] == nil {
		m.pending[key] = map[string]bool{}
	}
	m.pending[key][req] = true
}

func (m *Manager) release(ctx context.Context, req string, steps []pathlock.Step) {
	for i := len(steps) - 1; i >= 0; i-- {
		m.withdraw(ctx, steps[i], req)
	}
}

// Release unlocks every node of h.
func (h *Held) Release(ctx context.Context) {
	h.once.Do(func() { h.m.release(ctx, h.req, h.steps) })
}
