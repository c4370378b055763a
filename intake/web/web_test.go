package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake/web"
	"github.com/cairn-s3/cairn/internal/testenv"
	"github.com/cairn-s3/cairn/internal/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// ledgerWith holds a dead letter, a failure to retry and a running claim.
func ledgerWith(t *testing.T) ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	l, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "l.db"), &ledger.Options{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ev := func(k string) event.Event {
		return event.Event{Bucket: "photos", Key: k, Sequencer: "0A", ETag: "e-" + k, Kind: event.Created, Name: "ObjectCreated:Put"}
	}
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
	srv := httptest.NewServer(web.Handler(web.Options{Ledger: l, OperatorToken: "op-secret", Activity: func() []int {
		a := make([]int, 60)
		for i := range a {
			a[i] = i * 3 % 17
		}
		return a
	}}))
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	defer cancelT()

	var dead, failures, claims, flash string
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

// TestActionsAreProtected: wrong token, missing or stale CSRF token, another
// origin, and a read-only page all refuse; the API needs the bearer token.
func TestActionsAreProtected(t *testing.T) {
	l := ledgerWith(t)
	srv := httptest.NewServer(web.Handler(web.Options{Ledger: l, OperatorToken: "op-secret"}))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page, err := client.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body := new(strings.Builder)
	_, _ = ioCopy(body, page)
	csrf := between(body.String(), `name="csrf" value="`, `"`)
	if csrf == "" {
		t.Fatal("no CSRF token in the form")
	}
	post := func(form url.Values, origin string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/actions/replay", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := url.Values{"csrf": {csrf}, "token": {"op-secret"}, "bucket": {"photos"}, "key": {"cats/dead ünï.jpg"}}
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
	ro := httptest.NewServer(web.Handler(web.Options{Ledger: l}))
	defer ro.Close()
	resp, err := http.Get(ro.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b := new(strings.Builder)
	_, _ = ioCopy(b, resp)
	if strings.Contains(b.String(), "<form") || !strings.Contains(b.String(), "read-only") {
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
