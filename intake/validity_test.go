package intake

import (
	"testing"
	"time"
)

// TestValidityEndAfterDeadline: a handler that returns after its deadline
// (killed by the watchdog at it, typically) has lost its lease, even when
// this process's timer has not fired yet. The validity here has no timer at
// all, which is the race lost every time.
func TestValidityEndAfterDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		until   time.Duration // from now
		expired bool
	}{
		{"passed", -time.Millisecond, true},
		{"long passed", -time.Hour, true},
		{"ahead", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := &validity{lease: MinLease, expire: func(error) {}, until: time.Now().Add(tc.until), subs: map[int]func(time.Time){}}
			if _, expired := v.end(); expired != tc.expired {
				t.Fatalf("end() expired = %v, want %v", expired, tc.expired)
			}
		})
	}
}

// TestLeaseMargin: the margin is a twentieth of the lease but never less
// than MinLeaseMargin, and MinLease leaves a handler most of its lease.
func TestLeaseMargin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ lease, want time.Duration }{
		{MinLease, MinLeaseMargin},
		{5 * time.Second, MinLeaseMargin},
		{30 * time.Second, 1500 * time.Millisecond},
	} {
		if got := leaseMargin(tc.lease); got != tc.want {
			t.Errorf("leaseMargin(%v) = %v, want %v", tc.lease, got, tc.want)
		}
	}
	if MinLease < 4*MinLeaseMargin {
		t.Errorf("MinLease %v leaves less than three quarters of the lease", MinLease)
	}
}
