// Package web is cairn serve's status page and its JSON API: the ledger's
// totals, throughput over the last hour, the queue's depth and age, current
// claims, recent failures, dead letters with Replay actions (refused messages
// among them, in bucket cairn:refused), the messages the intake refused and
// why, and the last audit. The page is server-rendered HTML with its styles embedded: no
// front-end build, and every view works without JavaScript.
//
// Routes: GET / (the page), GET /api/v1/status (the same as JSON), POST
// /api/v1/replay (the API's action), POST /actions/replay (the page's
// forms) and POST /actions/login and /actions/logout (the operator's
// session). Who may use them:
//
//   - Reading (GET / and GET /api/v1/status) is open to anyone who can reach
//     the port unless Options.ReadToken is set. What it shows is bucket names,
//     keys, claim tokens and handlers' last errors (an exec handler's stderr),
//     so set a read token wherever someone who should not see those can reach
//     the port. With one, a read needs the read token or the operator token,
//     either as "Authorization: Bearer TOKEN" or as HTTP Basic credentials
//     with any user name and the token as the password (the browser asks for
//     them: realm "cairn"). Anything else gets 401.
//   - Actions (replay) need the operator token; with none configured the page
//     is read-only and both POST routes answer 401. The operator token also
//     grants reading, so the POST routes ask for no read token. The API takes
//     the operator token only as "Authorization: Bearer TOKEN", which browsers
//     never add by themselves (Basic credentials they do add, so the API does
//     not accept them). The page's forms post it as a form field together with
//     a CSRF token that only the page carries; and when the browser sends an
//     Origin header, it must be the page's own origin (scheme https if the
//     connection is TLS, else http; host and port from the Host header; a
//     scheme's default port is the same as none) or one of
//     Options.AllowedOrigins (the origin a TLS-terminating proxy serves the
//     page at, say).
//   - The operator gives the token once per login: the page's login form
//     (CSRF token and operator token, same origin) sets a cookie
//     cairn_operator holding a random session id, never the token (HttpOnly,
//     SameSite=Strict, Path=/, Secure when the page is served over TLS or
//     its Origin is https, Max-Age 15 minutes). The session ends 15 minutes
//     after the login whether used or not (not sliding), at logout (the
//     server forgets it), or when the process stops. The page shown to a
//     session carries that session's own CSRF token in its forms and no
//     token fields; a replay with the cookie needs that CSRF token (a cookie
//     without the page, or the page without the cookie, does nothing), and
//     the Origin check and the count the page showed apply as before. Forms
//     posted without a session still work with the page's CSRF token and
//     the operator token as a field. A live session also grants reading.
//   - A replay is of one record, named by bucket and key, or explicitly of
//     all records of a status (default dead): {"all": true} in the API, the
//     page's separate "Replay all N dead letters" form. A request with neither
//     both bucket and key nor "all", or with both, gets 400. "expect": N
//     (which that form always sends, as the N it showed) replays nothing and
//     gets 409 unless exactly N records would be replayed.
//   - After a form action the page shows the server's message by a random id
//     it stored the message under (/?flash=ID, kept a minute); an unknown id
//     shows nothing, so no link can make the page say what the server did not.
package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"time"

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
	"statuses": func() []string {
		out := make([]string, len(statuses))
		for i, s := range statuses {
			out[i] = string(s)
		}
		return out
	},
	"show": show,
	"groupURL": func(f DeadFilter, class string) string {
		f.Error = class
		return "/?" + f.query().Encode() + "#dead"
	},
	"pct": func(n, max int) int {
		if max == 0 {
			return 0
		}
		return n * 100 / max
	},
}).ParseFS(files, "page.html"))

// statuses are the ledger's, in the page's order.
var statuses = []ledger.Status{ledger.Pending, ledger.Claimed, ledger.Processed, ledger.Failed, ledger.Dead}

// Options configure the page; nil means the defaults (a read-only page that
// anyone who reaches the port may read).
type Options struct {
	// OperatorToken enables actions; "" makes the page read-only. It also
	// grants reading.
	OperatorToken string
	// ReadToken, if set, is needed (or the operator token) to read the page and
	// GET /api/v1/status; "" lets anyone who reaches the port read them.
	ReadToken string
	// AllowedOrigins are origins (scheme://host[:port]) besides the page's own
	// whose form posts are accepted: where a TLS-terminating proxy serves the
	// page, its https origin, which the page cannot see for itself.
	AllowedOrigins []string
	// Activity, if set, returns processed counts per minute, oldest first.
	Activity func() []int
	// LastAudit, if set, returns the last audit's report (nil if none yet).
	// Default: the summary the last audit, however it was run, left in the
	// ledger (package audit's Summary, under ledger.AuditNote).
	LastAudit func() *Audit
	// Refusals, if set, returns the messages the intake refused since it
	// started (intake.Pipeline.Refusals), the most recent first.
	Refusals func() []Refusal
	// RecentRefusals, if set, returns the latest refused messages one by one
	// (intake.Pipeline.RecentRefusals), the most recent first; RefusedTotal
	// how many were refused since the start (intake.Pipeline.RefusedTotal).
	RecentRefusals func() []RecentRefusal
	RefusedTotal   func() int64
	// Title of the page. Default "cairn".
	Title string
}

// Check reports Options that cannot work: an AllowedOrigins entry that is not
// an origin. Handler does not check (an unusable origin matches nothing); call
// Check first to refuse such settings. A nil *Options is fine.
func (o *Options) Check() error {
	if o == nil {
		return nil
	}
	for _, s := range o.AllowedOrigins {
		if _, ok := normOrigin(s); !ok {
			return errors.New("web: allowed origin " + quote(s) + " is not an origin: want scheme://host[:port], http or https, nothing after it (e.g. https://ops.example.com)")
		}
	}
	return nil
}

// Audit is the last audit as the page shows it. The page does not import
// package audit (it sits beside it, not above): the daemon hands it these
// fields, and the full report as Detail, which /api/v1/status returns as
// last_audit unchanged.
type Audit struct {
	Started     time.Time
	Listed      int64
	Resubmitted int
	Counts      map[string]int
	Findings    []AuditFinding
	Detail      any
	// By: who ran it (host/pid, or "serve host/pid"); DryRun: it
	// resubmitted nothing (Resubmitted is what it would have); Seconds it
	// took; MoreFindings not listed in Findings; Error why it failed.
	By           string
	DryRun       bool
	Seconds      float64
	MoreFindings int
	Error        string
}

// auditNote is the JSON of package audit's Summary, as far as the page
// shows it (the page does not import package audit).
type auditNote struct {
	By           string         `json:"by"`
	Started      time.Time      `json:"started"`
	Seconds      float64        `json:"seconds"`
	DryRun       bool           `json:"dry_run"`
	Listed       int64          `json:"listed"`
	Counts       map[string]int `json:"counts"`
	Resubmitted  int            `json:"resubmitted"`
	MoreFindings int            `json:"more_findings"`
	Error        string         `json:"error"`
	Findings     []struct {
		Key        string `json:"key"`
		Class      string `json:"class"`
		ETag       string `json:"etag"`
		LedgerETag string `json:"ledger_etag"`
	} `json:"findings"`
}

// lastAudit reads the last audit's summary from the ledger: nil if none
// (or the backend keeps no notes); /api/v1/status returns it unchanged.
func lastAudit(ctx context.Context, l *ledger.Ledger) (*Audit, error) {
	b, err := l.Note(ctx, ledger.AuditNote)
	if errors.Is(err, ledger.ErrNoNotes) || (err == nil && b == nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var n auditNote
	if err := json.Unmarshal(b, &n); err != nil {
		return &Audit{Error: "the last audit's summary in the ledger is unreadable: " + err.Error()}, nil
	}
	a := &Audit{Started: n.Started, Listed: n.Listed, Resubmitted: n.Resubmitted, Counts: n.Counts, Detail: json.RawMessage(b),
		By: n.By, DryRun: n.DryRun, Seconds: n.Seconds, MoreFindings: n.MoreFindings, Error: n.Error}
	for _, f := range n.Findings {
		a.Findings = append(a.Findings, AuditFinding{Class: f.Class, Key: f.Key, ETag: f.ETag, LedgerETag: f.LedgerETag})
	}
	return a, nil
}

// AuditFinding is one object the audit found out of step with the ledger.
type AuditFinding struct {
	Class, Key, ETag, LedgerETag string
}

// MarshalJSON is Detail's JSON (the summary fields are in it already).
func (a *Audit) MarshalJSON() ([]byte, error) {
	if a.Detail == nil {
		return json.Marshal(struct {
			Started     time.Time      `json:"started"`
			Listed      int64          `json:"listed"`
			Resubmitted int            `json:"resubmitted"`
			Counts      map[string]int `json:"counts"`
		}{a.Started, a.Listed, a.Resubmitted, a.Counts})
	}
	return json.Marshal(a.Detail)
}

// Refusal is one source's refused messages of one reason, as the page shows
// them (the fields of intake.Refusal: the page does not import the intake).
// A content refusal (Malformed, UnknownFormat, UnknownEventType, TooLarge)
// was answered 2xx and kept as a dead letter in bucket cairn:refused (listed
// with the dead letters, replayable); a wiring refusal of the webhook
// (unauthorized, origin, host, content_type, method) was answered 4xx, and
// the sender retries it until its configuration is fixed.
type Refusal struct {
	Source string    `json:"source"`
	Reason string    `json:"reason"`
	Count  int64     `json:"count"`
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	Answer string    `json:"answer"`
	Detail string    `json:"detail"`
}

// RecentRefusal is one refused message as the page lists it (the fields of
// intake.RecentRefusal): when, from which source, why, the key kept or
// refused (exact in the API, escaped on the page), and what was done.
type RecentRefusal struct {
	Time   time.Time `json:"time"`
	Source string    `json:"source"`
	Reason string    `json:"reason"`
	Count  int       `json:"count"`
	Key    string    `json:"key,omitempty"`
	Answer string    `json:"answer"`
	Detail string    `json:"detail,omitempty"`
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
	// Dead is a page of the dead letters DeadFilter selects (the query
	// parameters bucket, prefix, key and error), DeadLimit at most, in
	// (bucket, key) order; DeadNext is the after parameter of the next page
	// ("" on the last). DeadMatched is how many dead letters DeadFilter
	// selects in all.
	Dead        []ledger.Record `json:"dead"`
	DeadFilter  DeadFilter      `json:"dead_filter"`
	DeadLimit   int             `json:"dead_limit"`
	DeadNext    string          `json:"dead_next,omitempty"`
	DeadMatched int             `json:"dead_matched"`
	// DeadGroups are the dead letters DeadFilter selects (its error class
	// aside) grouped by ErrorClass, the largest first, at most 100;
	// DeadGroupsMore is how many classes are not listed. On the SQL ledgers
	// (SQLite, PostgreSQL) grouping is one query off an index, made for each
	// request. On the others (object store, DynamoDB) it reads every dead
	// letter the filter selects, so the classes counted are bounded
	// (DeadGroupsOther is how many dead letters are of classes past the
	// first 1,000 counted), and a grouping is reused for up to 5 seconds
	// while the number of dead letters stays the same and no replay went
	// through this page: DeadGroupsAsOf is then when it was made (zero when
	// it was made for this request).
	DeadGroups      []ErrorGroup `json:"dead_groups"`
	DeadGroupsMore  int          `json:"dead_groups_more,omitempty"`
	DeadGroupsOther int          `json:"dead_groups_other,omitempty"`
	DeadGroupsAsOf  time.Time    `json:"dead_groups_as_of,omitzero"`
	Refusals        []Refusal    `json:"refusals"`
	Audit           *Audit       `json:"last_audit,omitempty"`
	Actions         bool         `json:"actions_enabled"`

	// RefusedTotal is how many messages the intake refused since it
	// started (cairn_intake_rejected_total's sum); RecentRefusals the
	// latest (at most 20), the most recent first.
	RefusedTotal   int64           `json:"refused_total"`
	RecentRefusals []RecentRefusal `json:"recent_refusals"`
}

type handler struct {
	l              *ledger.Ledger
	o              Options
	csrf           string
	operator, read secret
	origins        []string // AllowedOrigins, normalised
	flashes        *flashes
	sessions       *sessions
	now            func() time.Time // the clock sessions end by
	groups         groupCache
}

// Handler returns the page (GET /), the API (GET /api/v1/status, POST
// /api/v1/replay) and the form actions (POST /actions/replay,
// /actions/login, /actions/logout), to mount on the daemon's mux. The page
// reads and replays through l, which must not be nil; opts may be nil (the
// defaults).
func Handler(l *ledger.Ledger, opts *Options) http.Handler {
	return newHandler(l, opts).routes()
}

func newHandler(l *ledger.Ledger, opts *Options) *handler {
	if l == nil {
		panic("web: Handler needs a ledger")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Title == "" {
		o.Title = "cairn"
	}
	h := &handler{l: l, o: o, csrf: rand.Text(), operator: newSecret(o.OperatorToken), read: newSecret(o.ReadToken), flashes: newFlashes(), sessions: newSessions(), now: time.Now}
	for _, s := range o.AllowedOrigins {
		if n, ok := normOrigin(s); ok {
			h.origins = append(h.origins, n)
		}
	}
	return h
}

func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.page)
	mux.HandleFunc("GET /api/v1/status", h.apiStatus)
	mux.HandleFunc("POST /api/v1/replay", h.apiReplay)
	mux.HandleFunc("POST /actions/replay", h.formReplay)
	mux.HandleFunc("POST /actions/login", h.formLogin)
	mux.HandleFunc("POST /actions/logout", h.formLogout)
	return mux
}

// Mount adds the page's routes (Handler's) to mux.
func Mount(mux *http.ServeMux, l *ledger.Ledger, opts *Options) {
	h := Handler(l, opts)
	for _, p := range []string{"GET /{$}", "GET /api/v1/status", "POST /api/v1/replay", "POST /actions/replay", "POST /actions/login", "POST /actions/logout"} {
		mux.Handle(p, h)
	}
}

func (h *handler) status(ctx context.Context, q deadQuery) (*Status, error) {
	l := h.l
	st := &Status{Now: time.Now(), Counts: map[string]int{}, Actions: h.operator.set}
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
	st.DeadFilter, st.DeadLimit = q.DeadFilter, q.Limit
	if st.Dead, st.DeadNext, err = deadPage(ctx, l, q.DeadFilter, q.after, q.Limit); err != nil {
		return nil, err
	}
	all := q.DeadFilter
	all.Error = ""
	g, cached, err := h.groups.get(ctx, l, all, counts[ledger.Dead])
	if err != nil {
		return nil, err
	}
	if cached {
		st.DeadGroupsAsOf = g.at
	}
	st.DeadGroups = g.Groups
	st.DeadGroupsMore, st.DeadGroupsOther = g.Classes-len(g.Groups), g.Other
	st.DeadMatched = g.Total
	if q.Error != "" {
		st.DeadMatched = 0
		i := slices.IndexFunc(g.Groups, func(e ErrorGroup) bool { return e.Class == q.Error })
		switch {
		case i >= 0:
			st.DeadMatched = g.Groups[i].Count
		case len(g.Groups) < g.Classes || g.Other > 0: // a class not listed: count it
			one, _, err := h.groups.get(ctx, l, q.DeadFilter, counts[ledger.Dead])
			if err != nil {
				return nil, err
			}
			st.DeadMatched = one.Total
		}
	}
	if st.DeadGroups == nil {
		st.DeadGroups = []ErrorGroup{}
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
	} else if st.Audit, err = lastAudit(ctx, l); err != nil {
		return nil, err
	}
	st.Refusals = []Refusal{}
	if h.o.Refusals != nil {
		st.Refusals = append(st.Refusals, h.o.Refusals()...)
	}
	st.RecentRefusals = []RecentRefusal{}
	if h.o.RecentRefusals != nil {
		st.RecentRefusals = append(st.RecentRefusals, h.o.RecentRefusals()...)
	}
	if h.o.RefusedTotal != nil {
		st.RefusedTotal = h.o.RefusedTotal()
	}
	return st, nil
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	if !h.readOK(r) {
		refuseRead(w, "this page needs the read token: sign in with any user name and the read token (or the operator token) as the password")
		return
	}
	q, err := parseDeadQuery(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), codeOf(err))
		return
	}
	st, err := h.status(r.Context(), q)
	if err != nil {
		http.Error(w, "the ledger did not answer: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	data := struct {
		*Status
		Title, CSRF, Flash string
		DeadTotal          int
		Filtered           bool
		NextURL, FirstURL  string
		// LoggedIn: the request carries a live operator session (its
		// forms then carry the session's CSRF token and no token field)
		// until LoginUntil.
		LoggedIn   bool
		LoginUntil time.Time
	}{Status: st, Title: h.o.Title, CSRF: h.csrf, Flash: h.flashes.get(r.URL.Query().Get("flash")), DeadTotal: st.Counts[string(ledger.Dead)],
		Filtered: q.active()}
	if se, ok, _ := h.sessionOf(r); ok && st.Actions {
		data.LoggedIn, data.LoginUntil, data.CSRF = true, se.until, se.csrf
	}
	if st.DeadNext != "" {
		v := q.query()
		v.Set("after", st.DeadNext)
		if q.Limit != defaultPage {
			v.Set("limit", strconv.Itoa(q.Limit))
		}
		data.NextURL = "/?" + v.Encode() + "#dead"
	}
	if q.after != (cursor{}) {
		data.FirstURL = "/?" + q.query().Encode() + "#dead"
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = buf.WriteTo(w)
}

func (h *handler) apiStatus(w http.ResponseWriter, r *http.Request) {
	if !h.readOK(r) {
		refuseReadJSON(w, "this API needs the read token (or the operator token): Authorization: Bearer TOKEN")
		return
	}
	q, err := parseDeadQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, codeOf(err), map[string]string{"error": err.Error()})
		return
	}
	st, err := h.status(r.Context(), q)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the ledger did not answer: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
