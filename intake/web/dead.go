package web

import (
	"cmp"
	"context"
	"encoding/base64"
	"net/url"
	"slices"
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

// ledgerFilter is f for List, records of status st, without the error class
// (which no backend knows: the page matches it as it reads).
func (f DeadFilter) ledgerFilter(st ledger.Status) ledger.Filter {
	lf := ledger.Filter{Status: st, Bucket: f.Bucket, Prefix: f.Prefix}
	if f.Key != "" {
		lf.Prefix, lf.Through = f.Key, f.Key
	}
	return lf
}

// matches is the error class test (the rest is the ledger's).
func (f DeadFilter) matches(c ledger.Claim) bool {
	return f.Error == "" || ErrorClass(c.LastError) == f.Error
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

// ErrorGroup is the dead letters of one error class: how many, when the
// first and the last of them died (their last update), and a few of their
// keys.
type ErrorGroup struct {
	Class    string       `json:"class"`
	Count    int          `json:"count"`
	First    time.Time    `json:"first_seen"`
	Last     time.Time    `json:"last_seen"`
	Examples []ExampleKey `json:"example_keys"`
}

// ExampleKey names one record of a group.
type ExampleKey struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

const (
	// defaultPage and maxPage bound how many dead letters a page shows
	// (the limit query parameter).
	defaultPage, maxPage = 50, 500
	// scanPage is how many records a scan reads per List.
	scanPage = 1000
	// maxClasses bounds the classes counted in one grouping (their memory
	// does not grow with the ledger); the dead letters of further classes
	// are counted as Status.DeadGroupsOther. shownGroups are listed.
	maxClasses, shownGroups = 1000, 100
	// examples per group.
	examples = 3
	// groupsFresh is how long a grouping is reused while the number of dead
	// letters is unchanged: grouping reads every dead letter.
	groupsFresh = 5 * time.Second
)

// scan calls fn with each record f selects, in (bucket, ident) order from
// f's cursor, scanPage at a time, until fn returns false.
func scan(ctx context.Context, l *ledger.Ledger, f ledger.Filter, fn func(ledger.Claim) bool) error {
	f.Limit = scanPage
	for {
		cs, err := l.List(ctx, f)
		if err != nil || len(cs) == 0 {
			return err
		}
		for _, c := range cs {
			if !fn(c) {
				return nil
			}
		}
		last := cs[len(cs)-1]
		f.AfterBucket, f.AfterIdent = last.Bucket, last.Ident
	}
}

// grouping is the dead letters a filter (without its error class) selects,
// by error class.
type grouping struct {
	at     time.Time
	dead   int // the ledger's dead letters when it was made
	total  int
	counts map[string]*ErrorGroup
	other  int // dead letters of classes past maxClasses
	sorted []ErrorGroup
}

// group reads every dead letter f (bar its class) selects and groups them.
func group(ctx context.Context, l *ledger.Ledger, f DeadFilter) (*grouping, error) {
	g := &grouping{counts: map[string]*ErrorGroup{}}
	if f.none() {
		return g, nil
	}
	err := scan(ctx, l, f.ledgerFilter(ledger.Dead), func(c ledger.Claim) bool {
		g.total++
		class := ErrorClass(c.LastError)
		e := g.counts[class]
		if e == nil {
			if len(g.counts) >= maxClasses {
				g.other++
				return true
			}
			e = &ErrorGroup{Class: class, First: c.Updated, Last: c.Updated}
			g.counts[class] = e
		}
		e.Count++
		if c.Updated.Before(e.First) {
			e.First = c.Updated
		}
		if c.Updated.After(e.Last) {
			e.Last = c.Updated
		}
		if len(e.Examples) < examples {
			e.Examples = append(e.Examples, ExampleKey{Bucket: c.Bucket, Key: c.Key})
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	for _, e := range g.counts {
		g.sorted = append(g.sorted, *e)
	}
	slices.SortFunc(g.sorted, func(a, b ErrorGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Class, b.Class))
	})
	return g, nil
}

// groupCache keeps recent groupings, one per filter (its class aside).
type groupCache struct {
	mu sync.Mutex // held while a grouping is made: one scan at a time
	m  map[DeadFilter]*grouping
}

// get returns a grouping of f made less than groupsFresh ago when the
// ledger held dead dead letters, as now, or makes one.
func (gc *groupCache) get(ctx context.Context, l *ledger.Ledger, f DeadFilter, dead int) (*grouping, error) {
	f.Error = ""
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if g := gc.m[f]; g != nil && g.dead == dead && time.Since(g.at) < groupsFresh {
		return g, nil
	}
	g, err := group(ctx, l, f)
	if err != nil {
		return nil, err
	}
	g.at, g.dead = time.Now(), dead
	if gc.m == nil || len(gc.m) >= 16 {
		gc.m = map[DeadFilter]*grouping{} // bounded: filters come from URLs
	}
	gc.m[f] = g
	return g, nil
}

// deadPage is up to limit dead letters f selects after the cursor, and the
// cursor of the next page ("" if this is the last).
func deadPage(ctx context.Context, l *ledger.Ledger, f DeadFilter, after cursor, limit int) ([]ledger.Record, string, error) {
	if f.none() {
		return []ledger.Record{}, "", nil
	}
	lf := f.ledgerFilter(ledger.Dead)
	lf.AfterBucket, lf.AfterIdent = after.bucket, after.ident
	var page []ledger.Claim
	if f.Error == "" {
		lf.Limit = limit + 1
		var err error
		if page, err = l.List(ctx, lf); err != nil {
			return nil, "", err
		}
	} else {
		err := scan(ctx, l, lf, func(c ledger.Claim) bool {
			if f.matches(c) {
				page = append(page, c)
			}
			return len(page) <= limit
		})
		if err != nil {
			return nil, "", err
		}
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
