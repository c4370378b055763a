package dynamoledger

import (
	"fmt"
	"testing"
	"time"
)

// TestServerClockEstimate: the estimate keeps a clock in sync with the
// server exactly as it is, corrects one minutes off to within the Date
// allowance of the server, never goes back by a narrowing, and follows a
// stepped clock.
func TestServerClockEstimate(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, skew := range []time.Duration{0, 300 * time.Second, -300 * time.Second, 1700 * time.Millisecond} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			t.Parallel()
			real := base
			c := &serverClock{local: func() time.Time { return real.Add(skew) }}
			var prev time.Time
			for i := range 200 {
				// A request of 3 ms, stamped in the middle, at a new point
				// of the second each time (37 ms apart).
				sent := real.Add(skew)
				stamp := real.Add(1500 * time.Microsecond)
				real = real.Add(3 * time.Millisecond)
				c.observe(sent, real.Add(skew), stamp.Truncate(time.Second))
				now := c.now()
				if now.Before(prev) {
					t.Fatalf("answer %d: the time went back from %s to %s", i, prev, now)
				}
				prev = now
				if off := now.Sub(real); skew == 0 && off != 0 {
					t.Fatalf("answer %d: a clock in sync is corrected by %s", i, off)
				} else if off < -10*time.Millisecond || off > time.Second+dateLag {
					t.Fatalf("answer %d: %s off the server's time", i, off)
				}
				real = real.Add(34 * time.Millisecond)
			}
			// A clock behind the server's is corrected to within the
			// spread of the round trip; one ahead, within the allowance for
			// a late Date too.
			if off := c.now().Sub(real); skew < 0 && (off < -5*time.Millisecond || off > 5*time.Millisecond) || skew > 0 && off > dateLag+5*time.Millisecond {
				t.Errorf("after 200 answers: %s off the server's time", off)
			}
		})
	}
	t.Run("stepped", func(t *testing.T) {
		t.Parallel()
		real, skew := base, time.Duration(0)
		c := &serverClock{local: func() time.Time { return real.Add(skew) }}
		c.observe(real, real.Add(time.Millisecond), real.Truncate(time.Second))
		skew = -time.Hour // the local clock is stepped back an hour
		real = real.Add(time.Second)
		c.observe(real.Add(skew), real.Add(skew+time.Millisecond), real.Truncate(time.Second))
		if off := c.now().Sub(real); off < -5*time.Millisecond || off > time.Second+dateLag {
			t.Errorf("after a step of the local clock: %s off the server's time", off)
		}
	})
}
