package dynamoledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/dynamoledger"
)

// TestSkewedClocks: two workers whose clocks are ten minutes apart share a
// ledger. Neither takes over the other's running lease (each judged the
// other's lease by its own clock: the one ahead took every claim of the one
// behind at once, and the one behind wrote leases already expired for
// everyone else), and the leases both write end a lease from the endpoint's
// time, not from either worker's.
func TestSkewedClocks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := newTable(t)
	skewed := func(d time.Duration) *ledger.Ledger {
		l, err := dynamoledger.OpenWithLocalClock(ctx, url, nil, func() time.Time { return time.Now().Add(d) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	behind, ahead := skewed(-5*time.Minute), skewed(5*time.Minute)
	const lease = time.Minute
	for _, tc := range []struct {
		name          string
		holder, thief *ledger.Ledger
	}{{"behind holds", behind, ahead}, {"ahead holds", ahead, behind}} {
		key := tc.name
		if _, err := tc.holder.Record(ctx, "s", []event.Event{{Bucket: "b", Key: key, Sequencer: "01", Kind: event.Created, ETag: "e"}}); err != nil {
			t.Fatal(err)
		}
		cs, err := tc.holder.Claim(ctx, 1, lease)
		if err != nil || len(cs) != 1 {
			t.Fatalf("%s: claim %d, %v", tc.name, len(cs), err)
		}
		// The endpoint (dynalite, here) runs on this machine's clock.
		if real := time.Now(); !cs[0].LeaseUntil.After(real) || cs[0].LeaseUntil.After(real.Add(lease+30*time.Second)) {
			t.Errorf("%s: the lease ends at %s, %s from now; want about %s from now", tc.name, cs[0].LeaseUntil, cs[0].LeaseUntil.Sub(real), lease)
		}
		if stolen, err := tc.thief.Claim(ctx, 10, lease); err != nil || len(stolen) != 0 {
			t.Fatalf("%s: the other worker claimed %d records (%v) of a lease running for another minute", tc.name, len(stolen), err)
		}
		c, err := tc.holder.Renew(ctx, cs[0], lease)
		if err != nil {
			t.Fatalf("%s: renew: %v", tc.name, err)
		}
		if err := tc.holder.Complete(ctx, c, "done"); err != nil {
			t.Fatalf("%s: complete: %v", tc.name, err)
		}
	}
}
