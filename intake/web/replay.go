package web

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
)

// ReplayRequest is the body of POST /api/v1/replay, and what the page's forms
// post (as form fields of the same names, all=1, filter=1): one record,
// Bucket and Key; every record of the status, All; or the records of the
// status a filter selects, Filter.
type ReplayRequest struct {
	Bucket string `json:"bucket,omitempty"`
	Key    string `json:"key,omitempty"`
	// All replays every record of Status; it cannot be combined with Bucket,
	// Key, Prefix or Error.
	All bool `json:"all,omitempty"`
	// Filter replays every record of Status that Bucket, Prefix, Key (one
	// key, in any bucket unless Bucket is set) and Error (an error class, as
	// ErrorClass makes it and GET /api/v1/status lists in dead_groups) select
	// together; at least one of them must be set. A replay by error class
	// replays exactly the records of the class on a ledger that selects by
	// class (the SQL ledgers); on others it replays each selected record's
	// key (with Options.EveryVersion, every version of the key of Status).
	Filter bool   `json:"filter,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	Error  string `json:"error,omitempty"`
	// Status of the records to replay: pending, claimed, processed, failed or
	// dead (the default).
	Status string `json:"status,omitempty"`
	// Expect, if set, is how many records the caller means to replay (the
	// number it was shown): if another number would be replayed now, nothing
	// is, and the answer is 409.
	Expect *int `json:"expect,omitempty"`
}

// filter is the request's filter fields.
func (q ReplayRequest) filter() DeadFilter {
	return DeadFilter{Bucket: q.Bucket, Prefix: q.Prefix, Key: q.Key, Error: q.Error}
}

// selection checks the request: one record, a filter or, explicitly, all.
func (q ReplayRequest) selection() (ledger.Selection, error) {
	st := ledger.Dead
	if q.Status != "" {
		st = ledger.Status(q.Status)
	}
	switch {
	case !slices.Contains(statuses, st):
		return ledger.Selection{}, refusal(http.StatusBadRequest, "unknown status "+quote(q.Status)+": want pending, claimed, processed, failed or dead (the default)")
	case q.All && q.Filter:
		return ledger.Selection{}, refusal(http.StatusBadRequest, "a replay is of all records or of a filter, not both: send either all or filter")
	case q.All && q.filter().active():
		return ledger.Selection{}, refusal(http.StatusBadRequest, "a replay of all records names no bucket, key, prefix or error: send either all, or a bucket and a key, or filter with them")
	case q.Filter && !q.filter().active():
		return ledger.Selection{}, refusal(http.StatusBadRequest, "a replay of a filter needs at least one of bucket, prefix, key and error; to replay every "+string(st)+" record, ask for all explicitly (API: {\"all\": true}; page: the Replay all button)")
	case q.Filter:
	case !q.All && (q.Prefix != "" || q.Error != ""):
		return ledger.Selection{}, refusal(http.StatusBadRequest, "prefix and error select records only in a replay of a filter: add filter (API: {\"filter\": true, …}; form: filter=1)")
	case !q.All && (q.Bucket == "" || q.Key == ""):
		return ledger.Selection{}, refusal(http.StatusBadRequest, "a replay needs the bucket and the key of the record to replay; to replay every "+string(st)+" record, ask for all explicitly (API: {\"all\": true}; page: the Replay all button)")
	case q.Expect != nil && *q.Expect < 0:
		return ledger.Selection{}, refusal(http.StatusBadRequest, "expect is a number of records, not "+strconv.Itoa(*q.Expect))
	}
	return ledger.Selection{Statuses: []ledger.Status{st}, Bucket: q.Bucket, Prefix: q.Prefix, Key: q.Key, ErrorClass: q.Error}, nil
}

// byKeys reports whether the request's records must be found by reading
// them (an error class on a ledger that cannot select by it, or a key in
// any bucket) and replayed key by key, rather than selected by the ledger
// itself (one statement on the SQL ledgers, error class included).
func (q ReplayRequest) byKeys(l *ledger.Ledger) bool {
	return q.Filter && ((q.Error != "" && !l.GroupsErrorsInQuery()) || (q.Key != "" && q.Bucket == "") || q.filter().none())
}

// matchPage is how many records matching reads per List.
const matchPage = 1000

// matching reads the records of status st that f selects: each key once,
// and how many records they are. The ledger selects them (by error class
// too: off an index on the SQL ledgers).
func matching(ctx context.Context, l *ledger.Ledger, st ledger.Status, f DeadFilter) ([]ExampleKey, int, error) {
	if f.none() {
		return nil, 0, nil
	}
	var keys []ExampleKey
	seen := map[ExampleKey]bool{}
	n := 0
	lf := f.ledgerFilter(st)
	lf.Limit = matchPage
	for {
		cs, err := l.List(ctx, lf)
		if err != nil {
			return nil, 0, err
		}
		for _, c := range cs {
			n++
			if k := (ExampleKey{Bucket: c.Bucket, Key: c.Key}); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if len(cs) < matchPage {
			return keys, n, nil
		}
		last := cs[len(cs)-1]
		lf.AfterBucket, lf.AfterIdent = last.Bucket, last.Ident
	}
}

// refused is an error with the HTTP status to answer it with.
type refused struct {
	code int
	msg  string
}

func (e *refused) Error() string { return e.msg }

func refusal(code int, msg string) error { return &refused{code: code, msg: msg} }

// codeOf is err's HTTP status: a refusal's own, else 503 (the ledger failed).
func codeOf(err error) int {
	var r *refused
	if errors.As(err, &r) {
		return r.code
	}
	return http.StatusServiceUnavailable
}

// replay runs a request and returns how many records it replayed.
func (h *handler) replay(ctx context.Context, q ReplayRequest) (int, error) {
	defer h.groups.clear() // what the page counted has changed
	sel, err := q.selection()
	if err != nil {
		return 0, err
	}
	if q.byKeys(h.l) {
		return h.replayKeys(ctx, q, sel.Statuses[0])
	}
	if q.Expect != nil {
		dry := sel
		dry.DryRun = true
		n, err := h.l.Replay(ctx, dry)
		if err != nil {
			return 0, errors.New("the ledger did not answer: " + err.Error())
		}
		if n != *q.Expect {
			return 0, refusal(http.StatusConflict, strconv.Itoa(n)+" records would be replayed now, not the "+strconv.Itoa(*q.Expect)+" expected: nothing was replayed; look again (reload the page) and replay again if that is still what you want")
		}
	}
	n, err := h.l.Replay(ctx, sel)
	if err != nil {
		return 0, errors.New("the ledger did not answer: " + err.Error())
	}
	return n, nil
}

// replayKeys replays, key by key, the records a filter selects that the
// ledger cannot select itself (see byKeys), after checking Expect against
// how many records the filter selects now.
func (h *handler) replayKeys(ctx context.Context, q ReplayRequest, st ledger.Status) (int, error) {
	keys, n, err := matching(ctx, h.l, st, q.filter())
	if err != nil {
		return 0, errors.New("the ledger did not answer: " + err.Error())
	}
	if q.Expect != nil && n != *q.Expect {
		return 0, refusal(http.StatusConflict, strconv.Itoa(n)+" records would be replayed now, not the "+strconv.Itoa(*q.Expect)+" expected: nothing was replayed; look again (reload the page) and replay again if that is still what you want")
	}
	total := 0
	for _, k := range keys {
		m, err := h.l.Replay(ctx, ledger.Selection{Statuses: []ledger.Status{st}, Bucket: k.Bucket, Key: k.Key})
		total += m
		if err != nil {
			return total, errors.New("the ledger did not answer after " + strconv.Itoa(total) + " records were replayed (replay again to replay the rest): " + err.Error())
		}
	}
	return total, nil
}

// apiReplay is POST /api/v1/replay: the operator token as a bearer token.
func (h *handler) apiReplay(w http.ResponseWriter, r *http.Request) {
	if !h.operator.set {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "actions are disabled: cairn serve was started without an operator token"})
		return
	}
	if tok, _ := cutBearer(r.Header.Get("Authorization")); !h.operator.matches(tok) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong operator token: send Authorization: Bearer OPERATOR_TOKEN"})
		return
	}
	var q ReplayRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"bucket":…,"key":…}, {"all":true} or {"filter":true, "bucket":…, "prefix":…, "key":…, "error":…}, optionally with "status" and "expect": ` + err.Error()})
		return
	}
	n, err := h.replay(r.Context(), q)
	if err != nil {
		writeJSON(w, codeOf(err), map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"replayed": n})
}

// formReplay is the page's Replay buttons: same origin; a login's session
// cookie and its CSRF token, or the page's CSRF token and the operator token
// (see actionAllowed); then back to the page, with the server's message.
func (h *handler) formReplay(w http.ResponseWriter, r *http.Request) {
	if !h.formGuard(w, r) || !h.actionAllowed(w, r) {
		return
	}
	q, err := formRequest(r)
	if err == nil {
		var n int
		if n, err = h.replay(r.Context(), q); err == nil {
			http.Redirect(w, r, "/?flash="+h.flashes.put(replayedMessage(q, n)), http.StatusSeeOther)
			return
		}
	}
	http.Error(w, err.Error(), codeOf(err))
}

// formRequest reads a ReplayRequest from the form's fields.
func formRequest(r *http.Request) (ReplayRequest, error) {
	f := r.PostForm
	q := ReplayRequest{Bucket: f.Get("bucket"), Key: f.Get("key"), Prefix: f.Get("prefix"), Error: f.Get("error"), Status: f.Get("status")}
	for _, b := range []struct {
		name string
		to   *bool
	}{{"all", &q.All}, {"filter", &q.Filter}} {
		if s := f.Get(b.name); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return q, refusal(http.StatusBadRequest, b.name+" is 1 or 0, not "+quote(s))
			}
			*b.to = v
		}
	}
	if s := f.Get("expect"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return q, refusal(http.StatusBadRequest, "expect is a number of records, not "+quote(s))
		}
		q.Expect = &n
	}
	return q, nil
}

func replayedMessage(q ReplayRequest, n int) string {
	st := cmp.Or(q.Status, string(ledger.Dead))
	if q.All {
		return "replayed " + strconv.Itoa(n) + " " + plural(n, st+" record") + " (all)"
	}
	if q.Filter {
		var by []string
		for _, p := range [][2]string{{"bucket", q.Bucket}, {"prefix", q.Prefix}, {"key", q.Key}, {"error", q.Error}} {
			if p[1] != "" {
				by = append(by, p[0]+" "+quote(p[1]))
			}
		}
		return "replayed " + strconv.Itoa(n) + " " + plural(n, st+" record") + " of " + strings.Join(by, ", ")
	}
	return "replayed " + strconv.Itoa(n) + " " + plural(n, "record") + ": " + safetext.Escape(q.Bucket) + "/" + safetext.Escape(q.Key)
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}
