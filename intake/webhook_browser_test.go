package intake_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
)

// openWebhook serves the webhook with no token (the loopback default) and
// returns its URL and the ledger behind it.
func openWebhook(t *testing.T, o intake.WebhookOptions) (string, *ledger.Ledger) {
	t.Helper()
	l := newLedger(t, nil)
	p, err := intake.New(l, intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }), &intake.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, p)
	srv := httptest.NewServer(p.Mux(o, nil))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/events", l
}

// What a web page can send (no preflight) is refused, and so is a request
// carrying a foreign Origin or, without a token on loopback, a foreign Host.
// Senders of events (MinIO, SNS, AWS) are not affected.
func TestWebhookRefusesBrowserRequests(t *testing.T) {
	t.Parallel()
	url, l := openWebhook(t, intake.WebhookOptions{AllowedOrigins: []string{"https://ops.example.com"}})
	body := event.S3Body(ev("k", 1))
	cases := []struct {
		name        string
		contentType string
		header      map[string]string
		host        string
		status      int
	}{
		{"text/plain (a no-cors fetch)", "text/plain;charset=UTF-8", nil, "", 415},
		{"no content type (a Blob body)", "", nil, "", 415},
		{"form", "application/x-www-form-urlencoded", nil, "", 415},
		{"multipart", "multipart/form-data; boundary=x", nil, "", 415},
		{"foreign origin", "application/json", map[string]string{"Origin": "https://evil.example"}, "", 403},
		{"null origin", "application/json", map[string]string{"Origin": "null"}, "", 403},
		{"allowed host, other port", "application/json", map[string]string{"Origin": "https://ops.example.com:8443"}, "", 403},
		{"DNS rebinding", "application/json", nil, "evil.example:8470", 421},
		{"rebinding to a private address", "application/json", nil, "192.168.1.10", 421},
		{"JSON", "application/json", nil, "", 200},
		{"JSON with charset", "application/json; charset=utf-8", nil, "", 200},
		{"+json", "application/cloudevents+json", nil, "", 200},
		{"SNS's text/plain", "text/plain; charset=UTF-8", map[string]string{"X-Amz-Sns-Message-Type": "Notification"}, "", 200},
		{"allowed origin", "application/json", map[string]string{"Origin": "https://ops.example.com"}, "", 200},
		{"localhost", "application/json", nil, "localhost:8470", 200},
		{"ipv6 loopback", "application/json", nil, "[::1]:8470", 200},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
	// With a token the Host is not checked: the token is the protection.
	url2, _ := openWebhook(t, intake.WebhookOptions{Token: "tok"})
	req, _ := http.NewRequest(http.MethodPost, url2, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	req.Host = "cairn.internal.example:8470"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("token and a non-loopback Host: %v %v, want 200", resp, err)
	}
	rs, _ := l.Get(context.Background(), "b", "k")
	if len(rs) != 1 || rs[0].Seen != 7 {
		t.Fatalf("the accepted requests recorded %+v, want the one event seen 7 times (the token case has its own ledger)", rs)
	}
}

// The attack itself, in a real browser: a page from another origin posts an
// event to a loopback webhook without a token, with every trick a page has
// without a preflight. Nothing is recorded.
func TestWebhookBrowserCannotInjectEvents(t *testing.T) {
	t.Parallel()
	bin := testenv.Chromium(t)
	url, l := openWebhook(t, intake.WebhookOptions{})
	body := strings.ReplaceAll(string(event.S3Body(ev("injected", 1))), "`", "")
	page := fmt.Sprintf(`<!doctype html><title>evil</title><script>
const url = %q, body = %s;
Promise.allSettled([
  fetch(url, {method: 'POST', mode: 'no-cors', body: JSON.stringify(body)}),
  fetch(url, {method: 'POST', mode: 'no-cors', body: new Blob([JSON.stringify(body)])}),
  fetch(url, {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body: JSON.stringify(body)}),
  fetch(url, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)}),
  fetch(url.replace('127.0.0.1', 'localhost'), {method: 'POST', mode: 'no-cors', body: JSON.stringify(body)}),
]).then(() => { document.title = 'done'; });
</script>`, url, body)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	}))
	defer evil.Close()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(profileDir(t)))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, time.Minute)
	defer cancelT()
	var title string
	if err := chromedp.Run(ctx, chromedp.Navigate(evil.URL+"/"), chromedp.Poll(`document.title === 'done'`, nil), chromedp.Title(&title)); err != nil {
		t.Fatalf("running the page in %s: %v", bin, err)
	}
	time.Sleep(200 * time.Millisecond) // let any request still in flight reach the ledger
	if rs, _ := l.Get(context.Background(), "b", "injected"); len(rs) != 0 {
		t.Fatalf("a web page injected an event: %+v", rs)
	}
	if c, _ := l.Counts(context.Background()); sum(c) != 0 {
		t.Fatalf("a web page recorded something: %v", c)
	}
}

// profileDir is a browser profile directory removed at the end of the test
// (not t.TempDir: Chromium's last writes can race its removal, which fails
// the test).
func profileDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "cairn-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 20 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}
