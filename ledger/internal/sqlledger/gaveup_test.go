package sqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/internal/sqlledger"
)

// A call taken into another caller's group returns at its own deadline even
// while the group hangs (here the other call's statements; in life a commit
// stuck on a full or slow disk), with an error that wraps its context's and
// says the transaction may still commit: a renewal taken into a group never
// holds its caller past the renewal's deadline.
func TestGroupCallReturnsAtItsDeadline(t *testing.T) {
	ctx := context.Background()
	lg, err := ledger.Open(ctx, "sqlite://"+filepath.ToSlash(filepath.Join(t.TempDir(), "ledger.db")), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	l := lg.Backend().(*sqlledger.Backend)
	// b lingers in the queue; the hanging call leads and takes b into its
	// group (b first).
	bctx, cancel := context.WithTimeout(ledger.WithLinger(ctx, 2*time.Second), 5*time.Second)
	defer cancel()
	bdone := make(chan error, 1)
	go func() { bdone <- l.InTx(bctx, "renew", func(*sql.Tx, time.Time) error { return nil }) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, _ := l.LogQueue(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b never queued")
		}
	}
	release, ran := make(chan struct{}), make(chan struct{})
	hdone := make(chan error, 1)
	go func() {
		hdone <- l.InTx(ctx, "record", func(*sql.Tx, time.Time) error { close(ran); <-release; return nil })
	}()
	defer func() {
		close(release)
		if err := <-hdone; err != nil {
			t.Errorf("the hanging call: %v", err)
		}
	}()
	<-ran
	if n, _ := l.LogQueue(); n != 0 {
		t.Fatalf("%d calls queued: b was not taken into the hanging group", n)
	}
	cancel() // b's deadline, while its group hangs
	select {
	case err := <-bdone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("b: %v, want an error that wraps its context's", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b waited for its group past its own deadline")
	}
}
