package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake/web"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/ledger"
)

func TestErrorClass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ a, b, class string }{
		{"handler: exit status 1", "handler: exit status 2", "handler: exit status #"},
		{`decode "a.jpg": bad`, `decode "b \"c\".jpg": bad`, `decode "…": bad`},
		{"request 550e8400-e29b-41d4-a716-446655440000 failed", "request 6ba7b810-9dad-11d1-80b4-00c04fd430c8 failed", "request # failed"},
		{"dial 10.0.0.1:5432: refused", "dial 192.168.12.7:6543: refused", "dial #: refused"},
		{"at 2026-11-27T14:39:36Z", "at 2025-01-02T03:04:05.123Z", "at #"},
		{"sha deadbeef00 mismatch", "sha 0123abcdef mismatch", "sha # mismatch"},
		{"can't  open\n\tfile 'x7'", "can't open file 'y'", "can't open file '…'"},
		{"", "   ", web.NoError},
	} {
		if got, got2 := web.ErrorClass(c.a), web.ErrorClass(c.b); got != c.class || got2 != c.class {
			t.Errorf("ErrorClass(%q) = %q, ErrorClass(%q) = %q, want %q", c.a, got, c.b, got2, c.class)
		}
	}
	if a, b := web.ErrorClass("disk full"), web.ErrorClass("permission denied"); a == b {
		t.Errorf("different errors, one class %q", a)
	}
	if got := web.ErrorClass(strings.Repeat("x ", 1000)); len(got) > 240 {
		t.Errorf("a class of %d bytes", len(got))
	}
}

// deadWith makes each key of bucket a dead letter failed with errOf(key).
func deadWith(t *testing.T, l *ledger.Ledger, bucket string, keys []string, errOf func(string) string) {
	t.Helper()
	ctx := context.Background()
	var evs []event.Event
	for _, k := range keys {
		evs = append(evs, event.Event{Bucket: bucket, Key: k, Sequencer: "0A", ETag: "e", Kind: event.Created, Name: "ObjectCreated:Put"})
	}
	if _, err := l.Record(ctx, "webhook", evs); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, len(keys), time.Hour)
	if err != nil || len(cs) != len(keys) {
		t.Fatalf("claimed %d of %d: %v", len(cs), len(keys), err)
	}
	for _, c := range cs {
		if err := l.Fail(ctx, c, errOf(c.Key), false); err != nil {
			t.Fatal(err)
		}
	}
}

func keysN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	return out
}

// statusOf is GET /api/v1/status?query.
func statusOf(t *testing.T, srv *httptest.Server, q url.Values) web.Status {
	t.Helper()
	code, body := do(t, mustReq(t, srv.URL+"/api/v1/status?"+q.Encode()))
	var st web.Status
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("status %v: %d %s", q, code, body)
	}
	return st
}

// TestDeadLettersByErrorFilteredAndPaged: the API groups the dead letters by
// error class, filters them by bucket, prefix, key and class, and pages
// through them with a cursor, every dead letter once: on a ledger that
// groups and selects by class in its own query, and on one that reads
// through List (listOnly: the object-store and DynamoDB ledgers' path).
func TestDeadLettersByErrorFilteredAndPaged(t *testing.T) {
	t.Parallel()
	t.Run("grouped in the query", func(t *testing.T) {
		t.Parallel()
		deadLettersFilteredAndPaged(t, testledger.New(t, &ledger.Options{MaxAttempts: 1}))
	})
	t.Run("grouped through List", func(t *testing.T) {
		t.Parallel()
		deadLettersFilteredAndPaged(t, ledger.New(listOnly{testledger.New(t, &ledger.Options{MaxAttempts: 1}).Backend()}))
	})
}

func deadLettersFilteredAndPaged(t *testing.T, l *ledger.Ledger) {
	n := 0
	deadWith(t, l, "photos", keysN("cats/", 30), func(k string) string { n++; return "handler: exit status " + string(rune('0'+n%10)) })
	deadWith(t, l, "photos", keysN("dogs/", 12), func(k string) string { return `decode "` + k + `": unsupported format` })
	deadWith(t, l, "videos", keysN("cats/", 5), func(k string) string { return "handler: exit status 9" })
	srv := httptest.NewServer(web.Handler(l, nil))
	defer srv.Close()

	st := statusOf(t, srv, nil)
	if st.DeadMatched != 47 || len(st.DeadGroups) != 2 || st.DeadGroups[0].Class != "handler: exit status #" || st.DeadGroups[0].Count != 35 ||
		st.DeadGroups[1].Count != 12 || len(st.DeadGroups[0].Examples) != 3 || st.DeadGroups[0].First.IsZero() || st.DeadGroups[0].Last.Before(st.DeadGroups[0].First) {
		t.Fatalf("groups: %+v, matched %d", st.DeadGroups, st.DeadMatched)
	}
	for _, c := range []struct {
		q    url.Values
		want int
	}{
		{url.Values{"bucket": {"videos"}}, 5},
		{url.Values{"prefix": {"cats/"}}, 35},
		{url.Values{"bucket": {"photos"}, "prefix": {"cats/"}}, 30},
		{url.Values{"key": {"cats/ab"}}, 2},
		{url.Values{"key": {"cats/ab"}, "prefix": {"dogs/"}}, 0},
		{url.Values{"error": {`decode "…": unsupported format`}}, 12},
		{url.Values{"error": {"handler: exit status #"}, "bucket": {"videos"}}, 5},
		{url.Values{"error": {"no such class"}}, 0},
	} {
		// Page through with a small limit: every selected letter once.
		seen := map[string]bool{}
		q := c.q
		q.Set("limit", "4")
		var first web.Status
		for pages := 0; ; pages++ {
			st := statusOf(t, srv, q)
			if pages == 0 {
				first = st
			}
			for _, r := range st.Dead {
				id := r.Bucket + "/" + r.Key
				if seen[id] || (q.Get("error") != "" && web.ErrorClass(r.LastError) != q.Get("error")) {
					t.Fatalf("%v: %s twice or not of the class", c.q, id)
				}
				seen[id] = true
			}
			if st.DeadNext == "" {
				break
			}
			if len(st.Dead) != 4 || pages > 20 {
				t.Fatalf("%v: a page of %d with a next page", c.q, len(st.Dead))
			}
			q.Set("after", st.DeadNext)
		}
		if len(seen) != c.want || first.DeadMatched != c.want {
			t.Errorf("%v: %d dead letters paged through, %d matched, want %d", c.q, len(seen), first.DeadMatched, c.want)
		}
	}
	for _, q := range []string{"after=xyz!", "limit=0", "limit=501", "limit=ten"} {
		if code, body := do(t, mustReq(t, srv.URL+"/api/v1/status?"+q)); code != http.StatusBadRequest || !strings.Contains(body, "error") {
			t.Errorf("?%s: %d %s, want 400", q, code, body)
		}
		if code, _ := do(t, mustReq(t, srv.URL+"/?"+q)); code != http.StatusBadRequest {
			t.Errorf("page ?%s: %d, want 400", q, code)
		}
	}
}

// TestReplayOfAGroupOrFilter: a group (an error class) or a filter replays
// only what it selects, with the count the caller saw, and the page's group
// forms have the same protections as Replay all.
func TestReplayOfAGroupOrFilter(t *testing.T) {
	t.Parallel()
	l := testledger.New(t, &ledger.Options{MaxAttempts: 1})
	deadWith(t, l, "photos", keysN("cats/", 6), func(k string) string { return "handler: exit status 1 for " + k })
	deadWith(t, l, "photos", keysN("dogs/", 4), func(k string) string { return "timeout after 30s" })
	deadWith(t, l, "videos", keysN("dogs/", 3), func(k string) string { return "timeout after 31s" })
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret"}))
	defer srv.Close()
	api := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/replay", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer op-secret")
		return do(t, req)
	}
	for _, body := range []string{`{"filter":true}`, `{"filter":true,"all":true,"bucket":"photos"}`, `{"all":true,"error":"x"}`, `{"error":"timeout after #"}`, `{"prefix":"dogs/","bucket":"photos"}`} {
		if code, resp := api(body); code != http.StatusBadRequest {
			t.Errorf("API %s: %d, want 400: %s", body, code, resp)
		}
	}
	if code, body := api(`{"filter":true,"error":"timeout after #","expect":4}`); code != http.StatusConflict || !strings.Contains(body, "7 records would be replayed now, not the 4") {
		t.Fatalf("a group of 7 expecting 4: %d %s", code, body)
	}
	if n := countOf(t, l, ledger.Dead); n != 13 {
		t.Fatalf("a refused replay replayed: %d dead of 13", n)
	}
	if code, body := api(`{"filter":true,"error":"timeout after #","bucket":"videos","expect":3}`); code != 200 || !strings.Contains(body, `"replayed":3`) {
		t.Fatalf("a group in one bucket: %d %s", code, body)
	}
	if code, body := api(`{"filter":true,"prefix":"cats/","expect":6}`); code != 200 || !strings.Contains(body, `"replayed":6`) {
		t.Fatalf("a prefix: %d %s", code, body)
	}
	if code, body := api(`{"filter":true,"key":"dogs/aa"}`); code != 200 || !strings.Contains(body, `"replayed":1`) {
		t.Fatalf("a key in any bucket: %d %s", code, body)
	}
	rs, err := l.Get(context.Background(), "photos", "dogs/ab")
	if err != nil || rs[0].Status != ledger.Dead || countOf(t, l, ledger.Dead) != 3 {
		t.Fatalf("replays replayed what they did not select: %+v %v, %d dead", rs, err, countOf(t, l, ledger.Dead))
	}

	// The page's group form: the operator token, its CSRF token, its origin.
	post := formPoster(t, srv, noRedirects)
	good := url.Values{"token": {"op-secret"}, "filter": {"1"}, "error": {"timeout after #"}, "expect": {"3"}}
	with := func(k, v string) url.Values {
		f := clone(good)
		f.Set(k, v)
		return f
	}
	for name, f := range map[string]url.Values{"wrong token": with("token", "guess"), "stale csrf": with("csrf", "0000"), "filter=maybe": with("filter", "maybe")} {
		if code, body := post(f, ""); code < 400 {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	if code, body := post(good, "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("cross origin: %d %s", code, body)
	}
	if n := countOf(t, l, ledger.Dead); n != 3 {
		t.Fatalf("a refused form replayed: %d dead of 3", n)
	}
	if code, body := post(good, srv.URL); code != http.StatusSeeOther {
		t.Fatalf("the group form: %d %s", code, body)
	}
	if n := countOf(t, l, ledger.Dead); n != 0 {
		t.Fatalf("%d dead letters left after replaying the group", n)
	}
}

// TestGroupsAfterAChangeElsewhere: a replay and a new dead letter that leave
// the number of dead letters as it was, made outside the page (cairn ledger
// replay, the intake's workers), show in the groups at once on a ledger that
// groups in its own query (the page used to show the grouping it made
// before for up to 5 seconds, without a word). On a ledger that groups by
// reading every dead letter (listOnly: the object-store and DynamoDB
// ledgers' path), a grouping reused says how old it is, and a replay
// through the page counts again at once.
func TestGroupsAfterAChangeElsewhere(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		reused bool
		l      func(t *testing.T) *ledger.Ledger
	}{
		{"grouped in the query", false, func(t *testing.T) *ledger.Ledger { return testledger.New(t, &ledger.Options{MaxAttempts: 1}) }},
		{"grouped through List", true, func(t *testing.T) *ledger.Ledger {
			return ledger.New(listOnly{testledger.New(t, &ledger.Options{MaxAttempts: 1}).Backend()})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l := c.l(t)
			deadWith(t, l, "photos", []string{"a", "b"}, func(string) string { return "disk full" })
			srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op"}))
			defer srv.Close()
			classes := func(st web.Status) string {
				var out []string
				for _, g := range st.DeadGroups {
					out = append(out, g.Class+"="+strconv.Itoa(g.Count))
				}
				return strings.Join(out, ", ")
			}
			if st := statusOf(t, srv, nil); classes(st) != "disk full=2" || !st.DeadGroupsAsOf.IsZero() {
				t.Fatalf("groups %q, as of %v", classes(st), st.DeadGroupsAsOf)
			}
			// Elsewhere: a is replayed and dies again, of another cause.
			if n, err := l.Replay(ctx, ledger.Selection{Bucket: "photos", Key: "a"}); n != 1 || err != nil {
				t.Fatalf("replayed %d: %v", n, err)
			}
			cs, err := l.Claim(ctx, 1, time.Hour)
			if err != nil || len(cs) != 1 {
				t.Fatalf("claimed %d: %v", len(cs), err)
			}
			if err := l.Fail(ctx, cs[0], "timeout after 30s", false); err != nil {
				t.Fatal(err)
			}
			st := statusOf(t, srv, nil)
			if c.reused {
				_, body := do(t, mustReq(t, srv.URL+"/"))
				if classes(st) != "disk full=2" || st.DeadGroupsAsOf.IsZero() || !strings.Contains(body, `id="groups-as-of"`) {
					t.Fatalf("a grouping reused: groups %q, as of %v, the page says so: %v", classes(st), st.DeadGroupsAsOf, strings.Contains(body, `id="groups-as-of"`))
				}
			} else if classes(st) != "disk full=1, timeout after #=1" || !st.DeadGroupsAsOf.IsZero() {
				t.Fatalf("after the change: groups %q, as of %v", classes(st), st.DeadGroupsAsOf)
			}
			// A replay through the page counts again at once, everywhere: here
			// one more record dies meanwhile, so the number of dead letters is
			// back to what it was when the grouping reused above was made.
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/replay", strings.NewReader(`{"filter":true,"error":"disk full","expect":1}`))
			req.Header.Set("Authorization", "Bearer op")
			if code, body := do(t, req); code != 200 || !strings.Contains(body, `"replayed":1`) {
				t.Fatalf("replay of the group: %d %s", code, body)
			}
			deadWith(t, l, "photos", []string{"c"}, func(string) string { return "disk full on /dev/sda1" })
			if st := statusOf(t, srv, nil); classes(st) != "disk full on /dev/#=1, timeout after #=1" || !st.DeadGroupsAsOf.IsZero() {
				t.Fatalf("after a replay through the page: groups %q, as of %v", classes(st), st.DeadGroupsAsOf)
			}
		})
	}
}
