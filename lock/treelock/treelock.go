// Package treelock is the hierarchical path lock of package pathlock across
// processes and machines, stored on an objstore.Store that enforces
// conditional writes: the same requests (read and write sets of pseudo-folder
// paths), the same five modes and the same global acquisition order.
//
// Each process holds its locks through one session, renewed every TTL/3. A
// holder stops at its own deadline if it cannot renew (Held.Done closes), and
// a crashed holder's locks are released after one TTL: others judge its
// session dead on their own monotonic clocks, or, when they have not watched
// it that long, by the store's own clock (never two machines' clocks). Locks
// clean up after themselves, and no lost, late-landing or killed request
// turns into two holders or a token that goes backwards. How (node and
// session documents, cleanup, late-landing writes) is written next to the
// code, in design.go.
//
// # A held request
//
// Acquire returns a *Held: Token(path) is the fencing token of each path it
// locked; Done is closed when the locks end — Release, a lost session, or
// the Manager's Close — and Err is then nil after Release, or says which
// loss; Release returns an error if the locks had been lost before it, or a
// withdrawal from a node was not confirmed (see Errors).
//
// # Fencing tokens
//
// Every grant on a node takes the next value of that node's counter, and the
// holder reads it with Held.Token(path). The token of a path grows with every
// grant on it, in any mode, by anyone — also across cleanup (below). Fence a
// resource with the token of the path whose lock guards it, and lock it by
// that same path everywhere: tokens of different paths come from different
// counters and are not comparable (the holder of /a and the holder of /a/b
// get unrelated numbers).
//
// # Limits
//
//   - A request costs about two requests to the store (GET and conditional PUT)
//     per node to acquire and again to release; a write of /a/b/c touches four
//     nodes. A release that empties a node others used paths below also lists,
//     reads and deletes what is below it.
//   - Waiters poll (Options.Poll); a grant is seen within one poll interval.
//   - Cooperative: writers that bypass the lock are not stopped, and a holder
//     paused past its TTL can act after losing its locks. Check Held.Done
//     before acting, and fence what you write.
//
// # Errors
//
// Check these with errors.Is (ErrNotAcquired is also cairn.ErrNotAcquired;
// ErrSessionLost and ErrClosed also cairn.ErrLost, as in every layer):
//
//   - ErrNotAcquired: TryAcquire found a path it asked for locked by a
//     conflicting holder or waiter (the error names the path); or Acquire gave
//     up because its context ended while it waited (the error then also wraps
//     the context's error). Either way nothing is held: what the request had
//     already taken was released.
//   - ErrSessionLost: the process's session was not renewed before its
//     deadline (or its document was deleted by others who judged it dead).
//     Acquire returns it if this happened while it waited: the request gave
//     up. Locks granted to the lost session may be held by others now:
//     Held.Done is closed on every Held of it, and Held.Err and Held.Release
//     return it.
//   - ErrClosed: the Manager was closed while the request was held (Held.Err,
//     Held.Release) or while Acquire waited. As with a lost session, others
//     may hold the locks now.
//   - pathlock.ErrBadPath: a path of the request is not absolute or has
//     empty, "." or ".." components. Nothing was tried.
//   - objstore.ErrNotSupported: the store does not enforce conditional
//     writes, on which the locks depend.
//
// Other errors are the store's (a failed request). From Acquire, the
// request then holds nothing. From Held.Release, some node's withdrawal was
// not confirmed: it is retried on every renewal while the session lives, and
// once the session ends others prune its entries anyway.
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
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/lock/internal/session"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/objstore"
)

// Request is a set of read paths and write paths, as in package pathlock.
type Request = pathlock.Request

// Errors.
var (
	ErrNotAcquired = cairn.Sentinel(cairn.ErrNotAcquired, "treelock: not acquired")
	ErrSessionLost = cairn.Sentinel(cairn.ErrLost, "treelock: session lost (not renewed in time); its locks may be held by others now")
	ErrClosed      = cairn.Sentinel(cairn.ErrLost, "treelock: manager closed; its locks may be held by others now")
)

// Options configure a Manager. A nil *Options means defaults.
type Options struct {
	// Prefix under which node and session documents live. Default: "cairn-locks/tree/".
	Prefix string
	// TTL of the session. Default: 30s.
	TTL time.Duration
	// Poll is how often a waiter re-reads a node. Default: TTL/30, at least 10ms.
	Poll time.Duration
	// Clock is the monotonic clock on which TTLs, renewals and polls are
	// measured (tests pass a clockwork.FakeClock). Default: the real clock.
	Clock clockwork.Clock
}

type entry struct {
	Session string        `json:"s"`
	Req     string        `json:"r"`
	Mode    pathlock.Mode `json:"m"`
	Token   int64         `json:"t,omitempty"` // holders: the fencing token of the grant
}

type nodeDoc struct {
	Holders []entry `json:"holders,omitempty"`
	Queue   []entry `json:"queue,omitempty"`
	// Seals counts withdrawals: each one writes the node (creating it if
	// absent) so that its ETag moves on, and a late-landing write of the
	// withdrawn request, conditional on an earlier ETag, can never land.
	Seals int64 `json:"seals,omitempty"`
	// Token is the path's fencing counter: the token of its latest grant.
	Token int64 `json:"token,omitempty"`
	// Floor is at least every counter and floor a sweep of this node has
	// deleted below it; grants below take tokens above it.
	Floor int64 `json:"floor,omitempty"`
	// Epoch names the documents of this node's children; a sweep replaces it.
	Epoch string `json:"epoch,omitempty"`
	// Kids: some request that held or waited here also locked paths below.
	Kids bool `json:"kids,omitempty"`
}

type sessionDoc struct {
	Holder   string `json:"holder"`
	Since    string `json:"since,omitempty"` // the holder's wall clock at its start, for people only
	TTLms    int64  `json:"ttl_ms"`          // judged by the session's own TTL, not the observer's
	Renewals int64  `json:"renewals"`
}

// clockSlack is added to twice a session's TTL before the store's clock
// judges it dead: Last-Modified has whole seconds, and a store of several
// servers has several clocks.
const clockSlack = 2 * time.Second

// tsession is one session of a Manager: its document's id, renewed by a
// session.Session.
type tsession struct {
	id string
	s  *session.Session
}

// Manager takes tree locks for one process. Close it to end its session.
type Manager struct {
	opts  Options
	s     *objstore.Store
	nodes docstore.Doc[nodeDoc]
	sess  docstore.Doc[sessionDoc]

	mu  sync.Mutex
	cur *tsession // current session (nil until first use)
	// watch judges other sessions by the observer's rule; it forgets those
	// not asked about for two of their TTLs, so it stays bounded.
	watch *session.Watch
	// The store's clock: clockLM is the Last-Modified of a write of our own
	// session, read back at clockLocal on our monotonic clock (zero: unknown).
	clockLM, clockLocal time.Time
	// pending are withdrawals not yet confirmed (node key → request ids):
	// retried on every renewal while the session lives, so an entry of ours
	// that a late-landing write put in a node is removed.
	pending map[string]map[string]bool
}

// New returns a Manager on s.
func New(s *objstore.Store, opts *Options) *Manager {
	m := &Manager{s: s, pending: map[string]map[string]bool{}}
	if opts != nil {
		m.opts = *opts
	}
	if m.opts.Prefix == "" {
		m.opts.Prefix = cairn.LockPrefix + "tree/"
	}
	if m.opts.TTL <= 0 {
		m.opts.TTL = 30 * time.Second
	}
	if m.opts.Poll <= 0 {
		m.opts.Poll = max(m.opts.TTL/30, 10*time.Millisecond)
	}
	if m.opts.Clock == nil {
		m.opts.Clock = clockwork.NewRealClock()
	}
	m.watch = session.NewWatch(m.opts.Clock)
	d := docstore.New(s, &docstore.Options{NoGroupCommit: true})
	m.nodes, m.sess = docstore.Typed[nodeDoc](d), docstore.Typed[sessionDoc](d)
	return m
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (m *Manager) pathsPrefix() string { return m.opts.Prefix + "paths/" }

// nodeKey is a node's document: one flat segment per path, then the
// parent's epoch (the root has none).
func (m *Manager) nodeKey(path, parentEpoch string) string {
	k := m.pathsPrefix() + url.PathEscape(path)
	if path == "/" {
		return k
	}
	return k + "/" + parentEpoch
}

// subtreePrefix lists the documents of every node below path, of every epoch
// (and, for the root, the root's own document).
func (m *Manager) subtreePrefix(path string) string {
	if path == "/" {
		return m.pathsPrefix() + url.PathEscape("/")
	}
	return m.pathsPrefix() + url.PathEscape(path) + url.PathEscape("/")
}

func (m *Manager) sessionsPrefix() string      { return m.opts.Prefix + "sessions/" }
func (m *Manager) sessionKey(id string) string { return m.sessionsPrefix() + id }

// ensureSession starts (or returns) this process's live session.
func (m *Manager) ensureSession(ctx context.Context) (*tsession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil && m.cur.s.Valid() {
		return m.cur, nil
	}
	// An expired session's renewer notices by itself, closes its Done and
	// deletes its document.
	id := randomID()
	// What the store enforces is known before the clock starts: a first
	// conditional write probes the store (seconds on some servers: Ceph
	// RGW, SeaweedFS), and the session's deadline counts from start, so a
	// probe inside the create would eat the TTL and the session would end
	// as expired right after it began.
	if _, err := m.s.Capabilities(ctx); err != nil {
		return nil, err
	}
	start := m.opts.Clock.Now()
	host, _ := os.Hostname()
	if _, err := m.sess.Create(ctx, m.sessionKey(id), sessionDoc{Holder: fmt.Sprintf("%s/%d", host, os.Getpid()), TTLms: m.opts.TTL.Milliseconds(),
		Since: time.Now().UTC().Format(time.RFC3339Nano)}); err != nil {
		return nil, err
	}
	key := m.sessionKey(id)
	ts := &tsession{id: id}
	ts.s = session.Start(start, session.Config{TTL: m.opts.TTL, Clock: m.opts.Clock, Lost: ErrSessionLost,
		Renew: func(ctx context.Context) error {
			_, _, err := m.sess.Update(ctx, key, func(d *sessionDoc, meta docstore.Meta) error {
				if !meta.Exists { // deleted by another process, which judged it dead
					return fmt.Errorf("%w: its document was deleted as dead", ErrSessionLost)
				}
				d.Renewals++
				return nil
			})
			return err
		},
		AfterRenew: func(ctx context.Context) {
			m.watch.Prune()
			m.retryWithdrawals(ctx)
		},
		// Never renewed again: others may already have pruned us. Deleting
		// the document lets them prune the rest at once.
		OnExpire: func(ctx context.Context) { _ = m.s.Delete(ctx, key, objstore.Condition{}) },
	})
	m.cur = ts
	m.clockLM = time.Time{} // read back from this session when needed
	return ts, nil
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
			_, _, _ = m.withdrawKey(ctx, key, r)
		}
	}
}

// Close ends the session: it stops renewing, closes Done on every Held,
// deletes the session's document (so entries still held are pruned by
// others at once), and deletes the documents of other sessions that are dead
// (see the package doc). Release held requests before closing.
func (m *Manager) Close() {
	m.mu.Lock()
	s := m.cur
	m.cur = nil
	m.mu.Unlock()
	if s == nil {
		return
	}
	s.s.End(ErrClosed)
	ctx, cancel := context.WithTimeout(context.Background(), max(m.opts.TTL, 10*time.Second))
	defer cancel()
	now, known := m.storeNow(ctx, s.id) // before our document goes
	_ = m.s.Delete(ctx, m.sessionKey(s.id), objstore.Condition{})
	m.sweepSessions(ctx, s.id, now, known)
}

// storeNow estimates the store's clock from below: the Last-Modified of a
// write of session self, plus the time elapsed here since it was read.
func (m *Manager) storeNow(ctx context.Context, self string) (time.Time, bool) {
	m.mu.Lock()
	lm, local := m.clockLM, m.clockLocal
	m.mu.Unlock()
	if lm.IsZero() {
		info, err := m.s.Head(ctx, m.sessionKey(self))
		if err != nil || info.LastModified.IsZero() {
			return time.Time{}, false
		}
		lm, local = info.LastModified, m.opts.Clock.Now()
		m.mu.Lock()
		if m.cur != nil && m.cur.id == self {
			m.clockLM, m.clockLocal = lm, local
		}
		m.mu.Unlock()
	}
	return lm.Add(m.opts.Clock.Now().Sub(local)), true
}

// sweepSessions deletes the documents of dead sessions other than self.
func (m *Manager) sweepSessions(ctx context.Context, self string, now time.Time, known bool) {
	infos, err := m.s.ListAll(ctx, m.sessionsPrefix(), nil)
	if err != nil {
		return
	}
	var cands []string
	for _, in := range infos {
		id := strings.TrimPrefix(in.Key, m.sessionsPrefix())
		if id == self || strings.Contains(id, "/") {
			continue
		}
		watched := m.watch.Watched(id)
		// Only these can be dead by either rule: read no others.
		if watched || known && now.Sub(in.LastModified) > clockSlack {
			cands = append(cands, id)
		}
	}
	var keys []string
	for id, dead := range m.judge(ctx, cands, self, now, known) {
		if dead {
			keys = append(keys, m.sessionKey(id))
		}
	}
	if len(keys) > 0 {
		slices.Sort(keys)
		_, _ = m.s.DeleteMany(ctx, keys, 8)
	}
	for _, k := range keys {
		m.watch.Forget(strings.TrimPrefix(k, m.sessionsPrefix()))
	}
}

// dead refreshes the observations of sessions and returns those that are
// dead: kept one revision for a whole TTL as watched from here, last written
// more than 2×TTL+clockSlack ago by the store's clock, or gone.
func (m *Manager) dead(ctx context.Context, sessions []string, self string) map[string]bool {
	var now time.Time
	known := false
	if slices.ContainsFunc(sessions, func(s string) bool { return s != self }) {
		now, known = m.storeNow(ctx, self)
	}
	return m.judge(ctx, sessions, self, now, known)
}

func (m *Manager) judge(ctx context.Context, sessions []string, self string, storeNow time.Time, known bool) map[string]bool {
	out := map[string]bool{}
	for _, s := range sessions {
		if s == self || out[s] {
			continue
		}
		doc, meta, err := m.sess.Load(ctx, m.sessionKey(s))
		ttl := time.Duration(doc.TTLms) * time.Millisecond
		if ttl <= 0 {
			ttl = m.opts.TTL
		}
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			out[s] = true
			m.watch.Forget(s) // gone for good: ids are never reused
		case err != nil:
			// Unknown: treat as alive.
		case known && !meta.LastModified.IsZero() && storeNow.Sub(meta.LastModified) > 2*ttl+clockSlack:
			out[s] = true // expired beyond doubt by the store's clock
		case m.watch.Dead(s, meta.Rev, ttl):
			out[s] = true // kept one revision for a whole TTL as watched here
		}
	}
	return out
}

// SessionInfo describes a session: one process that holds or waits for tree
// locks under the Manager's prefix.
type SessionInfo struct {
	ID       string        `json:"id"`
	Holder   string        `json:"holder"` // host/pid
	Since    string        `json:"since,omitempty"`
	TTL      time.Duration `json:"ttl"`
	Renewals int64         `json:"renewals"`
	// LastWrite is the store's Last-Modified of the session's document: a
	// live session rewrites it every TTL/3.
	LastWrite time.Time `json:"last_write"`
}

// ErrNoSession is ForceRelease's answer for a session that does not exist
// (released, or already judged dead and deleted): nothing was released.
var ErrNoSession = errors.New("treelock: no such session")

// Sessions lists the sessions under the Manager's prefix (this process's
// own among them, once it has taken a lock), alive or not yet judged dead.
func (m *Manager) Sessions(ctx context.Context) ([]SessionInfo, error) {
	var out []SessionInfo
	for info, err := range m.s.List(ctx, m.sessionsPrefix(), nil) {
		if err != nil {
			return nil, err
		}
		id := strings.TrimPrefix(info.Key, m.sessionsPrefix())
		d, meta, err := m.sess.Load(ctx, info.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // gone since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, SessionInfo{ID: id, Holder: d.Holder, Since: d.Since, TTL: time.Duration(d.TTLms) * time.Millisecond,
			Renewals: d.Renewals, LastWrite: meta.LastModified})
	}
	return out, nil
}

// ForceRelease ends another process's session on purpose, for a holder known
// to be dead, instead of waiting a TTL for it to be judged dead: it deletes
// the session's document, which is what the session's death means (see the
// package doc). Every lock the session held or waited for is free for the
// next request that reaches its node (its entries are pruned then), and the
// next grant on each path takes a fencing token above the session's; the
// session, if alive after all, loses its locks at its next renewal (Done,
// ErrSessionLost). It returns what it released; ErrNoSession if there is no
// such session.
func (m *Manager) ForceRelease(ctx context.Context, id string) (SessionInfo, error) {
	if id == "" || strings.Contains(id, "/") {
		return SessionInfo{}, fmt.Errorf("%w: %q is not a session id (cairn lock status --tree lists them)", ErrNoSession, id)
	}
	d, meta, err := m.sess.Load(ctx, m.sessionKey(id))
	if errors.Is(err, objstore.ErrNotFound) {
		return SessionInfo{}, fmt.Errorf("%w: %s (released, or already judged dead)", ErrNoSession, id)
	}
	if err != nil {
		return SessionInfo{}, err
	}
	if err := m.s.Delete(ctx, m.sessionKey(id), objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return SessionInfo{}, err
	}
	m.watch.Forget(id)
	return SessionInfo{ID: id, Holder: d.Holder, Since: d.Since, TTL: time.Duration(d.TTLms) * time.Millisecond,
		Renewals: d.Renewals, LastWrite: meta.LastModified}, nil
}

// Held is an acquired request.
type Held struct {
	m      *Manager
	req    string
	self   string
	steps  []pathlock.Step
	keys   []string // node document per step
	kids   []bool   // per step: the request locks paths below it
	parent []int    // per step: the step of its parent path (-1 for the root)
	tokens []int64  // per step: the fencing token of its grant
	sub    *session.Sub
	once   sync.Once
	relErr error
}

// Done is closed when the held locks end: when Release has withdrawn them,
// or when the session behind them is lost or the Manager is closed. Stop
// acting on the locks once it is closed.
func (h *Held) Done() <-chan struct{} { return h.sub.Done() }

// Deadline is the deadline of the session behind the locks, on
// Options.Clock: they cannot have been taken over before it, and Done is
// closed from it on. It moves later with each renewal of the session.
func (h *Held) Deadline() time.Time { return h.sub.Deadline() }

// Err is nil while the locks are held and after Release; once the session
// behind them was lost, an error wrapping ErrSessionLost, or ErrClosed after
// the Manager's Close. The locks may then be held by others.
func (h *Held) Err() error { return h.sub.Err() }

// Token is the fencing token of the grant on path (written as in the
// request; ancestors the request locked in an intention mode have tokens
// too), or 0 if the request did not lock path. See the package doc.
func (h *Held) Token(path string) int64 {
	p := cleanPath(path)
	for i, st := range h.steps {
		if st.Path == p {
			return h.tokens[i]
		}
	}
	return 0
}

// cleanPath is a path as pathlock.Plan writes it ("/a/b/" → "/a/b").
func cleanPath(p string) string {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "/"
	}
	return p
}

func parentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

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
	s, err := m.ensureSession(ctx)
	if err != nil {
		return nil, err
	}
	n := len(steps)
	h := &Held{m: m, req: randomID(), self: s.id, steps: steps,
		keys: make([]string, n), kids: make([]bool, n), parent: make([]int, n), tokens: make([]int64, n)}
	epochs, floors := make([]string, n), make([]int64, n)
	for i, st := range steps {
		h.parent[i] = -1
		if st.Path != "/" {
			pp := parentPath(st.Path)
			h.parent[i] = slices.IndexFunc(steps[:i], func(o pathlock.Step) bool { return o.Path == pp })
		}
		h.kids[i] = slices.ContainsFunc(steps[i+1:], func(o pathlock.Step) bool { return parentPath(o.Path) == st.Path && o.Path != "/" })
	}
	me := func(mode pathlock.Mode) entry { return entry{Session: s.id, Req: h.req, Mode: mode} }
	for i, st := range steps {
		var floor int64
		parentEpoch := ""
		if p := h.parent[i]; p >= 0 {
			parentEpoch, floor = epochs[p], floors[p]
		}
		h.keys[i] = m.nodeKey(st.Path, parentEpoch)
		ambiguous := 0
		for {
			doc, granted, err := m.step(ctx, h.keys[i], me(st.Mode), wait, h.kids[i], floor)
			if err == nil && granted {
				k := slices.IndexFunc(doc.Holders, func(e entry) bool { return e.Req == h.req })
				h.tokens[i], epochs[i], floors[i] = doc.Holders[k].Token, doc.Epoch, max(floor, doc.Floor)
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
				t := m.opts.Clock.NewTimer(m.opts.Poll)
				select {
				case <-t.Chan():
					continue
				case <-ctx.Done():
					t.Stop()
					err = fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
				case <-s.s.Done():
					t.Stop()
					err = s.s.Err()
				}
			}
			// Give up: leave the queue and release what we hold.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.TTL)
			_ = m.release(rctx, h, i+1) // an unconfirmed withdrawal is retried on renewals
			cancel()
			return nil, err
		}
	}
	h.sub = s.s.Sub() // already ended if the session ended meanwhile
	return h, nil
}

// step tries to be granted me on the node at key, queueing if wait, and
// returns the node as written. A grant takes the token one above the node's
// counter and floor, the ancestors' floor included.
func (m *Manager) step(ctx context.Context, key string, me entry, wait, kids bool, floor int64) (nodeDoc, bool, error) {
	cur, _, err := m.nodes.Load(ctx, key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return nodeDoc{}, false, err
	}
	var sessions []string
	for _, e := range append(slices.Clone(cur.Holders), cur.Queue...) {
		sessions = append(sessions, e.Session)
	}
	dead := m.dead(ctx, sessions, me.Session)
	doc, _, err := m.nodes.Update(ctx, key, func(n *nodeDoc, _ docstore.Meta) error {
		live := func(e entry) bool { return !dead[e.Session] }
		n.Holders = slices.DeleteFunc(n.Holders, func(e entry) bool { return !live(e) })
		n.Queue = slices.DeleteFunc(n.Queue, func(e entry) bool { return !live(e) })
		if n.Epoch == "" {
			n.Epoch = randomID()
		}
		if slices.ContainsFunc(n.Holders, func(e entry) bool { return e.Req == me.Req }) {
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
			n.Token = max(n.Token, n.Floor, floor) + 1
			me.Token = n.Token
			n.Holders = append(n.Holders, me)
		case pos < 0 && wait:
			n.Queue = append(n.Queue, me)
		case pos < 0:
			return errNoChange
		}
		// Set before any child exists: the child is made only after a grant.
		n.Kids = n.Kids || kids
		return nil
	})
	if errors.Is(err, errNoChange) {
		return nodeDoc{}, false, nil
	}
	if err != nil {
		return nodeDoc{}, false, err
	}
	// Judge by the value committed: after a resolved lost response it is an
	// earlier run's.
	granted := slices.ContainsFunc(doc.Holders, func(e entry) bool { return e.Req == me.Req })
	return doc, granted, nil
}

var errNoChange = errors.New("no change")

// maxAmbiguous bounds how often one step is retried after a failed write.
const maxAmbiguous = 8

// retryable: the step's write failed in a way that asking again may fix.
func retryable(err error) bool {
	return errors.Is(err, objstore.ErrAmbiguous) || errors.Is(err, docstore.ErrContention)
}

// withdrawKey removes req's entries from a node and returns the node as
// written. It always writes the node (creating it if absent): a step of req
// whose write failed ambiguously may still land, but only on the ETag it was
// conditional on, and a confirmed withdrawal has moved the ETag past it. An
// unconfirmed withdrawal is kept and retried on every renewal while the
// session lives; once the session ends, others prune its entries anyway.
func (m *Manager) withdrawKey(ctx context.Context, key, req string) (nodeDoc, docstore.Meta, error) {
	doc, meta, err := m.nodes.Update(ctx, key, func(n *nodeDoc, _ docstore.Meta) error {
		n.Queue = slices.DeleteFunc(n.Queue, func(e entry) bool { return e.Req == req })
		n.Holders = slices.DeleteFunc(n.Holders, func(e entry) bool { return e.Req == req })
		n.Seals++
		if n.Epoch == "" {
			n.Epoch = randomID()
		}
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
		return doc, meta, nil
	}
	if m.pending[key] == nil {
		m.pending[key] = map[string]bool{}
	}
	m.pending[key][req] = true
	return doc, meta, err
}

// release withdraws h from its first k steps, deepest first, sweeping below
// each node it leaves without a live entry (see the package doc). Every
// sweep runs while h still holds the node's ancestors. It returns the
// errors of the withdrawals not confirmed (sweeps are best effort).
func (m *Manager) release(ctx context.Context, h *Held, k int) error {
	var errs []error
	for i := k - 1; i >= 0; i-- {
		doc, meta, err := m.withdrawKey(ctx, h.keys[i], h.req)
		if err != nil {
			errs = append(errs, fmt.Errorf("releasing %s: %w", h.steps[i].Path, err))
			continue
		}
		if !doc.Kids || ctx.Err() != nil {
			continue
		}
		if p := h.parent[i]; p >= 0 && m.onlyOurs(ctx, h.keys[p], h.req) {
			continue // the parent's sweep, a moment later, covers this one
		}
		m.sweep(ctx, h, i, doc, meta)
	}
	return errors.Join(errs...)
}

// onlyOurs reports whether req is all the node at key holds and queues.
func (m *Manager) onlyOurs(ctx context.Context, key, req string) bool {
	n, _, err := m.nodes.Load(ctx, key)
	if err != nil {
		return false
	}
	for _, e := range append(n.Holders, n.Queue...) {
		if e.Req != req {
			return false
		}
	}
	return true
}

// sweep deletes every node document below step i's node, whose release
// left it as doc at meta, if no live session holds or queues there.
func (m *Manager) sweep(ctx context.Context, h *Held, i int, doc nodeDoc, meta docstore.Meta) {
	var sessions []string
	for _, e := range append(doc.Holders, doc.Queue...) {
		if e.Session == h.self {
			return // another request of ours
		}
		sessions = append(sessions, e.Session)
	}
	dead := map[string]bool{}
	if len(sessions) > 0 {
		dead = m.dead(ctx, sessions, h.self)
		for _, s := range sessions {
			if !dead[s] {
				return
			}
		}
	}
	key := h.keys[i]
	infos, err := m.s.ListAll(ctx, m.subtreePrefix(h.steps[i].Path), nil)
	if err != nil {
		return
	}
	var below []string
	var folded int64
	for _, in := range infos {
		if in.Key == key {
			continue
		}
		n, _, err := m.nodes.Load(ctx, in.Key)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			// Deleted since the listing: by a late delete of a retired
			// epoch, whose counters were folded into a floor we hold.
			continue
		case err != nil:
			return // its counter is unknown: delete nothing
		}
		folded = max(folded, n.Token, n.Floor)
		below = append(below, in.Key)
	}
	_, _, err = m.nodes.Update(ctx, key, func(n *nodeDoc, cur docstore.Meta) error {
		if cur.Rev != meta.Rev {
			return errNoChange // someone came by since: not ours to sweep
		}
		n.Holders = slices.DeleteFunc(n.Holders, func(e entry) bool { return dead[e.Session] })
		n.Queue = slices.DeleteFunc(n.Queue, func(e entry) bool { return dead[e.Session] })
		n.Floor = max(n.Floor, folded)
		n.Epoch = randomID()
		n.Kids = false
		return nil
	})
	if err != nil || len(below) == 0 {
		return // not confirmed: delete nothing (a late write lands on the same P)
	}
	_, _ = m.s.DeleteMany(ctx, below, 8)
}

// Release unlocks every node of h, cleans up below the nodes it leaves free
// (see the package doc), and then closes Done.
//
// It returns nil when every node's withdrawal was confirmed while the
// session lived. If the session had been lost (or the Manager closed) before
// Release finished, it returns that loss (Err): others may have held the
// locks meanwhile, and only fencing tokens protect what they guarded. Else a
// non-nil error is the store's, for the nodes whose withdrawal was not
// confirmed: those are retried on every renewal while the session lives, and
// others prune its entries once it has ended. A second Release returns the
// first one's result.
func (h *Held) Release(ctx context.Context) error {
	h.once.Do(func() {
		err := h.m.release(ctx, h, len(h.steps))
		if lost := h.sub.End(nil); lost != nil {
			err = lost
		}
		h.relErr = err
	})
	return h.relErr
}
