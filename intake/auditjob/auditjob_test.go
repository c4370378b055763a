package auditjob_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/intake/auditjob"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// The daemon's audits are signed "serve host/pid" in the ledger's summary,
// so the status page tells them from a cairn audit run by hand.
func TestJobSignsItsSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	l := testledger.New(t, nil)
	if _, err := s.PutBytes(ctx, "k", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	job := auditjob.New(s, l, "b", time.Hour, &auditjob.Options{Audit: &audit.Options{Grace: 0}})
	if err := job.Run(ctx); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	sum, err := audit.LastSummary(ctx, l)
	if want := fmt.Sprintf("serve %s/%d", host, os.Getpid()); err != nil || sum == nil || sum.By != want || sum.Listed != 1 {
		t.Fatalf("summary %+v %v, want by %q", sum, err, want)
	}
}
