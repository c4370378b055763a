package bench

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// memLedger is a measuring instrument, not a ledger: it decides by the
// ledger's rules (driver.Decide) from a map under one mutex and keeps nothing
// on disk. bench serve runs the pipeline on it to measure the pipeline's own
// ceiling (the intake, the HTTP server, the dispatcher and the completions
// with decisions that cost almost nothing), so that the figure of each real
// ledger shows what that ledger costs. It is built for that run: one process,
// no lease ever runs out (Claim takes pending work only), and the methods the
// pipeline does not call refuse.
type memLedger struct {
	mu   sync.Mutex
	recs map[[2]string]*ledger.Record // by bucket and ident
	due  [][2]string                  // pending records, in the order they became pending (some stale)
}

func newMemLedger() *memLedger { return &memLedger{recs: map[[2]string]*ledger.Record{}} }

var errMemLedger = errors.New("bench: the in-memory measuring ledger does not keep this")

// claimLocked claims up to n pending records, those that became pending
// first first (m.mu held).
func (m *memLedger) claimLocked(n int, lease time.Duration, now time.Time) []ledger.Claim {
	var cs []ledger.Claim
	for len(cs) < n && len(m.due) > 0 {
		id := m.due[0]
		m.due = m.due[1:]
		if r := m.recs[id]; r.Status == ledger.Pending {
			r.Status, r.Token, r.LeaseUntil, r.Attempts, r.RunGen, r.Updated = ledger.Claimed, r.Token+1, now.Add(lease), r.Attempts+1, r.Gen, now
			cs = append(cs, ledger.Claim{Record: *r, Ident: id[1]})
		}
	}
	return cs
}

// RecordAndClaim decides the whole batch, then claims as Claim would: the
// work that became pending first, first.
func (m *memLedger) RecordAndClaim(_ context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]ledger.Decision, []ledger.Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	out := make([]ledger.Decision, len(evs))
	for i, ev := range evs {
		out[i] = ledger.Decision{Outcome: ledger.Ignored, Bucket: ev.Bucket, Key: ev.Key, Seq: ev.Sequencer}
		if ev.Ignorable() {
			continue
		}
		id := [2]string{ev.Bucket, driver.Ident(ev, false)}
		prev := m.recs[id]
		o, r := driver.Decide(prev, ev, source, now, false)
		out[i].Outcome = o
		if r == nil {
			continue
		}
		m.recs[id] = r
		if r.Status == ledger.Pending && (prev == nil || prev.Status != ledger.Pending) {
			m.due = append(m.due, id)
		}
	}
	return out, m.claimLocked(n, lease, now), nil
}

func (m *memLedger) Claim(_ context.Context, n int, lease time.Duration) ([]ledger.Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claimLocked(n, lease, time.Now()), nil
}

// held returns c's record if c still holds it (m.mu held).
func (m *memLedger) held(c ledger.Claim) (*ledger.Record, error) {
	r := m.recs[[2]string{c.Bucket, c.Ident}]
	if r == nil || r.Status != ledger.Claimed || r.Token != c.Token {
		return nil, ledger.ErrLeaseLost
	}
	return r, nil
}

func (m *memLedger) CompleteBatch(_ context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	errs := make([]error, len(cs))
	for i, c := range cs {
		r, err := m.held(c)
		if errs[i] = err; err != nil {
			continue
		}
		r.Status, r.Result, r.LeaseUntil, r.Updated = ledger.Processed, results[i], time.Time{}, now
		if r.Gen != r.RunGen { // newer work arrived while it ran
			r.Status, r.Attempts, r.NextAttempt = ledger.Pending, 0, now
			m.due = append(m.due, [2]string{c.Bucket, c.Ident})
		}
	}
	return errs, nil
}

func (m *memLedger) Complete(ctx context.Context, c ledger.Claim, result string) error {
	errs, err := m.CompleteBatch(ctx, []ledger.Claim{c}, []string{result})
	if err != nil {
		return err
	}
	return errs[0]
}

func (m *memLedger) Renew(_ context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(c)
	if err != nil {
		return ledger.Claim{}, err
	}
	r.LeaseUntil = time.Now().Add(lease)
	return ledger.Claim{Record: *r, Ident: c.Ident}, nil
}

// Release and Fail put the work back as pending at once (no backoff, no
// dead letters: the bench's handler does not fail).
func (m *memLedger) Release(_ context.Context, c ledger.Claim) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(c)
	if err != nil {
		return err
	}
	r.Status, r.LeaseUntil, r.NextAttempt = ledger.Pending, time.Time{}, time.Now()
	m.due = append(m.due, [2]string{c.Bucket, c.Ident})
	return nil
}

func (m *memLedger) Fail(ctx context.Context, c ledger.Claim, _ string, _ bool) error {
	return m.Release(ctx, c)
}

func (m *memLedger) Counts(context.Context) (ledger.Counts, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	counts := ledger.Counts{}
	for _, r := range m.recs {
		counts[r.Status]++
	}
	return counts, nil
}

func (m *memLedger) Ping(context.Context) error { return nil }
func (m *memLedger) Close() error               { return nil }

func (m *memLedger) Lookup(context.Context, string, []string) (map[string]ledger.Record, error) {
	return nil, errMemLedger
}
func (m *memLedger) Get(context.Context, string, string) ([]ledger.Record, error) {
	return nil, errMemLedger
}
func (m *memLedger) List(context.Context, ledger.Filter) ([]ledger.Claim, error) {
	return nil, errMemLedger
}
func (m *memLedger) Replay(context.Context, ledger.Selection) (int, error) { return 0, errMemLedger }
func (m *memLedger) Purge(context.Context, time.Time, bool) (int, error)   { return 0, errMemLedger }
func (m *memLedger) OldestPending(context.Context) (time.Time, error) {
	return time.Time{}, errMemLedger
}
