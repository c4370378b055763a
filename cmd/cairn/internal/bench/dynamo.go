package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/dynamoledger"
)

// isDynamoLedger: the URL names a DynamoDB table.
func isDynamoLedger(url string) bool { return strings.HasPrefix(url, "dynamodb://") }

// requestCounter counts the DynamoDB requests sent through it, by operation.
type requestCounter struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *requestCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	op := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
	return c.base.RoundTrip(req)
}

// byOp is a copy of the counts so far, by operation.
func (c *requestCounter) byOp() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for op, n := range c.n {
		out[op] = n
	}
	return out
}

// perThousand says how many requests of each operation were sent between
// two byOp counts, per 1,000 of events.
func perThousand(before, after map[string]int, events int) string {
	var ops []string
	for op := range after {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	var parts []string
	for _, op := range ops {
		if n := after[op] - before[op]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", op, float64(n)*1000/float64(events)))
		}
	}
	return strings.Join(parts, ", ")
}

// writes and reads are the requests counted so far that write (each a
// billed write, refused conditional writes included) and that read.
func (c *requestCounter) counts() (writes, reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for op, n := range c.n {
		switch op {
		case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems":
			writes += n
		case "GetItem", "BatchGetItem", "Query", "Scan":
			reads += n
		}
	}
	return writes, reads
}

// benchDynamoLedger runs the ledger benchmark on a DynamoDB table (scratch:
// the table and TABLE-naive are deleted first and after): the baseline is
// the pattern of AWS Lambda Powertools' idempotency utility on the same
// server, per event a conditional put of an INPROGRESS item keyed by the
// event (refused for a duplicate) and, after the (no-op) handler, an update
// to COMPLETED; no ordering, no fencing, no retries or dead letters. cairn
// records in batches, then claims and completes until no work is left, so
// its writes per 1,000 events cover the whole life of every event.
func benchDynamoLedger(ctx context.Context, url string, evs []event.Event, keys, naiveEvents, batch, workers int) ([]Result, error) {
	u, err := neturl.Parse(url)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	table := u.Host
	var lo []func(*config.LoadOptions) error
	if r := q.Get("region"); r != "" {
		lo = append(lo, config.WithRegion(r))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	counter := &requestCounter{base: http.DefaultTransport.(*http.Transport).Clone(), n: map[string]int{}}
	hc := &http.Client{Transport: counter}
	c := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if ep := q.Get("endpoint"); ep != "" {
			o.BaseEndpoint = aws.String(ep)
		}
		o.HTTPClient = hc
	})
	naiveTable, pipeTable := table+"-naive", table+"-pipeline"
	tables := []string{table, naiveTable, pipeTable}
	for _, t := range tables {
		if err := dropTable(ctx, c, t); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, t := range tables {
			_ = dropTable(context.WithoutCancel(ctx), c, t)
		}
	}()

	// The baseline.
	n := min(naiveEvents, len(evs))
	naiveRate, naiveWrites, err := naivePowertools(ctx, c, naiveTable, evs[:n], workers, counter)
	if err != nil {
		return nil, fmt.Errorf("naive baseline: %w", err)
	}

	// cairn.
	if q.Get("create_table") == "" {
		q.Set("create_table", "true")
		u.RawQuery = q.Encode()
	}
	l, err := dynamoledger.OpenWithClient(ctx, u.String(), nil, hc)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	w0, r0 := counter.counts()
	ops0 := counter.byOp()
	t0 := time.Now()
	if err := recordParallel(ctx, l, evs, batch, workers); err != nil {
		return nil, err
	}
	recordTime := time.Since(t0)
	w1, _ := counter.counts()
	ops1 := counter.byOp()
	t1 := time.Now()
	claimRate, err := claimComplete(ctx, l, len(evs), workers)
	if err != nil {
		return nil, err
	}
	drainTime := time.Since(t1)
	w2, r2 := counter.counts()
	ops2 := counter.byOp()
	counts, err := l.Counts(ctx)
	if err != nil {
		return nil, err
	}
	const kind = "dynamodb"
	naiveDesc := fmt.Sprintf("Powertools' idempotency pattern: per event a conditional put INPROGRESS, then an update COMPLETED; %d workers, %d events", workers, n)
	r1 := NewResult("ledger/decisions ["+kind+"]", "events/s", naiveRate, float64(len(evs))/recordTime.Seconds())
	r1.BaselineDesc = naiveDesc
	r1.CairnDesc = fmt.Sprintf("Record in batches of %d from %d workers (%d events, %d keys)", batch, workers, len(evs), keys)
	r1.Note = "the baseline's figure is events decided and completed per second (it has no separate decision)"
	rc := NewResult("ledger/claim+complete ["+kind+"]", "records/s", naiveRate, claimRate)
	rc.BaselineDesc, rc.CairnDesc = "naive events/s (for scale)", fmt.Sprintf("Claim(100) + CompleteBatch, %d workers, until no work is left (%d processed records)", workers, counts["processed"])
	re := NewResult("ledger/end-to-end ["+kind+"]", "events/s", naiveRate, float64(len(evs))/(recordTime+drainTime).Seconds())
	re.BaselineDesc, re.CairnDesc = naiveDesc, "record, then claim and complete every record of work (coalescing overwrites of a key not yet processed)"
	rw := NewResult("ledger/write requests per 1,000 events ["+kind+"]", "requests", naiveWrites, float64(w2-w0)*1000/float64(len(evs)))
	rw.BaselineDesc = "put INPROGRESS + update COMPLETED per event (a refused put per duplicate)"
	rw.CairnDesc = fmt.Sprintf("record %.0f + claim and complete %.0f; %.0f reads", float64(w1-w0)*1000/float64(len(evs)),
		float64(w2-w1)*1000/float64(len(evs)), float64(r2-r0)*1000/float64(len(evs)))
	rw.Lower = true
	rw.Note = fmt.Sprintf("requests per 1,000 events by operation: record: %s; claim and complete: %s",
		perThousand(ops0, ops1, len(evs)), perThousand(ops1, ops2, len(evs)))

	// cairn as cairn serve runs it: each batch recorded and claimed in one
	// call, on a table of its own.
	pu := *u
	pu.Host = pipeTable
	pl, err := dynamoledger.OpenWithClient(ctx, pu.String(), nil, hc)
	if err != nil {
		return nil, err
	}
	defer pl.Close()
	w3, _ := counter.counts()
	ops3 := counter.byOp()
	t3 := time.Now()
	if err := pipeline(ctx, pl, evs, batch, workers); err != nil {
		return nil, err
	}
	pipeTime := time.Since(t3)
	w4, _ := counter.counts()
	ops4 := counter.byOp()
	rp := NewResult("ledger/pipeline [dynamodb]", "events/s", naiveRate, float64(len(evs))/pipeTime.Seconds())
	rp.BaselineDesc = naiveDesc
	rp.CairnDesc = fmt.Sprintf("as cairn serve runs it: %d workers each RecordAndClaim a batch of %d (room for all of it) and CompleteBatch what it claimed; then the rest claimed and completed", workers, batch)
	rpw := NewResult("ledger/pipeline write requests per 1,000 events [dynamodb]", "requests", naiveWrites, float64(w4-w3)*1000/float64(len(evs)))
	rpw.BaselineDesc, rpw.CairnDesc, rpw.Lower = rw.BaselineDesc, "the pipeline above, every write", true
	rpw.Note = "requests per 1,000 events by operation: " + perThousand(ops3, ops4, len(evs))
	return []Result{r1, rc, re, rw, rp, rpw}, nil
}

// pipeline runs evs as cairn serve does: each worker records a batch and
// claims work in one call (RecordAndClaim, with room for the whole batch),
// completes what it claimed, and takes the next batch; then what is left is
// claimed and completed.
func pipeline(ctx context.Context, l *ledger.Ledger, evs []event.Event, batch, workers int) error {
	next := make(chan []event.Event)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Go(func() {
			for b := range next {
				_, cs, err := l.RecordAndClaim(ctx, "bench", b, len(b), time.Minute)
				if err == nil && len(cs) > 0 {
					var errs []error
					errs, err = l.CompleteBatch(ctx, cs, make([]string, len(cs)))
					for _, e := range errs {
						err = firstErr(err, e)
					}
				}
				if err != nil {
					mu.Lock()
					first = firstErr(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := 0; i < len(evs); i += batch {
		next <- evs[i:min(i+batch, len(evs))]
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	_, err := claimComplete(ctx, l, len(evs), workers)
	return err
}

// naivePowertools runs the baseline on evs from workers goroutines and
// returns events/s and write requests per 1,000 events.
func naivePowertools(ctx context.Context, c *dynamodb.Client, table string, evs []event.Event, workers int, counter *requestCounter) (float64, float64, error) {
	_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: &table, BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}}})
	if err != nil {
		return 0, 0, err
	}
	if err := dynamodb.NewTableExistsWaiter(c, fastWaiter).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &table}, 5*time.Minute); err != nil {
		return 0, 0, err
	}
	w0, _ := counter.counts()
	t0 := time.Now()
	err = ForEach(ctx, len(evs), workers, func(i int) error {
		ev := evs[i]
		// Powertools keys the record by a hash of the event; the key and
		// sequencer identify an S3 event.
		key := ev.Bucket + "/" + ev.Key + "#" + ev.Sequencer
		now := time.Now()
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table,
			Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}, "status": &types.AttributeValueMemberS{Value: "INPROGRESS"},
				"expiration":         &types.AttributeValueMemberN{Value: fmt.Sprint(now.Add(time.Hour).Unix())},
				"in_progress_expiry": &types.AttributeValueMemberN{Value: fmt.Sprint(now.Add(time.Minute).UnixMilli())}},
			ConditionExpression:      aws.String("attribute_not_exists(id) OR expiration < :now OR (#s = :inprogress AND in_progress_expiry < :nowms)"),
			ExpressionAttributeNames: map[string]string{"#s": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: fmt.Sprint(now.Unix())},
				":nowms": &types.AttributeValueMemberN{Value: fmt.Sprint(now.UnixMilli())}, ":inprogress": &types.AttributeValueMemberS{Value: "INPROGRESS"}}})
		var cf *types.ConditionalCheckFailedException
		if errors.As(err, &cf) {
			return nil // a duplicate: already done (or in progress)
		}
		if err != nil {
			return err
		}
		_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}},
			UpdateExpression:          aws.String("SET #s = :done, #d = :data"),
			ExpressionAttributeNames:  map[string]string{"#s": "status", "#d": "data"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":done": &types.AttributeValueMemberS{Value: "COMPLETED"}, ":data": &types.AttributeValueMemberS{Value: "{}"}}})
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	rate := float64(len(evs)) / time.Since(t0).Seconds()
	w1, _ := counter.counts()
	return rate, float64(w1-w0) * 1000 / float64(len(evs)), nil
}

// dropTable deletes a scratch table if it exists and waits until it is gone.
func dropTable(ctx context.Context, c *dynamodb.Client, table string) error {
	_, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting the scratch table %s: %w", table, err)
	}
	return dynamodb.NewTableNotExistsWaiter(c, func(o *dynamodb.TableNotExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &table}, 5*time.Minute)
}

// fastWaiter polls a new table every 100 ms to 2 s (the SDK's default
// starts at 20 s).
func fastWaiter(o *dynamodb.TableExistsWaiterOptions) {
	o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
}
