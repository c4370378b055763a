// Package web is cairn serve's status page and its JSON API: the ledger's
// totals, throughput over the last hour, the queue's depth and age, current
// claims, recent failures, dead letters with a Replay action, and the last
// audit. The page is server-rendered HTML with its styles embedded: no
// front-end build, and every view works without JavaScript.
//
// Actions (replay) need the operator token. From the page, a form posts it
// with a CSRF token that only the page carries, and the request's Origin (when
// the browser sends one) must be the page's own host; from the API, it is
// "Authorization: Bearer TOKEN" (which browsers never add by themselves). With
// no operator token configured, the page is read-only.
package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/ledger"
)

//go:embed page.html
var files embed.FS

var page = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return time.Since(t).Round(time.Second).String()
	},
	"in": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return time.Until(t).Round(time.Second).String()
	},
	"statuses": func() []string { return []string{"pending", "claimed", "processed", "failed", "dead"} },
	"pct": func(n, max int) int {
		if max == 0 {
			return 0
		}
		return n * 100 / max
	},
}).ParseFS(files, "page.html"))

// Options configure the page.
type Options struct {
	Ledger ledger.Ledger // required
	// OperatorToken enables actions; "" makes the page read-only.
	OperatorToken string
	// Activity, if set, returns processed counts per minute, oldest first.
	Activity func() []int
	// LastAudit, if set, returns the last audit's report (nil if none yet).
	LastAudit func() *audit.Report
	// Title of the page. Default "cairn".
	Title string
}

// Status is what the page shows; GET /api/v1/status returns it as JSON.
type Status struct {
	Now           time.Time       `json:"now"`
	Counts        map[string]int  `json:"counts"`
	Pending       int             `json:"pending"`
	OldestPending time.Time       `json:"oldest_pending,omitzero"`
	Throughput    []int           `json:"processed_per_minute,omitempty"` // last 60 minutes, oldest first
	ThroughputMax int             `json:"-"`
	LastHour      int             `json:"processed_last_hour"`
	Claims        []ledger.Record `json:"claims"`
	Failures      []ledger.Record `json:"failures"`
	Dead          []ledger.Record `json:"dead"`
	Audit         *audit.Report   `json:"last_audit,omitempty"`
	Actions       bool            `json:"actions_enabled"`
}

type handler struct {
	o    Options
	csrf string
	tok  [32]byte
}

// Handler returns the page (GET /), the API (GET /api/v1/status, POST
// /api/v1/replay) and the form action (POST /actions/replay), to mount on
// the daemon's mux.
func Handler(o Options) http.Handler {
	if o.Title == "" {
		o.Title = "cairn"
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := &handler{o: o, csrf: hex.EncodeToString(b[:])}
	if o.OperatorToken != "" {
		h.tok = sha256.Sum256([]byte(o.OperatorToken))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.page)
	mux.HandleFunc("GET /api/v1/status", h.apiStatus)
	mux.HandleFunc("POST /api/v1/replay", h.apiReplay)
	mux.HandleFunc("POST /actions/replay", h.formReplay)
	return mux
}

// Mount adds the page's routes to mux.
func Mount(mux *http.ServeMux, o Options) {
	h := Handler(o)
	for _, p := range []string{"GET /{$}", "GET /api/v1/status", "POST /api/v1/replay", "POST /actions/replay"} {
		mux.Handle(p, h)
	}
}

func (h *handler) status(ctx context.Context) (*Status, error) {
	l := h.o.Ledger
	st := &Status{Now: time.Now(), Counts: map[string]int{}, Actions: h.o.OperatorToken != ""}
	counts, err := l.Counts(ctx)
	if err != nil {
		return nil, err
	}
	for k, v := range counts {
		st.Counts[string(k)] = v
	}
	st.Pending = counts[ledger.Pending]
	if st.OldestPending, err = l.OldestPending(ctx); err != nil {
		return nil, err
	}
	list := func(s ledger.Status) ([]ledger.Record, error) {
		cs, err := l.List(ctx, ledger.Filter{Status: s, Limit: 50})
		out := make([]ledger.Record, len(cs))
		for i, c := range cs {
			out[i] = c.Record
		}
		return out, err
	}
	if st.Claims, err = list(ledger.Claimed); err != nil {
		return nil, err
	}
	if st.Failures, err = list(ledger.Failed); err != nil {
		return nil, err
	}
	if st.Dead, err = list(ledger.Dead); err != nil {
		return nil, err
	}
	if h.o.Activity != nil {
		st.Throughput = h.o.Activity()
		for _, n := range st.Throughput {
			st.LastHour += n
			st.ThroughputMax = max(st.ThroughputMax, n)
		}
	}
	if h.o.LastAudit != nil {
		st.Audit = h.o.LastAudit()
	}
	return st, nil
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	st, err := h.status(r.Context())
	if err != nil {
		http.Error(w, "the ledger did not answer: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	data := struct {
		*Status
		Title, CSRF, Flash string
	}{st, h.o.Title, h.csrf, r.URL.Query().Get("flash")}
	var buf bytes.Buffer
	if err := page.Execute(&buf, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = buf.WriteTo(w)
}

func (h *handler) apiStatus(w http.ResponseWriter, r *http.Request) {
	st, err := h.status(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *handler) tokenOK(got string) bool {
	if h.o.OperatorToken == "" {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], h.tok[:]) == 1
}

// ReplayRequest is the body of POST /api/v1/replay.
type ReplayRequest struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	Status string `json:"status,omitempty"` // default dead
}

func (h *handler) apiReplay(w http.ResponseWriter, r *http.Request) {
	tok, _ := cutBearer(r.Header.Get("Authorization"))
	if !h.tokenOK(tok) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong operator token (Authorization: Bearer …)"})
		return
	}
	var req ReplayRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil || req.Bucket == "" || req.Key == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"bucket\":…,\"key\":…}"})
		return
	}
	n, err := h.replay(r.Context(), req)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"replayed": n})
}

func cutBearer(v string) (string, bool) {
	const p = "Bearer "
	if len(v) > len(p) && v[:len(p)] == p {
		return v[len(p):], true
	}
	return "", false
}

func (h *handler) replay(ctx context.Context, req ReplayRequest) (int, error) {
	st := ledger.Dead
	if req.Status != "" {
		st = ledger.Status(req.Status)
	}
	return h.o.Ledger.Replay(ctx, ledger.Selection{Statuses: []ledger.Status{st}, Bucket: req.Bucket, Key: req.Key})
}

// formReplay is the page's Replay button: operator token, CSRF token, and
// same-origin.
func (h *handler) formReplay(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(h.csrf)) != 1 {
		http.Error(w, "stale or missing form token: reload the page", http.StatusForbidden)
		return
	}
	if !h.tokenOK(r.PostForm.Get("token")) {
		http.Error(w, "wrong operator token", http.StatusUnauthorized)
		return
	}
	n, err := h.replay(r.Context(), ReplayRequest{Bucket: r.PostForm.Get("bucket"), Key: r.PostForm.Get("key")})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, "/?flash="+url.QueryEscape("replayed "+strconv.Itoa(n)+" record(s): "+r.PostForm.Get("key")), http.StatusSeeOther)
}
