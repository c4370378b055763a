package sqlite

import (
	"context"

	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
)

// OpenWithLogLimits is Open with the intake log bounded by limits.
func OpenWithLogLimits(ctx context.Context, path string, opts *ledger.Options, limits sqlledger.LogLimits) (*ledger.Ledger, error) {
	b, err := open(ctx, path, opts, "FULL", limits)
	if err != nil {
		return nil, err
	}
	return ledger.New(b), nil
}

// Queued reports how many calls wait in l's group-commit queue.
func Queued(l *ledger.Ledger) int {
	n, _ := l.Backend().(*sqlledger.Backend).LogQueue()
	return n
}

// OpenBackendWithLogLimits opens the backend itself, with synchronous=NORMAL
// (durability is not what its callers test), the intake log bounded by
// limits.
func OpenBackendWithLogLimits(ctx context.Context, path string, opts *ledger.Options, limits sqlledger.LogLimits) (*sqlledger.Backend, error) {
	return open(ctx, path, opts, "NORMAL", limits)
}
