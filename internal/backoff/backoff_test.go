package backoff

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestCeiling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		p       Policy
		attempt int
		want    time.Duration
	}{
		{"first", Policy{Base: time.Millisecond, Max: time.Second}, 0, time.Millisecond},
		{"doubles", Policy{Base: time.Millisecond, Max: time.Second}, 3, 8 * time.Millisecond},
		{"capped", Policy{Base: time.Millisecond, Max: time.Second}, 10, time.Second},
		{"huge attempt", Policy{Base: time.Millisecond, Max: time.Second}, math.MaxInt, time.Second},
		{"huge max", Policy{Base: time.Hour, Max: math.MaxInt64}, 200, math.MaxInt64},
		{"negative attempt", Policy{Base: time.Millisecond, Max: time.Second}, -5, time.Millisecond},
		{"base over max", Policy{Base: time.Minute, Max: time.Second}, 0, time.Second},
		{"defaults", Policy{}, 0, DefaultBase},
		{"defaults capped", Policy{}, 100, DefaultMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.p.Ceiling(tc.attempt); got != tc.want {
				t.Fatalf("Ceiling(%d) = %v, want %v", tc.attempt, got, tc.want)
			}
		})
	}
}

func TestDelayJitterBounds(t *testing.T) {
	t.Parallel()
	p := Policy{Base: 4 * time.Millisecond, Max: 100 * time.Millisecond}
	for attempt := range 8 {
		ceil := p.Ceiling(attempt)
		var low, high bool
		for range 2000 {
			d := p.Delay(attempt)
			if d < 0 || d > ceil {
				t.Fatalf("Delay(%d) = %v, outside [0, %v]", attempt, d, ceil)
			}
			low = low || d < ceil/4
			high = high || d > 3*ceil/4
		}
		if !low || !high {
			t.Fatalf("Delay(%d) does not spread over [0, %v] (some below a quarter: %v, some above three quarters: %v)", attempt, ceil, low, high)
		}
	}
}

func TestWaitHonoursCancellation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	start := time.Now()
	err := Policy{Base: time.Hour, Max: time.Hour}.Wait(ctx, 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Wait returned %v after cancellation", d)
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled ctx = %v", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(0) on a cancelled ctx = %v", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer dcancel()
	if err := Sleep(dctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sleep past the deadline = %v", err)
	}
}
