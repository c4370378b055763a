// Package dynamoledger is the intake ledger on Amazon DynamoDB (or a server
// of its API), for many workers in many processes and machines sharing one
// table, with nothing to run: the AWS-native shared ledger. Open it as
//
//	dynamodb://TABLE?region=REGION&endpoint=URL&create_table=true&shards=N&retention=DURATION
//
// (credentials from the standard AWS chain: environment, profile, IAM role)
// or link it in and use ledger.Open with the same URL.
//
// # Design
//
// One table; key pk (string) and sk (string); on-demand billing. A record is
// one item: partition "r#<len(bucket)>#<bucket>#<key>", sort key "r" (plus
// the version with Options.EveryVersion), so all records of a key are one
// Query. Every state change is a conditional PutItem of the whole record on
// the revision read (attribute_not_exists for a new one), so writers in any
// number of processes never lose an update and never need a lock or a
// transaction; the rules are driver.Decide's, as on every backend.
//
// Work is found through the sparse global secondary index "work": records
// with work to do (pending, failed, claimed) carry wp = "w#<shard>" and ws =
// the time their work is due (pending and failed: next attempt; claimed:
// lease expiry). The shard is a hash of the key (Options: shards=N, default
// 8, fixed when the ledger is made), so no single index partition takes every
// write. Claim queries each shard for its earliest due work (RecordAndClaim
// takes the earliest of the shards its batch touched; Claim takes those
// candidates in a random order, so that concurrent claimers do not all race
// for the same few records), reads the
// candidates (strongly consistent, 100 a request) and claims each with a
// write conditional on the revision read that raises its fencing token by
// one: the index may lag
// or show a state that has moved on (it is eventually consistent on
// DynamoDB), the record and the condition decide. Work that has just become
// due may be missed by one Claim while the index catches up; it is never
// claimed twice. Claims never scan the table. Finished records (processed,
// failed, dead) carry the "age" index's ap = "a#<status>#<shard>" and as =
// last update, which Purge, Replay and Counts query (each only the statuses
// it wants, Purge and Replay from or to a time, a page at a time). Both
// indexes project only bucket, key, ident and status, which change only
// when the index keys do, so a write that changes neither (a duplicate, a
// coalesced or stale delivery, a renewal) writes no index item. Every record
// carries the "keys" index's kp = "k#<shard>" and ks = bucket, \x01 and
// ident (cut to 1,024 bytes), projecting the identity only, which never
// changes (an index item written when the record is made, deleted when it
// is purged): List pages through it in (bucket, ident) order, merging the
// shards, from the cursor to the end of the prefix.
//
// Requests are saved where the rules allow (see group.go and held.go):
// Record calls of one handle that reach a record while its write is in
// flight are decided together in the next write, and a call starts from its
// handle's own newer write of a record rather than have its write refused;
// RecordAndClaim claims the batch's new work in the writes that record it
// (after the work due before the batch has its share of the slots); the
// ends of a claim (Complete, Fail, Release, Renew) write on the row the
// claim wrote, without reading it. BatchWriteItem takes no conditions, so
// no state change can ride on it; TransactWriteItems is not used (dynalite
// has none).
//
// # Guarantees
//
//   - A Record that returned nil is durable (DynamoDB acknowledges a write
//     once it is stored in several availability zones).
//   - Every write carries a writer nonce kept, with the last 16, on the
//     record; a write whose answer was lost (retried by the SDK and refused
//     because the first attempt had landed, or failed outright) is judged by
//     reading the record back, so a lost response neither doubles nor loses a
//     decision, a claim or a completion. Throttling
//     (ProvisionedThroughputExceededException, ThrottlingException) is
//     retried by the SDK's retryer with backoff.
//   - A record's revision starts at its creation time in microseconds, so a
//     record purged and made again never takes a revision that a request
//     still in flight for its predecessor was conditioned on.
//   - Lease expiry is judged by the clock of the process that claims
//     (Options.Now, else the local clock): keep the machines' clocks in sync
//     (NTP) to within a small part of a lease. (An estimate of the
//     endpoint's clock from its answers' Date headers was tried and taken
//     out: one answer with a wrong Date moved it by the whole error, and a
//     second worker took over a running lease.)
//
// # Limits
//
// Nothing scans the table. Counts reads the index items of the records with
// work to do, and counts the processed and dead ones (Select=COUNT): its cost
// grows with the ledger (about a read unit per 30 processed records), and
// counters kept beside the records could not be exact without transactions
// (see Counts). List of pending, claimed, failed or dead records reads that
// status's index items and sorts them (they are few unless a backlog is
// large); other lists read about what they return. The indexes are
// eventually consistent: a record just made may be missing from a List or
// the Counts for a moment. A record batch is not atomic: each key is its own
// conditional write, so a batch that failed may be partly recorded (a
// redelivery reports those events as duplicates). OldestPending reads the
// work index. Options.EveryVersion
// keeps one version of a key claimed at a time with a lock item per key
// beside its records (see keylock.go): a claim costs one more write there,
// and Complete, Fail and Release one more to give the lock up.
//
// # Retention
//
// Purge works everywhere (through the age index, no Scan). With
// retention=DURATION when the ledger is made (kept in its descriptor, so every
// writer does the same), processed records carry expires_at = last update +
// DURATION (unix seconds), and the table made with create_table=true has
// DynamoDB TTL turned on for that attribute, where the endpoint has TTL
// (dynalite answers UnknownOperationException: skipped). On a table made by
// hand, turn TTL on for expires_at yourself.
//
// # Errors
//
// A missing table is an error that names the table and the schema to make
// (or create_table=true); with Options.MustExist it is ledger.ErrNoLedger.
// An endpoint that cannot be reached is ledger.ErrUnavailable.
package dynamoledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	neturl "net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

func init() {
	ledger.Register("dynamodb", func(ctx context.Context, raw string, opts *ledger.Options) (ledger.Backend, error) {
		return open(ctx, raw, opts, nil, nil)
	})
}

// DefaultShards is how many shards the work and age indexes have unless the
// URL says (shards=N, when the ledger is made).
const DefaultShards = 8

// Backend is the DynamoDB ledger backend; users hold the *ledger.Ledger Open
// returns.
type Backend struct {
	c         *dynamodb.Client
	table     string
	shards    int
	retention time.Duration
	opts      ledger.Options
	where     string
	local     func() time.Time // the local clock (tests skew it)
	held      heldRows         // rows of the claims this handle holds
	recent    recentRows       // rows this handle last wrote or read (Record starts from them)
	claiming  claiming         // records this handle's claims are writing now
	gmu       sync.Mutex
	queues    map[id]*keyQueue // Record calls waiting on a write of their key (group.go)
}

// Open opens the ledger in the DynamoDB table the URL names
// (dynamodb://TABLE?region=…&endpoint=…), making the table first with
// create_table=true, and its descriptor item if the table has none (with
// Options.MustExist nothing is made: a table without the descriptor is
// ledger.ErrNoLedger).
func Open(ctx context.Context, url string, opts *ledger.Options) (*ledger.Ledger, error) {
	return OpenWithClient(ctx, url, opts, nil)
}

// OpenWithClient is Open with the HTTP client the SDK sends its requests
// through (nil: the SDK's): a proxy, or a test's fault injector.
func OpenWithClient(ctx context.Context, url string, opts *ledger.Options, hc aws.HTTPClient) (*ledger.Ledger, error) {
	b, err := open(ctx, url, opts, hc, nil)
	if err != nil {
		return nil, err
	}
	return ledger.New(b), nil
}

// config is what a URL says.
type urlConfig struct {
	table, region, endpoint string
	create                  bool
	shards                  int // 0: not given
	retention               time.Duration
}

var tableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

func parseURL(raw string) (urlConfig, error) {
	var c urlConfig
	u, err := neturl.Parse(raw)
	if err != nil || u.Scheme != "dynamodb" {
		return c, fmt.Errorf("%w: want dynamodb://TABLE?region=…&endpoint=…", ledger.ErrInvalidURL)
	}
	c.table = u.Host
	if !tableName.MatchString(c.table) || (u.Path != "" && u.Path != "/") || u.User != nil {
		return c, fmt.Errorf("%w: %q: the table name is 3 to 255 of A-Z a-z 0-9 _ . - right after dynamodb:// (dynamodb://TABLE?region=…)",
			ledger.ErrInvalidURL, c.table+u.Path)
	}
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "region":
			c.region = v
		case "endpoint":
			c.endpoint = v
		case "create_table":
			if c.create, err = strconv.ParseBool(v); err != nil {
				return c, fmt.Errorf("%w: create_table=%q: want true or false", ledger.ErrInvalidURL, v)
			}
		case "shards":
			if c.shards, err = strconv.Atoi(v); err != nil || c.shards < 1 || c.shards > 1024 {
				return c, fmt.Errorf("%w: shards=%q: want a number from 1 to 1024", ledger.ErrInvalidURL, v)
			}
		case "retention":
			if c.retention, err = time.ParseDuration(v); err != nil || c.retention < ledger.MinPurgeAge {
				// TTL deletes records as a purge does, and a purged key's
				// next tokens rest on clocks agreeing within that age.
				return c, fmt.Errorf("%w: retention=%q: want a duration of at least %s (ledger.MinPurgeAge), e.g. 720h", ledger.ErrInvalidURL, v, ledger.MinPurgeAge)
			}
		default:
			return c, fmt.Errorf("%w: unknown parameter %q in a dynamodb:// URL (known: region, endpoint, create_table, shards, retention)",
				ledger.ErrInvalidURL, k)
		}
	}
	return c, nil
}

// Schema is the table the ledger needs, for the error when it is missing.
const Schema = `key pk (HASH, string) and sk (RANGE, string); global secondary indexes "work" (wp string HASH, ws number RANGE) and "age" (ap string HASH, as number RANGE), both projecting (INCLUDE) bucket, key, ident and status, and "keys" (kp string HASH, ks string RANGE) projecting (INCLUDE) bucket, key and ident; on-demand billing (PAY_PER_REQUEST)`

// open opens the ledger; local is the local clock (nil: time.Now; tests
// skew it).
func open(ctx context.Context, raw string, opts *ledger.Options, hc aws.HTTPClient, local func() time.Time) (*Backend, error) {
	uc, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	var lo []func(*config.LoadOptions) error
	if uc.region != "" {
		lo = append(lo, config.WithRegion(uc.region))
	}
	// The standard retryer backs off throttling and 5xx answers; with more
	// attempts than its default 3, as a queue's ledger outlives a burst.
	// Retrying a conditional write is safe: a retry refused because an
	// earlier attempt landed is told apart by the writer's nonce.
	lo = append(lo, config.WithRetryer(func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 10
			o.MaxBackoff = 5 * time.Second
			// No client-side retry quota: a ledger outlives a long spell of
			// throttling, backing off, rather than failing fast.
			o.RateLimiter = ratelimit.None
		})
	}))
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("dynamodb ledger: loading AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if local == nil {
		local = time.Now
	}
	c := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if uc.endpoint != "" {
			o.BaseEndpoint = aws.String(uc.endpoint)
		}
		if hc != nil {
			o.HTTPClient = hc
		}
	})
	b := &Backend{c: c, table: uc.table, retention: uc.retention, opts: driver.Defaults(opts), where: "dynamodb://" + uc.table, local: local,
		queues: map[id]*keyQueue{}}
	if uc.endpoint != "" {
		b.where += " at " + uc.endpoint
	}
	if err := b.setUp(ctx, uc, opts != nil && opts.MustExist); err != nil {
		return nil, err
	}
	return b, nil
}

// setUp finds (or makes) the table and the ledger's descriptor.
func (b *Backend) setUp(ctx context.Context, uc urlConfig, mustExist bool) error {
	_, err := b.c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &b.table})
	var nf *types.ResourceNotFoundException
	switch {
	case errors.As(err, &nf) && mustExist:
		return fmt.Errorf("%s: no such table: %w", b.where, ledger.ErrNoLedger)
	case errors.As(err, &nf) && !uc.create:
		return fmt.Errorf("%s: no such table; make it with %s, or add create_table=true to the URL to have cairn make it", b.where, Schema)
	case errors.As(err, &nf):
		if err := b.createTable(ctx, uc); err != nil {
			return err
		}
	case err != nil:
		return b.wrap("describing the table", err)
	}
	out, err := b.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{attrPK: str(metaPK), attrSK: str(metaSK)}})
	if err != nil {
		return b.wrap("reading the ledger's descriptor", err)
	}
	if out.Item == nil {
		if mustExist {
			return fmt.Errorf("%s: the table holds no ledger (no descriptor item): %w", b.where, ledger.ErrNoLedger)
		}
		shards := uc.shards
		if shards == 0 {
			shards = DefaultShards
		}
		item := map[string]types.AttributeValue{attrPK: str(metaPK), attrSK: str(metaSK), "format": num(format), "shards": num(int64(shards)),
			"made": num(time.Now().UnixMilli())}
		if uc.retention > 0 {
			item["retention_ms"] = num(uc.retention.Milliseconds())
		}
		_, err := b.c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &b.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")})
		var cf *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &cf) {
			return b.wrap("writing the ledger's descriptor", err)
		}
		// Made by us or by another process at the same time: read what won.
		return b.setUp(ctx, urlConfig{table: uc.table, shards: uc.shards, retention: uc.retention}, true)
	}
	nv, _ := out.Item["shards"].(*types.AttributeValueMemberN)
	fv, _ := out.Item["format"].(*types.AttributeValueMemberN)
	switch {
	case fv != nil && fv.Value == "1":
		// Made by a development build before the keys index: no index to
		// list from, age partitions without the status.
		return fmt.Errorf("%s: the table holds a ledger of an older layout (format 1, without the keys index); make a new table for this cairn (%s)", b.where, Schema)
	case nv == nil || fv == nil || fv.Value != strconv.Itoa(format):
		return fmt.Errorf("%s: the ledger's descriptor is not one this cairn reads (format %v): upgrade cairn", b.where, out.Item["format"])
	}
	b.shards, _ = strconv.Atoi(nv.Value)
	if b.shards < 1 {
		return fmt.Errorf("%s: the ledger's descriptor says %q shards", b.where, nv.Value)
	}
	if rv, ok := out.Item["retention_ms"].(*types.AttributeValueMemberN); ok && b.retention == 0 {
		// Kept by the ledger, so that every writer sets expires_at alike.
		ms, _ := strconv.ParseInt(rv.Value, 10, 64)
		b.retention = time.Duration(ms) * time.Millisecond
	}
	if uc.shards != 0 && uc.shards != b.shards {
		return fmt.Errorf("%s: the ledger was made with %d shards, the URL asks for %d: drop shards= from the URL (it only applies when a ledger is made)",
			b.where, b.shards, uc.shards)
	}
	return nil
}

// createTable makes the table (on-demand billing) and waits for it, then
// turns on TTL where the endpoint has it.
func (b *Backend) createTable(ctx context.Context, uc urlConfig) error {
	s, n := types.ScalarAttributeTypeS, types.ScalarAttributeTypeN
	index := func(name, p, s string, attrs []string) types.GlobalSecondaryIndex {
		return types.GlobalSecondaryIndex{IndexName: aws.String(name),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: attrs},
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(p), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(s), KeyType: types.KeyTypeRange}}}
	}
	_, err := b.c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   &b.table,
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: s}, {AttributeName: aws.String(attrSK), AttributeType: s},
			{AttributeName: aws.String(attrWorkP), AttributeType: s}, {AttributeName: aws.String(attrWorkS), AttributeType: n},
			{AttributeName: aws.String(attrAgeP), AttributeType: s}, {AttributeName: aws.String(attrAgeS), AttributeType: n},
			{AttributeName: aws.String(attrKeysP), AttributeType: s}, {AttributeName: aws.String(attrKeysS), AttributeType: s}},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{index(indexWork, attrWorkP, attrWorkS, indexAttributes),
			index(indexAge, attrAgeP, attrAgeS, indexAttributes), index(indexKeys, attrKeysP, attrKeysS, keysAttributes)},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) { // another process made it meanwhile
		return b.wrap("creating the table", err)
	}
	w := dynamodb.NewTableExistsWaiter(b.c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: &b.table}, 5*time.Minute); err != nil {
		return b.wrap("waiting for the new table", err)
	}
	if uc.retention > 0 {
		_, err := b.c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: &b.table,
			TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrExpires), Enabled: aws.Bool(true)}})
		if err != nil && !notImplemented(err) {
			return b.wrap("turning on TTL", err)
		}
	}
	return nil
}

// notImplemented tells an endpoint that lacks an operation (dynalite has no
// TTL): UnknownOperationException, or a 400/501 naming the operation.
func notImplemented(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := ae.ErrorCode()
		return code == "UnknownOperationException" || code == "NotImplemented" || strings.Contains(code, "UnknownOperation")
	}
	return false
}

// wrap maps an SDK error once: an endpoint that cannot be reached is
// ledger.ErrUnavailable; the rest keep the SDK's words.
// EveryVersion reports whether the ledger was opened with
// ledger.Options.EveryVersion (ledger.Ledger.EveryVersion asks it).
func (b *Backend) EveryVersion() bool { return b.opts.EveryVersion }

func (b *Backend) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	var oe *net.OpError
	var se *smithyhttp.RequestSendError
	if errors.As(err, &oe) && oe.Op == "dial" || errors.As(err, &se) {
		return fmt.Errorf("dynamodb ledger: %s: %w (is %s reachable and the endpoint right?): %v", what, ledger.ErrUnavailable, b.where, err)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "UnrecognizedClientException", "InvalidSignatureException", "MissingAuthenticationTokenException", "ExpiredTokenException":
			return fmt.Errorf("dynamodb ledger: %s: %s rejected the credentials; set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE: %w", what, b.where, err)
		case "AccessDeniedException":
			return fmt.Errorf("dynamodb ledger: %s: %s denied access; the IAM policy needs the permissions the README lists: %w", what, b.where, err)
		}
	}
	return fmt.Errorf("dynamodb ledger: %s on %s: %w", what, b.where, err)
}

// now is the ledger's clock, to the millisecond (what is stored): the local
// clock, or Options.Now if set (tests).
func (b *Backend) now() time.Time {
	var t time.Time
	if b.opts.Now != nil {
		t = b.opts.Now()
	} else {
		t = b.local()
	}
	return driver.FromUnixMilli(driver.UnixMilli(t))
}

func nonce() string {
	var x [8]byte
	_, _ = rand.Read(x[:])
	return hex.EncodeToString(x[:])
}

// errSkip is a change's function declining to write (nothing to do).
var errSkip = errors.New("skip")

// change is the one way a record changes: fn gets the current row (nil if
// there is none) and returns the record to store (nil: nothing to write) and
// what the caller wants from that decision; change writes it conditionally on
// the revision fn saw, and runs fn again on a fresh, strongly consistent read
// when the write was refused because the record moved on. cur is the row as
// the caller last read it (loaded: it was read; else change reads it).
//
// Every attempt carries a nonce of its own, kept on the record; after any
// error, the record is read back and an attempt whose nonce is there has
// landed (a response lost, or a retry the SDK sent after an attempt that had
// landed was refused): its result is the answer, so a decision is never
// taken twice or lost.
func (b *Backend) change(ctx context.Context, i id, cur *row, loaded bool, fn func(cur *row) (*ledger.Record, any, error)) (*row, any, error) {
	sent := map[string]struct {
		w   *row
		out any
	}{}
	if !loaded {
		var err error
		if cur, err = b.get(ctx, i); err != nil {
			return nil, nil, err
		}
		b.recent.put(i, cur)
	}
	for attempt := 0; ; attempt++ {
		next, out, err := fn(cur)
		if err != nil {
			return cur, nil, err
		}
		if next == nil {
			return cur, out, nil
		}
		w := &row{rec: *next, ident: i.ident}
		n := nonce()
		w.nonces = append([]string{n}, nil...)
		cond, vals := aws.String("attribute_not_exists(pk)"), map[string]types.AttributeValue(nil)
		if cur != nil {
			w.rev = cur.rev + 1
			w.nonces = append(w.nonces, cur.nonces[:min(len(cur.nonces), keptNonces-1)]...)
			cond, vals = aws.String("#rev = :rev"), map[string]types.AttributeValue{":rev": num(cur.rev)}
		} else {
			w.rev = b.local().UnixMicro()
		}
		sent[n] = struct {
			w   *row
			out any
		}{w, out}
		var names map[string]string
		if vals != nil {
			names = map[string]string{"#rev": attrRev}
		}
		_, perr := b.c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &b.table, Item: b.marshal(w), ConditionExpression: cond,
			ExpressionAttributeNames: names, ExpressionAttributeValues: vals})
		if perr == nil {
			b.recent.put(i, w)
			return w, out, nil
		}
		var cf *types.ConditionalCheckFailedException
		if !errors.As(perr, &cf) && ctx.Err() != nil {
			return nil, nil, b.wrap("write", perr)
		}
		// Read back: did any attempt land?
		again, gerr := b.get(ctx, i)
		if gerr != nil {
			return nil, nil, b.wrap("write", perr)
		}
		b.recent.put(i, again)
		if again != nil {
			for _, nn := range again.nonces {
				if s, ok := sent[nn]; ok {
					return s.w, s.out, nil
				}
			}
		}
		if !errors.As(perr, &cf) && !retryable(perr) {
			return nil, nil, b.wrap("write", perr)
		}
		cur = again
		if attempt >= 3 {
			// Contention: stand back a little, more each time.
			d := time.Duration(math.Min(float64(attempt), 20)) * time.Millisecond
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(d/2 + time.Duration(randN(int64(d)))):
			}
		}
	}
}

// retryable tells a write error after which a fresh attempt may be made: one
// that may not have reached the server or that the server may repeat
// (throttled after the retryer gave up, 5xx, a connection lost).
func retryable(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded", "InternalServerError", "ServiceUnavailable":
			return true
		}
		var re *smithyhttp.ResponseError
		return errors.As(err, &re) && re.HTTPStatusCode() >= 500
	}
	return true // no answer from the server at all
}

func randN(n int64) int64 {
	if n <= 0 {
		return 0
	}
	var x [8]byte
	_, _ = rand.Read(x[:])
	v := int64(0)
	for _, c := range x {
		v = v<<8 | int64(c)
	}
	if v < 0 {
		v = -v
	}
	return v % n
}

// get reads one record, strongly consistent (nil if there is none).
func (b *Backend) get(ctx context.Context, i id) (*row, error) {
	out, err := b.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table, Key: i.key2(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, b.wrap("read", err)
	}
	if out.Item == nil {
		return nil, nil
	}
	return unmarshal(out.Item)
}
