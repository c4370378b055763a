package dynamoledger_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// putGate holds every PutItem until released (after the first is held, held
// is closed).
type putGate struct {
	base     http.RoundTripper
	once     sync.Once
	held     chan struct{}
	released chan struct{}
	armed    bool
	mu       sync.Mutex
}

func (g *putGate) RoundTrip(req *http.Request) (*http.Response, error) {
	g.mu.Lock()
	armed := g.armed
	g.mu.Unlock()
	if armed && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") {
		g.once.Do(func() { close(g.held) })
		<-g.released
	}
	return g.base.RoundTrip(req)
}

// TestRequestsPerEvent: the requests a record's life takes. Two Record
// calls of one handle with the same keys, the second reading them while the
// first's writes are in flight, write each key twice and read nothing more
// (the second starts from the first's rows; it used to write on the rows it
// read, have every write refused, read each record again and write again).
// Claim reads its candidates in one batched read, and Complete writes on the
// row its claim wrote, reading nothing (each used to read every record).
// RecordAndClaim claims new records in the writes that record them.
func TestRequestsPerEvent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := newMeter(t)
	g := &putGate{base: m, held: make(chan struct{}), released: make(chan struct{})}
	l := open(t, newTable(t), nil, &http.Client{Transport: g})
	const n = 50
	batch := func(seq string) []event.Event {
		var evs []event.Event
		for i := range n {
			evs = append(evs, event.Event{Bucket: "b", Key: fmt.Sprintf("k%02d", i), Sequencer: seq, Kind: event.Created, ETag: "e" + seq})
		}
		return evs
	}
	if _, err := l.Record(ctx, "s", batch("01")); err != nil {
		t.Fatal(err)
	}
	m.reset()
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
	first := make(chan error, 1)
	go func() {
		_, err := l.Record(ctx, "s", batch("02"))
		first <- err
	}()
	<-g.held // the first call read its keys and its writes are held
	second := make(chan []ledger.Decision, 1)
	go func() {
		ds, err := l.Record(ctx, "s", batch("03"))
		if err != nil {
			t.Error(err)
		}
		second <- ds
	}()
	// Let the second call read its keys (its reads are not held), then
	// release every write.
	for {
		if ops, _ := m.snapshot(); ops["BatchGetItem"] >= 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(g.released)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	ds := <-second
	for _, d := range ds {
		if d.Outcome != ledger.Coalesced {
			t.Fatalf("the second call's decisions: %v, want coalesced", d)
		}
	}
	if ops, _ := m.snapshot(); ops["PutItem"] != 2*n || ops["GetItem"] != 0 {
		t.Errorf("two calls writing %d keys: %d writes, %d reads of one record (%v); want %d and none", n, ops["PutItem"], ops["GetItem"], ops, 2*n)
	}

	m.reset()
	cs, err := l.Claim(ctx, n, time.Minute)
	if err != nil || len(cs) != n {
		t.Fatalf("claim: %d, %v", len(cs), err)
	}
	results := make([]string, n)
	errs, err := l.CompleteBatch(ctx, cs, results)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ops, _ := m.snapshot(); ops["PutItem"] != 2*n || ops["GetItem"] != 0 || ops["BatchGetItem"] != 1 {
		t.Errorf("claiming and completing %d records: %d writes, %d reads of one record, %d batched reads (%v); want %d, none, one",
			n, ops["PutItem"], ops["GetItem"], ops["BatchGetItem"], ops, 2*n)
	}

	// RecordAndClaim with room for the batch claims its new records in the
	// writes that record them (it wrote them, then read and claimed them).
	m.reset()
	var evs []event.Event
	for i := range n {
		evs = append(evs, event.Event{Bucket: "b", Key: fmt.Sprintf("new%02d", i), Sequencer: "01", Kind: event.Created, ETag: "e"})
	}
	ds, cs, err = l.RecordAndClaim(ctx, "s", evs, 2*n, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != n {
		t.Fatalf("RecordAndClaim of %d new events claimed %d", n, len(cs))
	}
	for i, c := range cs {
		if ds[i].Outcome != ledger.Accepted || c.Token < 1 || c.Attempts != 1 || c.Status != ledger.Claimed {
			t.Fatalf("decision %s, claim %+v", ds[i].Outcome, c)
		}
		if err := l.Complete(ctx, c, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	if ops, _ := m.snapshot(); ops["PutItem"] != 2*n || ops["GetItem"] != 0 || ops["BatchGetItem"] != 1 {
		t.Errorf("RecordAndClaim and Complete of %d new events: %d writes, %d reads of one record, %d batched reads (%v); want %d, none, one",
			n, ops["PutItem"], ops["GetItem"], ops["BatchGetItem"], ops, 2*n)
	}
}

// TestRequestsWhileClaimed: a newer event recorded by the handle that holds
// the claim does not cost the Complete a refused write and a read (it wrote
// on the row of its claim, which the newer event had moved on); two Claim
// calls of one handle racing for the same records do not both write each
// (one skips what the other is claiming).
func TestRequestsWhileClaimed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := newMeter(t)
	g := &putGate{base: m, held: make(chan struct{}), released: make(chan struct{})}
	l := open(t, newTable(t), nil, &http.Client{Transport: g})
	const n = 50
	batch := func(seq string) []event.Event {
		var evs []event.Event
		for i := range n {
			evs = append(evs, event.Event{Bucket: "b", Key: fmt.Sprintf("k%02d", i), Sequencer: seq, Kind: event.Created, ETag: "e" + seq})
		}
		return evs
	}
	if _, err := l.Record(ctx, "s", batch("01")); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, n, time.Minute)
	if err != nil || len(cs) != n {
		t.Fatalf("claim: %d, %v", len(cs), err)
	}
	if _, err := l.Record(ctx, "s", batch("02")); err != nil {
		t.Fatal(err)
	}
	m.reset()
	for _, c := range cs {
		if err := l.Complete(ctx, c, ""); err != nil {
			t.Fatal(err)
		}
	}
	if ops, _ := m.snapshot(); ops["PutItem"] != n || ops["GetItem"] != 0 {
		t.Errorf("completing %d claims whose records had a newer event since: %d writes, %d reads (%v); want %d and none", n, ops["PutItem"], ops["GetItem"], ops, n)
	}
	// The newer events are pending again: two claimers race for them.
	m.reset()
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
	got := make(chan int, 2)
	claim := func() {
		cs, err := l.Claim(ctx, n, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- len(cs)
	}
	go claim()
	<-g.held // the first claimer's writes are held
	go claim()
	for {
		if ops, _ := m.snapshot(); ops["BatchGetItem"] >= 2 {
			break // the second read the candidates
		}
		time.Sleep(time.Millisecond)
	}
	close(g.released)
	if total := <-got + <-got; total != n {
		t.Fatalf("two claimers claimed %d of %d records", total, n)
	}
	if ops, _ := m.snapshot(); ops["PutItem"] != n || ops["GetItem"] != 0 {
		t.Errorf("two claimers of one handle claiming %d records: %d writes, %d reads of one record (%v); want %d and none", n, ops["PutItem"], ops["GetItem"], ops, n)
	}
}
