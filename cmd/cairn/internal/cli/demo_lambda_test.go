package cli_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/lambdatest"
)

// cairn demo --lambda, end to end: the cairn binary runs the demo, whose
// sandboxes (the real Runtime Interface Emulator) run the same binary as
// cairn lambda; every check passes, and one sandbox was killed mid-handler by
// its timeout and its late write refused.
func TestDemoLambdaEndToEnd(t *testing.T) {
	t.Parallel()
	rie := lambdatest.RIE(t)
	bin := buildCairn(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--lambda", "--rie", rie, "--writes", "400", "--keys", "80", "--seed", "7", "--dir", dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cairn demo --lambda: %v\n%s", err, out)
	}
	for _, want := range []string{
		"cairn: every change processed once, in order per key; nothing stale, nothing double, nothing missed.",
		"1 killed mid-handler by their timeout",
		"1 stale write refused",
		"invocations (",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the report does not say %q:\n%s", want, out)
		}
	}
}
