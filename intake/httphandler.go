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

	"github.com/cairn-s3/cairn/ledger"
)

// HTTPHandler POSTs each claim's Payload as JSON to URL, with the fencing
// token in the Cairn-Fencing-Token header and the attempt in Cairn-Attempt.
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

// Handle posts w.
func (h *HTTPHandler) Handle(ctx context.Context, w Work) (string, error) {
	body, err := json.Marshal(w.Payload())
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
