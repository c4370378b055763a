package dynamoledger

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// selectPage is how many index items Replay and Purge read a request: each
// page is acted on before the next is read, so neither holds a whole
// status's records.
const selectPage = 256

// statusPages reads the index partitions of the records of status, shard by
// shard, a page at a time, and gives each page's rows to fn: the age
// index's partitions of the status for finished records, updated in
// [from, before) (0: unbounded), else the work index's, filtered by status
// (their rows carry no update time). bucket and prefix, if set, filter
// the rows on the server.
func (b *Backend) statusPages(ctx context.Context, status ledger.Status, from, before int64, bucket, prefix string, fn func(ctx context.Context, rows []*row) error) error {
	for s := range b.shards {
		names := map[string]string{}
		vals := map[string]types.AttributeValue{}
		var filters []string
		in := &dynamodb.QueryInput{TableName: &b.table, Limit: aws.Int32(selectPage)}
		if finished(status) {
			in.IndexName = aws.String(indexAge)
			vals[":p"] = str(agePartition(status, s))
			names["#as"] = attrAgeS
			switch {
			case from > 0 && before > 0:
				in.KeyConditionExpression = aws.String("ap = :p AND #as BETWEEN :from AND :last")
				vals[":from"], vals[":last"] = num(from), num(before-1)
			case from > 0:
				in.KeyConditionExpression = aws.String("ap = :p AND #as >= :from")
				vals[":from"] = num(from)
			case before > 0:
				in.KeyConditionExpression = aws.String("ap = :p AND #as < :before")
				vals[":before"] = num(before)
			default:
				in.KeyConditionExpression = aws.String("ap = :p")
				delete(names, "#as")
			}
			if from > 0 && before > 0 && from >= before {
				return nil
			}
		} else {
			in.IndexName = aws.String(indexWork)
			in.KeyConditionExpression = aws.String("wp = :p")
			vals[":p"] = str(workPartition(s))
			names["#st"], vals[":st"] = attrStatus, str(string(status))
			filters = append(filters, "#st = :st")
		}
		if bucket != "" {
			names["#b"], vals[":b"] = "bucket", str(bucket)
			filters = append(filters, "#b = :b")
		}
		if prefix != "" {
			names["#k"], vals[":pre"] = "key", str(prefix)
			filters = append(filters, "begins_with(#k, :pre)")
		}
		if len(filters) > 0 {
			in.FilterExpression = aws.String(strings.Join(filters, " AND "))
		}
		if len(names) > 0 {
			in.ExpressionAttributeNames = names
		}
		in.ExpressionAttributeValues = vals
		err := b.pages(ctx, "query", in, func(res *dynamodb.QueryOutput) (bool, error) {
			rows := make([]*row, 0, len(res.Items))
			for _, item := range res.Items {
				w, err := indexRow(item)
				if err != nil {
					return false, err
				}
				rows = append(rows, w)
			}
			return false, fn(ctx, rows)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Replay makes the selected records pending again as an explicit replay. The
// candidates come off the index partitions of the selected statuses (or, for
// one key, the key's records), from UpdatedSince on, a page at a time; each
// is changed by a conditional write that checks the selection again.
func (b *Backend) Replay(ctx context.Context, sel ledger.Selection) (int, error) {
	match := func(r *ledger.Record) bool {
		return slices.Contains(sel.Statuses, r.Status) && (sel.Bucket == "" || r.Bucket == sel.Bucket) &&
			(sel.Key == "" || r.Key == sel.Key) && strings.HasPrefix(r.Key, sel.Prefix) &&
			(sel.UpdatedSince.IsZero() || driver.UnixMilli(r.Updated) >= driver.UnixMilli(sel.UpdatedSince))
	}
	now := b.now()
	n := 0
	// A record made pending here may come up again on a later page (the
	// work index, when pending is selected): once is enough.
	replayed := map[id]bool{}
	replay := func(ctx context.Context, cands []*row, whole bool) error {
		cands = slices.DeleteFunc(cands, func(w *row) bool { return replayed[id{w.rec.Bucket, w.rec.Key, w.ident}] })
		if !whole && !sel.UpdatedSince.IsZero() {
			// Work index rows carry no update time: read them whole.
			ids := make([]id, len(cands))
			for i, c := range cands {
				ids[i] = id{c.rec.Bucket, c.rec.Key, c.ident}
			}
			rows, err := b.batchGet(ctx, ids)
			if err != nil {
				return err
			}
			cands = cands[:0]
			for _, k := range ids {
				if w := rows[k]; w != nil {
					cands = append(cands, w)
				}
			}
		}
		cands = slices.DeleteFunc(cands, func(w *row) bool { return !match(&w.rec) })
		if sel.DryRun {
			n += len(cands)
			return nil
		}
		done := make([]bool, len(cands))
		err := each(ctx, len(cands), func(ctx context.Context, i int) error {
			c := cands[i]
			_, _, err := b.change(ctx, id{c.rec.Bucket, c.rec.Key, c.ident}, nil, false, func(cur *row) (*ledger.Record, any, error) {
				if cur == nil || !match(&cur.rec) {
					return nil, nil, errSkip
				}
				r := cur.rec
				r.Status, r.Attempts, r.NextAttempt, r.Updated, r.LastError, r.LeaseUntil = ledger.Pending, 0, now, now, "", time.Time{}
				r.Replays++
				r.Gen++
				return &r, nil, nil
			})
			if errors.Is(err, errSkip) {
				return nil
			}
			done[i] = err == nil
			return err
		})
		for i, d := range done {
			if d {
				n++
				replayed[id{cands[i].rec.Bucket, cands[i].rec.Key, cands[i].ident}] = true
			}
		}
		return err
	}
	if sel.Bucket != "" && sel.Key != "" {
		rows, err := b.keyRows(ctx, sel.Bucket, sel.Key)
		if err != nil {
			return 0, err
		}
		err = replay(ctx, rows, true)
		return n, err
	}
	var since int64
	if !sel.UpdatedSince.IsZero() {
		since = max(driver.UnixMilli(sel.UpdatedSince), 1)
	}
	var seen []ledger.Status
	for _, st := range sel.Statuses {
		if slices.Contains(seen, st) {
			continue
		}
		seen = append(seen, st)
		err := b.statusPages(ctx, st, since, 0, sel.Bucket, sel.Prefix, func(ctx context.Context, rows []*row) error {
			return replay(ctx, rows, finished(st))
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Purge deletes finished records last updated before olderThan, found
// through their statuses' partitions of the age index a page at a time, each
// by a delete conditional on the revision it read (a record changed
// meanwhile is judged again).
func (b *Backend) Purge(ctx context.Context, olderThan time.Time, includeDead bool) (int, error) {
	limit := driver.UnixMilli(olderThan)
	purgeable := func(r *ledger.Record) bool {
		return driver.UnixMilli(r.Updated) < limit && (r.Status == ledger.Processed || includeDead && (r.Status == ledger.Failed || r.Status == ledger.Dead))
	}
	statuses := []ledger.Status{ledger.Processed}
	if includeDead {
		statuses = append(statuses, ledger.Failed, ledger.Dead)
	}
	n := 0
	for _, st := range statuses {
		err := b.statusPages(ctx, st, 0, limit, "", "", func(ctx context.Context, cands []*row) error {
			cands = slices.DeleteFunc(cands, func(w *row) bool { return !purgeable(&w.rec) })
			done := make([]bool, len(cands))
			err := each(ctx, len(cands), func(ctx context.Context, i int) error {
				var err error
				done[i], err = b.purgeOne(ctx, id{cands[i].rec.Bucket, cands[i].rec.Key, cands[i].ident}, purgeable)
				return err
			})
			for _, d := range done {
				if d {
					n++
				}
			}
			return err
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// purgeOne deletes the record k if it is purgeable, by a delete conditional
// on the revision read (the index holds none), and tells whether it is gone.
func (b *Backend) purgeOne(ctx context.Context, k id, purgeable func(r *ledger.Record) bool) (bool, error) {
	w, err := b.get(ctx, k)
	if err != nil {
		return false, err
	}
	for w != nil && purgeable(&w.rec) {
		_, err := b.c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &b.table, Key: k.key2(),
			ConditionExpression: aws.String("#rev = :rev"), ExpressionAttributeNames: map[string]string{"#rev": attrRev},
			ExpressionAttributeValues: map[string]types.AttributeValue{":rev": num(w.rev)}})
		if err == nil {
			b.recent.drop(k)
			return true, nil
		}
		again, gerr := b.get(ctx, k)
		if gerr != nil {
			return false, b.wrap("purge", err)
		}
		if again == nil {
			// Gone: this delete landed (its answer was lost), or another
			// purge's did.
			b.recent.drop(k)
			return true, nil
		}
		var cf *types.ConditionalCheckFailedException
		if !errors.As(err, &cf) && !retryable(err) {
			return false, b.wrap("purge", err)
		}
		w = again
	}
	return false, nil
}
