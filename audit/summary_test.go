package audit_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// Every audit leaves its summary in the ledger: who ran it, whether it was
// a dry run, what it found (at most SummaryFindings findings, with how many
// more), and, when it stopped early, why (issue 38).
func TestSummaryInTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mem.Open()
	l := testledger.New(t, nil)
	for i := range audit.SummaryFindings + 5 {
		if _, err := s.PutBytes(ctx, fmt.Sprintf("k%03d", i), []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if sum, err := audit.LastSummary(ctx, l); err != nil || sum != nil {
		t.Fatalf("before any audit: %+v %v", sum, err)
	}
	host, _ := os.Hostname()
	if _, err := audit.Run(ctx, s, l, "b", &audit.Options{Grace: 0, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	sum, err := audit.LastSummary(ctx, l)
	if err != nil || sum == nil || sum.By != fmt.Sprintf("%s/%d", host, os.Getpid()) || !sum.DryRun || sum.Listed != 25 || sum.Resubmitted != 25 ||
		len(sum.Findings) != audit.SummaryFindings || sum.MoreFindings != 5 || sum.Error != "" || sum.Bucket != "b" {
		t.Fatalf("dry run's summary: %+v %v", sum, err)
	}
	// Stopped early: recorded all the same, with why.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := audit.Run(stopped, s, l, "b", &audit.Options{Grace: 0, By: "ops-laptop/1"}); err == nil {
		t.Fatal("an audit with its context ended succeeded")
	}
	sum, err = audit.LastSummary(ctx, l)
	if err != nil || sum == nil || sum.By != "ops-laptop/1" || sum.DryRun || !strings.Contains(sum.Error, "context canceled") {
		t.Fatalf("a stopped audit's summary: %+v %v", sum, err)
	}
}
