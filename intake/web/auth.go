package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// secret is a token's SHA-256, compared in constant time; the zero secret
// (no token configured) matches nothing.
type secret struct {
	set bool
	sum [32]byte
}

func newSecret(token string) secret {
	if token == "" {
		return secret{}
	}
	return secret{set: true, sum: sha256.Sum256([]byte(token))}
}

func (s secret) matches(got string) bool {
	sum := sha256.Sum256([]byte(got))
	return s.set && subtle.ConstantTimeCompare(sum[:], s.sum[:]) == 1
}

// readOK: no read token is configured, or the request carries it or the
// operator token, or a live operator session's cookie.
func (h *handler) readOK(r *http.Request) bool {
	if !h.read.set {
		return true
	}
	if _, ok, _ := h.sessionOf(r); ok {
		return true
	}
	tok := readCredential(r)
	read, op := h.read.matches(tok), h.operator.matches(tok)
	return read || op
}

// readCredential is the token a read presents: "Authorization: Bearer TOKEN",
// or HTTP Basic credentials whose password is the token (any user name).
func readCredential(r *http.Request) string {
	if tok, ok := cutBearer(r.Header.Get("Authorization")); ok {
		return tok
	}
	if _, pw, ok := r.BasicAuth(); ok {
		return pw
	}
	return ""
}

func cutBearer(v string) (string, bool) {
	const p = "Bearer "
	if len(v) > len(p) && v[:len(p)] == p {
		return v[len(p):], true
	}
	return "", false
}

// basicChallenge makes a browser ask for the read token.
const basicChallenge = `Basic realm="cairn", charset="UTF-8"`

func refuseRead(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", basicChallenge)
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, http.StatusUnauthorized)
}

func refuseReadJSON(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", basicChallenge)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg})
}

// originOK: the request carries no Origin header (no browser sent it, or one
// too old to; the CSRF token still protects the form), or its Origin is the
// page's own or an allowed one. The second result is the page's own origin.
func (h *handler) originOK(r *http.Request) (bool, string) {
	own := pageOrigin(r)
	o := r.Header.Get("Origin")
	if o == "" {
		return true, own
	}
	got, ok := normOrigin(o)
	return ok && (got == own || slices.Contains(h.origins, got)), own
}

// pageOrigin is the origin the request was sent to: https if the connection
// is TLS, else http; the Host header's host and port.
func pageOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return originOf(scheme, r.Host)
}

// normOrigin normalises an origin, scheme://host[:port] with scheme http or
// https; ok is false for anything else (including the "null" origin).
func normOrigin(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", false
	}
	return originOf(u.Scheme, u.Host), true
}

// originOf is scheme://host[:port] in lower case, without the scheme's
// default port (or an empty one), so that equal origins are equal strings.
func originOf(scheme, host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ":")
	host = strings.TrimSuffix(host, map[string]string{"http": ":80", "https": ":443"}[scheme])
	return scheme + "://" + host
}

func quote(s string) string { return strconv.Quote(s) }
