package intake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
)

func webhookServer(t *testing.T, l *ledger.Ledger, h intake.Handler) (*httptest.Server, *intake.Pipeline) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p, err := intake.New(l, h, &intake.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	srv := httptest.NewServer(p.Mux(intake.WebhookOptions{Token: "tok", MaxBody: 64 << 10}, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	t.Cleanup(srv.Close)
	return srv, p
}

func post(t *testing.T, url, token string, body []byte) (int, intake.WebhookResponse) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r intake.WebhookResponse
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("reply is not JSON: %q", data)
	}
	return resp.StatusCode, r
}

// TestWebhookBadInput: a request refused for how it is sent gets a clear 4xx
// and records nothing; a message that cannot be accepted gets 200 and is kept
// as a dead letter (TestWebhookRefusals); the server keeps serving.
func TestWebhookBadInput(t *testing.T) {
	l := newLedger(t, nil)
	srv, _ := webhookServer(t, l, intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }))
	url := srv.URL + "/v1/events"
	put, err := os.ReadFile("../event/testdata/minio-webhook-put.json")
	if err != nil {
		t.Fatal(err)
	}
	unknown := strings.Replace(string(put), "s3:ObjectCreated:Put", "s3:ObjectTeleported:Beam", -1)
	cases := []struct {
		name, token string
		body        []byte
		status      int
		hint        string
	}{
		{"no token", "", put, 401, "token"},
		{"wrong token", "tok2", put, 401, "token"},
		{"malformed JSON", "tok", []byte(`{"Records": [`), 200, "event"},
		{"not an event", "tok", []byte(`{"hello": "world"}`), 200, "unknown event format"},
		{"unknown event type", "tok", []byte(unknown), 200, "ObjectTeleported"},
		{"oversized", "tok", bytes.Repeat([]byte(" "), 65<<10), 200, "larger"},
		{"bad key encoding", "tok", []byte(strings.Replace(string(put), `"key": "dir%2F`, `"key": "%zz`, 1)), 200, "s3.object.key"},
	}
	kept := 0
	for _, tc := range cases {
		status, r := post(t, url, tc.token, tc.body)
		msg := r.Error
		if status == 200 {
			msg, kept = r.Refused, kept+1
		}
		if status != tc.status || !strings.Contains(msg, tc.hint) || (status == 200) != (r.Kept != nil) {
			t.Errorf("%s: %d %+v, want %d mentioning %q", tc.name, status, r, tc.status, tc.hint)
		}
	}
	if resp, err := http.Get(url); err != nil || resp.StatusCode != 405 {
		t.Errorf("GET /v1/events: %v %v, want 405", resp, err)
	}
	if rs, err := l.List(context.Background(), ledger.Filter{}); err != nil || len(rs) != kept {
		t.Fatalf("bad requests recorded %+v %v, want the %d kept messages only", rs, err, kept)
	}
	for _, r := range func() []ledger.Claim { rs, _ := l.List(context.Background(), ledger.Filter{}); return rs }() {
		if r.Bucket != intake.RefusedBucket {
			t.Fatalf("a bad request recorded %+v", r.Record)
		}
	}
	// Still serving: the real body is recorded, and a duplicate flood of it
	// from 32 senders records it once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[ledger.Outcome]int{}
	for range 32 {
		wg.Go(func() {
			for range 10 {
				status, r := post(t, url, "tok", put)
				if status != 200 || len(r.Decisions) != 1 {
					t.Errorf("flood: %d %+v", status, r)
					return
				}
				mu.Lock()
				outcomes[r.Decisions[0].Outcome]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if outcomes[ledger.Accepted] != 1 || outcomes[ledger.Duplicate] != 319 {
		t.Fatalf("duplicate flood outcomes %v, want 1 new and 319 duplicates", outcomes)
	}
	evs, _ := event.Parse(put)
	rs, err := l.Get(context.Background(), evs[0].Bucket, evs[0].Key)
	if err != nil || len(rs) != 1 || rs[0].Seen != 320 {
		t.Fatalf("record after the flood: %+v %v", rs, err)
	}
	// Metrics tell the story.
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`cairn_intake_decisions_total{outcome="duplicate"} 319`, `cairn_intake_rejected_total{reason="malformed",source="webhook"} 2`, `cairn_intake_rejected_total{reason="unknown",source="webhook"} 2`,
		`cairn_intake_rejected_total{reason="too_large",source="webhook"} 1`, `cairn_intake_rejected_total{reason="unauthorized",source="webhook"} 2`,
		`cairn_intake_events_received_total{format="minio",source="webhook"} 320`, `cairn_ledger_records{status=`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("%s: %v %v", path, resp, err)
		}
	}
}

func sum(c ledger.Counts) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// TestWebhookLedgerDown: with the ledger closed, the webhook answers 503 with
// Retry-After (the sender keeps the event), and /readyz fails.
func TestWebhookLedgerDown(t *testing.T) {
	l := newLedger(t, nil)
	srv, _ := webhookServer(t, l, intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }))
	l.Close()
	status, r := post(t, srv.URL+"/v1/events", "tok", event.S3Body(ev("k", 1)))
	if status != 503 || r.Error == "" {
		t.Fatalf("ledger down: %d %+v, want 503", status, r)
	}
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("readyz with the ledger down: %v %v", resp, err)
	}
	_ = fmt.Sprint()
}
