package objledger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

var _ ledger.Backend = (*Backend)(nil)

// RecordAndClaim records evs, deciding each (see driver.Decide), and claims up
// to n records in the same shard writes, as Claim would in those shards: the
// earliest due first, so work that was due before this batch comes before
// the batch's own (n = 0: record only, what ledger.Ledger.Record is). Each
// shard the batch touches claims at most as many as the batch has distinct
// records in it among its first n, and an even share of what n leaves over
// (work earlier batches left unclaimed, older work); shards it does not touch
// are left to Claim.
func (l *Backend) RecordAndClaim(ctx context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]ledger.Decision, []ledger.Claim, error) {
	if l.opts.EveryVersion {
		n = 0 // versions of a key must run oldest first: leave it to Claim
	}
	return l.record(ctx, source, evs, n, lease)
}

func (l *Backend) record(ctx context.Context, source string, evs []event.Event, claimN int, lease time.Duration) ([]ledger.Decision, []ledger.Claim, error) {
	out := make([]ledger.Decision, len(evs))
	byShard := map[int][]int{}
	budget := map[int]int{} // claims each shard may make: the first claimN ids in delivery order
	ids := map[string]bool{}
	for i, ev := range evs {
		out[i] = ledger.Decision{Outcome: ledger.Ignored, Bucket: ev.Bucket, Key: ev.Key, Seq: ev.Sequencer}
		if ev.Ignorable() {
			continue
		}
		s := shardOf(ev.Bucket, ev.Key, l.shards)
		byShard[s] = append(byShard[s], i)
		if rid := id(ev.Bucket, driver.Ident(ev, l.opts.EveryVersion)); !ids[rid] {
			ids[rid] = true
			if len(ids) <= claimN {
				budget[s]++
			}
		}
	}
	if len(byShard) == 0 {
		return out, nil, nil
	}
	shards := slices.Sorted(maps.Keys(byShard))
	// The rest of n, shared evenly among the shards written: work earlier
	// batches left unclaimed (or older work) is taken in the same writes.
	if rest := claimN - len(ids); rest > 0 {
		for i, s := range shards {
			budget[s] += rest / len(shards)
			if i < rest%len(shards) {
				budget[s]++
			}
		}
	}
	type shardResult struct {
		claims []ledger.Claim
		due    int64
		work   bool
	}
	res := make([]shardResult, l.shards)
	err := l.eachShard(shards, func(s int) error {
		idx := byShard[s]
		// The committed run's results: read only once update returns, as
		// committed. A write that may land late (update's error) is still
		// being committed by a goroutine that runs op on: its results are
		// never read.
		outcomes := make([]ledger.Outcome, len(idx))
		var claimed []ledger.Claim
		h, err := l.update(ctx, s, func(h *head, now int64) error {
			nowT := time.UnixMilli(now)
			for j, i := range idx {
				ev := evs[i]
				rid := id(ev.Bucket, driver.Ident(ev, l.opts.EveryVersion))
				var cur *ledger.Record
				if w := h.get(rid); w != nil {
					rec := w.record()
					cur = &rec
				}
				o, next := driver.Decide(cur, ev, source, nowT, l.opts.EveryVersion)
				outcomes[j] = o
				if next != nil {
					h.put(rid, toRow(driver.Ident(ev, l.opts.EveryVersion), next))
				}
			}
			claimed = l.claimIn(h, now, budget[s], lease)
			return nil
		})
		if err != nil {
			// Not written (or it may land late): its claims carry the tokens
			// another claimer of the same rows may hold now, so they are
			// neither returned nor released (a late write's wait out their
			// lease, as Claim's do).
			return err
		}
		for j, i := range idx {
			out[i].Outcome = outcomes[j]
		}
		res[s].claims = claimed
		res[s].due, res[s].work = h.Work.min()
		return nil
	})
	var claims []ledger.Claim
	due := map[int]int64{}
	for _, s := range shards {
		claims = append(claims, res[s].claims...)
		if res[s].work {
			due[s] = res[s].due
		}
	}
	// The index entries are lowered after the shard writes, in the
	// background (Claim in this process visits those shards meanwhile).
	l.hintLater(due)
	if err != nil {
		// Claims made by the shards that committed would otherwise wait out
		// their lease: give them back (the others' are gone: see above).
		for _, c := range claims {
			_ = l.Release(context.WithoutCancel(ctx), c)
		}
		return nil, nil, l.wrap("record", err)
	}
	driver.SortClaims(claims)
	return out, claims, nil
}

// claimRow is w claimed: a new token, a lease, one more attempt. keyMax is
// the highest token of w's key's rows (EveryVersion: see
// driver.VersionToken; 0 otherwise).
func claimRow(w *row, now int64, lease time.Duration, keyMax int64) *row {
	n := *w
	n.Status, n.Token, n.LeaseUntil, n.Attempts, n.RunGen, n.Updated = string(ledger.Claimed), driver.VersionToken(w.Token, keyMax, now), now+lease.Milliseconds(), w.Attempts+1, w.Gen, now
	return &n
}

// keyTokens returns the highest token of every key of h that has work (the
// keys of byKey), over all its rows, done ones included: one pass over the
// shard's rows in memory, made by a claim with EveryVersion before its first
// claim of the shard (no request: the head and its segments are read
// already).
func keyTokens(h *head, byKey map[string][]*row) map[string]int64 {
	m := make(map[string]int64, len(byKey))
	h.each(func(_ string, w *row) {
		k := w.Bucket + "/" + w.Key
		if _, ok := byKey[k]; ok {
			m[k] = max(m[k], w.Token)
		}
	})
	return m
}

// claimable reports whether w's work can be claimed at now.
func claimable(w *row, now int64) bool {
	switch ledger.Status(w.Status) {
	case ledger.Pending, ledger.Failed:
		return w.NextAttempt <= now
	case ledger.Claimed:
		return w.LeaseUntil < now
	}
	return false
}

// claimIn claims up to n due records of h, earliest due first (then by id).
func (l *Backend) claimIn(h *head, now int64, n int, lease time.Duration) []ledger.Claim {
	if n <= 0 {
		return nil
	}
	var byKey map[string][]*row
	if l.opts.EveryVersion {
		byKey = map[string][]*row{}
		h.Work.ids(func(rid string) bool {
			if w := h.get(rid); w != nil {
				byKey[w.Bucket+"/"+w.Key] = append(byKey[w.Bucket+"/"+w.Key], w)
			}
			return true
		})
	}
	var tokens map[string]int64 // keyTokens, read before the first claim (EveryVersion)
	var out []ledger.Claim
	// A shard's backlog can be large and only n are wanted: the first pass
	// takes the earliest 2n+8 due (some may not be claimable: blocked
	// versions); only if that falls short while more were due does a second
	// pass go through all of them.
	for _, k := range []int{2*n + 8, -1} {
		cs, more := h.Work.earliest(now, k)
		for _, c := range cs {
			w := h.get(c.id)
			if w == nil {
				h.Work.del(c.id) // no record behind the entry: drop it
				continue
			}
			if !claimable(w, now) {
				continue
			}
			if l.opts.EveryVersion && blocked(w, byKey[w.Bucket+"/"+w.Key], now) {
				continue
			}
			var keyMax int64
			if byKey != nil {
				if tokens == nil {
					tokens = keyTokens(h, byKey)
				}
				keyMax = tokens[w.Bucket+"/"+w.Key]
			}
			nw := claimRow(w, now, lease, keyMax)
			h.put(c.id, nw)
			if byKey != nil {
				tokens[w.Bucket+"/"+w.Key] = max(keyMax, nw.Token)
				k := byKey[w.Bucket+"/"+w.Key]
				for i := range k {
					if k[i] == w {
						k[i] = nw
					}
				}
			}
			out = append(out, nw.claim())
			if len(out) >= n {
				return out
			}
		}
		if !more {
			break
		}
	}
	return out
}

// cand is a work entry: a row's id and due time.
type cand struct {
	id  string
	due int64
}

// blocked: another version of w's key is claimed with a live lease, or waits
// with an older sequencer (versions run oldest first, one at a time).
func blocked(w *row, others []*row, now int64) bool {
	mine := driver.SortSeq(w.Seq)
	for _, o := range others {
		if o.ident() == w.ident() {
			continue
		}
		if (o.Status == string(ledger.Claimed) && o.LeaseUntil >= now) || driver.SortSeq(o.Seq) < mine {
			return true
		}
	}
	return false
}

// Claim leases up to n records of work: pending or failed records whose retry
// time has come, and claimed records whose lease expired. It visits only
// shards the work index says have due work (every shard on a sweep), in
// parallel, claiming in each with a compare-and-swap of its head (which tells
// it the shard's true earliest due time). An entry left too low only costs
// later visits; one raised too high would hide work, so raising is guarded by
// marks: shards the claim may leave with nothing due are marked in the same
// index write that reads which are due, and afterwards their entries are set
// to the time the claim read, only where the mark survived (a writer that
// reads the index after its shard write removes the mark, so a claim that
// read the shard before that write can never hide its work). Shards that
// were not expected to empty and did are raised by raise.
//
// The steps, each a method of claimRun: plan (one index write: the
// candidate shards, their budgets, their marks), visitRounds (claim in the
// shards, at most maxClaimRounds rounds), collect (the claims, the first
// error, the shards found empty), settleIndex (the marked entries set to
// the truth read), then raise for the shards found empty.
func (l *Backend) Claim(ctx context.Context, n int, lease time.Duration) ([]ledger.Claim, error) {
	c := l.newClaimRun(n, lease)
	if err := l.updateIndex(ctx, c.plan); err != nil {
		return nil, l.wrap("claim", err)
	}
	if len(c.cands) == 0 {
		return nil, nil
	}
	c.visitRounds(ctx)
	out, empty, claimErr := c.collect()
	werr := l.updateIndex(ctx, c.settleIndex)
	if werr == nil && len(empty) > 0 {
		werr = l.raise(ctx, empty)
	}
	if claimErr == nil && werr == nil && c.sweep {
		l.mu.Lock()
		l.swept = time.Now()
		l.mu.Unlock()
	}
	if len(out) == 0 && claimErr != nil {
		return nil, l.wrap("claim", claimErr)
	}
	// Claims made are returned even if setting an entry failed (it stays
	// low: only extra visits later).
	driver.SortClaims(out)
	return out, nil
}

// claimRun is one Claim's state from one step to the next.
type claimRun struct {
	l     *Backend
	n     int
	lease time.Duration
	// mark is this claim's mark in the index; sweep: every shard is a
	// candidate (Options.SweepEvery has passed since the last sweep);
	// hinted are the shards whose hints are not in the index yet.
	mark   string
	sweep  bool
	hinted map[int]int64
	// cands are the candidate shards (plan's order), vs what the claim
	// knows of each shard (by shard number).
	cands []int
	vs    []shardVisit
}

// shardVisit is what one Claim knows of one candidate shard.
type shardVisit struct {
	claims  []ledger.Claim // taken in the shard so far
	budget  int            // how many its next visit may take
	marked  bool           // marked in plan's index write
	visited bool           // its head was read (and written) by this claim
	due     int64          // its earliest due time, as last read (if work)
	work    bool           // it held work when last read
	ready   int            // due records in the head as last read
	err     error          // the last visit's failure
}

// newClaimRun takes a fresh mark and reads whether this claim sweeps and
// which shards have hints not in the index yet.
func (l *Backend) newClaimRun(n int, lease time.Duration) *claimRun {
	c := &claimRun{l: l, n: n, lease: lease, mark: nonce(), vs: make([]shardVisit, l.shards)}
	l.mu.Lock()
	c.sweep = time.Since(l.swept) >= l.cfg.SweepEvery
	l.mu.Unlock()
	c.hinted = l.pendingHints() // not in the index yet
	return c
}

// plan is the index update that starts a claim (run again from the start if
// the update is retried): the candidates are the shards the index (or a
// pending hint) says have due work, every shard on a sweep, in random order.
// Budgets: n in all, spread by what this process last saw of each shard
// (its cached head), evenly where it saw nothing; rounds after the first
// (see visitRounds) budget by the heads read. Shards the claim may leave
// with nothing due (as far as this process knows) are marked in the same
// index write; the others are not, and an index that needs no mark is only
// read (plan reports whether it changed x).
func (c *claimRun) plan(x *index) bool {
	now := c.l.now()
	c.cands = c.cands[:0]
	clear(c.vs)
	for s := range c.l.shards {
		hd, hok := c.hinted[s]
		if d, ok := x.Due[shardName(s)]; c.sweep || (hok && hd <= now) || (ok && d <= now) {
			c.cands = append(c.cands, s)
		}
	}
	rand.Shuffle(len(c.cands), func(i, j int) { c.cands[i], c.cands[j] = c.cands[j], c.cands[i] })
	left := c.n
	var unknown []int
	for _, s := range c.cands {
		if e, ok := c.l.dueEstimate(s, left+1); ok {
			c.vs[s].budget = min(e, left)
			c.vs[s].marked = c.sweep || e <= left
			left -= c.vs[s].budget
		} else {
			unknown = append(unknown, s)
		}
	}
	c.spread(unknown, left)
	changed := false
	for _, s := range unknown {
		c.vs[s].marked = true
	}
	for _, s := range c.cands {
		if c.vs[s].marked {
			x.Mark[shardName(s)] = c.mark
			changed = true
		}
	}
	return changed
}

// spread gives shards even budgets summing to left.
func (c *claimRun) spread(shards []int, left int) {
	for i, s := range shards {
		c.vs[s].budget = (left + len(shards) - 1 - i) / (len(shards) - i)
		left -= c.vs[s].budget
	}
}

// visit claims in shards, in parallel, each up to its budget, with a
// compare-and-swap of its head, and records what each head said: its
// earliest due time and how many records are due (a failed visit records
// its error only).
func (c *claimRun) visit(ctx context.Context, shards []int) {
	l := c.l
	_ = l.eachShard(shards, func(s int) error {
		v := &c.vs[s]
		var got []ledger.Claim
		h, err := l.update(ctx, s, func(h *head, now int64) error {
			got = l.claimIn(h, now, v.budget, c.lease)
			return nil
		})
		if err != nil {
			v.err = err
			return nil
		}
		v.claims = append(v.claims, got...)
		v.visited = true
		v.due, v.work = h.Work.min()
		v.ready = h.Work.dueBy(l.now(), c.n) // rounds budget at most n
		if len(got) < v.budget {
			v.ready = 0 // it claimed all it could: the rest due are blocked versions
		}
		return nil
	})
}

// visitRounds visits the candidates in rounds: the first visits the shards
// the estimates give a budget (every candidate on a sweep). While the claim
// is short, the next visits the shards whose heads, as just read, still hold
// due work (budgets by those counts) and the candidates not visited yet (the
// rest spread evenly, zero budgets included: the visit reads the head, so
// the round after knows its count). An estimate is this process's cached
// head, which misses other processes' writes: by the third round every
// budget comes from a head read during this claim, so a claim is short only
// of work that is not there (or that a concurrent claimer took).
func (c *claimRun) visitRounds(ctx context.Context) {
	var next []int
	for _, s := range c.cands {
		if c.sweep || c.vs[s].budget > 0 {
			next = append(next, s)
		}
	}
	for round := 0; ; round++ {
		if len(next) > 0 { // (eachShard takes nil for every shard)
			c.visit(ctx, next)
		}
		left := c.n - c.claimed()
		if left <= 0 || round == maxClaimRounds-1 {
			return
		}
		if next = c.nextRound(next[:0], left); len(next) == 0 {
			return
		}
	}
}

// claimed is how many claims the visits took so far.
func (c *claimRun) claimed() int {
	total := 0
	for _, s := range c.cands {
		total += len(c.vs[s].claims)
	}
	return total
}

// nextRound appends to next the shards the next round visits, with their
// budgets (left in all): those whose heads still hold due work, then those
// not visited yet (a shard whose visit failed is not visited again).
func (c *claimRun) nextRound(next []int, left int) []int {
	var unknown []int
	for _, s := range c.cands {
		switch v := &c.vs[s]; {
		case v.err != nil:
		case !v.visited:
			unknown = append(unknown, s)
		case v.ready > 0 && left > 0:
			v.budget = min(v.ready, left)
			left -= v.budget
			next = append(next, s)
		}
	}
	c.spread(unknown, left)
	return append(next, unknown...)
}

// collect gathers the claims, lists the shards to raise (visited, not
// marked, and nothing due now), and returns the first visit's error.
func (c *claimRun) collect() (out []ledger.Claim, empty []int, err error) {
	now := c.l.now()
	for _, s := range c.cands {
		v := c.vs[s]
		out = append(out, v.claims...)
		err = cmp.Or(err, v.err)
		if v.visited && !v.marked && (c.sweep || !v.work || v.due > now) {
			empty = append(empty, s)
		}
	}
	return out, empty, err
}

// settleIndex is the index update that ends a claim: every marked entry
// whose mark survived is set to the truth read after the mark (and the
// marks of shards not visited are removed).
func (c *claimRun) settleIndex(x *index) bool {
	changed := false
	for _, s := range c.cands {
		name := shardName(s)
		if !c.vs[s].marked || x.Mark[name] != c.mark {
			continue
		}
		delete(x.Mark, name)
		changed = true
		switch v := c.vs[s]; {
		case !v.visited: // unknown: leave the entry as it was
		case v.work:
			x.Due[name] = v.due
		default:
			delete(x.Due, name)
		}
	}
	return changed
}

// dueEstimate is how many records of shard s (up to limit) were due when
// this process last read or wrote its head (ok false if it has not).
func (l *Backend) dueEstimate(s, limit int) (int, bool) {
	l.mu.Lock()
	h := l.heads[s].h
	l.mu.Unlock()
	if h == nil {
		return 0, false
	}
	return h.Work.dueBy(l.now(), limit), true
}

// maxClaimRounds bounds the rounds of shard visits in one Claim (see there).
const maxClaimRounds = 3

// raise sets the index entries of shards to their true earliest due time,
// safely against concurrent writers: it marks the shards, reads them, and
// writes each entry only where its mark survived (a writer that reads the
// index after its shard write removes the mark, so a read from before that
// write can never hide its work).
func (l *Backend) raise(ctx context.Context, shards []int) error {
	mark := nonce()
	if err := l.updateIndex(ctx, func(x *index) bool {
		for _, s := range shards {
			x.Mark[shardName(s)] = mark
		}
		return true
	}); err != nil {
		return err
	}
	type seen struct {
		due  int64
		work bool
	}
	truth := make([]seen, l.shards)
	read := make([]bool, l.shards)
	err := l.eachShard(shards, func(s int) error {
		h, err := l.view(ctx, s)
		if err != nil {
			return err
		}
		truth[s].due, truth[s].work = h.Work.min()
		read[s] = true
		return nil
	})
	werr := l.updateIndex(ctx, func(x *index) bool {
		changed := false
		for _, s := range shards {
			name := shardName(s)
			if x.Mark[name] != mark {
				continue
			}
			delete(x.Mark, name)
			changed = true
			switch {
			case !read[s]: // unknown: leave the entry as it was
			case truth[s].work:
				x.Due[name] = truth[s].due
			default:
				delete(x.Due, name)
			}
		}
		return changed
	})
	return cmp.Or(err, werr)
}

func decodeIndex(data []byte) (*index, error) {
	x := &index{}
	if len(data) > 0 {
		if err := decodeJSON(data, x, indexKey); err != nil {
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
	}
	if x.Due == nil {
		x.Due = map[string]int64{}
	}
	if x.Mark == nil {
		x.Mark = map[string]string{}
	}
	return x, nil
}

// updateIndex applies fn to the work index (group-committed); fn reports
// whether it changed anything (no write if not).
func (l *Backend) updateIndex(ctx context.Context, fn func(x *index) bool) error {
	_, _, err := l.d.UpdateJSON(ctx, indexKey, func(cur []byte, _ docstore.Meta) ([]byte, error) {
		x, err := decodeIndex(cur)
		if err != nil {
			return nil, err
		}
		if !fn(x) && len(cur) > 0 {
			return cur, nil
		}
		return json.Marshal(x)
	})
	return err
}

// hintLater has the hinter run ensureHints for due (the shards a write left
// with work, and their earliest due times): Record returns once its shard
// writes are durable, without waiting for the index. Until the index holds
// them, Claim in this process treats those shards as due (see pendingHints).
func (l *Backend) hintLater(due map[int]int64) {
	if len(due) == 0 {
		return
	}
	l.mu.Lock()
	for s, d := range due {
		l.hintGen++
		h, ok := l.hints[s]
		if !ok || d < h.due {
			h.due = d
		}
		h.gen = l.hintGen
		l.hints[s] = h
	}
	l.mu.Unlock()
	select {
	case l.hintWake <- struct{}{}:
	default:
	}
}

// pendingHints are the shards whose index entries the hinter has not
// lowered yet.
func (l *Backend) pendingHints() map[int]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]int64, len(l.hints))
	for s, h := range l.hints {
		out[s] = h.due
	}
	return out
}

// hintTimeout bounds one write of the hints, and the last one at Close.
const hintTimeout = 10 * time.Second

// hintLinger is how long the hinter waits after a wake, so that the hints of
// the Records that follow share its index update: each update reads the
// index (a conditional write would not see a claimer's mark), so with a
// pipeline's stream of Records, one update per Record would be a large share
// of the store's requests. It delays only other processes' view of the
// new work: this process's Claims visit the hinted shards meanwhile, and
// other processes' claimers poll the index (once a second by default).
const hintLinger = 50 * time.Millisecond

// hinter writes the hints (one group-committed index update for all that
// are waiting, hintLinger after the first wakes it), retrying failures with
// backoff, until Close, which gets one last attempt, at once. A process
// killed first leaves entries too high: sweeps repair them (see
// Options.SweepEvery).
func (l *Backend) hinter() {
	for attempt := 0; ; {
		closing := false
		select {
		case <-l.hintWake:
			t := time.NewTimer(time.Duration(l.hintWait.Load()))
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				closing = true
			}
		case <-l.ctx.Done():
			closing = true
		}
		l.mu.Lock()
		batch := maps.Clone(l.hints)
		l.mu.Unlock()
		if len(batch) > 0 {
			due := make(map[int]int64, len(batch))
			for s, h := range batch {
				due[s] = h.due
			}
			ctx, cancel := context.WithTimeout(context.Background(), hintTimeout)
			err := l.ensureHints(ctx, due)
			cancel()
			l.mu.Lock()
			if err == nil {
				for s, h := range batch {
					if l.hints[s].gen == h.gen { // not asked again meanwhile
						delete(l.hints, s)
					}
				}
			}
			more := len(l.hints) > 0
			l.mu.Unlock()
			switch {
			case err != nil && !closing:
				l.cfg.Logger.Warn("ledger: lowering work index entries failed; retrying", "shards", len(batch), "err", err)
				_ = readBackoff.Wait(l.ctx, attempt)
				attempt++
			case err == nil:
				attempt = 0
			}
			if more && !closing {
				select {
				case l.hintWake <- struct{}{}:
				default:
				}
			}
		}
		if closing {
			return
		}
	}
}

// ensureHints is the writer's side of the index protocol, run after shard
// writes that leave work: each shard's entry is made no later than its
// earliest due work, and any claimer's mark on it is removed (so a claimer
// that read the shard before this write cannot raise the entry past it).
func (l *Backend) ensureHints(ctx context.Context, due map[int]int64) error {
	if len(due) == 0 {
		return nil
	}
	return l.updateIndex(ctx, func(x *index) bool {
		changed := false
		for s, d := range due {
			name := shardName(s)
			if v, ok := x.Due[name]; !ok || v > d {
				x.Due[name] = d
				changed = true
			}
			if _, ok := x.Mark[name]; ok {
				delete(x.Mark, name)
				changed = true
			}
		}
		return changed
	})
}

// errCompleted is the answer to a Complete of a record its claim's token
// has completed already (processed, and no one claimed it since): a retry of
// a Complete whose response was lost or came late. It changes nothing, and
// the call succeeds.
var errCompleted = errors.New("completed already by this token")

// guard checks that c still holds its record: it exists, has c's token, is
// claimed and the lease has not expired.
func guard(op string, c ledger.Claim, w *row, now int64) error {
	switch {
	case op == "complete" && w != nil && w.Token == c.Token && w.Status == string(ledger.Processed):
		return errCompleted
	case w == nil:
		return fmt.Errorf("%s %s/%s: %w", op, c.Bucket, c.Key, ledger.ErrNotFound)
	case w.Token != c.Token:
		return fmt.Errorf("%s %s/%s with token %d (current %d): %w", op, c.Bucket, c.Key, c.Token, w.Token, ledger.ErrSuperseded)
	case w.Status != string(ledger.Claimed) || w.LeaseUntil < now:
		return fmt.Errorf("%s %s/%s with token %d: %w", op, c.Bucket, c.Key, c.Token, ledger.ErrLeaseLost)
	}
	return nil
}

// finish applies a guarded change to c's record and keeps the work index in
// step when the record is left with work to do.
func (l *Backend) finish(ctx context.Context, op string, c ledger.Claim, apply func(w *row, now int64)) error {
	s := shardOf(c.Bucket, c.Key, l.shards)
	rid := id(c.Bucket, c.Ident)
	h, err := l.update(ctx, s, func(h *head, now int64) error {
		w := h.get(rid)
		if err := guard(op, c, w, now); err != nil {
			return err
		}
		n := *w
		apply(&n, now)
		n.Updated = now
		h.put(rid, &n)
		return nil
	})
	if err != nil {
		return l.wrap(op, err)
	}
	if w := h.get(rid); w != nil && w.Status != string(ledger.Claimed) {
		if _, has := w.due(); has {
			d, _ := h.Work.min()
			return l.wrap(op, l.ensureHints(ctx, map[int]int64{s: d}))
		}
	}
	return nil
}

// Renew extends the claim's lease.
func (l *Backend) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	var until int64
	err := l.finish(ctx, "renew", c, func(w *row, now int64) {
		w.LeaseUntil = now + lease.Milliseconds()
		until = w.LeaseUntil
	})
	if err == nil {
		c.LeaseUntil = fromMS(until)
	}
	return c, err
}

func complete(w *row, result string, now int64) {
	if w.Gen == w.RunGen {
		w.Status = string(ledger.Processed)
	} else {
		w.Status, w.Attempts = string(ledger.Pending), 0 // newer work arrived while it ran
	}
	w.Result, w.LastError, w.LeaseUntil, w.NextAttempt = result, "", 0, now
}

// Complete records the claim's work as processed (or, if newer work arrived
// while it ran, makes the record pending again).
//
// A Complete by a token of a record that token completed already succeeds
// and changes nothing: it is the retry of a Complete whose answer was lost.
func (l *Backend) Complete(ctx context.Context, c ledger.Claim, result string) error {
	err := l.finish(ctx, "complete", c, func(w *row, now int64) { complete(w, result, now) })
	if errors.Is(err, errCompleted) {
		return nil
	}
	return err
}

// CompleteBatch completes claims with one write per shard.
func (l *Backend) CompleteBatch(ctx context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	errs := make([]error, len(cs))
	byShard := map[int][]int{}
	for i, c := range cs {
		s := shardOf(c.Bucket, c.Key, l.shards)
		byShard[s] = append(byShard[s], i)
	}
	shards := slices.Collect(maps.Keys(byShard))
	requeued := make([]bool, l.shards)
	due := make([]int64, l.shards)
	err := l.eachShard(shards, func(s int) error {
		h, err := l.update(ctx, s, func(h *head, now int64) error {
			requeued[s] = false
			for _, i := range byShard[s] {
				c := cs[i]
				rid := id(c.Bucket, c.Ident)
				w := h.get(rid)
				if errs[i] = guard("complete", c, w, now); errs[i] != nil {
					if errors.Is(errs[i], errCompleted) {
						errs[i] = nil // done already: nothing to change
					}
					continue
				}
				n := *w
				complete(&n, results[i], now)
				n.Updated = now
				h.put(rid, &n)
				if n.Status == string(ledger.Pending) {
					requeued[s] = true
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		due[s], _ = h.Work.min()
		return nil
	})
	if err != nil {
		return nil, l.wrap("complete", err)
	}
	hints := map[int]int64{}
	for _, s := range shards {
		if requeued[s] {
			hints[s] = due[s]
		}
	}
	return errs, l.wrap("complete", l.ensureHints(ctx, hints))
}

// Release gives the claim's work back without counting the attempt.
func (l *Backend) Release(ctx context.Context, c ledger.Claim) error {
	return l.finish(ctx, "release", c, func(w *row, now int64) {
		same := w.Gen == w.RunGen
		if w.Attempts > 1 && same {
			w.Status = string(ledger.Failed)
		} else {
			w.Status = string(ledger.Pending)
		}
		if w.Attempts > 0 && same {
			w.Attempts--
		} else {
			w.Attempts = 0
		}
		w.LeaseUntil, w.NextAttempt = 0, now
	})
}

// Fail records a failed attempt: retried after a backoff if retryable and
// attempts remain, else dead. If newer work arrived meanwhile, that work is
// pending instead.
func (l *Backend) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	status := ledger.Dead
	if retryable && c.Attempts < l.opts.MaxAttempts {
		status = ledger.Failed
	}
	backoff := driver.Backoff(l.opts, c.Attempts).Milliseconds()
	return l.finish(ctx, "fail", c, func(w *row, now int64) {
		if w.Gen != w.RunGen {
			w.Status, w.Attempts, w.NextAttempt = string(ledger.Pending), 0, now
		} else {
			w.Status, w.NextAttempt = string(status), now+backoff
		}
		w.LastError, w.LeaseUntil = cause, 0
	})
}

// views reads every shard concurrently.
func (l *Backend) views(ctx context.Context) ([]*head, error) {
	hs := make([]*head, l.shards)
	err := l.eachShard(nil, func(s int) error {
		h, err := l.view(ctx, s)
		hs[s] = h
		return err
	})
	return hs, err
}

// Lookup returns the newest record of each of keys in bucket.
func (l *Backend) Lookup(ctx context.Context, bucket string, keys []string) (map[string]ledger.Record, error) {
	byShard := map[int][]string{}
	for _, k := range keys {
		s := shardOf(bucket, k, l.shards)
		byShard[s] = append(byShard[s], k)
	}
	shards := slices.Collect(maps.Keys(byShard))
	found := make([]map[string]ledger.Record, l.shards)
	err := l.eachShard(shards, func(s int) error {
		h, err := l.view(ctx, s)
		if err != nil {
			return err
		}
		m := map[string]ledger.Record{}
		if !l.opts.EveryVersion {
			for _, k := range byShard[s] {
				if w := h.get(id(bucket, k)); w != nil {
					m[k] = w.record()
				}
			}
		} else {
			want := map[string]bool{}
			for _, k := range byShard[s] {
				want[k] = true
			}
			h.each(func(_ string, w *row) {
				if w.Bucket == bucket && want[w.Key] {
					if prev, ok := m[w.Key]; !ok || event.CompareSequencer(w.Seq, prev.Seq) > 0 {
						m[w.Key] = w.record()
					}
				}
			})
		}
		found[s] = m
		return nil
	})
	if err != nil {
		return nil, l.wrap("lookup", err)
	}
	out := map[string]ledger.Record{}
	for _, m := range found {
		for k, r := range m {
			out[k] = r
		}
	}
	return out, nil
}

// Get returns the records of one key (one, unless EveryVersion).
func (l *Backend) Get(ctx context.Context, bucket, key string) ([]ledger.Record, error) {
	h, err := l.view(ctx, shardOf(bucket, key, l.shards))
	if err != nil {
		return nil, l.wrap("get", err)
	}
	var rows []*row
	if l.opts.EveryVersion {
		h.each(func(_ string, w *row) {
			if w.Bucket == bucket && w.Key == key {
				rows = append(rows, w)
			}
		})
	} else if w := h.get(id(bucket, key)); w != nil {
		rows = append(rows, w)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s/%s: %w", bucket, key, ledger.ErrNotFound)
	}
	slices.SortFunc(rows, func(a, b *row) int {
		return cmp.Or(strings.Compare(driver.SortSeq(a.Seq), driver.SortSeq(b.Seq)), strings.Compare(a.ident(), b.ident()))
	})
	out := make([]ledger.Record, len(rows))
	for i, w := range rows {
		out[i] = w.record()
	}
	return out, nil
}

// List pages through records in (bucket, ident) order.
func (l *Backend) List(ctx context.Context, f ledger.Filter) ([]ledger.Claim, error) {
	if f.Bucket != "" && f.AfterBucket > f.Bucket {
		return nil, nil // the cursor is past the bucket
	}
	hs, err := l.views(ctx)
	if err != nil {
		return nil, l.wrap("list", err)
	}
	cursor := &row{Bucket: f.AfterBucket, Key: f.AfterIdent}
	var rows []*row
	for _, h := range hs {
		h.each(func(_ string, w *row) {
			switch {
			case f.Bucket != "" && w.Bucket != f.Bucket,
				f.Status != "" && w.Status != string(f.Status),
				f.Prefix != "" && !strings.HasPrefix(w.Key, f.Prefix),
				f.Through != "" && w.Key > f.Through,
				less(w, cursor) <= 0:
				return
			}
			rows = append(rows, w)
		})
	}
	slices.SortFunc(rows, less)
	rows = rows[:min(len(rows), f.Limit)]
	out := make([]ledger.Claim, len(rows))
	for i, w := range rows {
		out[i] = w.claim()
	}
	return out, nil
}

// Counts returns how many records have each status.
func (l *Backend) Counts(ctx context.Context) (ledger.Counts, error) {
	hs, err := l.views(ctx)
	if err != nil {
		return nil, l.wrap("counts", err)
	}
	out := ledger.Counts{}
	for _, h := range hs {
		h.each(func(_ string, w *row) { out[ledger.Status(w.Status)]++ })
	}
	return out, nil
}

// OldestPending is since when the oldest pending work has waited.
func (l *Backend) OldestPending(ctx context.Context) (time.Time, error) {
	hs, err := l.views(ctx)
	if err != nil {
		return time.Time{}, l.wrap("oldest pending", err)
	}
	var oldest int64
	for _, h := range hs {
		h.Work.ids(func(rid string) bool {
			if w := h.get(rid); w != nil && w.Status == string(ledger.Pending) && (oldest == 0 || w.NextAttempt < oldest) {
				oldest = w.NextAttempt
			}
			return true
		})
	}
	return fromMS(oldest), nil
}

func selected(sel ledger.Selection, statuses []ledger.Status, w *row) bool {
	return slices.Contains(statuses, ledger.Status(w.Status)) &&
		(sel.Bucket == "" || w.Bucket == sel.Bucket) && (sel.Key == "" || w.Key == sel.Key) &&
		(sel.Prefix == "" || strings.HasPrefix(w.Key, sel.Prefix)) &&
		(sel.UpdatedSince.IsZero() || w.Updated >= ms(sel.UpdatedSince))
}

// Replay makes selected records pending again as an explicit replay.
func (l *Backend) Replay(ctx context.Context, sel ledger.Selection) (int, error) {
	statuses := sel.Statuses
	var shards []int // nil: all
	if sel.Key != "" && sel.Bucket != "" {
		shards = []int{shardOf(sel.Bucket, sel.Key, l.shards)}
	}
	counts := make([]int, l.shards)
	hints := make([]int64, l.shards)
	err := l.eachShard(shards, func(s int) error {
		if sel.DryRun {
			h, err := l.view(ctx, s)
			if err != nil {
				return err
			}
			h.each(func(_ string, w *row) {
				if selected(sel, statuses, w) {
					counts[s]++
				}
			})
			return nil
		}
		h, err := l.update(ctx, s, func(h *head, now int64) error {
			var picked []string
			h.each(func(rid string, w *row) {
				if selected(sel, statuses, w) {
					picked = append(picked, rid)
				}
			})
			for _, rid := range picked {
				n := *h.get(rid)
				n.Status, n.Attempts, n.NextAttempt, n.Updated, n.LastError, n.LeaseUntil, n.Replays, n.Gen = string(ledger.Pending), 0, now, now, "", 0, n.Replays+1, n.Gen+1
				h.put(rid, &n)
			}
			counts[s] = len(picked)
			return nil
		})
		if err != nil {
			return err
		}
		hints[s], _ = h.Work.min()
		return nil
	})
	total := 0
	due := map[int]int64{}
	for s, n := range counts {
		total += n
		if n > 0 && !sel.DryRun {
			due[s] = hints[s]
		}
	}
	if err == nil {
		err = l.ensureHints(ctx, due)
	}
	return total, l.wrap("replay", err)
}

// Purge deletes finished records last updated before olderThan.
func (l *Backend) Purge(ctx context.Context, olderThan time.Time, includeDead bool) (int, error) {
	statuses := []string{string(ledger.Processed)}
	if includeDead {
		statuses = append(statuses, string(ledger.Failed), string(ledger.Dead))
	}
	cut := ms(olderThan)
	counts := make([]int, l.shards)
	err := l.eachShard(nil, func(s int) error {
		_, err := l.update(ctx, s, func(h *head, _ int64) error {
			var picked []string
			h.each(func(rid string, w *row) {
				if w.Updated < cut && slices.Contains(statuses, w.Status) {
					picked = append(picked, rid)
				}
			})
			for _, rid := range picked {
				h.remove(rid)
			}
			counts[s] = len(picked)
			return nil
		})
		return err
	})
	total := 0
	for _, n := range counts {
		total += n
	}
	return total, l.wrap("purge", err)
}

// Flush writes the work index entries this process's Records have yet to
// lower (the hinter writes them hintLinger after a Record, in the
// background) and returns once they are written: a short-lived process (a
// Lambda invocation, which is frozen or killed once it returns) calls it
// before it stops, so other processes see its work at once rather than at
// their next sweep.
func (l *Backend) Flush(ctx context.Context) error {
	l.mu.Lock()
	batch := maps.Clone(l.hints)
	l.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	due := make(map[int]int64, len(batch))
	for s, h := range batch {
		due[s] = h.due
	}
	if err := l.ensureHints(ctx, due); err != nil {
		return l.wrap("flush", err)
	}
	l.mu.Lock()
	for s, h := range batch {
		if l.hints[s].gen == h.gen { // not asked again meanwhile
			delete(l.hints, s)
		}
	}
	l.mu.Unlock()
	return nil
}
