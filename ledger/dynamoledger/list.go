package dynamoledger

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/cairn-s3/cairn/ledger"
)

// pages runs the query in, page after page, giving each page's items to fn,
// until the last page or fn says stop.
func (b *Backend) pages(ctx context.Context, what string, in *dynamodb.QueryInput, fn func(res *dynamodb.QueryOutput) (stop bool, err error)) error {
	for {
		res, err := b.c.Query(ctx, in)
		if err != nil {
			return b.wrap(what, err)
		}
		stop, err := fn(res)
		if err != nil || stop {
			return err
		}
		if in.ExclusiveStartKey = res.LastEvaluatedKey; len(in.ExclusiveStartKey) == 0 {
			return nil
		}
	}
}

// Counts counts the records by status from the indexes, never the table:
// pending, claimed and failed from the work index (the records with work to
// do, each read once, its status only), processed and dead by Select=COUNT
// queries of their own partitions of the age index.
//
// Why not counters kept per status: DynamoDB changes one item per write
// without transactions, so a counter would be a second write beside the
// record's. A process that dies between the two loses the change for good,
// and an ADD whose answer was lost and that the SDK sends again counts it
// twice; a counter would drift from the records and never come back. The
// indexes are kept by DynamoDB from the record's own write: a write that
// landed late is counted once it lands, a write that never landed is never
// counted, and nothing can drift. What is read is the index items of the
// statuses counted (about 250 bytes each with a short key; an eventually
// consistent read unit reads 8 KB of them), and the counts may lag the
// records by the index's propagation delay (under a second on DynamoDB, none
// on dynalite). Processed records are usually most of them: their count
// costs about a read unit per 30 of them (a million: 33,000 read units,
// about $0.004 at on-demand prices), so scrape a large ledger's counts
// sparingly.
func (b *Backend) Counts(ctx context.Context) (ledger.Counts, error) {
	var mu sync.Mutex
	out := ledger.Counts{}
	add := func(s ledger.Status, n int) {
		if n > 0 {
			mu.Lock()
			out[s] += n
			mu.Unlock()
		}
	}
	finishedCounted := []ledger.Status{ledger.Processed, ledger.Dead} // failed: off the work index
	err := each(ctx, b.shards*(1+len(finishedCounted)), func(ctx context.Context, j int) error {
		s := j % b.shards
		if j < b.shards {
			in := &dynamodb.QueryInput{TableName: &b.table, IndexName: aws.String(indexWork),
				KeyConditionExpression: aws.String("wp = :p"), ProjectionExpression: aws.String("#st"),
				ExpressionAttributeNames:  map[string]string{"#st": attrStatus},
				ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(workPartition(s))}}
			return b.pages(ctx, "counts", in, func(res *dynamodb.QueryOutput) (bool, error) {
				for _, item := range res.Items {
					if v, ok := item[attrStatus].(*types.AttributeValueMemberS); ok {
						add(ledger.Status(v.Value), 1)
					}
				}
				return false, nil
			})
		}
		st := finishedCounted[j/b.shards-1]
		in := &dynamodb.QueryInput{TableName: &b.table, IndexName: aws.String(indexAge), Select: types.SelectCount,
			KeyConditionExpression:    aws.String("ap = :p"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(agePartition(st, s))}}
		return b.pages(ctx, "counts", in, func(res *dynamodb.QueryOutput) (bool, error) {
			add(st, int(res.Count))
			return false, nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// listFilter is a List's filter on a record's identity.
type listFilter struct{ ledger.Filter }

// match tells whether a record of bucket, key and ident is one the filter
// selects, after the cursor (status aside).
func (f listFilter) match(bucket, key, ident string) bool {
	switch {
	case f.Bucket != "" && bucket != f.Bucket,
		f.Prefix != "" && !strings.HasPrefix(key, f.Prefix),
		f.Through != "" && key > f.Through,
		bucket < f.AfterBucket || bucket == f.AfterBucket && ident <= f.AfterIdent:
		return false
	}
	return true
}

// exact orders rows as List does: bucket, then ident.
func exact(x, y *row) int {
	return cmp.Or(cmp.Compare(x.rec.Bucket, y.rec.Bucket), cmp.Compare(x.ident, y.ident))
}

// List pages through records in (bucket, ident) order. Without a status, or
// for processed records (most of a ledger), it reads the keys index, whose
// sort key is the record's bucket and ident, from the cursor on, merging the
// shards; with a bucket it stops at the end of the prefix and of Through, so
// a page costs about what it returns, wherever it is. Other statuses (the
// few records with work to do, failed or dead) are read off the work and
// age indexes' partitions of that status and sorted. The records of a page
// are then read whole (100 a request, strongly consistent) and checked
// again: a record purged or changed meanwhile is left out. The indexes are
// eventually consistent on DynamoDB: a record made a moment ago may be
// missing from a listing.
func (b *Backend) List(ctx context.Context, f ledger.Filter) ([]ledger.Claim, error) {
	lf := listFilter{f}
	if f.Status != "" && f.Status != ledger.Processed {
		return b.listStatus(ctx, lf)
	}
	return b.listKeys(ctx, lf)
}

// keyStream is one shard of the keys index, read in sort key order, from
// lo to hi.
type keyStream struct {
	shard int
	in    *dynamodb.QueryInput
	buf   []*row // read, not yet taken; buf[:ready] sorted exactly
	ready int
	done  bool
}

// listKeys is List off the keys index.
func (b *Backend) listKeys(ctx context.Context, f listFilter) ([]ledger.Claim, error) {
	var lo, hi string
	var stops []string // stop at a sort key past the block of each
	if f.Bucket != "" {
		if f.AfterBucket > f.Bucket {
			return nil, nil
		}
		lo, hi = listKey(f.Bucket, f.Prefix), f.Bucket+"\x02"
		if f.Prefix != "" {
			stops = append(stops, listKey(f.Bucket, f.Prefix))
		}
		if f.Through != "" {
			stops = append(stops, listKey(f.Bucket, throughBlock(f.Through)))
		}
	}
	if f.AfterBucket != "" || f.AfterIdent != "" {
		lo = max(lo, listKey(f.AfterBucket, f.AfterIdent))
	}
	if hi != "" && lo > hi {
		return nil, nil
	}
	page := int32(min(1000, max(25, 2*f.Limit/b.shards+8)))
	streams := make([]*keyStream, b.shards)
	for s := range streams {
		in := &dynamodb.QueryInput{TableName: &b.table, IndexName: aws.String(indexKeys), Limit: aws.Int32(page),
			KeyConditionExpression:    aws.String("#kp = :p"),
			ExpressionAttributeNames:  map[string]string{"#kp": attrKeysP},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(keysPartition(s))}}
		switch {
		case lo != "" && hi != "":
			in.KeyConditionExpression = aws.String("#kp = :p AND #ks BETWEEN :lo AND :hi")
			in.ExpressionAttributeValues[":lo"], in.ExpressionAttributeValues[":hi"] = str(lo), str(hi)
		case lo != "":
			in.KeyConditionExpression = aws.String("#kp = :p AND #ks >= :lo")
			in.ExpressionAttributeValues[":lo"] = str(lo)
		}
		if lo != "" {
			in.ExpressionAttributeNames["#ks"] = attrKeysS
		}
		streams[s] = &keyStream{shard: s, in: in}
	}
	past := func(ks string) bool {
		for _, x := range stops {
			if ks > x && !strings.HasPrefix(ks, x) {
				return true
			}
		}
		return false
	}
	var out []ledger.Claim
	var cands []*row
	for len(out) < f.Limit {
		var empty []*keyStream
		for _, s := range streams {
			if s.ready == 0 && !s.done {
				empty = append(empty, s)
			}
		}
		if len(empty) > 0 {
			err := each(ctx, len(empty), func(ctx context.Context, i int) error { return b.fill(ctx, empty[i], past) })
			if err != nil {
				return nil, err
			}
		}
		var next *keyStream
		for _, s := range streams {
			if s.ready > 0 && (next == nil || exact(s.buf[0], next.buf[0]) < 0) {
				next = s
			}
		}
		if next != nil {
			w := next.buf[0]
			next.buf, next.ready = next.buf[1:], next.ready-1
			if f.match(w.rec.Bucket, w.rec.Key, w.ident) {
				cands = append(cands, w)
			}
		}
		if len(cands) > 0 && (next == nil || len(cands) == f.Limit-len(out)) {
			got, err := b.whole(ctx, cands, f.Status)
			if err != nil {
				return nil, err
			}
			out, cands = append(out, got...), nil
		}
		if next == nil {
			break
		}
	}
	return out, nil
}

// throughBlock is the shortest string whose block (the strings up to it, and
// those that start with it) holds every ident of a key <= through: through
// itself, unless a shorter key that through starts with has versions
// ("key\x1fversion") sorting after through, which is the case when the
// character after it in through is at most \x1f.
func throughBlock(through string) string {
	for m := 0; m < len(through); m++ {
		if through[m] <= 0x1f {
			return through[:m] + "\x1f"
		}
	}
	return through
}

// fill reads s's next pages until it has a row ready to take or is done. A
// row is ready once no row read later can sort before it: its sort key is
// below the last one read, or it is short enough that no other record's cut
// sort key can equal it (records whose keys are cut alike are ordered by
// their whole ident once all of them are read).
func (b *Backend) fill(ctx context.Context, s *keyStream, past func(ks string) bool) error {
	for s.ready == 0 && !s.done {
		res, err := b.c.Query(ctx, s.in)
		if err != nil {
			return b.wrap("list", err)
		}
		for _, item := range res.Items {
			v, _ := item[attrKeysS].(*types.AttributeValueMemberS)
			if v == nil {
				continue
			}
			if past(v.Value) {
				s.done = true
				break
			}
			w, err := unmarshal(item)
			if err != nil {
				return err
			}
			w.sortKey = v.Value
			s.buf = append(s.buf, w)
		}
		if s.in.ExclusiveStartKey = res.LastEvaluatedKey; len(s.in.ExclusiveStartKey) == 0 {
			s.done = true
		}
		s.ready = len(s.buf)
		if n := len(s.buf); !s.done && n > 0 && len(s.buf[n-1].sortKey) > maxSortKey-utf8.UTFMax {
			// The last sort key may be cut, or tie with a cut one on the
			// next page: hold its group back until a greater one is read.
			for s.ready > 0 && s.buf[s.ready-1].sortKey == s.buf[n-1].sortKey {
				s.ready--
			}
		}
		slices.SortFunc(s.buf[:s.ready], exact)
	}
	return nil
}

// whole reads cands' records whole and returns those that are still there
// (and of status, if given), in cands' order.
func (b *Backend) whole(ctx context.Context, cands []*row, status ledger.Status) ([]ledger.Claim, error) {
	ids := make([]id, len(cands))
	for i, c := range cands {
		ids[i] = id{c.rec.Bucket, c.rec.Key, c.ident}
	}
	rows, err := b.batchGet(ctx, ids)
	if err != nil {
		return nil, err
	}
	var out []ledger.Claim
	for _, k := range ids {
		if w := rows[k]; w != nil && (status == "" || w.rec.Status == status) {
			out = append(out, w.claim())
		}
	}
	return out, nil
}

// listStatus is List of the records of one status that is not processed:
// off the work index (pending, claimed) or the status's age partitions
// (failed, dead), whole, sorted.
func (b *Backend) listStatus(ctx context.Context, f listFilter) ([]ledger.Claim, error) {
	var mu sync.Mutex
	var cands []*row
	err := each(ctx, b.shards, func(ctx context.Context, s int) error {
		in := &dynamodb.QueryInput{TableName: &b.table, IndexName: aws.String(indexAge),
			KeyConditionExpression:    aws.String("ap = :p"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(agePartition(f.Status, s))}}
		if !finished(f.Status) {
			in = &dynamodb.QueryInput{TableName: &b.table, IndexName: aws.String(indexWork),
				KeyConditionExpression: aws.String("wp = :p"), FilterExpression: aws.String("#st = :st"),
				ExpressionAttributeNames: map[string]string{"#st": attrStatus},
				ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(workPartition(s)),
					":st": str(string(f.Status))}}
		}
		return b.pages(ctx, "list", in, func(res *dynamodb.QueryOutput) (bool, error) {
			for _, item := range res.Items {
				w, err := unmarshal(item)
				if err != nil {
					return false, err
				}
				if f.match(w.rec.Bucket, w.rec.Key, w.ident) {
					mu.Lock()
					cands = append(cands, w)
					mu.Unlock()
				}
			}
			return false, nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(cands, exact)
	var out []ledger.Claim
	for len(out) < f.Limit && len(cands) > 0 {
		n := min(f.Limit-len(out), len(cands))
		got, err := b.whole(ctx, cands[:n], f.Status)
		if err != nil {
			return nil, err
		}
		out, cands = append(out, got...), cands[n:]
	}
	return out, nil
}
