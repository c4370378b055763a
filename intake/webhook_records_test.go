package intake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/ledger/postgres"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// backends opens a fresh ledger of each kind.
var backends = map[string]func(t *testing.T) *ledger.Ledger{
	"sqlite": func(t *testing.T) *ledger.Ledger { return newLedger(t, nil) },
	"postgres": func(t *testing.T) *ledger.Ledger {
		url := testenv.PostgresSchema(t, testenv.PGExec)
		l, err := postgres.Open(context.Background(), url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	},
	"objstore": func(t *testing.T) *ledger.Ledger {
		l, err := objledger.Open(context.Background(), mem.Open(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	},
}

func rawRecord(bucket, rawKey, seq string) string {
	return `{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"` + bucket +
		`"},"object":{"key":"` + rawKey + `","size":1,"eTag":"e","sequencer":"` + seq + `"}}}`
}

// On every ledger backend alike, a record the ledger must not see gets a 200
// naming its field, its message kept as a dead letter (never a status a
// sender retries for ever), good records sent at the same moment get 200, and
// in a body with both the good ones are recorded and the bad ones reported
// and kept.
func TestWebhookBadRecordsOnEveryLedger(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"NUL":                "nul%00key",
		"invalid UTF-8":      "bad%FF%FEutf8",
		"2700 bytes":         strings.Repeat("x", 2700),
		"1025 bytes":         strings.Repeat("y", 1025),
		"bucket not a name":  "",
		"sequencer not hex":  "",
		"sequencer too long": "",
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := open(t)
			p, err := intake.New(l, intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }), &intake.Options{Registerer: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			start(t, p)
			srv := httptest.NewServer(p.Mux(intake.WebhookOptions{}, nil))
			defer srv.Close()
			post := func(body string) (int, intake.WebhookResponse) {
				resp, err := http.Post(srv.URL+"/v1/events", "application/json", bytes.NewReader([]byte(body)))
				if err != nil {
					t.Error(err)
					return 0, intake.WebhookResponse{}
				}
				defer resp.Body.Close()
				var r intake.WebhookResponse
				_ = json.NewDecoder(resp.Body).Decode(&r)
				return resp.StatusCode, r
			}
			var wg sync.WaitGroup
			good := 0
			for what, key := range bad {
				b, seq := "bkt", "0A"
				switch what {
				case "bucket not a name":
					b, key = "a b/c", "k"
				case "sequencer not hex":
					key, seq = "k", "0XZ"
				case "sequencer too long":
					key, seq = "k", strings.Repeat("F", 65)
				}
				wg.Go(func() {
					status, r := post(`{"Records":[` + rawRecord(b, key, seq) + `]}`)
					if status != http.StatusOK || r.Field == "" || r.Kept == nil || r.Kept.Bucket != intake.RefusedBucket {
						t.Errorf("%s: %d %+v, want 200 naming the field, the message kept", what, status, r)
					}
				})
				// Good deliveries at the same moment, some in the same
				// group commit as the bad ones.
				for i := range 5 {
					good++
					k := fmt.Sprintf("good/%s/%d", what, i)
					wg.Go(func() {
						if status, r := post(`{"Records":[` + rawRecord("bkt", url.QueryEscape(k), "0A") + `]}`); status != http.StatusOK {
							t.Errorf("good delivery %s beside a bad one: %d %+v", k, status, r)
						}
					})
				}
			}
			wg.Wait()
			// A body with both: 200, the good recorded, the bad reported.
			status, r := post(`{"Records":[` + rawRecord("bkt", "mixed-good", "01") + `,` + rawRecord("bkt", "mixed%00bad", "01") + `]}`)
			if status != http.StatusOK || len(r.Decisions) != 1 || len(r.Rejected) != 1 || r.Rejected[0].Field != "Records[1].s3.object.key" || r.Kept == nil {
				t.Fatalf("mixed body: %d %+v, want 200 with one decision and Records[1].s3.object.key rejected and kept", status, r)
			}
			// Bytes no ledger column takes (NUL, not UTF-8) in a body that
			// is not JSON: still 200, kept without them.
			for _, body := range []string{"{\"Records\": [\x00]}", "{\"Records\": \xff\xfe}"} {
				if status, r := post(body); status != http.StatusOK || r.Kept == nil {
					t.Fatalf("body %q: %d %+v, want 200, kept", body, status, r)
				}
			}
			// NUL in a field no limit covers (ETag, version id, request id):
			// recorded on every backend, never a 503 retried for ever.
			nulRec := strings.Replace(rawRecord("bkt", "nul-fields", "01"), `"eTag":"e"`, `"eTag":"e\u0000t","versionId":"v\u0000","responseElements":{"x-amz-request-id":"r\u0000"}`, 1)
			if status, r := post(`{"Records":[` + nulRec + `]}`); status != http.StatusOK || len(r.Decisions) != 1 {
				t.Fatalf("NUL in ETag, version id and request id: %d %+v, want 200 recorded", status, r)
			}
			good++
			refused := 2
			for _, key := range bad {
				if key != "" {
					refused++
				}
			}
			refused += 3 + 1 // the bucket and sequencer cases, the mixed body
			waitFor(t, func() bool {
				c, err := l.Counts(context.Background())
				return err == nil && c[ledger.Dead] == refused && sum(c) == good+1+refused
			})
		})
	}
}

// Events submitted by a Go program or a pull source are held to the same
// limits: refused whole with ErrInvalidEvent, nothing recorded.
func TestSubmitRefusesInvalidEvents(t *testing.T) {
	t.Parallel()
	l := newLedger(t, nil)
	p, err := intake.New(l, intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }), &intake.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	bad := ev("k\x00", 1)
	_, err = p.Submit(context.Background(), "go", []event.Event{ev("fine", 1), bad})
	var pe *event.ParseError
	if !errors.Is(err, intake.ErrInvalidEvent) || !errors.As(err, &pe) || pe.Field != "key" {
		t.Fatalf("Submit of a NUL key: %v, want ErrInvalidEvent naming key", err)
	}
	if c, _ := l.Counts(context.Background()); sum(c) != 0 {
		t.Fatalf("a refused submission recorded %v", c)
	}
}
