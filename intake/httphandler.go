package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/ledger"
)

// HTTPHandler POSTs each claim's Payload as JSON to URL, with the fencing
// token in the Cairn-Fencing-Token header and the attempt in Cairn-Attempt.
//
// cairn cannot stop an endpoint once it has the request, so it tells it when
// to stop itself: the claim's lease deadline as the holder can prove it when
// the request is sent (LeaseDeadline), in the Cairn-Lease-Deadline header
// (RFC 3339, UTC, milliseconds: 2026-01-02T15:04:05.123Z) and the body's
// "lease_deadline" field. The lease is renewed while the request runs, but the
// endpoint is not told of renewals: an endpoint that has not answered by that
// moment may run beside the key's next holder, unless it stops, and the
// fencing token is then its only defence. Keep requests shorter than the
// lease, or make the endpoint stop at the deadline.
// 2xx: processed (the first 4 KiB of the body are the result). 429 and 5xx:
// retry later. Other statuses: a permanent failure. Transport errors: retry.
// An audit's resubmission has no "sequencer" in the payload's event, format
// "audit" and a name beginning "cairn:Audit:" (see ExecHandler).
type HTTPHandler struct {
	URL string
	// Client; nil uses a client without a timeout (the pipeline's Timeout and
	// lease bound the call).
	Client *http.Client
	// Header is added to every request (e.g. Authorization).
	Header http.Header
}

// leaseDeadlineFormat is RFC 3339 with milliseconds.
const leaseDeadlineFormat = "2006-01-02T15:04:05.000Z07:00"

// httpPayload is the body an HTTPHandler posts: the Payload and the lease's
// deadline.
type httpPayload struct {
	Payload
	LeaseDeadline string `json:"lease_deadline,omitempty"`
}

// Handle posts w.
func (h *HTTPHandler) Handle(ctx context.Context, w Work) (string, error) {
	pl := httpPayload{Payload: w.Payload()}
	deadline := ""
	if d, ok := LeaseDeadline(ctx); ok {
		// The wall clock's reading of the monotonic deadline.
		deadline = time.Now().Add(time.Until(d)).UTC().Format(leaseDeadlineFormat)
		pl.LeaseDeadline = deadline
	}
	body, err := json.Marshal(pl)
	if err != nil {
		return "", Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return "", Permanent(err)
	}
	for k, vs := range h.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Cairn-Fencing-Token", strconv.FormatInt(w.Token, 10))
	req.Header.Set("Cairn-Attempt", strconv.Itoa(w.Attempt))
	if deadline != "" {
		req.Header.Set("Cairn-Lease-Deadline", deadline)
	}
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("handler %s: %w", h.URL, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, ledger.MaxText)) // what the ledger keeps of a result
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))    // reuse the connection
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return string(out), nil
	case s == http.StatusTooManyRequests || s >= 500:
		return "", fmt.Errorf("handler %s: %s: %s", h.URL, resp.Status, strings.TrimSpace(string(out)))
	default:
		return "", Permanent(fmt.Errorf("handler %s: %s: %s", h.URL, resp.Status, strings.TrimSpace(string(out))))
	}
}
