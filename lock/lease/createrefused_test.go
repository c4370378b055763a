package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A lease the store refuses to create although it reads as absent
// (SeaweedFS, for a key that is also a folder; played by faulty, as no server
// the suite runs does it) is not "held by another holder": TryAcquire and
// Acquire fail with objstore.ErrCreateRefused, which says what happened. They
// used to report it held (Acquire waited for the whole deadline).
func TestLeaseCreateRefusedIsNotHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := objstore.New(faulty.New(mem.OpenBackend("lease-folder"), &faulty.Options{Quirks: faulty.Quirks{FolderRefusesCreate: true}}), nil)
	if _, err := s.PutBytes(ctx, "locks/deploy/child", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	m := lease.New(s, &lease.Options{TTL: time.Minute})
	_, err := m.TryAcquire(ctx, "locks/deploy")
	if !errors.Is(err, objstore.ErrCreateRefused) || errors.Is(err, lease.ErrNotAcquired) {
		t.Errorf("TryAcquire: %v, want ErrCreateRefused, not ErrNotAcquired", err)
	}
	// The deadline only bounds the old behaviour (waiting for a holder that
	// does not exist); it is not what the test checks.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = m.Acquire(wctx, "locks/deploy")
	if !errors.Is(err, objstore.ErrCreateRefused) || errors.Is(err, lease.ErrNotAcquired) {
		t.Errorf("Acquire: %v, want ErrCreateRefused, not ErrNotAcquired", err)
	}
}
