package dynamoledger

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
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
