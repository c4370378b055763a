// Package linger carries in a context how long a call may wait to share a
// write with an urgent one: the one mark that ledger.WithLinger and
// docstore.WithLinger set (so a ledger call marked not urgent reaches the
// document writes it makes as such).
package linger

import (
	"context"
	"time"
)

type key struct{}

// With marks the calls made with the returned context as able to wait up to
// d; d ≤ 0 marks nothing.
func With(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, key{}, d)
}

// Of is how long a call made with ctx may wait: the mark, or 0 (urgent)
// when there is none or ctx's deadline is less than twice it away (held
// that long, the call could run out of time while nothing else came).
func Of(ctx context.Context) time.Duration {
	d, _ := ctx.Value(key{}).(time.Duration)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*d {
		return 0
	}
	return d
}
