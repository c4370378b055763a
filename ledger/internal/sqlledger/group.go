package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/ledger"
)

// # Group commit of the writer's transactions (SQLite)
//
// With the intake log, every writing transaction runs on one connection, one
// at a time, and much of its cost does not depend on its size: BEGIN, the
// data_version check, the log row, the commit's WAL write and fsync. A
// pipeline runs Record, Claim and CompleteBatch from different goroutines at
// once, so logEngine.tryTx group-commits them: a caller queues its
// transaction; the first caller to find no leader leads, and runs every
// queued logged transaction (up to maxGroup) as one transaction, each call's
// function in queue order, each seeing the ones before, with one commit.
// Then it hands the lead to the next queued caller, if any, and returns.
//
// A group is all or nothing, like each of its calls alone: if one call's
// function fails, the group is rolled back and every call runs again alone
// (tryTx's functions keep no state between runs), so no call sees another's
// error. A refusal (lease lost, superseded, not found) is not a failure: it is
// decided before its call writes anything, so the others commit. A group whose
// BEGIN or COMMIT fails gives every call that error (the commit's outcome may
// be unknown, as for a call alone). Calls whose context ends while they wait
// in the queue leave it; a call the leader took runs, under its own context,
// while the group's BEGIN and COMMIT run under none, but its caller does not
// wait past its own deadline: it returns an error that says the transaction
// may still commit (as a lost response does). The leader's groups run in a
// goroutine of their own for that reason.
//
// A call whose context carries a linger (ledger.WithLinger) does not lead at
// once: it waits in the queue for the next caller that leads (an urgent one,
// or a leader handing over) to take it into its group, and leads itself only
// if its linger runs out while no one leads. A call whose deadline is less
// than twice its linger away does not linger. A pipeline's completions thus
// commit with its Records instead of alternating with them: when each of two
// streams took transactions of its own, a Record waited on average for a
// transaction of completions to commit before its own began.

// maxGroup caps the calls one transaction runs.
const maxGroup = 64

// logCall is a transaction waiting in the group-commit queue.
type logCall struct {
	ctx  context.Context
	op   string
	fn   func(tx *sql.Tx, now time.Time) error
	done chan error // its outcome, or errLead

	// fnMu is held while fn runs; abandoned, set under it when the caller
	// gave up at its deadline while a group held the call, keeps fn from
	// running again: fn writes its caller's variables, which the caller
	// reads once it returned.
	fnMu      sync.Mutex
	abandoned bool
}

// run runs c's fn in tx unless its caller gave up (then it fails with the
// caller's context's error, and the group runs its other calls again
// without it).
func (c *logCall) run(tx *sql.Tx, now time.Time) error {
	c.fnMu.Lock()
	defer c.fnMu.Unlock()
	if c.abandoned {
		return fmt.Errorf("the caller gave up: %w", context.Cause(c.ctx))
	}
	return c.fn(tx, now)
}

// abandon marks c given up by its caller, once no fn of it runs.
func (c *logCall) abandon() {
	c.fnMu.Lock()
	c.abandoned = true
	c.fnMu.Unlock()
}

// errLead tells a queued call that it leads now.
var errLead = errors.New("lead")

// tryTx runs fn in a transaction of the intake log, grouped with others
// (see above).
func (l *logEngine) tryTx(ctx context.Context, op string, fn func(tx *sql.Tx, now time.Time) error) error {
	g := l.log
	c := &logCall{ctx: ctx, op: op, fn: fn, done: make(chan error, 1)}
	var linger <-chan time.Time
	if d := ledger.Linger(ctx); d > 0 && logged(op) { // 0 near the deadline: urgent
		t := time.NewTimer(d)
		defer t.Stop()
		linger = t.C
	}
	g.qmu.Lock()
	g.calls = append(g.calls, c)
	lead := !g.leading && linger == nil
	if lead {
		g.leading = true
	}
	g.qmu.Unlock()
	for !lead {
		select {
		case err := <-c.done:
			if err != errLead {
				return err
			}
			lead = true
		case <-linger:
			// Nothing urgent came: lead, unless a leader runs (it takes
			// this call, or hands the lead to it).
			linger = nil
			g.qmu.Lock()
			if !g.leading && slices.Contains(g.calls, c) {
				g.leading, lead = true, true
			}
			g.qmu.Unlock()
		case <-ctx.Done():
			if g.leave(c) {
				return l.wrap(op, context.Cause(ctx))
			}
			select {
			case err := <-c.done:
				if err != errLead {
					return err
				}
				lead = true // cannot be: leave passes a lead on
			default:
				c.abandon()
				return l.gaveUp(op, ctx) // a leader took it: it runs on
			}
		}
	}
	// Lead in a goroutine of its own: the groups run to their end, but this
	// caller waits for its own outcome only until its context ends.
	handedOn := make(chan struct{})
	go func() {
		defer close(handedOn)
		l.lead(c)
	}()
	select {
	case err := <-c.done:
		// The lead passes on right after this call's group ran: wait for
		// that, so that a caller that returned leads nothing (a lingering
		// call queued next waits for an urgent one, as it should).
		<-handedOn
		return err
	case <-ctx.Done():
	}
	if g.leave(c) {
		return l.wrap(op, context.Cause(ctx)) // not run, and it never will be
	}
	select {
	case err := <-c.done:
		return err
	default:
		c.abandon()
		return l.gaveUp(op, ctx)
	}
}

// gaveUp is the error of a call whose context ended while its group ran: it
// may still commit, as a transaction whose response was lost may have; the
// caller handles it as such (a retry of an outcome finds it recorded, a
// renewal counts as not confirmed).
func (l *logEngine) gaveUp(op string, ctx context.Context) error {
	return fmt.Errorf("ledger (%s) %s: the caller gave up while its transaction was being committed in a group; it may still commit (outcome unknown): %w", l.d.Name, op, context.Cause(ctx))
}

// lead runs groups until c's has run (or c left the queue), then hands the
// lead on.
func (l *logEngine) lead(c *logCall) {
	g := l.log
	for {
		g.qmu.Lock()
		if !slices.Contains(g.calls, c) { // its caller gave up before it ran
			g.handOff()
			g.qmu.Unlock()
			return
		}
		group := g.takeGroup()
		g.qmu.Unlock()
		g.mu.Lock()
		l.runGroup(group)
		g.mu.Unlock()
		if slices.Contains(group, c) {
			g.qmu.Lock()
			g.handOff()
			g.qmu.Unlock()
			return
		}
	}
}

// LogQueue reports how many calls wait in the group-commit queue and whether
// one leads (for tests: a call queued before they go on, a queue left empty).
func (l *Backend) LogQueue() (queued int, leading bool) {
	e, ok := l.eng.(*logEngine)
	if !ok {
		return 0, false
	}
	e.log.qmu.Lock()
	defer e.log.qmu.Unlock()
	return len(e.log.calls), e.log.leading
}

// leave takes c out of the queue and reports true, unless a leader took it
// already (then c runs, and its outcome comes). A lead handed to c meanwhile
// passes on.
func (g *intakeLog) leave(c *logCall) bool {
	g.qmu.Lock()
	defer g.qmu.Unlock()
	i := slices.Index(g.calls, c)
	if i < 0 {
		return false
	}
	g.calls = slices.Delete(g.calls, i, i+1)
	select {
	case <-c.done: // errLead: nothing else is sent to a queued call
		g.handOff()
	default:
	}
	return true
}

// handOff gives the lead to the first queued call, if any (g.qmu held).
func (g *intakeLog) handOff() {
	if len(g.calls) > 0 {
		g.calls[0].done <- errLead
	} else {
		g.leading = false
	}
}

// takeGroup takes the next group off the queue (g.qmu held): the first call,
// and with it the logged calls after it, up to maxGroup; a call that is not
// logged runs alone.
func (g *intakeLog) takeGroup() []*logCall {
	n := 1
	if logged(g.calls[0].op) {
		for n < len(g.calls) && n < maxGroup && logged(g.calls[n].op) {
			n++
		}
	}
	group := append([]*logCall(nil), g.calls[:n]...)
	g.calls = append(g.calls[:0], g.calls[n:]...)
	return group
}

// runGroup runs the calls of group in one transaction and answers each
// (g.mu held).
func (l *logEngine) runGroup(group []*logCall) {
	if len(group) == 1 {
		c := group[0]
		c.done <- l.runLogTx(c.ctx, c.op, c.run)
		return
	}
	var failed bool
	refusals := make([]error, len(group))
	// The group's own statements (BEGIN, the fold, COMMIT) run for every
	// call: no one caller's context may cancel them (each call's statements
	// run under its own).
	err := l.runLogTx(context.WithoutCancel(group[0].ctx), group[0].op, func(tx *sql.Tx, now time.Time) error {
		for i, c := range group {
			if err := c.run(tx, now); refused(err) {
				refusals[i] = err // decided before the call wrote anything
			} else if err != nil {
				failed = true
				return err
			}
		}
		return nil
	})
	for i, c := range group {
		switch {
		case err == nil:
			c.done <- refusals[i]
		case failed:
			// One call failed the group: each runs again alone.
			c.done <- l.runLogTx(c.ctx, c.op, c.run)
		default:
			c.done <- err
		}
	}
}
