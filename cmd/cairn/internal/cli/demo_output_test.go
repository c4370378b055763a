package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The demo says that the bucket and ledger it printed are temporary (they
// were deleted on exit without a word), and --dir keeps them; the line
// under the table says what "objects missed" and "changes found by the
// audit" count.
func TestDemoSaysWhatIsTemporaryAndWhatTheCountsAre(t *testing.T) {
	t.Parallel()
	args := []string{"demo", "--writes", "300", "--keys", "60", "--seed", "3", "--lost", "0.05"}
	code, out, stderr := runBin(t, t.TempDir(), nil, args...)
	if code != 0 {
		t.Fatalf("demo: exit %d: %s", code, stderr)
	}
	m := regexp.MustCompile(`in (?:file://)?(/\S*/bucket)[?;]`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo names no bucket directory:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("the temporary bucket %s is still there: %v", m[1], err)
	}
	for _, want := range []string{"temporary: deleted now that the demo ends (--dir DIR keeps them)",
		"missed: of the", "found: objects whose state in the bucket differs from cairn's ledger"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output does not say %q:\n%s", want, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "kept")
	code, out, stderr = runBin(t, t.TempDir(), nil, append(args, "--dir", dir)...)
	if code != 0 {
		t.Fatalf("demo --dir: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "kept in "+dir) || strings.Contains(out, "temporary") {
		t.Errorf("demo --dir does not say it kept everything in %s:\n%s", dir, out)
	}
	for _, f := range []string{"bucket", "ledger.db", "serving.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("demo --dir did not keep %s: %v", f, err)
		}
	}
}

// "objects missed" (naive) and "changes found by the audit" (cairn) count
// different things; the report accounts for the difference exactly.
func TestDemoMissedAndFoundAccounted(t *testing.T) {
	t.Parallel()
	for _, seed := range []string{"3", "7"} {
		code, out, stderr := run(t, "demo", "--json", "--writes", "600", "--keys", "120", "--seed", seed, "--lost", "0.05")
		if code != 0 {
			t.Fatalf("demo: exit %d: %s", code, stderr)
		}
		var r struct {
			NewestLost   *int `json:"keys_newest_lost"`
			NoChange     *int `json:"newest_lost_no_change"`
			RightByLuck  *int `json:"naive_right_by_chance"`
			Naive, Cairn struct {
				Missed int `json:"awaiting_audit"`
				Found  int `json:"found_by_audit"`
			}
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		if r.NewestLost == nil || r.NoChange == nil || r.RightByLuck == nil {
			t.Fatalf("seed %s: the report does not say how many keys lost their newest event, how many of those changed nothing, how many the naive consumer got right by chance: %s", seed, out)
		}
		if *r.NewestLost == 0 || r.Naive.Missed != *r.NewestLost-*r.RightByLuck || r.Cairn.Found != *r.NewestLost-*r.NoChange {
			t.Errorf("seed %s: %d keys lost their newest event (%d changed nothing, %d naive right by chance), but naive missed %d and the audit found %d",
				seed, *r.NewestLost, *r.NoChange, *r.RightByLuck, r.Naive.Missed, r.Cairn.Found)
		}
	}
}

// demo --crash: the report, read back from the fenced sink, says every
// effect was written exactly once and the stuck handler's late write was
// refused.
func TestDemoCrashEffectsExactlyOnce(t *testing.T) {
	t.Parallel()
	code, out, stderr := run(t, "demo", "--crash", "--writes", "300", "--keys", "30", "--seed", "5")
	if code != 0 {
		t.Fatalf("demo --crash: exit %d: %s\n%s", code, stderr, out)
	}
	m := regexp.MustCompile(`effects \(read back from the sink\): (\d+) written exactly once, 1 stale write refused\.\n`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" {
		t.Errorf("demo --crash does not say its effects were written exactly once and one late write refused:\n%s", out)
	}
}
