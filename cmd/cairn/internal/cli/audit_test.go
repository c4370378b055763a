package cli_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/ledger/sqlite"
	"github.com/cairn-s3/cairn/objstore"
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
	// A dry run reads a ledger and never creates one: make an empty one.
	if l, err := sqlite.Open(context.Background(), ledgerPath, nil); err != nil {
		t.Fatal(err)
	} else {
		l.Close()
	}
	// --grace 0 judges the objects just written; a dry run counts what the
	// real run resubmits.
	code, out, stderr := run(t, "audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "0", "--dry-run", "--json")
	var rep struct {
		Listed        int            `json:"listed"`
		Counts        map[string]int `json:"counts"`
		WouldResubmit int            `json:"would_resubmit"`
	}
	// A dry run resubmitted nothing: its JSON says what it would have.
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Listed != 2 || rep.Counts["missing"] != 2 || rep.WouldResubmit != 2 ||
		strings.Contains(out, `"resubmitted"`) {
		t.Fatalf("dry run: exit %d %s %s", code, out, stderr)
	}
	code, out, _ = run(t, "audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "0", "--dry-run")
	if code != 0 || !strings.Contains(out, "would resubmit (dry run) 2") {
		t.Fatalf("dry run: exit %d %s", code, out)
	}
	code, out, _ = run(t, "audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "0")
	if code != 0 || !strings.Contains(out, "resubmitted 2") {
		t.Fatalf("audit: exit %d %s", code, out)
	}
	// Objects within the grace are summarised, not listed row by row.
	code, out, _ = run(t, "audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "1h", "--dry-run")
	if code != 0 || !strings.Contains(out, "2 objects modified within the last 1h0m0s not judged yet") ||
		strings.Contains(out, "a/one.txt") {
		t.Fatalf("audit within the grace: exit %d\n%s", code, out)
	}
	if code, _, _ := run(t, "audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "-1s"); code != cli.ExitUsage {
		t.Fatalf("negative --grace: exit %d", code)
	}
	// The default grace (15m) skips them.
	code, out, _ = run(t, "audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Counts["too_young"] != 2 {
		t.Fatalf("default grace: exit %d %s", code, out)
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

// auditEnvScript logs the environment an exec handler gets.
const auditEnvScript = `#!/bin/sh
cat >/dev/null
printf '%s|%s|%s|%s|%s\n' "$CAIRN_KEY" "$CAIRN_ETAG" "$CAIRN_SEQUENCER" "$CAIRN_EVENT" "$CAIRN_EVENT_NAME" >> "$EFFECTS/runs.log"
`

// TestServeAuditResubmissionEnv: an object changed without its event after a
// real (sequenced) event reaches cairn serve's exec handler through the
// audit with an empty CAIRN_SEQUENCER — not the earlier event's, which a
// handler deduplicating by (key, sequencer) would drop — and the name
// cairn:Audit:Changed.
func TestServeAuditResubmissionEnv(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "0")
	if err := os.WriteFile(e.serveArgs[3], []byte(auditEnvScript), 0o755); err != nil { // --handler-exec SCRIPT
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := objstore.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.serveArgs = append(e.serveArgs, "--store", dir, "--bucket", "demo", "--audit-every", "200ms", "--audit-grace", "1ns")
	e.serve(t)
	runs := func() []string {
		data, _ := os.ReadFile(filepath.Join(e.effects, "runs.log"))
		return strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	waitRun := func(what string, ok func(f []string) bool) []string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			for _, line := range runs() {
				if f := strings.Split(line, "|"); len(f) == 5 && ok(f) {
					return f
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no handler run of %s in 30s; runs:\n%s", what, strings.Join(runs(), "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The real event of an earlier state.
	body := `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put","eventTime":"` +
		time.Now().Add(-time.Minute).UTC().Format(time.RFC3339) + `","s3":{"bucket":{"name":"demo"},"object":{"key":"k.txt","size":7,"eTag":"0123456789abcdef0123456789abcdef","sequencer":"00AA"}}}]}`
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/events", e.port), strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer e2e-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook: %s", resp.Status)
	}
	waitRun("the real event", func(f []string) bool { return f[0] == "k.txt" && f[2] != "" })
	// A write whose event is lost.
	info, err := s.PutBytes(context.Background(), "k.txt", []byte("changed"), nil)
	if err != nil {
		t.Fatal(err)
	}
	f := waitRun("the audit's resubmission", func(f []string) bool { return f[0] == "k.txt" && f[1] == info.ETag && f[3] == "created" })
	if f[2] != "" || f[4] != "cairn:Audit:Changed" {
		t.Fatalf("the handler got CAIRN_SEQUENCER=%q CAIRN_EVENT_NAME=%q for an audit resubmission; want empty and cairn:Audit:Changed", f[2], f[4])
	}
}

// cairn audit skips cairn's own objects (a probe's, a lock's, a journal's)
// as serve skips their events: resubmitted, they would run the user's
// handler. --process-own-objects judges them too.
func TestAuditSkipsOwnObjects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucket := filepath.Join(dir, "bucket")
	for _, k := range []string{"data/one.txt", "cairn-probe/verdict.json", "cairn-locks/job", "cairn-journal/x.json", "cairn-probe-x/user.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(bucket, k)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bucket, k), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ledgerPath := filepath.Join(dir, "ledger.db")
	if l, err := sqlite.Open(context.Background(), ledgerPath, nil); err != nil {
		t.Fatal(err)
	} else {
		l.Close()
	}
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, 2}, {[]string{"--process-own-objects"}, 5}} {
		args := append([]string{"audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "0", "--dry-run", "--json"}, tc.args...)
		code, out, stderr := run(t, args...)
		var rep struct {
			WouldResubmit int `json:"would_resubmit"` // a dry run
		}
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.WouldResubmit != tc.want {
			t.Fatalf("audit %v: exit %d, %s %s; want %d to resubmit", tc.args, code, out, stderr, tc.want)
		}
	}
}
