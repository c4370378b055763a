package dynamoledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// parallel is how many requests one call has in flight at most.
const parallel = 16

// each runs fn(i) for i in [0, n), parallel at a time, and returns the first
// error.
func each(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// RecordAndClaim decides each event against its record and writes each
// record that changed, once per record, conditionally; then claims up to n
// records of work in the shards the batch touched.
func (b *Backend) RecordAndClaim(ctx context.Context, source string, evs []event.Event, n int, lease time.Duration) ([]ledger.Decision, []ledger.Claim, error) {
	now := b.now()
	out := make([]ledger.Decision, len(evs))
	groups := map[id][]int{}
	var ids []id
	shards := map[int]bool{}
	for i, ev := range evs {
		out[i] = ledger.Decision{Outcome: ledger.Ignored, Bucket: ev.Bucket, Key: ev.Key, Seq: ev.Sequencer}
		if ev.Ignorable() {
			continue
		}
		k := id{ev.Bucket, ev.Key, driver.Ident(ev, b.opts.EveryVersion)}
		if _, ok := groups[k]; !ok {
			ids = append(ids, k)
		}
		groups[k] = append(groups[k], i)
		shards[shardOf(ev.Bucket, ev.Key, b.shards)] = true
	}
	var touched []int
	for s := range shards {
		touched = append(touched, s)
	}
	slices.Sort(touched)
	// Work due before the batch is claimed first: what of it the shards
	// hold, up to n, is read before the batch is written, and the batch's
	// own records take only the slots left, claimed in the writes that
	// record them (a write and a read less per record; see keyCall).
	var older []*row
	var direct *directClaims
	if n > 0 && !b.opts.EveryVersion {
		var err error
		if older, err = b.due(ctx, touched, n, now); err != nil {
			return nil, nil, err
		}
		direct = &directClaims{lease: lease}
		direct.budget.Store(int64(n - len(older)))
	}
	rows, err := b.batchGet(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	var cmu sync.Mutex
	var cs []ledger.Claim
	err = each(ctx, len(ids), func(ctx context.Context, j int) error {
		k := ids[j]
		idx := groups[k]
		kevs := make([]event.Event, len(idx))
		for x, i := range idx {
			kevs[x] = evs[i]
		}
		res, c, err := b.decideKey(ctx, k, rows[k], kevs, source, now, direct)
		if err != nil {
			return fmt.Errorf("record %s/%s: %w", k.bucket, k.key, err)
		}
		for x, i := range idx {
			out[i].Outcome = res[x]
		}
		if c != nil {
			cmu.Lock()
			cs = append(cs, *c)
			cmu.Unlock()
		}
		return nil
	})
	if err != nil {
		b.giveBack(cs)
		return nil, nil, err
	}
	switch {
	case n <= 0:
	case b.opts.EveryVersion:
		if cs, err = b.claim(ctx, touched, n, lease, false); err != nil {
			return nil, nil, err
		}
	case len(older) > 0 && len(cs) < n:
		got, _, err := b.claimRows(ctx, older, n-len(cs), now, lease)
		if err != nil {
			b.giveBack(cs)
			return nil, nil, err
		}
		cs = append(cs, got...)
	}
	driver.SortClaims(cs)
	return out, cs, nil
}

// giveBack releases the claims a RecordAndClaim made in its recording
// writes before it failed: its caller gets no claims, and they would
// otherwise stay claimed by no one for a whole lease, an attempt spent.
// Best effort: a release that fails leaves the claim to its lease.
func (b *Backend) giveBack(cs []ledger.Claim) {
	if len(cs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range cs {
		_ = b.Release(ctx, c)
	}
}

// due reads the work due at now in shards, up to n of it, earliest first.
func (b *Backend) due(ctx context.Context, shards []int, n int, now time.Time) ([]*row, error) {
	var mu sync.Mutex
	var cands []*row
	err := each(ctx, len(shards), func(ctx context.Context, i int) error {
		res, err := b.c.Query(ctx, &dynamodb.QueryInput{TableName: &b.table, IndexName: aws.String(indexWork),
			KeyConditionExpression:    aws.String("wp = :p AND ws <= :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(workPartition(shards[i])), ":now": num(driver.UnixMilli(now))},
			Limit:                     aws.Int32(int32(n))})
		if err != nil {
			return b.wrap("claim: query", err)
		}
		for _, item := range res.Items {
			w, err := indexRow(item)
			if err != nil {
				return err
			}
			mu.Lock()
			cands = append(cands, w)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(cands, func(x, y *row) int {
		return cmp.Or(cmp.Compare(x.due, y.due), cmp.Compare(x.rec.Bucket, y.rec.Bucket), cmp.Compare(x.ident, y.ident))
	})
	return cands[:min(n, len(cands))], nil
}

// batchGet reads records strongly consistent, 100 a request.
func (b *Backend) batchGet(ctx context.Context, ids []id) (map[id]*row, error) {
	out := map[id]*row{}
	var mu sync.Mutex
	chunks := (len(ids) + 99) / 100
	err := each(ctx, chunks, func(ctx context.Context, c int) error {
		chunk := ids[c*100 : min(c*100+100, len(ids))]
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for i, k := range chunk {
			keys[i] = k.key2()
		}
		for wait := 10 * time.Millisecond; len(keys) > 0; wait = min(2*wait, time.Second) {
			res, err := b.c.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				b.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return b.wrap("read", err)
			}
			for _, item := range res.Responses[b.table] {
				w, err := unmarshal(item)
				if err != nil {
					return err
				}
				mu.Lock()
				out[id{w.rec.Bucket, w.rec.Key, w.ident}] = w
				mu.Unlock()
			}
			keys = res.UnprocessedKeys[b.table].Keys
			if len(keys) > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(wait):
				}
			}
		}
		return nil
	})
	return out, err
}

// Claim claims up to n records of work from every shard.
func (b *Backend) Claim(ctx context.Context, n int, lease time.Duration) ([]ledger.Claim, error) {
	all := make([]int, b.shards)
	for i := range all {
		all[i] = i
	}
	return b.claim(ctx, all, n, lease, true)
}

// shardCursor pages through one shard's due work.
type shardCursor struct {
	shard int
	next  map[string]types.AttributeValue
	done  bool
}

// claim queries the shards' due work, earliest first, and claims candidates
// in that order until n are claimed or none is left. spread (Claim) takes
// the candidates (each shard's n earliest) in a random order instead, when
// there are more than n: concurrent claimers that all went for the n
// earliest would each win a few and pay a refused write (and a read) for
// every other one.
// RecordAndClaim takes the earliest: work due before its batch comes first.
func (b *Backend) claim(ctx context.Context, shards []int, n int, lease time.Duration, spread bool) ([]ledger.Claim, error) {
	now := b.now()
	cursors := make([]*shardCursor, len(shards))
	for i, s := range shards {
		cursors[i] = &shardCursor{shard: s}
	}
	var out []ledger.Claim
	for round := 0; len(out) < n; round++ {
		if !b.opts.EveryVersion && round > 0 {
			if round == maxClaimRounds {
				break // fewer than n: the rest is for the next Claim
			}
			// Candidates others took meanwhile have left the head of the
			// index (their lease is not due): read it again rather than
			// page on through a stale list.
			for _, c := range cursors {
				c.next, c.done = nil, false
			}
		}
		var mu sync.Mutex
		var cands []*row
		page := int32(max(n-len(out), 8))
		err := each(ctx, len(cursors), func(ctx context.Context, i int) error {
			c := cursors[i]
			if c.done {
				return nil
			}
			res, err := b.c.Query(ctx, &dynamodb.QueryInput{TableName: &b.table, IndexName: aws.String(indexWork),
				KeyConditionExpression:    aws.String("wp = :p AND ws <= :now"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(workPartition(c.shard)), ":now": num(driver.UnixMilli(now))},
				Limit:                     aws.Int32(page), ExclusiveStartKey: c.next})
			if err != nil {
				return b.wrap("claim: query", err)
			}
			c.next, c.done = res.LastEvaluatedKey, len(res.LastEvaluatedKey) == 0
			for _, item := range res.Items {
				w, err := indexRow(item)
				if err != nil {
					return err
				}
				mu.Lock()
				cands = append(cands, w)
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(cands) == 0 {
			break
		}
		slices.SortStableFunc(cands, func(x, y *row) int {
			return cmp.Or(cmp.Compare(x.due, y.due), cmp.Compare(x.rec.Bucket, y.rec.Bucket), cmp.Compare(x.ident, y.ident))
		})
		if spread && len(cands) > n-len(out) {
			// In a random order: claimers going through one list in order,
			// each from its own place, run into each other's stretches.
			mrand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		}
		got, contended, err := b.claimRows(ctx, cands, n-len(out), now, lease)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		if !contended && !slices.ContainsFunc(cursors, func(c *shardCursor) bool { return !c.done }) {
			break
		}
	}
	driver.SortClaims(out)
	return out, nil
}

// maxClaimRounds bounds how often one Claim reads the index again after
// other claimers took candidates it had read.
const maxClaimRounds = 8

// claimRows claims up to n of cands (in order), each by a conditional write,
// n at a time in parallel; it stops early, contended, after a round in which
// some candidates were taken by others (the rest of the list is likely
// stale too).
func (b *Backend) claimRows(ctx context.Context, cands []*row, n int, now time.Time, lease time.Duration) (out []ledger.Claim, contended bool, err error) {
	if b.opts.EveryVersion {
		// One at a time: a version claimed here is what keeps a later one of
		// the same key from being claimed.
		for _, c := range cands {
			if len(out) == n {
				break
			}
			cl, ok, err := b.claimRow(ctx, id{c.rec.Bucket, c.rec.Key, c.ident}, nil, false, now, lease)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out = append(out, cl)
			}
		}
		return out, false, nil
	}
	for next := 0; len(out) < n && next < len(cands) && !contended; {
		batch := cands[next:min(next+n-len(out), len(cands))]
		next += len(batch)
		// The candidates whole, strongly consistent, 100 a request: the
		// index may be behind, and another claimer may have taken them.
		ids := make([]id, len(batch))
		for i, c := range batch {
			ids[i] = id{c.rec.Bucket, c.rec.Key, c.ident}
		}
		rows, err := b.batchGet(ctx, ids)
		if err != nil {
			return nil, false, err
		}
		got := make([]*ledger.Claim, len(batch))
		err = each(ctx, len(batch), func(ctx context.Context, i int) error {
			cl, ok, err := b.claimRow(ctx, ids[i], rows[ids[i]], true, now, lease)
			if ok {
				got[i] = &cl
			}
			return err
		})
		if err != nil {
			return nil, false, err
		}
		for _, c := range got {
			if c != nil {
				out = append(out, *c)
			} else {
				contended = true
			}
		}
	}
	return out, contended, nil
}

// claimable tells whether r's work may be claimed at now.
func claimable(r *ledger.Record, now time.Time) bool {
	nowMS := driver.UnixMilli(now)
	switch r.Status {
	case ledger.Pending, ledger.Failed:
		return driver.UnixMilli(r.NextAttempt) <= nowMS
	case ledger.Claimed:
		return driver.UnixMilli(r.LeaseUntil) < nowMS
	}
	return false
}

// claimRow claims one candidate the index showed, whose record is cur as
// read (loaded; else claimRow reads it, strongly consistent: the index may
// be behind, and another claimer may have taken it), by a write conditional
// on the revision read, only if its work is due.
func (b *Backend) claimRow(ctx context.Context, i id, cur *row, loaded bool, now time.Time, lease time.Duration) (ledger.Claim, bool, error) {
	if !b.claiming.take(i) {
		return ledger.Claim{}, false, nil // another goroutine of this handle is on it
	}
	defer b.claiming.done(i)
	if loaded {
		cur = b.recent.fresher(i, cur)
	}
	var locked *lockRef // the key's lock this claim took (EveryVersion)
	w, _, err := b.change(ctx, i, cur, loaded, func(cur *row) (*ledger.Record, any, error) {
		if cur == nil || !claimable(&cur.rec, now) {
			return nil, nil, errSkip
		}
		token := driver.ClaimToken(cur.rec.Token, driver.UnixMilli(now))
		if b.opts.EveryVersion {
			blocked, keyMax, err := b.versionBlocked(ctx, cur, now)
			if err != nil {
				return nil, nil, err
			}
			if blocked {
				return nil, nil, errSkip
			}
			token = driver.VersionToken(cur.rec.Token, keyMax, driver.UnixMilli(now))
			l := lockRef{cur.ident, token}
			if locked != nil && *locked != l {
				b.dropLock(ctx, i.bucket, i.key, *locked)
				locked = nil
			}
			ok, err := b.takeLock(ctx, i.bucket, i.key, l, now.Add(lease), now)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				return nil, nil, errSkip
			}
			locked = &l
		}
		r := cur.rec
		r.Status, r.Token, r.LeaseUntil, r.Attempts, r.RunGen, r.Updated = ledger.Claimed, token, now.Add(lease), r.Attempts+1, r.Gen, now
		return &r, nil, nil
	})
	if err != nil && locked != nil {
		b.dropLock(ctx, i.bucket, i.key, *locked)
	}
	if errors.Is(err, errSkip) {
		return ledger.Claim{}, false, nil
	}
	if err != nil {
		return ledger.Claim{}, false, fmt.Errorf("claim %s/%s: %w", i.bucket, i.key, err)
	}
	b.held.put(w)
	return w.claim(), true, nil
}

// versionBlocked tells (Options.EveryVersion) whether another version of the
// key is claimed or has older work to do, and returns the highest token of
// the key's records (w's included) and of its lock as the same read found
// them, for driver.VersionToken (takeLock refuses the token if a claim took
// the lock with a token as high since).
func (b *Backend) versionBlocked(ctx context.Context, w *row, now time.Time) (blocked bool, keyMax int64, err error) {
	rows, lockToken, err := b.keyRowsAndLock(ctx, w.rec.Bucket, w.rec.Key)
	if err != nil {
		return false, 0, err
	}
	mine := driver.SortSeq(w.rec.Seq)
	keyMax = max(w.rec.Token, lockToken)
	for _, o := range rows {
		keyMax = max(keyMax, o.rec.Token)
		if o.ident == w.ident {
			continue
		}
		s := o.rec.Status
		if s == ledger.Claimed && driver.UnixMilli(o.rec.LeaseUntil) >= driver.UnixMilli(now) {
			blocked = true
		}
		if (s == ledger.Pending || s == ledger.Failed || s == ledger.Claimed) && driver.SortSeq(o.rec.Seq) < mine {
			blocked = true
		}
	}
	return blocked, keyMax, nil
}

// keyRows reads every record of a key, strongly consistent.
func (b *Backend) keyRows(ctx context.Context, bucket, key string) ([]*row, error) {
	rows, _, err := b.keyRowsAndLock(ctx, bucket, key)
	return rows, err
}

// keyRowsAndLock is keyRows, with the token of the key's lock item (0 if
// it has none: see keylock.go).
func (b *Backend) keyRowsAndLock(ctx context.Context, bucket, key string) ([]*row, int64, error) {
	var out []*row
	var lockToken int64
	var start map[string]types.AttributeValue
	for {
		res, err := b.c.Query(ctx, &dynamodb.QueryInput{TableName: &b.table, ConsistentRead: aws.Bool(true),
			KeyConditionExpression:    aws.String("pk = :p"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(recordPK(bucket, key))}, ExclusiveStartKey: start})
		if err != nil {
			return nil, 0, b.wrap("read", err)
		}
		for _, item := range res.Items {
			if sk, _ := item[attrSK].(*types.AttributeValueMemberS); sk != nil && sk.Value == lockSK {
				if t, ok := item["token"].(*types.AttributeValueMemberN); ok {
					lockToken, _ = strconv.ParseInt(t.Value, 10, 64)
				}
				continue
			}
			w, err := unmarshal(item)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, w)
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return out, lockToken, nil
		}
	}
}

// errCompleted is the answer to a Complete of a record its claim's token
// has completed already (processed, and no one claimed it since): a retry of
// a Complete whose response was lost or came late. It changes nothing, and
// the call succeeds.
var errCompleted = errors.New("completed already by this token")

// refuse is the refusal of a change of c whose record is r (nil: none).
func refuse(op string, c ledger.Claim, r *row) error {
	switch {
	case r == nil:
		return fmt.Errorf("%s %s/%s: %w", op, c.Bucket, c.Key, ledger.ErrNotFound)
	case r.rec.Token != c.Token:
		return fmt.Errorf("%s %s/%s with token %d (current %d): %w", op, c.Bucket, c.Key, c.Token, r.rec.Token, ledger.ErrSuperseded)
	default:
		return fmt.Errorf("%s %s/%s with token %d: %w", op, c.Bucket, c.Key, c.Token, ledger.ErrLeaseLost)
	}
}

// finish changes a claimed record: only while c holds it (its token, status
// claimed, lease running).
//
// The record is written conditionally on the row this handle wrote when it
// claimed or last renewed it (or wrote since), without reading it first; a
// record changed since by another process refuses that write, and is read
// and judged again. A refusal is never judged on that row alone: the record is read
// first (another claimer may have taken it, which is ErrSuperseded, not
// ErrLeaseLost).
func (b *Backend) finish(ctx context.Context, op string, c ledger.Claim, apply func(r *ledger.Record, now time.Time)) (*row, error) {
	now := b.now()
	i := id{c.Bucket, c.Key, c.Ident}
	decide := func(cur *row) (*ledger.Record, any, error) {
		if op == "complete" && cur != nil && cur.rec.Token == c.Token && cur.rec.Status == ledger.Processed {
			return nil, nil, errCompleted
		}
		if cur == nil || cur.rec.Token != c.Token || cur.rec.Status != ledger.Claimed || driver.UnixMilli(cur.rec.LeaseUntil) < driver.UnixMilli(now) {
			return nil, nil, refuse(op, c, cur)
		}
		r := cur.rec
		apply(&r, now)
		r.Updated = now
		return &r, nil, nil
	}
	if held := b.held.get(c); held != nil {
		// The record may have changed since the claim by this handle's own
		// writes (a newer event recorded while claimed): start from those.
		start := b.recent.fresher(i, held)
		w, _, err := b.change(ctx, i, start, true, func(cur *row) (*ledger.Record, any, error) {
			r, out, err := decide(cur)
			if err != nil && cur == start {
				return nil, nil, errUnread
			}
			return r, out, err
		})
		if !errors.Is(err, errUnread) {
			return w, err
		}
	}
	w, _, err := b.change(ctx, i, nil, false, decide)
	return w, err
}

// errUnread is finish's refusal judged on the row held, not on the record
// read: read it and judge again.
var errUnread = errors.New("judged on the row held")

// Renew extends the claim's lease to lease from now (and, with
// EveryVersion, the key's lock with it, first: a claim whose lock another
// version took has lost its lease).
func (b *Backend) Renew(ctx context.Context, c ledger.Claim, lease time.Duration) (ledger.Claim, error) {
	if b.opts.EveryVersion {
		ok, err := b.renewLock(ctx, c.Bucket, c.Key, lockRef{c.Ident, c.Token}, b.now().Add(lease))
		if err != nil {
			return c, err
		}
		if !ok {
			cur, err := b.get(ctx, id{c.Bucket, c.Key, c.Ident})
			if err != nil {
				return c, err
			}
			return c, refuse("renew", c, cur)
		}
	}
	w, err := b.finish(ctx, "renew", c, func(r *ledger.Record, now time.Time) { r.LeaseUntil = now.Add(lease) })
	if err != nil {
		if refused(err) {
			b.held.drop(c)
		}
		return c, err
	}
	b.held.put(w)
	return w.claim(), nil
}

// settle is finish for Complete, Fail and Release, which end the claim: with
// EveryVersion the key's lock is given up after.
func (b *Backend) settle(ctx context.Context, op string, c ledger.Claim, apply func(r *ledger.Record, now time.Time)) error {
	_, err := b.finish(ctx, op, c, apply)
	if err == nil || refused(err) || errors.Is(err, errCompleted) {
		b.held.drop(c)
	}
	if errors.Is(err, errCompleted) {
		err = nil // a retry of a Complete that landed: nothing to change
	}
	if err == nil && b.opts.EveryVersion {
		b.dropLock(ctx, c.Bucket, c.Key, lockRef{c.Ident, c.Token})
	}
	return err
}

// completeRecord is Complete's change: processed, or pending again if newer
// work arrived while the claim ran.
func completeRecord(r *ledger.Record, result string, now time.Time) {
	if r.Gen == r.RunGen {
		r.Status = ledger.Processed
	} else {
		r.Status, r.Attempts = ledger.Pending, 0
	}
	r.Result, r.LastError, r.LeaseUntil, r.NextAttempt = result, "", time.Time{}, now
}

// Complete records the claim's work as processed.
func (b *Backend) Complete(ctx context.Context, c ledger.Claim, result string) error {
	return b.settle(ctx, "complete", c, func(r *ledger.Record, now time.Time) { completeRecord(r, result, now) })
}

// refused tells the refusals of a change of a claim (lease lost, superseded,
// not found).
func refused(err error) bool {
	return errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrSuperseded) || errors.Is(err, ledger.ErrNotFound)
}

// CompleteBatch completes each claim with a write of its own (DynamoDB's
// batch writes take no conditions), parallel.
func (b *Backend) CompleteBatch(ctx context.Context, cs []ledger.Claim, results []string) ([]error, error) {
	errs := make([]error, len(cs))
	_ = each(ctx, len(cs), func(ctx context.Context, i int) error {
		errs[i] = b.Complete(ctx, cs[i], results[i])
		return nil
	})
	applied := false
	var other error
	for _, err := range errs {
		switch {
		case err == nil || refused(err):
			applied = true
		case other == nil:
			other = err
		}
	}
	if !applied && other != nil {
		return nil, other
	}
	return errs, nil
}

// Release gives the claim's work back without counting the attempt.
func (b *Backend) Release(ctx context.Context, c ledger.Claim) error {
	return b.settle(ctx, "release", c, driver.Release)
}

// Fail records a failed attempt: retried after a backoff if retryable and
// attempts remain, else dead; pending if newer work arrived meanwhile.
func (b *Backend) Fail(ctx context.Context, c ledger.Claim, cause string, retryable bool) error {
	status := ledger.Dead
	if retryable && c.Attempts < b.opts.MaxAttempts {
		status = ledger.Failed
	}
	retryIn := driver.Backoff(b.opts, c.Attempts)
	return b.settle(ctx, "fail", c, func(r *ledger.Record, now time.Time) {
		if r.Gen != r.RunGen {
			r.Status, r.Attempts, r.NextAttempt = ledger.Pending, 0, now
		} else {
			r.Status, r.NextAttempt = status, now.Add(retryIn)
		}
		r.LastError, r.LeaseUntil = cause, time.Time{}
	})
}

// Lookup returns the newest record of each key: one batched read per 100
// keys, or (Options.EveryVersion) one query per key.
func (b *Backend) Lookup(ctx context.Context, bucket string, keys []string) (map[string]ledger.Record, error) {
	out := map[string]ledger.Record{}
	if !b.opts.EveryVersion {
		ids := make([]id, 0, len(keys))
		seen := map[string]bool{}
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				ids = append(ids, id{bucket, k, k})
			}
		}
		rows, err := b.batchGet(ctx, ids)
		if err != nil {
			return nil, err
		}
		for _, w := range rows {
			out[w.rec.Key] = w.rec
		}
		return out, nil
	}
	var mu sync.Mutex
	err := each(ctx, len(keys), func(ctx context.Context, i int) error {
		rows, err := b.keyRows(ctx, bucket, keys[i])
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, w := range rows {
			if prev, ok := out[w.rec.Key]; !ok || event.CompareSequencer(w.rec.Seq, prev.Seq) > 0 {
				out[w.rec.Key] = w.rec
			}
		}
		return nil
	})
	return out, err
}

// Get returns the records of one key.
func (b *Backend) Get(ctx context.Context, bucket, key string) ([]ledger.Record, error) {
	rows, err := b.keyRows(ctx, bucket, key)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s/%s: %w", bucket, key, ledger.ErrNotFound)
	}
	slices.SortFunc(rows, func(x, y *row) int {
		return cmp.Or(cmp.Compare(driver.SortSeq(x.rec.Seq), driver.SortSeq(y.rec.Seq)), cmp.Compare(x.ident, y.ident))
	})
	out := make([]ledger.Record, len(rows))
	for i, w := range rows {
		out[i] = w.rec
	}
	return out, nil
}

// OldestPending is the earliest next-attempt time of pending work, off the
// work index.
func (b *Backend) OldestPending(ctx context.Context) (time.Time, error) {
	var mu sync.Mutex
	oldest := int64(0)
	err := each(ctx, b.shards, func(ctx context.Context, s int) error {
		in := &dynamodb.QueryInput{TableName: &b.table, IndexName: aws.String(indexWork),
			KeyConditionExpression: aws.String("wp = :p"), FilterExpression: aws.String("#st = :st"),
			ExpressionAttributeNames:  map[string]string{"#st": attrStatus},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(workPartition(s)), ":st": str(string(ledger.Pending))}}
		for {
			res, err := b.c.Query(ctx, in)
			if err != nil {
				return b.wrap("oldest pending", err)
			}
			if len(res.Items) > 0 {
				v, _ := res.Items[0][attrWorkS].(*types.AttributeValueMemberN)
				if v != nil {
					at, _ := strconv.ParseInt(v.Value, 10, 64)
					mu.Lock()
					if oldest == 0 || at < oldest {
						oldest = at
					}
					mu.Unlock()
				}
				return nil
			}
			if in.ExclusiveStartKey = res.LastEvaluatedKey; len(in.ExclusiveStartKey) == 0 {
				return nil
			}
		}
	})
	if err != nil {
		return time.Time{}, err
	}
	return driver.FromUnixMilli(oldest), nil
}

// Ping reads the ledger's descriptor.
func (b *Backend) Ping(ctx context.Context) error {
	_, err := b.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table,
		Key: map[string]types.AttributeValue{attrPK: str(metaPK), attrSK: str(metaSK)}})
	return b.wrap("ping", err)
}

// Close does nothing: the SDK's client holds nothing that needs closing.
func (b *Backend) Close() error { return nil }

// noteSK is a note's sort key, in the descriptor's partition: no index
// holds it (it has none of the index attributes) and no scan of records
// reads that partition.
func noteSK(name string) string { return "note#" + name }

// PutNote stores a note (ledger.NoteKeeper) as an item beside the
// ledger's descriptor; the latest by the writers' clocks wins. The write is
// conditional on the stored note being no newer, so a request that lands
// late (its writer gave up on it, and a newer note was written since) is
// refused instead of putting an older value back; a refusal means a newer
// note is there, and is no error.
func (b *Backend) PutNote(ctx context.Context, name string, value []byte) error {
	now := num(b.now().UnixMilli())
	_, err := b.c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &b.table, Item: map[string]types.AttributeValue{
		attrPK: str(metaPK), attrSK: str(noteSK(name)), "value": str(string(value)), "updated": now},
		ConditionExpression:       aws.String("attribute_not_exists(#u) OR #u <= :u"),
		ExpressionAttributeNames:  map[string]string{"#u": "updated"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": now}})
	var refused *types.ConditionalCheckFailedException
	if errors.As(err, &refused) {
		return nil
	}
	return b.wrap("put note", err)
}

// Note reads a note (ledger.NoteKeeper).
func (b *Backend) Note(ctx context.Context, name string) ([]byte, error) {
	out, err := b.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{attrPK: str(metaPK), attrSK: str(noteSK(name))}})
	if err != nil {
		return nil, b.wrap("read note", err)
	}
	v, ok := out.Item["value"].(*types.AttributeValueMemberS)
	if !ok {
		return nil, nil
	}
	return []byte(v.Value), nil
}
