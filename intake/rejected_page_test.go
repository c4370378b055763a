package intake_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/event/eventtest"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/web"
)

// Every refusal cairn_intake_rejected_total counts is on the status page and
// in its API: how many in all, per source and reason, and the latest one by
// one with when, why and the key, escaped on the page as keys are (issue 38;
// before, an event Submit refused and a message a source refused itself
// moved the metric and nothing else).
func TestEveryRejectionIsOnThePage(t *testing.T) {
	t.Parallel()
	l := newLedger(t, nil)
	reg := prometheus.NewRegistry()
	p, err := intake.New(l, &calls{}, &intake.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	hook := httptest.NewServer(p.Mux(intake.WebhookOptions{Token: "tok"}, nil))
	defer hook.Close()
	if status, _ := post(t, hook.URL+"/v1/events", "wrong", []byte(`{}`)); status != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", status)
	}
	if status, r := post(t, hook.URL+"/v1/events", "tok", []byte(`{"Records": [`)); status != http.StatusOK || r.Kept == nil {
		t.Fatalf("malformed: %d %+v", status, r)
	}
	long := "DEAD\u202eRTL/" + strings.Repeat("x", event.MaxKeyLen) // too long for S3
	if _, err := p.Submit(context.Background(), "nats", []event.Event{eventtest.Created("bkt", long, "01")}); !errors.Is(err, intake.ErrInvalidEvent) {
		t.Fatalf("an invalid event: %v, want ErrInvalidEvent", err)
	}
	p.Refused("sqs", 3) // a source's own refusals (left to the queue's redrive policy)

	// The metric and the page agree.
	var metric float64
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "cairn_intake_rejected_total" {
			for _, m := range mf.GetMetric() {
				metric += m.GetCounter().GetValue()
			}
		}
	}
	if metric != 6 || p.RefusedTotal() != 6 {
		t.Fatalf("cairn_intake_rejected_total %v, RefusedTotal %d: want 6 each", metric, p.RefusedTotal())
	}
	reasons := map[string]int64{}
	for _, r := range p.Refusals() {
		reasons[r.Source+" "+r.Reason] = r.Count
	}
	if reasons["nats invalid_record"] != 1 || reasons["sqs invalid_record"] != 3 || reasons["webhook unauthorized"] != 1 || reasons["webhook Malformed"] != 1 {
		t.Fatalf("refusals per source and reason: %v", reasons)
	}
	recent := p.RecentRefusals()
	if len(recent) != 4 || recent[0].Source != "sqs" || recent[0].Count != 3 || recent[1].Key != "bkt/"+long ||
		!strings.HasPrefix(recent[2].Key, intake.RefusedBucket+"/") || recent[3].Reason != "unauthorized" {
		t.Fatalf("recent refusals: %+v", recent)
	}

	// The page, wired as cairn serve wires it.
	srv := httptest.NewServer(web.Handler(l, &web.Options{RefusedTotal: p.RefusedTotal, RecentRefusals: func() []web.RecentRefusal {
		var out []web.RecentRefusal
		for _, r := range p.RecentRefusals() {
			out = append(out, web.RecentRefusal(r))
		}
		return out
	}}))
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var st web.Status
	if err := json.Unmarshal([]byte(get("/api/v1/status")), &st); err != nil || st.RefusedTotal != 6 || len(st.RecentRefusals) != 4 || st.RecentRefusals[1].Key != "bkt/"+long {
		t.Fatalf("API: %d refused, %d recent (%v)", st.RefusedTotal, len(st.RecentRefusals), err)
	}
	page := get("/")
	if !strings.Contains(page, `<span id="refused-total">6</span>`) || !strings.Contains(page, `id="recent-refusals"`) ||
		!strings.Contains(page, `DEAD\u202eRTL/xxx`) || strings.Contains(page, "DEAD\u202eRTL") {
		t.Fatal("the page does not list the latest refusals with their keys escaped")
	}
}
