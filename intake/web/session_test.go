package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/event/eventtest"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/ledger"
)

// deadKeys makes a ledger whose keys are dead letters.
func deadKeys(t *testing.T, keys ...string) *ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	l := testledger.New(t, &ledger.Options{MaxAttempts: 1})
	var evs []event.Event
	for _, k := range keys {
		evs = append(evs, eventtest.Created("photos", k, "0A"))
	}
	if _, err := l.Record(ctx, "webhook", evs); err != nil {
		t.Fatal(err)
	}
	cs, err := l.Claim(ctx, len(keys), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if err := l.Fail(ctx, c, "boom", false); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// sessionServer serves a handler whose clock the test moves.
type sessionServer struct {
	*httptest.Server
	h      *handler
	offset atomic.Int64 // added to the clock
}

func newSessionServer(t *testing.T, l *ledger.Ledger, tls bool) *sessionServer {
	s := &sessionServer{h: newHandler(l, &Options{OperatorToken: "op-secret"})}
	s.h.now = func() time.Time { return time.Now().Add(time.Duration(s.offset.Load())) }
	if tls {
		s.Server = httptest.NewTLSServer(s.h.routes())
	} else {
		s.Server = httptest.NewServer(s.h.routes())
	}
	t.Cleanup(s.Close)
	return s
}

// post posts form to path with cookie (if not nil) and Origin (if set).
func (s *sessionServer) post(t *testing.T, path string, form url.Values, cookie *http.Cookie, origin string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	c := s.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// page GETs / with cookie (if not nil) and returns the body.
func (s *sessionServer) page(t *testing.T, cookie *http.Cookie) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/", nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func csrfIn(page string) string {
	_, after, _ := strings.Cut(page, `name="csrf" value="`)
	v, _, _ := strings.Cut(after, `"`)
	return v
}

// login logs in and returns the cookie and the CSRF token of the page the
// session is then shown.
func (s *sessionServer) login(t *testing.T) (*http.Cookie, string) {
	t.Helper()
	resp, body := s.post(t, "/actions/login", url.Values{"csrf": {csrfIn(s.page(t, nil))}, "token": {"op-secret"}}, nil, "")
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %d %v %s", resp.StatusCode, resp.Cookies(), body)
	}
	c := resp.Cookies()[0]
	return c, csrfIn(s.page(t, c))
}

// The operator logs in once and replays without the token; the cookie is
// HttpOnly, SameSite=Strict, short-lived, Secure over TLS, and never the
// token; every refusal (no cookie, an ended login, a CSRF token of another
// page or login, another origin) replays nothing (issue 38).
func TestOperatorLogin(t *testing.T) {
	t.Parallel()
	for _, tls := range []bool{false, true} {
		s := newSessionServer(t, deadKeys(t, "a.jpg", "b.jpg"), tls)
		// The login's own refusals set no cookie.
		pageCSRF := csrfIn(s.page(t, nil))
		for name, tc := range map[string]struct {
			form   url.Values
			origin string
			code   int
		}{
			"wrong token":  {url.Values{"csrf": {pageCSRF}, "token": {"guess"}}, "", 401},
			"no token":     {url.Values{"csrf": {pageCSRF}}, "", 401},
			"stale csrf":   {url.Values{"csrf": {"0000"}, "token": {"op-secret"}}, "", 403},
			"cross origin": {url.Values{"csrf": {pageCSRF}, "token": {"op-secret"}}, "https://evil.example", 403},
		} {
			resp, body := s.post(t, "/actions/login", tc.form, nil, tc.origin)
			if resp.StatusCode != tc.code || len(resp.Cookies()) != 0 {
				t.Errorf("tls=%v login, %s: %d %v %s, want %d and no cookie", tls, name, resp.StatusCode, resp.Cookies(), body, tc.code)
			}
		}
		c, csrf := s.login(t)
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.MaxAge != 900 || c.Path != "/" || c.Secure != tls ||
			strings.Contains(c.Value, "op-secret") || len(c.Value) < 40 {
			t.Fatalf("tls=%v: cookie %+v: want HttpOnly, SameSite=Strict, Max-Age=900, Path=/, Secure only over TLS, a random id", tls, c)
		}
		if csrf == "" || csrf == pageCSRF {
			t.Fatalf("the logged-in page's CSRF token %q is not the session's own", csrf)
		}
		if p := s.page(t, c); strings.Contains(p, `name="token"`) || !strings.Contains(p, `id="logout"`) {
			t.Fatal("the logged-in page still asks for the token, or offers no logout")
		}
		one := func(k string) url.Values {
			return url.Values{"bucket": {"photos"}, "key": {k}}
		}
		with := func(f url.Values, kv ...string) url.Values {
			for i := 0; i < len(kv); i += 2 {
				f.Set(kv[i], kv[i+1])
			}
			return f
		}
		other, otherCSRF := s.login(t) // another login (another browser)
		for name, tc := range map[string]struct {
			form   url.Values
			cookie *http.Cookie
			origin string
			code   int
		}{
			"the session's csrf, no cookie":        {with(one("a.jpg"), "csrf", csrf), nil, "", 403},
			"the page's csrf, no cookie, no token": {with(one("a.jpg"), "csrf", pageCSRF), nil, "", 401},
			"the cookie, the page's csrf":          {with(one("a.jpg"), "csrf", pageCSRF), c, "", 403},
			"the cookie, another login's csrf":     {with(one("a.jpg"), "csrf", otherCSRF), c, "", 403},
			"another login's cookie, this csrf":    {with(one("a.jpg"), "csrf", csrf), other, "", 403},
			"the cookie, no csrf":                  {one("a.jpg"), c, "", 403},
			"the cookie and csrf, cross origin":    {with(one("a.jpg"), "csrf", csrf), c, "https://evil.example", 403},
			"a made-up cookie":                     {with(one("a.jpg"), "csrf", csrf), &http.Cookie{Name: c.Name, Value: "op-secret"}, "", 401},
			"the cookie and csrf, stale count":     {with(url.Values{"all": {"1"}, "expect": {"1"}}, "csrf", csrf), c, "", 409},
		} {
			if resp, body := s.post(t, "/actions/replay", tc.form, tc.cookie, tc.origin); resp.StatusCode != tc.code {
				t.Errorf("tls=%v replay, %s: %d %s, want %d", tls, name, resp.StatusCode, body, tc.code)
			}
		}
		if n := deadCount(t, s.h.l); n != 2 {
			t.Fatalf("tls=%v: refused requests replayed: %d dead letters left of 2", tls, n)
		}
		if resp, body := s.post(t, "/actions/replay", with(one("a.jpg"), "csrf", csrf), c, s.URL); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("tls=%v: a logged-in replay: %d %s", tls, resp.StatusCode, body)
		}
		// Logged out: the same cookie and csrf do nothing, even resent.
		if resp, body := s.post(t, "/actions/logout", url.Values{"csrf": {otherCSRF}}, other, ""); resp.StatusCode != http.StatusSeeOther ||
			len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
			t.Fatalf("tls=%v: logout: %d %v %s, want the cookie cleared", tls, resp.StatusCode, resp.Cookies(), body)
		}
		if resp, body := s.post(t, "/actions/replay", with(one("b.jpg"), "csrf", otherCSRF), other, ""); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "log in again") {
			t.Errorf("tls=%v: a replay after logout: %d %s, want 401", tls, resp.StatusCode, body)
		}
		// Ended by time: 15 minutes after the login, used or not.
		s.offset.Store(int64(sessionTTL + time.Second))
		if resp, body := s.post(t, "/actions/replay", with(one("b.jpg"), "csrf", csrf), c, ""); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "log in again") {
			t.Errorf("tls=%v: a replay after the login expired: %d %s, want 401", tls, resp.StatusCode, body)
		}
		if p := s.page(t, c); !strings.Contains(p, `id="login"`) || strings.Contains(p, csrf) {
			t.Errorf("tls=%v: the page after the login expired still shows the session", tls)
		}
		if n := deadCount(t, s.h.l); n != 1 {
			t.Fatalf("tls=%v: %d dead letters left, want 1 (a.jpg replayed, b.jpg refused)", tls, n)
		}
	}
}

func deadCount(t *testing.T, l *ledger.Ledger) int {
	t.Helper()
	c, err := l.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c[ledger.Dead]
}
