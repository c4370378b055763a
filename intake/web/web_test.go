package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/event/eventtest"
	"github.com/cairn-s3/cairn/intake/web"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/ledger"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// ledgerWith holds a dead letter, a failure to retry and a running claim.
func ledgerWith(t *testing.T) *ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	l := testledger.New(t, &ledger.Options{MaxAttempts: 2})
	ev := func(k string) event.Event { return eventtest.Created("photos", k, "0A") }
	if _, err := l.Record(ctx, "webhook", []event.Event{ev("cats/dead ünï.jpg"), ev("dogs/flaky.jpg"), ev("birds/running.jpg")}); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		switch c.Key {
		case "cats/dead ünï.jpg":
			err = l.Fail(ctx, c, "decoder: unsupported <format> & co", false)
		case "dogs/flaky.jpg":
			err = l.Fail(ctx, c, "database timeout", true)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestStatusPageInChromium: the page renders in a real headless Chromium, and
// its Replay button replays a dead letter; the screenshot is kept.
func TestStatusPageInChromium(t *testing.T) {
	bin := testenv.Chromium(t)
	l := ledgerWith(t)
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret", Activity: func() []int {
		a := make([]int, 60)
		for i := range a {
			a[i] = i * 3 % 17
		}
		return a
	}}))
	defer srv.Close()

	ctx := browser(t, bin)

	var dead, failures, claims, flash string
	var forged bool
	var shot []byte
	err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#dead`, chromedp.ByID),
		chromedp.Text(`#count-dead`, &dead, chromedp.ByID),
		chromedp.Text(`#failures`, &failures, chromedp.ByID),
		chromedp.Text(`#claims`, &claims, chromedp.ByID),
		chromedp.SendKeys(`form.replay input[name=token]`, "op-secret", chromedp.ByQuery),
		chromedp.Click(`form.replay button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#flash`, chromedp.ByID),
		chromedp.Text(`#flash`, &flash, chromedp.ByID),
		chromedp.FullScreenshot(&shot, 100), // 100: PNG
		// Only the server's own messages show: a made-up flash shows nothing.
		chromedp.Navigate(srv.URL+"/?flash="+url.QueryEscape("Your session expired: sign in again at evil.example")),
		chromedp.WaitVisible(`#dead`, chromedp.ByID),
		chromedp.Evaluate(`document.getElementById("flash") !== null || document.body.innerText.includes("evil.example")`, &forged),
	)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if dead != "1" || !strings.Contains(failures, "database timeout") || !strings.Contains(claims, "birds/running.jpg") {
		t.Fatalf("page: dead %q, failures %q, claims %q", dead, failures, claims)
	}
	if !strings.Contains(flash, "replayed 1 record") {
		t.Fatalf("after Replay: %q", flash)
	}
	if forged {
		t.Fatal("the page shows a flash message the server never set")
	}
	rs, err := l.Get(context.Background(), "photos", "cats/dead ünï.jpg")
	if err != nil || rs[0].Status != ledger.Pending || rs[0].Replays != 1 {
		t.Fatalf("the dead letter was not replayed: %+v %v", rs, err)
	}
	path := filepath.Join(testenv.ArtifactDir(t), "status-page.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// browser starts a headless Chromium for the test, for a minute at most.
func browser(t *testing.T, bin string) context.Context {
	t.Helper()
	return browserFor(t, bin, time.Minute)
}

// browserFor starts a headless Chromium for the test, for d at most.
func browserFor(t *testing.T, bin string, d time.Duration) context.Context {
	t.Helper()
	// Not t.TempDir: Chromium's helper processes may still write into the
	// profile for a moment after the browser exits (CI: "unlinkat …/Default:
	// directory not empty"). This cleanup runs after the browser's (LIFO)
	// and retries.
	profile, err := os.MkdirTemp("", "cairn-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			err := os.RemoveAll(profile)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("removing the browser's profile: %v", err)
				return
			}
		}
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 1000))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, d)
	t.Cleanup(cancelT)
	return ctx
}

// TestActionsAreProtected: wrong token, missing or stale CSRF token, another
// origin, and a read-only page all refuse; the API needs the bearer token.
func TestActionsAreProtected(t *testing.T) {
	t.Parallel()
	l := ledgerWith(t)
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret"}))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	postForm := formPoster(t, srv, client)
	post := func(form url.Values, origin string) int {
		code, _ := postForm(form, origin)
		return code
	}
	good := url.Values{"token": {"op-secret"}, "bucket": {"photos"}, "key": {"cats/dead ünï.jpg"}}
	with := func(k, v string) url.Values {
		f := url.Values{}
		for kk, vv := range good {
			f[kk] = vv
		}
		f.Set(k, v)
		return f
	}
	for name, code := range map[string]int{
		"wrong token":  post(with("token", "guess"), ""),
		"stale csrf":   post(with("csrf", "0000"), ""),
		"cross origin": post(good, "https://evil.example"),
	} {
		if code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("%s: %d, want 401 or 403", name, code)
		}
	}
	if rs, _ := l.Get(context.Background(), "photos", "cats/dead ünï.jpg"); rs[0].Replays != 0 {
		t.Fatal("a refused request replayed")
	}
	if code := post(good, srv.URL); code != http.StatusSeeOther {
		t.Fatalf("a good form post: %d", code)
	}
	// The API: bearer token only.
	for tok, want := range map[string]int{"": 401, "nope": 401, "op-secret": 200} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/replay", strings.NewReader(`{"bucket":"photos","key":"dogs/flaky.jpg","status":"failed"}`))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("API replay with token %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
	// Read-only without an operator token.
	ro := httptest.NewServer(web.Handler(l, nil))
	defer ro.Close()
	resp, err := http.Get(ro.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b := new(strings.Builder)
	_, _ = ioCopy(b, resp)
	if strings.Contains(b.String(), `method="post"`) || !strings.Contains(b.String(), "read-only") {
		t.Fatal("a page without an operator token offers actions")
	}
	resp, err = http.Get(ro.URL + "/api/v1/status")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status API: %v %v", resp, err)
	}
	resp.Body.Close()
}

func ioCopy(w *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := resp.Body.Read(buf)
		w.Write(buf[:k])
		n += int64(k)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
	}
}

func between(s, a, b string) string {
	_, rest, ok := strings.Cut(s, a)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, b)
	return v
}

// deadLedger holds only dead letters, photos/dead-0.jpg onwards.
func deadLedger(t *testing.T, n int) *ledger.Ledger {
	t.Helper()
	l := testledger.New(t, &ledger.Options{MaxAttempts: 1})
	addDead(t, l, 0, n)
	return l
}

// addDead makes photos/dead-FROM.jpg … dead-(FROM+N-1).jpg dead letters; the
// ledger must hold no other pending work.
func addDead(t *testing.T, l *ledger.Ledger, from, n int) {
	t.Helper()
	ctx := context.Background()
	var evs []event.Event
	for i := from; i < from+n; i++ {
		k := "dead-" + strconv.Itoa(i) + ".jpg"
		evs = append(evs, event.Event{Bucket: "photos", Key: k, Sequencer: "0A", ETag: "e-" + k, Kind: event.Created, Name: "ObjectCreated:Put"})
	}
	if _, err := l.Record(ctx, "webhook", evs); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, n, time.Hour)
	if err != nil || len(cs) != n {
		t.Fatalf("claimed %d of %d: %v", len(cs), n, err)
	}
	for _, c := range cs {
		if err := l.Fail(ctx, c, "handler: exit 1", false); err != nil {
			t.Fatal(err)
		}
	}
}

func countOf(t *testing.T, l *ledger.Ledger, s ledger.Status) int {
	t.Helper()
	c, err := l.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c[s]
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends req and returns its status and body.
func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := new(strings.Builder)
	if _, err := ioCopy(b, resp); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b.String()
}

// formPoster posts the page's replay form to srv, with the page's CSRF token
// unless the form carries one.
func formPoster(t *testing.T, srv *httptest.Server, client *http.Client) func(form url.Values, origin string) (int, string) {
	t.Helper()
	resp, err := client.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b := new(strings.Builder)
	_, _ = ioCopy(b, resp)
	csrf := between(b.String(), `name="csrf" value="`, `"`)
	if csrf == "" {
		t.Fatal("no CSRF token on the page")
	}
	return func(form url.Values, origin string) (int, string) {
		t.Helper()
		if form.Get("csrf") == "" {
			form.Set("csrf", csrf) // the page's, unless the test sends its own
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/actions/replay", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := new(strings.Builder)
		_, _ = ioCopy(b, resp)
		return resp.StatusCode, b.String()
	}
}

// TestFlashShowsOnlyServerMessages: /?flash= shows a message only by the id
// the server gave it after an action, never text from the link.
func TestFlashShowsOnlyServerMessages(t *testing.T) {
	t.Parallel()
	l := deadLedger(t, 1)
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret"}))
	defer srv.Close()
	for _, flash := range []string{"Call 555-0100 to restore your account", "0000000000000000000000000A"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/?flash="+url.QueryEscape(flash), nil)
		if code, body := do(t, req); code != 200 || strings.Contains(body, `id="flash"`) || strings.Contains(body, "555-0100") {
			t.Fatalf("/?flash=%s: %d, and the page shows it:\n%s", flash, code, body)
		}
	}
	// After an action, the redirect's id shows the server's message.
	post := formPoster(t, srv, http.DefaultClient) // follows the redirect
	code, body := post(url.Values{"token": {"op-secret"}, "bucket": {"photos"}, "key": {"dead-0.jpg"}}, "")
	if code != 200 || between(body, `id="flash">`, `<`) != "replayed 1 record: photos/dead-0.jpg" {
		t.Fatalf("after a replay: %d\n%s", code, body)
	}
}

// TestReplayNeedsARecordOrAll: the form and the API both replay one record
// named by bucket and key, or all dead letters when asked to explicitly;
// "expect" refuses when the number changed.
func TestReplayNeedsARecordOrAll(t *testing.T) {
	t.Parallel()
	l := deadLedger(t, 3)
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret"}))
	defer srv.Close()
	post := formPoster(t, srv, noRedirects)
	api := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/replay", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer op-secret")
		return do(t, req)
	}
	form := func(kv ...string) url.Values {
		f := url.Values{"token": {"op-secret"}}
		for i := 0; i+1 < len(kv); i += 2 {
			f.Set(kv[i], kv[i+1])
		}
		return f
	}
	for name, f := range map[string]url.Values{
		"empty bucket and key": form("bucket", "", "key", ""),
		"no key":               form("bucket", "photos"),
		"all and a key":        form("all", "1", "bucket", "photos", "key", "dead-0.jpg"),
		"all=maybe":            form("all", "maybe"),
	} {
		if code, body := post(f, ""); code != http.StatusBadRequest {
			t.Errorf("form, %s: %d, want 400: %s", name, code, body)
		}
	}
	for _, body := range []string{`{}`, `{"bucket":"photos","key":""}`, `{"key":"dead-0.jpg"}`, `{"all":true,"key":"dead-0.jpg"}`, `{"all":true,"status":"deadish"}`, `{"al":true}`} {
		if code, resp := api(body); code != http.StatusBadRequest {
			t.Errorf("API %s: %d, want 400: %s", body, code, resp)
		}
	}
	if n := countOf(t, l, ledger.Dead); n != 3 {
		t.Fatalf("refused requests replayed: %d dead letters left of 3", n)
	}
	// All, but the caller saw another number: nothing happens.
	if code, body := post(form("all", "1", "expect", "2"), ""); code != http.StatusConflict || !strings.Contains(body, "3 records would be replayed now, not the 2") {
		t.Fatalf("form, all, expecting 2 of 3: %d %s", code, body)
	}
	if code, body := api(`{"all":true,"expect":4}`); code != http.StatusConflict {
		t.Fatalf("API, all, expecting 4 of 3: %d %s", code, body)
	}
	if n := countOf(t, l, ledger.Dead); n != 3 {
		t.Fatalf("a replay expecting another number replayed: %d dead letters left of 3", n)
	}
	// One, then all.
	if code, body := api(`{"bucket":"photos","key":"dead-0.jpg"}`); code != 200 || !strings.Contains(body, `"replayed":1`) {
		t.Fatalf("API, one: %d %s", code, body)
	}
	if code, body := post(form("all", "1", "expect", "2"), ""); code != http.StatusSeeOther {
		t.Fatalf("form, all 2: %d %s", code, body)
	}
	addDead(t, l, 10, 2)
	if code, body := api(`{"all":true}`); code != 200 || !strings.Contains(body, `"replayed":2`) {
		t.Fatalf("API, all: %d %s", code, body)
	}
	if n := countOf(t, l, ledger.Dead); n != 0 {
		t.Fatalf("%d dead letters left after replaying all", n)
	}
}

// TestReplayAllInChromium: the page's Replay all button says how many it
// replays, refuses when that changed, and replays them all when confirmed;
// with a read token, through the browser's Basic credentials.
func TestReplayAllInChromium(t *testing.T) {
	bin := testenv.Chromium(t)
	l := deadLedger(t, 3)
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret", ReadToken: "read-secret"}))
	defer srv.Close()
	ctx := browser(t, bin)
	signedIn := strings.Replace(srv.URL, "http://", "http://reader:read-secret@", 1)

	var before, conflict, after, flash string
	var shot []byte
	err := chromedp.Run(ctx,
		chromedp.Navigate(signedIn+"/"),
		chromedp.WaitVisible(`#replay-all`, chromedp.ByID),
		chromedp.Text(`#replay-all`, &before, chromedp.ByID),
		chromedp.FullScreenshot(&shot, 100),
		chromedp.ActionFunc(func(context.Context) error { addDead(t, l, 3, 1); return nil }),
		chromedp.SendKeys(`form.replay-all input[name=token]`, "op-secret", chromedp.ByQuery),
		chromedp.Click(`#replay-all`, chromedp.ByID),
		chromedp.WaitVisible(`pre`, chromedp.ByQuery), // Chromium shows the text/plain answer in a <pre>
		chromedp.Text(`pre`, &conflict, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if n := countOf(t, l, ledger.Dead); before != "Replay all 3 dead letters" || n != 4 || !strings.Contains(conflict, "4 records would be replayed now, not the 3") {
		t.Fatalf("button %q; after the count changed: %q, %d dead letters left", before, conflict, n)
	}
	err = chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"), // the browser keeps the credentials
		chromedp.WaitVisible(`#replay-all`, chromedp.ByID),
		chromedp.Text(`#replay-all`, &after, chromedp.ByID),
		chromedp.SendKeys(`form.replay-all input[name=token]`, "op-secret", chromedp.ByQuery),
		chromedp.Click(`#replay-all`, chromedp.ByID),
		chromedp.WaitVisible(`#flash`, chromedp.ByID),
		chromedp.Text(`#flash`, &flash, chromedp.ByID),
	)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if n := countOf(t, l, ledger.Dead); after != "Replay all 4 dead letters" || flash != "replayed 4 dead records (all)" || n != 0 {
		t.Fatalf("button %q, then %q, %d dead letters left", after, flash, n)
	}
	path := filepath.Join(testenv.ArtifactDir(t), "status-page-replay-all.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestFormOriginIsSchemeHostPort: a form post's Origin must be the page's own
// origin, scheme, host and port (default ports normalised), or an allowed one.
func TestFormOriginIsSchemeHostPort(t *testing.T) {
	t.Parallel()
	l := deadLedger(t, 1)
	h := web.Handler(l, &web.Options{OperatorToken: "op-secret", AllowedOrigins: []string{"https://ops.example.com"}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	tls := httptest.NewTLSServer(h)
	defer tls.Close()
	csrf := csrfOf(t, srv)
	post := formPoster(t, srv, noRedirects)
	postTLS := formPoster(t, tls, &http.Client{Transport: tls.Client().Transport, CheckRedirect: noRedirects.CheckRedirect})
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	host, port, _ := strings.Cut(hostPort, ":")
	otherPort := "1"
	if port == otherPort {
		otherPort = "2"
	}
	form := url.Values{"token": {"op-secret"}, "bucket": {"photos"}, "key": {"dead-0.jpg"}}
	for origin, want := range map[string]int{
		"https://" + hostPort:                 http.StatusForbidden, // same host and port, other scheme
		"http://" + host + ":" + otherPort:    http.StatusForbidden, // same scheme and host, other port
		"http://" + host:                      http.StatusForbidden, // the default port is another port
		"null":                                http.StatusForbidden,
		"http://ops.example.com":              http.StatusForbidden, // allowed is https only
		srv.URL:                               http.StatusSeeOther,
		"HTTP://" + strings.ToUpper(hostPort): http.StatusSeeOther,
		"https://ops.example.com:443":         http.StatusSeeOther,
		"":                                    http.StatusSeeOther, // no browser: the CSRF token protects
	} {
		if code, body := post(url.Values(clone(form)), origin); code != want {
			t.Errorf("Origin %q to %s: %d, want %d: %s", origin, srv.URL, code, want, body)
		}
	}
	tlsHostPort := strings.TrimPrefix(tls.URL, "https://")
	for origin, want := range map[string]int{
		"http://" + tlsHostPort: http.StatusForbidden,
		tls.URL:                 http.StatusSeeOther,
	} {
		if code, body := postTLS(url.Values(clone(form)), origin); code != want {
			t.Errorf("Origin %q to %s: %d, want %d: %s", origin, tls.URL, code, want, body)
		}
	}
	// Default ports: the page at http://cairn.example is http://cairn.example:80.
	for origin, want := range map[string]int{"http://cairn.example:80": http.StatusSeeOther, "https://cairn.example": http.StatusForbidden} {
		f := clone(form)
		f.Set("csrf", csrf)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/actions/replay", strings.NewReader(f.Encode()))
		req.Host = "cairn.example"
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		if code, body := do(t, req); code != want {
			t.Errorf("Origin %q to Host cairn.example: %d, want %d: %s", origin, code, want, body)
		}
	}
	if err := (&web.Options{AllowedOrigins: []string{"ops.example.com"}}).Check(); err == nil {
		t.Error("Check accepts an allowed origin without a scheme")
	}
	if err := (&web.Options{AllowedOrigins: []string{"https://ops.example.com:8443"}}).Check(); err != nil {
		t.Error(err)
	}
}

func clone(v url.Values) url.Values {
	out := url.Values{}
	for k, vv := range v {
		out[k] = append([]string(nil), vv...)
	}
	return out
}

func csrfOf(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	_, body := do(t, req)
	return between(body, `name="csrf" value="`, `"`)
}

// TestReadToken: with a read token, the page and the status API need it (or
// the operator token), as a bearer token or Basic password; the browser is
// asked for it. Actions still need the operator token, as before.
func TestReadToken(t *testing.T) {
	t.Parallel()
	l := deadLedger(t, 1)
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret", ReadToken: "read-secret"}))
	defer srv.Close()
	get := func(path string, auth func(*http.Request)) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		auth(req)
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := new(strings.Builder)
		_, _ = ioCopy(b, resp)
		return resp, b.String()
	}
	none := func(*http.Request) {}
	basic := func(user, pw string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth(user, pw) } }
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	for _, path := range []string{"/", "/api/v1/status"} {
		for name, c := range map[string]struct {
			auth func(*http.Request)
			want int
		}{
			"nothing":              {none, 401},
			"Basic, wrong":         {basic("ops", "read-secre"), 401},
			"Basic, read token":    {basic("anyone", "read-secret"), 200},
			"Basic, no user name":  {basic("", "read-secret"), 200},
			"Basic, operator":      {basic("ops", "op-secret"), 200},
			"Bearer, read token":   {bearer("read-secret"), 200},
			"Bearer, operator":     {bearer("op-secret"), 200},
			"Bearer, wrong":        {bearer("nope"), 401},
			"Basic, token as user": {basic("read-secret", ""), 401},
		} {
			resp, body := get(path, c.auth)
			if resp.StatusCode != c.want {
				t.Errorf("GET %s, %s: %d, want %d", path, name, resp.StatusCode, c.want)
			}
			if c.want == 401 && (resp.Header.Get("WWW-Authenticate") != `Basic realm="cairn", charset="UTF-8"` || strings.Contains(body, "dead-0.jpg")) {
				t.Errorf("GET %s, %s: WWW-Authenticate %q; the answer shows a key: %t", path, name, resp.Header.Get("WWW-Authenticate"), strings.Contains(body, "dead-0.jpg"))
			}
		}
	}
	// Actions: the operator token as a bearer token, which needs no read
	// token; Basic credentials (which a browser adds by itself) never act.
	for name, c := range map[string]struct {
		auth func(*http.Request)
		want int
	}{
		"Basic, operator":    {basic("ops", "op-secret"), 401},
		"Bearer, read token": {bearer("read-secret"), 401},
		"Bearer, operator":   {bearer("op-secret"), 200},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/replay", strings.NewReader(`{"bucket":"photos","key":"dead-0.jpg"}`))
		c.auth(req)
		if code, body := do(t, req); code != c.want {
			t.Errorf("POST /api/v1/replay, %s: %d, want %d: %s", name, code, c.want, body)
		}
	}
}

// The last audit reaches the page as a summary and the API as the daemon's
// full report, unchanged (the page does not import package audit).
func TestLastAudit(t *testing.T) {
	t.Parallel()
	l := ledgerWith(t)
	detail := map[string]any{"bucket": "b", "listed": 7, "resubmitted": 2, "findings": []string{"k1", "k2"}}
	srv := httptest.NewServer(web.Handler(l, &web.Options{LastAudit: func() *web.Audit {
		return &web.Audit{Started: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), Listed: 7, Resubmitted: 2,
			Counts: map[string]int{"missing": 2}, Findings: []web.AuditFinding{{Class: "missing", Key: "k1"}, {Class: "missing", Key: "k2"}}, Detail: detail}
	}}))
	defer srv.Close()
	code, page := do(t, mustReq(t, srv.URL+"/"))
	if code != 200 || !strings.Contains(page, "7 objects listed, 2 resubmitted") || !strings.Contains(page, "missing: 2") || !strings.Contains(page, `<td><span class="v">k2</span></td>`) {
		t.Fatalf("page: %d, audit line missing", code)
	}
	code, body := do(t, mustReq(t, srv.URL+"/api/v1/status"))
	var st struct {
		LastAudit map[string]any `json:"last_audit"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.LastAudit["bucket"] != "b" || len(st.LastAudit["findings"].([]any)) != 2 {
		t.Fatalf("api: %d %s", code, body)
	}
}

func mustReq(t *testing.T, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestStatusShowsRefusals: the messages the intake refused are on the page
// (reason, count, what was done, the last detail, escaped) and in the API.
func TestStatusShowsRefusals(t *testing.T) {
	t.Parallel()
	l := ledgerWith(t)
	now := time.Now()
	rs := []web.Refusal{
		{Source: "webhook", Reason: "UnknownEventType", Count: 3, First: now.Add(-time.Minute), Last: now,
			Answer: "kept as a dead letter: cairn:refused/ab12", Detail: `unknown event type: "s3:Object<Teleported>"`},
		{Source: "webhook", Reason: "unauthorized", Count: 7, First: now, Last: now, Answer: "answered 401", Detail: "wrong bearer token"},
	}
	srv := httptest.NewServer(web.Handler(l, &web.Options{Refusals: func() []web.Refusal { return rs }}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`id="refusals"`, "UnknownEventType", "kept as a dead letter: cairn:refused/ab12", "s3:Object&lt;Teleported&gt;", "answered 401", "<td>7</td>"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	resp, err = http.Get(srv.URL + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Refusals []web.Refusal `json:"refusals"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Refusals) != 2 || st.Refusals[1].Reason != "unauthorized" || st.Refusals[1].Count != 7 {
		t.Fatalf("API refusals: %+v %v", st.Refusals, err)
	}
}
