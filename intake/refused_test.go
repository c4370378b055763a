package intake_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/ledger"
)

// calls records what the handler was given.
type calls struct {
	mu   sync.Mutex
	seen []intake.Work
}

func (c *calls) Handle(_ context.Context, w intake.Work) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, w)
	return "ok", nil
}

func (c *calls) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, w := range c.seen {
		out = append(out, w.Event.Bucket+"/"+w.Event.Key)
	}
	return out
}

func logTo(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func refusedRecord(t *testing.T, l *ledger.Ledger, key string) ledger.Record {
	t.Helper()
	rs, err := l.Get(context.Background(), intake.RefusedBucket, key)
	if err != nil || len(rs) != 1 {
		t.Fatalf("refused record %s: %+v %v", key, rs, err)
	}
	return rs[0]
}

// TestWebhookRefusals: every message the webhook cannot accept is answered
// 200 and kept as a dead letter with its reason (a queueing sender would
// retry any other answer for ever, holding every later event behind it),
// the handler never runs for it, a redelivery is a duplicate of the same
// record, and the refusal is logged at warn and listed by Refusals. The
// refusals of how a sender is wired keep their 4xx, record nothing, and are
// logged and listed too.
func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	l := newLedger(t, nil)
	h := &calls{}
	var logs syncBuffer
	p, err := intake.New(l, h, &intake.Options{Registerer: prometheus.NewRegistry(), Logger: logTo(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	srv := httptest.NewServer(p.Mux(intake.WebhookOptions{Token: "tok", MaxBody: 64 << 10}, nil))
	defer srv.Close()
	url := srv.URL + "/v1/events"
	put, err := os.ReadFile("../event/testdata/minio-webhook-put.json")
	if err != nil {
		t.Fatal(err)
	}
	unknown := strings.ReplaceAll(string(put), "s3:ObjectCreated:Put", "s3:ObjectTeleported:Beam")
	content := []struct {
		name  string
		body  []byte
		class string
		hint  string
	}{
		{"malformed JSON", []byte(`{"Records": [`), "Malformed", "invalid JSON"},
		{"not an event", []byte(`{"hello": "world"}`), "UnknownFormat", "unknown event format"},
		{"unknown event type", []byte(unknown), "UnknownEventType", "ObjectTeleported"},
		{"too large", bytes.Repeat([]byte(" "), 65<<10), "TooLarge", "larger than the limit"},
		{"bad key encoding", []byte(strings.Replace(string(put), `"key": "dir%2F`, `"key": "%zz`, 1)), "Malformed", "s3.object.key"},
		{"bad sequencer", []byte(`{"Records":[` + rawRecord("bkt", "k", "0XZ") + `]}`), "Malformed", "s3.object.sequencer"},
		{"SNS subscription", []byte(`{"Type":"SubscriptionConfirmation","SubscribeURL":"https://example.com/x"}`), "UnknownFormat", "SubscribeURL"},
	}
	keys := map[string]string{}
	for _, tc := range content {
		for delivery := range 2 { // the second is a redelivery of the same message
			status, r := post(t, url, "tok", tc.body)
			if status != http.StatusOK || r.Kept == nil || r.Kept.Bucket != intake.RefusedBucket || !strings.Contains(r.Refused, tc.hint) {
				t.Fatalf("%s (delivery %d): %d %+v, want 200 keeping the message, the reason mentioning %q", tc.name, delivery+1, status, r, tc.hint)
			}
			if want := map[int]ledger.Outcome{0: ledger.Accepted, 1: ledger.Duplicate}[delivery]; r.Kept.Outcome != want {
				t.Errorf("%s (delivery %d): kept as %s, want %s", tc.name, delivery+1, r.Kept.Outcome, want)
			}
			keys[tc.name] = r.Kept.Key
		}
	}
	for _, tc := range content {
		key := keys[tc.name]
		waitFor(t, func() bool {
			rs, err := l.Get(context.Background(), intake.RefusedBucket, key)
			return err == nil && len(rs) == 1 && rs[0].Status == ledger.Dead
		})
		rec := refusedRecord(t, l, key)
		if rec.Name != intake.RefusedPrefix+tc.class || !strings.Contains(rec.LastError, tc.hint) || !strings.Contains(rec.LastError, "cairn replay --bucket cairn:refused --key "+key) || rec.Seen != 2 {
			t.Errorf("%s: record %+v, want dead, named %s, its last error the reason and how to replay, seen twice", tc.name, rec, tc.class)
		}
	}
	dead, err := l.List(context.Background(), ledger.Filter{Status: ledger.Dead})
	if err != nil || len(dead) != len(content) {
		t.Fatalf("dead letters: %d %v, want one per refused message (%d)", len(dead), err, len(content))
	}
	if ks := h.keys(); len(ks) != 0 {
		t.Fatalf("the handler ran for refused messages: %v", ks)
	}

	// Wiring refusals: 4xx (the sender's retries deliver once it is fixed),
	// nothing recorded, logged and listed.
	get, _ := http.NewRequest(http.MethodGet, url, nil)
	origin, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(put))
	origin.Header.Set("Content-Type", "application/json")
	origin.Header.Set("Origin", "https://evil.example")
	plain, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(put))
	plain.Header.Set("Content-Type", "text/plain")
	plain.Header.Set("Authorization", "Bearer tok")
	noToken, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(put))
	noToken.Header.Set("Content-Type", "application/json")
	for _, tc := range []struct {
		reason string
		req    *http.Request
		status int
	}{
		{"method", get, 405}, {"origin", origin, 403}, {"content_type", plain, 415}, {"unauthorized", noToken, 401},
	} {
		resp, err := http.DefaultClient.Do(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.reason, resp.StatusCode, tc.status)
		}
	}
	if c, _ := l.Counts(context.Background()); sum(c) != len(content) {
		t.Fatalf("wiring refusals recorded something: %v", c)
	}
	got := map[string]intake.Refusal{}
	for _, r := range p.Refusals() {
		got[r.Reason] = r
	}
	for reason, n := range map[string]int64{"Malformed": 6, "UnknownFormat": 4, "UnknownEventType": 2, "TooLarge": 2,
		"method": 1, "origin": 1, "content_type": 1, "unauthorized": 1} {
		if r := got[reason]; r.Count != n || r.Source != "webhook" || r.Detail == "" || r.Answer == "" {
			t.Errorf("Refusals()[%s] = %+v, want %d from webhook with the detail and the answer", reason, r, n)
		}
		// Logged at warn: the first of each reason at once; the repeats
		// within the interval are not.
		if c := strings.Count(logs.String(), "reason="+reason+" "); c != 1 {
			t.Errorf("reason %s logged %d times, want once (rate-limited):\n%s", reason, c, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"message refused\"") {
		t.Errorf("refusals not logged at warn:\n%s", logs.String())
	}
}

// TestRefusedReplay: replaying a refused message parses the kept message
// again; the events it yields now are recorded and run the handler, and the
// record is processed. One still refused goes back to dead with the reason;
// one not kept says so.
func TestRefusedReplay(t *testing.T) {
	t.Parallel()
	l := newLedger(t, nil)
	h := &calls{}
	p, err := intake.New(l, h, &intake.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	ctx := context.Background()
	// A message refused by an older cairn that this one accepts: kept
	// with the reason the older one gave.
	fixed, _ := intake.RefusedEvent(event.S3Body(ev("now-accepted\nkey", 7)), event.ErrUnknownEventType, nil)
	still, _ := intake.RefusedEvent([]byte(`{"hello":"world"}`), event.ErrUnknownFormat, nil)
	ds, err := p.Submit(ctx, "webhook", []event.Event{fixed, still})
	if err != nil || ds[0].Outcome != ledger.Accepted || ds[1].Outcome != ledger.Accepted {
		t.Fatalf("Submit of refused messages: %+v %v", ds, err)
	}
	for _, e := range []event.Event{fixed, still} {
		waitFor(t, func() bool { return refusedRecord(t, l, e.Key).Status == ledger.Dead })
	}
	if ks := h.keys(); len(ks) != 0 {
		t.Fatalf("the handler ran before a replay: %v", ks)
	}
	n, err := l.Replay(ctx, ledger.Selection{Bucket: intake.RefusedBucket})
	if err != nil || n != 2 {
		t.Fatalf("Replay: %d %v", n, err)
	}
	waitFor(t, func() bool { return refusedRecord(t, l, fixed.Key).Status == ledger.Processed })
	waitFor(t, func() bool { r := refusedRecord(t, l, still.Key); return r.Status == ledger.Dead && r.Replays == 1 })
	if r := refusedRecord(t, l, fixed.Key); !strings.Contains(r.Result, "replayed: 1 events recorded (new 1)") {
		t.Errorf("replayed record: %+v", r)
	}
	if r := refusedRecord(t, l, still.Key); !strings.Contains(r.LastError, "replayed, still refused (UnknownFormat)") || !strings.Contains(r.LastError, "not a JSON object") && !strings.Contains(r.LastError, "unknown event format") || !strings.Contains(r.LastError, "cairn replay --bucket cairn:refused") {
		t.Errorf("still refused: %+v", r)
	}
	waitFor(t, func() bool { return len(h.keys()) == 1 })
	if ks := h.keys(); ks[0] != "b/now-accepted\nkey" {
		t.Fatalf("the handler ran for %q, want the replayed event's key", ks)
	}
	h.mu.Lock()
	w := h.seen[0]
	h.mu.Unlock()
	if w.Source != "webhook" || w.Event.Sequencer != ev("", 7).Sequencer {
		t.Errorf("replayed work: %+v, want the original source and sequencer", w)
	}
}

// TestOwnObjectsSkipped: events for cairn's own objects (each prefix) are
// answered Ignored, not recorded, counted and said once in the log; keys that
// merely look like them are the user's. ProcessOwnObjects turns it off.
func TestOwnObjectsSkipped(t *testing.T) {
	t.Parallel()
	own := []string{"cairn-probe/verdict.json", "cairn-locks/tree/a.json", "cairn-journal/j1.json", "cairn-ledger/shards/000/head.json",
		"cairn-probe/x-2"}
	user := []string{"cairn-probe-x/y", "data/cairn-locks/z", "cairn-journal", "Cairn-Probe/v", "cairn-ledgers/x", "x/cairn-ledger/y"}
	if len(cairn.OwnPrefixes()) != 4 {
		t.Fatalf("OwnPrefixes %v: this test names four", cairn.OwnPrefixes())
	}
	for _, processOwn := range []bool{false, true} {
		l := newLedger(t, nil)
		h := &calls{}
		var logs syncBuffer
		p, err := intake.New(l, h, &intake.Options{Registerer: prometheus.NewRegistry(), Logger: logTo(&logs), ProcessOwnObjects: processOwn})
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, p)
		var evs []event.Event
		for i, k := range append(append([]string{}, own...), user...) {
			evs = append(evs, ev(k, i+1))
		}
		ds, err := p.Submit(context.Background(), "webhook", evs)
		if err != nil || len(ds) != len(evs) {
			t.Fatalf("Submit: %v %v", ds, err)
		}
		for i, d := range ds {
			isOwn := i < len(own)
			if d.Key != evs[i].Key || (isOwn && !processOwn) != (d.Outcome == ledger.Ignored) {
				t.Errorf("processOwn=%v: %q decided %+v", processOwn, evs[i].Key, d)
			}
		}
		want := len(user)
		if processOwn {
			want += len(own)
		}
		waitFor(t, func() bool { return len(h.keys()) >= want })
		stop()
		if ks := h.keys(); len(ks) != want {
			t.Errorf("processOwn=%v: the handler ran for %q, want %d keys", processOwn, ks, want)
		}
		if c, _ := l.Counts(context.Background()); sum(c) != want {
			t.Errorf("processOwn=%v: the ledger holds %v, want %d records", processOwn, c, want)
		}
		for _, prefix := range cairn.OwnPrefixes() {
			n := strings.Count(logs.String(), "skipping events for cairn's own objects")
			if processOwn && n != 0 || !processOwn && (n != 4 || !strings.Contains(logs.String(), "prefix="+prefix)) {
				t.Errorf("processOwn=%v: prefix %s: said %d times:\n%s", processOwn, prefix, n, logs.String())
			}
		}
	}
}

// TestOwnPrefixesPerBucket: Options.OwnPrefixes (cairn serve: an s3://
// ledger's prefix) skips keys under those prefixes in that bucket only.
func TestOwnPrefixesPerBucket(t *testing.T) {
	t.Parallel()
	l := newLedger(t, nil)
	h := &calls{}
	p, err := intake.New(l, h, &intake.Options{Registerer: prometheus.NewRegistry(), OwnPrefixes: map[string][]string{"b": {"ledger/"}}})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	other := ev("ledger/shards/000/head.json", 3)
	other.Bucket = "c"
	evs := []event.Event{ev("ledger/shards/000/head.json", 1), ev("ledgers/x", 2), other}
	ds, err := p.Submit(context.Background(), "webhook", evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []ledger.Outcome{ledger.Ignored, ledger.Accepted, ledger.Accepted} {
		if ds[i].Outcome != want {
			t.Errorf("%s/%s: %s, want %s", evs[i].Bucket, evs[i].Key, ds[i].Outcome, want)
		}
	}
}
