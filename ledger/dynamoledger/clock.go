package dynamoledger

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Lease expiry, and every time the ledger stores, is judged by the
// endpoint's clock, never by comparing the clocks of the workers: a worker
// whose clock is minutes off neither takes over a lease that is still
// running nor writes leases that others take for expired (PostgreSQL's
// ledger reads the database server's clock for the same reason). DynamoDB
// has no call that returns its time, but every answer carries a Date header
// (whole seconds) stamped by the server while it handled the request. A
// request sent at local time s and answered at r, dated D, tells that the
// server's clock minus the local one lay in [D - r, D + 1s + lag - s] at
// the time, where lag allows for a server that stamps a Date up to a second
// old (Node's HTTP server, dynalite's, caches it and renews it on a timer
// that runs late under load). serverClock keeps the intersection of these
// bounds over all answers, which narrows as answers fall at different
// points of a second, and corrects the local clock by the least the bounds
// allow: not at all when the local clock is within them (machines in sync,
// or a server on this machine, keep exactly their own time), else to the
// nearer bound, so that workers however far apart end up within about the
// allowance of each other and of the server (a second here; a lease is tens
// of seconds). The bounds widen by 100 ppm of the time since the last
// answer (the clocks' rates differ), and an answer outside them (a clock
// was stepped) starts them again from that answer alone. Until the first
// answer (setUp makes two), and against an endpoint that sends no Date, the
// local clock is used as is. The time given never goes back by less than
// the bounds' first width (a narrowing), so work just recorded stays due.
type serverClock struct {
	local func() time.Time

	mu     sync.Mutex
	known  bool
	lo, hi int64     // bounds of server minus local, ns
	last   int64     // local time of the last answer, ns
	given  time.Time // the latest time now returned
}

// driftRatio is how far apart two clocks' rates may be, as 1 in
// driftRatio: 100 ppm (quartz oscillators are within tens of ppm, and NTP
// disciplines them).
const driftRatio = 10_000

// dateLag is how old a Date the server may stamp on an answer.
const dateLag = time.Second

// observe takes an answer dated date, to a request sent at sent and
// answered at recv (local clock).
func (c *serverClock) observe(sent, recv, date time.Time) {
	lo := date.UnixNano() - recv.UnixNano()
	hi := date.UnixNano() + int64(time.Second+dateLag) - sent.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known {
		since := max(recv.UnixNano()-c.last, c.last-recv.UnixNano())
		widen := since / driftRatio
		if l, h := max(lo, c.lo-widen), min(hi, c.hi+widen); l <= h {
			lo, hi = l, h
		}
	}
	c.known, c.lo, c.hi, c.last = true, lo, hi, recv.UnixNano()
}

// now is the server's time as estimated, on the local clock.
func (c *serverClock) now() time.Time {
	t := c.local()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known {
		t = t.Add(time.Duration(min(max(0, c.lo), c.hi)))
	}
	if t.Before(c.given) && c.given.Sub(t) < maxHold {
		// The bounds narrowed towards the local clock: hold the time given
		// rather than go back (work recorded a moment ago stays due).
		return c.given
	}
	c.given = t
	return t
}

// maxHold is how far back a narrowing of the bounds can move the estimate
// (their first width); a clock stepped back further is followed at once.
const maxHold = 2*time.Second + dateLag

// middleware times every HTTP attempt and gives its answer's Date to the
// clock: it runs last in the deserialize step, around the round trip itself
// (after the retryer, so each attempt is timed alone).
func (c *serverClock) middleware(st *middleware.Stack) error {
	return st.Deserialize.Add(middleware.DeserializeMiddlewareFunc("cairnServerClock",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			sent := c.local()
			out, md, err := next.HandleDeserialize(ctx, in)
			recv := c.local()
			if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp != nil {
				if date, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
					c.observe(sent, recv, date)
				}
			}
			return out, md, err
		}), middleware.After)
}
