package objstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A network fault in the middle of a probe is a probe failure that says so,
// never ErrAmbiguous: the caller's conditional write was never sent (it used
// to come back as "outcome unknown (the write may have been applied)").
func TestProbeFaultIsNotAmbiguous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := mem.OpenBackend("probe-fault")
	b := faulty.New(inner, &faulty.Options{IgnoreConditions: true, Rule: func(op faulty.Op, key string) (faulty.Fault, time.Duration) {
		if op == faulty.OpPut && strings.HasSuffix(key, "/if-absent") {
			return faulty.LostResponse, 0
		}
		return faulty.None, 0
	}})
	s := objstore.New(b, nil)
	defer s.Close()
	_, err := s.PutBytes(ctx, "doc.json", []byte("{}"), &objstore.PutOptions{If: objstore.IfAbsent()})
	if err == nil {
		t.Fatal("a conditional put whose probe failed succeeded")
	}
	if errors.Is(err, objstore.ErrAmbiguous) {
		t.Errorf("the put was never sent, yet its error is ErrAmbiguous: %v", err)
	}
	for _, want := range []string{"probe of", "failed", "nothing is known about its conditions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := objstore.New(inner, nil).Head(ctx, "doc.json"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("doc.json after the failed probe: %v, want not found", err)
	}
	_, err = objstore.Probe(ctx, s, nil)
	if err == nil || errors.Is(err, objstore.ErrAmbiguous) || !strings.Contains(err.Error(), "nothing is known about its conditions") {
		t.Errorf("Probe with a lost response: %v, want a probe failure that is not ErrAmbiguous", err)
	}
}
