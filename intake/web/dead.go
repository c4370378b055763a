package web

import (
	"context"
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/ledger"
)

// DeadFilter selects the dead letters the page and GET /api/v1/status show
// (query parameters bucket, prefix, key and error), and, in a replay with
// "filter": true, the records replayed. Empty fields select everything.
type DeadFilter struct {
	Bucket string `json:"bucket,omitempty"`
	Prefix string `json:"prefix,omitempty"` // key prefix
	Key    string `json:"key,omitempty"`    // one key, exactly
	Error  string `json:"error,omitempty"`  // an error class, as ErrorClass makes it
}

func (f DeadFilter) active() bool { return f != DeadFilter{} }

// none reports whether f can match no key at all (a key outside the prefix).
func (f DeadFilter) none() bool {
	return f.Key != "" && !strings.HasPrefix(f.Key, f.Prefix)
}

// ledgerFilter is f for the ledger's List and GroupErrors, records of
// status st.
func (f DeadFilter) ledgerFilter(st ledger.Status) ledger.Filter {
	lf := ledger.Filter{Status: st, Bucket: f.Bucket, Prefix: f.Prefix, ErrorClass: f.Error}
	if f.Key != "" {
		lf.Prefix, lf.Through = f.Key, f.Key
	}
	return lf
}

// query is f as URL query parameters (empty ones left out).
func (f DeadFilter) query() url.Values {
	v := url.Values{}
	for _, p := range [][2]string{{"bucket", f.Bucket}, {"prefix", f.Prefix}, {"key", f.Key}, {"error", f.Error}} {
		if p[1] != "" {
			v.Set(p[0], p[1])
		}
	}
	return v
}

// ErrorClass normalises an error message to its class: ledger.ErrorClass,
// which the SQL ledgers store with each record's error (the page groups and
// filters by it).
func ErrorClass(msg string) string { return ledger.ErrorClass(msg) }

// NoError is the class of a record that failed without a recorded error.
const NoError = ledger.NoError

// ErrorGroup is the dead letters of one error class: how many, when the
// first and the last of them died (their last update), and a few of their
// keys.
type ErrorGroup = ledger.ErrorGroup

// ExampleKey names one record of a group.
type ExampleKey = ledger.ExampleKey

const (
	// defaultPage and maxPage bound how many dead letters a page shows
	// (the limit query parameter).
	defaultPage, maxPage = 50, 500
	// shownGroups are listed.
	shownGroups = 100
	// examples per group.
	examples = 3
	// groupsFresh is how long a grouping is reused, on a ledger that does
	// not group in its own query (ledger.Ledger.GroupsErrorsInQuery), while
	// the number of dead letters is unchanged and no replay went through
	// this page: there, grouping reads every dead letter.
	groupsFresh = 5 * time.Second
)

// grouping is the dead letters a filter selects, by error class, and when
// it was made.
type grouping struct {
	ledger.ErrorGroups
	at   time.Time
	dead int // the ledger's dead letters when it was made
}

// group groups the dead letters f selects.
func group(ctx context.Context, l *ledger.Ledger, f DeadFilter) (*grouping, error) {
	if f.none() {
		return &grouping{}, nil
	}
	g, err := l.GroupErrors(ctx, f.ledgerFilter(ledger.Dead), shownGroups, examples)
	if err != nil {
		return nil, err
	}
	return &grouping{ErrorGroups: g}, nil
}

// groupCache keeps recent groupings, one per filter, for ledgers that do not
// group in their own query; on those that do (the SQL ledgers: one query off
// an index) every request groups afresh, so nothing shown is ever stale.
type groupCache struct {
	mu sync.Mutex // held while a grouping is made: one scan at a time
	m  map[DeadFilter]*grouping
}

// get returns the grouping of f: made now, or, where the ledger does not
// group in its own query, one made less than groupsFresh ago when the
// ledger held dead dead letters, as now (cached says so).
func (gc *groupCache) get(ctx context.Context, l *ledger.Ledger, f DeadFilter, dead int) (g *grouping, cached bool, err error) {
	if l.GroupsErrorsInQuery() {
		g, err := group(ctx, l, f)
		return g, false, err
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if g := gc.m[f]; g != nil && g.dead == dead && time.Since(g.at) < groupsFresh {
		return g, true, nil
	}
	if g, err = group(ctx, l, f); err != nil {
		return nil, false, err
	}
	g.at, g.dead = time.Now(), dead
	if gc.m == nil || len(gc.m) >= 16 {
		gc.m = map[DeadFilter]*grouping{} // bounded: filters come from URLs
	}
	gc.m[f] = g
	return g, false, nil
}

// clear forgets every grouping (after a replay through the page).
func (gc *groupCache) clear() {
	gc.mu.Lock()
	gc.m = nil
	gc.mu.Unlock()
}

// deadPage is up to limit dead letters f selects after the cursor, and the
// cursor of the next page ("" if this is the last).
func deadPage(ctx context.Context, l *ledger.Ledger, f DeadFilter, after cursor, limit int) ([]ledger.Record, string, error) {
	if f.none() {
		return []ledger.Record{}, "", nil
	}
	lf := f.ledgerFilter(ledger.Dead)
	lf.AfterBucket, lf.AfterIdent = after.bucket, after.ident
	lf.Limit = limit + 1
	page, err := l.List(ctx, lf)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(page) > limit {
		page = page[:limit]
		last := page[limit-1]
		next = cursor{last.Bucket, last.Ident}.String()
	}
	out := make([]ledger.Record, len(page))
	for i, c := range page {
		out[i] = c.Record
	}
	return out, next, nil
}

// cursor is where a page of dead letters starts: after this record.
type cursor struct{ bucket, ident string }

// String is the cursor as the after query parameter carries it: opaque,
// URL-safe base64 of bucket NUL ident (a bucket name holds no NUL).
func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.bucket + "\x00" + c.ident))
}

func parseCursor(s string) (cursor, bool) {
	if s == "" {
		return cursor{}, true
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false
	}
	bucket, ident, ok := strings.Cut(string(b), "\x00")
	return cursor{bucket, ident}, ok && bucket != ""
}

// deadQuery is what a GET asks of the dead letters.
type deadQuery struct {
	DeadFilter
	after cursor
	Limit int
}

// parseDeadQuery reads the dead letters' query parameters: bucket, prefix,
// key, error, after (a cursor from dead_next) and limit (1 to 500, default 50).
func parseDeadQuery(v url.Values) (deadQuery, error) {
	q := deadQuery{DeadFilter: DeadFilter{Bucket: v.Get("bucket"), Prefix: v.Get("prefix"), Key: v.Get("key"), Error: v.Get("error")}, Limit: defaultPage}
	var ok bool
	if q.after, ok = parseCursor(v.Get("after")); !ok {
		return q, refusal(400, "after "+quote(v.Get("after"))+" is not a cursor this page made: use dead_next from the last answer, or leave after out to start at the first dead letter")
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPage {
			return q, refusal(400, "limit "+quote(s)+" is not a number of dead letters from 1 to "+strconv.Itoa(maxPage))
		}
		q.Limit = n
	}
	return q, nil
}
