package ledger

import (
	"context"
	"time"

	"github.com/cairn-s3/cairn/internal/linger"
)

// WithLinger returns a context that marks the ledger calls made with it as
// not urgent: their caller can wait up to d longer for the answer. A ledger
// that commits concurrent calls in one transaction (SQLite's group commit)
// then holds such a call, while its writer is idle, until another call
// arrives that is urgent, and commits the two together, or until d has
// passed: a stream of completions rides in the transactions of a stream of
// Records instead of taking as many of its own. The object-store ledger does
// the same with each shard's writes (docstore.WithLinger). A call whose
// context's deadline is less than 2d away is not held (it is urgent).
// PostgreSQL ignores it; d ≤ 0 marks nothing.
//
// The daemon's pipeline marks its batches of completions so: a handler's
// slot is free before its outcome is recorded, and nothing waits for it but
// the metrics.
func WithLinger(ctx context.Context, d time.Duration) context.Context {
	return linger.With(ctx, d)
}

// Linger reports how long a call made with ctx may wait to be committed with
// another (WithLinger), 0 if it is urgent (unmarked, or its deadline is less
// than twice the linger away). For backends.
func Linger(ctx context.Context) time.Duration {
	return linger.Of(ctx)
}
