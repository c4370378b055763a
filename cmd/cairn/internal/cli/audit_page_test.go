package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/intake/web"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
)

// A `cairn audit` run from the command line shows on the status page of any
// process using the same ledger, with when, who, whether it was a dry run
// and what it found (issue 38: only serve's own audit job showed).
func TestCLIAuditShowsOnTheStatusPage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucket := filepath.Join(dir, "bucket")
	if err := os.MkdirAll(filepath.Join(bucket, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a/one.txt", "a/DEAD\u202eRTL.txt"} {
		if err := os.WriteFile(filepath.Join(bucket, k), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ledgerPath := filepath.Join(dir, "ledger.db")
	page, err := sqlite.Open(context.Background(), ledgerPath, nil) // the page's own handle, as serve's
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	srv := httptest.NewServer(web.Handler(page, nil))
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if p := get("/"); !strings.Contains(p, "No audit has run against this ledger") {
		t.Fatal("the page shows an audit before any ran")
	}
	host, _ := os.Hostname()
	me := fmt.Sprintf("%s/%d", host, os.Getpid())
	for _, dry := range []bool{true, false} {
		args := []string{"audit", "--store", bucket, "--bucket", "b", "--ledger", ledgerPath, "--grace", "0"}
		if dry {
			args = append(args, "--dry-run")
		}
		if code, out, stderr := run(t, args...); code != 0 {
			t.Fatalf("audit: exit %d %s %s", code, out, stderr)
		}
		var st struct {
			LastAudit struct {
				By          string         `json:"by"`
				DryRun      bool           `json:"dry_run"`
				Listed      int            `json:"listed"`
				Resubmitted int            `json:"resubmitted"`
				Counts      map[string]int `json:"counts"`
				Findings    []struct{ Key, Class string }
			} `json:"last_audit"`
		}
		body := get("/api/v1/status")
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		a := st.LastAudit
		if a.By != me || a.DryRun != dry || a.Listed != 2 || a.Resubmitted != 2 || a.Counts["missing"] != 2 || len(a.Findings) != 2 {
			t.Fatalf("dry=%v: last_audit %+v, want by %s, 2 listed, 2 missing resubmitted", dry, a, me)
		}
		p := get("/")
		audit := p[strings.Index(p, `<section id="audit">`):]
		if !strings.Contains(audit, `by <span id="audit-by"><span class="v">`+me+`</span>`) || strings.Contains(audit, "dry run") != dry ||
			!strings.Contains(audit, "2 objects listed") || !strings.Contains(audit, `a/DEAD\u202eRTL.txt`) || strings.Contains(audit, "DEAD\u202eRTL") {
			t.Fatalf("dry=%v: the page's audit section does not show it (escaped): %s", dry, audit[:min(len(audit), 2000)])
		}
	}
	if n, err := page.Counts(context.Background()); err != nil || n[ledger.Pending] != 2 {
		t.Fatalf("after the real audit: %v %v, want its 2 resubmissions pending", n, err)
	}
}
