package web

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/cairn-s3/cairn/ledger"
)

// ReplayRequest is the body of POST /api/v1/replay, and what the page's forms
// post (as form fields of the same names, all=1): one record, Bucket and Key,
// or every record of the status, All.
type ReplayRequest struct {
	Bucket string `json:"bucket,omitempty"`
	Key    string `json:"key,omitempty"`
	// All replays every record of Status; it cannot be combined with Bucket
	// or Key.
	All bool `json:"all,omitempty"`
	// Status of the records to replay: pending, claimed, processed, failed or
	// dead (the default).
	Status string `json:"status,omitempty"`
	// Expect, if set, is how many records the caller means to replay (the
	// number it was shown): if another number would be replayed now, nothing
	// is, and the answer is 409.
	Expect *int `json:"expect,omitempty"`
}

// selection checks the request: one record or, explicitly, all.
func (q ReplayRequest) selection() (ledger.Selection, error) {
	st := ledger.Dead
	if q.Status != "" {
		st = ledger.Status(q.Status)
	}
	switch {
	case !slices.Contains(statuses, st):
		return ledger.Selection{}, refusal(http.StatusBadRequest, "unknown status "+quote(q.Status)+": want pending, claimed, processed, failed or dead (the default)")
	case q.All && (q.Bucket != "" || q.Key != ""):
		return ledger.Selection{}, refusal(http.StatusBadRequest, "a replay of all records names no bucket or key: send either all, or a bucket and a key")
	case !q.All && (q.Bucket == "" || q.Key == ""):
		return ledger.Selection{}, refusal(http.StatusBadRequest, "a replay needs the bucket and the key of the record to replay; to replay every "+string(st)+" record, ask for all explicitly (API: {\"all\": true}; page: the Replay all button)")
	case q.Expect != nil && *q.Expect < 0:
		return ledger.Selection{}, refusal(http.StatusBadRequest, "expect is a number of records, not "+strconv.Itoa(*q.Expect))
	}
	return ledger.Selection{Statuses: []ledger.Status{st}, Bucket: q.Bucket, Key: q.Key}, nil
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
	sel, err := q.selection()
	if err != nil {
		return 0, err
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
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"bucket":…,"key":…} or {"all":true}, optionally with "status" and "expect": ` + err.Error()})
		return
	}
	n, err := h.replay(r.Context(), q)
	if err != nil {
		writeJSON(w, codeOf(err), map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"replayed": n})
}

// formReplay is the page's Replay buttons: same origin, CSRF token, operator
// token; then back to the page, with the server's message.
func (h *handler) formReplay(w http.ResponseWriter, r *http.Request) {
	if ok, own := h.originOK(r); !ok {
		http.Error(w, "cross-origin request refused: it came from "+quote(r.Header.Get("Origin"))+", not from this page's origin "+quote(own)+
			"; if a proxy serves the page at that origin, allow it (Options.AllowedOrigins, cairn serve --status-allow-origin)", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(h.csrf)) != 1 {
		http.Error(w, "stale or missing form token: reload the page", http.StatusForbidden)
		return
	}
	if !h.operator.set {
		http.Error(w, "actions are disabled: cairn serve was started without an operator token", http.StatusUnauthorized)
		return
	}
	if !h.operator.matches(r.PostForm.Get("token")) {
		http.Error(w, "wrong operator token", http.StatusUnauthorized)
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
	q := ReplayRequest{Bucket: f.Get("bucket"), Key: f.Get("key"), Status: f.Get("status")}
	if s := f.Get("all"); s != "" {
		all, err := strconv.ParseBool(s)
		if err != nil {
			return q, refusal(http.StatusBadRequest, "all is 1 or 0, not "+quote(s))
		}
		q.All = all
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
	return "replayed " + strconv.Itoa(n) + " " + plural(n, "record") + ": " + q.Bucket + "/" + q.Key
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}
