package intake

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// WebhookOptions configure the webhook source.
type WebhookOptions struct {
	// Token, if set, is required as "Authorization: Bearer TOKEN" (MinIO's
	// webhook target sends its auth_token that way). Compared in constant time.
	Token string
	// MaxBody limits a request body. Default 4 MiB (SNS caps messages at 256
	// KiB; MinIO's bodies are a few KiB).
	MaxBody int64
	// Source labels the events in the ledger and metrics. Default "webhook".
	Source string
	// Timeout bounds the wait for the ledger. Default 30s.
	Timeout time.Duration
	// AllowedOrigins lists the browser origins ("https://ops.example.com",
	// scheme, host and port) whose requests are accepted. Senders of events
	// are servers, which send no Origin header; a request that carries one
	// comes from a web page and is refused (403) unless listed here. Default:
	// none.
	AllowedOrigins []string
}

// jsonType reports whether a Content-Type is one the webhook accepts: JSON
// (application/json or any +json type). Amazon SNS posts its notifications as
// text/plain unless told otherwise, and marks them with an
// x-amz-sns-message-type header, which no web page can send without a CORS
// preflight; so text/plain is accepted with that header only.
func jsonType(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	switch {
	case mt == "application/json", strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return true
	case mt == "text/plain":
		return r.Header.Get("X-Amz-Sns-Message-Type") != ""
	}
	return false
}

// loopbackHost reports whether a Host header names this machine: localhost,
// a name under .localhost, or a loopback address, with any port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "."), "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// onLoopback reports whether r came in on a loopback address.
func onLoopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// browserGuard refuses what only a web page would send: it keeps pages the
// operator has open in a browser from injecting events into a webhook they can
// reach (a "simple" cross-origin POST needs no preflight), including by DNS
// rebinding when the webhook has no token. It answers the request and returns
// the refusal's reason (origin, host, content_type), or "" to go on.
func browserGuard(o WebhookOptions, w http.ResponseWriter, r *http.Request) (reason, detail string) {
	if origin := r.Header.Get("Origin"); origin != "" && !slices.Contains(o.AllowedOrigins, origin) {
		detail = "requests from web pages (Origin " + strconv.Quote(origin) + ") are refused; event senders send no Origin header (see WebhookOptions.AllowedOrigins / --webhook-allow-origin)"
		reply(w, http.StatusForbidden, WebhookResponse{Error: detail})
		return "origin", detail
	}
	if o.Token == "" && onLoopback(r) && !loopbackHost(r.Host) {
		detail = "a webhook on loopback without a token answers only to loopback host names, not " + strconv.Quote(r.Host) + "; set a token to serve other names"
		reply(w, http.StatusMisdirectedRequest, WebhookResponse{Error: detail})
		return "host", detail
	}
	if !jsonType(r) {
		w.Header().Set("Accept-Post", "application/json")
		detail = "Content-Type must be application/json (got " + strconv.Quote(r.Header.Get("Content-Type")) + "); with curl add -H 'Content-Type: application/json'"
		reply(w, http.StatusUnsupportedMediaType, WebhookResponse{Error: detail, Field: "Content-Type"})
		return "content_type", detail
	}
	return "", ""
}

// WebhookResponse is the JSON body of a webhook reply.
type WebhookResponse struct {
	Decisions []ledger.Decision `json:"decisions,omitempty"`
	// Error says why a request was refused (a 4xx or 503 answer).
	Error string `json:"error,omitempty"`
	// Field names the offending field of a refused request or message.
	Field string `json:"field,omitempty"`
	// Refused says why the message, or some of its records, could not be
	// accepted; the answer is still 200, and Kept names the dead letter the
	// message is kept as (see RefusedBucket). Decisions are those of the
	// records that were accepted.
	Refused string           `json:"refused,omitempty"`
	Kept    *ledger.Decision `json:"kept,omitempty"`
	// Rejected lists the refused records of the message (each naming its
	// field).
	Rejected []Rejection `json:"rejected,omitempty"`
}

// Rejection is one refused record of a message.
type Rejection struct {
	Field string `json:"field"`
	Error string `json:"error"`
}

// rejections lists the first maxListedRejections refused records (a 4 MiB
// body of empty records holds over a million; the record kept in the ledger
// counts them all).
func rejections(pes []*event.ParseError) []Rejection {
	pes = pes[:min(len(pes), maxListedRejections)]
	out := make([]Rejection, len(pes))
	for i, pe := range pes {
		out[i] = Rejection{Field: pe.Field, Error: pe.Error()}
	}
	return out
}

// Webhook returns the handler for POST /v1/events: it accepts every body the
// event package parses (MinIO's webhook target posts here as-is; S3 Records,
// SNS, EventBridge) and answers 200 only after the events are durable in the
// ledger.
//
// A message it cannot accept (not JSON, an unknown format or event type, a
// record breaking the limits, a body over MaxBody) is answered 200 too, once
// it is durable as a dead letter with its reason (see RefusedBucket; Refused
// and Kept in the answer): a sender with a retry queue (MinIO's queue_dir,
// SNS, an EventBridge API destination) retries any other answer for ever, and
// MinIO's queue holds every later event of the bucket behind it.
//
// Refusals of how the sender is wired are answered 4xx: 401 missing or wrong
// token, 403 a request from a web page (an Origin header not in
// AllowedOrigins), 405 not a POST, 415 not JSON (Content-Type must be
// application/json or +json; SNS's text/plain with its
// x-amz-sns-message-type header), 421 a loopback webhook without a token
// asked for a non-loopback Host (DNS rebinding). These concern every message
// of the sender alike, not one message: no message gets past them until the
// configuration is fixed, and then the sender's retries deliver everything
// it queued, so nothing is lost by refusing (a 2xx would drop the events).
// They are logged at warn (rate-limited) and listed by Pipeline.Refusals.
// 400 answers a body that could not be read (the connection broke: the
// sender sees no answer and delivers again). 503: the ledger did not record
// (with Retry-After; the sender should retry). A refused request records
// nothing.
func (p *Pipeline) Webhook(o WebhookOptions) http.Handler {
	if o.MaxBody <= 0 {
		o.MaxBody = 4 << 20
	}
	if o.Source == "" {
		o.Source = "webhook"
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	var want [32]byte
	if o.Token != "" {
		want = sha256.Sum256([]byte(o.Token))
	}
	// refuse notes a refusal of the sender's wiring (answered already).
	refuse := func(reason string, status int, detail string) {
		p.reject(o.Source, reason, 1, refusalNote{answer: "answered " + strconv.Itoa(status), detail: detail})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			reply(w, http.StatusMethodNotAllowed, WebhookResponse{Error: "use POST"})
			refuse("method", http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": use POST")
			return
		}
		if reason, detail := browserGuard(o, w, r); reason != "" {
			status := map[string]int{"origin": http.StatusForbidden, "host": http.StatusMisdirectedRequest, "content_type": http.StatusUnsupportedMediaType}[reason]
			refuse(reason, status, detail)
			return
		}
		if o.Token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="cairn"`)
				reply(w, http.StatusUnauthorized, WebhookResponse{Error: "missing or wrong bearer token"})
				detail := "no bearer token"
				if ok {
					detail = "wrong bearer token"
				}
				refuse("unauthorized", http.StatusUnauthorized, detail+" (from "+r.RemoteAddr+"); set the sender's auth token to --webhook-token")
				return
			}
		}
		var evs []event.Event
		var rejected []*event.ParseError
		var kept *event.Event
		var perr error
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, o.MaxBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if !errors.As(err, &tooBig) {
				reply(w, http.StatusBadRequest, WebhookResponse{Error: "reading the body: " + err.Error()})
				return
			}
			ev := refusedEvent(RefusedTooLarge, fmt.Sprintf("the body is larger than the limit of %d bytes (WebhookOptions.MaxBody, cairn serve --max-body); its first bytes are kept", o.MaxBody), body, false)
			kept = &ev
		} else {
			evs, rejected, perr = event.ParseAll(body)
			if ev, ok := RefusedEvent(body, perr, rejected); ok {
				kept = &ev
			}
		}
		all := evs
		if kept != nil {
			all = append(slices.Clip(evs), *kept)
		}
		ctx, cancel := context.WithTimeout(r.Context(), o.Timeout)
		defer cancel()
		ds, err := p.Submit(ctx, o.Source, all)
		if err != nil {
			p.reject(o.Source, "unavailable", 1, refusalNote{answer: "answered 503 (the sender retries)", detail: err.Error()})
			w.Header().Set("Retry-After", "1")
			reply(w, http.StatusServiceUnavailable, WebhookResponse{Error: "the ledger did not record the events: " + err.Error()})
			return
		}
		resp := WebhookResponse{Decisions: ds, Rejected: rejections(rejected)}
		if kept != nil {
			resp.Decisions, resp.Kept = ds[:len(evs)], &ds[len(evs)]
			resp.Refused = kept.RequestID
			if len(rejected) > 0 {
				resp.Field = rejected[0].Field
			}
			var pe *event.ParseError
			if resp.Field == "" && errors.As(perr, &pe) {
				resp.Field = pe.Field
			}
		}
		reply(w, http.StatusOK, resp)
	})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Mux returns the daemon's HTTP routes: POST /v1/events (the webhook), GET
// /healthz (the process is up), GET /readyz (the ledger answers and takes
// records: see Pipeline.Ready), and, if metrics is not nil, GET /metrics.
func (p *Pipeline) Mux(o WebhookOptions, metrics http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/v1/events", p.Webhook(o))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := p.Ready(ctx); err != nil {
			reply(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
			return
		}
		reply(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return mux
}
