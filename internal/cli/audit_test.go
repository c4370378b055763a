package cli_test

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/cli"
)

func TestAuditCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucket := filepath.Join(dir, "bucket")
	if err := os.MkdirAll(filepath.Join(bucket, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a/one.txt", "a/two ü+.txt"} {
		if err := os.WriteFile(filepath.Join(bucket, k), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ledgerPath := filepath.Join(dir, "ledger.db")
	code, out, stderr := run(t, "audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "1ns", "--dry-run", "--json")
	var rep struct {
		Listed      int            `json:"listed"`
		Counts      map[string]int `json:"counts"`
		Resubmitted int            `json:"resubmitted"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Listed != 2 || rep.Counts["missing"] != 2 || rep.Resubmitted != 0 {
		t.Fatalf("dry run: exit %d %s %s", code, out, stderr)
	}
	code, out, _ = run(t, "audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "1ns")
	if code != 0 || !strings.Contains(out, "resubmitted 2") {
		t.Fatalf("audit: exit %d %s", code, out)
	}
	// The same objects from an S3 Inventory report.
	inv := filepath.Join(dir, "inv")
	if err := os.MkdirAll(inv, 0o755); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Create(filepath.Join(inv, "data.csv.gz"))
	zw := gzip.NewWriter(f)
	mod := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	_, _ = zw.Write([]byte(`"b","a/one.txt","3","` + mod + `","x1"` + "\n" + `"b","a/three.txt","5","` + mod + `","x3"` + "\n"))
	zw.Close()
	f.Close()
	man := `{"sourceBucket":"b","fileFormat":"CSV","fileSchema":"Bucket, Key, Size, LastModifiedDate, ETag","files":[{"key":"data.csv.gz"}]}`
	if err := os.WriteFile(filepath.Join(inv, "manifest.json"), []byte(man), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = run(t, "audit", "--inventory", filepath.Join(inv, "manifest.json"), "--ledger", ledgerPath, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Listed != 2 || rep.Counts["missing"] != 1 || rep.Counts["changed"] != 1 {
		t.Fatalf("inventory audit: exit %d %s %s", code, out, stderr)
	}
	if code, _, _ := run(t, "audit", "--ledger", ledgerPath); code != cli.ExitUsage {
		t.Fatalf("audit without --store or --inventory: exit %d", code)
	}
}
