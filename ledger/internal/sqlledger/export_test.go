package sqlledger

import (
	"context"
	"database/sql"
	"time"
)

// InTx is inTx, for the external tests.
func (l *Backend) InTx(ctx context.Context, op string, fn func(tx *sql.Tx, now time.Time) error) error {
	return l.inTx(ctx, op, fn)
}
