package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/demo"
)

// A failed run names the invariants it broke and how often (the report said
// "INVARIANT FAILED (see above)"), and the keys served wrong, escaped.
func TestDemoReportNamesBrokenInvariants(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out, stderr: &out}
	r := demo.Report{Writes: 10, Keys: 5}
	r.Cairn.DoubleProcessed, r.Cairn.Wrong, r.Cairn.WrongKeys = 2, 1, []string{"k\x1b[2J"}
	printDemo(e, r, "/tmp/b", "/tmp/l.db")
	got := out.String()
	for _, want := range []string{
		"INVARIANT FAILED: every change processed once (2 extra handler runs",
		"every object served as the bucket has it at the end (1 served wrong): \"k\\x1b[2J\"",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report does not say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "see above") || strings.Contains(got, "stale overwrites (") || strings.Contains(got, "\x1b") {
		t.Errorf("report names an invariant that held, points elsewhere, or shows raw control characters:\n%s", got)
	}
}
