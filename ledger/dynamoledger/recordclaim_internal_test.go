package dynamoledger

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
)

// badPut answers 400 ValidationException to the PutItem of key's record.
type badPut struct {
	base http.RoundTripper
	key  string
}

func (p *badPut) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") && req.Body != nil {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"r#1#b#`+p.key+`"`)) {
			time.Sleep(300 * time.Millisecond) // the other key's write lands first
			msg := `{"__type":"com.amazon.coral.validate#ValidationException","message":"injected"}`
			return &http.Response{StatusCode: 400, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
				Body:   io.NopCloser(strings.NewReader(msg)), ContentLength: int64(len(msg)), Request: req}, nil
		}
	}
	return p.base.RoundTrip(req)
}

// A RecordAndClaim that fails gives back the claims it made in the writes
// that recorded other keys (found in review: they stayed claimed by no one
// for a whole lease, an attempt spent).
func TestRecordAndClaimFailureGivesClaimsBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "dynamodb://" + testenv.UniqueName("cairn-giveback") + "?endpoint=" + testenv.DynamoDB(t) + "&region=us-east-1&create_table=true"
	b, err := open(ctx, url, nil, &http.Client{Transport: &badPut{base: &http.Transport{}, key: "bad"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(b)
	defer l.Close()
	ev := func(key string) event.Event {
		return event.Event{Bucket: "b", Key: key, Sequencer: "01", Kind: event.Created, Name: "ObjectCreated:Put", ETag: "e"}
	}
	_, cs, err := l.RecordAndClaim(ctx, "s", []event.Event{ev("good"), ev("bad")}, 10, time.Hour)
	if err == nil {
		t.Fatalf("RecordAndClaim with a refused write succeeded (claims %d)", len(cs))
	}
	recs, err := l.Get(ctx, "b", "good")
	if err != nil || len(recs) != 1 {
		t.Fatalf("good: %+v %v", recs, err)
	}
	if recs[0].Status == ledger.Claimed {
		t.Fatalf("RecordAndClaim failed, yet left %q claimed by no caller (token %d, lease until %s)", "good", recs[0].Token, recs[0].LeaseUntil.Format(time.TimeOnly))
	}
	more, err := l.Claim(ctx, 10, time.Hour)
	if err != nil || len(more) != 1 || more[0].Key != "good" {
		t.Fatalf("Claim after the failure: %+v %v, want good's work", more, err)
	}
}

// putStall delays the first and second PutItem it carries.
type putStall struct {
	base          http.RoundTripper
	n             atomic.Int32
	first, second time.Duration
}

func (p *putStall) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".PutItem") {
		switch p.n.Add(1) {
		case 1:
			time.Sleep(p.first)
		case 2:
			time.Sleep(p.second)
		}
	}
	return p.base.RoundTrip(req)
}

// A Record call decided in another call's write returns at its own
// deadline, not when that write ends (found in review: a 600ms deadline
// returned after 6s, the other write's stall).
func TestGroupMemberReturnsAtItsDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "dynamodb://" + testenv.UniqueName("cairn-member") + "?endpoint=" + testenv.DynamoDB(t) + "&region=us-east-1&create_table=true"
	ps := &putStall{base: &http.Transport{}}
	b, err := open(ctx, url, nil, &http.Client{Transport: ps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(b)
	defer l.Close()
	ev := func(seq string) event.Event {
		return event.Event{Bucket: "b", Key: "k", Sequencer: seq, Kind: event.Created, Name: "ObjectCreated:Put", ETag: "e" + seq}
	}
	ps.n.Store(0)
	ps.first, ps.second = 300*time.Millisecond, 6*time.Second
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = l.Record(ctx, "s", []event.Event{ev("01")}) }) // leads write 1
	time.Sleep(100 * time.Millisecond)
	wg.Go(func() { _, _ = l.Record(ctx, "s", []event.Event{ev("02")}) }) // leads write 2, which stalls
	time.Sleep(50 * time.Millisecond)
	dctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = l.Record(dctx, "s", []event.Event{ev("03")}) // decided in write 2
	took := time.Since(start)
	wg.Wait()
	if took > 3*time.Second { // far below the 6s stall: only waiting for it reaches this
		t.Errorf("a Record with a 600ms deadline returned after %s (%v): it waited for another caller's write", took.Round(time.Millisecond), err)
	}
}
