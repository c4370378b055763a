package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Operator sessions: the operator gives the operator token once, in the
// page's login form (POST /actions/login), and gets a session cookie; the
// page's Replay forms then need no token field. What the browser keeps is a
// random session id, never the token: the server keeps, per session id (by
// its SHA-256), the session's own CSRF token and its end. A replay with the
// cookie must carry that session's CSRF token (which only the page shown to
// that session holds), so a cookie without the page, or the page's token
// without the cookie, does nothing. Sessions end sessionTTL after the login
// (not sliding: a session in use ends all the same), at logout (POST
// /actions/logout, which forgets the id on the server), or when the process
// stops (they are kept in memory only).
const (
	// sessionTTL is how long a login lasts.
	sessionTTL = 15 * time.Minute
	// maxSessions bounds the sessions kept; a login past it ends the
	// oldest.
	maxSessions = 256
	// sessionCookie names the cookie.
	sessionCookie = "cairn_operator"
)

type session struct {
	csrf  string
	until time.Time
}

type sessions struct {
	mu sync.Mutex
	m  map[[32]byte]session
}

func newSessions() *sessions { return &sessions{m: map[[32]byte]session{}} }

// start makes a session and returns its id (the cookie's value).
func (s *sessions) start(now time.Time) (id string, se session) {
	id = rand.Text() + rand.Text() // 256 bits
	se = session{csrf: rand.Text(), until: now.Add(sessionTTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	for len(s.m) >= maxSessions {
		var oldest [32]byte
		first := true
		for k, v := range s.m {
			if first || v.until.Before(s.m[oldest].until) {
				oldest, first = k, false
			}
		}
		delete(s.m, oldest)
	}
	s.m[sha256.Sum256([]byte(id))] = se
	return id, se
}

func (s *sessions) expire(now time.Time) {
	for k, v := range s.m {
		if !now.Before(v.until) {
			delete(s.m, k)
		}
	}
}

// get returns the live session of id; ok false if there is none (unknown,
// ended or expired).
func (s *sessions) get(id string, now time.Time) (session, bool) {
	if id == "" {
		return session{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.m[sha256.Sum256([]byte(id))]
	if !ok || !now.Before(se.until) {
		return session{}, false
	}
	return se, true
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sha256.Sum256([]byte(id)))
}

// sessionOf is the request's live operator session, if its cookie names one;
// had says a session cookie was sent (live or not), to tell "log in" from
// "your login ended".
func (h *handler) sessionOf(r *http.Request) (se session, ok, had bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return session{}, false, false
	}
	se, ok = h.sessions.get(c.Value, h.now())
	return se, ok, true
}

// secureCookie: the cookie is sent over TLS only when the page is served
// over TLS, to this process or (as the request's Origin says) by a proxy.
func secureCookie(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(r.Header.Get("Origin")), "https://")
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, id string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: secureCookie(r), SameSite: http.SameSiteStrictMode})
}

// formGuard checks what every form post needs: the page's origin and a
// parsed form. It answers the refusal itself; ok false then.
func (h *handler) formGuard(w http.ResponseWriter, r *http.Request) bool {
	if ok, own := h.originOK(r); !ok {
		http.Error(w, "cross-origin request refused: it came from "+quote(r.Header.Get("Origin"))+", not from this page's origin "+quote(own)+
			"; if a proxy serves the page at that origin, allow it (Options.AllowedOrigins, cairn serve --status-allow-origin)", http.StatusForbidden)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return false
	}
	if !h.operator.set {
		http.Error(w, "actions are disabled: cairn serve was started without an operator token", http.StatusUnauthorized)
		return false
	}
	return true
}

// formLogin is POST /actions/login: the page's CSRF token and the operator
// token; it starts a session and goes back to the page.
func (h *handler) formLogin(w http.ResponseWriter, r *http.Request) {
	if !h.formGuard(w, r) {
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(h.csrf)) != 1 {
		http.Error(w, "stale or missing form token: reload the page and log in again", http.StatusForbidden)
		return
	}
	if !h.operator.matches(r.PostForm.Get("token")) {
		http.Error(w, "wrong operator token: go back and log in with the token cairn serve was started with (--operator-token)", http.StatusUnauthorized)
		return
	}
	id, _ := h.sessions.start(h.now())
	setSessionCookie(w, r, id, int(sessionTTL/time.Second))
	http.Redirect(w, r, "/?flash="+h.flashes.put("logged in for "+sessionTTL.String()+": replays need no token until then (or until you log out)"), http.StatusSeeOther)
}

// formLogout is POST /actions/logout: the session's CSRF token; it ends the
// session on the server and clears the cookie.
func (h *handler) formLogout(w http.ResponseWriter, r *http.Request) {
	if !h.formGuard(w, r) {
		return
	}
	c, err := r.Cookie(sessionCookie)
	se, ok, _ := h.sessionOf(r)
	if ok && subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(se.csrf)) != 1 {
		http.Error(w, "stale or missing form token: reload the page and log out again", http.StatusForbidden)
		return
	}
	if ok && err == nil {
		h.sessions.end(c.Value)
	}
	setSessionCookie(w, r, "", -1)
	http.Redirect(w, r, "/?flash="+h.flashes.put("logged out"), http.StatusSeeOther)
}

// actionAllowed checks a replay form's credentials (after formGuard): with
// a live session cookie, that session's CSRF token; without one, the page's
// CSRF token and the operator token as a field (a form of a page shown
// before the login, or a script). It answers the refusal itself.
func (h *handler) actionAllowed(w http.ResponseWriter, r *http.Request) bool {
	csrf := []byte(r.PostForm.Get("csrf"))
	se, ok, had := h.sessionOf(r)
	if ok {
		if subtle.ConstantTimeCompare(csrf, []byte(se.csrf)) != 1 {
			http.Error(w, "stale or missing form token for this login: reload the page", http.StatusForbidden)
			return false
		}
		return true
	}
	if subtle.ConstantTimeCompare(csrf, []byte(h.csrf)) != 1 {
		if had {
			http.Error(w, "your login has ended (after "+sessionTTL.String()+", at logout, or when cairn serve restarted): reload the page and log in again", http.StatusUnauthorized)
			return false
		}
		http.Error(w, "stale or missing form token: reload the page", http.StatusForbidden)
		return false
	}
	tok := r.PostForm.Get("token")
	switch {
	case tok == "" && had:
		http.Error(w, "your login has ended (after "+sessionTTL.String()+", at logout, or when cairn serve restarted): reload the page and log in again", http.StatusUnauthorized)
		return false
	case tok == "":
		http.Error(w, "not logged in: log in on the page with the operator token first", http.StatusUnauthorized)
		return false
	case !h.operator.matches(tok):
		http.Error(w, "wrong operator token", http.StatusUnauthorized)
		return false
	}
	return true
}
